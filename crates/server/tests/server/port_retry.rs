//! A start whose port is taken by the time the server binds it: osmium
//! and memcached 1.6.45 each exit saying so, and the harness's builder
//! starts them again on another port, where they serve. The taken port is
//! held by a listener of the test and handed to the start by
//! `osmium_test_harness::force_next_port`.

use crate::common;

use common::{against_both, target_server};
use std::io::{Read, Write};
use std::net::TcpListener;

fn a_server_whose_port_was_taken_starts_on_another() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    osmium_test_harness::force_next_port(taken);
    let server = target_server().start();
    let served = (|| {
        let mut s = server.connect();
        s.write_all(b"version\r\n").ok()?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).ok()?;
        Some(buf[..n].starts_with(b"VERSION "))
    })();
    assert_eq!(
        server.attempts(),
        2,
        "one start refused on {taken}, one that listens"
    );
    assert_ne!(server.port(), taken);
    assert_eq!(served, Some(true));
}

against_both!(a_server_whose_port_was_taken_starts_on_another);
