//! osmium-proxy in front of three backends: text multi-gets across
//! servers merged in key order, meta with `q`, binary pipelines with quiet
//! gets, noreply, replies in request order under pipelining; failover to
//! the replica and back; a hung server's `timeout:` (against nutcracker
//! too); the configuration check (`-t`).

use crate::common;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use osmium_proxy::ring::Ring;
use osmium_proxy::Config;

fn yaml(port: u16, backends: &[&Proc], extra: &str) -> String {
    let mut y = format!(
        "p:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 1000\n{extra}  servers:\n"
    );
    for b in backends {
        y.push_str(&format!("   - 127.0.0.1:{}:1\n", b.port()));
    }
    y
}

/// The first key `<tag><i>` the ring places on `server`.
fn key_on(ring: &Ring, server: usize, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}{i}"))
        .find(|k| ring.server_of(k.as_bytes()) == server)
        .unwrap()
}

fn direct_get(port: u16, key: &str) -> Option<String> {
    let r = roundtrip(port, format!("get {key}\r\n").as_bytes(), b"END\r\n");
    let r = String::from_utf8(r).unwrap();
    r.lines()
        .nth(1)
        .filter(|_| r.starts_with("VALUE"))
        .map(str::to_string)
}

#[test]
fn text_meta_and_binary_through_the_proxy() {
    let b: Vec<Proc> = (0..3).map(|_| backend(0)).collect();
    let port = free_port();
    let y = yaml(port, &b.iter().collect::<Vec<_>>(), "");
    let _px = proxy(&y, port);
    let port = _px.port(); // another one if `port` was taken meanwhile
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);

    // Keys on every server; a multi-get comes back in key order, one END.
    let keys: Vec<String> = (0..30).map(|i| format!("item:{}", i * 7919)).collect();
    let spread: std::collections::HashSet<usize> =
        keys.iter().map(|k| ring.server_of(k.as_bytes())).collect();
    assert_eq!(spread.len(), 3);
    let mut req = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        req.extend_from_slice(format!("set {k} {i} 0 {}\r\nv-{k}\r\n", 2 + k.len()).as_bytes());
    }
    req.extend_from_slice(b"set silent 0 0 1 noreply\r\nx\r\n");
    let mut get = String::from("get");
    for k in keys.iter().rev() {
        get.push_str(&format!(" {k} missing-{k}"));
    }
    get.push_str(&format!(" {}\r\n", keys[3]));
    req.extend_from_slice(get.as_bytes());
    req.extend_from_slice(b"mn\r\n");
    let r = roundtrip(port, &req, b"MN\r\n");
    let r = String::from_utf8(r).unwrap();
    let mut want = "STORED\r\n".repeat(30);
    for (i, k) in keys.iter().enumerate().rev() {
        want.push_str(&format!("VALUE {k} {i} {}\r\nv-{k}\r\n", 2 + k.len()));
    }
    let k3 = &keys[3];
    want.push_str(&format!(
        "VALUE {k3} 3 {}\r\nv-{k3}\r\nEND\r\nMN\r\n",
        2 + k3.len()
    ));
    assert_eq!(r, want);
    // Each key is on its ring server only; noreply was stored.
    for k in &keys[..5] {
        let home = ring.server_of(k.as_bytes());
        for (i, s) in b.iter().enumerate() {
            assert_eq!(direct_get(s.port(), k).is_some(), i == home, "{k} on {i}");
        }
    }
    assert_eq!(
        roundtrip(port, b"get silent\r\n", b"END\r\n"),
        b"VALUE silent 0 1\r\nx\r\nEND\r\n"
    );

    // Meta: q hides misses and HD, keeps hits; order holds with mn.
    let r = roundtrip(
        port,
        b"ms q 2 q\r\nhi\r\nmg q v q\r\nmg nope v q\r\nmd nope q\r\nmg q s v\r\nmn\r\n",
        b"MN\r\n",
    );
    assert_eq!(r, b"VA 2\r\nhi\r\nNF\r\nVA 2 s2\r\nhi\r\nMN\r\n");

    // Binary: SETQ, GETKQ hit and miss, GETQ, NOOP; opaques and order kept.
    let pkt = |op: u8, key: &[u8], extras: &[u8], val: &[u8], opaque: u32| {
        let mut p = vec![0x80, op];
        p.extend_from_slice(&(key.len() as u16).to_be_bytes());
        p.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
        p.extend_from_slice(&((key.len() + extras.len() + val.len()) as u32).to_be_bytes());
        p.extend_from_slice(&opaque.to_be_bytes());
        p.extend_from_slice(&[0; 8]);
        p.extend_from_slice(extras);
        p.extend_from_slice(key);
        p.extend_from_slice(val);
        p
    };
    let mut req = Vec::new();
    req.extend(pkt(0x11, b"bk", &[0; 8], b"hello", 1));
    for (i, k) in keys.iter().enumerate() {
        req.extend(pkt(0x0d, k.as_bytes(), &[], &[], 100 + i as u32));
        req.extend(pkt(0x0d, b"absent", &[], &[], 500 + i as u32));
    }
    req.extend(pkt(0x09, b"bk", &[], &[], 2));
    req.extend(pkt(0x0a, b"", &[], &[], 3));
    let mut s = connect(port);
    s.write_all(&req).unwrap();
    let mut got = Vec::new();
    let mut opaques = Vec::new();
    loop {
        while got.len() < 24 {
            got.extend(read_until_some(&mut s));
        }
        let body = u32::from_be_bytes(got[8..12].try_into().unwrap()) as usize;
        while got.len() < 24 + body {
            got.extend(read_until_some(&mut s));
        }
        let op = got[1];
        let opaque = u32::from_be_bytes(got[12..16].try_into().unwrap());
        opaques.push((op, opaque));
        got.drain(..24 + body);
        if op == 0x0a {
            break;
        }
    }
    let mut want: Vec<(u8, u32)> = (0..30).map(|i| (0x0d, 100 + i)).collect();
    want.push((0x09, 2));
    want.push((0x0a, 3));
    assert_eq!(opaques, want);

    // Local answers; `version` is a server's.
    assert_eq!(
        roundtrip(port, b"version\r\n", b"\r\n"),
        b"VERSION 1.6.45\r\n"
    );
    assert_eq!(roundtrip(port, b"bogus\r\n", b"\r\n"), b"ERROR\r\n");
    // `stats` is refused and the connection closed (as nutcracker closes
    // it): the request after it is not answered.
    {
        use std::io::Read;
        let mut s = connect(port);
        s.write_all(b"stats\r\nget a\r\n").unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        assert!(all.starts_with(b"SERVER_ERROR ") && all.ends_with(b"\r\n"));
        assert_eq!(all.iter().filter(|&&b| b == b'\n').count(), 1, "{all:?}");
    }
    // A refused storage command's block is swallowed, not run.
    let long = "k".repeat(300);
    let r = roundtrip(
        port,
        format!("set {long} 0 0 9\r\nflush_all\r\nmn\r\n").as_bytes(),
        b"MN\r\n",
    );
    assert_eq!(r, b"CLIENT_ERROR bad command line format\r\nMN\r\n");
    let k1 = &keys[1];
    assert!(direct_get(b[ring.server_of(k1.as_bytes())].port(), k1).is_some());
}

fn read_until_some(s: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut buf = [0u8; 65536];
    let n = s.read(&mut buf).unwrap();
    assert!(n > 0);
    buf[..n].to_vec()
}

/// Sets `key` through the proxy until it is stored (the first tries may
/// meet the dead server).
fn set_until_stored(port: u16, key: &str, value: &str) {
    let start = Instant::now();
    loop {
        let r = roundtrip(
            port,
            format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            b"\r\n",
        );
        if r == b"STORED\r\n" {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never stored: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_dead_servers_keys_go_to_its_replica_and_come_back() {
    let mut b: Vec<Proc> = (0..3).map(|_| backend(0)).collect();
    let port = free_port();
    let y = yaml(
        port,
        &b.iter().collect::<Vec<_>>(),
        "  auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 300\n",
    );
    let _px = proxy(&y, port);
    let port = _px.port(); // another one if `port` was taken meanwhile
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);
    let key_on = |server: usize, tag: &str| key_on(&ring, server, tag);
    // Server 1 dies: its keys go to server 2 (the next in the list).
    let k1 = key_on(1, "a");
    let dead_port = b[1].port();
    b[1].stop();
    set_until_stored(port, &k1, "on-replica");
    assert_eq!(direct_get(b[2].port(), &k1).as_deref(), Some("on-replica"));
    assert_eq!(direct_get(b[0].port(), &k1), None);
    // The last server's replica is the first.
    let k2 = key_on(2, "b");
    set_until_stored(port, &k2, "home");
    assert_eq!(direct_get(b[2].port(), &k2).as_deref(), Some("home"));
    // Server 1 returns (genuine memcached: no replication_catchup stat):
    // after the retry timeout its keys go to it again.
    b[1] = backend(dead_port);
    let start = Instant::now();
    let k3 = key_on(1, "c");
    loop {
        set_until_stored(port, &k3, "back");
        if direct_get(b[1].port(), &k3).as_deref() == Some("back") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never routed back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        direct_get(port, &k1),
        None,
        "read from its own server again"
    );
}

#[test]
fn a_returning_server_waits_until_it_has_caught_up() {
    // A fake server that reports `replication_catchup running` to its
    // first probes, then `done`; it answers sets with STORED.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_port = listener.local_addr().unwrap().port();
    drop(listener);
    let real = backend(0);
    let port = free_port();
    let y = format!(
        "p:\n  listen: 127.0.0.1:{port}\n  auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 200\n  timeout: 1000\n  servers:\n   - 127.0.0.1:{fake_port}:1\n   - 127.0.0.1:{}:1\n",
        real.port()
    );
    let _px = proxy(&y, port);
    let port = _px.port(); // another one if `port` was taken meanwhile
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);
    let k = key_on(&ring, 0, "f");
    // The fake is not up yet: its keys go to the real server.
    set_until_stored(port, &k, "1");
    assert_eq!(direct_get(real.port(), &k).as_deref(), Some("1"));
    let probes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let p2 = probes.clone();
    let listener = std::net::TcpListener::bind(("127.0.0.1", fake_port)).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let p3 = p2.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                let mut w = conn.try_clone().unwrap();
                let mut r = std::io::BufReader::new(conn);
                let mut line = String::new();
                while r.read_line(&mut line).unwrap_or(0) > 0 {
                    if line.starts_with("stats") {
                        let n = p3.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let state = if n < 4 { "running" } else { "done" };
                        let _ = write!(
                            w,
                            "STAT pid 1\r\nSTAT replication_catchup {state}\r\nEND\r\n"
                        );
                    } else if line.starts_with("set") {
                        let mut data = String::new();
                        r.read_line(&mut data).unwrap();
                        let _ = w.write_all(b"STORED\r\n");
                    }
                    line.clear();
                }
            });
        }
    });
    // While it catches up, sets still go to the real server.
    let start = Instant::now();
    while probes.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        assert!(start.elapsed() < Duration::from_secs(10), "never probed");
        std::thread::sleep(Duration::from_millis(10));
    }
    set_until_stored(port, &k, "2");
    assert_eq!(
        direct_get(real.port(), &k).as_deref(),
        Some("2"),
        "still on the replica"
    );
    // Once done, the fake takes its keys: the real server stops seeing them.
    while probes.load(std::sync::atomic::Ordering::SeqCst) < 5 {
        assert!(start.elapsed() < Duration::from_secs(10), "never caught up");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    set_until_stored(port, &k, "3");
    assert_eq!(
        direct_get(real.port(), &k).as_deref(),
        Some("2"),
        "went to the fake"
    );
}

#[test]
fn test_conf_checks_like_nutcracker() {
    let run = |yaml: &str| {
        let path = write_conf(&format!("t-{}.yml", yaml.len()), yaml);
        let out = Command::new(env!("CARGO_BIN_EXE_osmium-proxy"))
            .args(["-t", "-c", path.to_str().unwrap()])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let good = "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n";
    let (code, text) = run(good);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("syntax is ok"));
    for (bad, says) in [
        (
            "  listen: 127.0.0.1:22121\n",
            "  listen: 127.0.0.1:22121\n  colour: red\n",
        ),
        (
            "  listen: 127.0.0.1:22121\n",
            "  listen: 127.0.0.1:22121\n  redis: true\n",
        ),
        ("11211:1", "11211"),
    ]
    .map(|(from, to)| (good.replace(from, to), to))
    {
        let (code, text) = run(&bad);
        assert_eq!(code, Some(1), "{says}: {text}");
        assert!(text.contains("invalid"), "{text}");
    }
    let (_, text) = run(&good.replace("  servers", "  colour: red\n  servers"));
    assert!(text.contains("directive \"colour\" is unknown"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-proxy"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("osmium-proxy"));
}

/// Sends `signal` (`STOP`, `CONT`) to a process by PID (after `STOP`,
/// once every thread has stopped).
fn signal(pid: u32, signal: &str) {
    osmium_test_harness::signal_named(pid, signal);
}

/// A server that hangs (SIGSTOP: connected, never answering) costs its
/// keys `timeout:` and `SERVER_ERROR Connection timed out`, as nutcracker
/// answers; the other servers' keys are answered meanwhile, on the same
/// client connection, and the hung server's keys work again once it
/// resumes.
#[test]
fn a_hung_server_times_out_like_nutcracker() {
    let b: Vec<Proc> = (0..3).map(|_| backend(0)).collect();
    let hung = 0;
    let mut proxies = Vec::new();
    let port = free_port();
    let y = yaml(port, &b.iter().collect::<Vec<_>>(), "");
    proxies.push(("osmium-proxy", proxy(&y, port)));
    if let Some(bin) = nutcracker_bin() {
        let port = free_port();
        let y = yaml(port, &b.iter().collect::<Vec<_>>(), "");
        proxies.push(("nutcracker", nutcracker(&bin, &y, port)));
    }
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);
    let key_on = |server: usize, tag: &str| key_on(&ring, server, tag);
    let (stuck, fine) = (key_on(hung, "h"), key_on(1, "f"));
    for (_, p) in &proxies {
        set_until_stored(p.port(), &stuck, "1");
        set_until_stored(p.port(), &fine, "2");
    }
    signal(b[hung].pid(), "STOP");
    let result = std::panic::catch_unwind(|| {
        for (who, p) in &proxies {
            let mut s = connect(p.port());
            let start = Instant::now();
            s.write_all(format!("get {stuck}\r\n").as_bytes()).unwrap();
            let r = read_until(&mut s, b"\r\n");
            let waited = start.elapsed();
            assert_eq!(
                String::from_utf8_lossy(&r),
                "SERVER_ERROR Connection timed out\r\n",
                "{who}"
            );
            assert!(waited >= Duration::from_millis(900), "{who}: {waited:?}");
            s.write_all(format!("get {fine}\r\n").as_bytes()).unwrap();
            let r = read_until(&mut s, b"END\r\n");
            assert_eq!(
                String::from_utf8_lossy(&r),
                format!("VALUE {fine} 0 1\r\n2\r\nEND\r\n"),
                "{who}"
            );
        }
    });
    signal(b[hung].pid(), "CONT");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    for (who, p) in &proxies {
        let start = Instant::now();
        loop {
            let r = roundtrip(p.port(), format!("get {stuck}\r\n").as_bytes(), b"\r\n");
            if r.starts_with(b"VALUE") {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{who}: {:?}",
                String::from_utf8_lossy(&r)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// With `failover: replica`, a plain read that meets a failed server
/// (reset by a kill, or timed out on a hung server) is answered by the
/// replica, the first time already; a write is never sent twice: it gets
/// the error.
#[test]
fn reads_a_failing_server_loses_are_answered_by_its_replica() {
    let mut b: Vec<Proc> = (0..3).map(|_| backend(0)).collect();
    let port = free_port();
    let y = yaml(
        port,
        &b.iter().collect::<Vec<_>>(),
        "  auto_eject_hosts: true\n  server_failure_limit: 3\n  server_retry_timeout: 30000\n",
    );
    let _px = proxy(&y, port);
    let port = _px.port(); // another one if `port` was taken meanwhile
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);
    let key_on = |server: usize, tag: &str| key_on(&ring, server, tag);
    let put = |port: u16, key: &str, value: &str| {
        let r = roundtrip(
            port,
            format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            b"\r\n",
        );
        assert_eq!(r, b"STORED\r\n");
    };
    let get = |s: &mut std::net::TcpStream, key: &str| {
        s.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
        let text = read_until(s, b"END\r\n");
        s.write_all(format!("mg {key} v\r\n").as_bytes()).unwrap();
        let mut meta = read_until(s, b"\r\n");
        if meta.starts_with(b"VA") && meta.iter().filter(|&&b| b == b'\n').count() < 2 {
            meta.extend(read_until(s, b"\r\n"));
        }
        (
            String::from_utf8_lossy(&text).into_owned(),
            String::from_utf8_lossy(&meta).into_owned(),
        )
    };
    // A hung server: reads time out there and are answered by the next.
    let (h, k) = (key_on(0, "h"), key_on(1, "k"));
    put(b[0].port(), &h, "home");
    put(b[1].port(), &h, "replica");
    put(b[1].port(), &k, "home");
    put(b[2].port(), &k, "replica");
    let mut s = connect(port);
    assert_eq!(
        get(&mut s, &h).0,
        format!("VALUE {h} 0 4\r\nhome\r\nEND\r\n")
    );
    signal(b[0].pid(), "STOP");
    let result = std::panic::catch_unwind(|| {
        let mut s = connect(port);
        let (text, meta) = get(&mut s, &h);
        assert_eq!(text, format!("VALUE {h} 0 7\r\nreplica\r\nEND\r\n"));
        assert_eq!(meta, "VA 7\r\nreplica\r\n");
        s.write_all(format!("set {h} 0 0 1\r\nx\r\n").as_bytes())
            .unwrap();
        assert_eq!(
            read_until(&mut s, b"\r\n"),
            b"SERVER_ERROR Connection timed out\r\n"
        );
    });
    signal(b[0].pid(), "CONT");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    // A killed server: the reads on its open connection are reset, the
    // ones after are refused; the replica answers both.
    let mut s = connect(port);
    assert_eq!(
        get(&mut s, &k).0,
        format!("VALUE {k} 0 4\r\nhome\r\nEND\r\n")
    );
    b[1].stop();
    for _ in 0..5 {
        let (text, meta) = get(&mut s, &k);
        assert_eq!(text, format!("VALUE {k} 0 7\r\nreplica\r\nEND\r\n"));
        assert_eq!(meta, "VA 7\r\nreplica\r\n");
    }
    // A multi-get over the dead server and a live one.
    let other = key_on(2, "o");
    put(b[2].port(), &other, "two");
    s.write_all(format!("gets {k} {other}\r\n").as_bytes())
        .unwrap();
    let r = String::from_utf8(read_until(&mut s, b"END\r\n")).unwrap();
    assert!(r.contains("replica") && r.contains("two"), "{r}");
}
