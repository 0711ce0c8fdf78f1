//! osmium-proxy's stats port and nutcracker's command line, over real
//! sockets: the document has nutcracker 0.5.0's bytes (the same keys in
//! the same order and nesting, the same punctuation) and, for the same
//! YAML, backends and requests, the same counters as nutcracker's;
//! a stats port in use stops the start; `-p`, `-o`, `-d`, `-D`, `-t` and
//! the accepted-only flags; a stats reader that does not read does not
//! hold the proxy up.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use osmium_proxy::ring::Ring;
use osmium_proxy::Config;
use osmium_test_harness::Daemon;
use serde_json::Value;

/// Pool `alpha` (servers `one`, two unnamed, and `dead`, where nothing
/// listens) and pool `beta` (one server, no traffic).
fn yaml(alpha: u16, beta: u16, live: &[&Proc], dead: u16) -> String {
    format!(
        "alpha:\n  listen: 127.0.0.1:{alpha}\n  hash: fnv1a_64\n  distribution: ketama\n  \
         timeout: 2000\n  auto_eject_hosts: true\n  server_retry_timeout: 60000\n  \
         server_failure_limit: 2\n  servers:\n   - 127.0.0.1:{}:1 one\n   - 127.0.0.1:{}:1\n   \
         - 127.0.0.1:{}:1\n   - 127.0.0.1:{dead}:1 dead\nbeta:\n  listen: 127.0.0.1:{beta}\n  \
         servers:\n   - 127.0.0.1:{}:1\n",
        live[0].port(),
        live[1].port(),
        live[2].port(),
        live[0].port()
    )
}

/// Two keys homed on each server of `ring` (in `servers:` order).
fn keys_per_server(ring: &Ring, servers: usize) -> Vec<Vec<String>> {
    let mut per = vec![Vec::new(); servers];
    for i in 0.. {
        let k = format!("stat:{i}");
        let s = ring.server_of(k.as_bytes());
        if per[s].len() < 2 {
            per[s].push(k);
        }
        if per.iter().all(|v| v.len() == 2) {
            return per;
        }
    }
    unreachable!()
}

fn line(r: &mut BufReader<std::net::TcpStream>) -> String {
    let mut l = String::new();
    r.read_line(&mut l).expect("reply");
    l
}

/// The same requests through either proxy; returns the client connection
/// kept open. Per live server: 2 sets, 2 gets, 1 part of a multi-get;
/// the dead server: 2 sets answered with an error (then it is ejected).
fn traffic(port: u16, keys: &[Vec<String>]) -> std::net::TcpStream {
    let a = connect(port);
    let mut r = BufReader::new(a.try_clone().unwrap());
    let mut w = a.try_clone().unwrap();
    for k in keys[..3].iter().flatten() {
        w.write_all(format!("set {k} 0 0 2\r\nv1\r\n").as_bytes())
            .unwrap();
        assert_eq!(line(&mut r), "STORED\r\n", "set {k}");
    }
    for k in keys[..3].iter().flatten() {
        w.write_all(format!("get {k}\r\n").as_bytes()).unwrap();
        assert_eq!(line(&mut r), format!("VALUE {k} 0 2\r\n"));
        assert_eq!(line(&mut r), "v1\r\n");
        assert_eq!(line(&mut r), "END\r\n");
    }
    // One key on each live server: three parts.
    let (k0, k1, k2) = (&keys[0][0], &keys[1][0], &keys[2][0]);
    w.write_all(format!("get {k0} {k1} {k2}\r\n").as_bytes())
        .unwrap();
    for k in [k0, k1, k2] {
        assert_eq!(line(&mut r), format!("VALUE {k} 0 2\r\n"));
        assert_eq!(line(&mut r), "v1\r\n");
    }
    assert_eq!(line(&mut r), "END\r\n");
    // Writes to the dead server: refused twice, ejected.
    let b = connect(port);
    let mut rb = BufReader::new(b.try_clone().unwrap());
    let mut wb = b.try_clone().unwrap();
    for k in &keys[3] {
        wb.write_all(format!("set {k} 0 0 2\r\nv1\r\n").as_bytes())
            .unwrap();
        let got = line(&mut rb);
        assert!(got.starts_with("SERVER_ERROR"), "set {k}: {got}");
    }
    drop((rb, wb, b));
    a
}

/// The stats document once `ready` holds for it (nutcracker publishes
/// its figures every `-i` ms).
fn settled(stats: u16, ready: impl Fn(&Value) -> bool) -> (String, Value) {
    let start = Instant::now();
    loop {
        let doc = stats_doc(stats);
        let v: Value = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
        if ready(&v) {
            return (doc, v);
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "stats never settled: {doc}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn done(v: &Value) -> bool {
    let a = &v["alpha"];
    a["forward_error"] == 2 && a["client_eof"] == 2 && a["client_connections"] == 1
}

/// The document without osmium's own pool stats (`reloads` ...), with
/// every number 0 and the version blank: what must be byte for byte
/// nutcracker's.
fn shape(doc: &str) -> String {
    let mut doc = doc.to_string();
    for (key, _) in osmium_proxy::stats::OSMIUM_POOL_STATS {
        let pair = format!("\"{key}\":");
        while let Some(at) = doc.find(&pair) {
            let from = at + pair.len();
            let digits = doc[from..].bytes().take_while(u8::is_ascii_digit).count();
            assert_eq!(&doc[from + digits..from + digits + 2], ", ", "{doc}");
            doc.replace_range(at..from + digits + 2, "");
        }
    }
    let doc = match doc.find("\"version\":\"") {
        Some(at) => {
            let from = at + "\"version\":\"".len();
            let to = from + doc[from..].find('"').unwrap();
            format!("{}{}", &doc[..from], &doc[to..])
        }
        None => doc,
    };
    let mut out = String::new();
    let mut digits = false;
    for c in doc.chars() {
        if c.is_ascii_digit() {
            if !digits {
                out.push('0');
            }
            digits = true;
        } else {
            digits = false;
            out.push(c);
        }
    }
    out
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn the_stats_port_answers_as_nutcracker_does() {
    let live: Vec<Proc> = (0..3).map(|_| backend(0)).collect();
    let dead = free_port();
    let (alpha, beta) = (free_port(), free_port());
    let y = yaml(alpha, beta, &live.iter().collect::<Vec<_>>(), dead);
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);
    let keys = keys_per_server(&ring, 4);

    let px = proxy(&y, alpha);
    let open = traffic(alpha, &keys);
    let (doc, v) = settled(px.stats_port(), done);
    assert!(doc.ends_with("}}}\n"), "{doc}");
    assert_eq!(v["service"], "nutcracker");
    assert_eq!(
        v["version"],
        format!("osmium-proxy-{}", env!("CARGO_PKG_VERSION"))
    );
    let a = &v["alpha"];
    let names = [
        "one".to_string(),
        format!("127.0.0.1:{}", live[1].port()),
        format!("127.0.0.1:{}", live[2].port()),
    ];
    for name in &names {
        let s = &a[name];
        assert_eq!(u(&s["requests"]), 5, "{name}: {doc}");
        assert_eq!(u(&s["responses"]), 5, "{name}: {doc}");
        assert_eq!(u(&s["server_connections"]), 1, "{name}: {doc}");
        assert_eq!(u(&s["out_queue"]) + u(&s["in_queue"]), 0, "{name}: {doc}");
    }
    let d = &a["dead"];
    assert_eq!(
        (u(&d["requests"]), u(&d["responses"]), u(&d["server_err"])),
        (2, 0, 2),
        "{doc}"
    );
    let ejected = u(&d["server_ejected_at"]);
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(ejected <= now_us && now_us - ejected < 60_000_000, "{doc}");
    assert_eq!(u(&a["server_ejects"]), 1, "{doc}");
    assert_eq!(u(&a["fragments"]), 3, "{doc}");
    // Listeners 2, clients 3 (the start check, the kept one, the one that
    // left), server connects 3 + 2 refused; open: 2 + 1 + 3.
    assert_eq!(u(&v["total_connections"]), 10, "{doc}");
    assert_eq!(u(&v["curr_connections"]), 6, "{doc}");
    drop(open);
    drop(px);

    let Some(bin) = nutcracker_bin() else {
        return;
    };
    for b in &live {
        flush(b.port());
    }
    let nc = nutcracker_with(&bin, &y, alpha, &["-i", "100"]);
    let open = traffic(alpha, &keys);
    let (ndoc, nv) = settled(nc.stats_port(), done);
    drop(open);
    // The same bytes but for the figures and the version: the same keys,
    // in the same order and nesting, the same punctuation.
    assert_eq!(
        shape(&doc),
        shape(&ndoc),
        "\nosmium:     {doc}\nnutcracker: {ndoc}"
    );
    let ours = &v["alpha"];
    let theirs = &nv["alpha"];
    for key in [
        "client_eof",
        "client_err",
        "client_connections",
        "server_ejects",
        "forward_error",
    ] {
        assert_eq!(ours[key], theirs[key], "{key}\n{doc}\n{ndoc}");
    }
    // nutcracker 0.5.0 never counts fragments (0 whatever the multi-gets);
    // osmium-proxy counts the parts, as its description says.
    assert_eq!(theirs["fragments"], 0, "{ndoc}");
    let servers = ours.as_object().unwrap().iter();
    for (name, s) in servers.filter(|(_, s)| s.is_object()) {
        for key in [
            "server_eof",
            "server_err",
            "server_timedout",
            "server_connections",
            "requests",
            "responses",
            "in_queue",
            "out_queue",
        ] {
            assert_eq!(s[key], theirs[name][key], "{name} {key}\n{doc}\n{ndoc}");
        }
        let ejected = |v: &Value| u(&v["server_ejected_at"]) > 0;
        assert_eq!(ejected(s), ejected(&theirs[name]), "{name}\n{doc}\n{ndoc}");
    }
    for key in ["total_connections", "curr_connections"] {
        assert_eq!(v[key], nv[key], "{key}\n{doc}\n{ndoc}");
    }
}

/// Runs osmium-proxy with `args` to its end (killed after 10 s); its
/// exit code and stdout + stderr.
fn run(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_osmium-proxy"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("osmium-proxy {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

fn small_conf(port: u16, backend: u16) -> std::path::PathBuf {
    write_conf(
        &format!("small-{port}.yml"),
        &format!("a:\n  listen: 127.0.0.1:{port}\n  servers:\n   - 127.0.0.1:{backend}:1\n"),
    )
}

#[test]
fn a_stats_port_in_use_stops_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stats = taken.local_addr().unwrap().port().to_string();
    let conf = small_conf(free_port(), free_port());
    let conf = conf.to_str().unwrap();
    let (code, text) = run(&["-c", conf, "-a", "127.0.0.1", "-s", &stats]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("stats") && text.contains(&stats), "{text}");
    // So does -d: the parent says why.
    let (code, text) = run(&["-d", "-c", conf, "-a", "127.0.0.1", "-s", &stats]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("stats") && text.contains(&stats), "{text}");
}

#[test]
fn flags_as_nutcracker_checks_them() {
    let conf = small_conf(free_port(), free_port());
    let conf = conf.to_str().unwrap();
    // -t still checks and exits, whatever else is given.
    let (code, text) = run(&["-t", "-c", conf, "-s", "1", "-i", "5", "-m", "512"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("syntax is ok"), "{text}");
    let (code, text) = run(&["-D"]);
    assert_eq!(code, Some(0), "{text}");
    for stat in [
        "pool stats:",
        "fragments",
        "server stats:",
        "out_queue_bytes",
    ] {
        assert!(text.contains(stat), "{stat}: {text}");
    }
    for bad in [
        ["-s", "0"],
        ["-s", "70000"],
        ["-m", "100"],
        ["-m", "16777217"],
        ["-i", "-5"],
    ] {
        let (code, text) = run(&["-t", "-c", conf, bad[0], bad[1]]);
        assert_eq!(code, Some(1), "{bad:?}: {text}");
    }
    let (_, help) = run(&["--help"]);
    for flag in [
        "--stats-port",
        "--stats-addr",
        "--stats-interval",
        "--output",
        "--pid-file",
        "--mbuf-size",
        "--describe-stats",
        "--daemonize",
    ] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
}

#[test]
fn the_pid_file_is_written_and_removed_and_the_log_goes_to_the_output_file() {
    let b = backend(0);
    let port = free_port();
    let conf = small_conf(port, b.port());
    let pid_file = conf.with_extension("pid");
    let log = conf.with_extension("log");
    let y = std::fs::read_to_string(&conf).unwrap();
    let mut px = proxy_with(
        &y,
        port,
        &[
            "-p",
            pid_file.to_str().unwrap(),
            "-o",
            log.to_str().unwrap(),
            "-v",
            "1",
        ],
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert_eq!(pid.trim(), px.pid().to_string());
    px.send_signal(libc::SIGTERM);
    let status = px.wait_exit();
    assert!(status.success(), "{status}");
    assert!(!pid_file.exists());
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("started on pid"), "{logged}");
    let err = px.stderr_text();
    assert!(!err.contains("started on pid"), "{err}");
}

#[test]
fn daemonize_returns_once_the_proxy_listens() {
    let b = backend(0);
    let port = free_port();
    let stats = free_port().to_string();
    let conf = small_conf(port, b.port());
    let pid_file = conf.with_extension("pid");
    let log = conf.with_extension("log");
    let (code, text) = run(&[
        "-d",
        "-c",
        conf.to_str().unwrap(),
        "-a",
        "127.0.0.1",
        "-s",
        &stats,
        "-p",
        pid_file.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    // Not the test's child: known by its pid file, killed if the test fails.
    let daemon = Daemon::from_pid_file(&pid_file);
    // Listening already, both ports, with no wait.
    assert_eq!(
        roundtrip(port, b"set d 0 0 1\r\nx\r\nget d\r\n", b"END\r\n"),
        b"STORED\r\nVALUE d 0 1\r\nx\r\nEND\r\n"
    );
    let v: Value = serde_json::from_str(&stats_doc(stats.parse().unwrap())).unwrap();
    assert_eq!(
        u(&v["a"]["127.0.0.1:".to_string() + &b.port().to_string()]["requests"]),
        2
    );
    daemon.stop();
    assert!(!pid_file.exists(), "removed at the stop");
}

/// A stats reader that does not read (a document larger than the socket
/// buffers: 5,000 servers) gets it all once it reads, and the proxy serves
/// clients meanwhile.
#[test]
fn a_stats_reader_that_does_not_read_holds_nothing_up() {
    let b = backend(0);
    let (small, big) = (free_port(), free_port());
    let mut y = format!(
        "small:\n  listen: 127.0.0.1:{small}\n  servers:\n   - 127.0.0.1:{}:1\n\
         big:\n  listen: 127.0.0.1:{big}\n  distribution: modula\n  servers:\n",
        b.port()
    );
    for i in 0..5000 {
        y.push_str(&format!(
            "   - 10.255.{}.{}:11211:1 s{i}\n",
            i / 250,
            i % 250
        ));
    }
    let px = proxy(&y, small);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", px.stats_port()).parse().unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut slow: std::net::TcpStream = sock.into();
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..20 {
        let t = Instant::now();
        let r = roundtrip(
            small,
            format!("set k{i} 0 0 1\r\nx\r\n").as_bytes(),
            b"\r\n",
        );
        assert_eq!(r, b"STORED\r\n");
        assert!(t.elapsed() < Duration::from_secs(2));
    }
    // Others are answered while the slow one waits.
    let v: Value = serde_json::from_str(&stats_doc(px.stats_port())).unwrap();
    assert_eq!(
        u(&v["small"]["127.0.0.1:".to_string() + &b.port().to_string()]["requests"]),
        20
    );
    let mut doc = Vec::new();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    slow.read_to_end(&mut doc).unwrap();
    let v: Value = serde_json::from_slice(&doc).unwrap();
    let pool_stats =
        osmium_proxy::stats::POOL_STATS.len() + osmium_proxy::stats::OSMIUM_POOL_STATS.len();
    assert_eq!(v["big"].as_object().unwrap().len(), pool_stats + 5000);
}
