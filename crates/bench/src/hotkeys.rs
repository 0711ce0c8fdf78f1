//! `hotkeys`: how right osmium's hot-key report (`stats hotkeys`) is.
//!
//! Connections send pipelined text gets of keys drawn from zipf(`--zipf`)
//! over `--keys` keys (rank r is key id r - 1, so the true hottest are
//! known) and count what they send: per key of the first [`TRACKED`] ranks
//! (a key of a later rank is requested at most a tenth as often as the
//! tenth, never among the ten hottest), per 10 ms of wall-clock time.
//! After `--warmup` seconds of load (the report's window reaches back at
//! most 10 s), `stats hotkeys` is asked `--queries` times while the load
//! goes on. osmium's window is the current 5-second epoch of the wall
//! clock and the one before it, so each answer is compared with what was
//! sent over that same window: are the `--top` hottest reported the true
//! `--top` hottest, and is each reported rate within `--tolerance` of the
//! true rate? Only gets are sent (nothing is written, so `--addr` may
//! point at any server); misses count as reads in the report.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};

use osmium_protocol::client::encode;
use osmium_protocol::client::reply;

use crate::keys::Key;
use crate::servers::{Binaries, Kind, Server};

/// Ranks whose sends are counted per key.
const TRACKED: usize = 100;
/// Width of a count bucket, ms.
const BUCKET_MS: u64 = 10;
/// osmium's epoch (`hotkeys::EPOCH_MS`): the window is the current epoch
/// and the one before.
const EPOCH_MS: u64 = 5_000;

/// Hot-key report accuracy against a zipf load whose true rates are
/// known: are the reported hottest the true hottest, and each rate within
/// the tolerance? Starts osmium (or reads from --addr; nothing is written).
#[derive(clap::Args, Clone)]
pub struct HotkeysArgs {
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
    /// Gets per pipelined batch.
    #[arg(long, default_value_t = 32)]
    depth: usize,
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
    /// `-o hotkeys_sample=1/N` for the osmium started [default: osmium's].
    #[arg(long, value_name = "N")]
    sample: Option<u32>,
    /// Largest relative error of a rate that passes.
    #[arg(long, default_value_t = 0.10)]
    tolerance: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What one connection sent: per bucket (unix ms / BUCKET_MS), the sends
/// of each tracked rank.
struct Sent {
    buckets: Vec<(u64, Box<[u32; TRACKED]>)>,
    total: u64,
}

/// One connection: batches of `depth` gets until `stop`.
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
    let mut sent = Sent {
        buckets: Vec::new(),
        total: 0,
    };
    let mut out = Vec::with_capacity(a.depth * 64);
    let mut line = Vec::with_capacity(512);
    let mut skip = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        out.clear();
        let bucket = unix_ms() / BUCKET_MS;
        if sent.buckets.last().is_none_or(|b| b.0 != bucket) {
            sent.buckets.push((bucket, Box::new([0; TRACKED])));
        }
        let counts = &mut sent.buckets.last_mut().expect("a bucket").1;
        for _ in 0..a.depth {
            let id = (zipf.sample(&mut rng) as u64).clamp(1, a.keys) - 1;
            if (id as usize) < TRACKED {
                counts[id as usize] += 1;
            }
            encode::get(
                &mut out,
                b"get",
                [Key::prefixed(prefix, b'k', id, a.key_size)],
            );
        }
        writer
            .write_all(&out)
            .map_err(|e| format!("sending: {e}"))?;
        let mut ends = 0;
        while ends < a.depth {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| format!("reading: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            if reply::is_end(&line) {
                ends += 1;
            } else if line.starts_with(b"VALUE ") {
                // Skip the data and its \r\n.
                let (_, _, bytes, _) = reply::value_header(&line).ok_or("bad VALUE line")?;
                skip.resize(bytes + 2, 0);
                reader
                    .read_exact(&mut skip)
                    .map_err(|e| format!("reading: {e}"))?;
            } else {
                return Err(format!(
                    "unexpected reply {:?}",
                    String::from_utf8_lossy(&line).trim_end()
                ));
            }
        }
        sent.total += a.depth as u64;
        sent_total.fetch_add(a.depth as u64, Ordering::Relaxed);
    }
    Ok(sent)
}

/// A `stats hotkeys` answer: when (unix ms, the middle of the exchange)
/// and its rows (key as sent, reads/s).
struct Report {
    at: u64,
    rows: Vec<(Vec<u8>, f64)>,
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

fn query(addr: SocketAddr) -> Result<Report, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    let before = unix_ms();
    s.write_all(b"stats hotkeys\r\n")
        .map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    let mut rows = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("stats hotkeys: connection closed".into());
        }
        let line = line.trim_end();
        if line == "END" {
            break;
        }
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() != 7 || f[0] != "STAT" || f[1] != "hotkey" {
            return Err(format!("stats hotkeys: unexpected {line:?} (not osmium?)"));
        }
        let reads: f64 = f[4].parse().map_err(|_| format!("bad rate in {line:?}"))?;
        rows.push((uri_decode(f[3]), reads));
    }
    Ok(Report {
        at: (before + unix_ms()) / 2,
        rows,
    })
}

/// One query compared with the truth.
struct Compared {
    at_s: f64,
    window_s: f64,
    /// (key id or None, true reads/s, reported reads/s) of the reported
    /// top.
    rows: Vec<(Option<u64>, f64, f64)>,
    same_set: bool,
    max_error: f64,
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
    let epoch = report.at / EPOCH_MS;
    let from = (epoch.saturating_sub(1) * EPOCH_MS).max(since.unwrap_or(0));
    let window_s = (report.at - from) as f64 / 1000.0;
    let mut truth = [0u64; TRACKED];
    for s in sent {
        for (bucket, counts) in &s.buckets {
            let t = bucket * BUCKET_MS;
            if t >= from && t < report.at {
                for (sum, &c) in truth.iter_mut().zip(counts.iter()) {
                    *sum += u64::from(c);
                }
            }
        }
    }
    let rate = |id: u64| truth.get(id as usize).map_or(0.0, |&c| c as f64 / window_s);
    let mut true_top: Vec<u64> = (0..TRACKED as u64).collect();
    true_top.sort_by(|x, y| truth[*y as usize].cmp(&truth[*x as usize]));
    true_top.truncate(a.top);
    let prefix = a.key_prefix.as_bytes();
    let id_of = |key: &[u8]| -> Option<u64> {
        let rest = key.strip_prefix(prefix)?.strip_prefix(b"k")?;
        std::str::from_utf8(rest).ok()?.parse().ok()
    };
    let rows: Vec<(Option<u64>, f64, f64)> = report
        .rows
        .iter()
        .take(a.top)
        .map(|(key, reported)| {
            let id = id_of(key);
            (id, id.map_or(0.0, rate), *reported)
        })
        .collect();
    let mut reported_ids: Vec<u64> = rows.iter().filter_map(|r| r.0).collect();
    reported_ids.sort_unstable();
    let mut true_ids = true_top.clone();
    true_ids.sort_unstable();
    let max_error = rows
        .iter()
        .map(|&(_, t, r)| {
            if t > 0.0 {
                (r - t).abs() / t
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max);
    Compared {
        at_s: report.at.saturating_sub(load_from) as f64 / 1000.0,
        window_s,
        same_set: rows.len() == a.top && reported_ids == true_ids,
        rows,
        max_error,
    }
}

pub fn run(a: &HotkeysArgs) -> Result<bool, String> {
    let mut server = None;
    let mut since = None;
    let addr = match a.addr {
        Some(addr) => addr,
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
    let gets = total.load(Ordering::Relaxed);
    let compared: Vec<Compared> = reports
        .iter()
        .map(|r| compare(a, r, &sent, since, load_from))
        .collect();
    let pass = |c: &Compared| c.same_set && c.max_error <= a.tolerance;
    let all = compared.iter().all(pass);
    let sample = a
        .sample
        .map_or("osmium's default".to_string(), |n| format!("1/{n}"));
    if a.common.json {
        let rows: Vec<serde_json::Value> = compared
            .iter()
            .map(|c| {
                serde_json::json!({
                    "at_s": c.at_s,
                    "window_s": c.window_s,
                    "same_top_set": c.same_set,
                    "max_rate_error": c.max_error,
                    "keys": c.rows.iter().map(|&(id, t, r)| serde_json::json!({
                        "rank": id.map(|i| i + 1), "true_reads_per_s": t, "reported_reads_per_s": r
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let out = serde_json::json!({
            "keys": a.keys, "zipf": a.zipf, "gets_per_s": gets as f64 / elapsed,
            "sample": sample, "top": a.top, "tolerance": a.tolerance, "pass": all,
            "queries": rows,
        });
        println!("{out}");
        return Ok(all);
    }
    println!(
        "hot keys: zipf({}) over {} keys, {} conns x depth {}, {:.0} gets/s, sampling {}",
        a.zipf,
        a.keys,
        a.conns,
        a.depth,
        gets as f64 / elapsed,
        sample
    );
    for (i, c) in compared.iter().enumerate() {
        println!(
            "query {} at {:.1} s (window {:.2} s): top-{} set {}, max rate error {:.1} % {}",
            i + 1,
            c.at_s,
            c.window_s,
            a.top,
            if c.same_set { "right" } else { "WRONG" },
            c.max_error * 100.0,
            if pass(c) { "PASS" } else { "FAIL" }
        );
        println!(
            "  {:>5} {:>12} {:>12} {:>8}",
            "rank", "true/s", "reported/s", "error"
        );
        for &(id, t, r) in &c.rows {
            let rank = id.map_or("-".to_string(), |i| (i + 1).to_string());
            let err = if t > 0.0 {
                (r - t) / t * 100.0
            } else {
                f64::INFINITY
            };
            println!("  {rank:>5} {t:>12.1} {r:>12.1} {err:>+7.1}%");
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
}
