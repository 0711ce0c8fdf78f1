//! Feeds arbitrary bytes, as the client's side of a connection, to the
//! server's TLS layer: the server's own `TlsStream` (transport/tls.rs) over
//! a real loopback socket, with the rustls configurations `TlsContext`
//! (tls_context.rs) builds from `-Z -o ssl_chain_cert=..,ssl_key=..,
//! ssl_ca_cert=..` settings, parsed as the binary parses its command line.
//! Both are reached through the server library's `fuzzing` module.
//!
//! Each input goes in twice, on two connections: all at once, then cut
//! into chunks whose sizes come from a hash of the input (one byte at a
//! time up to 2 KiB), each chunk read by the server before the next is
//! sent; then the client half-closes. The listener kind (`-Z`, `btls:`,
//! `mtls:`) and the context (verify mode 0 without a session cache, or
//! verify mode 1 with one) also come from the hash.
//!
//! A panic is a bug, and so is any of:
//! - plaintext reaching the server: no input can finish a handshake (the
//!   server's random, tickets and session IDs are never seen by the
//!   client, and 0-RTT data is not accepted);
//! - a failure that is not reported as `InvalidData`, or that is not
//!   counted exactly once in `ssl_handshake_errors` + `ssl_proto_errors`,
//!   or a count without a failure;
//! - cutting the bytes into chunks changing whether the connection fails.
#![no_main]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use osmium_server::fuzzing::{TlsConnection, TlsListener, TlsServer};
use osmium_server::Config;

struct Fixture {
    /// Verify mode 0, no session cache; verify mode 1 with the cache.
    contexts: [TlsServer; 2],
    listener: TcpListener,
    addr: SocketAddr,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tls");
        let context = |extra: &str| {
            let options = format!(
                "ssl_chain_cert={dir}/server.pem,ssl_key={dir}/server.key,\
                 ssl_ca_cert={dir}/ca.pem{extra}"
            );
            let config = Config::from_args(["-Z", "-o", &options]).expect("the TLS options parse");
            TlsServer::new(&config).expect("fuzz/tls certificates load")
        };
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        let addr = listener.local_addr().expect("its address");
        Fixture {
            contexts: [
                context(""),
                context(",ssl_verify_mode=1,ssl_session_cache"),
            ],
            listener,
            addr,
        }
    })
}

/// FNV-1a: the input's own randomness for chunk sizes and choices.
fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `data` in chunks of 1..=32 bytes, now and then up to 2 KiB.
fn chunks(data: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut state = seed | 1;
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = if state & 7 == 0 {
            1 + (state >> 8) % 2048
        } else {
            1 + (state >> 8) % 32
        } as usize;
        let (chunk, tail) = rest.split_at(len.min(rest.len()));
        out.push(chunk);
        rest = tail;
    }
    out
}

/// Reads what the server's TLS layer makes of the bytes so far, as a
/// worker does after a readable event (`TlsStream::read` takes records
/// until it has plaintext or the socket is empty). Ok(true): the client's
/// side ended (`Ok(0)`); Ok(false): nothing yet (`WouldBlock`); Err: the
/// connection failed.
fn drain(stream: &mut TlsConnection) -> Result<bool, std::io::Error> {
    let mut buf = [0u8; 4096];
    match stream.read(&mut buf) {
        Ok(0) => Ok(true),
        Ok(n) => {
            panic!("{n} bytes of plaintext from a client that cannot have finished a handshake")
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(e),
    }
}

/// One connection: `pieces` sent in turn, each read by the server before
/// the next. Whether the server failed it.
fn connection(ctx: &TlsServer, mode: TlsListener, pieces: &[&[u8]]) -> bool {
    let f = fixture();
    let mut client = TcpStream::connect(f.addr).expect("connect over loopback");
    // Reset on close: no TIME_WAIT from hundreds of thousands of runs.
    socket2::SockRef::from(&client)
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER");
    let (server, _) = f.listener.accept().expect("accept");
    server.set_nonblocking(true).expect("non-blocking");
    let mut stream = ctx.accept(server, mode).expect("a server connection");
    let before = ctx.errors();
    let mut outcome = Ok(false);
    for piece in pieces {
        client.write_all(piece).expect("loopback write");
        outcome = drain(&mut stream);
        if !matches!(outcome, Ok(false)) {
            break;
        }
    }
    if matches!(outcome, Ok(false)) {
        client.shutdown(Shutdown::Write).expect("half-close");
        // The FIN may take a moment to be readable.
        for _ in 0..1000 {
            outcome = drain(&mut stream);
            if !matches!(outcome, Ok(false)) {
                break;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let failed = match outcome {
        Ok(true) => false,
        Ok(false) => panic!("the client's end of stream never reached the server"),
        Err(e) => {
            assert_eq!(
                e.kind(),
                ErrorKind::InvalidData,
                "a TLS failure reported as {e:?}"
            );
            true
        }
    };
    let counted = ctx.errors() - before;
    assert_eq!(
        counted,
        u64::from(failed),
        "failed: {failed}, counted: {counted}"
    );
    stream.close();
    failed
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let h = hash(data);
    let ctx = &f.contexts[(h >> 62) as usize & 1];
    let mode = [TlsListener::Default, TlsListener::NoPeer, TlsListener::Peer][(h % 3) as usize];
    let whole = connection(ctx, mode, &[data]);
    let cut = connection(ctx, mode, &chunks(data, h));
    assert_eq!(
        whole, cut,
        "cutting the input into chunks changed whether it fails"
    );
});
