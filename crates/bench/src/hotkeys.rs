//! `hotkeys`: how right osmium's hot-key report (`stats hotkeys`) is.
//!
//! Connections send text gets, and with `--writes` sets, of keys drawn
//! from zipf(`--zipf`) over `--keys` keys (rank r is key id r - 1, so the
//! true hottest are known): pipelined batches of `--depth` as fast as the
//! server answers, or with `--rate` open loop at that many requests a
//! second in all (each connection sends what is due, up to `--depth` at
//! once, then sleeps until the next is). Each connection counts what it
//! sends, reads and writes apart, per key of the first [`TRACKED`] ranks
//! (a key of a later rank is requested at most a tenth as often as the
//! tenth, never among the ten hottest), per millisecond of wall-clock
//! time. After `--warmup` seconds of load (the report's window reaches
//! back at most 10 s), `stats hotkeys` is asked `--queries` times while
//! the load goes on, and each answer is compared with what was sent over
//! the window it states (`hotkeys_window`, Unix ms; the current 5-second
//! epoch of the wall clock and the one before it for a server that does
//! not state it).
//!
//! **The true top N** of a window is the N keys with the most requests
//! (reads + writes) sent in it. A report passes when each rate it gives
//! (reads/s and writes/s of each of its N keys) is within `--tolerance` of
//! the key's true rate over the window, and its N keys are the true top N
//! up to near-ties: no key left out was sent more than `1 / (1 -
//! tolerance)` times as often as a key reported, i.e. a key may stand in
//! for another whose true rate is within the tolerance of its own (rates
//! that close may come out in either order with every rate within the
//! tolerance). Whether the set is exactly the true top N is printed too.
//! Misses count as reads in the report, as osmium counts them.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

use osmium_protocol::client::encode;
use osmium_protocol::client::reply;

use crate::keys::Key;
use crate::servers::{Binaries, Kind, Server};

/// Ranks whose sends are counted per key.
const TRACKED: usize = 100;
/// Width of a count bucket, ms.
const BUCKET_MS: u64 = 1;
/// osmium's epoch (`hotkeys::EPOCH_MS`): without a stated window, the
/// window is the current epoch and the one before.
const EPOCH_MS: u64 = 5_000;

/// Hot-key report accuracy against a zipf load whose true rates are
/// known: are the reported hottest the true hottest (up to near-ties), and
/// each read and write rate within the tolerance? Starts osmium (or reads
/// from --addr: gets only unless --writes).
#[derive(clap::Args, Clone)]
pub(crate) struct HotkeysArgs {
    #[command(flatten)]
    common: crate::Common,
    /// A running server instead of starting osmium.
    #[arg(long, value_name = "HOST:PORT")]
    addr: Option<SocketAddr>,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Client connections, one thread each.
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// Requests per pipelined batch (with --rate: the most sent at once).
    #[arg(long, default_value_t = 32)]
    depth: usize,
    /// Keys per get request (`get k1 k2 ...`): each key is a get, as
    /// memcached counts them (`cmd_get`), so one request looks up this
    /// many keys. More gets a second from the same client CPU.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    keys_per_get: u32,
    /// Open loop at this many requests a second in all (gets and sets),
    /// shared by the connections [default: closed loop, as fast as the
    /// server answers].
    #[arg(long, value_name = "REQ/S")]
    rate: Option<f64>,
    /// Share of the requests that are sets (of --value-size bytes) of the
    /// key drawn, the rest gets.
    #[arg(long, default_value_t = 0.0)]
    writes: f64,
    /// Value bytes of a set.
    #[arg(long, default_value_t = 64)]
    value_size: usize,
    /// Seconds of load before the first query.
    #[arg(long, default_value_t = 11.0)]
    warmup: f64,
    /// Queries of `stats hotkeys` during the load.
    #[arg(long, default_value_t = 3)]
    queries: usize,
    /// Seconds between queries.
    #[arg(long, default_value_t = 2.0)]
    every: f64,
    /// Hottest keys compared.
    #[arg(long, default_value_t = 10)]
    top: usize,
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    /// Put before every key.
    #[arg(long, default_value = crate::foreign::DEFAULT_KEY_PREFIX)]
    key_prefix: String,
    /// `-o hotkeys_sample=1/N` for the osmium started [default: osmium's,
    /// adaptive].
    #[arg(long, value_name = "N")]
    sample: Option<u32>,
    /// Largest relative error of a rate that passes (and the near-tie
    /// margin of the top set).
    #[arg(long, default_value_t = 0.10)]
    tolerance: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// With --addr and --writes: write without asking (the warning is
    /// still printed).
    #[arg(long)]
    yes: bool,
}

/// The one-minute load average (`/proc/loadavg`), to print beside the
/// figures: the machine may be shared.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Per tracked rank: (reads, writes).
type Counts = [[u32; 2]; TRACKED];

/// What one connection sent: per bucket (unix ms / BUCKET_MS), the reads
/// and writes of each tracked rank; and its gets and sets in all.
struct Sent {
    buckets: Vec<(u64, Box<Counts>)>,
    gets: u64,
    sets: u64,
}

/// One connection: batches of up to `depth` requests until `stop`.
fn generate(
    addr: SocketAddr,
    a: &HotkeysArgs,
    thread: u64,
    stop: &AtomicBool,
    sent_total: &AtomicU64,
) -> Result<Sent, String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream.set_nodelay(true).ok();
    let mut reader =
        BufReader::with_capacity(1 << 16, stream.try_clone().map_err(|e| e.to_string())?);
    let mut writer = stream;
    let zipf = Zipf::new(a.keys, a.zipf).map_err(|e| format!("zipf: {e}"))?;
    let mut rng = SmallRng::seed_from_u64(a.seed ^ (thread << 32) ^ 0x5eed);
    let prefix = a.key_prefix.as_bytes();
    let value = vec![b'v'; a.value_size];
    let mut sent = Sent {
        buckets: Vec::new(),
        gets: 0,
        sets: 0,
    };
    let per_conn = a.rate.map(|r| r / a.conns.max(1) as f64);
    let started = Instant::now();
    let mut out = Vec::with_capacity(a.depth * (64 + a.value_size));
    let mut writes = Vec::with_capacity(a.depth);
    let mut line = Vec::with_capacity(512);
    let mut skip = Vec::new();
    let mut keys = Vec::with_capacity(a.keys_per_get as usize);
    while !stop.load(Ordering::Relaxed) {
        let n = match per_conn {
            None => a.depth.max(1),
            Some(rate) => {
                let sent_so_far = sent.gets + sent.sets;
                let due = (started.elapsed().as_secs_f64() * rate) as u64;
                if due <= sent_so_far {
                    // Sleep until the next is due (at most 20 ms: `stop`).
                    let next = Duration::from_secs_f64((sent_so_far + 1) as f64 / rate);
                    let nap = next.saturating_sub(started.elapsed());
                    std::thread::sleep(nap.min(Duration::from_millis(20)));
                    continue;
                }
                ((due - sent_so_far) as usize)
                    .div_ceil(a.keys_per_get as usize)
                    .min(a.depth.max(1))
            }
        };
        out.clear();
        writes.clear();
        let bucket = unix_ms() / BUCKET_MS;
        if sent.buckets.last().is_none_or(|b| b.0 != bucket) {
            sent.buckets.push((bucket, Box::new([[0; 2]; TRACKED])));
        }
        let counts = &mut sent.buckets.last_mut().expect("a bucket").1;
        let mut gets = 0u64;
        let mut sets = 0u64;
        for _ in 0..n {
            let write = a.writes > 0.0 && rng.gen_bool(a.writes.min(1.0));
            let keys_here = if write { 1 } else { a.keys_per_get };
            keys.clear();
            for _ in 0..keys_here {
                let id = (zipf.sample(&mut rng) as u64).clamp(1, a.keys) - 1;
                if (id as usize) < TRACKED {
                    counts[id as usize][usize::from(write)] += 1;
                }
                keys.push(Key::prefixed(prefix, b'k', id, a.key_size));
            }
            if write {
                encode::set(&mut out, keys[0].as_bytes(), 0, 0, &value, false);
                sets += 1;
            } else {
                encode::get(&mut out, b"get", keys.iter().map(|k| k.as_bytes()));
                gets += u64::from(keys_here);
            }
            writes.push(write);
        }
        writer
            .write_all(&out)
            .map_err(|e| format!("sending: {e}"))?;
        for &write in &writes {
            read_reply(&mut reader, write, &mut line, &mut skip)?;
        }
        sent.sets += sets;
        sent.gets += gets;
        sent_total.fetch_add(gets + sets, Ordering::Relaxed);
    }
    Ok(sent)
}

/// Reads the reply to one get (`VALUE`s then `END`) or set (one line).
fn read_reply(
    reader: &mut BufReader<TcpStream>,
    write: bool,
    line: &mut Vec<u8>,
    skip: &mut Vec<u8>,
) -> Result<(), String> {
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', line)
            .map_err(|e| format!("reading: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        if write {
            // STORED, or an error the server had (still a write sent).
            return match line.as_slice() {
                b"STORED\r\n" => Ok(()),
                l if l.starts_with(b"SERVER_ERROR") => Ok(()),
                l => Err(format!(
                    "unexpected reply to a set {:?}",
                    String::from_utf8_lossy(l).trim_end()
                )),
            };
        }
        if reply::is_end(line) {
            return Ok(());
        }
        if line.starts_with(b"VALUE ") {
            // Skip the data and its \r\n.
            let (_, _, bytes, _) = reply::value_header(line).ok_or("bad VALUE line")?;
            skip.resize(bytes + 2, 0);
            reader
                .read_exact(skip)
                .map_err(|e| format!("reading: {e}"))?;
        } else {
            return Err(format!(
                "unexpected reply {:?}",
                String::from_utf8_lossy(line).trim_end()
            ));
        }
    }
}

/// A `stats hotkeys` answer: when (unix ms, the middle of the exchange),
/// its rows (key as sent, reads/s, writes/s), and what it says of its
/// window and sampling.
struct Report {
    at: u64,
    rows: Vec<(Vec<u8>, f64, f64)>,
    /// `hotkeys_window`: from and to, Unix ms.
    window: Option<(u64, u64)>,
    /// `hotkeys_sampled`: samples, requests.
    sampled: Option<(u64, u64)>,
}

/// memcached's URI encoding undone.
fn uri_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 3 <= b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Parses a `stats hotkeys` line into `report` (an error for a line that
/// is not osmium's).
fn parse_line(line: &str, report: &mut Report) -> Result<(), String> {
    let f: Vec<&str> = line.split(' ').collect();
    let pair =
        |f: &[&str]| -> Option<(u64, u64)> { Some((f[2].parse().ok()?, f[3].parse().ok()?)) };
    match f.as_slice() {
        ["STAT", "hotkey", _, key, reads, writes, _] => {
            let rate = |v: &str| {
                v.parse::<f64>()
                    .map_err(|_| format!("bad rate in {line:?}"))
            };
            report
                .rows
                .push((uri_decode(key), rate(reads)?, rate(writes)?));
        }
        ["STAT", "hotkeys_window", _, _] => report.window = pair(&f),
        ["STAT", "hotkeys_sampled", _, _] => report.sampled = pair(&f),
        _ => return Err(format!("stats hotkeys: unexpected {line:?} (not osmium?)")),
    }
    Ok(())
}

fn query(addr: SocketAddr) -> Result<Report, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    let before = unix_ms();
    s.write_all(b"stats hotkeys\r\n")
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut report = Report {
        at: 0,
        rows: Vec::new(),
        window: None,
        sampled: None,
    };
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("stats hotkeys: connection closed".into());
        }
        let line = line.trim_end();
        if line == "END" {
            break;
        }
        parse_line(line, &mut report)?;
    }
    report.at = (before + unix_ms()) / 2;
    Ok(report)
}

/// One reported key against the truth: rates per second.
struct Row {
    /// Key id (rank - 1), None for a key the bench did not send.
    id: Option<u64>,
    true_reads: f64,
    true_writes: f64,
    reads: f64,
    writes: f64,
}

impl Row {
    /// The larger relative error of its two rates (0 for a rate of 0
    /// reported as 0).
    fn error(&self) -> f64 {
        rate_error(self.reads, self.true_reads).max(rate_error(self.writes, self.true_writes))
    }
}

fn rate_error(reported: f64, truth: f64) -> f64 {
    if truth > 0.0 {
        (reported - truth).abs() / truth
    } else if reported == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// One query compared with the truth.
struct Compared {
    at_s: f64,
    window_s: f64,
    rows: Vec<Row>,
    /// The reported N are exactly the true top N.
    exact_set: bool,
    /// ... or are up to near-ties.
    set_ok: bool,
    max_error: f64,
    /// Requests per sample over the window, as the server says.
    sampled_one_in: Option<f64>,
}

/// Whether the reported top set is right up to near-ties: `reported` (true
/// requests of each reported key) against `left_out` (those of every
/// tracked key not reported): no key left out was sent more than 1 / (1 -
/// tolerance) times as often as one reported.
fn top_set_holds(reported: &[u64], left_out: &[u64], tolerance: f64) -> bool {
    let least_in = reported.iter().copied().min().unwrap_or(0) as f64;
    let most_out = left_out.iter().copied().max().unwrap_or(0) as f64;
    least_in >= (1.0 - tolerance) * most_out
}

/// `since`: when the server started, when this tool started it (its
/// window begins no earlier).
fn compare(
    a: &HotkeysArgs,
    report: &Report,
    sent: &[Sent],
    since: Option<u64>,
    load_from: u64,
) -> Compared {
    let (from, to) = report.window.unwrap_or_else(|| {
        let epoch = report.at / EPOCH_MS;
        let from = (epoch.saturating_sub(1) * EPOCH_MS).max(since.unwrap_or(0));
        (from, report.at)
    });
    // The server's rates are per this, at least a second.
    let window_s = (to.saturating_sub(from) as f64 / 1000.0).max(1.0);
    let mut truth = [[0u64; 2]; TRACKED];
    for s in sent {
        for (bucket, counts) in &s.buckets {
            let t = bucket * BUCKET_MS;
            if t >= from && t < to {
                for (sum, c) in truth.iter_mut().zip(counts.iter()) {
                    sum[0] += u64::from(c[0]);
                    sum[1] += u64::from(c[1]);
                }
            }
        }
    }
    let total = |id: usize| truth[id][0] + truth[id][1];
    let prefix = a.key_prefix.as_bytes();
    let id_of = |key: &[u8]| -> Option<u64> {
        let rest = key.strip_prefix(prefix)?.strip_prefix(b"k")?;
        std::str::from_utf8(rest).ok()?.parse().ok()
    };
    let rows: Vec<Row> = report
        .rows
        .iter()
        .take(a.top)
        .map(|(key, reads, writes)| {
            let id = id_of(key);
            let t = id
                .filter(|&i| (i as usize) < TRACKED)
                .map_or([0, 0], |i| truth[i as usize]);
            Row {
                id,
                true_reads: t[0] as f64 / window_s,
                true_writes: t[1] as f64 / window_s,
                reads: *reads,
                writes: *writes,
            }
        })
        .collect();
    let mut true_top: Vec<usize> = (0..TRACKED).collect();
    true_top.sort_by_key(|&i| std::cmp::Reverse(total(i)));
    true_top.truncate(a.top);
    true_top.sort_unstable();
    let mut reported_ids: Vec<usize> = rows
        .iter()
        .filter_map(|r| r.id)
        .filter(|&i| (i as usize) < TRACKED)
        .map(|i| i as usize)
        .collect();
    reported_ids.sort_unstable();
    let complete = rows.len() == a.top && reported_ids.len() == a.top;
    let reported_counts: Vec<u64> = rows
        .iter()
        .map(|r| {
            r.id.filter(|&i| (i as usize) < TRACKED)
                .map_or(0, |i| total(i as usize))
        })
        .collect();
    let left_out: Vec<u64> = (0..TRACKED)
        .filter(|i| reported_ids.binary_search(i).is_err())
        .map(total)
        .collect();
    Compared {
        at_s: report.at.saturating_sub(load_from) as f64 / 1000.0,
        window_s,
        exact_set: complete && reported_ids == true_top,
        set_ok: complete && top_set_holds(&reported_counts, &left_out, a.tolerance),
        max_error: rows.iter().map(Row::error).fold(0.0, f64::max),
        rows,
        sampled_one_in: report
            .sampled
            .filter(|s| s.0 > 0)
            .map(|(samples, requests)| requests as f64 / samples as f64),
    }
}

pub(crate) fn run(a: &HotkeysArgs) -> Result<bool, String> {
    let mut server = None;
    let mut since = None;
    if !(0.0..=1.0).contains(&a.writes) {
        return Err("--writes: a share of the requests, 0 to 1".into());
    }
    if a.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        return Err("--rate: requests a second, more than 0".into());
    }
    let addr = match a.addr {
        Some(addr) => {
            if a.writes > 0.0 {
                let foreign = crate::foreign::ForeignArgs {
                    key_prefix: Some(a.key_prefix.clone()),
                    yes: a.yes,
                };
                foreign.confirm(&addr.to_string(), a.keys, a.key_prefix.as_bytes())?;
            }
            addr
        }
        None => {
            let bins = Binaries::resolve(a.common.osmium.clone(), a.common.memcached.clone());
            bins.check(Kind::Osmium)?;
            let mut extra = Vec::new();
            if let Some(n) = a.sample {
                extra.extend(["-o".to_string(), format!("hotkeys_sample=1/{n}")]);
            }
            since = Some(unix_ms());
            let s = Server::start_with(&bins, Kind::Osmium, 64, a.common.threads, &extra)?;
            let addr = s.addr();
            server = Some(s);
            addr
        }
    };
    if Key::prefixed(a.key_prefix.as_bytes(), b'k', 0, a.key_size)
        .as_bytes()
        .len()
        != a.key_prefix.len() + a.key_size
    {
        return Err("--key-prefix and --key-size make keys over 250 bytes".into());
    }
    crate::keys::check_key_size(a.key_size, a.keys)?;
    let load_avg = load_average();
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let load_from = unix_ms();
    let workers: Vec<_> = (0..a.conns.max(1))
        .map(|t| {
            let (stop, total) = (stop.clone(), total.clone());
            let args = a.clone();
            std::thread::spawn(move || generate(addr, &args, t as u64, &stop, &total))
        })
        .collect();
    let mut reports = Vec::new();
    let mut failure = None;
    for q in 0..a.queries.max(1) {
        let at = Duration::from_secs_f64(a.warmup.max(0.0) + q as f64 * a.every.max(0.0));
        while start.elapsed() < at {
            if workers.iter().any(|w| w.is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        match query(addr) {
            Ok(r) => reports.push(r),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut sent = Vec::new();
    for w in workers {
        sent.push(w.join().map_err(|_| "a generator panicked".to_string())??);
    }
    if let Some(e) = failure {
        return Err(e);
    }
    if let Some(s) = &server {
        s.check_alive()?;
    }
    let load_after = load_average();
    let gets: u64 = sent.iter().map(|s| s.gets).sum();
    let sets: u64 = sent.iter().map(|s| s.sets).sum();
    let compared: Vec<Compared> = reports
        .iter()
        .map(|r| compare(a, r, &sent, since, load_from))
        .collect();
    let pass = |c: &Compared| c.set_ok && c.max_error <= a.tolerance;
    let all = compared.iter().all(pass);
    let sample = a
        .sample
        .map_or("osmium's default".to_string(), |n| format!("1/{n}"));
    let rate = |n: u64| n as f64 / elapsed;
    if a.common.json {
        let rows: Vec<serde_json::Value> = compared
            .iter()
            .map(|c| {
                serde_json::json!({
                    "at_s": c.at_s,
                    "window_s": c.window_s,
                    "exact_top_set": c.exact_set,
                    "top_set_right": c.set_ok,
                    "max_rate_error": c.max_error,
                    "requests_per_sample": c.sampled_one_in,
                    "keys": c.rows.iter().map(|r| serde_json::json!({
                        "rank": r.id.map(|i| i + 1),
                        "true_reads_per_s": r.true_reads, "reported_reads_per_s": r.reads,
                        "true_writes_per_s": r.true_writes, "reported_writes_per_s": r.writes,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let out = serde_json::json!({
            "keys": a.keys, "zipf": a.zipf, "gets_per_s": rate(gets), "sets_per_s": rate(sets),
            "rate": a.rate, "sample": sample, "top": a.top, "tolerance": a.tolerance,
            "load_average": [load_avg, load_after], "pass": all, "queries": rows,
        });
        println!("{out}");
        return Ok(all);
    }
    let pacing = a.rate.map_or("closed loop".to_string(), |r| {
        format!("open loop at {r:.0} req/s")
    });
    println!(
        "hot keys: zipf({}) over {} keys, {} conns x depth {} x {} keys per get, {pacing}: {:.0} gets/s + {:.0} sets/s, \
         sampling {sample}, load average {} -> {}",
        a.zipf,
        a.keys,
        a.conns,
        a.depth,
        a.keys_per_get,
        rate(gets),
        rate(sets),
        load_avg.map_or("-".into(), |l| format!("{l:.2}")),
        load_after.map_or("-".into(), |l| format!("{l:.2}")),
    );
    for (i, c) in compared.iter().enumerate() {
        let set = match (c.exact_set, c.set_ok) {
            (true, _) => "right",
            (false, true) => "right up to near-ties",
            (false, false) => "WRONG",
        };
        println!(
            "query {} at {:.1} s (window {:.2} s, {}): top-{} set {set}, max rate error {:.1} % {}",
            i + 1,
            c.at_s,
            c.window_s,
            c.sampled_one_in.map_or("sampling not stated".into(), |n| {
                if n <= 1.0 {
                    "every request counted".to_string()
                } else {
                    format!("1 request in {n:.1} sampled")
                }
            }),
            a.top,
            c.max_error * 100.0,
            if pass(c) { "PASS" } else { "FAIL" }
        );
        println!(
            "  {:>5} {:>12} {:>12} {:>8} {:>12} {:>12} {:>8}",
            "rank", "reads/s", "reported", "error", "writes/s", "reported", "error"
        );
        for r in &c.rows {
            let rank = r.id.map_or("-".to_string(), |i| (i + 1).to_string());
            let err = |rep: f64, t: f64| {
                if t > 0.0 {
                    format!("{:+.1}%", (rep - t) / t * 100.0)
                } else if rep == 0.0 {
                    "-".to_string()
                } else {
                    "inf".to_string()
                }
            };
            println!(
                "  {rank:>5} {:>12.2} {:>12.2} {:>8} {:>12.2} {:>12.2} {:>8}",
                r.true_reads,
                r.reads,
                err(r.reads, r.true_reads),
                r.true_writes,
                r.writes,
                err(r.writes, r.true_writes)
            );
        }
    }
    println!(
        "{} of {} queries within {:.0} % with the right top {}",
        compared.iter().filter(|c| pass(c)).count(),
        compared.len(),
        a.tolerance * 100.0,
        a.top
    );
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_decoding() {
        assert_eq!(uri_decode("osmium-bench%3Ak01"), b"osmium-bench:k01");
        assert_eq!(uri_decode("a%20b%FF%"), b"a b\xff%");
        assert_eq!(uri_decode("%4"), b"%4");
    }

    #[test]
    fn near_ties_may_stand_in_for_each_other() {
        // The 10th and 11th within 10 % of each other: either may be in.
        assert!(top_set_holds(&[100, 50, 20], &[21, 5], 0.10));
        assert!(top_set_holds(&[100, 50, 21], &[20, 5], 0.10));
        // Exact ties.
        assert!(top_set_holds(&[9, 7, 7], &[7, 7, 3], 0.0));
        // A key left out sent clearly more than one reported: wrong.
        assert!(!top_set_holds(&[100, 50, 20], &[25, 5], 0.10));
        assert!(!top_set_holds(&[100, 50, 20], &[200], 0.10));
        // Nothing left out.
        assert!(top_set_holds(&[3, 2, 1], &[], 0.1));
    }

    #[test]
    fn rate_errors() {
        assert_eq!(rate_error(110.0, 100.0), 0.1);
        assert_eq!(rate_error(0.0, 0.0), 0.0);
        assert_eq!(rate_error(1.0, 0.0), f64::INFINITY);
        assert_eq!(rate_error(0.0, 10.8), 1.0);
    }

    #[test]
    fn reports_are_parsed_with_their_window() {
        let mut r = Report {
            at: 0,
            rows: Vec::new(),
            window: None,
            sampled: None,
        };
        for line in [
            "STAT hotkey 1 osmium-bench%3Ak01 43.25 10.80 3456.00",
            "STAT hotkeys_window 1000 8500",
            "STAT hotkeys_sampled 10 20",
        ] {
            parse_line(line, &mut r).unwrap();
        }
        assert_eq!(r.rows, [(b"osmium-bench:k01".to_vec(), 43.25, 10.8)]);
        assert_eq!((r.window, r.sampled), (Some((1000, 8500)), Some((10, 20))));
        assert!(parse_line("STAT pid 1", &mut r).is_err());
        assert!(parse_line("STAT hotkey 1 k x 0 0", &mut r).is_err());
    }
}
