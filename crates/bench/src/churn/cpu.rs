//! `churn` mode (c), server CPU per SET and per GET while cleaning runs:
//! the keys of (a) loaded (value sizes capped, `--max-value-c`), a churn
//! warm-up so the engine is in its steady churning state, then per depth
//! of `--depths` a SET phase (`--set-conns` connections churning their key
//! partitions: overwrites with new sizes and deletes) and a GET phase
//! (`--get-conns` connections getting random keys of `--get-keys-c` live
//! keys written again just before it (0: of every live key), while one
//! more connection overwrites random live keys at
//! `--background-set-rate`, paced, so cleaning keeps running; reading keys
//! just written, a build that evicts live keys is measured on hits too). Per phase: ops/s, server CPU per op (the
//! /proc CPU delta ÷ ops; in the GET phase ÷ (gets + background sets)) and
//! latency percentiles (per request, from its batch's write to its reply).
//! Medians over rounds, and each figure's ratio to the first server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::partition::{self, histogram, ChurnCfg, ChurnCounts, Partition};
use super::stats::{self, Stats};
use super::wire::{Client, Errors, Reply};
use super::{check_value, cmdlines_json, key_len, print_cmdlines, write_hash, Env, SizeMix};
use crate::conn::Conn;
use crate::flash::{fmt_opt, json_f64};
use crate::servers::Kind;
use crate::{median, mib};

pub(crate) struct Opts {
    pub memory_mb: u64,
    /// Pace of the load, MB/s of values (0: unpaced).
    pub load_mbps: f64,
    pub keys: Option<u64>,
    /// The (a) mix, capped.
    pub mix: SizeMix,
    pub delete_ratio: f64,
    pub warmup: f64,
    pub depths: Vec<usize>,
    pub phase_seconds: f64,
    pub set_conns: usize,
    pub get_conns: usize,
    pub background_rate: f64,
    /// Keys the GET phase reads: this many live keys, written again just
    /// before it (so a server that lost live keys to eviction is measured
    /// on hits as well); 0: every live key.
    pub get_keys: usize,
}

/// Keys whose live data is 70 % of `-m` at the mix's mean value, the key
/// and 50 B: the cache is full once overwrites leave dead copies.
pub(crate) fn default_keys(memory_mb: u64, mix: &SizeMix) -> u64 {
    let per_item = mix.mean() + key_len(1_000_000) as f64 + 50.0;
    (0.7 * (memory_mb << 20) as f64 / per_item).round() as u64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Set,
    Get,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Set => "SET",
            Phase::Get => "GET",
        }
    }
}

/// One measured phase.
#[derive(Clone, Debug)]
struct Measure {
    phase: Phase,
    depth: usize,
    /// SET: sets + deletes; GET: gets.
    ops: u64,
    /// GET: the background connection's sets.
    background: u64,
    secs: f64,
    cpu_secs: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    /// GET: misses, and hits with bytes that are not a value of the key.
    misses: u64,
    wrong: u64,
    errors: Errors,
}

impl Measure {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }

    fn cpu_us_per_op(&self) -> f64 {
        self.cpu_secs * 1e6 / (self.ops + self.background).max(1) as f64
    }

    fn figures(&self) -> [f64; 5] {
        [
            self.ops_per_sec(),
            self.cpu_us_per_op(),
            self.p50_us,
            self.p99_us,
            self.p999_us,
        ]
    }
}

const FIGURES: [&str; 5] = [
    "ops_per_sec",
    "cpu_us_per_op",
    "p50_us",
    "p99_us",
    "p999_us",
];

fn percentiles(h: &Histogram<u64>) -> (f64, f64, f64) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    (us(0.5), us(0.99), us(0.999))
}

/// One GET connection until `until`: `depth` gets of random `ids` per
/// batch; (gets, misses, wrong, errors, latency).
fn get_worker(
    addr: SocketAddr,
    ids: &[u64],
    depth: usize,
    until: Instant,
    seed: u64,
) -> Result<(u64, u64, u64, Errors, Histogram<u64>), String> {
    let mut c = Client::connect(addr)?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut hist = histogram();
    let (mut gets, mut misses, mut wrong, mut errors) = (0, 0, 0, Errors::default());
    let mut batch = Vec::with_capacity(depth);
    while Instant::now() < until && !ids.is_empty() {
        batch.clear();
        for _ in 0..depth {
            let id = ids[rng.gen_range(0..ids.len())];
            c.get(id);
            batch.push(id);
        }
        let sent = Instant::now();
        c.flush()?;
        for &id in &batch {
            let r = c.read_get()?;
            hist.saturating_record((sent.elapsed().as_nanos() as u64).max(1));
            gets += 1;
            match r {
                Reply::Hit => wrong += u64::from(check_value(id, &c.value).is_none()),
                Reply::Miss => misses += 1,
                other => errors.note(format!("get: {other:?}")),
            }
        }
    }
    Ok((gets, misses, wrong, errors, hist))
}

/// Writes every key of `ids` once more (pipelined, new sizes from `mix`),
/// before a GET phase reads them.
fn rewrite(addr: SocketAddr, ids: &[u64], mix: &SizeMix, seed: u64) -> Result<(), String> {
    let mut c = Client::connect(addr)?;
    // Versions of their own (the top two bits), as the background writer.
    let mut version = 0xC000_0000u32;
    for chunk in ids.chunks(64) {
        for &id in chunk {
            version = version.wrapping_add(1) | 0xC000_0000;
            c.set(id, version, mix.draw(write_hash(seed, id, version)));
        }
        c.flush()?;
        for _ in chunk {
            if let r @ Reply::Error(_) = c.read_store()? {
                return Err(format!("rewrite before the GET phase: {r:?}"));
            }
        }
    }
    Ok(())
}

/// The background writer of the GET phase: overwrites of random `ids`
/// (new sizes from `mix`) at `rate` per second until `stop`; (sets, errors).
fn background(
    addr: SocketAddr,
    ids: &[u64],
    mix: &SizeMix,
    rate: f64,
    stop: &AtomicBool,
    seed: u64,
) -> Result<(u64, Errors), String> {
    let mut c = Client::connect(addr)?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut errors = Errors::default();
    let (start, mut done) = (Instant::now(), 0u64);
    // Versions of their own (high bit), so no value repeats a partition's.
    let mut version = 0x8000_0000u32;
    while !stop.load(Relaxed) && rate > 0.0 && !ids.is_empty() {
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        if due <= done {
            let next = start + Duration::from_secs_f64((done + 1) as f64 / rate);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            continue;
        }
        let n = (due - done).min(64);
        for _ in 0..n {
            let id = ids[rng.gen_range(0..ids.len())];
            version = version.wrapping_add(1) | 0x8000_0000;
            c.set(id, version, mix.draw(write_hash(seed, id, version)));
        }
        c.flush()?;
        for _ in 0..n {
            if let r @ Reply::Error(_) = c.read_store()? {
                errors.note(format!("background set: {r:?}"));
            }
        }
        done += n;
    }
    Ok((done, errors))
}

/// One server, one round.
struct Run {
    kind: Kind,
    round: usize,
    keys: u64,
    load_secs: f64,
    load_errors: Errors,
    warmup: ChurnCounts,
    measures: Vec<Measure>,
    end: Stats,
    rss: Option<u64>,
}

fn run_one(
    env: &Env,
    o: &Opts,
    keys: u64,
    kind: Kind,
    round: usize,
) -> Result<(Run, String), String> {
    let started = env.start(kind, o.memory_mb, o.mix.max())?;
    let server = started.server();
    let addr = server.addr();
    let pid = server.pid;
    let tag = format!("churn (c): {kind} round {round}");
    let mut parts = Partition::split(keys, o.set_conns as u64, env.seed, &o.mix);
    let t = Instant::now();
    let load_errors = partition::load_all(&mut parts, addr, o.load_mbps)?;
    let load_secs = t.elapsed().as_secs_f64();
    let churn = |parts: &mut [Partition], depth: usize, secs: f64, timed: bool, salt: u64| {
        let cfg = ChurnCfg {
            delete_ratio: o.delete_ratio,
            depth,
            until: Instant::now() + Duration::from_secs_f64(secs),
            timed,
            salt,
        };
        let mut total = ChurnCounts::default();
        for c in partition::each(parts, |p| p.churn(addr, cfg, None))? {
            total.add(&c)?;
        }
        Ok::<_, String>(total)
    };
    let warmup = churn(&mut parts, env.batch, o.warmup, false, 0xC0)?;
    server.check_alive()?;
    let mut ctrl = Conn::connect(addr)?;
    let s = ctrl.stats()?;
    eprintln!(
        "{tag}: loaded {keys} keys in {load_secs:.1} s, warm-up churn {} ops; {} items, {} evictions",
        warmup.ops(),
        stats::num0(&s, "curr_items"),
        stats::num0(&s, "evictions")
    );
    let mut measures = Vec::new();
    for (i, &depth) in o.depths.iter().enumerate() {
        let cpu0 = crate::load::cpu_time(pid)?;
        let t = Instant::now();
        let c = churn(&mut parts, depth, o.phase_seconds, true, 0x5E7 + i as u64)?;
        let secs = t.elapsed().as_secs_f64();
        let cpu_secs = (crate::load::cpu_time(pid)? - cpu0).as_secs_f64();
        let (p50_us, p99_us, p999_us) = c.hist.as_ref().map_or((0.0, 0.0, 0.0), percentiles);
        measures.push(Measure {
            phase: Phase::Set,
            depth,
            ops: c.ops(),
            background: 0,
            secs,
            cpu_secs,
            p50_us,
            p99_us,
            p999_us,
            misses: 0,
            wrong: 0,
            errors: c.errors.clone(),
        });
        server.check_alive()?;

        let ids: Vec<u64> = parts.iter().flat_map(|p| p.live_ids()).collect();
        let read_ids = if o.get_keys == 0 || o.get_keys >= ids.len() {
            ids.clone()
        } else {
            let mut rng = SmallRng::seed_from_u64(env.seed ^ 0x6e7 ^ i as u64);
            let hot: Vec<u64> = (0..o.get_keys)
                .map(|_| ids[rng.gen_range(0..ids.len())])
                .collect();
            rewrite(addr, &hot, &o.mix, env.seed ^ 0x4e7 ^ i as u64)?;
            hot
        };
        let stop = AtomicBool::new(false);
        let cpu0 = crate::load::cpu_time(pid)?;
        let t = Instant::now();
        let until = t + Duration::from_secs_f64(o.phase_seconds);
        let (ids, read_ids, stop) = (&ids, &read_ids, &stop);
        let (gets, bg) = std::thread::scope(|s| {
            let bg = s.spawn(move || {
                background(
                    addr,
                    ids,
                    &o.mix,
                    o.background_rate,
                    stop,
                    env.seed ^ 0xB6 ^ i as u64,
                )
            });
            let hs: Vec<_> = (0..o.get_conns as u64)
                .map(|g| {
                    s.spawn(move || {
                        get_worker(
                            addr,
                            read_ids,
                            depth,
                            until,
                            env.seed ^ (g << 16) ^ i as u64,
                        )
                    })
                })
                .collect();
            let gets: Vec<_> = hs
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("get thread panicked".into()))
                })
                .collect();
            stop.store(true, Relaxed);
            let bg = bg
                .join()
                .unwrap_or_else(|_| Err("background thread panicked".into()));
            (gets, bg)
        });
        let secs = t.elapsed().as_secs_f64();
        let cpu_secs = (crate::load::cpu_time(pid)? - cpu0).as_secs_f64();
        let (background, mut errors) = bg?;
        let mut hist = histogram();
        let (mut n, mut misses, mut wrong) = (0, 0, 0);
        for g in gets {
            let (g, m, w, e, h) = g?;
            n += g;
            misses += m;
            wrong += w;
            errors.add(&e);
            hist.add(h).map_err(|e| e.to_string())?;
        }
        let (p50_us, p99_us, p999_us) = percentiles(&hist);
        measures.push(Measure {
            phase: Phase::Get,
            depth,
            ops: n,
            background,
            secs,
            cpu_secs,
            p50_us,
            p99_us,
            p999_us,
            misses,
            wrong,
            errors,
        });
        server.check_alive()?;
        for m in &measures[measures.len() - 2..] {
            eprintln!(
                "{tag}: {} depth {depth}: {:.0} ops/s, {:.2} us CPU/op, p99 {:.0} us",
                m.phase.name(),
                m.ops_per_sec(),
                m.cpu_us_per_op(),
                m.p99_us
            );
        }
    }
    let run = Run {
        kind,
        round,
        keys,
        load_secs,
        load_errors,
        warmup,
        measures,
        end: ctrl.stats()?,
        rss: server.rss_bytes().ok(),
    };
    Ok((run, started.cmdline.clone()))
}

impl Measure {
    fn json(&self) -> Value {
        json!({
            "phase": self.phase.name(), "depth": self.depth, "ops": self.ops,
            "background_sets": self.background, "seconds": self.secs,
            "server_cpu_seconds": self.cpu_secs, "ops_per_sec": self.ops_per_sec(),
            "cpu_us_per_op": self.cpu_us_per_op(), "p50_us": self.p50_us,
            "p99_us": self.p99_us, "p999_us": self.p999_us, "misses": self.misses,
            "wrong": self.wrong, "errors": self.errors.count,
            "error_sample": self.errors.sample,
        })
    }
}

impl Run {
    fn json(&self, flash: bool) -> Value {
        json!({
            "server": self.kind.name(),
            "round": self.round,
            "keys": self.keys,
            "load_seconds": self.load_secs,
            "load_set_errors": self.load_errors.count,
            "warmup_ops": self.warmup.ops(),
            "rss_bytes": self.rss,
            "optional_stats_end": stats::optional_json(&self.end, flash),
            "stats_end": stats::json(&self.end),
            "phases": self.measures.iter().map(Measure::json).collect::<Vec<_>>(),
        })
    }
}

/// Medians over rounds of (phase, depth, server).
fn medians(runs: &[Run], kind: Kind, phase: Phase, depth: usize) -> [f64; 5] {
    let ms: Vec<&Measure> = runs
        .iter()
        .filter(|r| r.kind == kind)
        .flat_map(|r| &r.measures)
        .filter(|m| m.phase == phase && m.depth == depth)
        .collect();
    std::array::from_fn(|i| median(ms.iter().map(|m| m.figures()[i]).collect()).unwrap_or(f64::NAN))
}

/// Mode (c); (every hit was right, JSON).
pub(crate) fn run(env: &Env, o: &Opts) -> Result<(bool, Value), String> {
    let keys = o.keys.unwrap_or_else(|| default_keys(o.memory_mb, &o.mix));
    if keys == 0 || o.depths.is_empty() {
        return Err("--keys-c and --depths need at least one".into());
    }
    eprintln!(
        "churn (c): {keys} keys{}, value sizes {} (mean {:.0} B)",
        if o.keys.is_none() {
            " (live data 70 % of -m)"
        } else {
            ""
        },
        o.mix,
        o.mix.mean()
    );
    let mut runs = Vec::new();
    let mut cmdlines = Vec::new();
    for round in 1..=env.rounds {
        for kind in env.order(round) {
            let (r, cmd) = run_one(env, o, keys, kind, round)?;
            cmdlines.push((round, kind, cmd));
            runs.push(r);
        }
    }
    let ok = runs.iter().all(|r| r.measures.iter().all(|m| m.wrong == 0));
    let flash = env.flash.is_some();
    let first = env.servers[0];
    let mut table = Vec::new();
    for &depth in &o.depths {
        for phase in [Phase::Set, Phase::Get] {
            let base = medians(&runs, first, phase, depth);
            for &k in &env.servers {
                table.push((phase, depth, k, medians(&runs, k, phase, depth), base));
            }
        }
    }
    let doc = json!({
        "mode": "c",
        "memory_mb": o.memory_mb,
        "keys": keys,
        "load_mbps": o.load_mbps,
        "mix": o.mix.to_string(),
        "mean_value": o.mix.mean(),
        "delete_ratio": o.delete_ratio,
        "warmup_seconds": o.warmup,
        "depths": o.depths,
        "phase_seconds": o.phase_seconds,
        "set_conns": o.set_conns,
        "get_conns": o.get_conns,
        "get_keys": o.get_keys,
        "background_set_rate": o.background_rate,
        "latency": "per request, from its batch's write to its reply",
        "cmdlines": cmdlines_json(&cmdlines),
        "runs": runs.iter().map(|r| r.json(flash)).collect::<Vec<_>>(),
        "medians": table.iter().map(|(p, d, k, m, b)| {
            let mut row = serde_json::Map::new();
            row.insert("phase".into(), p.name().into());
            row.insert("depth".into(), (*d).into());
            row.insert("server".into(), k.name().into());
            for (i, f) in FIGURES.iter().enumerate() {
                row.insert((*f).into(), json_f64(Some(m[i])));
                row.insert(format!("{f}_vs_{}", first.name()), json_f64(Some(m[i] / b[i])));
            }
            Value::Object(row)
        }).collect::<Vec<_>>(),
    });
    if env.json {
        return Ok((ok, doc));
    }
    println!(
        "churn (c), CPU per SET and per GET while cleaning runs: {keys} keys, value sizes {} (mean {:.0} B); -m {} -t {}{}; load, {} s churn warm-up; phases of {} s at depths {:?}",
        o.mix,
        o.mix.mean(),
        o.memory_mb,
        env.threads,
        if flash { " with flash" } else { "" },
        o.warmup,
        o.phase_seconds,
        o.depths
    );
    println!(
        "SET: {} conns overwriting (new sizes) and deleting ({} of ops) their key partitions; GET: {} conns getting random keys live at the phase's start, plus 1 conn overwriting them at {} sets/s (CPU/op = CPU / (gets + background sets))",
        o.set_conns, o.delete_ratio, o.get_conns, o.background_rate
    );
    println!("latency: per request, from its batch's write to its reply (at depth > 1 the batch's requests share one write)");
    print_cmdlines(&cmdlines);
    println!();
    let head = format!(
        "{:<10} {:>5} {:>5} {:>5} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6}",
        "server",
        "round",
        "phase",
        "depth",
        "ops/s",
        "cpu us/op",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "bg sets",
        "miss %",
        "wrong",
        "errors"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for r in &runs {
        for m in &r.measures {
            println!(
                "{:<10} {:>5} {:>5} {:>5} {:>10.0} {:>10.2} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>8} {:>6} {:>6}",
                r.kind, r.round, m.phase.name(), m.depth, m.ops_per_sec(), m.cpu_us_per_op(),
                m.p50_us, m.p99_us, m.p999_us, m.background,
                if m.phase == Phase::Get { format!("{:.1}", m.misses as f64 * 100.0 / m.ops.max(1) as f64) } else { "-".into() },
                m.wrong, m.errors.count
            );
        }
    }
    for r in &runs {
        let errs: Vec<&String> = r.measures.iter().flat_map(|m| &m.errors.sample).collect();
        if !errs.is_empty() || r.load_errors.count > 0 {
            println!(
                "{} round {}: {} load errors; errors e.g. {errs:?} {:?}",
                r.kind, r.round, r.load_errors.count, r.load_errors.sample
            );
        }
    }
    println!();
    println!("stats at the end (and RSS):");
    let cols = stats::columns(flash);
    let mut head = format!(
        "{:<10} {:>5} {:>10} {:>9} {:>8}",
        "server", "round", "curr_items", "evictions", "RSS MiB"
    );
    for c in &cols {
        head += &format!(
            " {:>w$}",
            stats::header(c),
            w = stats::header(c).len().max(8)
        );
    }
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for r in &runs {
        let mut line = format!(
            "{:<10} {:>5} {:>10} {:>9} {:>8}",
            r.kind,
            r.round,
            stats::num0(&r.end, "curr_items"),
            stats::num0(&r.end, "evictions"),
            fmt_opt(r.rss.map(mib), 0)
        );
        for c in &cols {
            line += &format!(
                " {:>w$}",
                stats::cell(&r.end, c),
                w = stats::header(c).len().max(8)
            );
        }
        println!("{line}");
        let extras = stats::extras(&r.end, flash);
        if !extras.is_empty() {
            let e: Vec<String> = extras.iter().map(|(n, v)| format!("{n}={v}")).collect();
            println!("           also: {}", e.join(" "));
        }
    }
    println!("{}", stats::legend(flash));
    println!();
    println!(
        "medians over {} round(s); (x): the ratio to {first}",
        env.rounds
    );
    let head = format!(
        "{:>5} {:>5} {:<10} {:>17} {:>16} {:>16} {:>16} {:>16}",
        "phase",
        "depth",
        "server",
        "ops/s (x)",
        "cpu us/op (x)",
        "p50 us (x)",
        "p99 us (x)",
        "p99.9 us (x)"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for (p, d, k, m, b) in &table {
        let cell = |i: usize, dec: usize| {
            format!(
                "{} ({})",
                fmt_opt(Some(m[i]), dec),
                fmt_opt(Some(m[i] / b[i]), 3)
            )
        };
        println!(
            "{:>5} {:>5} {:<10} {:>17} {:>16} {:>16} {:>16} {:>16}",
            p.name(),
            d,
            k,
            cell(0, 0),
            cell(1, 2),
            cell(2, 1),
            cell(3, 1),
            cell(4, 1)
        );
    }
    Ok((ok, doc))
}
