//! `osmium-bench load` over real sockets against genuine memcached (and
//! osmium when `target/release/osmium` has been built): the meta protocol,
//! and the other load modes of issue 5. Every server is started here on a
//! free loopback port and killed by PID when the test ends. Nothing is
//! timed: only what the servers answered is asserted.

use crate::common;
use common::{bench, memcached_bin};
use osmium_test_harness::{Osmium, Running};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `binary` (memcached or osmium) on a free loopback port with `extra`
/// (the harness's builder: `-l 127.0.0.1 -p PORT -U 0`, `-u root` as
/// root), once it listens; killed by PID when dropped.
fn start(binary: &Path, extra: &[&str]) -> Running {
    Osmium::new().bin(binary).args(extra).start()
}

/// `127.0.0.1:PORT` of `server`.
fn address(server: &Running) -> String {
    server.addr().to_string()
}

/// Genuine memcached (`common::memcached_bin`: MEMCACHED_BIN, else the
/// oracle; else a SKIP line), and osmium when it has been built (else a
/// SKIP line); each with its name.
fn cache_servers() -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    if let Some(memcached) = memcached_bin() {
        out.push(("memcached", memcached));
    }
    let osmium = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    if osmium.is_file() {
        out.push(("osmium", osmium));
    } else {
        eprintln!("SKIP osmium: build it first with `cargo build --release`");
    }
    out
}

/// The number after `label ` in a single-server `load` line.
fn figure(text: &str, label: &str) -> f64 {
    text.split(&format!("{label} "))
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in {text:?}"))
}

/// `load --addr` on `server` with a short run (0.5 s, 2 connections) and
/// `extra` options (`--warmup 0.2` unless they give one).
fn load(server: &Running, extra: &[&str]) -> String {
    let (addr, pid) = (address(server), server.pid().to_string());
    let mut args = vec!["load", "--addr", &addr, "--pid", &pid];
    args.extend(["--duration", "0.5", "--conns", "2"]);
    if !extra.contains(&"--warmup") {
        args.extend(["--warmup", "0.2"]);
    }
    args.extend(extra);
    bench(&args)
}

#[test]
fn meta_protocol_gets_and_sets_parse_on_real_servers() {
    for (name, binary) in cache_servers() {
        let server = start(&binary, &[]);
        // Preloaded: every mg hits (VA + data), pipelined 8 deep.
        let text = load(
            &server,
            &["--protocol", "meta", "--depth", "8", "--keys", "1000"],
        );
        assert_eq!(figure(&text, "misses"), 0.0, "{name}: {text}");
        assert!(figure(&text, "of") > 0.0, "{name}: {text}");
        // Half sets (ms, HD) over keys never stored: misses (EN) too.
        let text = load(
            &server,
            &[
                "--protocol",
                "meta",
                "--depth",
                "8",
                "--keys",
                "100000",
                "--get-ratio",
                "0.5",
                "--preload",
                "false",
            ],
        );
        assert!(figure(&text, "misses") > 0.0, "{name}: {text}");
    }
}

#[test]
fn cache_aside_fills_every_missed_key() {
    // 200 keys, an empty cache, no warm-up: every key misses the first
    // time a connection asks for it and is set right after, so it misses
    // at most once per connection (2) and every miss is followed by a fill.
    for (name, binary) in cache_servers() {
        let server = start(&binary, &[]);
        // A key size per protocol: each run starts from keys never stored.
        for (protocol, key_size) in [("text", "12"), ("meta", "13"), ("binary", "14")] {
            let text = load(
                &server,
                &[
                    "--cache-aside",
                    "--keys",
                    "200",
                    "--warmup",
                    "0",
                    "--protocol",
                    protocol,
                    "--key-size",
                    key_size,
                ],
            );
            let (misses, gets) = (figure(&text, "misses"), figure(&text, "of"));
            assert!((1.0..=400.0).contains(&misses), "{name} {protocol}: {text}");
            assert!(gets > misses, "{name} {protocol}: {text}");
            assert!(figure(&text, "fills") >= 1.0, "{name} {protocol}: {text}");
            let ratio = figure(&text, "ratio");
            assert!(ratio > 0.0 && ratio < 1.0, "{name} {protocol}: {text}");
        }
    }
}

#[test]
fn value_size_sweep_runs_every_server_per_size() {
    // 64 B and 1 MiB values: --vs must start memcached and osmium with
    // -I 2m for the second, or the preload is refused and gets miss.
    let cache = cache_servers();
    let mut servers = vec!["floor"];
    servers.extend(cache.iter().map(|(name, _)| *name));
    let list = servers.join(",");
    let mut args = vec![
        "load",
        "--vs",
        "--servers",
        &list,
        "--threads",
        "1",
        "--value-sizes",
        "64,1048576",
        "--memory",
        "64",
        "--keys",
        "1000",
        "--rounds",
        "1",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--conns",
        "2",
        "--json",
    ];
    for (name, path) in &cache {
        args.extend([
            if *name == "osmium" {
                "--osmium"
            } else {
                "--memcached"
            },
            path.to_str().unwrap(),
        ]);
    }
    let text = bench(&args);
    let rows: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2 * servers.len(), "{text}");
    for (i, row) in rows.iter().enumerate() {
        let size = if i < servers.len() { 64 } else { 1 << 20 };
        assert_eq!(row["value_size"], size, "{row}");
        assert_eq!(row["server"], servers[i % servers.len()], "{row}");
        assert!(row["gets"].as_u64().unwrap() > 0, "{row}");
        assert_eq!(row["misses"], 0, "{row}");
        assert!(row["keys"].as_u64().unwrap() <= 1000, "{row}");
    }
}

/// Runs `python3 -c script args...`; None (with a SKIP line) when pylibmc
/// cannot be imported.
fn pylibmc(script: &str, args: &[String]) -> Option<String> {
    let probe = Command::new("python3")
        .args(["-c", "import pylibmc"])
        .output();
    if !matches!(&probe, Ok(out) if out.status.success()) {
        eprintln!("SKIP: python3 with pylibmc is not installed (scripts/test-all.sh installs it)");
        return None;
    }
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// The value stored under `key` on the server at `addr`, if any (`get`).
fn get(addr: &str, key: &str) -> Option<Vec<u8>> {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    if line == "END\r\n" {
        return None;
    }
    let len: usize = line.trim_end().rsplit(' ').next().unwrap().parse().unwrap();
    let mut data = vec![0; len + 2];
    r.read_exact(&mut data).unwrap();
    data.truncate(len);
    Some(data)
}

/// pylibmc's behaviors for each `--ketama` flavour.
const FLAVOURS: [(&str, &str); 3] = [
    ("default", r#"{"ketama": True}"#),
    ("md5", r#"{"ketama": True, "hash": "md5"}"#),
    ("weighted", r#"{"ketama_weighted": True}"#),
];

#[test]
fn ketama_places_keys_where_libmemcached_does() {
    // Three servers of each kind; a libmemcached client (pylibmc) stores
    // keys with ketama; `osmium-bench ketama` must name the one server
    // that holds each. Then `load --targets` preloads its keys and pylibmc
    // must find every one of them.
    for (name, binary) in cache_servers() {
        let servers: Vec<Running> = (0..3).map(|_| start(&binary, &[])).collect();
        let addrs: Vec<String> = servers.iter().map(address).collect();
        let list = addrs.join(",");
        for (flavour, behaviors) in FLAVOURS {
            let keys: Vec<String> = (0..200).map(|i| format!("{flavour}:{name}:{i}")).collect();
            let script = format!(
                "import sys, pylibmc\n\
                 c = pylibmc.Client(sys.argv[1].split(','), behaviors={behaviors})\n\
                 for k in sys.argv[2:]:\n    assert c.set(k, 'v:' + k)\n"
            );
            let mut args = vec![list.clone()];
            args.extend(keys.iter().cloned());
            let Some(_) = pylibmc(&script, &args) else {
                return;
            };
            let mut cmd = vec!["ketama", "--targets", &list, "--ketama", flavour];
            cmd.extend(keys.iter().map(String::as_str));
            let placed = bench(&cmd);
            let mut per_server = [0; 3];
            for (line, key) in placed.lines().zip(&keys) {
                let (k, server) = line.split_once(' ').unwrap();
                assert_eq!(k, key);
                for (i, addr) in addrs.iter().enumerate() {
                    let held = get(addr, key);
                    if addr == server {
                        assert_eq!(
                            held,
                            Some(format!("v:{key}").into_bytes()),
                            "{name} {flavour}: {key} not on {server}"
                        );
                        per_server[i] += 1;
                    } else {
                        assert_eq!(
                            held, None,
                            "{name} {flavour}: {key} on {addr}, predicted {server}"
                        );
                    }
                }
            }
            assert_eq!(per_server.iter().sum::<i32>(), 200);
            assert!(per_server.iter().all(|&n| n > 0), "{per_server:?}");
        }
        // load --targets (its preload and its gets) against pylibmc; into
        // servers it did not start, its keys carry its prefix.
        let mut load_args = vec![
            "load",
            "--targets",
            &list,
            "--keys",
            "300",
            "--ketama",
            "default",
        ];
        load_args.extend([
            "--duration",
            "0.3",
            "--warmup",
            "0.1",
            "--conns",
            "2",
            "--depth",
            "4",
        ]);
        let text = bench(&load_args);
        assert_eq!(figure(&text, "misses"), 0.0, "{name}: {text}");
        let found = pylibmc(
            "import sys, pylibmc\n\
             c = pylibmc.Client(sys.argv[1].split(','), behaviors={'ketama': True})\n\
             keys = ['osmium-bench:k%015d' % i for i in range(300)]\n\
             print(len(c.get_multi(keys)))\n",
            std::slice::from_ref(&list),
        )
        .unwrap();
        assert_eq!(
            found.trim(),
            "300",
            "{name}: pylibmc found {found} of the 300 keys load set"
        );
    }
}

#[test]
fn vs_instances_spread_keys_over_several_servers_of_each_kind() {
    // Three servers of each kind behind ketama: the preload and the gets
    // place every key alike, so no get misses.
    let cache = cache_servers();
    let list: Vec<&str> = cache.iter().map(|(name, _)| *name).collect();
    if list.is_empty() {
        return;
    }
    let list = list.join(",");
    let mut args = vec![
        "load",
        "--vs",
        "--servers",
        &list,
        "--instances",
        "3",
        "--threads",
        "1",
        "--keys",
        "3000",
        "--rounds",
        "1",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--conns",
        "2",
        "--depth",
        "4",
        "--json",
    ];
    for (name, path) in &cache {
        args.extend([
            if *name == "osmium" {
                "--osmium"
            } else {
                "--memcached"
            },
            path.to_str().unwrap(),
        ]);
    }
    let rows: serde_json::Value = serde_json::from_str(bench(&args).trim()).unwrap();
    for row in rows.as_array().unwrap() {
        assert!(row["gets"].as_u64().unwrap() > 0, "{row}");
        assert_eq!(row["misses"], 0, "{row}");
        assert!(row["cpu_us_per_req"].as_f64().unwrap() > 0.0, "{row}");
    }
}

#[test]
fn vs_compares_two_osmium_builds() {
    // `--servers osmium,osmium-b --osmium-b PATH`: both run, both are
    // preloaded (no get misses), each has its own row.
    let Some((_, osmium)) = cache_servers().into_iter().find(|(n, _)| *n == "osmium") else {
        return;
    };
    let path = osmium.to_str().unwrap();
    let args = [
        "load",
        "--vs",
        "--servers",
        "osmium,osmium-b",
        "--osmium",
        path,
        "--osmium-b",
        path,
        "--threads",
        "1",
        "--keys",
        "2000",
        "--rounds",
        "2",
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--conns",
        "2",
        "--json",
    ];
    let rows: serde_json::Value = serde_json::from_str(bench(&args).trim()).unwrap();
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["server"].as_str().unwrap()).collect();
    assert_eq!(names, ["osmium", "osmium-b"]);
    for row in rows {
        assert!(row["gets"].as_u64().unwrap() > 0, "{row}");
        assert_eq!(row["misses"], 0, "{row}");
    }
}

#[test]
fn vs_sla_pin_runs_every_server_on_one_cpu() {
    // `load --vs --sla --pin`: each server's whole process may run on one
    // CPU only (its Cpus_allowed_list, reported on stderr, is a single
    // CPU), the search runs on it, and each server has its row.
    if std::thread::available_parallelism().map_or(0, |n| n.get()) < 2 {
        eprintln!("SKIP: --pin needs two CPUs");
        return;
    }
    let cache = cache_servers();
    if cache.is_empty() {
        return;
    }
    let list = cache.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(",");
    let mut args = vec![
        "load",
        "--vs",
        "--sla",
        "--pin",
        "--servers",
        &list,
        "--rounds",
        "1",
        "--sla-steps",
        "1",
        "--sla-step-duration",
        "0.2",
        "--warmup",
        "0.1",
        "--keys",
        "2000",
        "--conns",
        "2",
        "--json",
    ];
    for (name, path) in &cache {
        args.push(if *name == "osmium" {
            "--osmium"
        } else {
            "--memcached"
        });
        args.push(path.to_str().unwrap());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(&args)
        .output()
        .expect("run osmium-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "osmium-bench {args:?}: {stderr}");
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["server"].as_str().unwrap())
        .collect();
    assert_eq!(names, list.split(',').collect::<Vec<_>>());
    for (name, _) in &cache {
        let cpus = stderr
            .lines()
            .find(|l| l.starts_with(&format!("{name} (pid ")))
            .and_then(|l| l.split("Cpus_allowed_list ").nth(1))
            .unwrap_or_else(|| panic!("no placement of {name} in {stderr}"));
        assert!(
            cpus.trim().parse::<usize>().is_ok(),
            "{name} may run on {cpus:?}, not one CPU"
        );
    }
}
