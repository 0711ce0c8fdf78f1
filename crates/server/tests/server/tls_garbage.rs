//! The TLS listener against what no TLS client sends, over real sockets to
//! the osmium binary started with `-Z` (certificates from `common::certs`):
//! random bytes, real ClientHellos (TLS 1.2 and 1.3, made by a rustls
//! client) cut short or with bytes changed, sent whole or in small pieces,
//! and random records after a finished handshake. After each connection a
//! fresh TLS client must still be served, and at the end the server is
//! still running and has counted failed handshakes and failed records
//! (`ssl_handshake_errors`, `ssl_proto_errors`).
//!
//! tests/tls/test_tls.py sends a few fixed malformed records to memcached
//! and osmium alike; this test draws many (proptest) against osmium.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rustls::crypto::aws_lc_rs;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::common;
use osmium_test_harness::{Certs, Running};

fn start(certs: &Certs) -> Running {
    common::osmium()
        .threads(2)
        .tls(certs)
        .opt("ssl_verify_mode=1")
        .start()
}

/// A rustls client trusting the test CA, offering TLS 1.3 only, 1.2 only,
/// or both.
fn client_config(
    certs: &Certs,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(certs.path("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

fn tls_connect(port: u16, config: &Arc<ClientConfig>) -> StreamOwned<ClientConnection, TcpStream> {
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let conn = ClientConnection::new(config.clone(), name).unwrap();
    StreamOwned::new(conn, sock)
}

/// Sends `request` over a new TLS connection; the reply up to `end`.
fn ask(port: u16, config: &Arc<ClientConfig>, request: &[u8], end: &[u8]) -> Vec<u8> {
    let mut s = tls_connect(port, config);
    s.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(end) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) => panic!("TLS read: {e} (got {:?})", String::from_utf8_lossy(&reply)),
        }
    }
    reply
}

/// The first flight of a rustls client with this configuration.
fn client_hello(config: &Arc<ClientConfig>) -> Vec<u8> {
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(config.clone(), name).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

/// Reads until the server closes (or 2 s pass: an incomplete record the
/// server still waits for ends when this side's FIN arrives).
fn read_to_close(sock: &mut TcpStream) {
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return, // reset, or the timeout
        }
    }
}

/// Sends `data` on a raw connection in pieces of `piece` bytes (0: whole),
/// then half-closes and waits for the server to close.
fn send_raw(port: u16, data: &[u8], piece: usize) {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_nodelay(true).unwrap();
    let size = if piece == 0 { data.len().max(1) } else { piece };
    for chunk in data.chunks(size) {
        if sock.write_all(chunk).is_err() {
            break; // the server already refused it
        }
    }
    let _ = sock.shutdown(Shutdown::Write);
    read_to_close(&mut sock);
}

#[derive(Debug, Clone)]
enum Garbage {
    /// Bytes from nowhere.
    Random(Vec<u8>),
    /// A real ClientHello (TLS 1.3 when `tls13`), cut to `keep` bytes at
    /// most, with `flips` (offset, xor) applied.
    Hello {
        tls13: bool,
        keep: usize,
        flips: Vec<(usize, u8)>,
    },
    /// A finished handshake and one request, then these bytes as they are
    /// (a TLS record header of `content_type` and the body when `framed`).
    AfterHandshake {
        framed: bool,
        content_type: u8,
        body: Vec<u8>,
    },
}

fn garbage() -> impl Strategy<Value = Garbage> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..3000).prop_map(Garbage::Random),
        (
            any::<bool>(),
            0..600usize,
            prop::collection::vec((any::<usize>(), 1..=255u8), 0..4)
        )
            .prop_map(|(tls13, keep, flips)| Garbage::Hello { tls13, keep, flips }),
        (
            any::<bool>(),
            prop::sample::select(vec![20u8, 21, 22, 23, 24, 99]),
            prop::collection::vec(any::<u8>(), 0..600)
        )
            .prop_map(|(framed, content_type, body)| Garbage::AfterHandshake {
                framed,
                content_type,
                body
            }),
    ]
}

fn stat(port: u16, config: &Arc<ClientConfig>, name: &str) -> u64 {
    let reply = ask(port, config, b"stats\r\n", b"END\r\n");
    let text = String::from_utf8_lossy(&reply);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in stats"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn the_tls_listener_survives_garbage_and_truncated_records() {
    let certs = Certs::new();
    let mut server = start(&certs);
    let port = server.port();
    let both = client_config(&certs, rustls::DEFAULT_VERSIONS);
    let hellos = [
        client_hello(&client_config(&certs, &[&rustls::version::TLS12])),
        client_hello(&client_config(&certs, &[&rustls::version::TLS13])),
    ];
    assert!(ask(port, &both, b"version\r\n", b"\r\n").starts_with(b"VERSION "));

    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&(garbage(), 0..40usize), |(g, piece)| {
        match &g {
            Garbage::Random(data) => send_raw(port, data, piece),
            Garbage::Hello { tls13, keep, flips } => {
                let mut data = hellos[usize::from(*tls13)].clone();
                data.truncate(*keep);
                for &(at, xor) in flips {
                    if !data.is_empty() {
                        let i = at % data.len();
                        data[i] ^= xor;
                    }
                }
                send_raw(port, &data, piece);
            }
            Garbage::AfterHandshake {
                framed,
                content_type,
                body,
            } => {
                let mut s = tls_connect(port, &both);
                s.write_all(b"version\r\n").unwrap();
                let mut buf = [0u8; 256];
                let n = s.read(&mut buf).unwrap();
                prop_assert!(buf[..n].starts_with(b"VERSION "));
                let mut raw = Vec::new();
                if *framed {
                    raw.extend_from_slice(&[*content_type, 3, 3]);
                    raw.extend_from_slice(&(body.len() as u16).to_be_bytes());
                }
                raw.extend_from_slice(body);
                let sock = s.get_mut();
                let _ = sock.write_all(&raw);
                let _ = sock.shutdown(Shutdown::Write);
                read_to_close(sock);
            }
        }
        prop_assert!(
            ask(port, &both, b"version\r\n", b"\r\n").starts_with(b"VERSION "),
            "no answer after {g:?}"
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        server.child().try_wait().unwrap().is_none(),
        "osmium exited"
    );
    let handshake_errors = stat(port, &both, "ssl_handshake_errors");
    let proto_errors = stat(port, &both, "ssl_proto_errors");
    println!("ssl_handshake_errors {handshake_errors}, ssl_proto_errors {proto_errors}");
    assert!(handshake_errors > 0, "no failed handshake counted");
    assert!(proto_errors > 0, "no failed record counted");
}
