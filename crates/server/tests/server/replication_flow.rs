//! Replication's flow control under pipelining: a client sends a whole
//! pipeline of writes in one go (libmemcached's buffered writes, any
//! pipelining client) on one connection, from 1 write to 10,000 and from
//! 1 byte to 1 MB, in sync and async mode, to a ring of two (both servers
//! written at once) and to a chain A→B→C (A and B written at once, B
//! replicating what its clients write while it applies A's stream). Every
//! reply arrives, in order (text `set` and meta `ms` with an opaque
//! alternate, so a reply out of place shows), and the server written and
//! its target both hold every key with its value: at once in sync mode
//! (the reply waited for the target), within seconds in async mode.

use std::io::{BufRead, Read, Write};
use std::time::{Duration, Instant};

use crate::common;
use crate::replication_support;
use common::free_port;
use replication_support::*;

/// (writes in the pipeline, bytes per value).
const POINTS: &[(usize, usize)] = &[
    (1, 1),
    (10_000, 1),
    (1_000, 1_500),
    (300, 16 << 10),
    // Read straight into their items (64 KiB and more, not all buffered).
    (40, 100_000),
    (4, 1_000_000),
];

/// Value `i` of a pipeline with values of `size` bytes: its own bytes, so
/// a value stored under the wrong key or cut short shows.
fn value(prefix: &str, i: usize, size: usize) -> Vec<u8> {
    let tag = format!("{prefix}{i}:");
    let mut v: Vec<u8> = tag.bytes().cycle().take(size).collect();
    if size == 1 {
        v[0] = b'a' + (i % 26) as u8;
    }
    v
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}{i}")
}

/// The pipeline: even writes are text `set` (reply `STORED`), odd ones
/// meta `ms` with opaque `O<i>` (reply `HD O<i>`).
fn pipeline(prefix: &str, count: usize, size: usize) -> (Vec<u8>, Vec<String>) {
    let mut req = Vec::new();
    let mut expect = Vec::with_capacity(count);
    for i in 0..count {
        let k = key(prefix, i);
        if i % 2 == 0 {
            req.extend_from_slice(format!("set {k} {i} 0 {size}\r\n").as_bytes());
            expect.push("STORED".to_string());
        } else {
            req.extend_from_slice(format!("ms {k} {size} F{i} O{i}\r\n").as_bytes());
            expect.push(format!("HD O{i}"));
        }
        req.extend_from_slice(&value(prefix, i, size));
        req.extend_from_slice(b"\r\n");
    }
    (req, expect)
}

/// Sends `req` in one write from a thread of its own while this one
/// reads the replies: each must be the expected one, in order.
fn send_pipeline(port: u16, req: Vec<u8>, expect: &[String], what: &str) {
    let mut c = plain_client(port);
    let mut w = c.w.clone();
    let writer = std::thread::spawn(move || w.write_all(&req));
    let started = Instant::now();
    for (i, want) in expect.iter().enumerate() {
        let mut line = Vec::new();
        let read = c.r.read_until(b'\n', &mut line);
        assert!(
            read.is_ok() && line.ends_with(b"\r\n"),
            "{what}: reply {i} of {} did not come ({:?} after {:?}: {read:?})",
            expect.len(),
            String::from_utf8_lossy(&line),
            started.elapsed()
        );
        let got = String::from_utf8_lossy(&line[..line.len() - 2]);
        assert_eq!(got, *want, "{what}: reply {i} out of place");
    }
    writer.join().unwrap().unwrap();
}

/// Reads every key back from `port` (one pipeline of `mg <key> f v`):
/// the ones not holding their value, as (index, what it held).
fn wrong_keys(port: u16, prefix: &str, count: usize, size: usize) -> Vec<(usize, String)> {
    let mut c = plain_client(port);
    let mut req = Vec::new();
    for i in 0..count {
        req.extend_from_slice(format!("mg {} f v\r\n", key(prefix, i)).as_bytes());
    }
    let mut w = c.w.clone();
    let writer = std::thread::spawn(move || w.write_all(&req));
    let mut wrong = Vec::new();
    for i in 0..count {
        let mut line = String::new();
        c.r.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line == "EN" {
            wrong.push((i, "nothing".into()));
            continue;
        }
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], "VA", "{line}");
        let len: usize = f[1].parse().unwrap();
        let mut v = vec![0; len + 2];
        c.r.read_exact(&mut v).unwrap();
        v.truncate(len);
        // Both kinds of write set the client flags to the write's number.
        if v != value(prefix, i, size) || f[2] != format!("f{i}") {
            wrong.push((i, format!("{} bytes, {}", v.len(), f[2])));
        }
    }
    writer.join().unwrap().unwrap();
    wrong
}

/// Every key of the pipeline is on `port` with its value: at once (sync),
/// or within 10 s (async).
fn holds_every_key(port: u16, prefix: &str, count: usize, size: usize, sync: bool, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let wrong = wrong_keys(port, prefix, count, size);
        if wrong.is_empty() {
            return;
        }
        assert!(
            !sync && Instant::now() < deadline,
            "{who} lacks {} of {count} keys of {prefix} (first: {:?})",
            wrong.len(),
            &wrong[..wrong.len().min(3)]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `port`'s first target link is up with its full copy made.
fn linked(port: u16) {
    let mut c = plain_client(port);
    wait("link up with its full copy", || {
        let s = c.stats();
        s.get("replica_0_link").map(String::as_str) == Some("up")
            && s.get("replica_0_full_copies").map(String::as_str) != Some("0")
    });
}

/// Runs every point, on every (written server, its target) pair at once.
fn run_points(pairs: &[(u16, u16)], sync: bool, topology: &'static str) {
    let mode = if sync { "sync" } else { "async" };
    for &(count, size) in POINTS {
        let runs: Vec<_> = pairs
            .iter()
            .enumerate()
            .map(|(n, &(port, target))| {
                let prefix = format!("{topology}{mode}{count}x{size}n{n}_");
                std::thread::spawn(move || {
                    let what = format!("{mode} {topology}: {count} x {size} B on {port}");
                    let (req, expect) = pipeline(&prefix, count, size);
                    send_pipeline(port, req, &expect, &what);
                    holds_every_key(port, &prefix, count, size, true, &what);
                    holds_every_key(
                        target,
                        &prefix,
                        count,
                        size,
                        sync,
                        &format!("{what}'s target"),
                    );
                })
            })
            .collect();
        for r in runs {
            r.join().unwrap();
        }
    }
}

fn args(target: u16, sync: bool) -> Vec<String> {
    let mode = if sync { "sync" } else { "async" };
    with(to(target), &["--replication", mode, "-m", "256"])
}

fn ring_of_two(sync: bool) {
    let (pa, pb) = (free_port(), free_port());
    let a = Node::start(pa, &args(pb, sync));
    let b = Node::start(pb, &args(pa, sync));
    linked(pa);
    linked(pb);
    run_points(&[(pa, pb), (pb, pa)], sync, "ring");
    drop((a, b));
}

fn chain(sync: bool) {
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    let c = Node::start(pc, &with(Vec::new(), &["-m", "256"]));
    let b = Node::start(pb, &args(pc, sync));
    let a = Node::start(pa, &args(pb, sync));
    linked(pa);
    linked(pb);
    run_points(&[(pa, pb), (pb, pc)], sync, "chain");
    drop((a, b, c));
}

#[test]
fn sync_ring_of_two_answers_every_pipelined_write() {
    ring_of_two(true);
}

#[test]
fn async_ring_of_two_answers_every_pipelined_write() {
    ring_of_two(false);
}

#[test]
fn sync_chain_answers_every_pipelined_write() {
    chain(true);
}

#[test]
fn async_chain_answers_every_pipelined_write() {
    chain(false);
}
