//! `-o compression=cold` (the default) over real sockets against the real
//! binary: a 64 MiB cache filled with compressible values far past what it
//! holds raw keeps more of them than a `compression=off` server, because
//! its cleaner packs cold items instead of letting them be evicted (the
//! writes wait for a free segment, so that they do not outrun the
//! cleaner); and
//! every item it holds reads back byte for byte (`mg` with `s` gives the
//! client's size, `f` the flags, `v` the bytes); small values are packed
//! with dictionaries the pass trains from them (`-o compress_dicts`, on by
//! default), and read back whole too; packed items read three times are
//! written back raw by the cleaner (`pack_promoted`), still whole.

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::common;

/// 256 KiB of text like a cache's JSON values (about 4x compressible),
/// made once: values are cut out of it.
fn base_text() -> &'static [u8] {
    static TEXT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        let mut v = Vec::with_capacity((256 << 10) + 96);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        while v.len() < 256 << 10 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.extend_from_slice(
                format!(
                    "{{\"id\":{},\"user\":\"name{}\",\"score\":{},\"tags\":[\"t{}\"]}},",
                    x % 1_000_000,
                    (x >> 20) % 97,
                    (x >> 30) % 1000,
                    (x >> 40) % 13
                )
                .as_bytes(),
            );
        }
        v
    })
}

/// The value of key `i`: 1 KiB to 8 KiB of that text, starting with `i`.
fn value(i: usize) -> Vec<u8> {
    text_of(i, 1024 + (i * 7919) % 7168)
}

/// The value of key `i` in the dictionary test: 100 to 1,100 bytes.
fn small_value(i: usize) -> Vec<u8> {
    text_of(i, 100 + (i * 7919) % 1000)
}

/// `len` bytes of that text, starting with `i`.
fn text_of(i: usize, len: usize) -> Vec<u8> {
    let base = base_text();
    let at = (i * 104_729) % (base.len() - len);
    let mut v = format!("{i}:").into_bytes();
    v.extend_from_slice(&base[at..at + len - v.len()]);
    v
}

/// Reads from `c` until `buf` ends with `end` and holds `at_least` bytes.
fn read_until(c: &mut TcpStream, buf: &mut Vec<u8>, end: &[u8], at_least: usize) {
    let mut chunk = vec![0u8; 1 << 16];
    while !buf.ends_with(end) || buf.len() < at_least {
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Stores keys `0..n` in batches of 100 pipelined sets (less than a
/// segment). With `pace`, each batch waits until a segment is free: the
/// background cleaner, which packs cold items when free segments run
/// low, has made room, so the writes do not outrun it.
fn fill(c: &mut TcpStream, n: usize, pace: bool, value: fn(usize) -> Vec<u8>) {
    for batch in (0..n).collect::<Vec<_>>().chunks(100) {
        if pace {
            common::wait_until("the cleaner frees a segment", || {
                stat(c, "segments_free") > 0
            });
        }
        let mut req = Vec::new();
        for &i in batch {
            let v = value(i);
            req.extend_from_slice(format!("set key{i} {i} 0 {}\r\n", v.len()).as_bytes());
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
        }
        c.write_all(&req).unwrap();
        let mut got = Vec::new();
        let want = b"STORED\r\n".repeat(batch.len());
        read_until(c, &mut got, b"\r\n", want.len());
        assert_eq!(got, want);
    }
}

/// How many of keys `0..n` the server holds; each one held must read
/// back byte for byte, with its flags and the client's size.
fn held(c: &mut TcpStream, n: usize, value: fn(usize) -> Vec<u8>) -> usize {
    let mut held = 0;
    for batch in (0..n).collect::<Vec<_>>().chunks(100) {
        let mut req = Vec::new();
        for &i in batch {
            req.extend_from_slice(format!("mg key{i} s f v\r\n").as_bytes());
        }
        req.extend_from_slice(b"mn\r\n");
        c.write_all(&req).unwrap();
        let mut got = Vec::new();
        read_until(c, &mut got, b"MN\r\n", 0);
        let mut rest = &got[..got.len() - 4];
        for &i in batch {
            let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let line = std::str::from_utf8(&rest[..line_end]).unwrap();
            rest = &rest[line_end + 2..];
            if line == "EN" {
                continue;
            }
            let want = value(i);
            assert_eq!(
                line,
                format!("VA {} s{} f{i}", want.len(), want.len()),
                "key{i}"
            );
            assert!(rest[..want.len()] == want[..], "key{i}: value differs");
            assert_eq!(&rest[want.len()..want.len() + 2], b"\r\n");
            rest = &rest[want.len() + 2..];
            held += 1;
        }
    }
    held
}

fn stat(c: &mut TcpStream, name: &str) -> u64 {
    c.write_all(b"stats\r\n").unwrap();
    let mut got = Vec::new();
    read_until(c, &mut got, b"END\r\n", 0);
    let text = String::from_utf8(got).unwrap();
    text.lines()
        .find(|l| l.split(' ').nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no stat {name}"))
        .split(' ')
        .nth(2)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_full_cache_of_text_holds_more_items_packed_and_each_reads_back_whole() {
    // ~4.5 KiB a value: 45,000 of them are about three times 64 MiB, which
    // `off` must evict, and `cold` holds packed (the text packs ~4x), its
    // writes paced by the cleaner making room.
    let n = 45_000;
    let mut counts = Vec::new();
    for compression in ["off", "cold"] {
        let server = common::osmium()
            .memory(64)
            .opt(format!("compression={compression}"))
            .start();
        let mut c = server.connect();
        fill(&mut c, n, compression == "cold", value);
        let kept = held(&mut c, n, value);
        if compression == "cold" {
            let packed = stat(&mut c, "packed_items");
            assert!(stat(&mut c, "pack_items") >= packed && packed > 0);
            assert!(stat(&mut c, "pack_segments") > 0);
            assert!(stat(&mut c, "packed_raw_bytes") > 2 * stat(&mut c, "packed_bytes"));
            // Two more reads of every key: the packed items are hot now
            // (three hits), and the cleaner writes them back raw, each
            // still whole (making room for them, at most a segment a
            // second, evicts some: far fewer than the raw cache drops).
            for _ in 0..2 {
                assert!(held(&mut c, n, value) * 10 > kept * 9);
            }
            common::wait_until("the cleaner writes hot packed items back raw", || {
                stat(&mut c, "pack_promoted") > 0
            });
            assert!(held(&mut c, n, value) > n / 2);
            assert!(stat(&mut c, "packed_items") < packed);
        } else {
            assert!(stat(&mut c, "evictions") > 0, "filled past -m");
            assert_eq!(stat(&mut c, "packed_items"), 0);
        }
        counts.push(kept);
    }
    let (off, cold) = (counts[0], counts[1]);
    assert!(off > 5_000 && off < n / 2, "off holds {off}");
    assert!(cold * 2 > off * 3, "cold holds {cold}, off {off}");
}

#[test]
fn small_values_are_packed_with_dictionaries_trained_from_them_and_read_back_whole() {
    // ~600 B a value: 120,000 of them are about 70 MiB, past a 32 MiB
    // cache, so the pass packs most of them, with a dictionary once its
    // size classes have their samples.
    let n = 120_000;
    let server = common::osmium().memory(32).start();
    let mut c = server.connect();
    fill(&mut c, n, true, small_value);
    let kept = held(&mut c, n, small_value);
    assert!(stat(&mut c, "pack_dict_trainings") >= 1);
    assert!(stat(&mut c, "pack_dicts") >= 1);
    assert!(stat(&mut c, "pack_dict_bytes") > 0);
    let with_dict = stat(&mut c, "packed_dict_items");
    assert!(with_dict > 0 && with_dict <= stat(&mut c, "packed_items"));
    assert!(
        kept > with_dict as usize,
        "kept {kept}, with a dictionary {with_dict}"
    );
}
