//! Replication rings whose pool changes, over loopback with the tests'
//! secret: SIGHUP makes a server re-read its `--config-file`, and a
//! changed `--replicate-to` is applied live (a kept target's link stays,
//! a removed one's closes, a new one opens with the full copy). A ring
//! A→B→C→A gains D between C and A while writes go to C (D ends with
//! every key C acknowledged), then loses it again; a bad file changes
//! nothing; an option that cannot change live is named and left; a sync
//! write waiting for a removed target is answered; `replica_targets`
//! changes the targets from a proved peer only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::replication_support;
use common::free_port;
use osmium_protocol::replication_link::Role;
use replication_support::*;

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn conf(target: u16, more: &str) -> String {
    format!("# the ring\n--replicate-to {}\n{more}", addr(target))
}

/// Waits until `c`'s first target is `port`, its link up and its full
/// copy made.
fn linked(c: &mut Client, port: u16) {
    wait(&format!("link to {port} up with its full copy"), || {
        let s = c.stats();
        s.get("replica_0_addr") == Some(&addr(port))
            && s.get("replica_0_link").map(String::as_str) == Some("up")
            && s.get("replica_0_full_copies").map(String::as_str) != Some("0")
    });
}

/// Client writes to one server until stopped: new keys `<prefix><n>`
/// and an overwrite of `<prefix>hot`; the keys it acknowledged (STORED).
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    hot: Arc<Mutex<String>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(port: u16, prefix: &'static str) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let hot = Arc::new(Mutex::new(String::new()));
        let (s, a, h) = (stop.clone(), acked.clone(), hot.clone());
        let thread = std::thread::spawn(move || {
            let mut c = plain_client(port);
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                let key = format!("{prefix}{n}");
                let line = c.call(format!("set {key} 0 0 {}\r\n{key}\r\n", key.len()).as_bytes());
                assert_eq!(line, "STORED");
                a.lock().unwrap().push(key.clone());
                let hot = format!("{prefix}hot");
                let line = c.call(format!("set {hot} 0 0 {}\r\n{key}\r\n", key.len()).as_bytes());
                assert_eq!(line, "STORED");
                *h.lock().unwrap() = key;
                n += 1;
                if n & 63 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        });
        Writer {
            stop,
            acked,
            hot,
            thread: Some(thread),
        }
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Stops it: the keys it wrote and `<prefix>hot`'s last value.
    fn stop(mut self) -> (Vec<String>, String) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("writer");
        }
        let keys = std::mem::take(&mut *self.acked.lock().unwrap());
        let hot = self.hot.lock().unwrap().clone();
        (keys, hot)
    }
}

/// Waits until `c` holds every key of `keys` (value: the key) and
/// `hot_key` holds `hot`.
fn holds_all(c: &mut Client, who: &str, keys: &[String], hot_key: &str, hot: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut from = 0;
    loop {
        while from < keys.len() {
            match c.mg(&keys[from]) {
                Some(item) if item.value == keys[from].as_bytes() => from += 1,
                other => {
                    assert!(
                        Instant::now() < deadline,
                        "{who} lacks {} ({other:?}), {from} of {} there",
                        keys[from],
                        keys.len()
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        let got = c.mg(hot_key).map(|i| i.value);
        if got.as_deref() == Some(hot.as_bytes()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{who}: {hot_key} is {got:?}, not {hot}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_ring_gains_a_server_and_loses_it_again() {
    let (pa, pb, pc, pd) = (free_port(), free_port(), free_port(), free_port());
    let c_conf = ConfigFile::new(&conf(pa, ""));
    let a = Node::start(pa, &to(pb));
    let b = Node::start(pb, &to(pc));
    let c = Node::start(pc, &c_conf.args());
    let (mut ca, mut cb, mut cc) = (a.client(), b.client(), c.client());
    linked(&mut ca, pb);
    linked(&mut cb, pc);
    linked(&mut cc, pa);
    // Each server's own keys, and C's under traffic.
    assert_eq!(ca.call(b"set a-own 0 0 1\r\na\r\n"), "STORED");
    assert_eq!(cb.call(b"set b-own 0 0 1\r\nb\r\n"), "STORED");
    let writer = Writer::start(pc, "c-");
    wait("C's first writes", || writer.count() >= 1500);

    // D between C and A: started pointing at A, then C re-reads its file.
    let d = Node::start(pd, &to(pa));
    let mut cd = d.client();
    linked(&mut cd, pa);
    // D's own keys go on to A.
    assert_eq!(cd.call(b"set d-own 0 0 1\r\nd\r\n"), "STORED");
    wait("D's key on A", || ca.mg("d-own").is_some());
    let before = writer.count();
    c_conf.write(&conf(pd, ""));
    c.signal("HUP");
    linked(&mut cc, pd);
    assert_eq!(cc.stat("replica_1_addr"), "", "A is no longer C's target");
    wait("C's writes after the change", || {
        writer.count() >= before + 1500
    });
    let (keys, hot) = writer.stop();
    // Every write C acknowledged, before the change (by the full copy)
    // and after it (by the link), is on D, as C's replica.
    holds_all(&mut cd, "D", &keys, "c-hot", &hot);
    // C's full copy also held its copies of B's keys; A's own key came
    // by D's catch-up pull from A.
    assert!(cd.mg("b-own").is_some());
    assert!(cd.mg("a-own").is_some());
    let log = c.stderr();
    assert!(log.contains("targets changed (reload)"), "{log}");

    // D leaves as docs/replication.md ("Changing the ring") says: C
    // replicates to D and A (D's link kept, A's opened with a full copy),
    // then to A alone.
    let writer = Writer::start(pc, "c2-");
    wait("C's writes", || writer.count() >= 500);
    c_conf.write(&format!("{}--replicate-to {}\n", conf(pd, ""), addr(pa)));
    c.signal("HUP");
    wait("C replicates to D and A", || {
        let s = cc.stats();
        let is = |k: &str, v: &str| s.get(k).map(String::as_str) == Some(v);
        is("replica_0_addr", &addr(pd))
            && is("replica_0_full_copies", "1")
            && is("replica_0_reconnects", "0")
            && is("replica_1_addr", &addr(pa))
            && is("replica_1_link", "up")
            && is("replica_1_full_copies", "1")
    });
    wait("C's writes with two targets", || writer.count() >= 1000);
    c_conf.write(&conf(pa, ""));
    c.signal("HUP");
    linked(&mut cc, pa);
    assert_eq!(cc.stat("replica_0_reconnects"), "0", "A's link was kept");
    wait("C's writes after D left", || writer.count() >= 2000);
    let (keys2, hot2) = writer.stop();
    holds_all(&mut ca, "A", &keys, "c-hot", &hot);
    holds_all(&mut ca, "A", &keys2, "c2-hot", &hot2);
    drop(d);
    // C's link to A stayed up through D's end.
    assert_eq!(cc.stat("replica_0_link"), "up");
    assert_eq!(cc.stat("replication_catchup"), "done");
}

/// How many target senders (threads `osmium-repl-<slot>`) it runs.
fn senders(node: &Node) -> usize {
    let dir = format!("/proc/{}/task", node.pid());
    std::fs::read_dir(dir)
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| {
                    name.trim()
                        .strip_prefix("osmium-repl-")
                        .is_some_and(|n| n.parse::<usize>().is_ok())
                })
                .count()
        })
        .unwrap_or(0)
}

/// `stats settings`, a line each.
fn stats_settings(c: &mut Client) -> String {
    c.send(b"stats settings\r\n");
    let mut s = String::new();
    loop {
        let l = c.line();
        if l == "END" {
            return s;
        }
        s.push_str(&l);
        s.push('\n');
    }
}

/// The next `config_reload` sysevent a watcher sees.
fn reload_event(watcher: &mut Client) -> String {
    loop {
        let line = watched(watcher);
        if line.contains("type=config_reload") {
            return line;
        }
    }
}

/// A watcher's next line (log lines end in a bare newline).
fn watched(watcher: &mut Client) -> String {
    use std::io::BufRead;
    let mut buf = Vec::new();
    watcher.r.read_until(b'\n', &mut buf).unwrap();
    String::from_utf8_lossy(&buf).trim_end().to_string()
}

#[test]
fn a_bad_config_file_changes_nothing_and_fixed_options_are_named() {
    let (pb, pc, pd) = (free_port(), free_port(), free_port());
    let b = Node::start(pb, &[]);
    let d = Node::start(pd, &[]);
    let file = ConfigFile::new(&conf(pb, ""));
    let c = Node::start(pc, &file.args());
    let mut cc = c.client();
    linked(&mut cc, pb);
    assert_eq!(senders(&c), 1);
    let mut watcher = c.client();
    assert_eq!(watcher.call(b"watch sysevents\r\n"), "OK");

    for (n, bad) in [
        "--replicate-to nowhere\n".to_string(),
        conf(pd, "-x 1\n"),
        conf(pd, "--replication sometimes\n"),
        format!("{}--replicate-to {}\n", conf(pd, ""), addr(pb)).repeat(3),
    ]
    .into_iter()
    .enumerate()
    {
        file.write(&bad);
        c.signal("HUP");
        wait("refused", || {
            c.stderr().matches("refused, nothing of it applied").count() > n
        });
        let line = reload_event(&mut watcher);
        assert!(line.contains("state=refused"), "{line}");
        assert_eq!(cc.stat("replica_0_addr"), addr(pb), "after {bad:?}");
        assert_eq!(cc.stat("replica_0_link"), "up");
        assert_eq!(cc.stat("replica_1_addr"), "");
    }
    let refusals = c.stderr().matches("refused, nothing of it applied").count();
    assert_eq!(refusals, 4, "{}", c.stderr());
    assert_eq!(
        cc.stat("replica_0_reconnects"),
        "0",
        "the kept link never closed"
    );

    // A good file: -m cannot change live (named, left), the targets and
    // the mode do.
    file.write(&conf(pd, "-m 128\n--replication sync\n"));
    c.signal("HUP");
    linked(&mut cc, pd);
    assert_eq!(cc.stat("replication_mode"), "sync");
    // B's sender ended; D's runs.
    wait("one sender", || senders(&c) == 1);
    assert_eq!(cc.stat("limit_maxbytes"), (64u64 << 20).to_string());
    let settings = stats_settings(&mut cc);
    assert!(
        settings.contains(&format!("STAT replicate_to {}\n", addr(pd)))
            && settings.contains("STAT replication sync\n"),
        "{settings}"
    );
    let log = c.stderr();
    assert!(
        log.contains("-m/--memory-limit differs") && log.contains("left as it was"),
        "{log}"
    );
    let mut seen = String::new();
    while !seen.contains("type=config_reload") || !seen.contains("state=applied") {
        seen.push_str(&watched(&mut watcher));
        seen.push('\n');
    }
    assert!(
        seen.contains(&format!(
            "type=replication_targets source=reload old={}%3A{pb} new={}%3A{pd}",
            "127.0.0.1", "127.0.0.1"
        )),
        "{seen}"
    );
    // A write reaches D, not B.
    assert_eq!(cc.call(b"set after 0 0 1\r\nx\r\n"), "STORED");
    assert!(d.client().mg("after").is_some(), "sync mode: D has it");
    assert!(b.client().mg("after").is_none());
}

/// Whether a reply waits to be read on `c` (a plain connection).
fn answered(c: &Client) -> bool {
    let Wire::Plain(s) = &c.w else {
        panic!("a plain connection")
    };
    s.set_nonblocking(true).unwrap();
    let got = s.peek(&mut [0u8; 1]).map(|n| n > 0).unwrap_or(false);
    s.set_nonblocking(false).unwrap();
    got || !c.r.buffer().is_empty()
}

#[test]
fn a_sync_write_waiting_for_a_removed_target_is_answered() {
    let (pb, pc, pd) = (free_port(), free_port(), free_port());
    let b = Node::start(pb, &[]);
    let d = Node::start(pd, &[]);
    let file = ConfigFile::new(&conf(pb, "--replication sync\n"));
    let c = Node::start(pc, &file.args());
    let mut cc = c.client();
    linked(&mut cc, pb);
    // B stops answering: C's write waits for its acknowledgement (the
    // link would be taken down after a second without one).
    b.signal("STOP");
    let mut w = c.client();
    w.send(b"set waits 0 0 1\r\nx\r\n");
    std::thread::sleep(Duration::from_millis(150));
    assert!(!answered(&w), "the write was answered without B");
    file.write(&conf(pd, "--replication sync\n"));
    let hup = Instant::now();
    c.signal("HUP");
    assert_eq!(w.line(), "STORED");
    let took = hup.elapsed();
    b.signal("CONT");
    assert!(took < Duration::from_millis(700), "answered after {took:?}");
    linked(&mut cc, pd);
    assert!(d.client().mg("waits").is_some(), "D's full copy has it");
}

#[test]
fn replica_targets_needs_a_proxy_peer() {
    let (pb, pc, pd) = (free_port(), free_port(), free_port());
    let _b = Node::start(pb, &[]);
    let d = Node::start(pd, &[]);
    let c = Node::start(pc, &to(pb));
    let mut cc = c.client();
    linked(&mut cc, pb);
    let change = format!("replica_targets {}\r\n", addr(pd));

    // Not proved: an unknown command, nothing changed.
    let mut stranger = c.client();
    assert_eq!(stranger.call(change.as_bytes()), "ERROR");
    stranger.send(format!("replica_targets {} noreply\r\n", addr(pd)).as_bytes());
    assert!(stranger.call(b"version\r\n").starts_with("VERSION "));
    // A wrong secret gets no link at all.
    assert!(hello(pc, Role::ProxyPeer, OTHER_SECRET).is_err());
    // A target link or a follower is no proxy: refused, the link closed.
    for role in [Role::TargetLink, Role::FollowLink] {
        let mut link = hello(pc, role, SECRET).expect("handshake");
        assert_eq!(link.call(change.as_bytes()), "ERROR", "{role:?}");
    }
    // A server without a secret knows no such command.
    let plain = Node::start_bare(free_port(), &[]);
    assert_eq!(plain.client().call(change.as_bytes()), "ERROR");
    assert_eq!(cc.stat("replica_0_addr"), addr(pb));

    // A proved peer: bad lists refused, a good one applied.
    let mut peer = hello(pc, Role::ProxyPeer, SECRET).expect("handshake");
    for bad in [
        "replica_targets\r\n",
        "replica_targets nowhere\r\n",
        "replica_targets a:1,b:2,c:3,d:4,e:5\r\n",
        "replica_targets a:1 b:2\r\n",
    ] {
        let line = peer.call(bad.as_bytes());
        assert!(line.starts_with("CLIENT_ERROR "), "{bad:?}: {line}");
    }
    assert_eq!(cc.stat("replica_0_addr"), addr(pb));
    assert_eq!(peer.call(change.as_bytes()), "OK");
    linked(&mut cc, pd);
    assert_eq!(cc.call(b"set k 0 0 1\r\nv\r\n"), "STORED");
    let mut cd = d.client();
    wait("forwarded to D", || cd.mg("k").is_some());
    // `-`: no target at all; the stats keep the mode.
    assert_eq!(peer.call(b"replica_targets -\r\n"), "OK");
    wait("no target", || cc.stat("replica_0_addr").is_empty());
    assert_eq!(cc.stat("replication_mode"), "async");
    assert_eq!(cc.call(b"set k2 0 0 1\r\nv\r\n"), "STORED");
    // A server started without targets cannot be given some live.
    let lone = Node::start(free_port(), &[]);
    let mut p2 = hello(lone.port, Role::ProxyPeer, SECRET).expect("handshake");
    let line = p2.call(change.as_bytes());
    assert!(line.starts_with("SERVER_ERROR "), "{line}");
}
