//! `common::start_on_free_port` when the port it is about to use is
//! taken: osmium and memcached 1.6.45 each exit saying so, and are started
//! again on another port, where they serve. The taken port is held by a
//! listener of the test and handed to the start by
//! `osmium_test_harness::force_next_port`.

use crate::common;

use common::{against_both, start_on_free_port, target_command};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::Duration;

fn a_server_whose_port_was_taken_starts_on_another() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    osmium_test_harness::force_next_port(taken);
    let (mut child, port) = start_on_free_port(|port| {
        target_command(env!("CARGO_BIN_EXE_osmium"))
            .args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server")
    });
    let attempts = osmium_test_harness::last_start_attempts();
    let served = (|| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"version\r\n").ok()?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).ok()?;
        Some(buf[..n].starts_with(b"VERSION "))
    })();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        attempts, 2,
        "one start refused on {taken}, one that listens"
    );
    assert_ne!(port, taken);
    assert_eq!(served, Some(true));
}

against_both!(a_server_whose_port_was_taken_starts_on_another);
