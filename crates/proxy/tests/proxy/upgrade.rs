//! osmium-proxy's binary upgrade in place (SIGUSR2), over real processes
//! (osmium servers as backends): the proxy is started from a copy of its
//! binary in a directory of the test's own; an upgrade replaces that file
//! by `rename` (a new inode, as dpkg does) and sends SIGUSR2.
//!
//! Covered: after an upgrade the proxy has the same PID and runs the new
//! inode; a client connected before is served on the same socket (a key
//! set before is read back); clients pipelining requests all along get
//! every reply, in order, across the upgrade; a client connecting all
//! along is never refused (the listener is the same socket, its backlog
//! kept); a unix pool's listener is the same socket file, its client
//! served, and the stats port keeps its address and its counts. A new
//! binary that exits 1 at the check, and one that passes it
//! but refuses the state (`OSMIUM_UPGRADE_REFUSE`: it hands the state
//! back to the old image), leave the proxy serving: the same PID, the
//! old inode, the reason in the log, the client connected before still
//! served; a good upgrade works after each.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use osmium_test_harness::Running;

use crate::common::{self, free_port, osmium_backend, read_until, Proc};

use osmium_test_harness::{exe_inode, Images as Dir};

/// The osmium-proxy under test.
fn proxy_program() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_osmium-proxy"))
}

fn start(dir: &Dir, backends: &[&Proc]) -> Running {
    let port = free_port();
    let mut yaml = format!(
        "p:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 1000\n  servers:\n"
    );
    for b in backends {
        yaml.push_str(&format!("   - 127.0.0.1:{}:1\n", b.port()));
    }
    osmium_test_harness::Proxy::new(&yaml, port)
        .bin(dir.path("osmium-proxy"))
        .start()
}

/// Waits until the log says `needle` `n` times.
fn wait_for_log(px: &Running, needle: &str, n: usize) {
    osmium_test_harness::wait_until(
        &format!("{n} x {needle:?} in the log"),
        Duration::from_secs(20),
        || px.stderr_text().matches(needle).count() >= n,
    );
}

fn connect(px: &Running) -> TcpStream {
    let s = px.connect();
    s.set_nodelay(true).unwrap();
    s
}

fn set(s: &mut TcpStream, key: &str, value: &str) {
    s.write_all(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes())
        .unwrap();
    assert_eq!(read_until(s, b"\r\n"), b"STORED\r\n", "set {key}");
}

fn get(s: &mut TcpStream, key: &str) -> Vec<u8> {
    s.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
    read_until(s, b"END\r\n")
}

fn value_reply(key: &str, value: &str) -> Vec<u8> {
    format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len()).into_bytes()
}

/// Traffic all along an upgrade, until `done` and one round more:
/// pipelining clients (each round 50 sets and 50 gets in one write, every
/// reply checked in order) and a connector (a new connection at a time,
/// each answered: any refusal or error fails the test).
struct Traffic {
    done: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Traffic {
    fn start(port: u16, pipelines: usize) -> Traffic {
        let done = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for p in 0..pipelines {
            let (done, rounds) = (Arc::clone(&done), Arc::clone(&rounds));
            threads.push(std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut round = 0u64;
                loop {
                    let last = done.load(Ordering::Relaxed);
                    let mut req = Vec::new();
                    let mut want = Vec::new();
                    for i in 0..50 {
                        let (key, value) = (format!("pipe{p}-{i}"), format!("r{round}-{i}"));
                        req.extend_from_slice(
                            format!("set {key} 0 0 {}\r\n{value}\r\nget {key}\r\n", value.len())
                                .as_bytes(),
                        );
                        want.extend_from_slice(b"STORED\r\n");
                        want.extend(value_reply(&key, &value));
                    }
                    s.write_all(&req).expect("write a round");
                    let mut got = vec![0u8; want.len()];
                    s.read_exact(&mut got).expect("read a round's replies");
                    assert_eq!(
                        String::from_utf8_lossy(&got),
                        String::from_utf8_lossy(&want),
                        "pipeline {p}, round {round}"
                    );
                    round += 1;
                    rounds.fetch_add(1, Ordering::Relaxed);
                    if last {
                        return;
                    }
                }
            }));
        }
        let stop = Arc::clone(&done);
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            loop {
                let last = stop.load(Ordering::Relaxed);
                let mut s = TcpStream::connect(("127.0.0.1", port))
                    .unwrap_or_else(|e| panic!("connection {n} refused: {e}"));
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                s.write_all(format!("get absent{n}\r\n").as_bytes())
                    .unwrap();
                assert_eq!(read_until(&mut s, b"END\r\n"), b"END\r\n", "connection {n}");
                n += 1;
                if last {
                    return;
                }
                // Paced, not to run out of ephemeral ports.
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
        Traffic {
            done,
            rounds,
            threads,
        }
    }

    /// Waits until the pipelines did `n` rounds more than now.
    fn wait_rounds(&self, n: u64) {
        let from = self.rounds.load(Ordering::Relaxed);
        osmium_test_harness::wait_until("rounds of traffic", Duration::from_secs(20), || {
            self.rounds.load(Ordering::Relaxed) >= from + n
        });
    }

    fn finish(self) {
        self.done.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("a traffic thread failed");
        }
    }
}

#[test]
fn an_upgrade_keeps_the_listener_and_the_clients_and_answers_every_request() {
    let dir = Dir::new("carried");
    let first = dir.install_program("osmium-proxy", proxy_program());
    let (b1, b2) = (osmium_backend(), osmium_backend());
    let mut px = start(&dir, &[&b1, &b2]);
    let pid = px.pid();
    assert_eq!(exe_inode(pid), first);
    let mut before = connect(&px);
    set(&mut before, "kept", "hello");
    // Half a request, its end sent after the upgrade.
    before.write_all(b"get ke").unwrap();

    let traffic = Traffic::start(px.port(), 2);
    traffic.wait_rounds(4);
    let new = dir.install_program("osmium-proxy", proxy_program());
    px.send_signal(libc::SIGUSR2);
    wait_for_log(&px, "upgrade done:", 1);
    traffic.wait_rounds(4);
    traffic.finish();

    assert_eq!(px.pid(), pid);
    assert_eq!(exe_inode(pid), new, "runs the new file");
    before.write_all(b"pt\r\n").unwrap();
    assert_eq!(
        read_until(&mut before, b"END\r\n"),
        value_reply("kept", "hello")
    );
    let log = px.stderr_text();
    assert!(log.contains("passed the check"), "{log}");
    assert!(!log.contains("upgrade refused"), "{log}");
    assert!(log.contains("clients adopted"), "{log}");

    // Upgraded, it upgrades again.
    let newer = dir.install_program("osmium-proxy", proxy_program());
    px.send_signal(libc::SIGUSR2);
    wait_for_log(&px, "upgrade done:", 2);
    assert_eq!(exe_inode(pid), newer);
    assert_eq!(get(&mut before, "kept"), value_reply("kept", "hello"));
}

/// Sends `request` on a unix socket and reads until the reply ends with
/// `end`.
fn unix_roundtrip(s: &mut UnixStream, request: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).expect("read a reply");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[test]
fn a_unix_pool_and_the_stats_port_are_kept_with_their_counters() {
    let dir = Dir::new("unix");
    dir.install_program("osmium-proxy", proxy_program());
    let b = osmium_backend();
    let (port, sock) = (free_port(), dir.path("pool.sock"));
    let yaml = format!(
        "p:\n  listen: 127.0.0.1:{port}\n  servers:\n   - 127.0.0.1:{b}:1\n\
         u:\n  listen: {sock}\n  servers:\n   - 127.0.0.1:{b}:1\n",
        b = b.port(),
        sock = sock.display()
    );
    let mut px = osmium_test_harness::Proxy::new(&yaml, port)
        .bin(dir.path("osmium-proxy"))
        .start();
    let pid = px.pid();
    let socket_file = std::fs::metadata(&sock)
        .expect("the unix socket's file")
        .ino();
    let mut before = UnixStream::connect(&sock).expect("connect to the unix pool");
    before
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(
        unix_roundtrip(&mut before, b"set kept 0 0 5\r\nhello\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    // A reload with the same file: the counts the stats port shows.
    common::reload(&px);
    let stats_port = px.stats_port();

    px.send_signal(libc::SIGUSR2);
    wait_for_log(&px, "upgrade done:", 1);
    assert_eq!(px.pid(), pid);
    assert_eq!(
        unix_roundtrip(&mut before, b"get kept\r\n", b"END\r\n"),
        value_reply("kept", "hello"),
        "a unix client connected before"
    );
    assert_eq!(
        std::fs::metadata(&sock).expect("the socket's file").ino(),
        socket_file,
        "the same socket file: the listener was kept, not bound again"
    );
    let mut after = UnixStream::connect(&sock).expect("connect after the upgrade");
    after
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(
        unix_roundtrip(&mut after, b"get kept\r\n", b"END\r\n"),
        value_reply("kept", "hello")
    );
    let doc = common::stats_doc(stats_port);
    assert_eq!(common::pool_stat(&doc, "reloads"), 1, "{doc}");
    assert!(doc.contains("\"u\": {"), "{doc}");
}

#[test]
fn a_new_binary_that_exits_at_the_check_leaves_the_proxy_serving() {
    let dir = Dir::new("exits");
    let first = dir.install_program("osmium-proxy", proxy_program());
    let b = osmium_backend();
    let mut px = start(&dir, &[&b]);
    let pid = px.pid();
    let mut before = connect(&px);
    set(&mut before, "kept", "hello");

    dir.install_script("osmium-proxy", "exit 1");
    px.send_signal(libc::SIGUSR2);
    wait_for_log(&px, "upgrade refused", 1);
    assert_eq!(px.pid(), pid);
    assert_eq!(exe_inode(pid), first, "the old image serves on");
    let log = px.stderr_text();
    assert!(log.contains("did not answer the check"), "{log}");
    assert_eq!(get(&mut before, "kept"), value_reply("kept", "hello"));
    assert_eq!(get(&mut connect(&px), "kept"), value_reply("kept", "hello"));

    // A good binary then upgrades.
    let new = dir.install_program("osmium-proxy", proxy_program());
    px.send_signal(libc::SIGUSR2);
    wait_for_log(&px, "upgrade done:", 1);
    assert_eq!(exe_inode(pid), new);
    assert_eq!(get(&mut before, "kept"), value_reply("kept", "hello"));
}

#[test]
fn a_new_image_that_refuses_the_state_hands_everything_back() {
    let dir = Dir::new("refused");
    let first = dir.install_program("osmium-proxy", proxy_program());
    let b = osmium_backend();
    let mut px = start(&dir, &[&b]);
    let pid = px.pid();
    let mut before = connect(&px);
    set(&mut before, "kept", "hello");

    dir.install_refusing_image("osmium-proxy", proxy_program());
    let traffic = Traffic::start(px.port(), 1);
    traffic.wait_rounds(2);
    px.send_signal(libc::SIGUSR2);
    wait_for_log(&px, "serving with osmium-proxy", 1);
    traffic.wait_rounds(2);
    traffic.finish();
    assert_eq!(px.pid(), pid);
    assert_eq!(exe_inode(pid), first, "the old image serves on");
    let log = px.stderr_text();
    assert!(
        log.contains("refused by the new image") && log.contains("OSMIUM_UPGRADE_REFUSE is set"),
        "{log}"
    );
    assert_eq!(get(&mut before, "kept"), value_reply("kept", "hello"));

    // A good binary then upgrades.
    let new = dir.install_program("osmium-proxy", proxy_program());
    px.send_signal(libc::SIGUSR2);
    wait_for_log(&px, "upgrade done:", 1);
    assert_eq!(exe_inode(pid), new);
    assert_eq!(get(&mut before, "kept"), value_reply("kept", "hello"));
}
