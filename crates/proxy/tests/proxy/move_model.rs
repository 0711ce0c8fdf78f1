//! A model test of warm moves: random sequences of 2-6 reloads (a server
//! added, removed, added then removed, re-weighted, the list reordered;
//! some back to back, some while a move copies, some after it settled)
//! of one osmium-proxy pool, while clients set, delete, append to and read
//! a few hundred keys through the proxy. Each client owns its keys, so a
//! reference map holds every key's latest acknowledged value (or its
//! absence). Throughout, a read that hits must return that value (a stale
//! or deleted value is never served); after each sequence settles, every
//! key reads back as the map says. The servers are big enough that
//! nothing is evicted.
//!
//! Servers and the proxy are reused between sequences (emptied with
//! `flush_all` once the pool stands still); reloads go through the stats
//! port (`reload <token>`, answered once applied). Most sequences run in
//! front of osmium servers, some in front of memcached 1.6.45
//! (`MEMCACHED_BIN`, else the repository's oracle build).
//!
//! Seeded: the run prints its base seed; `MOVE_MODEL_SEED=<n>` runs the one
//! sequence of seed `n` (on osmium; `MOVE_MODEL_BACKEND=memcached` for
//! memcached), `MOVE_MODEL_SEQUENCES=<n>` changes how many run.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const SERVERS: usize = 5;
/// Keys per sequence: 240 in the long run (`OSMIUM_LONG_TESTS=1`), 60 by
/// default (20 per client; a move still copies keys between every pair).
fn keys() -> usize {
    std::env::var("MOVE_MODEL_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(osmium_test_harness::sized(60, 240))
}
const CLIENTS: usize = 3;
/// Sequences per run in front of osmium, and of memcached.
const OSMIUM_SEQUENCES: u64 = 170;
const MEMCACHED_SEQUENCES: u64 = 40;
const TOKEN: &str = "move-model-token";

/// splitmix64: the sequences' random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn key(i: usize) -> String {
    format!("mm:{i}")
}

/// A pool's servers: (backend index, weight), in `servers:` order.
type Ring = Vec<(usize, u32)>;

fn yaml(port: u16, backends: &[Proc], ring: &Ring) -> String {
    let mut y = format!(
        "p:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
         timeout: 5000\n  server_connections: 1\n  servers:\n"
    );
    for &(b, w) in ring {
        y.push_str(&format!("   - 127.0.0.1:{}:{w} s{b}\n", backends[b].port()));
    }
    y
}

/// The proxy, its servers and its configuration file.
struct Env {
    backends: Vec<Proc>,
    proxy: Proc,
    what: &'static str,
}

fn token_file() -> PathBuf {
    let path = conf_path("move-model.token");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

impl Env {
    fn start(bin: &Path, what: &'static str) -> Env {
        let backends: Vec<Proc> = (0..SERVERS)
            .map(|_| cache_server(bin, what, 0, 64))
            .collect();
        let token = token_file();
        let port = free_port();
        let first: Ring = vec![(0, 1), (1, 1)];
        // The log to a file: a piped stderr nobody reads would fill up.
        let log = conf_path(&format!("move-model-{what}.log"));
        let proxy = proxy_with(
            &yaml(port, &backends, &first),
            port,
            &[
                "--admin-token-file",
                token.to_str().unwrap(),
                "-o",
                log.to_str().unwrap(),
            ],
        );
        Env {
            backends,
            proxy,
            what,
        }
    }

    /// Rewrites the file and reloads through the stats port (answered
    /// once the reload applied).
    fn reload(&self, ring: &Ring) {
        rewrite_conf(&self.proxy, &yaml(self.proxy.port(), &self.backends, ring));
        let mut s = connect(self.proxy.stats_port());
        s.write_all(format!("reload {TOKEN}\r\n").as_bytes())
            .unwrap();
        let mut all = String::new();
        s.read_to_string(&mut all).unwrap();
        assert!(
            all.trim_end().ends_with("OK reloaded"),
            "reload: {}",
            all.lines().last().unwrap_or("")
        );
    }

    /// The pool's `migrating` (the document's line, not waiting for the
    /// port's close).
    fn migrating(&self) -> u64 {
        let mut r = BufReader::new(connect(self.proxy.stats_port()));
        let mut doc = String::new();
        r.read_line(&mut doc).unwrap();
        pool_stat(&doc, "migrating")
    }

    fn settle(&self) {
        let start = Instant::now();
        while self.migrating() != 0 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{}: move not done",
                self.what
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A blocking text client.
struct Cx {
    r: BufReader<TcpStream>,
    line: String,
}

/// What a request got.
#[derive(Debug, PartialEq)]
enum Got {
    Ok,
    No,
    Value(String),
    Error(String),
}

impl Cx {
    fn new(port: u16) -> Cx {
        Cx {
            r: BufReader::new(connect(port)),
            line: String::new(),
        }
    }
    fn ask(&mut self, req: &str) -> Got {
        self.r.get_mut().write_all(req.as_bytes()).unwrap();
        self.line.clear();
        self.r.read_line(&mut self.line).unwrap();
        match self.line.as_str() {
            "STORED\r\n" | "DELETED\r\n" => Got::Ok,
            "NOT_STORED\r\n" | "NOT_FOUND\r\n" | "END\r\n" => Got::No,
            l if l.starts_with("VALUE ") => {
                let n: usize = l.split_whitespace().nth(3).unwrap().parse().unwrap();
                let mut v = vec![0; n + 2];
                self.r.read_exact(&mut v).unwrap();
                v.truncate(n);
                let mut end = String::new();
                self.r.read_line(&mut end).unwrap();
                assert_eq!(end, "END\r\n");
                Got::Value(String::from_utf8(v).unwrap())
            }
            l => Got::Error(l.trim_end().to_string()),
        }
    }
}

/// What the clients saw in one sequence.
#[derive(Default)]
struct Seen {
    ops: AtomicU64,
    misses: AtomicU64,
    wrong: Mutex<Vec<String>>,
}

/// One client: owns the keys `i % CLIENTS == c`; random sets, deletes,
/// appends and reads until `stop`; its part of the reference map.
fn client(
    port: u16,
    c: usize,
    seed: u64,
    mut latest: HashMap<usize, Option<String>>,
    stop: Arc<AtomicBool>,
    seen: Arc<Seen>,
) -> HashMap<usize, Option<String>> {
    let mut cx = Cx::new(port);
    let mut rng = Rng(seed ^ (c as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mine = keys() / CLIENTS;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let i = rng.below(mine as u64) as usize * CLIENTS + c;
        let k = key(i);
        let want = latest[&i].clone();
        let roll = rng.below(100);
        let bad = |what: String| seen.wrong.lock().unwrap().push(what);
        if roll < 40 {
            let v = format!("c{c}.{n}");
            match cx.ask(&format!("set {k} 0 0 {}\r\n{v}\r\n", v.len())) {
                Got::Ok => {
                    latest.insert(i, Some(v));
                }
                g => bad(format!("set {k}: {g:?}")),
            }
        } else if roll < 50 {
            match cx.ask(&format!("delete {k}\r\n")) {
                Got::Ok | Got::No => {
                    latest.insert(i, None);
                }
                g => bad(format!("delete {k}: {g:?}")),
            }
        } else if roll < 60 {
            // Needs the value: during a move it waits for the key's copy.
            match (cx.ask(&format!("append {k} 0 0 1\r\n+\r\n")), want) {
                (Got::Ok, Some(v)) => {
                    latest.insert(i, Some(v + "+"));
                }
                (Got::No, None) => {}
                (g, want) => bad(format!("append {k}: {g:?}, the key is {want:?}")),
            }
        } else {
            match (cx.ask(&format!("get {k}\r\n")), want) {
                (Got::Value(v), Some(w)) if v == w => {}
                (Got::No, Some(_)) => {
                    seen.misses.fetch_add(1, Ordering::Relaxed);
                }
                (Got::No, None) => {}
                (g, want) => bad(format!("get {k}: {g:?}, the key is {want:?}")),
            }
        }
        seen.ops.fetch_add(1, Ordering::Relaxed);
    }
    latest
}

/// One change of the ring (`None`: not possible from `ring`).
fn change(rng: &mut Rng, ring: &Ring, kind: u64) -> Option<(String, Ring)> {
    let mut next = ring.clone();
    let absent: Vec<usize> = (0..SERVERS)
        .filter(|b| !ring.iter().any(|(x, _)| x == b))
        .collect();
    match kind {
        0 if !absent.is_empty() => {
            let b = absent[rng.below(absent.len() as u64) as usize];
            let at = rng.below(next.len() as u64 + 1) as usize;
            next.insert(at, (b, 1));
            Some((format!("add s{b}"), next))
        }
        1 if ring.len() > 1 => {
            let at = rng.below(next.len() as u64) as usize;
            let (b, _) = next.remove(at);
            Some((format!("remove s{b}"), next))
        }
        2 => {
            let at = rng.below(next.len() as u64) as usize;
            let w = next[at].1 % 4 + 1 + rng.below(2) as u32;
            next[at].1 = w;
            Some((format!("weight s{} {w}", next[at].0), next))
        }
        3 if ring.len() > 1 => {
            next.rotate_left(1 + rng.below(ring.len() as u64 - 1) as usize);
            Some(("reorder".to_string(), next))
        }
        _ => None,
    }
}

/// Runs the sequence of seed `seed`; what went wrong.
fn sequence(env: &Env, seed: u64) -> Result<(u64, u64), String> {
    let mut rng = Rng(seed);
    // Empty servers, a random first ring.
    for b in &env.backends {
        flush(b.port());
    }
    let mut ring: Ring = Vec::new();
    let first = 2 + rng.below(3) as usize;
    while ring.len() < first {
        let b = rng.below(SERVERS as u64) as usize;
        if !ring.iter().any(|(x, _)| *x == b) {
            ring.push((b, 1 + rng.below(2) as u32));
        }
    }
    env.reload(&ring);
    env.settle();
    // Every key set once.
    let port = env.proxy.port();
    let mut cx = Cx::new(port);
    let mut latest: HashMap<usize, Option<String>> = HashMap::new();
    for i in 0..keys() {
        let v = format!("v0-{i}");
        if cx.ask(&format!("set {} 0 0 {}\r\n{v}\r\n", key(i), v.len())) != Got::Ok {
            return Err(format!("fill of {} failed", key(i)));
        }
        latest.insert(i, Some(v));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let part = latest
                .iter()
                .filter(|(i, _)| *i % CLIENTS == c)
                .map(|(i, v)| (*i, v.clone()))
                .collect();
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || client(port, c, seed, part, stop, seen))
        })
        .collect();
    // The reloads.
    let reloads = 2 + rng.below(5);
    let mut plan = Vec::new();
    let mut done = 0;
    while done < reloads {
        let kind = rng.below(5);
        let steps = if kind == 4 {
            // Added, then removed again.
            let Some((what, added)) = change(&mut rng, &ring, 0) else {
                continue;
            };
            let b = added
                .iter()
                .find(|(x, _)| !ring.iter().any(|(y, _)| y == x));
            let b = b.unwrap().0;
            let back: Ring = added.iter().copied().filter(|(x, _)| *x != b).collect();
            vec![(what, added), (format!("remove s{b}"), back)]
        } else {
            match change(&mut rng, &ring, kind) {
                Some(step) => vec![step],
                None => continue,
            }
        };
        for (what, next) in steps {
            env.reload(&next);
            ring = next;
            done += 1;
            let gap = match rng.below(100) {
                0..=34 => "back to back".to_string(),
                35..=74 => {
                    let ms = 1 + rng.below(40);
                    std::thread::sleep(Duration::from_millis(ms));
                    format!("{ms} ms")
                }
                _ => {
                    env.settle();
                    "settled".to_string()
                }
            };
            plan.push(format!("{what} ({gap})"));
        }
    }
    env.settle();
    std::thread::sleep(Duration::from_millis(5));
    stop.store(true, Ordering::Relaxed);
    let mut latest = HashMap::new();
    for c in clients {
        latest.extend(c.join().unwrap());
    }
    env.settle();
    let mut wrong = std::mem::take(&mut *seen.wrong.lock().unwrap());
    for i in 0..keys() {
        let got = cx.ask(&format!("get {}\r\n", key(i)));
        let ok = match (&got, &latest[&i]) {
            (Got::Value(v), Some(w)) => v == w,
            (Got::No, None) => true,
            _ => false,
        };
        if !ok {
            wrong.push(format!("after: {}: {got:?}, want {:?}", key(i), latest[&i]));
        }
    }
    if wrong.is_empty() {
        Ok((
            seen.ops.load(Ordering::Relaxed),
            seen.misses.load(Ordering::Relaxed),
        ))
    } else {
        Err(format!(
            "{} wrong, e.g. {:?}; first ring then {}",
            wrong.len(),
            &wrong[..wrong.len().min(4)],
            plan.join(", ")
        ))
    }
}

fn memcached_bin() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("MEMCACHED_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(b));
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.oracle/memcached-1.6.45/memcached");
    p.is_file().then_some(p)
}

fn run(env: &Env, seeds: impl Iterator<Item = u64>) -> Vec<String> {
    let started = Instant::now();
    let (mut n, mut ops, mut misses) = (0, 0, 0);
    let mut failed = Vec::new();
    for seed in seeds {
        n += 1;
        match sequence(env, seed) {
            Ok((o, m)) => {
                ops += o;
                misses += m;
            }
            Err(e) => {
                eprintln!("{}: sequence MOVE_MODEL_SEED={seed} failed: {e}", env.what);
                failed.push(format!("{}: seed {seed}: {e}", env.what));
            }
        }
    }
    eprintln!(
        "{}: {n} sequences in {:.1} s, {ops} client requests, {misses} reads missed during \
         moves, {} sequences failed",
        env.what,
        started.elapsed().as_secs_f64(),
        failed.len()
    );
    failed
}

#[test]
fn random_reload_sequences_under_load_lose_no_key() {
    let one: Option<u64> = std::env::var("MOVE_MODEL_SEED")
        .ok()
        .map(|s| s.parse().expect("MOVE_MODEL_SEED: a number"));
    let base = std::env::var("MOVE_MODEL_BASE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let count = |default: u64| {
        std::env::var("MOVE_MODEL_SEQUENCES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let seeds = |n: u64, salt: u64| {
        (0..n).map(move |i| base.wrapping_add(i).wrapping_mul(0x9e37_79b9) ^ salt)
    };
    let only_memcached = std::env::var("MOVE_MODEL_BACKEND").as_deref() == Ok("memcached");
    eprintln!(
        "move model: base seed {base} (MOVE_MODEL_BASE={base} reruns the run; \
         MOVE_MODEL_SEED=<seed> one sequence)"
    );
    let mut failed = Vec::new();
    if !only_memcached {
        let env = Env::start(&osmium_bin(), "osmium");
        match one {
            Some(seed) => failed.extend(run(&env, [seed].into_iter())),
            None => failed.extend(run(&env, seeds(count(OSMIUM_SEQUENCES), 0))),
        }
    }
    if one.is_none() || only_memcached {
        match memcached_bin() {
            Some(bin) => {
                let env = Env::start(&bin, "memcached");
                match one {
                    Some(seed) => failed.extend(run(&env, [seed].into_iter())),
                    None => failed.extend(run(&env, seeds(count(MEMCACHED_SEQUENCES), 1))),
                }
            }
            None => eprintln!("SKIP memcached sequences: memcached 1.6.45 not built"),
        }
    }
    assert!(
        failed.is_empty(),
        "{} sequences failed: {failed:#?}",
        failed.len()
    );
}
