//! [`Conn`] against real listeners on 127.0.0.1 (and a unix socket): a
//! large queue written over many writable events, replies that arrive a
//! few bytes at a time, and the same through a TLS session.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token};
use osmium_protocol::client::reply::{Expect, Outcome};
use osmium_test_harness::Certs;
use rustls::crypto::aws_lc_rs::default_provider;
use rustls_pki_types::ServerName;

use super::*;

/// A connection to `addr`, registered with a new poll.
fn connect(addr: SocketAddr) -> (Conn, Poll) {
    let poll = Poll::new().unwrap();
    let mut conn: Conn = Conn::plain(Socket::connect(addr).unwrap());
    let rw = Interest::READABLE | Interest::WRITABLE;
    poll.registry().register(&mut conn, Token(0), rw).unwrap();
    (conn, poll)
}

/// Polls (no timeout: events, not time, end the wait) until `done`.
fn drive<E: TlsEvents>(
    poll: &mut Poll,
    conn: &mut Conn<E>,
    mut done: impl FnMut(&mut Conn<E>) -> bool,
) {
    let mut events = Events::with_capacity(8);
    while !done(conn) {
        poll.poll(&mut events, Some(Duration::from_secs(60)))
            .unwrap();
    }
}

#[test]
fn a_queue_larger_than_the_socket_goes_out_over_writable_events() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (mut conn, mut poll) = connect(addr);
    let (mut server, _) = l.accept().unwrap();
    let request = b"set k 0 0 1\r\nx\r\n";
    let n = 1 << 20;
    for _ in 0..n {
        conn.queue(request);
    }
    let total = request.len() * n;
    drive(&mut poll, &mut conn, |c| c.connected().unwrap());
    let first = conn.flush().unwrap();
    assert!(
        first < total,
        "the server reads nothing yet: the socket fills"
    );
    assert!(conn.wants_write());
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        server.read_to_end(&mut got).unwrap();
        got
    });
    let mut written = first;
    drive(&mut poll, &mut conn, |c| {
        written += c.flush().unwrap();
        !c.wants_write()
    });
    assert_eq!(written, total);
    assert_eq!(conn.unsent(), 0);
    drop(conn);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), total);
    assert!(got.chunks(request.len()).all(|r| r == request));
}

/// A server that sends `replies` a few bytes at a time, each piece after
/// the client acknowledged the one before (one byte), so the client sees
/// every reply split across reads.
fn trickle(mut s: impl Read + Write, replies: &[u8], piece: usize) {
    let mut ack = [0u8; 1];
    for p in replies.chunks(piece) {
        s.write_all(p).unwrap();
        s.flush().unwrap();
        s.read_exact(&mut ack).unwrap();
    }
}

const REPLIES: &[u8] = b"VALUE k 0 3\r\nabc\r\nEND\r\nEND\r\nSTORED\r\nVA 2 f1\r\nxy\r\n";
const SHAPES: [(Expect, Outcome, usize); 4] = [
    (Expect::Values, Outcome::Value, 23),
    (Expect::Values, Outcome::Miss, 5),
    (Expect::Line, Outcome::Done, 8),
    (Expect::MetaValue, Outcome::Value, 13),
];

/// Reads `REPLIES` as it trickles in, acknowledging every read; the
/// replies framed, in order.
fn read_split<E: TlsEvents>(poll: &mut Poll, conn: &mut Conn<E>) -> Vec<(usize, Outcome)> {
    let mut framed = Vec::new();
    let mut reads = 0;
    drive(poll, conn, |c| {
        let before = c.input().len();
        assert!(c.fill(false).unwrap(), "the server is not done");
        if c.input().len() > before {
            reads += 1;
            while let Some(&(expect, _, _)) = SHAPES.get(framed.len()) {
                let Some((len, outcome)) = c.next_reply(expect).unwrap() else {
                    break;
                };
                framed.push((len, outcome));
                c.consume(len);
            }
            c.queue(b"+");
        }
        c.flush().unwrap();
        framed.len() == SHAPES.len() && !c.wants_write()
    });
    assert!(reads > SHAPES.len(), "replies came split: {reads} reads");
    assert!(conn.input().is_empty());
    framed
}

fn expected() -> Vec<(usize, Outcome)> {
    SHAPES.iter().map(|&(_, o, n)| (n, o)).collect()
}

#[test]
fn replies_split_across_reads_are_framed_whole_and_in_order() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let (mut conn, mut poll) = connect(l.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        trickle(s, REPLIES, 5);
    });
    assert_eq!(read_split(&mut poll, &mut conn), expected());
    server.join().unwrap();
    assert!(!conn.fill(true).unwrap(), "the end of the stream");
}

#[test]
fn a_unix_socket_works_the_same() {
    let dir = std::env::temp_dir().join(format!("osmium-nb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let _ = std::fs::remove_file(&path);
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let mut poll = Poll::new().unwrap();
    let mut conn: Conn = Conn::plain(Socket::connect_unix(&path).unwrap());
    let rw = Interest::READABLE | Interest::WRITABLE;
    poll.registry().register(&mut conn, Token(0), rw).unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        trickle(s, REPLIES, 3);
    });
    assert_eq!(read_split(&mut poll, &mut conn), expected());
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unframeable_reply_is_a_desync() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let (mut conn, mut poll) = connect(l.local_addr().unwrap());
    let (mut s, _) = l.accept().unwrap();
    s.write_all(b"VALUE k 0 3\r\nabcdefgh\r\n").unwrap();
    drive(&mut poll, &mut conn, |c| {
        c.fill(false).unwrap();
        c.input().len() >= 23
    });
    assert_eq!(conn.next_reply(Expect::Values), Err(Desync));
}

#[test]
fn tls_requests_and_split_replies() {
    let certs = Certs::new();
    let server_config = rustls::ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            crate::load::certs(&certs.path("server.pem")).unwrap(),
            crate::load::key(&certs.path("server.key"), crate::load::KeyFormat::Pem).unwrap(),
        )
        .unwrap();
    let client_config = rustls::ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(crate::load::roots(&certs.path("ca.pem")).unwrap())
        .with_no_client_auth();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let session = rustls::ServerConnection::new(Arc::new(server_config)).unwrap();
        let mut tls = rustls::StreamOwned::new(session, s);
        let mut request = [0u8; 7];
        tls.read_exact(&mut request).unwrap();
        assert_eq!(&request, b"get k\r\n");
        trickle(tls, REPLIES, 4);
    });
    let mut poll = Poll::new().unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let session = TlsStream::connect(
        Socket::connect(addr).unwrap(),
        Arc::new(client_config),
        name,
        (),
    )
    .unwrap();
    let mut conn = Conn::tls(session);
    let rw = Interest::READABLE | Interest::WRITABLE;
    poll.registry().register(&mut conn, Token(0), rw).unwrap();
    drive(&mut poll, &mut conn, |c| c.connected().unwrap());
    // Queued before the handshake: sent once the session takes it.
    conn.queue(b"get k\r\n");
    drive(&mut poll, &mut conn, |c| {
        c.fill(false).unwrap();
        c.flush().unwrap();
        !c.wants_write()
    });
    assert_eq!(read_split(&mut poll, &mut conn), expected());
    server.join().unwrap();
}

#[test]
fn a_refused_connect_is_an_error() {
    // A port nothing listens on: bound, then closed.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let outcome = Socket::connect(addr).and_then(|mut socket| {
        let mut poll = Poll::new()?;
        let rw = Interest::READABLE | Interest::WRITABLE;
        poll.registry().register(&mut socket, Token(0), rw)?;
        let mut events = Events::with_capacity(8);
        while !socket.connected()? {
            poll.poll(&mut events, Some(Duration::from_secs(60)))?;
        }
        Ok(())
    });
    assert!(outcome.is_err(), "{outcome:?}");
}
