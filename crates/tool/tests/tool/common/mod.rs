//! Starting real servers for osmium-tool's tests: osmium (and genuine
//! memcached when the oracle is built) on a free loopback port (through
//! `osmium-test-harness`'s builders), stopped by PID when dropped; the
//! `osmium-tool` binary under test.
#![allow(dead_code)] // each test uses a subset

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use osmium_test_harness::Osmium;
pub(crate) use osmium_test_harness::{memcached_bin, osmium_bin, Running};

/// The osmium-tool binary under test.
pub(crate) fn tool() -> Command {
    Command::new(env!("CARGO_BIN_EXE_osmium-tool"))
}

/// Runs osmium-tool with `args` and returns its output.
pub(crate) fn run_tool(args: &[&str]) -> Output {
    tool().args(args).output().expect("run osmium-tool")
}

/// `bin` (osmium or memcached) on a free loopback port with `args`, once
/// that process listens (`osmium_test_harness`: on another port when the
/// bind lost a race; `-u root` as root).
pub(crate) fn start(bin: &Path, args: &[&str]) -> Running {
    Osmium::new().bin(bin).args(args).start()
}

/// `127.0.0.1:PORT` of `server`, as osmium-tool takes an address.
pub(crate) fn address(server: &Running) -> String {
    server.addr().to_string()
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
