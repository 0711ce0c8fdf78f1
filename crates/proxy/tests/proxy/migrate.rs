//! The warm-move migration over real sockets, against osmium and (when
//! built) memcached 1.6.45: two servers, a third added; keys filled by
//! the old ring; writers and readers acting as the proxy's loop does
//! during a move (`Move::route`) while the migration thread runs. After
//! it: every moved key is on its new owner with its latest value (or gone
//! when its last write was a delete), no old owner keeps a moved key, no
//! value written before the move comes back over a later write, and warm
//! reads of keys that exist do not miss.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use osmium_proxy::config::{Config, PoolConfig};
use osmium_proxy::moves::chain::UP;
use osmium_proxy::moves::migrate::{spawn, Plan};
use osmium_proxy::moves::{Kind, Move, Progress, Reach, Route};
use osmium_proxy::ring::Ring;

fn memcached_bin() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("MEMCACHED_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(b));
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.oracle/memcached-1.6.45/memcached");
    p.is_file().then_some(p)
}

fn server(bin: &Path) -> common::Proc {
    common::cache_server(bin, "backend", 0, 64)
}

fn pool(ports: &[(u16, &str)]) -> PoolConfig {
    let mut y = String::from("p:\n  listen: 127.0.0.1:1\n  servers:\n");
    for (port, name) in ports {
        y.push_str(&format!("   - 127.0.0.1:{port}:1 {name}\n"));
    }
    Config::parse(&y).unwrap().pools.remove(0)
}

/// A plain blocking text client.
struct Client {
    r: BufReader<TcpStream>,
}

impl Client {
    fn new(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Client {
            r: BufReader::new(s),
        }
    }
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }
    fn set(&mut self, k: &str, v: &str) {
        let req = format!("set {k} 5 0 {}\r\n{v}\r\n", v.len());
        self.r.get_mut().write_all(req.as_bytes()).unwrap();
        assert_eq!(self.line(), "STORED\r\n");
    }
    fn delete(&mut self, k: &str) {
        self.r
            .get_mut()
            .write_all(format!("delete {k}\r\n").as_bytes())
            .unwrap();
        let l = self.line();
        assert!(l == "DELETED\r\n" || l == "NOT_FOUND\r\n", "{l}");
    }
    fn get(&mut self, k: &str) -> Option<(u32, String)> {
        self.r
            .get_mut()
            .write_all(format!("get {k}\r\n").as_bytes())
            .unwrap();
        let l = self.line();
        if l == "END\r\n" {
            return None;
        }
        let t: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(t[0], "VALUE", "{l}");
        let n: usize = t[3].parse().unwrap();
        let mut v = vec![0; n + 2];
        self.r.read_exact(&mut v).unwrap();
        assert_eq!(self.line(), "END\r\n");
        v.truncate(n);
        Some((t[2].parse().unwrap(), String::from_utf8(v).unwrap()))
    }
}

/// What a writer last did to a key.
#[derive(Clone, Debug, PartialEq)]
enum Last {
    Set(String),
    Deleted,
}

fn run(bin: &Path, keys: usize) {
    let servers: Vec<common::Proc> = (0..3).map(|_| server(bin)).collect();
    let ports: Vec<u16> = servers.iter().map(|s| s.port()).collect();
    let old = pool(&[(ports[0], "a"), (ports[1], "b")]);
    let new = pool(&[(ports[0], "a"), (ports[1], "b"), (ports[2], "c")]);
    let old_ring = Ring::new(&old);
    let new_ring = Ring::new(&new);
    let key = |i: usize| format!("mkey:{i}");
    let mut conns: Vec<Client> = ports.iter().map(|&p| Client::new(p)).collect();
    // Filled in pipelined batches, each read back before the next.
    for from in (0..keys).step_by(500) {
        let mut fill = vec![(Vec::new(), 0); ports.len()];
        for i in from..(from + 500).min(keys) {
            let k = key(i);
            let v = format!("v0-{i}");
            let (out, n) = &mut fill[old_ring.server_of(k.as_bytes())];
            write!(out, "set {k} 5 0 {}\r\n{v}\r\n", v.len()).unwrap();
            *n += 1;
        }
        for (c, (out, n)) in conns.iter_mut().zip(fill) {
            c.r.get_mut().write_all(&out).unwrap();
            for _ in 0..n {
                assert_eq!(c.line(), "STORED\r\n");
            }
        }
    }
    // Sources: a, b (the old ring's order), then c.
    let mv = Move::new(&old, &new).unwrap();
    let progress = Arc::new(Progress::default());
    let (ptx, prx) = mpsc::channel();
    let (ctx, crx) = mpsc::channel();
    // Writers: each owns the keys i % WRITERS == w; readers read all.
    const WRITERS: usize = 4;
    let stop = Arc::new(AtomicBool::new(false));
    let misses = Arc::new(AtomicU64::new(0));
    let warm = Arc::new(AtomicU64::new(0));
    let deleted: Arc<Vec<AtomicBool>> =
        Arc::new((0..keys).map(|_| AtomicBool::new(false)).collect());
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (new, m) = (new.clone(), mv.clone());
        let ptx = ptx.clone();
        let ports = ports.clone();
        let stop = stop.clone();
        let deleted = deleted.clone();
        writers.push(std::thread::spawn(move || {
            let new_ring = Ring::new(&new);
            let mut conns: Vec<Client> = ports.iter().map(|&p| Client::new(p)).collect();
            let mut last: HashMap<usize, Last> = HashMap::new();
            let mut x: u64 = 0x1234_5678 + w as u64;
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x as usize % (keys / WRITERS)) * WRITERS + w;
                let k = key(i);
                round += 1;
                let kind = if round % 5 == 0 {
                    Kind::Delete
                } else {
                    Kind::Overwrite
                };
                match m.route(k.as_bytes(), kind) {
                    Route::New => {}
                    // A delete of a key not copied yet waits for its
                    // priority copy, as the loop parks it.
                    Route::Park => {
                        assert_eq!(kind, Kind::Delete);
                        ptx.send(k.clone().into_bytes()).unwrap();
                        let h = osmium_proxy::moves::key_hash(k.as_bytes());
                        let waited = Instant::now();
                        while !m.settled.contains(h) {
                            assert!(waited.elapsed() < Duration::from_secs(30), "no copy of {k}");
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        assert_eq!(m.route(k.as_bytes(), kind), Route::New);
                    }
                    r => panic!("{k}: {r:?}"),
                }
                let owner = new_ring.server_of(k.as_bytes());
                if kind == Kind::Delete {
                    deleted[i].store(true, Ordering::Relaxed);
                    conns[owner].delete(&k);
                    last.insert(i, Last::Deleted);
                } else {
                    let v = format!("v{round}-{i}");
                    conns[owner].set(&k, &v);
                    last.insert(i, Last::Set(v));
                }
            }
            last
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2 {
        let (old, new, m) = (old.clone(), new.clone(), mv.clone());
        let ports = ports.clone();
        let (stop, misses, warm, deleted) =
            (stop.clone(), misses.clone(), warm.clone(), deleted.clone());
        readers.push(std::thread::spawn(move || {
            let new_ring = Ring::new(&new);
            let old_ring = Ring::new(&old);
            let mut conns: Vec<Client> = ports.iter().map(|&p| Client::new(p)).collect();
            let mut i = r * 7919;
            while !stop.load(Ordering::Relaxed) {
                i = (i + 7) % keys;
                let k = key(i);
                let to = match m.route(k.as_bytes(), Kind::Read) {
                    Route::New => new_ring.server_of(k.as_bytes()),
                    Route::Old(o) => {
                        warm.fetch_add(1, Ordering::Relaxed);
                        // The old ring's index is the same server here.
                        assert_eq!(o, old_ring.server_of(k.as_bytes()));
                        o
                    }
                    Route::Park => unreachable!("reads never park"),
                };
                if conns[to].get(&k).is_none() && !deleted[i].load(Ordering::Relaxed) {
                    misses.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // The clients run a while before the migration starts.
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let handle = spawn(Plan {
        mv: mv.clone(),
        new: new.clone(),
        tls: None,
        reach: Arc::new(Reach::new([UP; 3])),
        progress: progress.clone(),
        priority: prx,
        copied: ctx,
        waker: None,
        replaced: None,
    })
    .unwrap();
    // A parked request's priority copy is answered.
    let moved: Vec<usize> = (0..keys)
        .filter(|&i| old_ring.server_of(key(i).as_bytes()) != new_ring.server_of(key(i).as_bytes()))
        .collect();
    let probe = key(*moved.last().unwrap());
    ptx.send(probe.clone().into_bytes()).unwrap();
    // (The writers' parked deletes are answered on the same channel.)
    let want = osmium_proxy::moves::key_hash(probe.as_bytes());
    loop {
        let h = crx
            .recv_timeout(Duration::from_secs(30))
            .expect("priority copy answered");
        if h == want {
            break;
        }
    }
    while !progress.is_done() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "migration too slow"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    handle.join().unwrap();
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut last: HashMap<usize, Last> = HashMap::new();
    for w in writers {
        last.extend(w.join().unwrap());
    }
    for r in readers {
        r.join().unwrap();
    }
    eprintln!(
        "{}: {} keys, {} moved, {} copied ({} bytes) in {took:?}; {} warm reads, {} misses; {} keys written",
        bin.display(),
        keys,
        moved.len(),
        progress.moved_keys(),
        progress.moved_bytes(),
        warm.load(Ordering::Relaxed),
        misses.load(Ordering::Relaxed),
        last.len()
    );
    for i in 0..keys {
        let k = key(i);
        let o = old_ring.server_of(k.as_bytes());
        let n = new_ring.server_of(k.as_bytes());
        let want = match last.get(&i) {
            Some(Last::Set(v)) => Some(v.clone()),
            Some(Last::Deleted) => None,
            None => Some(format!("v0-{i}")),
        };
        let got = conns[n].get(&k).map(|(f, v)| {
            if v.starts_with("v0-") {
                assert_eq!(f, 5, "flags copied");
            }
            v
        });
        assert_eq!(got, want, "key {k} on its new owner");
        if o != n {
            assert_eq!(conns[o].get(&k), None, "old owner dropped {k}");
        }
    }
    let not_written_moved = moved.iter().filter(|i| !last.contains_key(i)).count() as u64;
    assert!(progress.moved_keys() >= not_written_moved);
    assert!(
        misses.load(Ordering::Relaxed) <= (moved.len() as u64) / 50,
        "warm reads miss rarely"
    );
}

#[test]
fn migration_keeps_latest_writes_against_osmium() {
    run(&common::osmium_bin(), 40_000);
}

#[test]
fn migration_keeps_latest_writes_against_memcached() {
    let Some(bin) = memcached_bin() else {
        eprintln!("SKIP: memcached 1.6.45 not built (scripts/build-memcached.sh)");
        return;
    };
    run(&bin, 40_000);
}
