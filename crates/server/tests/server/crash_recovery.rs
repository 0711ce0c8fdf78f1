//! kill -9 at random moments under a write load, with `-e FILE`: after
//! each kill the next start must serve every acknowledged write with its
//! value, keep every acknowledged delete and flush_all, and never serve a
//! torn or half-written value.
//!
//! Writers (text, meta and binary protocol, one connection each) own
//! disjoint keys and send one request at a time, so each key has at most
//! one request in flight. A model keeps, per key, the state after its last
//! acknowledged request and the state its request in flight would leave.
//! Values are a pattern of their key, version and length, from 1 byte to
//! 256 KiB: a value that is neither allowed state (a torn write, an old
//! version, another key's bytes) fails the test. Each round starts with an
//! acknowledged flush_all over keys written only before it, kills the
//! server 100-900 ms into the load, restarts it on the same file and
//! checks every key; the rounds go on from what was found.
//!
//! The second test runs the same rounds in a cache a few times bigger than
//! its live data (`-m 32 -M`): the writes fill it with overwritten and
//! deleted items, so segments are being compacted (live items moved,
//! mostly dead segments freed) when the kill comes; with `-M` nothing may
//! be evicted either, so every acknowledged write must come back.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use osmium_test_harness::{CacheServer, Running};

const ROUNDS: usize = 6;
pub(crate) const WRITERS: usize = 4;

/// The server and the load of one kind of round.
#[derive(Clone, Copy)]
pub(crate) struct Setup {
    pub name: &'static str,
    pub memory_mb: u32,
    /// `-M`: nothing may be evicted.
    pub no_evictions: bool,
    /// A flash tier of this many MiB in 1 MiB pages.
    pub flash_mb: Option<u32>,
    pub keys_per_writer: usize,
}

/// splitmix64: a small seeded generator (the test needs no crate for it).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The value of version `version` of `key`, `len` bytes long.
fn value(key: &str, version: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(version
        ^ key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        }));
    let head = format!("{key}:{version}:");
    let mut v: Vec<u8> = head.into_bytes();
    while v.len() < len {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A key's value in the model: None when it has none.
pub(crate) type State = Option<Vec<u8>>;

#[derive(Default)]
pub(crate) struct KeyModel {
    /// After the last acknowledged request.
    pub acked: State,
    /// What the request in flight (sent, not answered) would leave.
    pub in_flight: Option<State>,
    /// Every request and its answer, and the flush_alls (for the message
    /// of a failure).
    pub history: Vec<String>,
}

/// The server of `setup` on memory file `file` (its flash tier, if any,
/// beside it).
pub(crate) fn server_of(file: &Path, setup: &Setup) -> CacheServer {
    let mut server = common::osmium()
        .memory(setup.memory_mb)
        .threads(2)
        .args(["-I", "1m"]);
    if setup.no_evictions {
        server = server.arg("-M");
    }
    if let Some(mb) = setup.flash_mb {
        server = server
            .flash(file.with_extension("ext"), &format!("{mb}m"))
            .opt("ext_page_size=1");
    }
    server.memory_file(file)
}

/// A connection to `server`, Nagle off.
fn connect(server: &Running) -> TcpStream {
    let s = server.connect();
    s.set_nodelay(true).unwrap();
    s
}

/// A scratch directory (tmpfs when there is one), removed at the end.
pub(crate) struct Scratch(pub PathBuf);

impl Scratch {
    pub(crate) fn new(name: &str) -> Scratch {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("osmium-crash-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Text,
    Meta,
    Binary,
}

/// One request/response connection in one protocol.
struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
    protocol: Protocol,
}

impl Client {
    fn new(s: TcpStream, protocol: Protocol) -> Client {
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
            protocol,
        }
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        if self.r.read_line(&mut l)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(l)
    }

    /// Stores `v` under `key`: Ok(true) when acknowledged as stored,
    /// Ok(false) when refused out of memory (the key then has no value).
    fn set(&mut self, key: &str, v: &[u8]) -> std::io::Result<bool> {
        match self.protocol {
            Protocol::Text => {
                let mut req = format!("set {key} 0 0 {}\r\n", v.len()).into_bytes();
                req.extend_from_slice(v);
                req.extend_from_slice(b"\r\n");
                self.w.write_all(&req)?;
                let l = self.line()?;
                Ok(check(l == "STORED\r\n", l.starts_with("SERVER_ERROR"), &l))
            }
            Protocol::Meta => {
                let mut req = format!("ms {key} {} T0\r\n", v.len()).into_bytes();
                req.extend_from_slice(v);
                req.extend_from_slice(b"\r\n");
                self.w.write_all(&req)?;
                let l = self.line()?;
                Ok(check(l == "HD\r\n", l.starts_with("SERVER_ERROR"), &l))
            }
            Protocol::Binary => {
                let status = self.binary(0x01, key, &[0; 8], v)?;
                Ok(check(
                    status == 0,
                    status == 0x82,
                    &format!("status {status:#x}"),
                ))
            }
        }
    }

    /// Deletes `key`; true if it was there.
    fn delete(&mut self, key: &str) -> std::io::Result<bool> {
        match self.protocol {
            Protocol::Text => {
                self.w.write_all(format!("delete {key}\r\n").as_bytes())?;
                let l = self.line()?;
                Ok(check(l == "DELETED\r\n", l == "NOT_FOUND\r\n", &l))
            }
            Protocol::Meta => {
                self.w.write_all(format!("md {key}\r\n").as_bytes())?;
                let l = self.line()?;
                Ok(check(l == "HD\r\n", l == "NF\r\n", &l))
            }
            Protocol::Binary => {
                let status = self.binary(0x04, key, &[], &[])?;
                Ok(check(
                    status == 0,
                    status == 1,
                    &format!("status {status:#x}"),
                ))
            }
        }
    }

    /// Appends `v`; true if the key was there.
    fn append(&mut self, key: &str, v: &[u8]) -> std::io::Result<bool> {
        let mut req = format!("append {key} 0 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        self.w.write_all(&req)?;
        let l = self.line()?;
        Ok(check(l == "STORED\r\n", l == "NOT_STORED\r\n", &l))
    }

    /// A binary request; returns the response's status.
    fn binary(&mut self, op: u8, key: &str, extras: &[u8], v: &[u8]) -> std::io::Result<u16> {
        let body = extras.len() + key.len() + v.len();
        let mut p = vec![0x80, op];
        p.extend_from_slice(&(key.len() as u16).to_be_bytes());
        p.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
        p.extend_from_slice(&(body as u32).to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(extras);
        p.extend_from_slice(key.as_bytes());
        p.extend_from_slice(v);
        self.w.write_all(&p)?;
        let mut h = [0u8; 24];
        self.r.read_exact(&mut h)?;
        let len = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        let mut rest = vec![0; len];
        self.r.read_exact(&mut rest)?;
        Ok(u16::from_be_bytes([h[6], h[7]]))
    }
}

/// `yes` or `no` must hold (else the reply was unexpected: panic).
fn check(yes: bool, no: bool, reply: &str) -> bool {
    assert!(yes || no, "unexpected reply {reply:?}");
    yes
}

/// Reads every key in `keys` (text get, in batches): key -> value.
pub(crate) fn read_all(server: &Running, keys: &[String]) -> HashMap<String, Vec<u8>> {
    let mut c = Client::new(connect(server), Protocol::Text);
    let mut out = HashMap::new();
    for batch in keys.chunks(50) {
        c.w.write_all(format!("get {}\r\n", batch.join(" ")).as_bytes())
            .unwrap();
        loop {
            let l = c.line().unwrap();
            if l == "END\r\n" {
                break;
            }
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f[0], "VALUE", "{l:?}");
            let len: usize = f[3].parse().unwrap();
            let mut v = vec![0; len + 2];
            c.r.read_exact(&mut v).unwrap();
            v.truncate(len);
            out.insert(f[1].to_string(), v);
        }
    }
    out
}

/// One writer's load until the connection breaks: returns when the server
/// is gone.
/// [`WRITERS`] threads of [`write_load`] on `port`, each seeded from
/// `rng`, until [`Writers::stop`].
pub(crate) struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    pub(crate) fn start(
        port: u16,
        keys: usize,
        rng: &mut Rng,
        model: &Arc<Mutex<HashMap<String, KeyModel>>>,
        versions: &Arc<Mutex<u64>>,
    ) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..WRITERS)
            .map(|w| {
                let (model, versions, stop) = (model.clone(), versions.clone(), stop.clone());
                let seed = rng.next();
                std::thread::spawn(move || write_load(port, keys, w, seed, model, versions, stop))
            })
            .collect();
        Writers { stop, threads }
    }

    /// Stops the writers and waits for them.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

fn write_load(
    server_port: u16,
    keys: usize,
    writer: usize,
    rng_seed: u64,
    model: Arc<Mutex<HashMap<String, KeyModel>>>,
    versions: Arc<Mutex<u64>>,
    stop: Arc<AtomicBool>,
) {
    let protocol = [
        Protocol::Text,
        Protocol::Meta,
        Protocol::Binary,
        Protocol::Text,
    ][writer % 4];
    let Ok(s) = TcpStream::connect(("127.0.0.1", server_port)) else {
        return;
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    let mut c = Client::new(s, protocol);
    let mut rng = Rng(rng_seed);
    while !stop.load(Ordering::Relaxed) {
        let key = format!("w{writer}k{}", rng.below(keys as u64));
        let version = {
            let mut v = versions.lock().unwrap();
            *v += 1;
            *v
        };
        let op = rng.below(10);
        let current = model
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .acked
            .clone();
        // The state the request leaves if it happens is recorded as in
        // flight before it is sent.
        let result = if op < 6 {
            // Mostly small values; now and then up to 256 KiB.
            let len = if rng.below(20) == 0 {
                1 + rng.below(256 << 10) as usize
            } else {
                1 + rng.below(2000) as usize
            };
            let v = value(&key, version, len);
            model.lock().unwrap().get_mut(&key).unwrap().in_flight = Some(Some(v.clone()));
            c.set(&key, &v)
                .map(|stored| if stored { Some(v) } else { None })
        } else if op < 8 || protocol == Protocol::Binary || current.is_none() {
            model.lock().unwrap().get_mut(&key).unwrap().in_flight = Some(None);
            c.delete(&key).map(|_| None)
        } else {
            let suffix = value(&key, version, 1 + rng.below(100) as usize);
            let mut v = current.clone().unwrap();
            v.extend_from_slice(&suffix);
            model.lock().unwrap().get_mut(&key).unwrap().in_flight = Some(Some(v.clone()));
            let was = current.clone();
            c.append(&key, &suffix)
                .map(|appended| if appended { Some(v) } else { was })
        };
        let mut m = model.lock().unwrap();
        let k = m.get_mut(&key).unwrap();
        let answer = result.as_ref().map(|s| s.as_ref().map(|v| v.len()));
        k.history.push(format!("v{version} op{op} -> {answer:?}"));
        match result {
            Ok(state) => {
                k.acked = state;
                k.in_flight = None;
            }
            // The server died with the request in flight: it may or may
            // not have happened.
            Err(_) => return,
        }
    }
}

#[test]
fn every_acknowledged_write_delete_and_flush_survives_kill_9() {
    kill_9_rounds(Setup {
        name: "cache",
        memory_mb: 1024,
        no_evictions: true,
        flash_mb: None,
        keys_per_writer: 300,
    });
}

#[test]
fn kill_9_during_compaction_loses_nothing() {
    let compacted = kill_9_rounds(Setup {
        name: "compact",
        memory_mb: 32,
        no_evictions: true,
        flash_mb: None,
        keys_per_writer: 300,
    });
    assert!(
        compacted["segments_compacted"] >= ROUNDS as u64,
        "only {compacted:?} in {ROUNDS} rounds"
    );
}

#[test]
fn kill_9_during_flash_compaction_loses_nothing() {
    // 16 MiB of RAM, 64 MiB of flash in 1 MiB pages, about 40 MB of live
    // values: items go to flash, their copies there die as they are
    // overwritten, and mostly dead pages are compacted; nothing is
    // dropped while the flash has room.
    let compacted = kill_9_rounds(Setup {
        name: "flash",
        memory_mb: 16,
        no_evictions: false,
        flash_mb: Some(64),
        keys_per_writer: 1500,
    });
    assert!(
        compacted["extstore_pages_compacted"] > 0,
        "{compacted:?} in {ROUNDS} rounds"
    );
}

/// The compaction counters of a running server.
fn compaction_stats(server: &Running) -> HashMap<&'static str, u64> {
    let mut c = Client::new(connect(server), Protocol::Text);
    c.w.write_all(b"stats\r\n").unwrap();
    let mut out = HashMap::new();
    loop {
        let l = c.line().unwrap();
        if l == "END\r\n" {
            return out;
        }
        for name in [
            "segments_compacted",
            "extstore_pages_compacted",
            "evictions",
            "extstore_page_reclaims",
        ] {
            if let Some(v) = l.strip_prefix(&format!("STAT {name} ")) {
                out.insert(name, v.trim().parse().unwrap());
            }
        }
    }
}

/// The kill -9 rounds (see the module comment) on a server set up as
/// `setup`; returns its compaction counters just before the kills, summed
/// over the rounds.
fn kill_9_rounds(setup: Setup) -> HashMap<&'static str, u64> {
    let scratch = Scratch::new(setup.name);
    let file = scratch.0.join("cache.mem");
    let model: Arc<Mutex<HashMap<String, KeyModel>>> = Arc::default();
    let versions = Arc::new(Mutex::new(0u64));
    let mut rng = Rng(0x5eed ^ u64::from(std::process::id()));
    let mut server = server_of(&file, &setup).start();
    let mut compacted: HashMap<&'static str, u64> = HashMap::new();
    let keys = setup.keys_per_writer;
    let mut all_keys: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..keys).map(move |k| format!("w{w}k{k}")))
        .collect();
    let started = Instant::now();
    let mut checked = 0usize;
    for round in 0..ROUNDS {
        // Keys written only before an acknowledged flush_all: gone after it,
        // whatever the kill interrupts later.
        let flushed: Vec<String> = (0..20).map(|i| format!("r{round}f{i}")).collect();
        {
            let mut c = Client::new(connect(&server), Protocol::Text);
            for k in &flushed {
                assert!(c.set(k, &value(k, 0, 100)).unwrap());
            }
            c.w.write_all(b"flush_all\r\n").unwrap();
            assert_eq!(c.line().unwrap(), "OK\r\n");
            // memcached's rule: what is stored in the flush's second is
            // flushed too. The load starts in the next second.
            let until = Instant::now() + Duration::from_millis(1100);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            let mut m = model.lock().unwrap();
            let v = *versions.lock().unwrap();
            for k in m.values_mut() {
                k.acked = None;
                k.history.push(format!("flush_all at v{v}"));
            }
        }
        let writers = Writers::start(server.port(), keys, &mut rng, &model, &versions);
        std::thread::sleep(Duration::from_millis(100 + rng.below(800)));
        if setup.flash_mb.is_some() && round == ROUNDS - 1 {
            // The last round of a flash setup is killed only once the flash
            // has compacted a page (however slowly a loaded machine writes),
            // so some kill lands after compaction moved items.
            let deadline = Instant::now() + Duration::from_secs(120);
            let before = compacted.get("extstore_pages_compacted").copied();
            while before.unwrap_or(0) == 0
                && compaction_stats(&server)["extstore_pages_compacted"] == 0
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        for (name, n) in compaction_stats(&server) {
            *compacted.entry(name).or_default() += n;
        }
        std::thread::sleep(Duration::from_millis(rng.below(20)));
        server.kill();
        writers.stop();
        // The same arguments and memory file, on the same port.
        server.restart();
        let mut keys = all_keys.clone();
        keys.extend(flushed.iter().cloned());
        let found = read_all(&server, &keys);
        for k in &flushed {
            assert!(
                !found.contains_key(k),
                "round {round}: {k} came back after an acknowledged flush_all"
            );
        }
        let when = format!("round {round}, after kill -9");
        checked += check_model(&mut model.lock().unwrap(), &all_keys, &found, &when);
        all_keys.sort();
    }
    eprintln!(
        "{}: {ROUNDS} kill -9 rounds, {checked} key checks, {} writes, {compacted:?}, {:.1} s",
        setup.name,
        versions.lock().unwrap(),
        started.elapsed().as_secs_f64()
    );
    compacted
}

/// Checks what the server has (`found`) for each of `keys` against the
/// model: the acknowledged value, or what the request in flight would
/// leave; the model then goes on from what the server has. `when` opens a
/// failure's message. How many keys were checked.
pub(crate) fn check_model(
    model: &mut HashMap<String, KeyModel>,
    keys: &[String],
    found: &HashMap<String, Vec<u8>>,
    when: &str,
) -> usize {
    for key in keys {
        let k = model.entry(key.clone()).or_default();
        let got = found.get(key).cloned();
        let allowed_acked = got == k.acked;
        let allowed_in_flight = k.in_flight.as_ref().is_some_and(|s| *s == got);
        assert!(
            allowed_acked || allowed_in_flight,
            "{when}: {key} is {}; acknowledged {}, in flight {}; history {:?}",
            describe(&got),
            describe(&k.acked),
            k.in_flight.as_ref().map_or("nothing".into(), describe),
            k.history,
        );
        // Go on from what the server has.
        k.acked = got;
        k.in_flight = None;
    }
    keys.len()
}

fn describe(s: &State) -> String {
    match s {
        None => "missing".into(),
        Some(v) => {
            let head: String = String::from_utf8_lossy(&v[..v.len().min(24)]).into();
            format!("{} bytes {head:?}", v.len())
        }
    }
}
