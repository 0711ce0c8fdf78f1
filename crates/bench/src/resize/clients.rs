//! The cache-aside application of `cluster --mode resize`: client threads
//! (one blocking connection each, through the proxy) in front of a
//! stand-in database, and what they record on a per-second timeline.
//!
//! The database is in-process: the latest version of every key
//! ([`Shared::db`]). A client reads a key with `get`; on a miss it reads
//! the database (counted per second as a *database read*, after an
//! optional delay) and fills the cache with `add` (so a fill never
//! replaces a newer write). A write (a fraction of the requests) bumps the
//! key's version in the database and `set`s the new value, under a lock
//! per key stripe, retried until the cache acknowledges it; only then is
//! the version *committed* ([`Shared::committed`]). A value is
//! `ID:VERSION:` padded to the value size, so every read is checked: a
//! value of another key is *wrong*, a version older than the one
//! committed before the get was sent is *stale*.
//!
//! Connections lost (a restarted proxy) count their request as failed
//! and are opened again (counted as reconnects).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use osmium_protocol::client::encode;
use osmium_protocol::client::reply::{self, Expect, Outcome};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::keys;

/// Key width: `k` and 15 digits.
pub(crate) const KEY_SIZE: usize = 16;
/// How long a request may wait for its reply before it counts as failed.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
const STRIPES: usize = 4096;

/// One second of the timeline.
pub(crate) struct Second {
    pub requests: AtomicU64,
    pub db_reads: AtomicU64,
    pub writes: AtomicU64,
    pub failed: AtomicU64,
    pub reconnects: AtomicU64,
    pub stale: AtomicU64,
    pub wrong: AtomicU64,
    /// Round-trip latencies, µs.
    pub hist: Mutex<Histogram<u64>>,
}

pub(crate) fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 2).expect("histogram bounds are valid")
}

/// Per-second counters from the clients' start.
pub(crate) struct Timeline {
    pub start: Instant,
    pub seconds: Vec<Second>,
}

impl Timeline {
    fn new(seconds: usize) -> Timeline {
        Timeline {
            start: Instant::now(),
            seconds: (0..seconds.max(1))
                .map(|_| Second {
                    requests: AtomicU64::new(0),
                    db_reads: AtomicU64::new(0),
                    writes: AtomicU64::new(0),
                    failed: AtomicU64::new(0),
                    reconnects: AtomicU64::new(0),
                    stale: AtomicU64::new(0),
                    wrong: AtomicU64::new(0),
                    hist: Mutex::new(new_hist()),
                })
                .collect(),
        }
    }

    /// The slot of the current second (the last slot past the end).
    fn index(&self) -> usize {
        (self.start.elapsed().as_secs() as usize).min(self.seconds.len() - 1)
    }

    fn now(&self) -> &Second {
        &self.seconds[self.index()]
    }
}

/// What the clients, the driver and the final check share.
pub(crate) struct Shared {
    /// The database: the latest version of every key.
    pub db: Vec<AtomicU64>,
    /// The version of every key whose `set` the cache acknowledged.
    pub committed: Vec<AtomicU64>,
    /// Keys whose last write was given up at the stop (not checked).
    pub unsure: Vec<AtomicBool>,
    stripes: Vec<Mutex<()>>,
    pub timeline: Timeline,
    pub stop: AtomicBool,
}

/// What the clients do.
#[derive(Clone, Debug)]
pub(crate) struct Load {
    pub addr: SocketAddr,
    pub clients: usize,
    pub keys: u64,
    pub value_size: usize,
    pub zipf: f64,
    pub write_fraction: f64,
    pub db_delay: Duration,
    pub seed: u64,
}

impl Shared {
    /// Every key at version 0 (what [`preload`] writes), a timeline of
    /// `seconds` slots starting now.
    pub(crate) fn new(keys: u64, seconds: usize) -> Shared {
        let n = keys as usize;
        Shared {
            db: (0..n).map(|_| AtomicU64::new(0)).collect(),
            committed: (0..n).map(|_| AtomicU64::new(0)).collect(),
            unsure: (0..n).map(|_| AtomicBool::new(false)).collect(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            timeline: Timeline::new(seconds),
            stop: AtomicBool::new(false),
        }
    }
}

pub(crate) fn key(id: u64) -> keys::Key {
    keys::Key::new(b'k', id, KEY_SIZE)
}

/// `ID:VERSION:` padded with `.` to `size` (longer if that does not fit).
fn append_value(out: &mut Vec<u8>, id: u64, version: u64, size: usize) {
    let start = out.len();
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(id).as_bytes());
    out.push(b':');
    out.extend_from_slice(b.format(version).as_bytes());
    out.push(b':');
    let used = out.len() - start;
    out.resize(start + used.max(size), b'.');
}

/// The (id, version) a value encodes.
pub(crate) fn parse_value(v: &[u8]) -> Option<(u64, u64)> {
    let mut parts = v.splitn(3, |&b| b == b':');
    let num = |p: Option<&[u8]>| std::str::from_utf8(p?).ok()?.parse::<u64>().ok();
    let id = num(parts.next())?;
    let version = num(parts.next())?;
    parts.next()?;
    Some((id, version))
}

/// `CMD key 0 0 len\r\nvalue\r\n` into `out` (cleared first).
fn storage(out: &mut Vec<u8>, cmd: &str, id: u64, version: u64, size: usize) {
    out.clear();
    let mut value = Vec::with_capacity(size + 24);
    append_value(&mut value, id, version, size);
    let key = key(id);
    encode::storage(
        out,
        cmd.as_bytes(),
        key.as_bytes(),
        0,
        0,
        &value,
        None,
        false,
    );
}

/// A blocking text-protocol connection with its read buffer.
pub(crate) struct Wire {
    stream: TcpStream,
    buf: Vec<u8>,
    at: usize,
    end: usize,
}

/// What a `get` found.
pub(crate) enum Got {
    Hit(Vec<u8>),
    Miss,
    /// An error line (`SERVER_ERROR ...`), the connection still usable.
    Error,
}

impl Wire {
    pub(crate) fn connect(addr: SocketAddr) -> std::io::Result<Wire> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        Ok(Wire {
            stream,
            buf: vec![0; 1 << 16],
            at: 0,
            end: 0,
        })
    }

    pub(crate) fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(b)
    }

    fn fill(&mut self) -> std::io::Result<()> {
        if self.at == self.end {
            self.at = 0;
            self.end = 0;
        }
        if self.end == self.buf.len() {
            if self.at > 0 {
                self.buf.copy_within(self.at..self.end, 0);
                self.end -= self.at;
                self.at = 0;
            } else {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let n = self.stream.read(&mut self.buf[self.end..])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.end += n;
        Ok(())
    }

    /// The next line, without its CRLF.
    pub(crate) fn line(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if let Ok(Some(n)) = reply::reply_len(&self.buf[self.at..self.end], Expect::Line) {
                let line = self.buf[self.at..self.at + n].trim_ascii_end().to_vec();
                self.at += n;
                return Ok(line);
            }
            self.fill()?;
        }
    }

    fn take(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        while self.end - self.at < n {
            self.fill()?;
        }
        let out = self.buf[self.at..self.at + n].to_vec();
        self.at += n;
        Ok(out)
    }

    /// Reads the reply of a `get` of several keys: (key, value) found.
    pub(crate) fn values(&mut self) -> std::io::Result<Result<crate::conn::Found, String>> {
        let mut found = Vec::new();
        loop {
            let line = self.line()?;
            if reply::outcome(&line) == Outcome::Miss {
                return Ok(Ok(found));
            }
            let Some((key, _, len, _)) = reply::value_header(&line) else {
                return Ok(Err(String::from_utf8_lossy(&line).into_owned()));
            };
            let key = key.to_vec();
            let mut data = self.take(len + 2)?;
            data.truncate(len);
            found.push((key, data));
        }
    }

    fn get(&mut self, req: &[u8]) -> std::io::Result<Got> {
        self.send(req)?;
        Ok(match self.values()? {
            Ok(mut v) if v.len() <= 1 => v.pop().map_or(Got::Miss, |(_, d)| Got::Hit(d)),
            _ => Got::Error,
        })
    }
}

/// Sets every key at version 0 through `addr` (pipelined, over a few
/// connections).
pub(crate) fn preload(l: &Load) -> Result<(), String> {
    let conns = l.clients.clamp(1, 4) as u64;
    let batch = ((1 << 20) / (l.value_size + 64)).clamp(1, 200) as u64;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns)
            .map(|c| {
                s.spawn(move || -> Result<(), String> {
                    let mut w = Wire::connect(l.addr).map_err(|e| format!("preload: {e}"))?;
                    let (mut out, mut one) = (Vec::new(), Vec::new());
                    let ids: Vec<u64> = (c..l.keys).step_by(conns as usize).collect();
                    for chunk in ids.chunks(batch as usize) {
                        out.clear();
                        for &id in chunk {
                            storage(&mut one, "set", id, 0, l.value_size);
                            out.extend_from_slice(&one);
                        }
                        w.send(&out).map_err(|e| format!("preload: {e}"))?;
                        for _ in chunk {
                            let line = w.line().map_err(|e| format!("preload: {e}"))?;
                            if line != b"STORED" {
                                return Err(format!(
                                    "preload: set answered {:?}",
                                    String::from_utf8_lossy(&line)
                                ));
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Err("preload panicked".into())))
    })
}

/// Starts the clients; they run until `shared.stop`.
pub(crate) fn start(
    l: &Load,
    shared: &Arc<Shared>,
) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    let perm = Arc::new(keys::permutation(l.keys as u32, l.seed));
    let zipf = rand_distr::Zipf::new(l.keys, l.zipf)
        .map_err(|e| format!("zipf({}, {}): {e}", l.keys, l.zipf))?;
    (0..l.clients.max(1))
        .map(|i| {
            let (l, shared, perm) = (l.clone(), Arc::clone(shared), Arc::clone(&perm));
            std::thread::Builder::new()
                .name(format!("resize-client-{i}"))
                .spawn(move || {
                    let mut c = Client {
                        l: &l,
                        shared: &shared,
                        wire: None,
                        lost: false,
                        hist: new_hist(),
                        sec: 0,
                        req: Vec::new(),
                    };
                    let mut rng = SmallRng::seed_from_u64(l.seed ^ ((i as u64 + 1) * 0x9e37_79b9));
                    while !shared.stop.load(Relaxed) {
                        use rand_distr::Distribution;
                        let rank = (zipf.sample(&mut rng) as u64).clamp(1, l.keys) - 1;
                        let id = perm[rank as usize] as u64;
                        if rng.gen_bool(l.write_fraction.clamp(0.0, 1.0)) {
                            c.write(id);
                        } else {
                            c.read(id);
                        }
                    }
                    c.flush();
                })
                .map_err(|e| format!("spawning a client: {e}"))
        })
        .collect()
}

struct Client<'a> {
    l: &'a Load,
    shared: &'a Shared,
    wire: Option<Wire>,
    /// A connection was lost since the last one opened.
    lost: bool,
    hist: Histogram<u64>,
    sec: usize,
    req: Vec<u8>,
}

impl Client<'_> {
    /// The connection, opened (again) if needed; None while it cannot be.
    fn wire(&mut self) -> Option<&mut Wire> {
        if self.wire.is_none() {
            match Wire::connect(self.l.addr) {
                Ok(w) => {
                    if self.lost {
                        self.shared.timeline.now().reconnects.fetch_add(1, Relaxed);
                        self.lost = false;
                    }
                    self.wire = Some(w);
                }
                Err(_) => {
                    self.lost = true;
                    std::thread::sleep(Duration::from_millis(5));
                    return None;
                }
            }
        }
        self.wire.as_mut()
    }

    fn failed(&mut self, io: bool) {
        self.shared.timeline.now().failed.fetch_add(1, Relaxed);
        if io {
            self.wire = None;
            self.lost = true;
        }
    }

    /// Records a round trip that started at `t0`.
    fn record(&mut self, t0: Instant) {
        let tl = &self.shared.timeline;
        let sec = tl.index();
        if sec != self.sec {
            self.flush();
            self.sec = sec;
        }
        let _ = self.hist.record((t0.elapsed().as_micros() as u64).max(1));
        tl.seconds[sec].requests.fetch_add(1, Relaxed);
    }

    /// Moves this second's latencies to the timeline.
    fn flush(&mut self) {
        if self.hist.is_empty() {
            return;
        }
        let slot = &self.shared.timeline.seconds[self.sec];
        let mut h = slot.hist.lock().unwrap_or_else(|e| e.into_inner());
        let _ = h.add(&self.hist);
        self.hist.reset();
    }

    fn read(&mut self, id: u64) {
        let before = self.shared.committed[id as usize].load(Relaxed);
        self.req.clear();
        encode::get(&mut self.req, b"get", [key(id)]);
        let req = std::mem::take(&mut self.req);
        let t0 = Instant::now();
        let got = match self.wire() {
            Some(w) => w.get(&req),
            None => {
                self.req = req;
                return;
            }
        };
        self.req = req;
        match got {
            Err(_) => self.failed(true),
            Ok(Got::Error) => self.failed(false),
            Ok(Got::Hit(v)) => {
                self.record(t0);
                let now = self.shared.timeline.now();
                match parse_value(&v) {
                    Some((got_id, version)) if got_id == id => {
                        if version < before {
                            now.stale.fetch_add(1, Relaxed);
                        }
                    }
                    _ => {
                        now.wrong.fetch_add(1, Relaxed);
                    }
                }
            }
            Ok(Got::Miss) => {
                self.record(t0);
                self.shared.timeline.now().db_reads.fetch_add(1, Relaxed);
                if !self.l.db_delay.is_zero() {
                    std::thread::sleep(self.l.db_delay);
                }
                let version = self.shared.db[id as usize].load(Relaxed);
                storage(&mut self.req, "add", id, version, self.l.value_size);
                let req = std::mem::take(&mut self.req);
                let t0 = Instant::now();
                let r = match self.wire() {
                    Some(w) => w.send(&req).and_then(|()| w.line()),
                    None => Err(std::io::ErrorKind::NotConnected.into()),
                };
                self.req = req;
                match r {
                    Ok(l) if l == b"STORED" || l == b"NOT_STORED" => self.record(t0),
                    Ok(_) => self.failed(false),
                    Err(_) => self.failed(true),
                }
            }
        }
    }

    fn write(&mut self, id: u64) {
        let shared = self.shared;
        let _stripe = shared.stripes[id as usize % STRIPES]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let version = shared.db[id as usize].fetch_add(1, Relaxed) + 1;
        shared.timeline.now().writes.fetch_add(1, Relaxed);
        storage(&mut self.req, "set", id, version, self.l.value_size);
        let req = std::mem::take(&mut self.req);
        // Until the cache has it: the database already has the new version.
        loop {
            if shared.stop.load(Relaxed) {
                shared.unsure[id as usize].store(true, Relaxed);
                break;
            }
            let t0 = Instant::now();
            let r = match self.wire() {
                Some(w) => w.send(&req).and_then(|()| w.line()),
                None => continue,
            };
            match r {
                Ok(l) if l == b"STORED" => {
                    self.record(t0);
                    shared.committed[id as usize].fetch_max(version, Relaxed);
                    break;
                }
                Ok(_) => {
                    self.failed(false);
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => self.failed(true),
            }
        }
        self.req = req;
    }
}

/// The final check: every key read back through `addr`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Check {
    pub checked: u64,
    pub latest: u64,
    pub older: u64,
    pub missing: u64,
    pub wrong: u64,
    /// Keys whose last write was given up when the clients stopped.
    pub unsure: u64,
}

/// Reads every key back (multi-gets of 100) and compares its version with
/// the last one the cache acknowledged.
pub(crate) fn check(addr: SocketAddr, shared: &Shared) -> Result<Check, String> {
    let mut w = Wire::connect(addr).map_err(|e| format!("check: {e}"))?;
    let mut c = Check::default();
    let n = shared.db.len() as u64;
    let mut req = Vec::new();
    let mut id = 0;
    while id < n {
        let end = (id + 100).min(n);
        req.clear();
        encode::get(&mut req, b"get", (id..end).map(key));
        w.send(&req).map_err(|e| format!("check: {e}"))?;
        let found = w
            .values()
            .map_err(|e| format!("check: {e}"))?
            .map_err(|line| format!("check: unexpected reply {line:?}"))?;
        let mut versions: std::collections::HashMap<u64, u64> = Default::default();
        for (k, v) in found {
            let kid = std::str::from_utf8(&k[1..])
                .ok()
                .and_then(|s| s.parse::<u64>().ok());
            match (kid, parse_value(&v)) {
                (Some(kid), Some((vid, version))) if kid == vid => {
                    versions.insert(kid, version);
                }
                _ => c.wrong += 1,
            }
        }
        for k in id..end {
            if shared.unsure[k as usize].load(Relaxed) {
                c.unsure += 1;
                continue;
            }
            c.checked += 1;
            let want = shared.committed[k as usize].load(Relaxed);
            match versions.get(&k) {
                None => c.missing += 1,
                Some(&v) if v >= want => c.latest += 1,
                Some(_) => c.older += 1,
            }
        }
        id = end;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_encode_key_and_version() {
        let mut v = Vec::new();
        append_value(&mut v, 42, 7, 64);
        assert_eq!(v.len(), 64);
        assert_eq!(parse_value(&v), Some((42, 7)));
        v.clear();
        append_value(&mut v, 123_456, 99, 4);
        assert_eq!(parse_value(&v), Some((123_456, 99)));
        assert_eq!(parse_value(b"garbage"), None);
        let mut req = Vec::new();
        storage(&mut req, "set", 3, 1, 10);
        assert_eq!(req, b"set k000000000000003 0 0 10\r\n3:1:......\r\n");
    }
}
