//! Helpers shared by the integration tests that start real server
//! processes: a free loopback port, waiting for a condition, waiting for a
//! process to exit. (Each test file keeps its own launcher, since each
//! starts servers differently: TCP, UDP, unix socket, memcached or osmium.)
#![allow(dead_code)] // each test crate uses a different subset

use std::net::{TcpListener, UdpSocket};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A loopback port that was free for both TCP and UDP a moment ago.
pub fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Starts a server on a free loopback port (`spawn(port)` starts the
/// process) and returns it once *that process* listens on the port. A
/// connect alone is not proof: two tests running at once can be given the
/// same free port, and the one whose server then fails to bind would talk
/// to the other test's server until that one stops. A server that exits
/// (a failed bind ends it at once) is started again on another port.
pub fn start_on_free_port(mut spawn: impl FnMut(u16) -> Child) -> (Child, u16) {
    for _ in 0..5 {
        let port = free_port();
        let mut child = spawn(port);
        let mut exited = false;
        wait_until("server did not start", || {
            exited = child.try_wait().unwrap().is_some();
            exited || listens_on(child.id(), port)
        });
        if !exited {
            return (child, port);
        }
    }
    panic!("server did not start on any of 5 ports");
}

/// Whether process `pid` holds a listening IPv4 TCP socket on `port`: a
/// LISTEN entry of `/proc/net/tcp` with that local port whose socket inode
/// is one of the process's descriptors.
pub fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    // Fields: sl, local_address (hex addr:port), rem_address, st (0A is
    // LISTEN), tx:rx queues, tr:when, retrnsmt, uid, timeout, inode.
    let sockets: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let inode = f.get(9)?;
            (local == port && *f.get(3)? == "0A").then(|| format!("socket:[{inode}]"))
        })
        .collect();
    if sockets.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
    })
}

/// Polls `ready` every 20 ms for up to 10 s; panics with `what` after that.
pub fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to 10 s for `child` to exit and returns its status.
pub fn wait_exit(child: &mut Child) -> ExitStatus {
    let mut status = None;
    wait_until("server did not exit", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    status.unwrap()
}

/// The memcached to compare with (genuine 1.6.45, the oracle):
/// `MEMCACHED_BIN`, else the repository's build of it
/// (`.oracle/memcached-1.6.45/memcached`, made by
/// `scripts/build-memcached.sh`), else None.
pub fn memcached_bin() -> Option<std::path::PathBuf> {
    if let Some(bin) = std::env::var_os("MEMCACHED_BIN").filter(|b| !b.is_empty()) {
        return Some(bin.into());
    }
    let oracle = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.oracle/memcached-1.6.45/memcached");
    oracle.is_file().then_some(oracle)
}

/// Says that the memcached half of `test` is skipped; under `CI=true` a
/// missing oracle fails the test instead.
pub fn memcached_missing(test: &str) {
    let why = "the memcached 1.6.45 oracle is not built: run `bash scripts/build-memcached.sh` or set MEMCACHED_BIN";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: {why} (CI=true: a missing oracle is a failure)");
    }
    eprintln!("SKIP memcached half of {test}: {why}");
}
