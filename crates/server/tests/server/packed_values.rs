//! Packed values (`-o compression=all`: every value worth it is stored as
//! a zstd frame when it is written), over real sockets against the real
//! binary: every command that reads a value answers byte for byte what a
//! `compression=off` server answers (text get/gets/gat/touch, meta mg and
//! me, binary GET/GETK, append/prepend, incr/decr on a long number-like
//! value, `lru_crawler metadump`'s `size=`), while the packing server's
//! `stats bytes` shows the items are smaller; a replica of a packing
//! primary holds the client's bytes; a memory file with packed items comes
//! back after kill -9, also to a server started with `compression=off`;
//! and a frame damaged in that file is a miss, dropped and counted
//! (`compress_errors`).

use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;

use osmium_test_harness::Running;

use crate::common;
use crate::replication_support::{self as repl, converge, to, with, Node};
use crate::restart_support::{self as rs, MemDir};

/// Text that compresses like a cache's JSON values, `len` bytes.
fn json(len: usize, seed: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 64);
    let mut i = seed;
    while v.len() < len {
        v.extend_from_slice(
            format!(
                "{{\"id\":{i},\"user\":\"name{}\",\"tags\":[\"a\",\"b{}\"],\"ok\":true}},",
                i % 89,
                i % 7
            )
            .as_bytes(),
        );
        i += 1;
    }
    v.truncate(len);
    v
}

/// Bytes that do not compress.
fn noise(len: usize) -> Vec<u8> {
    rs::pattern(len as u64, len)
}

/// The values both servers get: text of every size class (the largest
/// read straight into its item), a value that does not compress, one that
/// looks gzipped, and a 100-byte number-like value.
fn values() -> BTreeMap<String, Vec<u8>> {
    let mut v = BTreeMap::new();
    for (i, len) in [64usize, 100, 1000, 4096, 16_384, 65_536, 300_000]
        .into_iter()
        .enumerate()
    {
        v.insert(format!("t{len}"), json(len, i));
    }
    v.insert("small".into(), json(40, 9));
    v.insert("noise".into(), noise(5000));
    let mut gz = vec![0x1f, 0x8b, 8, 0];
    gz.extend_from_slice(&json(2000, 3));
    v.insert("gz".into(), gz);
    v.insert("num".into(), vec![b'1'; 100]);
    v
}

/// Sends `req` and then `mn`, and returns everything before the `MN`.
fn exchange(c: &mut TcpStream, req: &[u8]) -> Vec<u8> {
    c.write_all(req).unwrap();
    c.write_all(b"mn\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1 << 16];
    while !got.ends_with(b"MN\r\n") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    got.truncate(got.len() - 4);
    got
}

fn set(key: &str, flags: u32, value: &[u8]) -> Vec<u8> {
    let mut r = format!("set {key} {flags} 0 {}\r\n", value.len()).into_bytes();
    r.extend_from_slice(value);
    r.extend_from_slice(b"\r\n");
    r
}

/// A server of each kind: packing everything, and packing nothing.
fn both() -> (Running, Running) {
    (
        common::osmium().opt("compression=all").start(),
        common::osmium().opt("compression=off").start(),
    )
}

fn stat(c: &mut TcpStream, name: &str) -> u64 {
    let reply = exchange(c, b"stats\r\n");
    let text = String::from_utf8(reply).unwrap();
    let line = text
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no stat {name}"));
    line.split(' ').nth(2).unwrap().parse().unwrap()
}

/// The `key=value` fields of a `me` or metadump line, without those that
/// differ between any two servers (CAS uniques; last access and expiry,
/// which each server's clock counts).
fn fields(line: &str) -> Vec<String> {
    line.split(' ')
        .filter(|f| !["cas=", "la=", "exp="].iter().any(|p| f.starts_with(p)))
        .map(String::from)
        .collect()
}

#[test]
fn every_read_of_a_packed_value_answers_as_an_unpacked_server() {
    let (all, off) = both();
    let (mut a, mut o) = (all.connect(), off.connect());
    let values = values();
    let same = |a: &mut TcpStream, o: &mut TcpStream, req: &[u8]| {
        let (x, y) = (exchange(a, req), exchange(o, req));
        assert!(
            x == y,
            "{}: packed {} bytes, off {} bytes ({:?} vs {:?})",
            String::from_utf8_lossy(&req[..req.len().min(60)]),
            x.len(),
            y.len(),
            String::from_utf8_lossy(&x[..x.len().min(120)]),
            String::from_utf8_lossy(&y[..y.len().min(120)]),
        );
        x
    };
    // Both servers get `req`; their replies must be the same bytes.
    macro_rules! ask {
        ($req:expr) => {
            same(&mut a, &mut o, $req)
        };
    }
    for (i, (key, value)) in values.iter().enumerate() {
        assert_eq!(ask!(&set(key, i as u32, value)), b"STORED\r\n");
    }
    // The packing server holds them in far less memory.
    let (packed, raw) = (stat(&mut a, "bytes"), stat(&mut o, "bytes"));
    assert!(packed * 4 < raw, "bytes: packed {packed}, raw {raw}");
    let keys: Vec<&str> = values.keys().map(String::as_str).collect();
    for (i, key) in keys.iter().enumerate() {
        let got = ask!(format!("get {key}\r\n").as_bytes());
        let v = &values[*key];
        let mut want = format!("VALUE {key} {i} {}\r\n", v.len()).into_bytes();
        want.extend_from_slice(v);
        want.extend_from_slice(b"\r\nEND\r\n");
        assert!(got == want, "get {key}");
        ask!(format!("mg {key} s v f t k\r\n").as_bytes());
        ask!(format!("mg {key} s\r\n").as_bytes());
        ask!(format!("mg {key} v q k O123\r\n").as_bytes());
    }
    ask!(format!("get {}\r\n", keys.join(" ")).as_bytes());
    ask!(format!("get {} missing {}\r\n", keys[0], keys[1]).as_bytes());
    ask!(b"gat 1000 t1000 t65536 noise\r\n");
    ask!(b"touch t4096 0\r\n");
    ask!(b"get t4096 t300000\r\n");
    ask!(b"mg t16384 v T500 t s\r\n");
    ask!(b"append t1000 0 0 5\r\n-tail\r\n");
    ask!(b"prepend t4096 0 0 5\r\nhead-\r\n");
    ask!(b"append t300000 0 0 3\r\nend\r\n");
    ask!(b"get t1000 t4096 t300000\r\n");
    let incr = ask!(b"incr num 1\r\n");
    assert_eq!(
        incr,
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    ask!(b"decr num 1\r\n");
    ask!(b"ma num\r\n");
    ask!(b"get num\r\n");
    // The gets' CAS uniques differ (they come from item locations); the
    // rest does not.
    let gets = format!("gets {}\r\n", keys.join(" "));
    let (x, y) = (
        exchange(&mut a, gets.as_bytes()),
        exchange(&mut o, gets.as_bytes()),
    );
    assert!(without_cas(&x) == without_cas(&y), "gets");
    assert_eq!(without_cas(&x).len(), values.len() + 1);
    // The dumps size items by the client's bytes, as memcached does.
    let dump = |c: &mut TcpStream| -> BTreeMap<String, Vec<String>> {
        let text = String::from_utf8(exchange(c, b"lru_crawler metadump all\r\n")).unwrap();
        text.lines()
            .filter(|l| l.starts_with("key="))
            .map(|l| (l.split(' ').next().unwrap().to_string(), fields(l)))
            .collect()
    };
    let (da, doff) = (dump(&mut a), dump(&mut o));
    assert_eq!(da.len(), values.len());
    assert_eq!(da, doff);
    for key in &keys {
        let me = |c: &mut TcpStream| {
            fields(&String::from_utf8(exchange(c, format!("me {key}\r\n").as_bytes())).unwrap())
        };
        let (x, y) = (me(&mut a), me(&mut o));
        assert!(x.iter().any(|f| f.starts_with("size=")), "me {key}: {x:?}");
        assert_eq!(x, y, "me {key}");
    }
}

/// A `gets` reply as (VALUE line without its CAS unique, value) pairs, and
/// what follows the last value.
fn without_cas(mut reply: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while reply.starts_with(b"VALUE ") {
        let eol = reply.windows(2).position(|w| w == b"\r\n").unwrap();
        let line = String::from_utf8(reply[..eol].to_vec()).unwrap();
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 5, "{line}");
        let len: usize = f[3].parse().unwrap();
        let value = reply[eol + 2..eol + 2 + len].to_vec();
        out.push((f[..4].join(" "), value));
        reply = &reply[eol + 2 + len + 2..];
    }
    out.push((String::from_utf8_lossy(reply).into_owned(), Vec::new()));
    out
}

/// A binary GET or GETK of `key`: the response's header and body.
fn binary_get(c: &mut TcpStream, op: u8, key: &[u8]) -> ([u8; 24], Vec<u8>) {
    let mut p = vec![0x80, op];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(&(key.len() as u32).to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(key);
    c.write_all(&p).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut h = [0u8; 24];
    r.read_exact(&mut h).unwrap();
    let len = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    assert!(r.buffer().is_empty(), "one response");
    (h, body)
}

#[test]
fn binary_gets_of_packed_values_answer_as_an_unpacked_server() {
    let (all, off) = both();
    let values = values();
    for s in [&all, &off] {
        let mut c = s.connect();
        for (key, value) in &values {
            assert_eq!(exchange(&mut c, &set(key, 3, value)), b"STORED\r\n");
        }
    }
    let (mut a, mut o) = (all.connect(), off.connect());
    for (key, value) in &values {
        for op in [0x00u8, 0x0c] {
            let (mut ha, ba) = binary_get(&mut a, op, key.as_bytes());
            let (mut ho, bo) = binary_get(&mut o, op, key.as_bytes());
            // The CAS uniques differ (item locations); nothing else may.
            ha[16..24].fill(0);
            ho[16..24].fill(0);
            assert_eq!(ha, ho, "{key} op {op}");
            assert!(ba == bo, "{key} op {op}");
            assert!(ba.ends_with(value), "{key} op {op}");
        }
    }
    let (h, _) = binary_get(&mut a, 0x00, b"missing");
    assert_eq!(u16::from_be_bytes([h[6], h[7]]), 1, "not found");
}

#[test]
fn a_replica_of_a_packing_primary_holds_the_clients_bytes() {
    let (pa, pb) = (common::free_port(), common::free_port());
    let b = Node::start(pb, &["-o".into(), "compression=off".into()]);
    let a = Node::start(pa, &with(to(pb), &["-o", "compression=all"]));
    let (mut ca, mut cb) = (a.client(), b.client());
    repl::wait("link up", || ca.stat("replica_0_link") == "up");
    let values = values();
    for (key, value) in &values {
        let mut req = format!("set {key} 9 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        assert_eq!(ca.call(&req), "STORED");
    }
    assert_eq!(ca.call(b"append t1000 0 0 2\r\n!!\r\n"), "STORED");
    let keys: Vec<&str> = values.keys().map(String::as_str).collect();
    converge(&mut ca, &mut cb, &keys);
    for (key, value) in &values {
        let got = cb.mg(key).unwrap_or_else(|| panic!("{key} on the replica"));
        let mut want = value.clone();
        if key == "t1000" {
            want.extend_from_slice(b"!!");
        }
        assert!(got.value == want, "{key}");
    }
}

#[test]
fn packed_items_come_back_after_kill_9_also_with_compression_off() {
    let dir = MemDir::new();
    let file = dir.file();
    let values = values();
    let keys: Vec<&str> = values.keys().map(String::as_str).collect();
    let mut srv = rs::server(&file, &rs::SETTINGS)
        .opt("compression=all")
        .start();
    let mut c = rs::client(&srv);
    for (i, (key, value)) in values.iter().enumerate() {
        c.set(key, i as u32, 0, value);
    }
    // Killed at once: no stop at all.
    srv.child().kill().unwrap();
    let (status, _) = rs::exited(&mut srv);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    for mode in ["compression=off", "compression=all"] {
        let srv = rs::server(&file, &rs::SETTINGS).opt(mode).start();
        let mut c = rs::client(&srv);
        let got = c.gets(&keys);
        for (i, (key, value)) in values.iter().enumerate() {
            let item = got.get(key).unwrap_or_else(|| panic!("{mode}: {key} lost"));
            assert_eq!(item.flags, i as u32, "{mode}: {key}");
            assert!(item.value == *value, "{mode}: the value of {key}");
        }
    }
}

/// A packed value whose frame was damaged in the memory file (written by
/// hand between a kill -9 and the restart): every read answers a miss, the
/// item is dropped and `stats` counts it in `compress_errors`; the other
/// items are served as they were.
#[test]
fn a_frame_damaged_in_the_memory_file_is_a_counted_miss() {
    let dir = MemDir::new();
    let file = dir.file();
    let (bad, good) = ("damaged:frame", "sound:frame");
    let value = json(4000, 11);
    let mut srv = rs::server(&file, &rs::SETTINGS)
        .opt("compression=all")
        .start();
    let mut c = rs::client(&srv);
    c.set(bad, 1, 0, &value);
    c.set(good, 2, 0, &value);
    srv.child().kill().unwrap();
    rs::exited(&mut srv);

    // The frame follows its key in item memory: its first bytes become
    // ones no zstd frame starts with.
    let bytes = std::fs::read(&file).unwrap();
    let at = bytes
        .windows(bad.len())
        .position(|w| w == bad.as_bytes())
        .expect("the key in the memory file")
        + bad.len();
    assert_eq!(
        bytes[at..]
            .windows(bad.len())
            .position(|w| w == bad.as_bytes()),
        None,
        "one copy of the key"
    );
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0xff; 16], at as u64).unwrap();
    drop(f);

    let srv = rs::server(&file, &rs::SETTINGS)
        .opt("compression=off")
        .start();
    let mut c = srv.connect();
    assert_eq!(stat(&mut c, "compress_errors"), 0);
    assert_eq!(
        exchange(&mut c, format!("get {bad}\r\n").as_bytes()),
        b"END\r\n"
    );
    assert_eq!(stat(&mut c, "compress_errors"), 1);
    // Dropped: the next reads miss without decoding it again.
    assert_eq!(
        exchange(&mut c, format!("mg {bad} v\r\n").as_bytes()),
        b"EN\r\n"
    );
    assert_eq!(
        exchange(&mut c, format!("gets {bad}\r\n").as_bytes()),
        b"END\r\n"
    );
    assert_eq!(stat(&mut c, "compress_errors"), 1);
    assert_eq!(stat(&mut c, "get_misses"), 3);
    assert_eq!(stat(&mut c, "curr_items"), 1);
    let mut want = format!("VALUE {good} 2 {}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert!(exchange(&mut c, format!("get {good}\r\n").as_bytes()) == want);
}
