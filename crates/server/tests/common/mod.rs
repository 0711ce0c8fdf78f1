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
