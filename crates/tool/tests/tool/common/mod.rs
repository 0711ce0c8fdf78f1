//! Starting real servers for osmium-tool's tests: osmium (and genuine
//! memcached when the oracle is built) on a free loopback port (through
//! `osmium-test-harness`), stopped by PID when dropped; the `osmium-tool` binary under test.
#![allow(dead_code)] // each test uses a subset

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

/// The osmium-tool binary under test.
pub(crate) fn tool() -> Command {
    Command::new(env!("CARGO_BIN_EXE_osmium-tool"))
}

/// Runs osmium-tool with `args` and returns its output.
pub(crate) fn run_tool(args: &[&str]) -> Output {
    tool().args(args).output().expect("run osmium-tool")
}

/// The osmium server: `OSMIUM_BIN`, else the one beside osmium-tool
/// (`cargo build --workspace` builds both), else target/release/osmium.
pub(crate) fn osmium_bin() -> PathBuf {
    if let Some(b) = std::env::var_os("OSMIUM_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(b);
    }
    let beside = PathBuf::from(env!("CARGO_BIN_EXE_osmium-tool")).with_file_name("osmium");
    if beside.is_file() {
        return beside;
    }
    let release = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    assert!(
        release.is_file(),
        "no osmium binary: cargo build -p osmium-server (or --workspace), or set OSMIUM_BIN"
    );
    release
}

/// memcached 1.6.45 (`MEMCACHED_BIN`, else the repository's oracle), or
/// `None` after a message (a panic under `CI=true`, where it must exist).
pub(crate) fn memcached_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("MEMCACHED_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let oracle =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.oracle/memcached-1.6.45/memcached");
    if oracle.is_file() {
        return Some(oracle);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "memcached oracle missing: run scripts/build-memcached.sh"
    );
    eprintln!("SKIP memcached: the oracle is not built (scripts/build-memcached.sh)");
    None
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// A server process, killed by PID when dropped.
pub(crate) struct Server {
    pub child: Child,
    pub port: u16,
}

impl Server {
    pub(crate) fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
    pub(crate) fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin` (osmium or memcached, with `-u root` as root) on a free
/// loopback port with `args`, once that process listens; on another port
/// when the bind lost a race (`osmium_test_harness::Start`).
pub(crate) fn start(bin: &Path, args: &[&str]) -> Server {
    let server = osmium_test_harness::Start::new(&bin.display().to_string()).command(|port| {
        let mut cmd = Command::new(bin);
        if running_as_root() {
            cmd.args(["-u", "root"]);
        }
        cmd.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"])
            .args(args);
        cmd
    });
    let port = server.port();
    Server {
        child: server.into_child(),
        port,
    }
}

/// Polls `ready` every 20 ms for up to 10 s; panics with `what` after.
pub(crate) fn wait_until(what: &str, ready: impl FnMut() -> bool) {
    osmium_test_harness::wait_until(what, Duration::from_secs(10), ready);
}

/// Sends `req` and reads until the reply ends with `end`.
pub(crate) fn roundtrip(s: &mut TcpStream, req: &[u8], end: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    s.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).expect("read reply");
        assert!(n > 0, "server closed");
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// A private temporary directory, removed when dropped.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        // Tests of one binary run in parallel: a number of its own each.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("osmium-tool-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
