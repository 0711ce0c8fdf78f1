//! Ring replication over loopback (`--replicate-to`, `--replication`):
//! every write kind of the text, meta and binary protocols reaches the
//! replica with the primary's value, flags, TTL and CAS; writes from a
//! peer are not forwarded (a ring of three keeps each key on its primary
//! and the next server); sync mode answers after the replica has the
//! write, and on its own while the replica is down; a replica restarted
//! empty gets a full copy, sync writes made during it going between its
//! chunks; a restarted server pulls from its target and
//! reports `replication_catchup done`; kill -9 of a sync replica under load
//! loses no acknowledged write; a full copy includes the items only on
//! flash.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{free_port, listens_on};

const OSMIUM: &str = env!("CARGO_BIN_EXE_osmium");

/// A server process, killed (by its PID) when dropped.
struct Node {
    child: Child,
    port: u16,
}

impl Node {
    fn start(port: u16, args: &[String]) -> Node {
        let child = common::osmium_command(OSMIUM)
            .args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"])
            .args(["-t", "2", "-m", "64"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start osmium");
        let pid = child.id();
        let node = Node { child, port };
        wait("server listens", || listens_on(pid, port));
        node
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn client(&self) -> Client {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn to(port: u16) -> Vec<String> {
    vec!["--replicate-to".into(), format!("127.0.0.1:{port}")]
}

fn with(mut a: Vec<String>, more: &[&str]) -> Vec<String> {
    a.extend(more.iter().map(|s| s.to_string()));
    a
}

fn wait(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

/// An item as `mg <key> v f t c` shows it.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    value: Vec<u8>,
    flags: u32,
    ttl: i64,
    cas: u64,
}

impl Client {
    fn send(&mut self, b: &[u8]) {
        self.w.write_all(b).unwrap();
    }

    fn line(&mut self) -> String {
        let mut buf = Vec::new();
        self.r.read_until(b'\n', &mut buf).unwrap();
        assert!(buf.ends_with(b"\r\n"), "reply {buf:?}");
        buf.truncate(buf.len() - 2);
        String::from_utf8_lossy(&buf).into_owned()
    }

    fn call(&mut self, b: &[u8]) -> String {
        self.send(b);
        self.line()
    }

    fn mg(&mut self, key: &str) -> Option<Item> {
        let line = self.call(format!("mg {key} v f t c\r\n").as_bytes());
        if line == "EN" {
            return None;
        }
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], "VA", "{line}");
        let len: usize = f[1].parse().unwrap();
        let mut item = Item {
            value: vec![0; len + 2],
            flags: 0,
            ttl: 0,
            cas: 0,
        };
        self.r.read_exact(&mut item.value).unwrap();
        item.value.truncate(len);
        for t in &f[2..] {
            let (k, v) = t.split_at(1);
            match k {
                "f" => item.flags = v.parse().unwrap(),
                "t" => item.ttl = v.parse().unwrap(),
                "c" => item.cas = v.parse().unwrap(),
                _ => {}
            }
        }
        Some(item)
    }

    fn stats(&mut self) -> HashMap<String, String> {
        self.send(b"stats\r\n");
        let mut out = HashMap::new();
        loop {
            let line = self.line();
            if line == "END" {
                return out;
            }
            let mut f = line.splitn(3, ' ');
            f.next();
            out.insert(f.next().unwrap().into(), f.next().unwrap_or("").into());
        }
    }

    fn stat(&mut self, name: &str) -> String {
        self.stats().remove(name).unwrap_or_default()
    }

    /// A binary request; returns (status, body) unless `quiet`.
    fn binary(&mut self, op: u8, key: &[u8], extras: &[u8], value: &[u8]) -> (u16, Vec<u8>) {
        let mut p = vec![0x80, op];
        p.extend_from_slice(&(key.len() as u16).to_be_bytes());
        p.push(extras.len() as u8);
        p.extend_from_slice(&[0, 0, 0]);
        let body = extras.len() + key.len() + value.len();
        p.extend_from_slice(&(body as u32).to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(extras);
        p.extend_from_slice(key);
        p.extend_from_slice(value);
        self.send(&p);
        let mut h = [0u8; 24];
        self.r.read_exact(&mut h).unwrap();
        let len = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).unwrap();
        (u16::from_be_bytes([h[6], h[7]]), body)
    }
}

/// Whether `b` holds what `a` holds for every key (TTL within 1 s).
fn same(a: &mut Client, b: &mut Client, keys: &[&str]) -> Result<(), String> {
    for k in keys {
        let (x, y) = (a.mg(k), b.mg(k));
        let close = match (&x, &y) {
            (Some(x), Some(y)) => {
                x.value == y.value
                    && x.flags == y.flags
                    && x.cas == y.cas
                    && (x.ttl - y.ttl).abs() <= 1
            }
            (None, None) => true,
            _ => false,
        };
        if !close {
            return Err(format!("{k}: primary {x:?}, replica {y:?}"));
        }
    }
    Ok(())
}

fn converge(a: &mut Client, b: &mut Client, keys: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match same(a, b, keys) {
            Ok(()) => return,
            Err(e) => assert!(Instant::now() < deadline, "replica differs: {e}"),
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}

#[test]
fn every_write_kind_reaches_the_replica() {
    let (pa, pb) = (free_port(), free_port());
    let b = Node::start(pb, &[]);
    let a = Node::start(pa, &to(pb));
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

#[test]
fn ring_of_three_keeps_each_key_on_primary_and_next() {
    let p = [free_port(), free_port(), free_port()];
    // Each pulls from its target at start; those follow links stream
    // writes too until they close (after 0 s here).
    let follow = ["--replica-follow-seconds", "0"];
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node::start(p[i], &with(to(p[(i + 1) % 3]), &follow)))
        .collect();
    let mut cs: Vec<Client> = nodes.iter().map(|n| n.client()).collect();
    for c in cs.iter_mut() {
        wait("links up", || c.stat("replica_0_link") == "up");
        wait("catch-up", || c.stat("replication_catchup") == "done");
    }
    for c in cs.iter_mut() {
        wait("follow links closed", || {
            c.stat("replica_follow_links") == "0"
        });
    }
    for (i, c) in cs.iter_mut().enumerate() {
        for k in 0..20 {
            let key = format!("r{i}_{k}");
            let req = format!("set {key} {i} 0 3\r\nv{i}{}\r\n", k % 10);
            assert_eq!(c.call(req.as_bytes()), "STORED");
        }
    }
    for i in 0..3 {
        let key = format!("r{i}_19");
        wait("replicated", || cs[(i + 1) % 3].mg(&key).is_some());
    }
    // Give a (wrong) second hop time to happen.
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..3 {
        for k in 0..20 {
            let key = format!("r{i}_{k}");
            assert!(cs[i].mg(&key).is_some(), "{key} on its primary");
            assert!(cs[(i + 1) % 3].mg(&key).is_some(), "{key} on the next");
            assert!(cs[(i + 2) % 3].mg(&key).is_none(), "{key} forwarded twice");
        }
    }
}

#[test]
fn sync_mode_down_replica_and_full_copy_after_restart() {
    let (pa, pb) = (free_port(), free_port());
    let mut b = Node::start(pb, &[]);
    let a = Node::start(pa, &with(to(pb), &["--replication", "sync"]));
    let (mut ca, mut cb) = (a.client(), b.client());
    wait("link up", || ca.stat("replica_0_link") == "up");
    for k in 0..50 {
        let req = format!("set s{k} {k} 0 4\r\nv{k:03}\r\n");
        assert_eq!(ca.call(req.as_bytes()), "STORED");
        // Sync: the replica has it as soon as the client has the reply.
        assert!(cb.mg(&format!("s{k}")).is_some(), "s{k} not yet on B");
    }
    assert_eq!(ca.call(b"delete s0\r\n"), "DELETED");
    assert!(cb.mg("s0").is_none());
    assert_eq!(ca.stat("replication_mode"), "sync");

    // The replica goes away: the primary still answers, and says so.
    b.kill();
    for k in 50..60 {
        let req = format!("set s{k} 0 0 2\r\nzz\r\n");
        assert_eq!(ca.call(req.as_bytes()), "STORED");
    }
    wait("link down", || ca.stat("replica_0_link") == "down");
    assert_eq!(ca.call(b"delete s1\r\n"), "DELETED");

    // Back empty: a full copy brings everything, writes made while it was
    // down included.
    let b = Node::start(pb, &[]);
    let mut cb = b.client();
    wait("link up again", || ca.stat("replica_0_link") == "up");
    let keys: Vec<String> = (0..60).map(|k| format!("s{k}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    converge(&mut ca, &mut cb, &keys);
    assert!(cb.mg("s55").is_some() && cb.mg("s1").is_none());
    let st = ca.stats();
    assert!(st["replica_0_full_copies"].parse::<u64>().unwrap() >= 2);
    assert!(st["replica_0_reconnects"].parse::<u64>().unwrap() >= 1);
}

/// A replica that returns gets a full copy; sync writes made meanwhile
/// go between the copy's chunks: each is on the replica when its client
/// has the reply, and they do not wait for the whole copy.
#[test]
fn sync_writes_during_a_full_copy_are_on_the_replica_when_answered() {
    const ITEMS: usize = 200_000;
    let (pa, pb) = (free_port(), free_port());
    let a = Node::start(pa, &with(to(pb), &["--replication", "sync"]));
    let mut ca = a.client();
    let value = "v".repeat(100);
    let mut load = Vec::new();
    for k in 0..ITEMS {
        load.extend_from_slice(format!("ms c{k} 100 q\r\n{value}\r\n").as_bytes());
    }
    load.extend_from_slice(b"mn\r\n");
    ca.send(&load);
    assert_eq!(ca.line(), "MN");
    let b = Node::start(pb, &[]);
    let mut cb = b.client();
    wait("link up", || ca.stat("replica_0_link") == "up");
    let mut during_copy = 0;
    let reconnects = ca.stat("replica_0_reconnects");
    for k in 0..200 {
        let req = format!("set w{k} 0 0 1\r\nx\r\n");
        assert_eq!(ca.call(req.as_bytes()), "STORED");
        // (A link that timed out on a loaded machine acknowledges on its
        // own until it is back: only writes on an unbroken link count.)
        let on_b = cb.mg(&format!("w{k}")).is_some();
        assert!(
            on_b || ca.stat("replica_0_link") != "up"
                || ca.stat("replica_0_reconnects") != reconnects,
            "w{k} not on B when answered"
        );
        if cb.stat("curr_items").parse::<usize>().unwrap() < ITEMS {
            during_copy += 1;
        }
    }
    wait("the copy", || {
        cb.stat("curr_items") == (ITEMS + 200).to_string()
    });
    // How many were answered before the copy ended depends on the machine's
    // speed: reported, not asserted (the latency is in BENCHMARKS.md).
    eprintln!("sync writes answered during the full copy: {during_copy} of 200");
}

#[test]
fn a_restarted_server_pulls_from_its_target() {
    let (pa, pb) = (free_port(), free_port());
    // A and B replicate to each other.
    let mut a = Node::start(pa, &to(pb));
    let b = Node::start(pb, &to(pa));
    let (mut ca, mut cb) = (a.client(), b.client());
    wait("links", || {
        ca.stat("replica_0_link") == "up" && cb.stat("replica_0_link") == "up"
    });
    for k in 0..30 {
        let req = format!("set p{k} 1 0 1\r\nx\r\n");
        assert_eq!(ca.call(req.as_bytes()), "STORED");
    }
    wait("on B", || cb.mg("p29").is_some());
    a.kill();
    for k in 30..40 {
        let req = format!("set p{k} 2 0 1\r\ny\r\n");
        assert_eq!(cb.call(req.as_bytes()), "STORED");
    }
    let a = Node::start(pa, &with(to(pb), &["--replica-follow-seconds", "1"]));
    let mut ca = a.client();
    wait("catch-up done", || ca.stat("replication_catchup") == "done");
    for k in 0..40 {
        assert!(ca.mg(&format!("p{k}")).is_some(), "p{k} back on A");
    }
    // The follow link closes after --replica-follow-seconds.
    wait("follow link closed", || {
        cb.stat("replica_follow_links") == "0"
    });
    let off = Node::start(free_port(), &[]);
    // Without --replicate-to, `stats` has no replication lines at all.
    assert!(!off.client().stats().contains_key("replication_catchup"));
}

#[test]
fn kill_a_sync_replica_under_load_loses_no_acknowledged_write() {
    let (pa, pb) = (free_port(), free_port());
    let mut b = Node::start(pb, &[]);
    let a = Node::start(pa, &with(to(pb), &["--replication", "sync"]));
    let mut ca = a.client();
    wait("link up", || ca.stat("replica_0_link") == "up");
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let mut c = a.client();
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
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    b.kill();
    std::thread::sleep(Duration::from_millis(500));
    let b = Node::start(pb, &[]);
    let acked: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(acked.len() > 100, "{} writes", acked.len());
    let mut cb = b.client();
    wait("link up again", || ca.stat("replica_0_link") == "up");
    let deadline = Instant::now() + Duration::from_secs(10);
    for key in &acked {
        assert!(ca.mg(key).is_some(), "{key} lost on the primary");
        while cb.mg(key).is_none() {
            assert!(Instant::now() < deadline, "{key} not on the replica");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_full_copy_includes_items_only_on_flash() {
    let (pa, pb) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("osmium-repl-flash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ext = format!(
        "ext_path={}:64m,ext_page_size=4,ext_wbuf_size=1",
        dir.join("flash").display()
    );
    let value = |i: usize| -> Vec<u8> {
        let len = 200 + (i * 131) % 3000;
        (0..len).map(|j| (i * 7 + j) as u8).collect()
    };
    // The target is down while the items are written: only the full copy
    // at its start can bring them, most of them from flash.
    let a = Node::start(pa, &with(to(pb), &["-m", "4", "-o", &ext]));
    let mut ca = a.client();
    let n = 6_000;
    for i in 0..n {
        let v = value(i);
        let mut req = format!("set f{i} {i} 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(&v);
        req.extend_from_slice(b"\r\n");
        assert_eq!(ca.call(&req), "STORED");
    }
    let on_flash: u64 = ca.stat("extstore_objects_used").parse().unwrap();
    assert!(on_flash > 1000, "{on_flash} items on flash");
    let b = Node::start(pb, &[]);
    let mut cb = b.client();
    let deadline = Instant::now() + Duration::from_secs(20);
    while cb.stat("curr_items").parse::<usize>().unwrap_or(0) < n {
        assert!(
            Instant::now() < deadline,
            "full copy: {} of {n}",
            cb.stat("curr_items")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..n {
        let item = cb
            .mg(&format!("f{i}"))
            .unwrap_or_else(|| panic!("f{i} missing"));
        assert_eq!((item.flags, item.value), (i as u32, value(i)), "f{i}");
    }
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
}
