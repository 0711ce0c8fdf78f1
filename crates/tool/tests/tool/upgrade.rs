//! `osmium-tool upgrade` against a real osmium started from a copy of the
//! binary in a directory of the test's own (the upgrade runs whatever file
//! the server was started from: a new copy is renamed over it, a new inode,
//! as dpkg does): by address and by PID (found in /proc), exit 0, the same
//! PID running the new inode, `stats` `upgrades 1`, a key set before read
//! back, and the service manager told `RELOADING=1` then `READY=1`, never
//! `STOPPING=1`; a refused upgrade (at the check, and by the new image,
//! which hands the server back) exits 1 with the reason, which `stats
//! upgrade` gives too; memcached, which does not upgrade, is not signalled
//! (exit 2).

use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use crate::common::{address, memcached_bin, osmium_bin, roundtrip, run_tool, start, Running};
use osmium_test_harness::{exe_inode, CacheServer, Images, Osmium};

/// A directory holding the binary the server runs, `osmium`.
struct BinDir(Images);

impl BinDir {
    fn new(tag: &str) -> BinDir {
        let dir = BinDir(Images::new(tag));
        dir.install_osmium("osmium");
        dir
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path(name)
    }

    /// The osmium under test copied to `name` (a new inode); its inode.
    fn install_osmium(&self, name: &str) -> u64 {
        self.0.install_program(name, &osmium_bin())
    }

    /// A `#!/bin/sh` script at `osmium`.
    fn install_script(&self, body: &str) {
        self.0.install_script("osmium", body);
    }

    /// A new image that passes the check and then refuses the state it
    /// is handed: the upgrade falls back to the old image.
    fn install_refusing_image(&self) {
        self.0.install_refusing_image("osmium", &osmium_bin());
    }
}

fn server(dir: &BinDir) -> CacheServer {
    Osmium::new()
        .bin(dir.path("osmium"))
        .args(["-m", "64", "-t", "2"])
}

/// `name` in the reply to `stats GROUP` (`group` "" for `stats`).
fn stat(server: &Running, group: &str, name: &str) -> Option<String> {
    let mut s = server.connect();
    let cmd = format!("stats {group}").trim_end().to_string() + "\r\n";
    let reply = roundtrip(&mut s, cmd.as_bytes(), b"END\r\n");
    String::from_utf8_lossy(&reply).lines().find_map(|line| {
        let rest = line.strip_prefix("STAT ")?.strip_prefix(name)?;
        Some(rest.strip_prefix(' ')?.to_string())
    })
}

fn set(server: &Running, key: &str, value: &str) {
    let mut s = server.connect();
    let req = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
    assert_eq!(roundtrip(&mut s, req.as_bytes(), b"\r\n"), b"STORED\r\n");
}

fn get(server: &Running, key: &str) -> String {
    let mut s = server.connect();
    let reply = roundtrip(&mut s, format!("get {key}\r\n").as_bytes(), b"END\r\n");
    String::from_utf8_lossy(&reply).into_owned()
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A service manager's notification socket (`NOTIFY_SOCKET`).
struct Notified {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Notified {
    fn new(dir: &BinDir) -> Notified {
        let path = dir.path("notify");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Notified { socket, path }
    }

    /// The next notification's first line (`READY=1`, `RELOADING=1`, ...).
    fn next(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).expect("a notification");
        let said = String::from_utf8_lossy(&buf[..n]).into_owned();
        said.lines().next().unwrap_or_default().to_string()
    }

    /// Asserts that no notification waits (a `STOPPING=1`, say).
    fn nothing_more(&self) {
        self.socket.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 4096];
        match self.socket.recv(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Ok(n) => panic!("told {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(e) => panic!("the notify socket: {e}"),
        }
        self.socket.set_nonblocking(false).unwrap();
    }
}

#[test]
fn upgrade_by_address_and_by_pid_keeps_the_pid_and_the_cache() {
    let dir = BinDir::new("upgrade");
    let notified = Notified::new(&dir);
    let mut srv = server(&dir).env("NOTIFY_SOCKET", &notified.path).start();
    let pid = srv.pid();
    assert_eq!(notified.next(), "READY=1");
    set(&srv, "before", "the upgrade");

    let new = dir.install_osmium("osmium");
    let out = run_tool(&["upgrade", &address(&srv)]);
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with(&format!("upgraded {} (pid {pid}): osmium ", address(&srv))),
        "{said}"
    );
    assert_eq!(srv.pid(), pid);
    assert_eq!(exe_inode(pid), new, "runs the new file");
    assert_eq!(stat(&srv, "", "upgrades").as_deref(), Some("1"));
    assert_eq!(stat(&srv, "", "pid"), Some(pid.to_string()));
    assert_eq!(
        get(&srv, "before"),
        "VALUE before 0 11\r\nthe upgrade\r\nEND\r\n"
    );
    // A reload to the service manager: READY=1 from the new image, no
    // STOPPING=1 (which would make systemd stop the unit).
    assert_eq!(notified.next(), "RELOADING=1");
    assert_eq!(notified.next(), "READY=1");

    // By PID: the address found in /proc/PID/fd and /proc/PID/net.
    let newer = dir.install_osmium("osmium");
    let out = run_tool(&["upgrade", &pid.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(exe_inode(pid), newer);
    assert_eq!(stat(&srv, "upgrade", "upgrades").as_deref(), Some("2"));
    assert_eq!(stat(&srv, "upgrade", "last_failure"), None);
    assert_eq!(
        get(&srv, "before"),
        "VALUE before 0 11\r\nthe upgrade\r\nEND\r\n"
    );
    assert_eq!(notified.next(), "RELOADING=1");
    assert_eq!(notified.next(), "READY=1");
    notified.nothing_more();
    assert!(srv.is_running());
    assert!(!srv.stderr_text().contains("upgrade refused"));
}

#[test]
fn a_refused_upgrade_exits_1_and_says_why() {
    let dir = BinDir::new("refused");
    let notified = Notified::new(&dir);
    let mut srv = server(&dir).env("NOTIFY_SOCKET", &notified.path).start();
    let pid = srv.pid();
    let old = exe_inode(pid);
    assert_eq!(notified.next(), "READY=1");
    set(&srv, "kept", "by the old image");

    // Refused at the check: nothing stopped.
    dir.install_script("exit 1");
    let out = run_tool(&["upgrade", &address(&srv)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused: the new binary did not answer the check (exit status: 1)"),
        "{err}"
    );
    assert_eq!(notified.next(), "RELOADING=1");
    assert_eq!(notified.next(), "READY=1");

    // Refused by the new image, which hands the server back.
    dir.install_refusing_image();
    let out = run_tool(&["upgrade", &pid.to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused: OSMIUM_UPGRADE_REFUSE is set"),
        "{err}"
    );
    assert!(err.contains("serves on"), "{err}");
    assert_eq!(srv.pid(), pid);
    assert_eq!(exe_inode(pid), old, "the old image runs");
    assert_eq!(stat(&srv, "", "upgrades").as_deref(), Some("0"));
    assert_eq!(stat(&srv, "", "upgrade_failures").as_deref(), Some("2"));
    assert_eq!(
        stat(&srv, "upgrade", "last_failure").as_deref(),
        Some("OSMIUM_UPGRADE_REFUSE is set")
    );
    assert_eq!(
        get(&srv, "kept"),
        "VALUE kept 0 16\r\nby the old image\r\nEND\r\n"
    );
    // The old image again says READY=1 (the new one, which refused, said
    // nothing).
    assert_eq!(notified.next(), "RELOADING=1");
    assert_eq!(notified.next(), "READY=1");
    notified.nothing_more();
    assert!(srv.is_running());
}

#[test]
fn a_server_that_does_not_upgrade_is_not_signalled() {
    // A process that is no server (this test's), and none at all.
    let out = run_tool(&["upgrade", &std::process::id().to_string()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = run_tool(&["upgrade", "127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let Some(bin) = memcached_bin() else {
        return;
    };
    let mut mc = start(&bin, &[]);
    let out = run_tool(&["upgrade", &address(&mc)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not upgrade in place"));
    assert!(mc.is_running());
}

#[test]
fn a_file_the_new_binary_cannot_read_refuses_the_upgrade_at_the_check() {
    // A TLS key the server read at its start and can no longer (gone
    // here; under the Debian unit, a key only root reads, the server
    // running as -u osmium): the new binary's check reads the files too,
    // so the upgrade is refused before anything stops, and the old image
    // serves on (a new image refusing it would hand back to an old one
    // that cannot read it again either, and the server would exit).
    let dir = BinDir::new("unreadable");
    let certs = osmium_test_harness::Certs::new();
    let mut srv = server(&dir).tls(&certs).extra_listener("notls:").start();
    let pid = srv.pid();
    let plain = format!("127.0.0.1:{}", srv.extra_ports()[0]);
    std::fs::remove_file(certs.file("server.key")).expect("remove the key");
    dir.install_osmium("osmium");
    let out = run_tool(&["upgrade", &plain]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused: the new binary refuses the command line:"),
        "{err}"
    );
    assert!(srv.is_running(), "{}", srv.stderr_text());
    assert_eq!(srv.pid(), pid);
    assert!(!srv.stderr_text().contains("upgrade: running"));
}
