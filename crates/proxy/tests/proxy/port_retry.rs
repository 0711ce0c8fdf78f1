//! The proxy tests' starters (`common`) when the port they are about to
//! use is taken: a backend, osmium-proxy and nutcracker each start again on
//! another port and serve there, the taken port named by a listener the
//! test holds (`osmium_test_harness::force_next_port` hands it to the next
//! free-port pick).

use crate::common;

use common::*;
use std::net::TcpListener;

fn held() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

fn pool(listen: u16, backend: u16) -> String {
    format!("pool:\n  listen: 127.0.0.1:{listen}\n  servers:\n   - 127.0.0.1:{backend}:1\n")
}

fn served(port: u16) {
    assert_eq!(
        roundtrip(
            port,
            b"set retried 0 0 1\r\nv\r\nget retried\r\n",
            b"END\r\n"
        ),
        b"STORED\r\nVALUE retried 0 1\r\nv\r\nEND\r\n"
    );
}

#[test]
fn a_backend_whose_port_was_taken_starts_on_another() {
    let (_holder, taken) = held();
    osmium_test_harness::force_next_port(taken);
    let b = backend(0);
    assert_eq!(osmium_test_harness::last_start_attempts(), 2);
    assert_ne!(b.port(), taken);
    served(b.port());
}

#[test]
fn osmium_proxy_whose_listen_port_was_taken_moves_its_listen_line() {
    let b = backend(0);
    let (_holder, taken) = held();
    let px = proxy(&pool(taken, b.port()), taken);
    assert_eq!(osmium_test_harness::last_start_attempts(), 2);
    assert_ne!(px.port(), taken);
    served(px.port());
}

#[test]
fn osmium_proxy_whose_stats_port_was_taken_starts_on_another() {
    let b = backend(0);
    let (_holder, taken) = held();
    let port = free_port();
    osmium_test_harness::force_next_port(taken);
    let px = proxy(&pool(port, b.port()), port);
    assert_eq!(osmium_test_harness::last_start_attempts(), 2);
    assert_ne!(px.stats_port(), taken);
    served(px.port());
    assert!(stats_doc(px.stats_port()).contains("\"pool\""));
}

#[test]
fn nutcracker_whose_ports_were_taken_starts_on_others() {
    let Some(bin) = nutcracker_bin() else {
        return;
    };
    let b = backend(0);
    // Its listen port...
    let (_holder, taken) = held();
    let nc = nutcracker(&bin, &pool(taken, b.port()), taken);
    assert_eq!(osmium_test_harness::last_start_attempts(), 2);
    assert_ne!(nc.port(), taken);
    served(nc.port());
    // ...and its stats port.
    let port = free_port();
    osmium_test_harness::force_next_port(taken);
    let nc = nutcracker(&bin, &pool(port, b.port()), port);
    assert_eq!(osmium_test_harness::last_start_attempts(), 2);
    assert_ne!(nc.stats_port(), taken);
    served(nc.port());
}

#[test]
fn a_listen_line_is_moved_and_nothing_else() {
    let y =
        "a:\n  listen: 127.0.0.1:4000\n  servers:\n   - 127.0.0.1:4000:1\n   - 127.0.0.1:40001:1\n";
    assert_eq!(
        listen_moved(y, 4000, 5000),
        "a:\n  listen: 127.0.0.1:5000\n  servers:\n   - 127.0.0.1:4000:1\n   - 127.0.0.1:40001:1\n"
    );
    assert_eq!(
        listen_moved("b:\n  listen: 127.0.0.1:40001\n", 4000, 5000),
        "b:\n  listen: 127.0.0.1:40001\n"
    );
}
