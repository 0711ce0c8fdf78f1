//! `churn` mode (a), data that fits: every key loaded, then `--churn-conns`
//! connections churn their own key partitions for `--duration` seconds
//! (sets of new versions with new sizes, deletes), while a control
//! connection samples `stats` every `--sample` seconds without pausing the
//! writers; then the writers stop, a last sample is taken, and every key
//! is fetched: live keys must be back with exactly their bytes (`lost`:
//! missing, `wrong`: other bytes), deleted keys must miss. Also the
//! server's CPU per churn op and its RSS at the end. One table of samples
//! per server and round, then the medians per server.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::partition::{self, ChurnCfg, ChurnCounts, Partition, Progress, Verify};
use super::stats::{self, num, num0, Sample, Stats};
use super::wire::Errors;
use super::{cmdlines_json, print_cmdlines, Env, SizeMix};
use crate::conn::Conn;
use crate::flash::fmt_opt;
use crate::servers::Kind;
use crate::{median, mib};

/// What to compare with flash on.
pub(crate) const FLASH_NOTE: &str =
    "with flash: servers need not count items on flash in curr_items (compare `fl objs`); \
the items kept are the verify's `ok` (a key found on either tier counts)";

pub(crate) struct Opts {
    pub memory_mb: u64,
    /// Pace of the load, MB/s of values (0: unpaced).
    pub load_mbps: f64,
    pub keys: u64,
    pub mix: SizeMix,
    pub conns: usize,
    pub duration: f64,
    pub delete_ratio: f64,
    pub sample: f64,
}

/// One server, one round.
struct Run {
    kind: Kind,
    round: usize,
    load_secs: f64,
    load_bytes: u64,
    load_errors: Errors,
    samples: Vec<Sample>,
    churn: ChurnCounts,
    churn_secs: f64,
    /// Server CPU (user + system) over the churn, seconds.
    cpu_secs: f64,
    verify: Verify,
    verify_secs: f64,
    rss: Option<u64>,
}

impl Run {
    fn last(&self) -> &Stats {
        &self.samples.last().expect("a run has samples").stats
    }

    fn cpu_us_per_op(&self) -> f64 {
        self.cpu_secs * 1e6 / self.churn.ops().max(1) as f64
    }

    fn ok(&self) -> bool {
        self.verify.wrong + self.verify.zombies + self.churn.zombies_seen == 0
    }
}

impl Run {
    fn json(&self, flash: bool) -> Value {
        json!({
            "server": self.kind.name(),
            "round": self.round,
            "load_seconds": self.load_secs,
            "load_value_bytes": self.load_bytes,
            "load_set_errors": self.load_errors.count,
            "churn_ops": self.churn.ops(),
            "churn_sets": self.churn.sets,
            "churn_deletes": self.churn.deletes,
            "churn_seconds": self.churn_secs,
            "churn_errors": self.churn.errors.count,
            "error_sample": self.churn.errors.sample.iter().chain(&self.load_errors.sample).collect::<Vec<_>>(),
            "lost_seen_by_deletes": self.churn.lost_seen,
            "zombies_seen_by_deletes": self.churn.zombies_seen,
            "server_cpu_seconds": self.cpu_secs,
            "cpu_us_per_op": self.cpu_us_per_op(),
            "verify": {
                "live": self.verify.live, "ok": self.verify.ok, "lost": self.verify.lost,
                "wrong": self.verify.wrong, "zombies": self.verify.zombies,
                "unknown": self.verify.unknown, "seconds": self.verify_secs,
            },
            "rss_bytes": self.rss,
            "optional_stats_end": stats::optional_json(self.last(), flash),
            "samples": self.samples.iter().map(Sample::json).collect::<Vec<_>>(),
        })
    }
}

fn run_one(env: &Env, o: &Opts, kind: Kind, round: usize) -> Result<(Run, String), String> {
    let started = env.start(kind, o.memory_mb, o.mix.max())?;
    let server = started.server();
    let addr = server.addr();
    let tag = format!("churn (a): {kind} round {round}");
    let mut parts = Partition::split(o.keys, o.conns as u64, env.seed, &o.mix);

    let t = Instant::now();
    let load_errors = partition::load_all(&mut parts, addr, o.load_mbps)?;
    let load_secs = t.elapsed().as_secs_f64();
    server.check_alive()?;
    let load_bytes: u64 = parts.iter().map(|p| p.live_bytes).sum();
    let mut ctrl = Conn::connect(addr)?;
    let s0 = ctrl.stats()?;
    eprintln!(
        "{tag}: loaded {} keys ({:.0} MiB of values) in {load_secs:.1} s, {} set errors; curr_items {}",
        o.keys,
        mib(load_bytes),
        load_errors.count,
        num0(&s0, "curr_items")
    );

    let progress: Vec<Progress> = parts.iter().map(|_| Progress::default()).collect();
    for (p, g) in parts.iter().zip(&progress) {
        g.live_keys
            .store(p.live_keys, std::sync::atomic::Ordering::Relaxed);
        g.live_bytes
            .store(p.live_bytes, std::sync::atomic::Ordering::Relaxed);
    }
    let sample_now = |ctrl: &mut Conn, start: Instant, end: bool| -> Result<Sample, String> {
        let stats = ctrl.stats()?;
        let (ops, live, bytes) = Progress::sum(&progress);
        Ok(Sample {
            secs: start.elapsed().as_secs_f64(),
            ops,
            client_live: Some(live),
            client_live_bytes: Some(bytes),
            end,
            stats,
        })
    };
    let cpu0 = crate::load::cpu_time(server.pid)?;
    let start = Instant::now();
    let mut samples = vec![sample_now(&mut ctrl, start, false)?];
    samples[0].secs = 0.0;
    let cfg = ChurnCfg {
        delete_ratio: o.delete_ratio,
        depth: env.batch,
        until: start + Duration::from_secs_f64(o.duration),
        timed: false,
        salt: 0xA,
    };
    let results: Vec<Result<ChurnCounts, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = parts
            .iter_mut()
            .zip(&progress)
            .map(|(p, g)| s.spawn(move || p.churn(addr, cfg, Some(g))))
            .collect();
        // Samples while the writers run (not at the very end: that one is
        // taken after they stop).
        let every = Duration::from_secs_f64(o.sample);
        let mut next = start + every;
        while next + Duration::from_millis(200) < cfg.until && !hs.iter().all(|h| h.is_finished()) {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            match sample_now(&mut ctrl, start, false) {
                Ok(smp) => samples.push(smp),
                Err(e) => eprintln!("{tag}: sample failed: {e}"),
            }
            next += every;
        }
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("churn thread panicked".into()))
            })
            .collect()
    });
    let mut churn = ChurnCounts::default();
    for r in results {
        churn.add(&r?)?;
    }
    let churn_secs = start.elapsed().as_secs_f64();
    let cpu_secs = (crate::load::cpu_time(server.pid)? - cpu0).as_secs_f64();
    server.check_alive()?;
    samples.push(sample_now(&mut ctrl, start, true)?);
    eprintln!(
        "{tag}: churned {} ops in {churn_secs:.1} s ({:.0} k ops/s); verifying",
        churn.ops(),
        churn.ops() as f64 / churn_secs / 1e3
    );
    let t = Instant::now();
    let verify = partition::verify_all(&mut parts, addr)?;
    let verify_secs = t.elapsed().as_secs_f64();
    server.check_alive()?;
    let run = Run {
        kind,
        round,
        load_secs,
        load_bytes,
        load_errors,
        samples,
        churn,
        churn_secs,
        cpu_secs,
        verify,
        verify_secs,
        rss: server.rss_bytes().ok(),
    };
    eprintln!(
        "{tag}: verify: {} live, {} lost, {} wrong, {} zombies in {verify_secs:.1} s",
        verify.live, verify.lost, verify.wrong, verify.zombies
    );
    Ok((run, started.cmdline.clone()))
}

/// Mode (a); (all runs behaved, JSON).
pub(crate) fn run(env: &Env, o: &Opts) -> Result<(bool, Value), String> {
    if o.keys == 0 {
        return Err("--keys must be at least 1".into());
    }
    let mut runs = Vec::new();
    let mut cmdlines = Vec::new();
    for round in 1..=env.rounds {
        for kind in env.order(round) {
            let (r, cmd) = run_one(env, o, kind, round)?;
            cmdlines.push((round, kind, cmd));
            runs.push(r);
        }
    }
    let ok = runs.iter().all(Run::ok);
    let flash = env.flash.is_some();
    let doc = json!({
        "mode": "a",
        "memory_mb": o.memory_mb,
        "keys": o.keys,
        "load_mbps": o.load_mbps,
        "mix": o.mix.to_string(),
        "mean_value": o.mix.mean(),
        "conns": o.conns,
        "batch": env.batch,
        "duration": o.duration,
        "delete_ratio": o.delete_ratio,
        "sample_seconds": o.sample,
        "cmdlines": cmdlines_json(&cmdlines),
        "runs": runs.iter().map(|r| r.json(flash)).collect::<Vec<_>>(),
    });
    if env.json {
        return Ok((ok, doc));
    }
    print_table(env, o, &runs, &cmdlines);
    Ok((ok, doc))
}

fn print_table(env: &Env, o: &Opts, runs: &[Run], cmdlines: &[(usize, Kind, String)]) {
    let flash = env.flash.is_some();
    println!(
        "churn (a), data that fits: {} keys c:<n>, value sizes {} (mean {:.0} B); -m {} -t {}{}; {} conns x batch {} for {} s, delete ratio {}, samples every {} s",
        o.keys,
        o.mix,
        o.mix.mean(),
        o.memory_mb,
        env.threads,
        if flash { " with flash" } else { "" },
        o.conns,
        env.batch,
        o.duration,
        o.delete_ratio,
        o.sample
    );
    print_cmdlines(cmdlines);
    let cols = stats::columns(flash);
    for r in runs {
        println!();
        println!(
            "{} (round {}): loaded {} keys, {:.0} MiB of values, in {:.1} s ({} set errors)",
            r.kind,
            r.round,
            o.keys,
            mib(r.load_bytes),
            r.load_secs,
            r.load_errors.count
        );
        let mut head = format!(
            "{:>6} {:>9} {:>11} {:>10} {:>9} {:>9}",
            "t s", "ops", "client live", "curr_items", "evictions", "bytes MiB"
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
        for s in &r.samples {
            let t = if s.end {
                format!("end {:.0}", s.secs)
            } else {
                format!("{:.1}", s.secs)
            };
            let mut line = format!(
                "{t:>6} {:>9} {:>11} {:>10} {:>9} {:>9.1}",
                s.ops,
                s.client_live.unwrap_or(0),
                fmt_num(num(&s.stats, "curr_items")),
                fmt_num(num(&s.stats, "evictions")),
                mib(num0(&s.stats, "bytes"))
            );
            for c in &cols {
                line += &format!(
                    " {:>w$}",
                    stats::cell(&s.stats, c),
                    w = stats::header(c).len().max(8)
                );
            }
            println!("{line}");
        }
        let v = &r.verify;
        println!(
            "verify: {} live keys: {} ok, {} lost, {} wrong, {} deleted keys back (zombies), {} unknown; {:.1} s",
            v.live, v.ok, v.lost, v.wrong, v.zombies, v.unknown, r.verify_secs
        );
        println!(
            "churn: {} ops ({} sets, {} deletes) in {:.1} s = {:.0} ops/s; {} live keys seen lost by deletes, {} errors{}; server CPU {:.2} us/op; RSS {} MiB",
            r.churn.ops(),
            r.churn.sets,
            r.churn.deletes,
            r.churn_secs,
            r.churn.ops() as f64 / r.churn_secs,
            r.churn.lost_seen,
            r.churn.errors.count + r.load_errors.count,
            if r.churn.errors.sample.is_empty() && r.load_errors.sample.is_empty() {
                String::new()
            } else {
                format!(" (e.g. {:?})", r.load_errors.sample.iter().chain(&r.churn.errors.sample).collect::<Vec<_>>())
            },
            r.cpu_us_per_op(),
            fmt_opt(r.rss.map(mib), 1)
        );
        let extras = stats::extras(r.last(), flash);
        if !extras.is_empty() {
            let e: Vec<String> = extras.iter().map(|(n, v)| format!("{n}={v}")).collect();
            println!("other stats at the end: {}", e.join(" "));
        }
    }
    println!();
    println!("{}", stats::legend(flash));
    if flash {
        println!("{FLASH_NOTE}");
    }
    println!();
    summary(env, runs);
}

fn fmt_num(x: Option<u64>) -> String {
    x.map_or("-".into(), |v| v.to_string())
}

/// Medians per server, with the ratio of live keys kept to the first server.
fn summary(env: &Env, runs: &[Run]) {
    println!(
        "medians over {} round(s), end of churn (writers stopped):",
        env.rounds
    );
    let head = format!(
        "{:<10} {:>11} {:>10} {:>9} {:>8} {:>6} {:>7} {:>9} {:>9} {:>9} {:>11}",
        "server",
        "client live",
        "curr_items",
        "evictions",
        "lost",
        "wrong",
        "zombies",
        "ops/s",
        "cpu us/op",
        "RSS MiB",
        "kept/first"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    let med = |kind: Kind, f: &dyn Fn(&Run) -> f64| {
        median(runs.iter().filter(|r| r.kind == kind).map(f).collect())
    };
    let kept = |r: &Run| (r.verify.ok) as f64;
    let first = env.servers.first().and_then(|&k| med(k, &kept));
    for &kind in &env.servers {
        let m = |f: &dyn Fn(&Run) -> f64| med(kind, f).unwrap_or(f64::NAN);
        println!(
            "{:<10} {:>11.0} {:>10.0} {:>9.0} {:>8.0} {:>6.0} {:>7.0} {:>9.0} {:>9.2} {:>9.1} {:>11}",
            kind,
            m(&|r| r.verify.live as f64),
            m(&|r| num0(r.last(), "curr_items") as f64),
            m(&|r| num0(r.last(), "evictions") as f64),
            m(&|r| r.verify.lost as f64),
            m(&|r| r.verify.wrong as f64),
            m(&|r| r.verify.zombies as f64),
            m(&|r| r.churn.ops() as f64 / r.churn_secs),
            m(&|r| r.cpu_us_per_op()),
            m(&|r| r.rss.map_or(f64::NAN, mib)),
            fmt_opt(first.map(|f| m(&kept) / f), 3)
        );
    }
    println!("kept/first: live keys back intact at the verify, as a ratio to the first server's");
}
