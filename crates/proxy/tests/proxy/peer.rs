//! osmium-proxy as a replication peer (`replication_secret:`), against
//! real osmium servers replicating in a ring with the tests' secret: a
//! peer connection's writes and deletes are not replicated (a client's
//! are); a wrong secret, a server without one and a fake server that
//! does not know it are refused, the fake one hearing nothing after the
//! hello; a peer connection is Noise frames (no command in clear); a
//! reload that adds a fourth server to a three-server ring tells
//! the new server and its predecessor their targets (the new server ends
//! with its predecessor's keys) and one that removes it restores the
//! ring; a pool without the secret tells nobody and says the operator
//! must; a secret file open to others, or a weak secret, is refused at
//! `-t` and at reload;
//! a warm move in a replicated ring keeps every moved key on its new owner.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;
use common::{
    conf_path, free_port, osmium_backend, osmium_bin, pool_stat, proxy_started, reload,
    reload_expect, rewrite_conf, stats_doc, write_conf, Proc,
};
use osmium_proxy::peer::{connect_peer, Secret};
use osmium_test_harness::Osmium;

const SECRET: &[u8] = b"0a1b2c3d4e5f60718293a4b5c6d7e8f9";

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// A secret file of `content` with `mode`, under the tests' scratch
/// directory.
fn secret_file(name: &str, content: &[u8], mode: u32) -> PathBuf {
    let path = write_conf(name, "");
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// The tests' secret (mode 0600, a trailing newline): one file, written
/// once per test process.
fn the_secret() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let mut content = SECRET.to_vec();
        content.push(b'\n');
        secret_file("secret", &content, 0o600)
    })
    .clone()
}

/// An osmium server on `port` (its peers name it: a start that finds it
/// taken is tried again on it) holding the secret at `secret`, with
/// `args`; killed (by PID) when dropped.
fn node(port: u16, secret: &Path, args: &[String]) -> Proc {
    Osmium::new()
        .bin(osmium_bin())
        .only_port(port)
        .threads(2)
        .memory(64)
        .arg("--replication-secret")
        .arg(secret)
        .args(args)
        .start()
}

/// A server of the ring, replicating to `target`.
fn ring(port: u16, secret: &Path, target: u16) -> Proc {
    node(port, secret, &["--replicate-to".into(), addr(target)])
}

/// A plain client of `node`.
fn client(node: &Proc) -> Client {
    Client::new(node.port())
}

/// A plain client connection.
struct Client(BufReader<TcpStream>);

impl Client {
    fn new(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client(BufReader::new(s))
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.0.read_line(&mut l).unwrap();
        l.trim_end().to_string()
    }

    fn call(&mut self, req: &str) -> String {
        self.0.get_mut().write_all(req.as_bytes()).unwrap();
        self.line()
    }

    fn set(&mut self, key: &str, value: &str) {
        let req = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(self.call(&req), "STORED");
    }

    fn has(&mut self, key: &str) -> bool {
        match self.call(&format!("mg {key} v\r\n")).as_str() {
            "EN" => false,
            l if l.starts_with("VA ") => {
                self.line();
                true
            }
            other => panic!("mg {key}: {other}"),
        }
    }

    fn stats(&mut self, which: &str) -> HashMap<String, String> {
        let req = if which.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {which}\r\n")
        };
        self.0.get_mut().write_all(req.as_bytes()).unwrap();
        let mut m = HashMap::new();
        loop {
            let l = self.line();
            if l == "END" {
                return m;
            }
            let mut f = l.splitn(3, ' ');
            if let (Some("STAT"), Some(k), v) = (f.next(), f.next(), f.next()) {
                m.insert(k.to_string(), v.unwrap_or("").to_string());
            }
        }
    }

    fn stat(&mut self, which: &str, name: &str) -> String {
        self.stats(which).remove(name).unwrap_or_default()
    }

    /// The server's `replicate_to` (`stats settings`).
    fn targets(&mut self) -> String {
        self.stat("settings", "replicate_to")
    }
}

fn wait(what: &str, ok: impl FnMut() -> bool) {
    osmium_test_harness::wait_until(what, Duration::from_secs(15), ok);
}

/// Waits until `c`'s link to `port` is up with its full copy made.
fn linked(c: &mut Client, port: u16) {
    wait(&format!("link to {port} up"), || {
        let s = c.stats("");
        s.get("replica_0_addr") == Some(&addr(port))
            && s.get("replica_0_link").map(String::as_str) == Some("up")
            && s.get("replica_0_full_copies").map(String::as_str) != Some("0")
    });
}

fn secret() -> Secret {
    Secret::new(SECRET).unwrap()
}

#[test]
fn a_peer_connections_writes_are_not_replicated() {
    let file = the_secret();
    let (pa, pb) = (free_port(), free_port());
    let a = ring(pa, &file, pb);
    let b = ring(pb, &file, pa);
    let (mut ca, mut cb) = (client(&a), client(&b));
    linked(&mut ca, pb);
    linked(&mut cb, pa);
    ca.set("k1", "one");
    ca.set("k2", "two");
    wait("A's keys on B", || cb.has("k1") && cb.has("k2"));

    let mut p = connect_peer(&addr(pa), &secret(), Duration::from_secs(5)).expect("peer");
    // A quiet delete and a write, then the no-op that answers for them.
    p.send_line("md k1 q").unwrap();
    p.send(b"ms k3 1 T0\r\nx\r\n").unwrap();
    assert_eq!(p.read_line().unwrap(), "HD");
    assert_eq!(p.command("mn").unwrap(), "MN");
    assert!(!ca.has("k1"));
    assert!(ca.has("k3"));
    // A client's write after them: once it is on B, so would they be.
    ca.set("marker", "m");
    wait("the marker on B", || cb.has("marker"));
    assert!(cb.has("k1"), "the peer's delete was replicated");
    assert!(!cb.has("k3"), "the peer's write was replicated");
    // A client's delete is.
    assert_eq!(ca.call("delete k2\r\n"), "DELETED");
    wait("the client's delete on B", || !cb.has("k2"));
    drop(p);
}

#[test]
fn wrong_secrets_and_fake_servers_are_refused() {
    let file = the_secret();
    let a = node(free_port(), &file, &[]);
    let mut ca = client(&a);
    let t = Duration::from_secs(5);

    // The right secret: a peer (and replica_targets is a peer's).
    let mut p = connect_peer(&addr(a.port()), &secret(), t).expect("peer");
    let answer = p.command("replica_targets 127.0.0.1:1").unwrap();
    assert!(answer.starts_with("SERVER_ERROR"), "{answer}");

    // Another secret: the server closes the connection at the hello.
    let other = Secret::new(b"ffeeddccbbaa99887766554433221100").unwrap();
    let e = connect_peer(&addr(a.port()), &other, t)
        .err()
        .expect("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("closed the connection"), "{e}");
    assert_eq!(ca.stat("", "replica_auth_failures"), "1");

    // A server without a secret answers replica_hello ERROR.
    let plain = osmium_backend();
    let e = connect_peer(&addr(plain.port()), &secret(), t)
        .err()
        .expect("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    assert!(e.to_string().contains("\"ERROR\""), "{e}");

    // A fake server: any answer, then it records what comes.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = fake.local_addr().unwrap().port();
    let heard = std::thread::spawn(move || {
        let (s, _) = fake.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(s);
        let mut first = String::new();
        r.read_line(&mut first).unwrap();
        assert!(first.starts_with("replica_hello proxy "), "{first}");
        let answer = format!("REPLICA_HELLO {}\r\n", "ab".repeat(64));
        r.get_mut().write_all(answer.as_bytes()).unwrap();
        let mut rest = String::new();
        let _ = r.read_to_string(&mut rest);
        rest
    });
    let e = connect_peer(&addr(port), &secret(), t)
        .err()
        .expect("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    let rest = heard.join().unwrap();
    assert_eq!(rest, "", "the fake server heard more than replica_hello");
}

/// What a peer connection sends is Noise frames: a server that is not
/// osmium (a recorder) sees the hello and then no command in clear.
#[test]
fn a_peer_connection_sends_nothing_in_clear() {
    let file = the_secret();
    let a = node(free_port(), &file, &[]);
    // A relay to the real server that records both directions.
    let relay = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = relay.local_addr().unwrap().port();
    let target = a.port();
    let recorded = std::thread::spawn(move || {
        let (client, _) = relay.accept().unwrap();
        let server = TcpStream::connect(("127.0.0.1", target)).unwrap();
        let pipe = |mut from: TcpStream, mut to: TcpStream| {
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 || to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    seen.extend_from_slice(&buf[..n]);
                }
                let _ = to.shutdown(std::net::Shutdown::Write);
                seen
            })
        };
        let up = pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
        let down = pipe(server, client);
        (up.join().unwrap(), down.join().unwrap())
    });
    let mut p = connect_peer(&addr(port), &secret(), Duration::from_secs(5)).expect("peer");
    p.send(b"ms clearkey 11 T0\r\nclear-value\r\n").unwrap();
    assert_eq!(p.read_line().unwrap(), "HD");
    let answer = p.command("replica_targets 127.0.0.1:1").unwrap();
    assert!(answer.starts_with("SERVER_ERROR"), "{answer}");
    drop(p);
    let (up, down) = recorded.join().unwrap();
    for (dir, bytes) in [("to the server", &up), ("from the server", &down)] {
        for word in [
            &b"clearkey"[..],
            b"clear-value",
            b"replica_targets",
            b"replica_link",
            b"HD\r\n",
        ] {
            assert!(
                !bytes.windows(word.len()).any(|w| w == word),
                "{} in clear {dir}",
                String::from_utf8_lossy(word)
            );
        }
    }
    assert!(up.starts_with(b"replica_hello proxy "));
    assert!(down.starts_with(b"REPLICA_HELLO "));
}

fn pool(port: u16, servers: &[u16], more: &str) -> String {
    let mut y = format!(
        "ring:\n  listen: 127.0.0.1:{port}\n  failover: replica\n  warm_moves: false\n{more}  servers:\n"
    );
    for s in servers {
        y.push_str(&format!("   - 127.0.0.1:{s}:1\n"));
    }
    y
}

fn proxy_log(port: u16) -> PathBuf {
    conf_path(&format!("proxy-{port}.log"))
}

fn log_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_reload_tells_a_replicated_ring_its_new_targets() {
    let file = the_secret();
    let (pa, pb, pc, pd) = (free_port(), free_port(), free_port(), free_port());
    let a = ring(pa, &file, pb);
    let b = ring(pb, &file, pc);
    let c = ring(pc, &file, pa);
    // D starts pointing elsewhere than its place in the ring: the proxy
    // sets it.
    let d = ring(pd, &file, pb);
    let (mut ca, mut cb, mut cc, mut cd) = (client(&a), client(&b), client(&c), client(&d));
    linked(&mut ca, pb);
    linked(&mut cb, pc);
    linked(&mut cc, pa);
    linked(&mut cd, pb);
    let keys: Vec<String> = (0..50).map(|i| format!("c-own-{i}")).collect();
    for k in &keys {
        cc.set(k, k);
    }
    wait("C's keys on A", || keys.iter().all(|k| ca.has(k)));
    assert!(!cd.has(&keys[0]));

    let port = free_port();
    let more = format!("  replication_secret: {}\n", file.display());
    let log = proxy_log(port);
    let _ = std::fs::remove_file(&log);
    let px = proxy_started(
        &pool(port, &[pa, pb, pc], &more),
        port,
        &["-v", "1", "-o", log.to_str().unwrap()],
    );
    rewrite_conf(&px, &pool(px.port(), &[pa, pb, pc, pd], &more));
    reload(&px);
    wait("D replicates to A, C to D", || {
        cd.targets() == addr(pa) && cc.targets() == addr(pd)
    });
    assert_eq!(ca.targets(), addr(pb));
    assert_eq!(cb.targets(), addr(pc));
    linked(&mut cc, pd);
    wait("C's keys on D", || keys.iter().all(|k| cd.has(k)));
    let told_d = format!("server {} now replicates to {}", addr(pd), addr(pa));
    let told_c = format!("server {} now replicates to {}", addr(pc), addr(pd));
    wait("both told in the log", || {
        let l = log_text(&log);
        l.contains(&told_d) && l.contains(&told_c)
    });
    let l = log_text(&log);
    assert!(
        l.find(&told_d) < l.find(&told_c),
        "the new server is told first: {l}"
    );
    assert_eq!(l.matches("now replicates to").count(), 2, "{l}");

    // D leaves: C replicates to A again, D is left as it is.
    rewrite_conf(&px, &pool(px.port(), &[pa, pb, pc], &more));
    reload(&px);
    wait("C replicates to A", || cc.targets() == addr(pa));
    linked(&mut cc, pa);
    assert_eq!(cd.targets(), addr(pa));
    let told_back = format!("server {} now replicates to {}", addr(pc), addr(pa));
    wait("told in the log", || log_text(&log).contains(&told_back));
    // C's writes reach A again.
    cc.set("c-after", "x");
    wait("C's write on A", || ca.has("c-after"));
    assert!(
        !log_text(&log).contains("could not make server"),
        "{}",
        log_text(&log)
    );
}

#[test]
fn without_a_secret_the_operator_is_told_and_bad_files_are_refused() {
    let s: Vec<_> = (0..3).map(|_| osmium_backend()).collect();
    let ports: Vec<u16> = s.iter().map(|p| p.port()).collect();
    let port = free_port();
    let log = proxy_log(port);
    let _ = std::fs::remove_file(&log);
    let other = free_port();
    let rehash = |servers: &[u16]| {
        let mut y =
            format!("other:\n  listen: 127.0.0.1:{other}\n  failover: rehash\n  servers:\n");
        for s in servers {
            y.push_str(&format!("   - 127.0.0.1:{s}:1\n"));
        }
        y
    };
    let y = |port: u16, n: usize, more: &str| {
        format!("{}{}", pool(port, &ports[..n], more), rehash(&ports[..n]))
    };
    let px = proxy_started(&y(port, 2, ""), port, &["-o", log.to_str().unwrap()]);

    // A weak secret: refused by -t.
    let weak = secret_file("weak-secret", b"winter2024\n", 0o600);
    let more = format!("  replication_secret: {}\n", weak.display());
    let bad = write_conf("weak.yml", &y(px.port(), 3, &more));
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-proxy"))
        .args(["-t", "-c", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("replication_secret:") && err.contains("at least 128 random bits"),
        "{err}"
    );

    // A secret file open to others: refused by -t and by a reload.
    let open = secret_file("open-secret", b"0a1b2c3d4e5f60718293a4b5c6d7e8f9\n", 0o644);
    let more = format!("  replication_secret: {}\n", open.display());
    let bad = write_conf("bad.yml", &y(px.port(), 3, &more));
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-proxy"))
        .args(["-t", "-c", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("replication_secret:") && err.contains("open to group or others"),
        "{err}"
    );
    rewrite_conf(&px, &y(px.port(), 3, &more));
    reload_expect(&px, false);

    // No secret: the servers change, nobody is told, one WARN says what
    // to do (the rehash pool says nothing).
    rewrite_conf(&px, &y(px.port(), 3, ""));
    reload(&px);
    let text = log_text(&log);
    let warns: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("replicate in a ring"))
        .collect();
    assert_eq!(warns.len(), 1, "{text}");
    assert!(
        warns[0].contains("WARN") && warns[0].contains("pool ring"),
        "{text}"
    );
    let want = format!("{} -> {}", addr(ports[2]), addr(ports[0]));
    assert!(warns[0].contains(&want), "{text}");
    // It points at the manual's steps for doing it by hand.
    assert!(
        warns[0].contains("docs/replication.md \"Changing the ring\""),
        "{text}"
    );
    assert!(!text.contains("now replicates to"), "{text}");
}

/// A warm move in a replicated ring: 3 servers, a 4th added after C
/// (C → D → A). Each key's new owner keeps the copy the move put there:
/// with the secret the old owners' drops go over peer connections (not
/// replicated, so C's drop of a key moved to D is not passed on to D);
/// without it the old copies are left, with one WARN line.
fn warm_move_in_a_ring(with_secret: bool) {
    let file = the_secret();
    let (pa, pb, pc, pd) = (free_port(), free_port(), free_port(), free_port());
    let nodes = [
        ring(pa, &file, pb),
        ring(pb, &file, pc),
        ring(pc, &file, pa),
        ring(pd, &file, pa),
    ];
    let port = free_port();
    let more = if with_secret {
        format!("  replication_secret: {}\n", file.display())
    } else {
        String::new()
    };
    let warm = |y: String| y.replace("warm_moves: false", "warm_moves: true");
    let log = proxy_log(port);
    let _ = std::fs::remove_file(&log);
    let px = proxy_started(
        &warm(pool(port, &[pa, pb, pc], &more)),
        port,
        &["-v", "1", "-o", log.to_str().unwrap()],
    );
    let keys: Vec<String> = (0..2000).map(|i| format!("ring-move-{i}")).collect();
    let mut through = Client::new(px.port());
    for k in &keys {
        through.set(k, k);
    }
    let new_yaml = warm(pool(px.port(), &[pa, pb, pc, pd], &more));
    rewrite_conf(&px, &new_yaml);
    reload(&px);
    let start = Instant::now();
    while pool_stat(&stats_doc(px.stats_port()), "migrating") != 0
        || pool_stat(&stats_doc(px.stats_port()), "moved_keys") == 0
    {
        assert!(start.elapsed() < Duration::from_secs(60), "move not done");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Replicated deletes, had there been any, arrive within this.
    std::thread::sleep(Duration::from_millis(500));
    let cfg = osmium_proxy::Config::parse(&new_yaml).unwrap();
    let ring = osmium_proxy::ring::Ring::new(&cfg.pools[0]);
    let mut clients: Vec<Client> = nodes.iter().map(client).collect();
    let lost: Vec<&String> = keys
        .iter()
        .filter(|k| !clients[ring.server_of(k.as_bytes())].has(k))
        .collect();
    assert!(
        lost.is_empty(),
        "{} keys missing on their new owner, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let moved_to_d = keys
        .iter()
        .filter(|k| ring.server_of(k.as_bytes()) == 3)
        .count();
    assert!(moved_to_d > 100, "{moved_to_d} keys moved to D");
    let warned = log_text(&log).contains("its old copies of moved keys are left to expire");
    assert_eq!(warned, !with_secret, "{}", log_text(&log));
}

#[test]
fn a_warm_move_in_a_replicated_ring_keeps_the_moved_keys() {
    warm_move_in_a_ring(true);
}

#[test]
fn without_the_secret_a_replicated_rings_old_copies_are_kept() {
    warm_move_in_a_ring(false);
}
