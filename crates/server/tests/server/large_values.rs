//! Integration tests: hits whose values are large enough to be written to
//! the socket straight from item memory (`direct.rs`, 32 KiB and up), in
//! the text, meta and binary protocols, pipelined with small ones, to a
//! client that reads only after it has sent everything, so the socket
//! fills and the server's writes are partial. Every test runs against
//! osmium and genuine memcached (`common::memcached_bin`: `MEMCACHED_BIN`,
//! else the oracle built by `scripts/build-memcached.sh`; skipped with a
//! message without one, a failure under CI=true), and expects the same
//! bytes from both.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common;
use common::memcached_bin;
use osmium_test_harness::Running;

/// Memcached when there is one (`common::memcached_bin`), then osmium:
/// the oracle first, so that an assertion memcached fails is seen as the
/// test's mistake, not as osmium's.
/// What both run with: 2 MB items, 256 MB of memory.
const ARGS: [&str; 4] = ["-I", "2m", "-m", "256"];

fn servers() -> Vec<Running> {
    let mut all = Vec::new();
    if let Some(bin) = memcached_bin() {
        all.push(common::memcached().bin(bin).args(ARGS).start());
    }
    all.push(common::osmium().args(ARGS).start());
    all
}

/// Deterministic bytes (xorshift), different per seed.
fn value(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const SIZES: [usize; 6] = [10, 32 * 1024, 40_000, 300_000, 1_000_000, 5];

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Stores SIZES' values as keys big0.. with text `set`.
fn load(port: u16) -> Vec<Vec<u8>> {
    let mut s = connect(port);
    let values: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| value(n, i as u64))
        .collect();
    for (i, v) in values.iter().enumerate() {
        s.write_all(format!("set big{i} {i} 0 {}\r\n", v.len()).as_bytes())
            .unwrap();
        s.write_all(v).unwrap();
        s.write_all(b"\r\n").unwrap();
        let mut r = [0u8; 8];
        s.read_exact(&mut r).unwrap();
        assert_eq!(&r, b"STORED\r\n");
    }
    values
}

/// Sends all of `req` from another thread (the server's replies fill the
/// socket long before the requests are all sent), waits a little so the
/// server meets a full socket, then reads `len` bytes.
fn exchange(port: u16, req: Vec<u8>, len: usize) -> Vec<u8> {
    let mut s = connect(port);
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&req).unwrap());
    std::thread::sleep(Duration::from_millis(200));
    let mut out = vec![0u8; len];
    s.read_exact(&mut out).unwrap();
    writer.join().unwrap();
    // Nothing more was sent.
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut more = [0u8; 1];
    assert!(
        !matches!(s.read(&mut more), Ok(n) if n > 0),
        "more bytes than expected"
    );
    out
}

#[test]
fn pipelined_text_gets_of_large_values_arrive_intact() {
    for srv in servers() {
        let values = load(srv.port());
        let mut req = Vec::new();
        let mut expected = Vec::new();
        for round in 0..3 {
            // One multi-key get of every value, then single gets in another
            // order, then a miss.
            let keys: Vec<String> = (0..SIZES.len()).map(|i| format!("big{i}")).collect();
            req.extend_from_slice(format!("get {}\r\n", keys.join(" ")).as_bytes());
            for (i, v) in values.iter().enumerate() {
                expected.extend_from_slice(format!("VALUE big{i} {i} {}\r\n", v.len()).as_bytes());
                expected.extend_from_slice(v);
                expected.extend_from_slice(b"\r\n");
            }
            expected.extend_from_slice(b"END\r\n");
            for i in [4, 0, 3, 5, 2, 1]
                .iter()
                .cycle()
                .skip(round)
                .take(SIZES.len())
            {
                req.extend_from_slice(format!("get big{i}\r\n").as_bytes());
                let v = &values[*i];
                expected.extend_from_slice(format!("VALUE big{i} {i} {}\r\n", v.len()).as_bytes());
                expected.extend_from_slice(v);
                expected.extend_from_slice(b"\r\nEND\r\n");
            }
            req.extend_from_slice(b"get nokey\r\n");
            expected.extend_from_slice(b"END\r\n");
            // A large value before a miss, and after one (get, and gat,
            // which looks keys up one at a time).
            for cmd in ["get", "gat 0"] {
                let last = 4; // the 1,000,000-byte value
                req.extend_from_slice(format!("{cmd} big{last} nokey\r\n").as_bytes());
                req.extend_from_slice(format!("{cmd} nokey big{last}\r\n").as_bytes());
                for _ in 0..2 {
                    let v = &values[last];
                    expected.extend_from_slice(
                        format!("VALUE big{last} {last} {}\r\n", v.len()).as_bytes(),
                    );
                    expected.extend_from_slice(v);
                    expected.extend_from_slice(b"\r\nEND\r\n");
                }
            }
        }
        let got = exchange(srv.port(), req, expected.len());
        assert!(got == expected, "{}: replies differ", srv.name());
    }
}

#[test]
fn pipelined_meta_gets_of_large_values_arrive_intact() {
    for srv in servers() {
        let values = load(srv.port());
        let mut req = Vec::new();
        let mut expected = Vec::new();
        // Enough rounds (about 8 MB of replies) to fill the socket.
        for _ in 0..6 {
            for (i, v) in values.iter().enumerate().rev() {
                req.extend_from_slice(format!("mg big{i} v f s k\r\n").as_bytes());
                expected.extend_from_slice(
                    format!("VA {} f{i} s{} kbig{i}\r\n", v.len(), v.len()).as_bytes(),
                );
                expected.extend_from_slice(v);
                expected.extend_from_slice(b"\r\n");
                req.extend_from_slice(b"mn\r\n");
                expected.extend_from_slice(b"MN\r\n");
            }
        }
        let got = exchange(srv.port(), req, expected.len());
        assert!(got == expected, "{}: replies differ", srv.name());
    }
}

/// A binary GET/GETK request.
fn binary_get(opcode: u8, key: &[u8], opaque: u32) -> Vec<u8> {
    let mut r = vec![0x80, opcode];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.extend_from_slice(&[0, 0, 0, 0]);
    r.extend_from_slice(&(key.len() as u32).to_be_bytes());
    r.extend_from_slice(&opaque.to_be_bytes());
    r.extend_from_slice(&[0; 8]);
    r.extend_from_slice(key);
    r
}

#[test]
fn pipelined_binary_gets_of_large_values_arrive_intact() {
    const GET: u8 = 0x00;
    const GETK: u8 = 0x0c;
    for srv in servers() {
        let values = load(srv.port());
        let mut req = Vec::new();
        // (opcode, key, value) of each reply, in order.
        let mut want = Vec::new();
        for round in 0..3u32 {
            for (i, v) in values.iter().enumerate() {
                let key = format!("big{i}").into_bytes();
                let op = if (i as u32 + round).is_multiple_of(2) {
                    GET
                } else {
                    GETK
                };
                req.extend_from_slice(&binary_get(op, &key, round << 8 | i as u32));
                want.push((op, key, v.clone(), round << 8 | i as u32, i as u32));
            }
        }
        let len: usize = want
            .iter()
            .map(|(op, key, v, ..)| 24 + 4 + v.len() + if *op == GETK { key.len() } else { 0 })
            .sum();
        let got = exchange(srv.port(), req, len);
        let mut at = 0;
        for (op, key, v, opaque, flags) in want {
            let h = &got[at..at + 24];
            assert_eq!(h[0], 0x81, "{}: response magic", srv.name());
            assert_eq!(h[1], op, "{}", srv.name());
            let klen = if op == GETK { key.len() } else { 0 };
            assert_eq!(u16::from_be_bytes([h[2], h[3]]) as usize, klen);
            assert_eq!(h[4], 4, "extras");
            assert_eq!(&h[6..8], &[0, 0], "{}: status", srv.name());
            let body = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
            assert_eq!(body, 4 + klen + v.len());
            assert_eq!(u32::from_be_bytes(h[12..16].try_into().unwrap()), opaque);
            let b = &got[at + 24..at + 24 + body];
            assert_eq!(u32::from_be_bytes(b[..4].try_into().unwrap()), flags);
            assert_eq!(&b[4..4 + klen], &key[..klen]);
            assert!(
                b[4 + klen..] == v[..],
                "{}: value of {opaque:#x}",
                srv.name()
            );
            at += 24 + body;
        }
    }
}

#[test]
fn a_too_long_key_after_a_large_value_makes_the_whole_get_an_error() {
    // memcached answers a get with any key over 250 bytes with one error
    // line (followed by an empty line) and no values, so a value before
    // that key must not have gone to the socket directly.
    for srv in servers() {
        let values = load(srv.port());
        let long = "k".repeat(251);
        let req = format!("get big4 big3 {long}\r\nget big0\r\n").into_bytes();
        let mut expected = b"CLIENT_ERROR bad command line format\r\n\r\n".to_vec();
        expected.extend_from_slice(format!("VALUE big0 0 {}\r\n", values[0].len()).as_bytes());
        expected.extend_from_slice(&values[0]);
        expected.extend_from_slice(b"\r\nEND\r\n");
        let got = exchange(srv.port(), req, expected.len());
        assert!(
            got == expected,
            "{}: {:?}",
            srv.name(),
            String::from_utf8_lossy(&got[..got.len().min(80)])
        );
    }
}

#[test]
fn pipelined_large_sets_store_every_byte() {
    // Several large sets in one stream (each data block larger than a
    // read, some ending inside the same read as the next set's line),
    // then gets of them all.
    for srv in servers() {
        let sizes = [1_500_000usize, 40_000, 1_048_000, 7, 600_000, 2_000];
        let mut req = Vec::new();
        let mut expected = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let v = value(n, 100 + i as u64);
            req.extend_from_slice(format!("set pipe{i} {i} 0 {n}\r\n").as_bytes());
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
            expected.extend_from_slice(b"STORED\r\n");
        }
        for (i, &n) in sizes.iter().enumerate().rev() {
            let v = value(n, 100 + i as u64);
            req.extend_from_slice(format!("get pipe{i}\r\n").as_bytes());
            expected.extend_from_slice(format!("VALUE pipe{i} {i} {n}\r\n").as_bytes());
            expected.extend_from_slice(&v);
            expected.extend_from_slice(b"\r\nEND\r\n");
        }
        let got = exchange(srv.port(), req, expected.len());
        assert!(got == expected, "{}: replies differ", srv.name());
    }
}

#[test]
fn a_large_data_block_with_a_bad_end_or_cut_off_stores_nothing() {
    for srv in servers() {
        let old = value(100, 1);
        let mut s = connect(srv.port());
        s.write_all(b"set k 0 0 100\r\n").unwrap();
        s.write_all(&old).unwrap();
        s.write_all(b"\r\n").unwrap();
        let mut r = [0u8; 8];
        s.read_exact(&mut r).unwrap();
        assert_eq!(&r, b"STORED\r\n");
        // A 200 kB block sent in pieces, ending in "XY" instead of \r\n:
        // memcached reads the block and its two last bytes, refuses it and
        // parses what follows as the next command.
        let v = value(200_000, 2);
        s.write_all(b"set k 0 0 200000\r\n").unwrap();
        for piece in v.chunks(70_000) {
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(piece).unwrap();
        }
        s.write_all(b"XYget k\r\n").unwrap();
        let mut expected = b"CLIENT_ERROR bad data chunk\r\nVALUE k 0 100\r\n".to_vec();
        expected.extend_from_slice(&old);
        expected.extend_from_slice(b"\r\nEND\r\n");
        let mut got = vec![0u8; expected.len()];
        s.read_exact(&mut got).unwrap();
        assert!(
            got == expected,
            "{}: {:?}",
            srv.name(),
            String::from_utf8_lossy(&got[..40])
        );
        // A connection closed halfway through a block stores nothing.
        let mut c = connect(srv.port());
        c.write_all(b"set k 0 0 200000\r\n").unwrap();
        c.write_all(&v[..150_000]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(c);
        std::thread::sleep(Duration::from_millis(50));
        s.write_all(b"get k\r\n").unwrap();
        let mut got = vec![0u8; expected.len() - 29];
        s.read_exact(&mut got).unwrap();
        assert!(got == expected[29..], "{}", srv.name());
        // And the next large set works.
        s.write_all(b"set k 5 0 200000\r\n").unwrap();
        s.write_all(&v).unwrap();
        s.write_all(b"\r\nget k\r\n").unwrap();
        let mut want = b"STORED\r\nVALUE k 5 200000\r\n".to_vec();
        want.extend_from_slice(&v);
        want.extend_from_slice(b"\r\nEND\r\n");
        let mut got = vec![0u8; want.len()];
        s.read_exact(&mut got).unwrap();
        assert!(got == want, "{}", srv.name());
    }
}

/// A binary storage request (SET 0x01, ADD 0x02, REPLACE 0x03, SETQ 0x11).
fn binary_store(
    opcode: u8,
    key: &[u8],
    value: &[u8],
    flags: u32,
    cas: u64,
    opaque: u32,
) -> Vec<u8> {
    let mut r = vec![0x80, opcode];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.extend_from_slice(&[8, 0, 0, 0]);
    r.extend_from_slice(&((8 + key.len() + value.len()) as u32).to_be_bytes());
    r.extend_from_slice(&opaque.to_be_bytes());
    r.extend_from_slice(&cas.to_be_bytes());
    r.extend_from_slice(&flags.to_be_bytes());
    r.extend_from_slice(&0u32.to_be_bytes());
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    r
}

/// Reads one binary response: (opcode, status, opaque, cas, body).
fn read_response(s: &mut TcpStream) -> (u8, u16, u32, u64, Vec<u8>) {
    let mut h = [0u8; 24];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[0], 0x81);
    let body_len = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
    let mut body = vec![0u8; body_len];
    s.read_exact(&mut body).unwrap();
    (
        h[1],
        u16::from_be_bytes([h[6], h[7]]),
        u32::from_be_bytes(h[12..16].try_into().unwrap()),
        u64::from_be_bytes(h[16..24].try_into().unwrap()),
        body,
    )
}

#[test]
fn binary_storage_of_large_values_in_pieces() {
    for srv in servers() {
        let a = value(300_000, 7);
        let b = value(1_200_000, 8);
        let mut s = connect(srv.port());
        // Each request is sent in pieces, so the server sees its header
        // long before the end of its value.
        let send = |s: &mut TcpStream, req: &[u8]| {
            for piece in req.chunks(100_000) {
                s.write_all(piece).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        send(&mut s, &binary_store(0x01, b"ka", &a, 11, 0, 1));
        let (op, st, opaque, cas_a, body) = read_response(&mut s);
        assert_eq!(
            (op, st, opaque, body.len()),
            (0x01, 0, 1, 0),
            "{}",
            srv.name()
        );
        // ADD of a present key, REPLACE of an absent one: refused.
        send(&mut s, &binary_store(0x02, b"ka", &b, 0, 0, 2));
        assert_eq!(read_response(&mut s).1, 0x0002, "{}: add", srv.name());
        send(&mut s, &binary_store(0x03, b"none", &b, 0, 0, 3));
        assert_eq!(read_response(&mut s).1, 0x0001, "{}: replace", srv.name());
        // A SET with a wrong CAS, then the right one.
        send(&mut s, &binary_store(0x01, b"ka", &b, 12, cas_a + 1, 4));
        assert_eq!(read_response(&mut s).1, 0x0002, "{}: cas", srv.name());
        send(&mut s, &binary_store(0x01, b"ka", &b, 12, cas_a, 5));
        let (_, st, opaque, cas_b, _) = read_response(&mut s);
        assert_eq!((st, opaque), (0, 5), "{}", srv.name());
        assert_ne!(cas_b, cas_a);
        // SETQ answers nothing; the GETK after it shows both values.
        send(&mut s, &binary_store(0x11, b"kq", &a, 13, 0, 6));
        for (key, v, flags) in [(&b"ka"[..], &b, 12u32), (&b"kq"[..], &a, 13)] {
            s.write_all(&binary_get(0x0c, key, 7)).unwrap();
            let (op, st, opaque, _, body) = read_response(&mut s);
            assert_eq!((op, st, opaque), (0x0c, 0, 7), "{}", srv.name());
            assert_eq!(u32::from_be_bytes(body[..4].try_into().unwrap()), flags);
            assert_eq!(&body[4..4 + key.len()], key);
            assert!(body[4 + key.len()..] == v[..], "{}", srv.name());
        }
    }
}

#[test]
fn meta_sets_of_large_values_in_pieces() {
    for srv in servers() {
        let a = value(250_000, 9);
        let b = value(900_000, 10);
        let mut s = connect(srv.port());
        let mut exchange_one = |req_line: &str, v: &[u8], want: &[u8]| {
            s.write_all(req_line.as_bytes()).unwrap();
            for piece in v.chunks(60_000) {
                s.write_all(piece).unwrap();
                std::thread::sleep(Duration::from_millis(3));
            }
            s.write_all(b"\r\nmn\r\n").unwrap();
            let mut got = vec![0u8; want.len() + 4];
            s.read_exact(&mut got).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&[want, b"MN\r\n"].concat()),
                "{}: {req_line}",
                srv.name()
            );
        };
        exchange_one(
            &format!("ms mk {} F5 T0 O123 k\r\n", a.len()),
            &a,
            b"HD O123 kmk\r\n",
        );
        exchange_one(&format!("ms mk {} ME O1\r\n", b.len()), &b, b"NS O1\r\n");
        exchange_one(&format!("ms none {} MR\r\n", b.len()), &b, b"NS\r\n");
        // A CAS that cannot match (0); q hides only HD: EX is sent.
        exchange_one(&format!("ms mk {} C0 q\r\n", b.len()), &b, b"EX\r\n");
        exchange_one(&format!("ms mk {} C0\r\n", b.len()), &b, b"EX\r\n");
        exchange_one(&format!("ms mk {} q F6\r\n", b.len()), &b, b"");
        // Bad end of block: refused, the old value stays.
        s.write_all(format!("ms mk {} F7\r\n", a.len()).as_bytes())
            .unwrap();
        for piece in a.chunks(60_000) {
            s.write_all(piece).unwrap();
            std::thread::sleep(Duration::from_millis(3));
        }
        s.write_all(b"XXmg mk v f s\r\n").unwrap();
        let mut want = format!(
            "CLIENT_ERROR bad data chunk\r\nVA {} f6 s{}\r\n",
            b.len(),
            b.len()
        )
        .into_bytes();
        want.extend_from_slice(&b);
        want.extend_from_slice(b"\r\n");
        let mut got = vec![0u8; want.len()];
        s.read_exact(&mut got).unwrap();
        assert!(
            got == want,
            "{}: {:?}",
            srv.name(),
            String::from_utf8_lossy(&got[..60])
        );
    }
}
