//! Live reload of osmium-proxy over real sockets, in front of real osmium
//! servers: 50 clients doing sets and gets through the proxy while its
//! YAML is rewritten and SIGHUP'd (a server added, one removed, a weight
//! changed, a pool added, another pool removed) lose no connection and
//! no request, and after the server is added keys go where nutcracker
//! puts them for the new file; a file that does not load (YAML syntax,
//! a duplicate server, an unknown directive, a TLS file missing, a port
//! in use) is refused with a log line and the running configuration
//! keeps serving; `reload <token>` on the stats port is obeyed only with
//! the right token; placement and failover hold through a proxy that got
//! its configuration by a reload.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use osmium_proxy::ring::Ring;
use osmium_proxy::Config;
use osmium_test_harness::Proxy;
use serde_json::Value;

/// Pool `name` on `port` over `servers` (backend index, weight), each
/// named `s<index>`.
fn pool(name: &str, port: u16, backends: &[Proc], servers: &[(usize, u32)]) -> String {
    let mut y = format!(
        "{name}:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
         timeout: 5000\n  servers:\n"
    );
    for &(i, w) in servers {
        y.push_str(&format!("   - 127.0.0.1:{}:{w} s{i}\n", backends[i].port()));
    }
    y
}

fn read_line(r: &mut impl BufRead) -> Result<String, String> {
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(0) => Err("connection closed".into()),
        Ok(_) => Ok(line),
        Err(e) => Err(format!("read: {e}")),
    }
}

/// Reads a get's reply for `keys`: `VALUE` blocks of those keys (any
/// value: a key whose owner changed may miss, or find an older copy on
/// its new owner, as with nutcracker restarted), then `END`.
fn read_values(r: &mut impl BufRead, keys: &[&str]) -> Result<(), String> {
    loop {
        let line = read_line(r)?;
        if line == "END\r\n" {
            return Ok(());
        }
        let parts: Vec<&str> = line.trim_end().split(' ').collect();
        let ok = parts.len() == 4 && parts[0] == "VALUE" && keys.contains(&parts[1]);
        let len: usize = match (ok, parts.get(3).and_then(|l| l.parse().ok())) {
            (true, Some(len)) => len,
            _ => return Err(format!("not a get reply: {line:?}")),
        };
        let data = read_line(r)?;
        if data.len() != len + 2 || !data.ends_with("\r\n") {
            return Err(format!("bad value block {data:?} after {line:?}"));
        }
    }
}

/// One client: sets, gets and multi-gets in a loop until `stop`; every
/// reply must be a valid one. The number of requests answered.
fn client(port: u16, id: usize, stop: Arc<AtomicBool>) -> Result<u64, String> {
    let s = connect(port);
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut done = 0u64;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("load-{id}-{}", i % 300);
        let value = format!("v{i}-{}", "x".repeat(i % 50));
        let set = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        w.write_all(set.as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        let got = read_line(&mut r)?;
        if got != "STORED\r\n" {
            return Err(format!("set {key}: {got:?}"));
        }
        w.write_all(format!("get {key}\r\n").as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        read_values(&mut r, &[&key]).map_err(|e| format!("get {key}: {e}"))?;
        done += 2;
        if i % 8 == 7 {
            // A multi-get over several servers (one part each).
            let keys: Vec<String> = (0..6)
                .map(|k| format!("load-{id}-{}", (i + k * 37) % 300))
                .collect();
            w.write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())
                .map_err(|e| format!("write: {e}"))?;
            let names: Vec<&str> = keys.iter().map(String::as_str).collect();
            read_values(&mut r, &names).map_err(|e| format!("multi-get: {e}"))?;
            done += 1;
        }
        i += 1;
    }
    Ok(done)
}

/// Keys `<prefix><i>` written through `port` land where `ring` places
/// them (`servers[ring index]` is the backend index).
fn placed_by(backends: &[Proc], servers: &[usize], ring: &Ring, port: u16, prefix: &str) {
    let keys: Vec<String> = (0..2000).map(|i| format!("{prefix}{i}")).collect();
    set_all(port, &keys);
    let held = holders_of_all(backends, prefix, &keys);
    assert_eq!(held.len(), keys.len(), "{prefix}: keys missing");
    let wrong: Vec<&String> = keys
        .iter()
        .filter(|k| held[*k] != servers[ring.server_of(k.as_bytes())])
        .collect();
    assert!(
        wrong.is_empty(),
        "{prefix}: {} of {} keys misplaced, e.g. {}",
        wrong.len(),
        keys.len(),
        wrong[0]
    );
}

/// The pool objects' names in a stats document.
fn pools(doc: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(doc).unwrap();
    let mut names: Vec<String> = v
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, p)| p.is_object())
        .map(|(n, _)| n.clone())
        .collect();
    names.sort();
    names
}

#[test]
fn reloads_under_load_drop_no_connection_and_fail_no_request() {
    let b: Vec<Proc> = (0..6).map(|_| osmium_backend()).collect();
    let (first, beta, gamma) = (free_port(), free_port(), free_port());
    let beta_y = pool("beta", beta, &b, &[(5, 1)]);
    let gamma_y = pool("gamma", gamma, &b, &[(5, 1), (4, 1)]);
    let px = proxy(
        &(pool("alpha", first, &b, &[(0, 1), (1, 1), (2, 1), (3, 1)]) + &beta_y),
        first,
    );
    let port = px.port();
    let alpha = |servers: &[(usize, u32)]| pool("alpha", port, &b, servers);

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..50)
        .map(|id| {
            let stop = stop.clone();
            std::thread::spawn(move || client(port, id, stop))
        })
        .collect();
    let pause = || std::thread::sleep(Duration::from_millis(400));
    pause();

    // A server added: placement is nutcracker's for the new file.
    let added = [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)];
    let y = alpha(&added) + &beta_y;
    rewrite_conf(&px, &y);
    let doc = reload(&px);
    assert_eq!(pool_stat(&doc, "reload_failures"), 0);
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);
    let order: Vec<usize> = added.iter().map(|s| s.0).collect();
    placed_by(&b, &order, &ring, port, "px-added-");
    if let Some(nc) = nutcracker_bin() {
        let nc_port = free_port();
        let n = nutcracker(&nc, &pool("alpha", nc_port, &b, &added), nc_port);
        placed_by(&b, &order, &ring, n.port(), "nc-added-");
    }
    pause();

    // A server removed while requests wait on it (it is stopped: the
    // clients whose keys it holds wait), then a weight changed. The
    // requests queued on the removed server are answered once it runs
    // again: its connections stay until then.
    let stopped = b[1].pid();
    assert!(osmium_test_harness::signal(stopped, libc::SIGSTOP));
    std::thread::sleep(Duration::from_millis(200));
    rewrite_conf(&px, &(alpha(&[(0, 1), (2, 1), (3, 1), (4, 1)]) + &beta_y));
    let doc = reload(&px);
    let waiting = |doc: &str| {
        let v: Value = serde_json::from_str(doc).unwrap();
        let s1 = &v["alpha"]["s1"];
        s1["out_queue"].as_u64().unwrap_or(0) + s1["in_queue"].as_u64().unwrap_or(0)
    };
    assert_eq!(waiting(&doc), 0, "a removed server is not shown: {doc}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(osmium_test_harness::signal(stopped, libc::SIGCONT));
    pause();
    let reweighted = [(0, 3), (2, 1), (3, 1), (4, 1)];
    let y = alpha(&reweighted) + &beta_y;
    rewrite_conf(&px, &y);
    reload(&px);
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);
    let order: Vec<usize> = reweighted.iter().map(|s| s.0).collect();
    placed_by(&b, &order, &ring, port, "px-reweighted-");
    pause();

    // A pool added: it serves.
    let beta_client = connect(beta);
    rewrite_conf(&px, &(alpha(&reweighted) + &beta_y + &gamma_y));
    let doc = reload(&px);
    assert_eq!(pools(&doc), ["alpha", "beta", "gamma"]);
    assert_eq!(
        roundtrip(gamma, b"set g 0 0 1\r\ng\r\nget g\r\n", b"END\r\n"),
        b"STORED\r\nVALUE g 0 1\r\ng\r\nEND\r\n"
    );
    pause();

    // Another pool removed: its listener closes, its idle client is
    // closed; alpha's clients carry on.
    let mut bw = beta_client.try_clone().unwrap();
    let mut br = BufReader::new(beta_client);
    bw.write_all(b"set bk 0 0 1\r\nb\r\n").unwrap();
    assert_eq!(read_line(&mut br).unwrap(), "STORED\r\n");
    rewrite_conf(&px, &(alpha(&reweighted) + &gamma_y));
    let doc = reload(&px);
    assert_eq!(pools(&doc), ["alpha", "gamma"]);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", beta)).is_err(),
        "beta still listens"
    );
    let mut rest = Vec::new();
    br.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    pause();

    stop.store(true, Ordering::Relaxed);
    let mut requests = 0;
    for (id, c) in clients.into_iter().enumerate() {
        match c.join().unwrap() {
            Ok(n) => requests += n,
            Err(e) => panic!("client {id}: {e}"),
        }
    }
    assert!(requests > 1000, "only {requests} requests");
    let doc = stats_doc(px.stats_port());
    let v: Value = serde_json::from_str(&doc).unwrap();
    let a = &v["alpha"];
    assert_eq!(a["reloads"], 5, "{doc}");
    assert_eq!(a["reload_failures"], 0, "{doc}");
    assert_eq!(a["client_err"], 0, "{doc}");
    assert_eq!(a["forward_error"], 0, "{doc}");
    // The added and the removed server moved keys warm (warm_moves'
    // default); every move is over.
    assert_eq!(a["migrating"], 0, "{doc}");
    assert!(a["moved_keys"].as_u64().unwrap() > 0, "{doc}");
    let mut servers: Vec<&str> = a
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, s)| s.is_object())
        .map(|(n, _)| n.as_str())
        .collect();
    servers.sort();
    assert_eq!(servers, ["s0", "s2", "s3", "s4"], "{doc}");
    eprintln!("{requests} requests through 5 reloads, none failed");
}

/// The proxy's log file (`-o`), for the lines a reload writes.
fn log_of(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_file_that_does_not_load_leaves_the_running_one_serving() {
    let b: Vec<Proc> = (0..2).map(|_| osmium_backend()).collect();
    let first = free_port();
    let log = write_conf(&format!("reload-refused-{first}.log"), "");
    let px = proxy_with(
        &pool("alpha", first, &b, &[(0, 1)]),
        first,
        &["-o", log.to_str().unwrap(), "-v", "5"],
    );
    let good = pool("alpha", px.port(), &b, &[(0, 1)]);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let in_use = taken.local_addr().unwrap().port();
    let other = pool("beta", in_use, &b, &[(1, 1)]);
    let dup = pool("alpha", px.port(), &b, &[(0, 1), (1, 1)]).replace(" s1\n", " s0\n");
    let cases = [
        (
            "a YAML syntax error",
            format!("{good}oops: [\n"),
            "invalid yaml",
        ),
        ("a duplicate server", dup, "same name 's0'"),
        (
            "an unknown directive",
            good.replace("  timeout:", "  timeuot:"),
            "is unknown",
        ),
        (
            "a TLS file missing",
            format!("{good}  tls:\n    servers:\n      ca: /nonexistent/ca.pem\n"),
            "/nonexistent/ca.pem",
        ),
        ("a port in use", format!("{good}{other}"), "cannot listen"),
    ];
    for (n, (what, text, reason)) in cases.iter().enumerate() {
        rewrite_conf(&px, text);
        let doc = reload_expect(&px, false);
        assert_eq!(pool_stat(&doc, "reload_failures"), n as u64 + 1, "{what}");
        assert_eq!(pool_stat(&doc, "reloads"), 0, "{what}");
        assert_eq!(pools(&doc), ["alpha"], "{what}: {doc}");
        // The running configuration serves, on its one server.
        let key = format!("still-{n}");
        let r = roundtrip(
            px.port(),
            format!("set {key} 0 0 2\r\nok\r\nget {key}\r\n").as_bytes(),
            b"END\r\n",
        );
        assert_eq!(
            r,
            format!("STORED\r\nVALUE {key} 0 2\r\nok\r\nEND\r\n").as_bytes(),
            "{what}"
        );
        assert_eq!(
            direct(b[0].port(), &key).as_deref(),
            Some("ok"),
            "{what}: not on the old server"
        );
        // One line says so, naming the file and the reason.
        let text = log_of(&log);
        let line = text
            .lines()
            .filter(|l| l.contains("not reloaded"))
            .nth(n)
            .unwrap_or_else(|| panic!("{what}: no log line: {text}"));
        let conf = px.config_path().to_path_buf();
        assert!(
            line.contains("ERROR")
                && line.contains(conf.to_str().unwrap())
                && line.contains(reason),
            "{what}: {line}"
        );
        // `-t` refuses the file too.
        let out = Command::new(env!("CARGO_BIN_EXE_osmium-proxy"))
            .args(["-t", "-c", conf.to_str().unwrap()])
            .output()
            .unwrap();
        // A port in use is no error of the file.
        let refused = *what != "a port in use";
        assert_eq!(!out.status.success(), refused, "{what}: -t {out:?}");
    }
    drop(taken);
    // A good file then applies.
    rewrite_conf(&px, &pool("alpha", px.port(), &b, &[(0, 1), (1, 1)]));
    let doc = reload(&px);
    assert_eq!(pool_stat(&doc, "reload_failures"), 5);
    let text = log_of(&log);
    assert!(
        text.lines().any(|l| l.contains("INFO")
            && l.contains("reloaded")
            && l.contains("servers added: s1")),
        "{text}"
    );
}

fn direct(port: u16, key: &str) -> Option<String> {
    let r = roundtrip(port, format!("get {key}\r\n").as_bytes(), b"END\r\n");
    let r = String::from_utf8(r).unwrap();
    r.lines()
        .nth(1)
        .filter(|_| r.starts_with("VALUE"))
        .map(str::to_string)
}

/// Sends `line` to the stats port at once; the document and the answer
/// line after it ("" when none).
fn admin(stats: u16, line: &str) -> (String, String) {
    let mut s = connect(stats);
    s.write_all(line.as_bytes()).unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let end = all.find('\n').expect("a document") + 1;
    let doc = all[..end].to_string();
    serde_json::from_str::<Value>(&doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
    (doc, all[end..].to_string())
}

#[test]
fn the_stats_port_reload_proves_who_sends_it() {
    let b = [osmium_backend()];
    let first = free_port();
    let px = proxy(&pool("alpha", first, &b, &[(0, 1)]), first);

    // No token file: refused, whatever is sent.
    for line in ["reload\r\n", "reload anything\r\n"] {
        let (_, answer) = admin(px.stats_port(), line);
        assert!(
            answer.starts_with("ERROR ")
                && answer.contains("not enabled")
                && answer.ends_with("\r\n"),
            "{line:?}: {answer:?}"
        );
    }
    // A reader that sends nothing, or something else, gets the document
    // and the end of the stream, as before.
    let t = Instant::now();
    let doc = stats_doc(px.stats_port());
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(pool_stat(&doc, "reloads"), 0);
    let (_, answer) = admin(px.stats_port(), "GET / HTTP/1.0\r\n\r\n");
    assert_eq!(answer, "");
    // The pool's own port: an unknown command, no reload.
    let r = roundtrip(px.port(), b"reload\r\n", b"\r\n");
    assert_eq!(r, b"ERROR\r\n");
    assert_eq!(pool_stat(&stats_doc(px.stats_port()), "reloads"), 0);
    drop(px);

    // A token file open to others stops the start.
    let token = "tok-7f3a9c1e5b2d4068";
    let file = write_conf(&format!("admin-token-{first}"), &format!("{token}\n"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let listen = free_port();
    let out = Proxy::new(&pool("alpha", listen, &b, &[(0, 1)]), listen)
        .bin(env!("CARGO_BIN_EXE_osmium-proxy"))
        .args(["--admin-token-file", file.to_str().unwrap()])
        .run_to_exit();
    assert!(
        !out.status.success() && out.stderr.contains("chmod 600"),
        "{out:?}"
    );

    // Mode 0600: only the right token reloads.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let second = free_port();
    let px = proxy_with(
        &pool("alpha", second, &b, &[(0, 1)]),
        second,
        &["--admin-token-file", file.to_str().unwrap()],
    );
    for wrong in [
        "reload\r\n".to_string(),
        "reload wrong\r\n".into(),
        format!("reload {token}x\r\n"),
        format!("reload {}\r\n", &token[..token.len() - 1]),
        format!("reload  {token}\r\n"),
    ] {
        let (_, answer) = admin(px.stats_port(), &wrong);
        assert_eq!(answer, "ERROR bad token\r\n", "{wrong:?}");
    }
    assert_eq!(pool_stat(&stats_doc(px.stats_port()), "reloads"), 0);
    // An address's wrong tokens are bounded (`admin_guard`: 5 at once,
    // then one per 2 s): of 8 sent at once some are refused unchecked,
    // and the right token too until the address's bucket refills.
    let refused = "ERROR too many failed reload tries; try again later\r\n";
    let stats = px.stats_port();
    let at_once: Vec<_> = (0..8)
        .map(|i| std::thread::spawn(move || admin(stats, &format!("reload guess{i}\r\n")).1))
        .collect();
    let answers: Vec<String> = at_once.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(
        answers
            .iter()
            .all(|a| a == refused || a == "ERROR bad token\r\n"),
        "{answers:?}"
    );
    assert!(answers.iter().any(|a| a == refused), "{answers:?}");
    let r = roundtrip(px.port(), format!("reload {token}\r\n").as_bytes(), b"\r\n");
    assert_eq!(r, b"ERROR\r\n", "the pool's port is no admin port");
    let start = Instant::now();
    let (doc, answer) = loop {
        let (doc, answer) = admin(px.stats_port(), &format!("reload {token}\r\n"));
        if answer != refused {
            break (doc, answer);
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never obeyed");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(answer, "OK reloaded\r\n", "{doc}");
    assert_eq!(pool_stat(&stats_doc(px.stats_port()), "reloads"), 1);
    // A bad file by the same way: refused, the reason in the answer.
    rewrite_conf(&px, "alpha: [\n");
    let (_, answer) = admin(px.stats_port(), &format!("reload {token}\n"));
    assert!(
        answer.starts_with("ERROR ") && answer.contains("invalid yaml"),
        "{answer:?}"
    );
    let doc = stats_doc(px.stats_port());
    assert_eq!(
        (
            pool_stat(&doc, "reloads"),
            pool_stat(&doc, "reload_failures")
        ),
        (1, 1)
    );
    assert_eq!(
        roundtrip(px.port(), b"set k 0 0 1\r\nv\r\n", b"\r\n"),
        b"STORED\r\n"
    );
}

/// Sets `key` through the proxy until it is stored (the first tries may
/// meet a dead server).
fn set_until_stored(port: u16, key: &str, value: &str) {
    let start = Instant::now();
    loop {
        let set = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        if roundtrip(port, set.as_bytes(), b"\r\n") == b"STORED\r\n" {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never stored");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The placement checks (against nutcracker's for the same file) and the
/// failover checks, through a proxy that got its pool by a reload and was
/// then reloaded again with the same file.
#[test]
fn placement_and_failover_through_a_reloaded_proxy() {
    let mut b: Vec<Proc> = (0..4).map(|_| osmium_backend()).collect();
    let first = free_port();
    let weighted = [(0, 3), (1, 1), (2, 1), (3, 2)];
    let body = |port: u16, b: &[Proc]| {
        pool("p", port, b, &weighted).replace("  timeout: 5000\n", "  timeout: 1000\n  auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 300\n")
    };
    let px = proxy_reloaded(&body(first, &b), first, &[]);
    let y = body(px.port(), &b);
    rewrite_conf(&px, &y);
    let doc = reload(&px);
    assert_eq!(pool_stat(&doc, "reloads"), 2);
    let ring = Ring::new(&Config::parse(&y).unwrap().pools[0]);
    let order = [0, 1, 2, 3];
    placed_by(&b, &order, &ring, px.port(), "rl-placed-");
    if let Some(nc) = nutcracker_bin() {
        let nc_port = free_port();
        let n = nutcracker(&nc, &body(nc_port, &b), nc_port);
        placed_by(&b, &order, &ring, n.port(), "rl-nc-placed-");
    }

    // Server 1 dies: its keys go to server 2 (the next in the list), and
    // come back to it once it is back.
    let key_on = |server: usize, tag: &str| {
        (0..)
            .map(|i| format!("{tag}{i}"))
            .find(|k| ring.server_of(k.as_bytes()) == server)
            .unwrap()
    };
    let k1 = key_on(1, "fo-a");
    b[1].stop();
    set_until_stored(px.port(), &k1, "on-replica");
    assert_eq!(direct(b[2].port(), &k1).as_deref(), Some("on-replica"));
    let dead = b[1].port();
    b[1] = osmium_backend_on(dead);
    let k2 = key_on(1, "fo-b");
    let start = Instant::now();
    loop {
        set_until_stored(px.port(), &k2, "back");
        if direct(b[1].port(), &k2).as_deref() == Some("back") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sets `key` through `port` and says which backend got it.
fn lands_on(port: u16, backends: &[Proc], key: &str) -> Option<usize> {
    let r = roundtrip(
        port,
        format!("set {key} 0 0 1\r\nv\r\n").as_bytes(),
        b"\r\n",
    );
    assert_eq!(r, b"STORED\r\n", "{key}");
    backends
        .iter()
        .position(|b| direct(b.port(), key).as_deref() == Some("v"))
}

#[test]
fn listen_addresses_move_swap_and_follow_a_renamed_pool() {
    let b: Vec<Proc> = (0..2).map(|_| osmium_backend()).collect();
    let (first, p2, p3) = (free_port(), free_port(), free_port());
    let px = proxy(
        &(pool("alpha", first, &b, &[(0, 1)]) + &pool("beta", p2, &b, &[(1, 1)])),
        first,
    );
    let p1 = px.port();
    let kept = connect(p1);
    let mut kept_r = BufReader::new(kept.try_clone().unwrap());
    let mut kept_w = kept;

    // The two pools swap addresses.
    rewrite_conf(
        &px,
        &(pool("alpha", p2, &b, &[(0, 1)]) + &pool("beta", p1, &b, &[(1, 1)])),
    );
    reload(&px);
    assert_eq!(lands_on(p1, &b, "swap-1"), Some(1), "p1 is beta's now");
    assert_eq!(lands_on(p2, &b, "swap-2"), Some(0), "p2 is alpha's now");
    // A client of alpha from before still talks to alpha.
    kept_w.write_all(b"set kept-1 0 0 1\r\nv\r\n").unwrap();
    assert_eq!(read_line(&mut kept_r).unwrap(), "STORED\r\n");
    assert_eq!(direct(b[0].port(), "kept-1").as_deref(), Some("v"));

    // alpha moves to a new address; beta is renamed gamma (same address).
    rewrite_conf(
        &px,
        &(pool("alpha", p3, &b, &[(0, 1)]) + &pool("gamma", p1, &b, &[(1, 1)])),
    );
    let doc = reload(&px);
    assert_eq!(pools(&doc), ["alpha", "gamma"]);
    assert!(std::net::TcpStream::connect(("127.0.0.1", p2)).is_err());
    assert_eq!(lands_on(p3, &b, "moved-1"), Some(0));
    assert_eq!(lands_on(p1, &b, "renamed-1"), Some(1));
    kept_w.write_all(b"set kept-2 0 0 1\r\nv\r\n").unwrap();
    assert_eq!(read_line(&mut kept_r).unwrap(), "STORED\r\n");
    assert_eq!(direct(b[0].port(), "kept-2").as_deref(), Some("v"));
}
