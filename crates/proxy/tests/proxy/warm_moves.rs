//! Warm moves end to end: osmium servers behind osmium-proxy, a cache-aside
//! load through the proxy (readers counting misses, writers with the
//! latest value of each of their keys, by sets and appends), a server added by a SIGHUP reload,
//! then one removed the same way. Keys that existed do not miss (the
//! issue's bound: extra database reads at most 2 % of the moved keys),
//! every key ends on its new owner with its latest value, and old owners
//! hold no moved key afterwards. With `warm_moves: false` the moved keys
//! miss, as after a nutcracker restart.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use osmium_proxy::ring::Ring;
use osmium_proxy::Config;

const KEYS: usize = 20_000;

fn yaml(port: u16, backends: &[Proc], servers: &[usize], warm: bool) -> String {
    let mut y = format!(
        "p:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
         timeout: 5000\n  server_connections: 2\n  warm_moves: {warm}\n  servers:\n"
    );
    for &i in servers {
        y.push_str(&format!("   - 127.0.0.1:{}:1 s{i}\n", backends[i].port()));
    }
    y
}

/// Each key's owner (backend index) under `yaml`.
fn owners(yaml: &str, servers: &[usize]) -> Vec<usize> {
    let cfg = Config::parse(yaml).unwrap();
    let ring = Ring::new(&cfg.pools[0]);
    (0..KEYS)
        .map(|i| servers[ring.server_of(key(i).as_bytes())])
        .collect()
}

fn key(i: usize) -> String {
    format!("wk:{i}")
}

struct Cx {
    r: BufReader<TcpStream>,
}

impl Cx {
    fn new(port: u16) -> Cx {
        Cx {
            r: BufReader::new(connect(port)),
        }
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }
    fn set(&mut self, k: &str, v: &str) {
        let req = format!("set {k} 0 0 {}\r\n{v}\r\n", v.len());
        self.r.get_mut().write_all(req.as_bytes()).unwrap();
        let l = self.line();
        assert_eq!(l, "STORED\r\n", "set {k}");
    }
    fn append(&mut self, k: &str, v: &str) {
        let req = format!("append {k} 0 0 {}\r\n{v}\r\n", v.len());
        self.r.get_mut().write_all(req.as_bytes()).unwrap();
        let l = self.line();
        assert_eq!(l, "STORED\r\n", "append {k}");
    }
    fn get(&mut self, k: &str) -> Option<String> {
        self.r
            .get_mut()
            .write_all(format!("get {k}\r\n").as_bytes())
            .unwrap();
        let l = self.line();
        if l == "END\r\n" {
            return None;
        }
        let n: usize = l
            .split_whitespace()
            .nth(3)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("get {k}: {l}"));
        let mut v = vec![0; n + 2];
        self.r.read_exact(&mut v).unwrap();
        assert_eq!(self.line(), "END\r\n");
        v.truncate(n);
        Some(String::from_utf8(v).unwrap())
    }
}

/// The latest value of every key (what the writers last stored).
type Latest = Arc<Vec<Mutex<String>>>;

fn fill(port: u16) -> Latest {
    let mut s = connect(port);
    let mut buf = Vec::new();
    for i in 0..KEYS {
        let v = format!("v0-{i}");
        buf.extend_from_slice(format!("set {} 0 0 {}\r\n{v}\r\n", key(i), v.len()).as_bytes());
    }
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&buf).unwrap());
    let mut r = BufReader::new(&mut s);
    let mut line = String::new();
    for _ in 0..KEYS {
        line.clear();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, "STORED\r\n");
    }
    writer.join().unwrap();
    Arc::new((0..KEYS).map(|i| Mutex::new(format!("v0-{i}"))).collect())
}

/// Readers and writers through the proxy until `stop`; the readers'
/// misses (every key exists: writers only overwrite).
struct Load {
    stop: Arc<AtomicBool>,
    misses: Arc<AtomicU64>,
    reads: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

const WRITERS: usize = 4;

fn load(port: u16, latest: &Latest) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let misses = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for r in 0..12u64 {
        let (stop, misses, reads) = (stop.clone(), misses.clone(), reads.clone());
        threads.push(std::thread::spawn(move || {
            let mut cx = Cx::new(port);
            let mut x = 0x9e37_79b9_u64 + r * 7919;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = key(x as usize % KEYS);
                reads.fetch_add(1, Ordering::Relaxed);
                if cx.get(&k).is_none() {
                    misses.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for w in 0..WRITERS {
        let (stop, latest) = (stop.clone(), latest.clone());
        threads.push(std::thread::spawn(move || {
            let mut cx = Cx::new(port);
            let mut x = 0x1234_5678_u64 + w as u64;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Writer w owns the keys i % WRITERS == w.
                let i = (x as usize % (KEYS / WRITERS)) * WRITERS + w;
                n += 1;
                let mut slot = latest[i].lock().unwrap();
                if n.is_multiple_of(3) {
                    // An append needs the current value: during a move it
                    // waits for the key's copy.
                    cx.append(&key(i), "+");
                    slot.push('+');
                } else {
                    let v = format!("v{w}.{n}-{i}");
                    cx.set(&key(i), &v);
                    *slot = v;
                }
            }
        }));
    }
    Load {
        stop,
        misses,
        reads,
        threads,
    }
}

impl Load {
    fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        (
            self.misses.load(Ordering::Relaxed),
            self.reads.load(Ordering::Relaxed),
        )
    }
}

fn stat(px: &Proc, name: &str) -> u64 {
    pool_stat(&stats_doc(px.stats_port()), name)
}

/// Waits for the move a reload started to end; `moved_keys` (over the
/// proxy's life) then.
fn move_done(px: &Proc) -> u64 {
    let start = Instant::now();
    loop {
        let doc = stats_doc(px.stats_port());
        if pool_stat(&doc, "migrating") == 0 {
            return pool_stat(&doc, "moved_keys");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "move not done: {doc}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every key on its owner under `now` with its latest value, and on no
/// other server of `all`.
fn placed(backends: &[Proc], all: &[usize], now: &[usize], latest: &Latest) {
    let mut cx: Vec<Option<Cx>> = backends.iter().map(|b| Some(Cx::new(b.port()))).collect();
    let mut wrong = Vec::new();
    for i in 0..KEYS {
        let k = key(i);
        let want = latest[i].lock().unwrap().clone();
        let got = cx[now[i]].as_mut().unwrap().get(&k);
        if got.as_deref() != Some(want.as_str()) {
            wrong.push(format!("{k}: {got:?} on s{}, want {want}", now[i]));
        }
        for &s in all.iter().filter(|&&s| s != now[i]) {
            if let Some(v) = cx[s].as_mut().unwrap().get(&k) {
                wrong.push(format!("{k}: a copy {v} left on s{s}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} keys misplaced, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

#[test]
fn a_server_added_then_one_removed_under_load_moves_warm() {
    let backends: Vec<Proc> = (0..5).map(|_| osmium_backend()).collect();
    let port = free_port();
    let four = [0, 1, 2, 3];
    let px = proxy(&yaml(port, &backends, &four, true), port);
    let port = px.port();
    let latest = fill(port);
    let before = owners(&yaml(port, &backends, &four, true), &four);

    // Add s4.
    let five = [0, 1, 2, 3, 4];
    let y5 = yaml(port, &backends, &five, true);
    let after = owners(&y5, &five);
    let moved = (0..KEYS).filter(|&i| before[i] != after[i]).count() as u64;
    let l = load(port, &latest);
    std::thread::sleep(Duration::from_millis(500));
    rewrite_conf(&px, &y5);
    reload(&px);
    let copied = move_done(&px);
    std::thread::sleep(Duration::from_millis(300));
    let (misses, reads) = l.finish();
    let warm = stat(&px, "warm_reads");
    eprintln!(
        "add: {moved} keys moved, {copied} copied, {warm} warm reads; {misses} misses in {reads} reads"
    );
    assert!(copied > 0 && copied <= moved);
    assert!(
        misses * 50 <= moved,
        "misses {misses} over 2 % of the {moved} moved keys"
    );
    placed(&backends, &five, &after, &latest);

    // Remove s2.
    let less = [0, 1, 3, 4];
    let y4 = yaml(port, &backends, &less, true);
    let later = owners(&y4, &less);
    let moved = (0..KEYS).filter(|&i| after[i] != later[i]).count() as u64;
    let l = load(port, &latest);
    std::thread::sleep(Duration::from_millis(500));
    rewrite_conf(&px, &y4);
    reload(&px);
    // `moved_keys` counts over the proxy's life.
    let copied = move_done(&px) - copied;
    std::thread::sleep(Duration::from_millis(300));
    let (misses, reads) = l.finish();
    eprintln!("remove: {moved} keys moved, {copied} copied; {misses} misses in {reads} reads");
    assert!(
        misses * 50 <= moved,
        "misses {misses} over 2 % of the {moved} moved keys"
    );
    placed(&backends, &five, &later, &latest);
}

#[test]
fn without_warm_moves_moved_keys_miss() {
    let backends: Vec<Proc> = (0..5).map(|_| osmium_backend()).collect();
    let port = free_port();
    let four = [0, 1, 2, 3];
    let px = proxy(&yaml(port, &backends, &four, false), port);
    let port = px.port();
    fill(port);
    let before = owners(&yaml(port, &backends, &four, false), &four);
    let five = [0, 1, 2, 3, 4];
    let y5 = yaml(port, &backends, &five, false);
    let after = owners(&y5, &five);
    rewrite_conf(&px, &y5);
    reload(&px);
    let mut cx = Cx::new(port);
    let mut missed = 0;
    for i in 0..KEYS {
        let hit = cx.get(&key(i)).is_some();
        assert_eq!(hit, before[i] == after[i], "key {i}");
        missed += (!hit) as u64;
    }
    assert!(missed > 0);
    let doc = stats_doc(px.stats_port());
    assert_eq!(pool_stat(&doc, "moved_keys"), 0);
    assert_eq!(pool_stat(&doc, "migrating"), 0);
}

#[test]
fn a_request_that_needs_the_value_waits_for_its_copy() {
    let backends: Vec<Proc> = (0..3).map(|_| osmium_backend()).collect();
    let port = free_port();
    let two = [0, 1];
    let y2 = yaml(port, &backends, &two, true);
    let px = proxy(&y2, port);
    let port = px.port();
    let y2 = yaml(port, &backends, &two, true);
    let three = [0, 1, 2];
    let y3 = yaml(port, &backends, &three, true);
    let (o, n) = (owners(&y2, &two), owners(&y3, &three));
    // Keys moving from s1 to s2.
    let moving: Vec<usize> = (0..KEYS)
        .filter(|&i| o[i] == 1 && n[i] == 2)
        .take(2)
        .collect();
    let mut cx = Cx::new(port);
    for i in 0..200 {
        cx.set(&key(i), "100");
    }
    for &i in &moving {
        cx.set(&key(i), "100");
    }
    // s0 stopped: the migration waits on its listing, so nothing is
    // copied until it runs again.
    let s0 = backends[0].pid();
    assert!(osmium_test_harness::signal(s0, libc::SIGSTOP));
    rewrite_conf(&px, &y3);
    reload(&px);
    assert_eq!(stat(&px, "migrating"), 1);
    // A read of an uncopied key is served by its old owner at once.
    assert_eq!(cx.get(&key(moving[1])).as_deref(), Some("100"));
    assert!(stat(&px, "warm_reads") >= 1);
    // An incr waits for the key's copy (a plain reload would answer
    // NOT_FOUND from the new owner).
    let mut s = connect(port);
    s.write_all(format!("incr {} 1\r\n", key(moving[0])).as_bytes())
        .unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 64];
    let early = s.read(&mut buf);
    assert!(early.is_err(), "answered before the copy: {early:?}");
    assert!(osmium_test_harness::signal(s0, libc::SIGCONT));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let got = read_until(&mut s, b"\r\n");
    assert_eq!(got, b"101\r\n");
    move_done(&px);
    let mut on2 = Cx::new(backends[2].port());
    assert_eq!(on2.get(&key(moving[0])).as_deref(), Some("101"));
    assert_eq!(on2.get(&key(moving[1])).as_deref(), Some("100"));
    let mut on1 = Cx::new(backends[1].port());
    assert_eq!(on1.get(&key(moving[0])), None, "old copy dropped");
}

/// Sets `n` keys (`prefix:i`, value `v-i`) through the proxy.
fn set_keys(port: u16, prefix: &str, n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}:{i}")).collect();
    let mut cx = Cx::new(port);
    for k in &keys {
        cx.set(k, &format!("v-{k}"));
    }
    keys
}

/// How many of `keys` read back through the proxy with their value.
fn readable(port: u16, keys: &[String], latest: &HashMap<String, Option<String>>) -> usize {
    let mut cx = Cx::new(port);
    keys.iter()
        .filter(|k| {
            let want = latest.get(*k).cloned().unwrap_or(Some(format!("v-{k}")));
            cx.get(k) == want
        })
        .count()
}

/// A server added, then removed again, with no read in between (the
/// proxy never connected to the added server itself): every key is read
/// back, against osmium and memcached servers.
fn add_then_remove(backends: Vec<Proc>) {
    let port = free_port();
    let two = [0, 1];
    let px = proxy(&yaml(port, &backends, &two, true), port);
    let port = px.port();
    let keys = set_keys(port, "atr", 1000);
    let y3 = yaml(port, &backends, &[0, 1, 2], true);
    let to_s2 = owners_of(&y3, &[0, 1, 2], &keys)
        .iter()
        .filter(|&&o| o == 2)
        .count() as u64;
    rewrite_conf(&px, &y3);
    reload(&px);
    let added = move_done(&px);
    assert_eq!(added, to_s2, "every key of the added server copied to it");
    rewrite_conf(&px, &yaml(port, &backends, &two, true));
    reload(&px);
    let back = move_done(&px) - added;
    let n = readable(port, &keys, &HashMap::new());
    eprintln!("add then remove: {added} keys copied out, {back} back; {n}/1000 readable");
    assert_eq!(back, added, "every key copied to s2 comes back");
    assert_eq!(n, 1000);
    assert!(keys_of(backends[2].port()).is_empty(), "s2 drained");
}

#[test]
fn a_server_added_then_removed_before_any_read_loses_no_key() {
    add_then_remove((0..3).map(|_| osmium_backend()).collect());
    add_then_remove((0..3).map(|_| backend(0)).collect());
}

/// Moves that compose: a server added while a source is stopped (the
/// move holds on its listing), keys written through the proxy meanwhile,
/// the server removed again before the first move could end, then the
/// source resumed. Every key reads back with its latest value.
#[test]
fn a_reload_while_a_move_copies_loses_no_key() {
    let backends: Vec<Proc> = (0..3).map(|_| osmium_backend()).collect();
    let port = free_port();
    let two = [0, 1];
    let px = proxy(&yaml(port, &backends, &two, true), port);
    let port = px.port();
    let keys = set_keys(port, "rwm", 2000);
    let y3 = yaml(port, &backends, &[0, 1, 2], true);
    let three = owners_of(&y3, &[0, 1, 2], &keys);
    let s0 = backends[0].pid();
    assert!(osmium_test_harness::signal(s0, libc::SIGSTOP));
    rewrite_conf(&px, &y3);
    reload(&px);
    // Writes and deletes of keys whose new owner is not the stopped s0:
    // s2's are settled there and must come back when s2 goes. A delete
    // of a key not copied yet waits for its copy (which waits on s0): the
    // deletes are sent now, their answers read once s0 runs again.
    let mut latest: HashMap<String, Option<String>> = HashMap::new();
    let mut cx = Cx::new(port);
    let mut deletes = Cx::new(port);
    let mut deleted = 0;
    for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
        if three[i] == 0 {
            continue;
        }
        if i % 2 == 0 {
            let v = format!("new-{k}");
            cx.set(k, &v);
            latest.insert(k.clone(), Some(v));
        } else {
            deletes
                .r
                .get_mut()
                .write_all(format!("delete {k}\r\n").as_bytes())
                .unwrap();
            deleted += 1;
            latest.insert(k.clone(), None);
        }
    }
    assert_eq!(stat(&px, "migrating"), 1, "the first move waits on s0");
    rewrite_conf(&px, &yaml(port, &backends, &two, true));
    reload(&px);
    assert!(osmium_test_harness::signal(s0, libc::SIGCONT));
    for _ in 0..deleted {
        // NOT_FOUND for a key whose latest value was still on s0's side
        // and is gone by then: deleted either way.
        let l = deletes.line();
        assert!(l == "DELETED\r\n" || l == "NOT_FOUND\r\n", "{l}");
    }
    move_done(&px);
    let n = readable(port, &keys, &latest);
    assert_eq!(n, keys.len(), "every key at its latest value");
    assert!(keys_of(backends[2].port()).is_empty(), "s2 drained");
}

/// A server that dies during a move loses its own keys, as any dead cache
/// server does, and no other; one that restarts (empty) likewise.
#[test]
fn a_server_dying_or_restarting_during_a_move_loses_only_its_keys() {
    for restart in [false, true] {
        let mut backends: Vec<Proc> = (0..4).map(|_| osmium_backend()).collect();
        let port = free_port();
        let three = [0, 1, 2];
        let y3 = yaml(port, &backends, &three, true);
        let px = proxy(&y3, port);
        let port = px.port();
        let y3 = yaml(port, &backends, &three, true);
        let keys = set_keys(port, "die", 3000);
        let before = owners_of(&y3, &three, &keys);
        let y4 = yaml(port, &backends, &[0, 1, 2, 3], true);
        let after = owners_of(&y4, &[0, 1, 2, 3], &keys);
        // s0 held stopped so that the move is running when s1 goes.
        let s0 = backends[0].pid();
        assert!(osmium_test_harness::signal(s0, libc::SIGSTOP));
        rewrite_conf(&px, &y4);
        reload(&px);
        let s1_port = backends[1].port();
        backends[1].stop();
        if restart {
            backends[1] = osmium_backend_on(s1_port);
        }
        assert!(osmium_test_harness::signal(s0, libc::SIGCONT));
        move_done(&px);
        let mut cx = Cx::new(port);
        let mut lost = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            if before[i] == 1 || after[i] == 1 {
                continue; // s1's keys: lost with it
            }
            if cx.get(k) != Some(format!("v-{k}")) {
                lost.push(k.clone());
            }
        }
        assert!(
            lost.is_empty(),
            "restart {restart}: {} other keys lost, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
    }
}

/// Each key's owner (backend index) under `yaml`.
fn owners_of(yaml: &str, servers: &[usize], keys: &[String]) -> Vec<usize> {
    let cfg = Config::parse(yaml).unwrap();
    let ring = Ring::new(&cfg.pools[0]);
    keys.iter()
        .map(|k| servers[ring.server_of(k.as_bytes())])
        .collect()
}
