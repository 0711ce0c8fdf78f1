//! Warm restart with a memory file (`-e FILE`), over real sockets against
//! the real binaries: the cache a server leaves in FILE is taken over by
//! the next server started on it with the same `-m`, `-I` and `-C`.
//!
//! Covered: a graceful stop (SIGUSR1) keeps every item byte for byte with
//! its flags and CAS unique, keeps deletions, and new CAS uniques are larger
//! than the old ones; TTLs keep counting while the server is down; an
//! immediate `flush_all` before the stop stays applied and a delayed one
//! pending at the stop still applies at its time; the writes of every
//! protocol (text, meta, binary) survive. Those run twice (`against_both!`),
//! as `osmium::<name>` and as `memcached::<name>` against memcached 1.6.45
//! (`common::memcached_bin`; skipped when it is not built, outside CI),
//! which restarts warm after SIGUSR1 only. osmium alone: SIGTERM, SIGINT,
//! `shutdown` and `shutdown graceful` keep the cache too; so does kill -9
//! after a burst of acknowledged writes, deletes and a `flush_all`; a file
//! of another `-m`, or with a damaged header, starts clean with a
//! `[restart]` line on stderr; a file in use by a running osmium is
//! refused (exit status 71).
//!
//! Each memory file lives in a fresh directory under /dev/shm (tmpfs, as
//! memcached recommends; else the system's temporary directory), removed
//! at the end of its test.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::binary_wire;
use crate::common;
use crate::restart_support;
use binary_wire::{arith, expiry, one, with_op, Req, ADD, APPEND, DELETE, INCR, TOUCH};
use common::{against_both, target, Target};
use restart_support::*;

against_both!(
    a_graceful_stop_keeps_every_item_byte_for_byte,
    ttls_keep_counting_while_the_server_is_down,
    flush_all_before_the_stop_and_pending_at_it,
    every_protocols_writes_survive_a_restart,
);

// ---------------------------------------------------------------------------
// Against both servers
// ---------------------------------------------------------------------------

/// SIGUSR1, then a start on the same file: every item of every size comes
/// back with its flags and CAS unique, deletions and overwrites hold, and a
/// new write gets a CAS unique larger than all the old ones.
fn a_graceful_stop_keeps_every_item_byte_for_byte() {
    let who = target();
    let dir = MemDir::new();
    let file = dir.file();
    let mut srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);

    let mut live = BTreeMap::new();
    let mut gone = Vec::new();
    for (i, size) in [1usize, 100, 1024, 10 * 1024, 100 * 1024, 1_000_000]
        .into_iter()
        .enumerate()
    {
        let key = format!("size-{size}");
        let flags = [0, 1, 0xffff_ffff, 0x8000_0000, 12345, 7][i];
        let value = pattern(size as u64, size);
        c.set(&key, flags, 0, &value);
        live.insert(key, (flags, value));
    }
    // A large item stored and deleted.
    c.set("doomed-large", 3, 0, &pattern(99, 200_000));
    assert_eq!(c.call("delete doomed-large"), "DELETED");
    gone.push("doomed-large".to_string());

    // A few thousand keys, pipelined 500 at a time; then every 11th
    // overwritten and every 7th deleted.
    let n = 3000;
    let many = |i: usize, round: u64| {
        let key = format!("many:{i:05}");
        let flags = (i as u32).wrapping_mul(2_654_435_761);
        let value = pattern(i as u64 * 31 + round, 1 + (i * 37) % 400);
        (key, flags, value)
    };
    for batch in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut req = Vec::new();
        for &i in batch {
            let (key, flags, value) = many(i, 0);
            req.extend(Client::storage_bytes("set", &key, flags, 0, &value));
            live.insert(key, (flags, value));
        }
        c.send(&req);
        for _ in batch {
            assert_eq!(c.line(), "STORED");
        }
    }
    for i in (0..n).step_by(11) {
        let (key, flags, value) = many(i, 1);
        c.set(&key, flags ^ 1, 0, &value);
        live.insert(key, (flags ^ 1, value));
    }
    for i in (3..n).step_by(7) {
        let key = format!("many:{i:05}");
        assert_eq!(c.call(&format!("delete {key}")), "DELETED");
        live.remove(&key);
        gone.push(key);
    }
    let before = check_items(&mut c, &live, &gone, "before the stop");
    assert_eq!(c.curr_items(), live.len() as u64, "{who:?} before the stop");
    drop(c);

    let stopped = stop(&mut srv, libc::SIGUSR1);
    pause_before_restart(&stopped);
    let srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    let after = check_items(&mut c, &live, &gone, "after the restart");
    for (key, item) in &before {
        assert_eq!(
            after[key].cas, item.cas,
            "{who:?}: the CAS unique of {key} changed across the restart"
        );
    }
    assert_eq!(
        c.curr_items(),
        live.len() as u64,
        "{who:?}: curr_items after the restart"
    );
    if who == Target::Osmium {
        srv.wait_for_stderr(&[&format!("[restart] {} items back from", live.len())]);
    }
    let newest = before.values().map(|i| i.cas).max().unwrap();
    c.set("fresh", 0, 0, b"new");
    let fresh = c.get("fresh").unwrap().cas;
    assert!(
        fresh > newest,
        "{who:?}: a new item's CAS {fresh} is not above the old ones' {newest}"
    );
    // An old unique still works with `cas`.
    let key = "many:00001";
    let cas = before[key].cas;
    let mut req = format!("cas {key} 4 0 7 {cas}\r\n").into_bytes();
    req.extend_from_slice(b"swapped\r\n");
    c.send(&req);
    assert_eq!(
        c.line(),
        "STORED",
        "{who:?}: cas with the unique from before the stop"
    );
}

/// An item of 2 s expires while the server is down; one of 100 s is there
/// after the restart with its remaining TTL lowered by the time that went.
fn ttls_keep_counting_while_the_server_is_down() {
    let who = target();
    let dir = MemDir::new();
    let file = dir.file();
    let mut srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    c.set("short", 1, 2, b"short-lived");
    c.set("long", 2, 100, b"long-lived");
    c.set("forever", 3, 0, b"never expires");
    assert!(c.get("short").is_some());
    let t0 = c.ttl("long").unwrap();
    let read_at = Instant::now();
    assert!((99..=100).contains(&t0), "{who:?}: fresh TTL {t0}");
    drop(c);

    let stopped = stop(&mut srv, libc::SIGUSR1);
    std::thread::sleep(Duration::from_secs(3));
    pause_before_restart(&stopped);
    let srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    assert_eq!(c.get("short"), None, "{who:?}: expired while down");
    assert_eq!(c.ttl("short"), None);
    let long = c.get("long").expect("the 100 s item is back");
    assert_eq!((long.flags, &long.value[..]), (2, &b"long-lived"[..]));
    assert_eq!(c.ttl("forever"), Some(-1), "{who:?}");
    let t1 = c.ttl("long").unwrap();
    let elapsed = read_at.elapsed().as_secs_f64();
    let lost = (t0 - t1) as f64;
    // Whole seconds on both sides; memcached also rounds its clock at the
    // restart (seen: 5 s lost after 3.8 s).
    assert!(
        lost >= elapsed - 2.0 && lost <= elapsed + 2.5,
        "{who:?}: TTL {t0} then {t1} after {elapsed:.1} s"
    );
}

/// `flush_all` before the stop stays applied; a delayed `flush_all 3`
/// pending at the stop spares the items until its time, after the restart.
fn flush_all_before_the_stop_and_pending_at_it() {
    let who = target();
    let dir = MemDir::new();
    let file = dir.file();
    let mut srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    c.set("old-1", 1, 0, b"flushed");
    c.set("old-2", 2, 100, &pattern(2, 50_000));
    assert_eq!(c.call("flush_all"), "OK");
    c.set("after", 3, 0, b"set after the flush");
    assert_eq!(c.get("old-1"), None);
    drop(c);

    let stopped = stop(&mut srv, libc::SIGUSR1);
    pause_before_restart(&stopped);
    let mut srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    assert_eq!(c.get("old-1"), None, "{who:?}: a flushed item is back");
    assert_eq!(c.get("old-2"), None, "{who:?}: a flushed item is back");
    let after = c.get("after").expect("the item set after the flush");
    assert_eq!(
        (after.flags, &after.value[..]),
        (3, &b"set after the flush"[..])
    );
    assert_eq!(c.curr_items(), 1, "{who:?}");

    // A delayed flush pending at the stop. memcached needs a longer delay:
    // its SIGUSR1 stop takes about a second, a restart must wait for the
    // next wall-clock second (`pause_before_restart`), and its delayed
    // flush takes effect up to a second early (`oldest_live` is
    // `realtime(N) - 1` on a clock of whole seconds): `flush_all 3` is
    // always over by the time it serves again.
    let delay = if who == Target::Memcached { 6 } else { 3 };
    c.set("pending", 4, 0, b"until the delayed flush");
    assert_eq!(c.call(&format!("flush_all {delay}")), "OK");
    let flushed_at = Instant::now();
    drop(c);
    let stopped = stop(&mut srv, libc::SIGUSR1);
    pause_before_restart(&stopped);
    let srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    let early = flushed_at.elapsed();
    assert!(
        c.get("pending").is_some() && c.get("after").is_some(),
        "{who:?}: gone {early:?} after `flush_all {delay}`, restarted at once"
    );
    let due = flushed_at + Duration::from_millis(delay * 1000 + 1500);
    std::thread::sleep(due.saturating_duration_since(Instant::now()));
    assert_eq!(
        c.get("pending"),
        None,
        "{who:?}: the delayed flush did not apply"
    );
    assert_eq!(
        c.get("after"),
        None,
        "{who:?}: the delayed flush did not apply"
    );
    // Items stored after it stay.
    c.set("later", 5, 0, b"x");
    assert_eq!(c.get("later").map(|i| i.value), Some(b"x".to_vec()));
}

/// What a binary response carries that the test checks: status and value.
fn bin_ok(s: &mut TcpStream, req: Req, what: &str) -> Vec<u8> {
    let r = one(s, req);
    assert_eq!(r.status, 0, "{:?}: binary {what}: {:?}", target(), r.text());
    r.value
}

fn bin_set(op: u8, key: &[u8], flags: u32, exptime: u32, value: &[u8]) -> Req {
    with_op(binary_wire::set(key, flags, exptime, value), op)
}

/// Writes by the text, meta and binary protocols (every storage command,
/// arithmetic, touch, delete) are all there after a restart.
fn every_protocols_writes_survive_a_restart() {
    let who = target();
    let dir = MemDir::new();
    let file = dir.file();
    let mut srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);

    // Text protocol.
    c.set("t-set", 1, 0, b"plain");
    assert_eq!(c.store("add", "t-add", 2, 0, b"added"), "STORED");
    assert_eq!(c.store("add", "t-set", 9, 0, b"refused"), "NOT_STORED");
    c.set("t-replace", 3, 0, b"old");
    assert_eq!(c.store("replace", "t-replace", 4, 0, b"replaced"), "STORED");
    c.set("t-append", 5, 0, b"mid");
    assert_eq!(c.store("append", "t-append", 0, 0, b"+end"), "STORED");
    assert_eq!(c.store("prepend", "t-append", 0, 0, b"start+"), "STORED");
    c.set("t-cas", 6, 0, b"before");
    let cas = c.get("t-cas").unwrap().cas;
    let mut req = format!("cas t-cas 7 0 5 {cas}\r\n").into_bytes();
    req.extend_from_slice(b"after\r\n");
    c.send(&req);
    assert_eq!(c.line(), "STORED");
    c.set("t-incr", 8, 0, b"10");
    assert_eq!(c.call("incr t-incr 5"), "15");
    c.set("t-decr", 9, 0, b"100");
    assert_eq!(c.call("decr t-decr 30"), "70");
    c.set("t-touch", 10, 2, b"touched");
    assert_eq!(c.call("touch t-touch 100"), "TOUCHED");
    c.set("t-delete", 11, 0, b"deleted");
    assert_eq!(c.call("delete t-delete"), "DELETED");

    // Meta commands.
    c.send(b"ms m-set 5 F77 T100\r\nhello\r\n");
    assert_eq!(c.line(), "HD");
    c.send(b"ms m-arith 2 F3\r\n41\r\n");
    assert_eq!(c.line(), "HD");
    assert_eq!(c.call("ma m-arith"), "HD");
    assert_eq!(c.call("ma m-arith MD D2"), "HD");
    assert_eq!(c.call("ma m-created N0 J7"), "HD");
    c.send(b"ms m-delete 3\r\nbye\r\n");
    assert_eq!(c.line(), "HD");
    assert_eq!(c.call("md m-delete"), "HD");
    c.send(b"ms m-ttl 3 F4\r\nttl\r\n");
    assert_eq!(c.line(), "HD");
    assert_eq!(c.call("mg m-ttl T100"), "HD");

    // Binary protocol.
    let mut b = raw(&srv);
    bin_ok(
        &mut b,
        bin_set(binary_wire::SET, b"b-set", 0x1234, 0, b"binary"),
        "SET",
    );
    bin_ok(&mut b, bin_set(ADD, b"b-add", 9, 0, b"bin-added"), "ADD");
    bin_ok(
        &mut b,
        bin_set(binary_wire::SET, b"b-append", 12, 0, b"x"),
        "SET",
    );
    bin_ok(
        &mut b,
        Req::new(APPEND).key(b"b-append").value(b"yz"),
        "APPEND",
    );
    let v = bin_ok(
        &mut b,
        arith(INCR, b"b-incr", 5, 100, 0),
        "INCREMENT (created)",
    );
    assert_eq!(v, 100u64.to_be_bytes());
    let v = bin_ok(&mut b, arith(INCR, b"b-incr", 5, 100, 0), "INCREMENT");
    assert_eq!(v, 105u64.to_be_bytes());
    bin_ok(
        &mut b,
        bin_set(binary_wire::SET, b"b-delete", 0, 0, b"gone"),
        "SET",
    );
    bin_ok(&mut b, Req::new(DELETE).key(b"b-delete"), "DELETE");
    bin_ok(
        &mut b,
        bin_set(binary_wire::SET, b"b-touch", 13, 2, b"t"),
        "SET",
    );
    bin_ok(&mut b, expiry(TOUCH, b"b-touch", 100), "TOUCH");
    drop(b);

    let live: BTreeMap<String, (u32, Vec<u8>)> = [
        ("t-set", 1, &b"plain"[..]),
        ("t-add", 2, b"added"),
        ("t-replace", 4, b"replaced"),
        ("t-append", 5, b"start+mid+end"),
        ("t-cas", 7, b"after"),
        ("t-incr", 8, b"15"),
        ("t-decr", 9, b"70 "),
        ("t-touch", 10, b"touched"),
        ("m-set", 77, b"hello"),
        ("m-arith", 3, b"40"),
        ("m-created", 0, b"7"),
        ("m-ttl", 4, b"ttl"),
        ("b-set", 0x1234, b"binary"),
        ("b-add", 9, b"bin-added"),
        ("b-append", 12, b"xyz"),
        ("b-incr", 0, b"105"),
        ("b-touch", 13, b"t"),
    ]
    .into_iter()
    .map(|(k, f, v)| (k.to_string(), (f, v.to_vec())))
    .collect();
    let gone: Vec<String> = ["t-delete", "m-delete", "b-delete"]
        .map(String::from)
        .to_vec();
    check_items(&mut c, &live, &gone, "before the stop");
    drop(c);

    let stopped = stop(&mut srv, libc::SIGUSR1);
    pause_before_restart(&stopped);
    let srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    check_items(&mut c, &live, &gone, "after the restart");
    assert_eq!(c.curr_items(), live.len() as u64, "{who:?}");
    // The TTLs that were set or changed: touch (text, binary), ms T, mg T.
    for key in ["t-touch", "b-touch", "m-set", "m-ttl"] {
        let t = c.ttl(key).unwrap();
        assert!((90..=100).contains(&t), "{who:?}: TTL of {key} is {t}");
    }
    for key in ["t-set", "t-incr", "m-arith", "b-incr"] {
        assert_eq!(c.ttl(key), Some(-1), "{who:?}: TTL of {key}");
    }
    // Counters go on counting.
    assert_eq!(c.call("incr t-incr 1"), "16");
    assert_eq!(c.call("incr b-incr 1"), "106");
}

// ---------------------------------------------------------------------------
// osmium only
// ---------------------------------------------------------------------------

/// Every way osmium stops (not only SIGUSR1) keeps the cache; memcached
/// 1.6.45 keeps it after SIGUSR1 and `shutdown graceful` only.
#[test]
fn every_graceful_stop_keeps_the_cache() {
    let dir = MemDir::new();
    let file = dir.file();
    let args = ["-m", "64", "-I", "2m", "-A"];
    let ways = ["SIGTERM", "SIGINT", "shutdown", "shutdown graceful"];
    let mut srv = server(&file, &args).start();
    for (i, how) in ways.into_iter().enumerate() {
        let mut c = client(&srv);
        c.set(&format!("by-{i}"), i as u32, 0, how.as_bytes());
        drop(c);
        match how {
            "SIGTERM" => srv.send_signal(libc::SIGTERM),
            "SIGINT" => srv.send_signal(libc::SIGINT),
            _ => {
                let mut c = client(&srv);
                c.send(format!("{how}\r\n").as_bytes());
                // Nothing more comes: the connection closes.
                let mut rest = Vec::new();
                let _ = c.r.read_to_end(&mut rest);
            }
        }
        let (status, stopped) = exited(&mut srv);
        assert_eq!(
            status.code(),
            Some(0),
            "{how}: {status:?}: {:?}",
            stopped.stderr
        );

        srv = server(&file, &args).start();
        let mut c = client(&srv);
        for (j, earlier) in ways.iter().enumerate().take(i + 1) {
            let key = format!("by-{j}");
            let item = c.get(&key);
            assert_eq!(
                item.map(|it| (it.flags, it.value)),
                Some((j as u32, earlier.as_bytes().to_vec())),
                "{key} after a stop by {how}"
            );
        }
        assert_eq!(c.curr_items(), i as u64 + 1, "after a stop by {how}");
        srv.wait_for_stderr(&["items back from"]);
    }
}

/// kill -9 right after a burst of acknowledged writes, deletes and a
/// `flush_all`: the next start serves every acknowledged write and none of
/// what was deleted or flushed.
#[test]
fn kill_9_keeps_every_acknowledged_write() {
    let dir = MemDir::new();
    let file = dir.file();
    let mut srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    let mut live = BTreeMap::new();
    let mut gone = Vec::new();

    // Stored, then flushed.
    let mut req = Vec::new();
    for i in 0..300 {
        req.extend(Client::storage_bytes(
            "set",
            &format!("pre:{i}"),
            0,
            0,
            &pattern(i, 64),
        ));
        gone.push(format!("pre:{i}"));
    }
    c.send(&req);
    (0..300).for_each(|_| assert_eq!(c.line(), "STORED"));
    assert_eq!(c.call("flush_all"), "OK");

    // The burst: sets of many sizes, overwrites, deletes, arithmetic,
    // each pipelined and acknowledged.
    let n = 2000u64;
    let mut req = Vec::new();
    for i in 0..n {
        let key = format!("crash:{i:04}");
        let size = [10usize, 300, 3000, 30_000][i as usize % 4] + i as usize % 17;
        let value = pattern(i * 7, size);
        req.extend(Client::storage_bytes("set", &key, i as u32, 0, &value));
        live.insert(key, (i as u32, value));
    }
    c.send(&req);
    (0..n).for_each(|_| assert_eq!(c.line(), "STORED"));
    let mut req = Vec::new();
    let mut replies = Vec::new();
    for i in (0..n).step_by(5) {
        let key = format!("crash:{i:04}");
        let value = pattern(i * 7 + 1, 50 + i as usize % 100);
        req.extend(Client::storage_bytes(
            "set",
            &key,
            1_000_000 + i as u32,
            0,
            &value,
        ));
        live.insert(key, (1_000_000 + i as u32, value));
        replies.push("STORED".to_string());
    }
    for i in (1..n).step_by(3) {
        let key = format!("crash:{i:04}");
        req.extend(format!("delete {key}\r\n").bytes());
        live.remove(&key);
        gone.push(key);
        replies.push("DELETED".to_string());
    }
    for i in 0..20u64 {
        let key = format!("counter:{i}");
        req.extend(Client::storage_bytes("set", &key, 0, 0, b"1000"));
        req.extend(format!("incr {key} {i}\r\n").bytes());
        live.insert(key, (0, (1000 + i).to_string().into_bytes()));
        replies.push("STORED".to_string());
        replies.push((1000 + i).to_string());
    }
    c.send(&req);
    for want in &replies {
        assert_eq!(&c.line(), want);
    }
    // Killed at once: no stop at all.
    srv.child().kill().unwrap();
    let (status, _) = exited(&mut srv);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );

    let srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    check_items(&mut c, &live, &gone, "after kill -9");
    assert_eq!(c.curr_items(), live.len() as u64);
    let err = srv.wait_for_stderr(&["items back from"]);
    assert!(
        err.contains(&format!("[restart] {} items back from", live.len())),
        "{err:?}"
    );
}

/// Another `-m`: a clean cache and a note on stderr; the file is then the
/// new setting's, taken over by the next start with it.
#[test]
fn another_memory_limit_starts_clean_and_is_then_taken_over() {
    let dir = MemDir::new();
    let file = dir.file();
    let mut srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    c.set("at-64", 1, 0, b"made with -m 64");
    drop(c);
    stop(&mut srv, libc::SIGUSR1);

    let smaller = ["-m", "32", "-I", "2m"];
    let mut srv = server(&file, &smaller).start();
    let mut c = client(&srv);
    let err = srv.wait_for_stderr(&["[restart] "]);
    assert!(
        err.contains("restart incompatible due to setting for [maxbytes]")
            && err.contains("starting with a clean cache"),
        "{err:?}"
    );
    assert_eq!(c.get("at-64"), None);
    assert_eq!(c.curr_items(), 0);
    c.set("at-32", 2, 0, b"made with -m 32");
    drop(c);
    stop(&mut srv, libc::SIGUSR1);

    let srv = server(&file, &smaller).start();
    let mut c = client(&srv);
    let err = srv.wait_for_stderr(&["items back from"]);
    assert!(!err.contains("incompatible"), "{err:?}");
    assert_eq!(
        c.get("at-32").map(|i| (i.flags, i.value)),
        Some((2, b"made with -m 32".to_vec()))
    );
    assert_eq!(c.get("at-64"), None);
    assert_eq!(c.curr_items(), 1);
}

/// A header overwritten with garbage: a note on stderr and a clean cache,
/// whether the magic number (first 16 bytes) or a later field was hit.
#[test]
fn a_damaged_header_starts_clean() {
    let dir = MemDir::new();
    let file = dir.file();
    for (offset, garbage) in [(0u64, &b"garbage!garbage!"[..]), (16, b"\xde\xad\xbe\xef")] {
        let mut srv = server(&file, &SETTINGS).start();
        let mut c = client(&srv);
        c.set("k", 1, 0, b"before the damage");
        drop(c);
        stop(&mut srv, libc::SIGUSR1);
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, garbage, offset).unwrap();
        drop(f);

        let mut srv = server(&file, &SETTINGS).start();
        let mut c = client(&srv);
        let err = srv.wait_for_stderr(&["[restart] "]);
        assert!(
            (err.contains("damaged header") || err.contains("not an osmium memory file"))
                && err.contains("starting with a clean cache"),
            "garbage at {offset}: {err:?}"
        );
        assert_eq!(c.get("k"), None, "garbage at {offset}");
        assert_eq!(c.curr_items(), 0, "garbage at {offset}");
        // The file is whole again: the next start takes it over.
        c.set("k", 2, 0, b"after");
        drop(c);
        stop(&mut srv, libc::SIGUSR1);
        let srv = server(&file, &SETTINGS).start();
        let mut c = client(&srv);
        assert_eq!(c.get("k").map(|i| i.value), Some(b"after".to_vec()));
    }
}

/// A second osmium on a file a running osmium uses exits with status 71;
/// the first goes on serving.
#[test]
fn a_file_in_use_is_refused() {
    let dir = MemDir::new();
    let file = dir.file();
    let srv = server(&file, &SETTINGS).start();
    let mut c = client(&srv);
    c.set("k", 1, 0, b"first");

    let second = server(&file, &SETTINGS).run_to_exit();
    assert_eq!(second.code(), Some(71), "{:?}", second.stderr);
    assert!(
        second.stderr.contains("in use by another process"),
        "{:?}",
        second.stderr
    );
    assert_eq!(c.get("k").map(|i| i.value), Some(b"first".to_vec()));
}
