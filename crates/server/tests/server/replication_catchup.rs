//! A server restarting into a ring pulls its target's full copy (the
//! catch-up) while clients already write to it: no copy it receives, the
//! follow link's nor the target's own link's, replaces a write made on it
//! meanwhile, and a kill -9 in the middle of the pull loses no write it
//! acknowledged. The target holds `ITEMS` keys, so the pull lasts long
//! enough for writes of every kind (set, delete, append, touch, incr) to
//! land on keys the copy has not sent yet: each would come back with its
//! older state if the copy were applied over it.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::time::{Duration, Instant};

use crate::common;
use crate::replication_support;
use common::free_port;
use replication_support::*;

const ITEMS: usize = 100_000;
const SIZE: usize = 200;

fn old_value(i: usize) -> Vec<u8> {
    let tag = format!("old{i}:");
    tag.bytes().cycle().take(SIZE).collect()
}

fn key(i: usize) -> String {
    format!("k{i}")
}

/// Loads `ITEMS` keys into `port` (one pipeline of quiet `ms`).
fn preload(port: u16) {
    let mut c = plain_client(port);
    let mut req = Vec::with_capacity(ITEMS * (SIZE + 24));
    for i in 0..ITEMS {
        req.extend_from_slice(format!("ms {} {SIZE} q\r\n", key(i)).as_bytes());
        req.extend_from_slice(&old_value(i));
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"mn\r\n");
    let mut w = c.w.clone();
    let writer = std::thread::spawn(move || w.write_all(&req));
    assert_eq!(c.line(), "MN");
    writer.join().unwrap().unwrap();
}

/// What a key should hold: its value and whether it has a TTL.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Value(Vec<u8>, bool),
    Gone,
}

/// The writes of one batch: key `i` gets write `j % 5` (set, delete,
/// append, touch, incr of a counter set first), and what each reply means
/// for its state.
fn batch(keys: &[usize], start: usize) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut req = Vec::new();
    let mut ops = Vec::new();
    for (n, &i) in keys.iter().enumerate() {
        let j = start + n;
        let k = key(i);
        match j % 5 {
            0 => {
                let v = format!("new{i}");
                req.extend_from_slice(format!("set {k} 0 0 {}\r\n{v}\r\n", v.len()).as_bytes())
            }
            1 => req.extend_from_slice(format!("delete {k}\r\n").as_bytes()),
            2 => req.extend_from_slice(format!("append {k} 0 0 2\r\n+a\r\n").as_bytes()),
            3 => req.extend_from_slice(format!("touch {k} 5000\r\n").as_bytes()),
            _ => req.extend_from_slice(format!("set {k} 0 0 2\r\n10\r\nincr {k} 5\r\n").as_bytes()),
        }
        ops.push((i, j % 5));
    }
    (req, ops)
}

/// The state a write leaves, from its reply(ies).
fn expect(c: &mut Client, i: usize, op: usize) -> Expect {
    let old = || Expect::Value(old_value(i), false);
    let line = c.line();
    match (op, line.as_str()) {
        (0, "STORED") => Expect::Value(format!("new{i}").into_bytes(), false),
        (1, "DELETED") => Expect::Gone,
        // Not there yet: the copy's value comes, unchanged.
        (1, "NOT_FOUND") | (2, "NOT_STORED") | (3, "NOT_FOUND") => old(),
        (2, "STORED") => {
            let mut v = old_value(i);
            v.extend_from_slice(b"+a");
            Expect::Value(v, false)
        }
        (3, "TOUCHED") => Expect::Value(old_value(i), true),
        (4, "STORED") => {
            assert_eq!(c.line(), "15", "incr of k{i}");
            Expect::Value(b"15".to_vec(), false)
        }
        other => panic!("k{i}: unexpected reply {other:?}"),
    }
}

/// What `port` holds for keys `0..ITEMS` (one pipeline of `mg <key> t v`).
fn held(port: u16) -> Vec<Expect> {
    let mut c = plain_client(port);
    let mut req = Vec::new();
    for i in 0..ITEMS {
        req.extend_from_slice(format!("mg {} t v\r\n", key(i)).as_bytes());
    }
    let mut w = c.w.clone();
    let writer = std::thread::spawn(move || w.write_all(&req));
    let mut out = Vec::with_capacity(ITEMS);
    for _ in 0..ITEMS {
        let mut line = String::new();
        c.r.read_line(&mut line).unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        if f[0] == "EN" {
            out.push(Expect::Gone);
            continue;
        }
        assert_eq!(f[0], "VA", "{line}");
        let len: usize = f[1].parse().unwrap();
        let mut v = vec![0; len + 2];
        c.r.read_exact(&mut v).unwrap();
        v.truncate(len);
        out.push(Expect::Value(v, f[2] != "t-1"));
    }
    writer.join().unwrap().unwrap();
    out
}

/// Keys of `expected` whose state on `port` differs (the first few).
fn differences(port: u16, expected: &HashMap<usize, Expect>) -> Vec<String> {
    let held = held(port);
    let mut wrong = Vec::new();
    for (i, got) in held.iter().enumerate() {
        let want = expected
            .get(&i)
            .cloned()
            .unwrap_or_else(|| Expect::Value(old_value(i), false));
        if *got != want {
            let show = |e: &Expect| match e {
                Expect::Gone => "gone".to_string(),
                Expect::Value(v, ttl) => format!(
                    "{} bytes {:?}..{:?} ttl {ttl}",
                    v.len(),
                    String::from_utf8_lossy(&v[..v.len().min(8)]),
                    String::from_utf8_lossy(&v[v.len().saturating_sub(4)..])
                ),
            };
            wrong.push(format!("k{i}: {} instead of {}", show(got), show(&want)));
        }
    }
    wrong
}

fn stat(port: u16, name: &str) -> String {
    plain_client(port).stat(name)
}

/// Writes batches of 20 writes to `port`, key after key in a scattered
/// order, while `go_on` (asked between batches) says so: the state each
/// acknowledged write left, and how many were acknowledged while the
/// server was still pulling.
fn write_while(port: u16, mut go_on: impl FnMut(usize) -> bool) -> (HashMap<usize, Expect>, usize) {
    let mut c = plain_client(port);
    let mut expected = HashMap::new();
    let mut while_pulling = 0;
    let mut j = 0;
    // 7919 is prime to ITEMS: every key once, scattered.
    let order = |j: usize| (j * 7919) % ITEMS;
    while j < ITEMS && go_on(j) {
        let keys: Vec<usize> = (j..(j + 20).min(ITEMS)).map(order).collect();
        let (req, ops) = batch(&keys, j);
        c.send(&req);
        for (i, op) in ops {
            expected.insert(i, expect(&mut c, i, op));
        }
        j += keys.len();
        if c.stat("replication_catchup") == "pulling" {
            while_pulling = j;
        }
    }
    (expected, while_pulling)
}

fn ring_args(target: u16, mode: &str) -> Vec<String> {
    with(to(target), &["--replication", mode, "-m", "256"])
}

/// Target `t` holds the keys; `x` starts replicating to it (and, in a
/// ring, `t` to `x`); a client writes to `x` until its catch-up is done
/// and the target's own copy to it arrived: every write keeps its state
/// on `x`, every other key has the target's, and the target ends with
/// `x`'s writes.
///
/// The race needs the pull to last while the client writes: a run in
/// which fewer than 100 writes were made while `x` pulled and no copy
/// item was skipped for a newer write (the pull finished first, on a busy
/// machine) still checks every key, then runs again on fresh servers,
/// three times at most.
fn writes_during_the_catch_up_keep_their_state(mode: &str, ring: bool) {
    let mut runs = 0;
    while !catch_up_race(mode, ring) {
        runs += 1;
        assert!(
            runs < 3,
            "in three runs the pull ended before the writes: the race was not run"
        );
    }
}

/// One run of [`writes_during_the_catch_up_keep_their_state`]: whether
/// the race was run (100 writes or more made while `x` pulled, or a copy
/// item skipped because a write made on `x` was newer).
fn catch_up_race(mode: &str, ring: bool) -> bool {
    let (pt, px) = (free_port(), free_port());
    let t_args = if ring {
        ring_args(px, mode)
    } else {
        with(Vec::new(), &["-m", "256"])
    };
    let t = Node::start(pt, &t_args);
    preload(pt);
    let x = Node::start(px, &ring_args(pt, mode));
    // Writes replicate once the link is up (before, a sync write is
    // answered without the target, and a delete made then reaches it only
    // if written again: a full copy carries live items).
    wait("x's link up", || stat(px, "replica_0_link") == "up");
    let (expected, while_pulling) = write_while(px, |_| {
        let mut c = plain_client(px);
        let pulling = c.stat("replication_catchup") == "pulling";
        let target_copied = !ring || plain_client(pt).stat("replica_0_full_copies") != "0";
        pulling || !target_copied
    });
    eprintln!(
        "{mode} {}: {while_pulling} writes while x pulled, {} copy items skipped",
        if ring { "ring of two" } else { "chain" },
        stat(px, "replica_copy_skipped")
    );
    let wrong = differences(px, &expected);
    assert!(
        wrong.is_empty(),
        "{} of {} keys wrong on the server that caught up ({} writes made while it pulled, \
         {} copy items skipped), e.g. {:?}",
        wrong.len(),
        ITEMS,
        while_pulling,
        stat(px, "replica_copy_skipped"),
        &wrong[..wrong.len().min(5)]
    );
    // The target has x's writes: at once in sync mode, soon in async.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let wrong = differences(pt, &expected);
        if wrong.is_empty() {
            break;
        }
        assert!(
            mode == "async" && Instant::now() < deadline,
            "{} keys wrong on the target, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let skipped: u64 = stat(px, "replica_copy_skipped").parse().unwrap_or(0);
    drop((t, x));
    while_pulling >= 100 || skipped > 0
}

#[test]
fn sync_ring_of_two_writes_during_the_catch_up_keep_their_state() {
    writes_during_the_catch_up_keep_their_state("sync", true);
}

#[test]
fn async_chain_writes_during_the_catch_up_keep_their_state() {
    writes_during_the_catch_up_keep_their_state("async", false);
}

/// Sync ring of two: `x` is killed (kill -9) in the middle of its pull,
/// with writes acknowledged meanwhile, and started again: every write it
/// acknowledged is on the target and, once pulled back, on `x`. The kill
/// comes right after the first batch that finds the pull still running;
/// a pull that ends before (a fast or a busy machine) is retried, five
/// times at most: the restart after the kill starts another pull.
#[test]
fn kill_9_during_the_catch_up_loses_no_acknowledged_write() {
    let (pt, px) = (free_port(), free_port());
    let t = Node::start(pt, &ring_args(px, "sync"));
    preload(pt);
    let mut x = Node::start(px, &ring_args(pt, "sync"));
    let mut acknowledged = HashMap::new();
    let mut j = 0;
    let mut killed_mid_pull = false;
    for _try in 0..5 {
        wait("x's link up", || stat(px, "replica_0_link") == "up");
        // Sets only (each is acknowledged whatever x held), in batches of
        // 20, then the kill while the pull still runs.
        let mut c = plain_client(px);
        let mut pulling = false;
        for _batch in 0..5 {
            let keys: Vec<usize> = (j..j + 20).map(|j| (j * 7919) % ITEMS).collect();
            let mut req = Vec::new();
            for &i in &keys {
                let v = format!("acked{i}");
                req.extend_from_slice(
                    format!("set {} 0 0 {}\r\n{v}\r\n", key(i), v.len()).as_bytes(),
                );
            }
            c.send(&req);
            for &i in &keys {
                assert_eq!(c.line(), "STORED");
                acknowledged.insert(i, Expect::Value(format!("acked{i}").into_bytes(), false));
            }
            j += keys.len();
            pulling = stat(px, "replication_catchup") == "pulling";
            if pulling {
                break;
            }
        }
        x.kill();
        x = Node::start(px, &ring_args(pt, "sync"));
        if pulling {
            killed_mid_pull = true;
            break;
        }
    }
    assert!(
        killed_mid_pull,
        "the pull ended before the kill in five tries: nothing was killed mid-pull"
    );
    wait("x's catch-up done again", || {
        stat(px, "replication_catchup") == "done"
    });
    wait("the target's link to x up again", || {
        stat(pt, "replica_0_link") == "up" && stat(pt, "replica_0_full_copies") != "0"
    });
    for (port, who) in [(pt, "the target"), (px, "x after its restart")] {
        let wrong = differences(port, &acknowledged);
        assert!(
            wrong.is_empty(),
            "{} keys wrong on {who}, e.g. {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
    drop((t, x));
}
