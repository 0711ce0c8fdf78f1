//! Binary upgrades in place (SIGUSR2), over real processes: the server is
//! started from a copy of the binary in a directory of the test's own;
//! the upgrade replaces that file by `rename` (a new inode, as dpkg
//! does) and sends SIGUSR2.
//!
//! Covered: an upgrade of an idle server keeps its PID, runs the new
//! inode (`/proc/PID/exe`) and serves again, twice in a row, with `-e`
//! keeping the cache; without `-e` the cache is kept too (item memory in
//! a memfd handed over): 20,000 keys of 1 byte to 100 KB read back byte
//! for byte after an upgrade to the same file and one to a new copy, and
//! after a new image refused the state and handed it back to the old
//! one, with one memfd open after each (the state's copy closed); a new
//! binary whose check does not say `takes=memory` is handed none; with
//! `-o item_memory=anonymous` the cache starts empty; failed
//! upgrades leave the old image serving (same
//! PID, same exe inode, a log line naming the reason, a connection
//! opened before still served when nothing stopped): a file that is not
//! executable, a binary that exits 1 at the check, one that reads only a
//! newer state format, and one that passes the check but refuses the
//! state (`OSMIUM_UPGRADE_REFUSE`), whose fallback runs the old image
//! again; after each, a good upgrade still works. A second SIGUSR2 while
//! the check runs is ignored with a log line.
//!
//! Sockets carried: the TCP listener, the UDP socket and the unix
//! socket (and its file) are the very same sockets after an upgrade and
//! after a refused one (their inodes), while a client connecting all
//! along is never refused; a connection made before an upgrade is served
//! after it on the same socket, and a `set` line cut in two by the
//! upgrade is answered; under a loader's traffic (8 clients of verified
//! GET/SET, a new connection every 50 ms: `upgrade_load`) an upgrade and
//! a refused one fail no request, refuse no connection and lose no
//! acknowledged write (the longest wait is printed, not asserted).
//!
//! With a flash tier: `upgrade_flash` (GETs of keys on flash pipelined
//! across an upgrade, the tier kept with and without `-e`); kill -9 at
//! each point of an upgrade: `upgrade_kill`.

use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use osmium_test_harness::{CacheServer, Running};

use crate::common::{self, tcp::LineClient};

pub(crate) use osmium_test_harness::{exe_inode, Images as Dir};

/// The osmium under test copied into an upgrade's directory.
pub(crate) trait InstallOsmium {
    /// The osmium under test copied to `name` (a new inode); its inode.
    fn install_osmium(&self, name: &str) -> u64;
    /// At `osmium`, an image that passes the check and refuses the state
    /// it is handed: the upgrade falls back to the old image.
    fn install_refusing_osmium(&self);
}

impl InstallOsmium for Dir {
    fn install_osmium(&self, name: &str) -> u64 {
        self.install_program(name, Path::new(env!("CARGO_BIN_EXE_osmium")))
    }

    fn install_refusing_osmium(&self) {
        self.install_refusing_image("osmium", Path::new(env!("CARGO_BIN_EXE_osmium")));
    }
}

fn server(dir: &Dir) -> CacheServer {
    common::osmium()
        .bin(dir.path("osmium"))
        .args(["-m", "64", "-t", "2"])
}

/// How many times the server's log says `needle`.
fn count(srv: &Running, needle: &str) -> usize {
    srv.stderr_text().matches(needle).count()
}

/// Waits until the log says `needle` `n` times.
fn wait_for_log(srv: &Running, needle: &str, n: usize) {
    common::wait_until(&format!("{n} x {needle:?} in the log"), || {
        count(srv, needle) >= n
    });
}

/// A client once the server answers on its port again (after an exec it
/// binds its listeners anew).
fn client_when_serving(srv: &Running) -> LineClient {
    common::wait_until("the server answers again", || {
        std::net::TcpStream::connect(srv.addr()).is_ok()
    });
    LineClient::to(srv)
}

fn set_get(c: &mut LineClient, key: &str, value: &str) {
    c.send(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
    assert_eq!(c.line(), "STORED\r\n");
    c.send(format!("get {key}\r\n").as_bytes());
    assert_eq!(c.line(), format!("VALUE {key} 0 {}\r\n", value.len()));
    assert_eq!(c.line(), format!("{value}\r\n"));
    assert_eq!(c.line(), "END\r\n");
}

/// Upgrades to a fresh copy of the binary and checks it runs: the same
/// PID, the new inode, serving. The number of upgrades done so far is `n`.
fn upgrade_ok(dir: &Dir, srv: &mut Running, n: usize) {
    let pid = srv.pid();
    let new = dir.install_osmium("osmium");
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(srv, "upgrade done:", n);
    assert_eq!(srv.pid(), pid);
    assert_eq!(exe_inode(pid), new, "runs the new file");
    let mut c = client_when_serving(srv);
    set_get(&mut c, &format!("after{n}"), "fresh");
}

#[test]
fn upgrade_of_an_idle_server_keeps_its_pid_and_runs_the_new_inode() {
    let dir = Dir::new("idle");
    let first = dir.install_osmium("osmium");
    let mut srv = server(&dir).start();
    let pid = srv.pid();
    assert_eq!(exe_inode(pid), first);
    // Twice: an upgraded server upgrades again.
    upgrade_ok(&dir, &mut srv, 1);
    upgrade_ok(&dir, &mut srv, 2);
    assert!(srv.is_running());
    let log = srv.stderr_text();
    assert!(log.contains("passed the check"), "{log}");
    assert_eq!(count(&srv, "upgrade refused"), 0, "{log}");
}

#[test]
fn an_upgrade_with_a_memory_file_keeps_the_cache() {
    let dir = Dir::new("memfile");
    dir.install_osmium("osmium");
    let file = dir.path("cache.mem");
    let mut srv = server(&dir).arg("-e").arg(&file).start();
    let mut c = LineClient::to(&srv);
    for i in 0..100 {
        set_get(&mut c, &format!("k{i}"), &format!("value {i}"));
    }
    upgrade_ok(&dir, &mut srv, 1);
    let mut c = client_when_serving(&srv);
    for i in 0..100 {
        c.send(format!("get k{i}\r\n").as_bytes());
        let value = format!("value {i}");
        assert_eq!(c.line(), format!("VALUE k{i} 0 {}\r\n", value.len()));
        assert_eq!(c.line(), format!("{value}\r\n"));
        assert_eq!(c.line(), "END\r\n");
    }
}

/// Replaces the binary by what `install` puts at `osmium`, sends SIGUSR2
/// and waits until the log says `reason` (the `n`th failure); asserts the
/// old image serves on. When `nothing_stopped`, a connection opened
/// before is still served; otherwise (the fallback ran the old image
/// again) a new one is. Then a good upgrade still works.
fn failed_upgrade(name: &str, install: impl FnOnce(&Dir), reason: &str, nothing_stopped: bool) {
    let dir = Dir::new(name);
    let old = dir.install_osmium("osmium");
    let mut srv = server(&dir).start();
    let pid = srv.pid();
    let mut before = LineClient::to(&srv);
    set_get(&mut before, "before", "old image");
    install(&dir);
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, reason, 1);
    assert!(srv.is_running(), "{}", srv.stderr_text());
    assert_eq!(srv.pid(), pid);
    assert_eq!(exe_inode(pid), old, "the old image runs");
    if nothing_stopped {
        set_get(&mut before, "during", "same connection");
        before.send(b"get before\r\n");
        assert_eq!(before.line(), "VALUE before 0 9\r\n");
    } else {
        let mut c = client_when_serving(&srv);
        set_get(&mut c, "again", "old image again");
    }
    assert_eq!(count(&srv, "upgrade done:"), 0, "{}", srv.stderr_text());
    upgrade_ok(&dir, &mut srv, 1);
}

#[test]
fn an_upgrade_to_a_file_that_is_not_executable_fails() {
    failed_upgrade(
        "noexec",
        |dir| {
            let bytes = std::fs::read(env!("CARGO_BIN_EXE_osmium")).unwrap();
            dir.install("osmium", &bytes, 0o644);
        },
        "Permission denied",
        true,
    );
}

#[test]
fn an_upgrade_to_a_binary_that_exits_1_fails() {
    failed_upgrade(
        "exit1",
        |dir| {
            dir.install_script("osmium", "exit 1");
        },
        "did not answer the check (exit status: 1)",
        true,
    );
}

#[test]
fn an_upgrade_to_a_binary_reading_a_newer_state_format_fails() {
    failed_upgrade(
        "format",
        |dir| {
            dir.install_script(
                "osmium",
                "cat >/dev/null\necho 'osmium-upgrade-check ok version=9.0.0 reads=99-99 exe=1:1'",
            );
        },
        "reads state formats 99-99, this server writes 1",
        true,
    );
}

#[test]
fn a_new_image_that_refuses_the_state_runs_the_old_one_again() {
    failed_upgrade(
        "fallback",
        |dir| {
            dir.install_refusing_osmium();
        },
        "upgrade failed: OSMIUM_UPGRADE_REFUSE is set; serving with osmium",
        false,
    );
}

#[test]
fn a_second_sigusr2_while_the_check_runs_is_ignored() {
    let dir = Dir::new("twice");
    let old = dir.install_osmium("osmium");
    let mut srv = server(&dir).start();
    let pid = srv.pid();
    // A check that answers once the test lets it (then with exit 1).
    let go = dir.path("go");
    dir.install_script(
        "osmium",
        &format!(
            "while [ ! -e {} ]; do sleep 0.02; done\nexit 1",
            go.display()
        ),
    );
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, "upgrade requested", 1);
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, "upgrade already running: SIGUSR2 ignored", 1);
    std::fs::write(&go, b"").unwrap();
    wait_for_log(&srv, "upgrade refused", 1);
    assert_eq!(count(&srv, "upgrade requested"), 1);
    assert_eq!(exe_inode(pid), old);
    let mut c = LineClient::to(&srv);
    set_get(&mut c, "k", "v");
}

/// Keys in the filled cache.
const FILLED: u32 = 20_000;

/// The value of key `key{i}` (its flags are `i`): 1 byte to 100 KB, each
/// different; about 70 MB for `FILLED` keys.
fn filled_value(i: u32) -> Vec<u8> {
    let len = match i % 50 {
        0 => 100_000,
        n if n % 10 == 9 => 10_000,
        n => 1 + ((n * 37 + i) % 1000) as usize,
    };
    (0..len)
        .map(|j| b'a' + ((i as usize * 7 + j) % 26) as u8)
        .collect()
}

/// Stores `key0` .. `key{n-1}`, a hundred requests at a time.
fn fill(c: &mut LineClient, n: u32) {
    for first in (0..n).step_by(100) {
        let keys = first..(first + 100).min(n);
        let mut batch = Vec::new();
        for i in keys.clone() {
            let value = filled_value(i);
            batch.extend(format!("set key{i} {i} 0 {}\r\n", value.len()).as_bytes());
            batch.extend(&value);
            batch.extend(b"\r\n");
        }
        c.send(&batch);
        for i in keys {
            assert_eq!(c.line(), "STORED\r\n", "key{i}");
        }
    }
}

/// Reads `key0` .. `key{n-1}` back, a hundred at a time: each must be as
/// `fill` stored it, byte for byte.
fn check_filled(c: &mut LineClient, n: u32) {
    for first in (0..n).step_by(100) {
        let keys = first..(first + 100).min(n);
        let gets: String = keys.clone().map(|i| format!("get key{i}\r\n")).collect();
        c.send(gets.as_bytes());
        for i in keys {
            let value = filled_value(i);
            assert_eq!(c.line(), format!("VALUE key{i} {i} {}\r\n", value.len()));
            let mut got = vec![0u8; value.len() + 2];
            c.r.read_exact(&mut got).expect("read the value");
            assert!(got[..value.len()] == value[..], "key{i} differs");
            assert_eq!(&got[value.len()..], b"\r\n");
            assert_eq!(c.line(), "END\r\n");
        }
    }
}

/// The value of `name` in the reply to `command` (`stats`, `stats
/// settings`).
fn stat(c: &mut LineClient, command: &str, name: &str) -> String {
    c.send(format!("{command}\r\n").as_bytes());
    let mut found = None;
    loop {
        let line = c.line();
        if line == "END\r\n" {
            break;
        }
        let mut words = line.trim_end().splitn(3, ' ');
        if let (Some("STAT"), Some(n), Some(v)) = (words.next(), words.next(), words.next()) {
            if n == name {
                found = Some(v.to_string());
            }
        }
        assert!(!line.is_empty(), "the connection closed");
    }
    found.unwrap_or_else(|| panic!("no {name} in {command}"))
}

/// How many fds process `pid` holds on the memfd of item memory (one
/// after any upgrade: the state's copy is closed once taken over).
fn item_memfds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("list /proc/PID/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("memfd:osmium-items"))
        .count()
}

/// A server of 256 MB (no eviction for `FILLED` keys).
fn big_server(dir: &Dir) -> CacheServer {
    server(dir).args(["-m", "256"])
}

#[test]
fn an_upgrade_keeps_the_whole_cache_without_a_memory_file() {
    let dir = Dir::new("memfd");
    let first = dir.install_osmium("osmium");
    let mut srv = big_server(&dir).start();
    let pid = srv.pid();
    let mut c = LineClient::to(&srv);
    assert_eq!(stat(&mut c, "stats settings", "item_memory"), "memfd");
    fill(&mut c, FILLED);
    assert_eq!(stat(&mut c, "stats", "curr_items"), FILLED.to_string());
    assert_eq!(stat(&mut c, "stats", "upgrades"), "0");
    // The same file: the upgrade runs the binary the server runs.
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, "upgrade done:", 1);
    assert_eq!(srv.pid(), pid);
    assert_eq!(exe_inode(pid), first);
    let mut c = client_when_serving(&srv);
    check_filled(&mut c, FILLED);
    assert_eq!(stat(&mut c, "stats", "upgrades"), "1");
    assert_eq!(stat(&mut c, "stats", "curr_items"), FILLED.to_string());
    assert_eq!(item_memfds(pid), 1);
    let log = srv.stderr_text();
    assert!(
        log.contains(&format!(
            "{FILLED} items back from the item memory handed over"
        )),
        "{log}"
    );
    // A new copy of the binary; a write between the upgrades stays too.
    set_get(&mut c, "between", "the upgrades");
    upgrade_ok(&dir, &mut srv, 2);
    let mut c = client_when_serving(&srv);
    check_filled(&mut c, FILLED);
    c.send(b"get between\r\n");
    assert_eq!(c.line(), "VALUE between 0 12\r\n");
    assert_eq!(c.line(), "the upgrades\r\n");
    assert_eq!(c.line(), "END\r\n");
    assert_eq!(stat(&mut c, "stats", "upgrades"), "2");
    assert_eq!(stat(&mut c, "stats", "upgrade_failures"), "0");
    assert_eq!(item_memfds(pid), 1);
}

#[test]
fn a_new_image_that_refuses_the_state_hands_the_whole_cache_back() {
    let dir = Dir::new("memfd-fallback");
    let old = dir.install_osmium("osmium");
    let mut srv = big_server(&dir).start();
    let pid = srv.pid();
    let mut c = LineClient::to(&srv);
    fill(&mut c, FILLED);
    dir.install_refusing_osmium();
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(
        &srv,
        "upgrade failed: OSMIUM_UPGRADE_REFUSE is set; serving with osmium",
        1,
    );
    assert_eq!(srv.pid(), pid);
    assert_eq!(exe_inode(pid), old, "the old image runs");
    let mut c = client_when_serving(&srv);
    check_filled(&mut c, FILLED);
    assert_eq!(stat(&mut c, "stats", "upgrades"), "0");
    assert_eq!(stat(&mut c, "stats", "upgrade_failures"), "1");
    assert_eq!(item_memfds(pid), 1);
}

#[test]
fn a_binary_that_does_not_say_it_takes_item_memory_is_handed_none() {
    // A build from before memfds: its check answer has no `takes=memory`
    // (here the real binary's, with the field cut), and it would keep an
    // fd it does not use open for the life of the process. Nor does it
    // say `takes=conns`: its connections are closed, not left hanging.
    let dir = Dir::new("memfd-older");
    dir.install_osmium("osmium");
    let mut srv = server(&dir).start();
    let pid = srv.pid();
    let mut old = LineClient::to(&srv);
    set_get(&mut old, "before", "not handed over");
    dir.install_osmium("osmium.real");
    let real = dir.path("osmium.real");
    let real = real.display();
    dir.install_script(
        "osmium",
        &format!(
            "case \"$1\" in --upgrade-check) {real} \"$@\" | sed 's/ takes=[^ ]*//'; exit 0;; esac\n\
             exec {real} \"$@\""
        ),
    );
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, "upgrade done:", 1);
    let _ = old.w.write_all(b"get before\r\n");
    let mut line = String::new();
    assert!(
        matches!(
            std::io::BufRead::read_line(&mut old.r, &mut line),
            Ok(0) | Err(_)
        ),
        "the connection closed, not carried: {line:?}"
    );
    assert_eq!(count(&srv, "upgrade: 0 client connections handed over"), 1);
    assert!(srv
        .stderr_text()
        .contains("the new binary does not take item memory over"));
    let mut c = client_when_serving(&srv);
    c.send(b"get before\r\n");
    assert_eq!(c.line(), "END\r\n");
    assert_eq!(item_memfds(pid), 1, "only the new image's own memfd");
}

#[test]
fn with_anonymous_item_memory_an_upgrade_starts_empty() {
    let dir = Dir::new("anonymous");
    dir.install_osmium("osmium");
    let mut srv = server(&dir).args(["-o", "item_memory=anonymous"]).start();
    let mut c = LineClient::to(&srv);
    assert_eq!(stat(&mut c, "stats settings", "item_memory"), "anonymous");
    set_get(&mut c, "before", "gone after the upgrade");
    upgrade_ok(&dir, &mut srv, 1);
    let mut c = client_when_serving(&srv);
    c.send(b"get before\r\n");
    assert_eq!(c.line(), "END\r\n");
    assert!(srv
        .stderr_text()
        .contains("not kept (anonymous memory): the cache starts empty"));
}

/// The `socket:[INODE]` of the entry of `table` (`/proc/net/tcp`,
/// `/proc/net/udp`) with local port `port` (and state `state`: `0A` for
/// LISTEN). Fields: sl, local_address (hex addr:port), rem_address, st,
/// queues, timers, retrnsmt, uid, timeout, inode.
fn inet_socket(table: &str, port: u16, state: Option<&str>) -> String {
    let table = std::fs::read_to_string(table).expect("read the socket table");
    table
        .lines()
        .skip(1)
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let inode = f.get(9)?;
            (local == port && state.is_none_or(|st| f.get(3) == Some(&st)))
                .then(|| format!("socket:[{inode}]"))
        })
        .unwrap_or_else(|| panic!("no socket on port {port} in {table}"))
}

/// The `socket:[INODE]` of the listening unix socket bound to `path`
/// (`/proc/net/unix`: Num, RefCount, Protocol, Flags, Type, St, Inode,
/// Path; the accepting flag is 0x10000).
fn unix_listener(path: &std::path::Path) -> String {
    let want = path.to_string_lossy();
    let table = std::fs::read_to_string("/proc/net/unix").expect("read /proc/net/unix");
    table
        .lines()
        .skip(1)
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            let inode = f.get(6)?;
            (flags & 0x1_0000 != 0 && *f.get(7)? == want).then(|| format!("socket:[{inode}]"))
        })
        .unwrap_or_else(|| panic!("no unix listener at {want}"))
}

/// Whether process `pid` holds `socket` (`socket:[INODE]`).
fn holds(pid: u32, socket: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("list /proc/PID/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .any(|target| target.as_os_str() == socket)
}

/// Connects to `addr` again and again until told to stop; how many
/// connections were made and how many refused. Each connection sends a
/// `version` and waits for its answer (which comes once an image serves).
struct Connector {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

impl Connector {
    fn start(addr: std::net::SocketAddr) -> Connector {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut made, mut refused) = (0, 0);
            while !flag.load(Ordering::Relaxed) {
                match std::net::TcpStream::connect(addr) {
                    Ok(mut s) => {
                        made += 1;
                        let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                        let _ = s.write_all(b"version\r\n");
                        let _ = s.read(&mut [0u8; 64]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => refused += 1,
                    Err(e) => panic!("connect: {e}"),
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            (made, refused)
        });
        Connector { stop, thread }
    }

    fn finish(self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the connector")
    }
}

/// A `get` over UDP (memcached's 8-byte frame header first); the reply's
/// text.
fn udp_get(addr: std::net::SocketAddr, key: &str) -> String {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut request = vec![0, 7, 0, 0, 0, 1, 0, 0];
    request.extend(format!("get {key}\r\n").as_bytes());
    sock.send_to(&request, addr).unwrap();
    let mut reply = [0u8; 2048];
    let n = sock.recv(&mut reply).expect("a UDP reply");
    String::from_utf8_lossy(&reply[8..n]).into_owned()
}

/// Runs an upgrade that `install` sets up, until the log says `done`,
/// with a client connecting all along: the TCP listener and the UDP
/// socket are the same sockets after it as before (their inodes), no
/// connection was refused, and both serve.
fn listeners_carried(name: &str, install: impl FnOnce(&Dir), done: &str) {
    let dir = Dir::new(name);
    dir.install_osmium("osmium");
    let mut srv = server(&dir).udp().start();
    let pid = srv.pid();
    let port = srv.addr().port();
    let tcp = inet_socket("/proc/net/tcp", port, Some("0A"));
    let udp = inet_socket("/proc/net/udp", port, None);
    let mut c = LineClient::to(&srv);
    set_get(&mut c, "k", "v");
    install(&dir);
    let connector = Connector::start(srv.addr());
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, done, 1);
    let mut c = client_when_serving(&srv);
    let (made, refused) = connector.finish();
    println!("{made} connections made across the upgrade, {refused} refused");
    assert_eq!(refused, 0, "{}", srv.stderr_text());
    assert_eq!(inet_socket("/proc/net/tcp", port, Some("0A")), tcp);
    assert_eq!(inet_socket("/proc/net/udp", port, None), udp);
    assert!(holds(pid, &tcp) && holds(pid, &udp));
    assert_eq!(count(&srv, "2 listening sockets carried over"), 1);
    c.send(b"get k\r\n");
    assert_eq!(c.line(), "VALUE k 0 1\r\n");
    assert_eq!(udp_get(srv.addr(), "k"), "VALUE k 0 1\r\nv\r\nEND\r\n");
}

#[test]
fn an_upgrade_keeps_its_tcp_and_udp_sockets() {
    listeners_carried(
        "listeners",
        |dir| {
            dir.install_osmium("osmium");
        },
        "upgrade done:",
    );
}

#[test]
fn a_refused_upgrade_hands_its_tcp_and_udp_sockets_back() {
    listeners_carried(
        "listeners-fallback",
        |dir| {
            dir.install_refusing_osmium();
        },
        "upgrade failed: OSMIUM_UPGRADE_REFUSE is set; serving with osmium",
    );
}

#[test]
fn an_upgrade_keeps_its_unix_socket_and_its_file() {
    let dir = Dir::new("unix");
    dir.install_osmium("osmium");
    let path = dir.path("osmium.sock");
    let mut srv = server(&dir).unix_socket(&path).start();
    let pid = srv.pid();
    let listener = unix_listener(&path);
    let file = std::fs::metadata(&path).unwrap().ino();
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, "upgrade done:", 1);
    assert_eq!(unix_listener(&path), listener);
    assert!(holds(pid, &listener));
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        file,
        "the same file"
    );
    assert_eq!(count(&srv, "1 listening sockets carried over"), 1);
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.write_all(b"set u 0 0 1\r\nx\r\n").unwrap();
    let mut reply = [0u8; 8];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"STORED\r\n");
}

#[test]
fn a_connection_made_before_an_upgrade_is_served_after_it() {
    let dir = Dir::new("conn");
    dir.install_osmium("osmium");
    let mut srv = server(&dir).start();
    let mut c = LineClient::to(&srv);
    set_get(&mut c, "before", "the upgrade");
    dir.install_osmium("osmium");
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, "upgrade done:", 1);
    // The same socket.
    c.send(b"get before\r\n");
    assert_eq!(c.line(), "VALUE before 0 11\r\n");
    assert_eq!(c.line(), "the upgrade\r\n");
    assert_eq!(c.line(), "END\r\n");
    assert_eq!(stat(&mut c, "stats", "upgrades"), "1");
    set_get(&mut c, "after", "it");
    assert!(srv
        .stderr_text()
        .contains("1 client connections carried over, 0 lost"));
}

#[test]
fn a_request_cut_by_an_upgrade_is_answered_after_it() {
    let dir = Dir::new("conn-partial");
    dir.install_osmium("osmium");
    let mut srv = server(&dir).start();
    let mut c = LineClient::to(&srv);
    // Half a set line, and a whole get pipelined before it.
    set_get(&mut c, "k", "v");
    c.send(b"get k\r\nset half 0 0");
    assert_eq!(c.line(), "VALUE k 0 1\r\n");
    assert_eq!(c.line(), "v\r\n");
    assert_eq!(c.line(), "END\r\n");
    dir.install_osmium("osmium");
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, "upgrade done:", 1);
    c.send(b" 5\r\nhello\r\nget half\r\n");
    assert_eq!(c.line(), "STORED\r\n");
    assert_eq!(c.line(), "VALUE half 0 5\r\n");
    assert_eq!(c.line(), "hello\r\n");
    assert_eq!(c.line(), "END\r\n");
}

/// Upgrades (as `install` sets up, until the log says `done`) under a
/// loader's traffic: 8 clients of verified GET/SET and a new connection
/// every 50 ms; nothing fails, nothing is refused, no acknowledged write
/// is lost. The longest wait is printed.
fn upgrade_under_load(name: &str, install: impl FnOnce(&Dir), done: &str) {
    let dir = Dir::new(name);
    dir.install_osmium("osmium");
    let mut srv = server(&dir).start();
    let loader = crate::upgrade_load::Loader::start(srv.addr(), 8);
    std::thread::sleep(std::time::Duration::from_millis(300));
    install(&dir);
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(&srv, done, 1);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let seen = loader.finish();
    println!("across the upgrade: {seen:?}");
    let log = srv.stderr_text();
    assert_eq!(seen.errors, 0, "{seen:?}\n{log}");
    assert_eq!(seen.refused, 0, "{seen:?}");
    assert_eq!(seen.lost, 0, "{seen:?}");
    assert!(seen.requests > 0 && seen.connections > 0, "{seen:?}");
}

#[test]
fn an_upgrade_under_load_fails_no_request() {
    upgrade_under_load(
        "load",
        |dir| {
            dir.install_osmium("osmium");
        },
        "upgrade done:",
    );
}

#[test]
fn a_refused_upgrade_under_load_fails_no_request() {
    upgrade_under_load(
        "load-fallback",
        |dir| {
            dir.install_refusing_osmium();
        },
        "upgrade failed: OSMIUM_UPGRADE_REFUSE is set; serving with osmium",
    );
}
