//! `osmium-bench hitratio`: a cache-aside replay over the network. Each
//! request `get`s a key drawn from zipf(alpha) over `--keys` keys (rank →
//! key through a fixed pseudo-random permutation) and `set`s it on a miss;
//! the `scan` variant mixes in one-time scans of keys from a separate
//! namespace. The miss ratio comes from each server's own `stats` (the delta
//! of `get_hits`/`get_misses` over the measured phase).
//!
//! The zipf streams are drawn once, before any server runs (one seeded
//! generator per connection, `--seed`), and replayed to every server, so
//! each server gets the same per-connection request sequences and drawing
//! keys costs nothing while measuring. (How the connections interleave is up
//! to the scheduler.)
//!
//! Pipelining: each connection sends one payload per batch — the `set`s for
//! the previous batch's misses (with replies, so the reply stream stays in
//! step), then `--batch` `get`s — and reads all the replies. A key that
//! misses is therefore stored before the next batch's gets; a key requested
//! twice within one batch misses twice (both servers see the same streams,
//! so this bias is the same for both).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use serde_json::json;

use osmium_protocol::client::encode;
use osmium_protocol::client::reply::{self, Outcome};

use crate::conn::{stat_u64, Conn};
use crate::keys::{append_value, check_key_size, permutation, value_matches, Key};
use crate::servers::{Binaries, Kind, Server};

/// Prefix of the zipf keys.
const ZIPF_PREFIX: u8 = b'k';
/// Prefix of the scan keys: a namespace the zipf stream never touches.
const SCAN_PREFIX: u8 = b's';

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Variant {
    Zipf,
    Scan,
}

impl Variant {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Variant::Zipf => "zipf",
            Variant::Scan => "zipf+scan",
        }
    }
}

pub(crate) struct HitRatioOpts {
    pub keys: u64,
    pub alpha: f64,
    pub memory_mb: Vec<u64>,
    pub variants: Vec<Variant>,
    pub scan_len: u64,
    pub scan_every: u64,
    pub warmup: u64,
    pub requests: u64,
    pub conns: usize,
    pub batch: usize,
    pub seed: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub threads: u32,
    pub servers: Vec<Kind>,
    pub json: bool,
}

/// Client-side counts of one connection over one phase.
#[derive(Clone, Debug, Default)]
struct Counts {
    zipf_gets: u64,
    zipf_misses: u64,
    scan_gets: u64,
    scan_misses: u64,
    sets: u64,
    /// Set replies other than `STORED`.
    set_errors: u64,
    /// Get replies that were neither `VALUE …`/`END`.
    get_errors: u64,
    /// Hits whose value was not the key's.
    bad_values: u64,
    sample: Vec<String>,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.zipf_gets += o.zipf_gets;
        self.zipf_misses += o.zipf_misses;
        self.scan_gets += o.scan_gets;
        self.scan_misses += o.scan_misses;
        self.sets += o.sets;
        self.set_errors += o.set_errors;
        self.get_errors += o.get_errors;
        self.bad_values += o.bad_values;
        for s in &o.sample {
            if self.sample.len() < 3 {
                self.sample.push(s.clone());
            }
        }
    }

    fn note(&mut self, line: &[u8]) {
        if self.sample.len() < 3 {
            self.sample
                .push(String::from_utf8_lossy(line).trim_end().to_string());
        }
    }
}

/// The precomputed request streams and formats; shared by all connections.
struct Workload {
    /// Per connection: the zipf key ids of its warm-up share, then those
    /// of its measured share.
    streams: Vec<Vec<u32>>,
    /// Per connection: how many of `streams[i]` belong to the warm-up.
    warmup_len: Vec<usize>,
    key_size: usize,
    value_size: usize,
    batch: usize,
    conns: u64,
}

/// One connection with its own generator state.
struct Client {
    index: u64,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    /// Scan keys this connection has used so far (scan key ids are
    /// `n * conns + index`, so no two scans share a key).
    scan_next: u64,
    /// Misses of the last batch, set at the start of the next one.
    pending_sets: Vec<(u8, u64)>,
    batch: Vec<(u8, u64)>,
    payload: Vec<u8>,
    line: Vec<u8>,
    value: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr, index: u64) -> Result<Client, String> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let reader = BufReader::with_capacity(1 << 16, s.try_clone().map_err(|e| e.to_string())?);
        Ok(Client {
            index,
            writer: s,
            reader,
            scan_next: 0,
            pending_sets: Vec::new(),
            batch: Vec::new(),
            payload: Vec::new(),
            line: Vec::new(),
            value: Vec::new(),
        })
    }

    fn read_line(&mut self) -> Result<(), String> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| format!("reading a reply: {e}"))?;
        if n == 0 {
            return Err("server closed the connection".into());
        }
        if self.line.ends_with(b"\r\n") {
            self.line.truncate(self.line.len() - 2);
        }
        Ok(())
    }

    /// Sends the pending sets and the batch's gets, reads every reply,
    /// and queues the batch's misses (each key once) for the next exchange.
    fn exchange(&mut self, w: &Workload, c: &mut Counts) -> Result<(), String> {
        self.payload.clear();
        for &(prefix, id) in &self.pending_sets {
            let key = Key::new(prefix, id, w.key_size);
            encode::set_line(&mut self.payload, key.as_bytes(), w.value_size, false);
            append_value(&mut self.payload, key.as_bytes(), w.value_size);
            encode::block_end(&mut self.payload);
        }
        for &(prefix, id) in &self.batch {
            let key = Key::new(prefix, id, w.key_size);
            encode::get(&mut self.payload, b"get", [key]);
        }
        self.writer
            .write_all(&self.payload)
            .map_err(|e| format!("sending: {e}"))?;

        for _ in 0..self.pending_sets.len() {
            self.read_line()?;
            c.sets += 1;
            if reply::outcome(&self.line) != Outcome::Done {
                c.set_errors += 1;
                c.note(&self.line);
            }
        }
        self.pending_sets.clear();

        for i in 0..self.batch.len() {
            let (prefix, id) = self.batch[i];
            let mut hit = false;
            loop {
                self.read_line()?;
                if reply::outcome(&self.line) == Outcome::Miss {
                    break;
                }
                if reply::outcome(&self.line) == Outcome::Value {
                    let (_, _, len, _) = reply::value_header(&self.line).ok_or_else(|| {
                        format!("bad VALUE line {:?}", String::from_utf8_lossy(&self.line))
                    })?;
                    self.value.resize(len + 2, 0);
                    self.reader
                        .read_exact(&mut self.value)
                        .map_err(|e| format!("reading a value: {e}"))?;
                    let key = Key::new(prefix, id, w.key_size);
                    if len != w.value_size || !value_matches(&self.value[..len], key.as_bytes()) {
                        c.bad_values += 1;
                    }
                    hit = true;
                } else {
                    // An error instead of the get's reply: count it as a miss.
                    c.get_errors += 1;
                    c.note(&self.line);
                    break;
                }
            }
            match (prefix == SCAN_PREFIX, hit) {
                (false, h) => {
                    c.zipf_gets += 1;
                    c.zipf_misses += u64::from(!h);
                }
                (true, h) => {
                    c.scan_gets += 1;
                    c.scan_misses += u64::from(!h);
                }
            }
            if !hit && !self.pending_sets.contains(&(prefix, id)) {
                self.pending_sets.push((prefix, id));
            }
        }
        Ok(())
    }

    /// Requests the keys `zipf` in order; from each trigger (a count of zipf
    /// requests issued) on, `scan_share` scan keys are owed and take every
    /// other slot of a batch until paid (all of it once the zipf requests
    /// are done). Ends with the last batch's misses stored.
    fn run_phase(
        &mut self,
        w: &Workload,
        zipf: &[u32],
        triggers: &[u64],
        scan_share: u64,
    ) -> Result<Counts, String> {
        let mut c = Counts::default();
        let zipf_target = zipf.len() as u64;
        let mut zipf_done = 0u64;
        let mut scan_owed = 0u64;
        let mut next_trigger = 0;
        while zipf_done < zipf_target || scan_owed > 0 {
            self.batch.clear();
            while self.batch.len() < w.batch {
                while next_trigger < triggers.len() && zipf_done >= triggers[next_trigger] {
                    scan_owed += scan_share;
                    next_trigger += 1;
                }
                let scan_turn =
                    scan_owed > 0 && (zipf_done >= zipf_target || self.batch.len() & 1 == 0);
                if scan_turn {
                    let id = self.scan_next * w.conns + self.index;
                    self.scan_next += 1;
                    scan_owed -= 1;
                    self.batch.push((SCAN_PREFIX, id));
                } else if zipf_done < zipf_target {
                    self.batch
                        .push((ZIPF_PREFIX, u64::from(zipf[zipf_done as usize])));
                    zipf_done += 1;
                } else {
                    break;
                }
            }
            self.exchange(w, &mut c)?;
        }
        // Store the last batch's misses.
        if !self.pending_sets.is_empty() {
            self.batch.clear();
            self.exchange(w, &mut c)?;
        }
        Ok(c)
    }
}

/// `total` split over `n` parts; part `i`.
fn share(total: u64, n: u64, i: u64) -> u64 {
    total * (i + 1) / n - total * i / n
}

/// Draws every connection's zipf stream (`warmup` then `requests` key ids,
/// split evenly over `conns`), one thread and one generator per connection
/// seeded from `seed`. Rank `r` of zipf(alpha) over `keys` is key `perm[r]`.
pub(crate) fn draw_streams(
    keys: u64,
    alpha: f64,
    seed: u64,
    conns: u64,
    warmup: u64,
    requests: u64,
) -> Result<(Vec<Vec<u32>>, Vec<usize>), String> {
    let perm = permutation(keys as u32, seed ^ 0x5EED_0F05_71AB_u64);
    let zipf = Zipf::new(keys, alpha).map_err(|e| format!("zipf({keys}, {alpha}): {e}"))?;
    let (perm, zipf) = (&perm, &zipf);
    let streams: Vec<Vec<u32>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..conns)
            .map(|i| {
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(
                        seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                    );
                    let len = share(warmup, conns, i) + share(requests, conns, i);
                    // Zipf samples ranks 1..=keys.
                    (0..len)
                        .map(|_| perm[zipf.sample(&mut rng) as usize - 1])
                        .collect::<Vec<u32>>()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("stream thread"))
            .collect()
    });
    let warmup_len = (0..conns)
        .map(|i| share(warmup, conns, i) as usize)
        .collect();
    Ok((streams, warmup_len))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Measured,
}

/// Runs one phase on every client in parallel; returns the summed counts
/// and the wall time. `scans` is `(scan_every, scan_len)`.
fn phase(
    clients: &mut [Client],
    w: &Workload,
    which: Phase,
    scans: Option<(u64, u64)>,
) -> Result<(Counts, f64), String> {
    let n = clients.len() as u64;
    let requests: u64 = (0..clients.len())
        .map(|i| match which {
            Phase::Warmup => w.warmup_len[i] as u64,
            Phase::Measured => (w.streams[i].len() - w.warmup_len[i]) as u64,
        })
        .sum();
    let start = Instant::now();
    let results: Vec<Result<Counts, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .map(|cl| {
                let i = cl.index;
                let (warm, measured) = w.streams[i as usize].split_at(w.warmup_len[i as usize]);
                let zipf = match which {
                    Phase::Warmup => warm,
                    Phase::Measured => measured,
                };
                let target = zipf.len() as u64;
                // Scan k starts after (k + 1/2) * scan_every zipf requests,
                // each connection paying its share at the same relative point.
                let (triggers, scan_share) = match scans {
                    Some((every, len)) if every > 0 && len > 0 => {
                        let every_c = every as f64 * target as f64 / requests.max(1) as f64;
                        let triggers: Vec<u64> = (0..)
                            .map(|k| ((k as f64 + 0.5) * every_c) as u64)
                            .take_while(|&t| t < target)
                            .collect();
                        (triggers, share(len, n, i))
                    }
                    _ => (Vec::new(), 0),
                };
                s.spawn(move || cl.run_phase(w, zipf, &triggers, scan_share))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("client thread panicked".into()))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut total = Counts::default();
    for r in results {
        total.add(&r?);
    }
    Ok((total, secs))
}

/// One (server, -m, variant) run.
#[derive(Debug)]
struct Row {
    kind: Kind,
    memory_mb: u64,
    variant: Variant,
    /// Server stats deltas over the measured phase.
    get_hits: u64,
    get_misses: u64,
    evictions: u64,
    /// Server evictions by the end of the warm-up: 0 means the cache was
    /// not yet full, so the measured phase was not its steady state.
    evictions_in_warmup: u64,
    curr_items_after_warmup: u64,
    curr_items: u64,
    client: Counts,
    warmup_client: Counts,
    warmup_secs: f64,
    measured_secs: f64,
}

impl Row {
    fn miss_ratio(&self) -> f64 {
        self.get_misses as f64 / (self.get_hits + self.get_misses).max(1) as f64
    }
    fn zipf_miss_ratio(&self) -> f64 {
        self.client.zipf_misses as f64 / self.client.zipf_gets.max(1) as f64
    }
}

fn run_one(
    bins: &Binaries,
    o: &HitRatioOpts,
    w: &Workload,
    kind: Kind,
    memory_mb: u64,
    variant: Variant,
) -> Result<Row, String> {
    let server = Server::start(bins, kind, memory_mb, o.threads)?;
    let mut ctrl = Conn::connect(server.addr())?;
    let mut clients = (0..o.conns as u64)
        .map(|i| Client::connect(server.addr(), i))
        .collect::<Result<Vec<_>, _>>()?;
    let tag = format!("{kind} -m {memory_mb} {}", variant.name());

    let (warmup_client, warmup_secs) = phase(&mut clients, w, Phase::Warmup, None)?;
    server.check_alive()?;
    let s0 = ctrl.stats()?;
    eprintln!(
        "hitratio: {tag}: warm-up {} requests in {warmup_secs:.1} s ({:.0} k req/s), {} items",
        o.warmup,
        o.warmup as f64 / warmup_secs / 1e3,
        stat_u64(&s0, "curr_items")?
    );
    let evictions_in_warmup = stat_u64(&s0, "evictions")?;
    if evictions_in_warmup == 0 {
        eprintln!(
            "hitratio: {tag}: WARNING: nothing was evicted during the warm-up, so the cache was not \
             full: the measured phase is not the cache's steady state (raise --warmup)"
        );
    }

    let scans = (variant == Variant::Scan).then_some((o.scan_every, o.scan_len));
    let (client, measured_secs) = phase(&mut clients, w, Phase::Measured, scans)?;
    server.check_alive()?;
    let s1 = ctrl.stats()?;
    let delta = |name: &str| -> Result<u64, String> {
        Ok(stat_u64(&s1, name)?.saturating_sub(stat_u64(&s0, name)?))
    };
    let row = Row {
        kind,
        memory_mb,
        variant,
        get_hits: delta("get_hits")?,
        get_misses: delta("get_misses")?,
        evictions: delta("evictions")?,
        evictions_in_warmup,
        curr_items_after_warmup: stat_u64(&s0, "curr_items")?,
        curr_items: stat_u64(&s1, "curr_items")?,
        client,
        warmup_client,
        warmup_secs,
        measured_secs,
    };
    eprintln!(
        "hitratio: {tag}: measured {} gets in {measured_secs:.1} s ({:.0} k req/s): miss ratio {:.4}",
        row.client.zipf_gets + row.client.scan_gets,
        (row.client.zipf_gets + row.client.scan_gets) as f64 / measured_secs / 1e3,
        row.miss_ratio()
    );
    Ok(row)
}

/// `osmium-bench hitratio`: returns false if a server returned wrong values
/// or errors.
pub(crate) fn run(bins: &Binaries, o: &HitRatioOpts) -> Result<bool, String> {
    if o.keys == 0 || o.keys > u64::from(u32::MAX) {
        return Err("--keys must be in 1..=4294967295".into());
    }
    if o.conns == 0 || o.batch == 0 {
        return Err("--conns and --batch must be at least 1".into());
    }
    check_key_size(o.key_size, o.keys)?;
    let scans_max = o
        .requests
        .checked_div(o.scan_every)
        .map_or(0, |n| (n + 1) * (o.scan_len + o.conns as u64));
    check_key_size(o.key_size, scans_max.max(1))?;
    let started = Instant::now();
    let t = Instant::now();
    let (streams, warmup_len) = draw_streams(
        o.keys,
        o.alpha,
        o.seed,
        o.conns as u64,
        o.warmup,
        o.requests,
    )?;
    eprintln!(
        "hitratio: drew {} zipf({}) requests over {} keys in {:.1} s",
        o.warmup + o.requests,
        o.alpha,
        o.keys,
        t.elapsed().as_secs_f64()
    );
    let w = Workload {
        streams,
        warmup_len,
        key_size: o.key_size,
        value_size: o.value_size,
        batch: o.batch,
        conns: o.conns as u64,
    };

    let mut rows = Vec::new();
    for &memory_mb in &o.memory_mb {
        for &variant in &o.variants {
            for &kind in &o.servers {
                rows.push(run_one(bins, o, &w, kind, memory_mb, variant)?);
            }
        }
    }
    let total_secs = started.elapsed().as_secs_f64();
    let ok = rows.iter().all(|r| {
        r.client.bad_values
            + r.client.get_errors
            + r.warmup_client.bad_values
            + r.warmup_client.get_errors
            == 0
    });
    let find = |kind: Kind, m: u64, v: Variant| {
        rows.iter()
            .find(|r| r.kind == kind && r.memory_mb == m && r.variant == v)
    };
    let mut ratios = Vec::new();
    for &m in &o.memory_mb {
        for &v in &o.variants {
            if let (Some(mc), Some(os)) = (find(Kind::Memcached, m, v), find(Kind::Osmium, m, v)) {
                ratios.push((
                    m,
                    v,
                    mc.miss_ratio(),
                    os.miss_ratio(),
                    os.miss_ratio() / mc.miss_ratio(),
                ));
            }
        }
    }

    if o.json {
        let out = json!({
            "benchmark": "hitratio",
            "keys": o.keys,
            "alpha": o.alpha,
            "key_size": o.key_size,
            "value_size": o.value_size,
            "warmup": o.warmup,
            "requests": o.requests,
            "scan_len": o.scan_len,
            "scan_every": o.scan_every,
            "conns": o.conns,
            "batch": o.batch,
            "seed": o.seed,
            "threads": o.threads,
            "total_seconds": total_secs,
            "rows": rows.iter().map(|r| json!({
                "server": r.kind.name(),
                "memory_mb": r.memory_mb,
                "variant": r.variant.name(),
                "miss_ratio": r.miss_ratio(),
                "zipf_miss_ratio_client": r.zipf_miss_ratio(),
                "get_hits": r.get_hits,
                "get_misses": r.get_misses,
                "evictions": r.evictions,
                "evictions_in_warmup": r.evictions_in_warmup,
                "curr_items_after_warmup": r.curr_items_after_warmup,
                "curr_items": r.curr_items,
                "zipf_gets": r.client.zipf_gets,
                "scan_gets": r.client.scan_gets,
                "scan_misses": r.client.scan_misses,
                "sets": r.client.sets,
                "set_errors": r.client.set_errors + r.warmup_client.set_errors,
                "get_errors": r.client.get_errors + r.warmup_client.get_errors,
                "bad_values": r.client.bad_values + r.warmup_client.bad_values,
                "warmup_seconds": r.warmup_secs,
                "measured_seconds": r.measured_secs,
            })).collect::<Vec<_>>(),
            "ratios": ratios.iter().map(|(m, v, mc, os, x)| json!({
                "memory_mb": m, "variant": v.name(), "memcached": mc, "osmium": os, "ratio": x,
            })).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(ok);
    }

    println!(
        "hit ratio, cache-aside: zipf({}) over {} keys, {} B keys, {} B values; warm-up {} + measured {} requests; {} conns x batch {}; -t {}",
        o.alpha, o.keys, o.key_size, o.value_size, o.warmup, o.requests, o.conns, o.batch, o.threads
    );
    if o.variants.contains(&Variant::Scan) {
        println!(
            "zipf+scan: a scan of {} one-time keys starts after every {} zipf requests (first after {}), in the measured phase only",
            o.scan_len,
            o.scan_every,
            o.scan_every / 2
        );
    }
    println!();
    println!(
        "{:<10} {:>5} {:<10} {:>10} {:>10} {:>11} {:>9} {:>10} {:>10} {:>8} {:>8}",
        "server",
        "-m",
        "variant",
        "miss ratio",
        "zipf miss",
        "gets",
        "scan gets",
        "evictions",
        "items",
        "warm s",
        "meas. s"
    );
    println!("{}", "-".repeat(112));
    for r in &rows {
        println!(
            "{:<10} {:>5} {:<10} {:>10.4} {:>10.4} {:>11} {:>9} {:>10} {:>10} {:>8.1} {:>8.1}",
            r.kind,
            r.memory_mb,
            r.variant.name(),
            r.miss_ratio(),
            r.zipf_miss_ratio(),
            r.get_hits + r.get_misses,
            r.client.scan_gets,
            r.evictions,
            r.curr_items,
            r.warmup_secs,
            r.measured_secs
        );
        let errors = r.client.set_errors + r.warmup_client.set_errors;
        let get_errors = r.client.get_errors + r.warmup_client.get_errors;
        let bad = r.client.bad_values + r.warmup_client.bad_values;
        if errors + get_errors + bad > 0 {
            let mut sample = r.warmup_client.sample.clone();
            sample.extend(r.client.sample.iter().cloned());
            println!("           {errors} set errors, {get_errors} get errors, {bad} wrong values; e.g. {sample:?}");
        }
    }
    if !ratios.is_empty() {
        println!();
        println!(
            "{:>5} {:<10} {:>10} {:>10} {:>16}",
            "-m", "variant", "memcached", "osmium", "osmium/memcached"
        );
        println!("{}", "-".repeat(55));
        for (m, v, mc, os, x) in &ratios {
            println!("{m:>5} {:<10} {mc:>10.4} {os:>10.4} {x:>16.3}", v.name());
        }
    }
    println!();
    println!("miss ratio: the server's get_misses / (get_hits + get_misses) over the measured phase (scan gets included);");
    println!("zipf miss: the client's count over the zipf requests only. total run time {total_secs:.0} s");
    Ok(ok)
}
