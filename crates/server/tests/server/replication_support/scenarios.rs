//! Replication scenarios run both plain (`tests/server/replication.rs`) and over
//! TLS (`tests/server/replication_tls.rs`): the nodes come from the caller, who
//! starts them plain or with `-Z` (their clients then speak TLS too).

use std::time::{Duration, Instant};

use super::*;
use crate::common::free_port;

/// Starts a node on a port with the given arguments (besides TLS's).
pub(crate) type Start<'a> = &'a dyn Fn(u16, &[String]) -> Node;

/// Every write kind of the text, meta and binary protocols written on
/// `a` reaches `b` (a's target) with a's value, flags, TTL and CAS.
pub(crate) fn every_write_kind_reaches_the_replica(a: &Node, b: &Node) {
    let (mut ca, mut cb) = (a.client(), b.client());
    wait("link up", || ca.stat("replica_0_link") == "up");
    // Text, with and without noreply.
    assert_eq!(ca.call(b"set t1 5 100 3\r\nabc\r\n"), "STORED");
    ca.send(b"set t2 6 0 2 noreply\r\nxy\r\n");
    assert_eq!(ca.call(b"add t3 1 0 1\r\na\r\n"), "STORED");
    assert_eq!(ca.call(b"replace t3 2 0 1\r\nb\r\n"), "STORED");
    assert_eq!(ca.call(b"append t1 0 0 2\r\nAP\r\n"), "STORED");
    assert_eq!(ca.call(b"prepend t1 0 0 2\r\nPR\r\n"), "STORED");
    ca.send(b"append t2 0 0 1 noreply\r\n!\r\n");
    let cas = ca.mg("t3").unwrap().cas;
    assert_eq!(
        ca.call(format!("cas t3 3 0 1 {cas}\r\nc\r\n").as_bytes()),
        "STORED"
    );
    assert_eq!(ca.call(b"set n1 0 0 2\r\n10\r\n"), "STORED");
    assert_eq!(ca.call(b"incr n1 5\r\n"), "15");
    assert_eq!(ca.call(b"decr n1 2\r\n"), "13");
    ca.send(b"incr n1 1 noreply\r\n");
    assert_eq!(ca.call(b"touch t3 500\r\n"), "TOUCHED");
    ca.send(b"gat 700 t2\r\n");
    assert!(ca.line().starts_with("VALUE t2"));
    ca.line();
    assert_eq!(ca.line(), "END");
    assert_eq!(ca.call(b"set gone 0 0 1\r\nx\r\n"), "STORED");
    assert_eq!(ca.call(b"delete gone\r\n"), "DELETED");
    ca.send(b"set gone2 0 0 1 noreply\r\nx\r\ndelete gone2 noreply\r\n");
    // Meta, with and without q.
    assert_eq!(ca.call(b"ms m1 3 F9 T300\r\nmmm\r\n"), "HD");
    ca.send(b"ms m2 2 q F1\r\nqq\r\n");
    assert_eq!(ca.call(b"ms m3 1 E12345\r\nE\r\n"), "HD");
    assert_eq!(ca.call(b"ma m4 N0 J7\r\n"), "HD");
    ca.send(b"ma m4 q\r\n");
    assert_eq!(ca.call(b"mg m1 T900\r\n"), "HD");
    assert_eq!(ca.call(b"ms m5 1\r\nz\r\n"), "HD");
    ca.send(b"md m5 q\r\nmn\r\n");
    assert_eq!(ca.line(), "MN");
    // Binary (its own connection), with quiet forms.
    let ca_text = ca;
    let mut ca = a.client();
    let set_extras = |flags: u32, exp: u32| {
        let mut e = flags.to_be_bytes().to_vec();
        e.extend_from_slice(&exp.to_be_bytes());
        e
    };
    assert_eq!(ca.binary(0x01, b"b1", &set_extras(4, 200), b"bin").0, 0);
    assert_eq!(ca.binary(0x01, b"b2", &set_extras(0, 0), b"1").0, 0);
    let mut incr = 9u64.to_be_bytes().to_vec();
    incr.extend_from_slice(&0u64.to_be_bytes());
    incr.extend_from_slice(&0u32.to_be_bytes());
    assert_eq!(ca.binary(0x05, b"b2", &incr, b"").0, 0);
    assert_eq!(ca.binary(0x1c, b"b1", &800u32.to_be_bytes(), b"").0, 0);
    assert_eq!(ca.binary(0x01, b"b3", &set_extras(0, 0), b"x").0, 0);
    assert_eq!(ca.binary(0x04, b"b3", &[], b"").0, 0);
    // SETQ then NOOP (the NOOP's reply follows the quiet set's none).
    let mut p = vec![0x80, 0x11, 0, 2, 8, 0, 0, 0, 0, 0, 0, 13];
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(&set_extras(2, 0));
    p.extend_from_slice(b"bqVAL");
    ca.send(&p);
    assert_eq!(ca.binary(0x0a, b"", &[], b"").0, 0);

    let keys = [
        "t1", "t2", "t3", "n1", "gone", "gone2", "m1", "m2", "m3", "m4", "m5", "b1", "b2", "b3",
        "bq",
    ];
    let mut ca = ca_text;
    converge(&mut ca, &mut cb, &keys);
    let t1 = cb.mg("t1").unwrap();
    assert_eq!((t1.value.as_slice(), t1.flags), (&b"PRabcAP"[..], 5));
    // The expiry travels as a unix time in whole seconds, and each server's
    // clock counts from its own start: the replica's TTL may read one more.
    assert!((99..=101).contains(&t1.ttl), "{t1:?}");
    assert_eq!(cb.mg("m3").unwrap().cas, 12345);
    assert_eq!(cb.mg("n1").unwrap().value, b"14");
    assert_eq!(cb.mg("m4").unwrap().value, b"8");
    assert_eq!(cb.mg("b2").unwrap().value, b"10");
    assert_eq!(cb.mg("bq").unwrap().value, b"VAL");
    assert!(cb.mg("gone").is_none() && cb.mg("gone2").is_none() && cb.mg("b3").is_none());
    // flush_all travels too (and noreply).
    ca.send(b"flush_all noreply\r\n");
    wait("flush reached the replica", || cb.mg("t1").is_none());
    converge(&mut ca, &mut cb, &keys);
    assert_eq!(ca.stat("replica_0_errors"), "0");
}

/// Sync mode: writers load a primary; its target is killed (kill -9) and
/// started again empty; every write a client saw acknowledged is on the
/// primary and, after the full copy, on the target. `ring`: three nodes
/// replicating in a ring (0 → 1 → 2 → 0), writers on node 0 and node 2,
/// node 1 killed; else a primary and its replica.
pub(crate) fn kill_a_sync_replica_under_load(start: Start, ring: bool) {
    let n = if ring { 3 } else { 2 };
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let args = |i: usize| -> Vec<String> {
        if ring || i == 0 {
            with(to(ports[(i + 1) % n]), &["--replication", "sync"])
        } else {
            Vec::new()
        }
    };
    // The replica first: the primary's link finds it at once.
    let mut nodes: Vec<Option<Node>> = (0..n).map(|_| None).collect();
    for i in (0..n).rev() {
        nodes[i] = Some(start(ports[i], &args(i)));
    }
    let node = |nodes: &[Option<Node>], i: usize| nodes[i].as_ref().unwrap().client();
    for i in 0..n {
        if ring || i == 0 {
            let mut c = node(&nodes, i);
            wait("link up", || c.stat("replica_0_link") == "up");
        }
    }
    // Writers on node 0 (and on node 2 of a ring, whose target is node 0).
    let sources: Vec<usize> = if ring { vec![0, 0, 2] } else { vec![0, 0, 0] };
    let writers: Vec<_> = sources
        .iter()
        .enumerate()
        .map(|(w, &i)| {
            let mut c = node(&nodes, i);
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let start = Instant::now();
                let mut k = 0;
                while start.elapsed() < Duration::from_millis(2500) {
                    let key = format!("w{w}_{k}");
                    let req = format!("set {key} 0 0 6\r\n{:06}\r\n", k);
                    if c.call(req.as_bytes()) == "STORED" {
                        acked.push(key);
                    }
                    k += 1;
                }
                (i, acked)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    nodes[1].as_mut().unwrap().kill();
    std::thread::sleep(Duration::from_millis(500));
    nodes[1] = Some(start(ports[1], &args(1)));
    let acked: Vec<(usize, Vec<String>)> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let total: usize = acked.iter().map(|(_, a)| a.len()).sum();
    assert!(total > 100, "{total} writes");
    let mut c0 = node(&nodes, 0);
    wait("link up again", || c0.stat("replica_0_link") == "up");
    let deadline = Instant::now() + Duration::from_secs(10);
    for (i, keys) in &acked {
        // Acknowledged by node i: on it, and on its target.
        let mut primary = node(&nodes, *i);
        let mut target = node(&nodes, (i + 1) % n);
        for key in keys {
            assert!(primary.mg(key).is_some(), "{key} lost on node {i}");
            while target.mg(key).is_none() {
                assert!(
                    Instant::now() < deadline,
                    "{key} not on node {}",
                    (i + 1) % n
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
