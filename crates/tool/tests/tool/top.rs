//! `osmium-tool top`: `--once --json` over real servers (rates from
//! traffic sent during the interval, the documented fields), a pool YAML
//! as the server list, an idle server's latency (top's own polls left
//! out), and the live view in a real terminal (tmux): the three servers of
//! a pool and the column headers appear, `q` quits; at 80x24 the whole
//! addresses, the main columns and the hot keys' rates still show.

use crate::common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{
    address, memcached_bin, osmium_bin, roundtrip, run_tool, start, wait_until, Running, TempDir,
};
use serde_json::Value;

/// Sends `get`s (half hits) and `set`s to `server` until `stop`.
fn traffic(server: &Running, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let mut s = server.connect();
    thread::spawn(move || {
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            roundtrip(
                &mut s,
                format!("set k{i} 0 0 1\r\nx\r\n").as_bytes(),
                b"\r\n",
            );
            roundtrip(&mut s, format!("get k{i}\r\n").as_bytes(), b"END\r\n");
            roundtrip(&mut s, b"get nope\r\n", b"END\r\n");
            i += 1;
        }
    })
}

fn json(args: &[&str]) -> Value {
    let out = run_tool(args);
    assert!(
        out.status.success(),
        "osmium-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// The fields every server entry has, with their JSON types.
fn check_server_fields(s: &Value) {
    for k in [
        "addr",
        "up",
        "error",
        "version",
        "uptime_seconds",
        "ops_per_sec",
        "get_hits_per_sec",
        "get_misses_per_sec",
        "hit_ratio",
        "latency_us",
        "memory",
        "flash",
        "evictions_per_sec",
        "connections",
        "replication",
        "hotkeys",
    ] {
        assert!(s.get(k).is_some(), "{k} missing in {s}");
    }
    for k in ["total", "get", "set", "delete", "incr_decr", "touch"] {
        assert!(s["ops_per_sec"][k].is_f64(), "ops_per_sec.{k} in {s}");
    }
    for k in ["bytes", "limit_maxbytes", "curr_items"] {
        assert!(s["memory"][k].is_u64(), "memory.{k} in {s}");
    }
}

fn once_json_against(bin: &std::path::Path, is_osmium: bool) {
    let a = start(bin, &["-m", "32"]);
    let b = start(bin, &["-m", "16"]);
    let stop = Arc::new(AtomicBool::new(false));
    let load = traffic(&a, stop.clone());
    let doc = json(&[
        "top",
        &address(&a),
        &address(&b),
        "--once",
        "--json",
        "--interval",
        "0.5",
    ]);
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();

    assert_eq!(doc["interval_seconds"], 0.5);
    let servers = doc["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 2);
    for s in servers {
        check_server_fields(s);
        assert_eq!(s["up"], true);
        assert!(s["error"].is_null());
    }
    let (sa, sb) = (&servers[0], &servers[1]);
    assert_eq!(sa["addr"], address(&a));
    assert_eq!(sa["memory"]["limit_maxbytes"], 32u64 << 20);
    assert_eq!(sb["memory"]["limit_maxbytes"], 16u64 << 20);
    // Traffic went to a only: its rates, a hit ratio near 1/2.
    let get = sa["ops_per_sec"]["get"].as_f64().unwrap();
    let set = sa["ops_per_sec"]["set"].as_f64().unwrap();
    assert!(get > 0.0 && set > 0.0, "{sa}");
    let ratio = sa["hit_ratio"].as_f64().expect("hit ratio");
    assert!((0.3..=0.7).contains(&ratio), "{sa}");
    assert_eq!(sb["ops_per_sec"]["get"], 0.0);
    assert!(sb["hit_ratio"].is_null());
    assert!(sa["connections"].as_u64().unwrap() >= 1);
    // Neither has replication; memcached has no hot keys nor latency.
    assert!(sa["replication"].is_null());
    if !is_osmium {
        assert!(sa["hotkeys"].is_null());
        assert!(sa["latency_us"].is_null());
    }
    // Totals.
    let t = &doc["total"];
    assert_eq!(t["servers"], 2);
    assert_eq!(t["servers_up"], 2);
    assert_eq!(t["memory"]["limit_maxbytes"], 48u64 << 20);
    let tget = t["ops_per_sec"]["get"].as_f64().unwrap();
    assert!((tget - get).abs() < 1e-6, "{t}");
}

#[test]
fn once_json_osmium() {
    once_json_against(&osmium_bin(), true);
}

#[test]
fn once_json_memcached() {
    if let Some(bin) = memcached_bin() {
        once_json_against(&bin, false);
    }
}

/// With `--metrics-addr`, `stats settings` names the endpoint and the
/// latency percentiles come from the server's histograms.
#[test]
fn once_json_reads_latency_from_the_metrics_endpoint() {
    let metrics_port = osmium_test_harness::free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let a = start(&osmium_bin(), &["-m", "32", "--metrics-addr", &metrics]);
    let stop = Arc::new(AtomicBool::new(false));
    let load = traffic(&a, stop.clone());
    let doc = json(&["top", &address(&a), "--once", "--json", "--interval", "0.5"]);
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let s = &doc["servers"][0];
    let latency = &s["latency_us"]["all"];
    assert!(latency.is_object(), "latency from {metrics}: {s}");
    assert!(s["latency_us"]["get"].is_object(), "{s}");
    let p50 = latency["p50"].as_f64().expect("p50");
    let p99 = latency["p99"].as_f64().expect("p99");
    assert!(p50 > 0.0 && p99 >= p50, "{latency}");
}

/// A down server is reported, not fatal.
#[test]
fn once_json_down_server() {
    let a = start(&osmium_bin(), &[]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("127.0.0.1:{port}");
    let doc = json(&["top", &address(&a), &dead, "--json", "--interval", "0.1"]);
    assert_eq!(doc["servers"][0]["up"], true);
    assert_eq!(doc["servers"][1]["up"], false);
    assert!(doc["servers"][1]["error"].is_string());
    assert_eq!(doc["total"]["servers_up"], 1);
}

/// A nutcracker YAML with one pool over `servers`.
fn pool_yaml(dir: &TempDir, servers: &[&Running]) -> std::path::PathBuf {
    let mut y = String::from(
        "alpha:\n  listen: 127.0.0.1:1\n  hash: fnv1a_64\n  distribution: ketama\n  servers:\n",
    );
    for s in servers {
        y.push_str(&format!("   - {}:1\n", address(s)));
    }
    y.push_str("beta:\n  listen: 127.0.0.1:2\n  servers:\n");
    y.push_str(&format!("   - {}:1\n", servers[0].addr()));
    let path = dir.0.join("pool.yml");
    std::fs::write(&path, y).unwrap();
    path
}

#[test]
fn pool_file_lists_the_servers() {
    let bin = osmium_bin();
    let servers: Vec<Running> = (0..3).map(|_| start(&bin, &[])).collect();
    let refs: Vec<&Running> = servers.iter().collect();
    let dir = TempDir::new("pool-json");
    let pool = pool_yaml(&dir, &refs);
    let pool = pool.to_str().unwrap();
    let doc = json(&["top", "--pool", pool, "--json", "--interval", "0.1"]);
    let addrs: Vec<&str> = doc["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["addr"].as_str().unwrap())
        .collect();
    let want: Vec<String> = servers.iter().map(address).collect();
    assert_eq!(addrs, want);
    let doc = json(&[
        "top",
        "--pool",
        pool,
        "--pool-name",
        "beta",
        "--json",
        "--interval",
        "0.1",
    ]);
    assert_eq!(doc["servers"].as_array().unwrap().len(), 1);
    let bad = run_tool(&["top", "--pool", pool, "--pool-name", "nope", "--once"]);
    assert!(!bad.status.success());
    // Plain --once: the table as text.
    let out = run_tool(&["top", "--pool", pool, "--once", "--interval", "0.1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Server"), "{text}");
    assert!(text.lines().last().unwrap().starts_with("TOTAL"), "{text}");
}

/// `osmium-tool top` running in a tmux session of its own (a private
/// server socket), killed with its socket file when dropped; `None`
/// (skip) when tmux is not installed: a failure under `CI=true`, where
/// scripts/test-all.sh installs it.
struct TmuxTop {
    socket: String,
    status: std::path::PathBuf,
    _dir: TempDir,
}

impl TmuxTop {
    fn start(tag: &str, cols: u16, rows: u16, args: &str) -> Option<TmuxTop> {
        let have = Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !have {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "tmux is not installed (scripts/test-all.sh installs it)"
            );
            eprintln!("SKIP top in a terminal: tmux is not installed");
            return None;
        }
        let dir = TempDir::new(tag);
        let status = dir.0.join("status");
        let top = TmuxTop {
            socket: format!("osmium-tool-{tag}-{}", std::process::id()),
            status: status.clone(),
            _dir: dir,
        };
        // The command records its exit status, so a clean exit is checked.
        let cmd = format!(
            "{} top {args}; echo $? > {}",
            env!("CARGO_BIN_EXE_osmium-tool"),
            status.display()
        );
        let (cols, rows) = (cols.to_string(), rows.to_string());
        let out = top.tmux(&[
            "new-session",
            "-d",
            "-x",
            &cols,
            "-y",
            &rows,
            "-s",
            "top",
            "sh",
            "-c",
            &cmd,
        ]);
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(top)
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "top"]).stdout)
            .into_owned()
    }

    /// The first screen `ready` accepts (within 20 s).
    fn until(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "top never showed {what}:\n{screen}"
            );
            thread::sleep(Duration::from_millis(200));
        }
    }

    fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", "-t", "top", keys]);
    }

    /// Quits with `q`; top's exit status.
    fn quit(&self) -> String {
        self.keys("q");
        wait_until("top did not exit on q", || {
            std::fs::read_to_string(&self.status).is_ok_and(|s| s.ends_with('\n'))
        });
        std::fs::read_to_string(&self.status)
            .unwrap()
            .trim()
            .to_string()
    }
}

impl Drop for TmuxTop {
    fn drop(&mut self) {
        // The tmux server ends with its session; its socket file stays.
        let _ = self.tmux(&["kill-server"]);
        let uid =
            std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
        let dir = std::env::var_os("TMUX_TMPDIR").unwrap_or_else(|| "/tmp".into());
        let _ = std::fs::remove_file(
            std::path::Path::new(&dir)
                .join(format!("tmux-{uid}"))
                .join(&self.socket),
        );
    }
}

#[test]
fn top_in_a_terminal_shows_a_pool() {
    let bin = osmium_bin();
    let servers: Vec<Running> = (0..3).map(|_| start(&bin, &[])).collect();
    let refs: Vec<&Running> = servers.iter().collect();
    let dir = TempDir::new("pool-tmux");
    let pool = pool_yaml(&dir, &refs);
    let args = format!("--pool {} --pool-name alpha --interval 0.3", pool.display());
    let Some(top) = TmuxTop::start("pool", 160, 50, &args) else {
        return;
    };
    let want: Vec<String> = servers.iter().map(address).collect();
    let screen = top.until("the pool", |screen| {
        want.iter().all(|a| screen.contains(a.as_str()))
            && ["Server", "ops/s", "hit%", "p99", "Memory", "Items", "Conns", "TOTAL"]
                .iter()
                .all(|h| screen.contains(h))
            // Every row polled: each shows its memory.
            && screen.matches("/64.0M").count() >= 3
    });
    assert!(screen.contains("Hottest keys"), "{screen}");
    assert!(screen.contains("3/3 up"), "{screen}");
    // No server has a flash tier or replicates: no such columns.
    assert!(
        !screen.contains("Flash") && !screen.contains("Repl lag"),
        "{screen}"
    );

    // Arrows move the selection; q quits with status 0.
    top.keys("Down");
    // The details pane is titled with the selected server.
    top.until("the second server selected", |s| {
        s.contains(&format!("┌{}", want[1]))
    });
    assert_eq!(top.quit(), "0");
}

/// At 80x24 every server's whole address, the main columns and the hot
/// keys' rates are on the screen.
#[test]
fn top_fits_an_80_column_terminal() {
    let bin = osmium_bin();
    let metrics_port = osmium_test_harness::free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let a = start(&bin, &["--metrics-addr", &metrics]);
    let b = start(&bin, &[]);
    let args = format!("{} {} --interval 0.3", address(&a), address(&b));
    let Some(top) = TmuxTop::start("narrow", 80, 24, &args) else {
        return;
    };
    // A hot key on a: reads and writes every interval.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let mut s = a.connect();
        let stop = stop.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                roundtrip(&mut s, b"set hotkey 0 0 1\r\nx\r\n", b"\r\n");
                roundtrip(&mut s, b"get hotkey\r\n", b"END\r\n");
            }
        })
    };
    let rows = |screen: &str, addr: &str| -> Vec<String> {
        screen
            .lines()
            .filter(|l| l.starts_with(addr))
            .map(str::to_string)
            .collect()
    };
    let screen = top.until("both servers, latency and the hot key's rates", |screen| {
        // The hot key's row: its reads/s and writes/s after the key.
        let rates = screen
            .lines()
            .find(|l| l.contains(" hotkey "))
            .is_some_and(|l| {
                let after = l.split(" hotkey ").nth(1).unwrap_or_default();
                let rate = |w: &str| {
                    let n = w.trim_end_matches(['k', 'M']);
                    n.parse::<f64>().is_ok_and(|r| r > 0.0)
                };
                after.split_whitespace().filter(|w| rate(w)).count() >= 2
            });
        rows(screen, &address(&a)).len() == 1
            && rows(screen, &address(&b)).len() == 1
            && rates
            && rows(screen, &address(&a))[0].contains("us ")
    });
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    for h in [
        "Server", "ops/s", "hit%", "p50", "p99", "Memory", "TOTAL", "reads/s", "writes/s",
    ] {
        assert!(screen.contains(h), "{h} missing:\n{screen}");
    }
    assert!(screen.lines().count() <= 24, "{screen}");
    assert!(screen.lines().all(|l| l.chars().count() <= 80), "{screen}");
    assert_eq!(top.quit(), "0");
}

/// An idle server: top's own `stats` polls are not reported as the
/// clients' latency.
#[test]
fn an_idle_server_shows_no_latency_of_tops_own_polls() {
    let metrics_port = osmium_test_harness::free_port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let a = start(&osmium_bin(), &["--metrics-addr", &metrics]);
    let doc = json(&["top", &address(&a), "--once", "--json", "--interval", "0.3"]);
    let s = &doc["servers"][0];
    assert_eq!(s["ops_per_sec"]["total"], 0.0, "{s}");
    let all = &s["latency_us"]["all"];
    assert!(
        s["latency_us"].is_null() || all.is_null(),
        "latency of top's own polls: {s}"
    );
    // (With traffic it shows: once_json_reads_latency_from_the_metrics_endpoint.)
}
