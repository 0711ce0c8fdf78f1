//! `flash --mode reads` and `flash --mode sizes`: GET throughput, latency
//! and server CPU per request when most hits come from flash. Owns, per
//! value size: starting every server with a flash file and loading it
//! (paced, data `ratio` × `-m`, so that all but the last-loaded keys are
//! on flash), then per round and server (order alternating) dropping the
//! flash file's page cache ([`super::cache`]) and running `load`'s
//! closed-loop generator ([`crate::load::run`]: `--read-conns` connections
//! at depth 1, uniform over the keys loaded first) with the server's
//! `stats` around it; a byte-exact check of a sample of those keys after
//! the runs; and the table and JSON (medians of the rounds, through
//! [`crate::report::Summary`]).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use super::cache::{self, Dropped};
use super::{
    fmt_opt, items_for, json_f64, load, round_order, settle, start, stat, stat_delta, sweep,
    FlashDir, FlashOpts, Loaded, Running, Sweep, KEY_SIZE,
};
use crate::load::{KeyDist, Protocol, Targets, Workload};
use crate::report::{Outcome, Summary};
use crate::servers::{Binaries, Kind};
use crate::{median, mib};

/// Bytes of RAM a kept item is assumed to take besides key and value
/// (for how many of the last-loaded keys may still be in RAM).
const RAM_OVERHEAD: u64 = 48;

/// Keys checked byte for byte after the runs.
const CHECK_SAMPLE: u64 = 1000;

/// One timed run.
struct Run {
    round: usize,
    kind: Kind,
    out: Outcome,
    dropped: Dropped,
    /// Resident bytes of the flash file after the run.
    resident_after_run: u64,
    s0: HashMap<String, String>,
    s1: HashMap<String, String>,
}

impl Run {
    fn over_1ms(&self) -> Option<f64> {
        let h = self.out.latency.as_ref()?;
        (!h.is_empty()).then(|| 1.0 - h.quantile_below(1_000_000))
    }

    /// Share of the hits the server read from flash ([`super::flash_share`]).
    fn flash_share(&self) -> Option<f64> {
        super::flash_share(&self.s0, &self.s1)
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "round": self.round,
            "server": self.kind.name(),
            "ops_per_sec": self.out.ops_per_sec(),
            "p50_us": self.out.p50_us,
            "p99_us": self.out.p99_us,
            "p999_us": self.out.p999_us,
            "over_1ms": json_f64(self.over_1ms()),
            "cpu_us_per_req": json_f64(self.out.cpu_us_per_req),
            "gets": self.out.gets,
            "misses": self.out.misses,
            "miss_ratio": json_f64(Some(self.out.miss_ratio())),
            "server_get_hits": stat_delta(&self.s0, &self.s1, "get_hits"),
            "get_extstore": stat_delta(&self.s0, &self.s1, "get_extstore"),
            "miss_from_extstore": stat_delta(&self.s0, &self.s1, "miss_from_extstore"),
            "flash_hit_share": json_f64(self.flash_share()),
            "extstore_bytes_read": stat_delta(&self.s0, &self.s1, "extstore_bytes_read"),
            "cache_drop": self.dropped.method,
            "flash_file_len": self.dropped.file_len,
            "resident_before_drop": self.dropped.resident_before,
            "resident_after_drop": self.dropped.resident_after,
            "resident_after_run": self.resident_after_run,
        })
    }
}

/// A server loaded for one value size.
struct Loaded1 {
    running: Running,
    loaded: Loaded,
    stats: HashMap<String, String>,
    rss: u64,
}

/// One value size: every server's load and runs.
struct Step {
    value_size: usize,
    items: u64,
    cut: bool,
    /// GETs go uniformly to keys `0..get_keys`.
    get_keys: u64,
    loads: Vec<(Kind, Loaded, HashMap<String, String>, u64)>,
    runs: Vec<Run>,
    /// Runs that stopped on an error reply (e.g. memcached's `SERVER_ERROR
    /// out of memory writing get response` for large values in a small
    /// `-m`): (round, server, error).
    failures: Vec<(usize, Kind, String)>,
    checks: Vec<(Kind, Sweep)>,
}

impl Step {
    fn summary(&self, kind: Kind) -> Summary {
        let outs: Vec<Outcome> = self
            .runs
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.out.clone())
            .collect();
        Summary::of(kind.name(), &outs)
    }

    fn med(&self, kind: Kind, f: &dyn Fn(&Run) -> Option<f64>) -> Option<f64> {
        median(
            self.runs
                .iter()
                .filter(|r| r.kind == kind)
                .filter_map(f)
                .collect(),
        )
    }

    fn wrong(&self) -> u64 {
        self.checks.iter().map(|(_, s)| s.wrong).sum()
    }

    fn json(&self, servers: &[Kind]) -> serde_json::Value {
        let first = servers.first().map(|&k| self.summary(k));
        json!({
            "value_size": self.value_size,
            "items": self.items,
            "items_cut_by_flash_size": self.cut,
            "get_keys": self.get_keys,
            "loads": self.loads.iter().map(|(k, l, s, rss)| json!({
                "server": k.name(),
                "load_seconds": l.seconds,
                "load_mb_per_sec": l.mb_per_sec(),
                "set_errors": l.set_errors,
                "curr_items": stat(s, "curr_items"),
                "evictions": stat(s, "evictions"),
                "extstore_objects_used": stat(s, "extstore_objects_used"),
                "extstore_index_bytes": stat(s, "extstore_index_bytes"),
                "rss": rss,
            })).collect::<Vec<_>>(),
            "runs": self.runs.iter().map(Run::json).collect::<Vec<_>>(),
            "failures": self.failures.iter().map(|(round, k, e)| json!({
                "round": round, "server": k.name(), "error": e,
            })).collect::<Vec<_>>(),
            "checks": self.checks.iter().map(|(k, s)| json!({
                "server": k.name(), "found": s.found, "missing": s.missing, "wrong": s.wrong,
            })).collect::<Vec<_>>(),
            "medians": servers.iter().map(|&k| {
                let mut row = self.summary(k).json(first.as_ref(), None);
                row.insert("over_1ms".into(), json_f64(self.med(k, &Run::over_1ms)));
                row.insert("flash_hit_share".into(), json_f64(self.med(k, &Run::flash_share)));
                serde_json::Value::Object(row)
            }).collect::<Vec<_>>(),
        })
    }
}

fn workload(o: &FlashOpts, value_size: usize, keys: u64) -> Workload {
    Workload {
        conns: o.read_conns.max(1),
        threads: 1,
        depth: 1,
        duration: Duration::from_secs_f64(o.duration.max(0.1)),
        warmup: Duration::from_secs_f64(o.warmup.max(0.0)),
        keys,
        key_size: KEY_SIZE,
        value_size,
        get_ratio: 1.0,
        protocol: Protocol::Text,
        seed: o.seed,
        dist: KeyDist::Uniform,
        rate: None,
        arrivals: Default::default(),
        quantile: 0.999,
        cache_aside: false,
        busy_poll: false,
        deferred_sends: false,
        tls: None,
        key_prefix: Vec::new(),
    }
}

fn step(
    bins: &Binaries,
    o: &FlashOpts,
    dir: &FlashDir,
    value_size: usize,
    ratio: f64,
    label: &str,
) -> Result<Step, String> {
    let (items, cut) = items_for(o, ratio, value_size);
    // The last-loaded keys that -m could hold may still be in RAM: GETs go
    // to the ones before them.
    let in_ram = (o.memory_mb << 20) / (value_size as u64 + KEY_SIZE as u64 + RAM_OVERHEAD);
    let get_keys = if items > in_ram {
        items - in_ram
    } else {
        items
    };
    if items <= in_ram {
        eprintln!("flash {label}: WARNING: {items} items of {value_size} B fit in -m {}: the GETs will not reach flash (raise the ratio)", o.memory_mb);
    }
    let size_of = move |_: u64| value_size;
    let mut servers: Vec<Loaded1> = Vec::new();
    for &kind in &o.servers {
        let tag = format!("flash {label}: {kind} {value_size} B");
        let running = start(bins, kind, o, value_size, Some(dir))?;
        eprintln!(
            "{tag}: loading {items} items ({:.0} MiB{})",
            mib(items * (value_size + KEY_SIZE) as u64),
            if cut {
                ", cut to fit the flash file"
            } else {
                ""
            }
        );
        let loaded = load(running.addr(), 0..items, &size_of, o.load_mbps, &tag)?;
        running.server.check_alive()?;
        let stats = settle(running.addr())?;
        let rss = running.server.rss_bytes()?;
        eprintln!(
            "{tag}: loaded in {:.1} s ({:.0} MB/s, {} set errors), {} items, {} on flash, RSS {:.1} MiB",
            loaded.seconds,
            loaded.mb_per_sec(),
            loaded.set_errors,
            fmt_opt(stat(&stats, "curr_items").map(|x| x as f64), 0),
            fmt_opt(stat(&stats, "extstore_objects_used").map(|x| x as f64), 0),
            mib(rss)
        );
        servers.push(Loaded1 {
            running,
            loaded,
            stats,
            rss,
        });
    }
    let w = workload(o, value_size, get_keys);
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    for round in 1..=o.rounds {
        for kind in round_order(&o.servers, round) {
            let Some(s) = servers.iter().find(|s| s.running.kind() == kind) else {
                continue;
            };
            let file = s
                .running
                .file
                .as_ref()
                .ok_or("a flash server without a flash file")?;
            let dropped = cache::drop_file(&file.path, o.drop_cache)?;
            let s0 = s.running.stats()?;
            let target = Targets::one(s.running.addr(), Some(s.running.server.pid));
            let result = crate::load::run(&target, &w);
            s.running.server.check_alive()?;
            let out = match result {
                Ok(out) => out,
                Err(e) => {
                    eprintln!(
                        "flash {label}: {value_size} B round {round} {kind:>9}: stopped: {e}"
                    );
                    failures.push((round, kind, e));
                    continue;
                }
            };
            let s1 = s.running.stats()?;
            let resident_after_run = cache::resident(&file.path)?.0;
            let run = Run {
                round,
                kind,
                out,
                dropped,
                resident_after_run,
                s0,
                s1,
            };
            eprintln!(
                "flash {label}: {value_size} B round {round} {kind:>9}: {:>8.0} ops/s  p50 {:>7.1} us  p99 {:>7.1} us  p99.9 {:>7.1} us  >1ms {:>5}%  cpu {} us/req  misses {:.4}  from flash {}%  page cache {} ({:.1} -> {:.1} MiB, {:.1} after)",
                run.out.ops_per_sec(),
                run.out.p50_us,
                run.out.p99_us,
                run.out.p999_us,
                fmt_opt(run.over_1ms().map(|x| x * 100.0), 2),
                fmt_opt(run.out.cpu_us_per_req, 2),
                run.out.miss_ratio(),
                fmt_opt(run.flash_share().map(|x| x * 100.0), 1),
                run.dropped.method,
                mib(run.dropped.resident_before),
                mib(run.dropped.resident_after),
                mib(run.resident_after_run),
            );
            runs.push(run);
        }
    }
    let mut checks = Vec::new();
    for s in &servers {
        let step = (get_keys / CHECK_SAMPLE).max(1);
        let sw = sweep(s.running.addr(), 0, get_keys, step, &size_of, 4)?;
        if sw.wrong > 0 {
            eprintln!(
                "flash {label}: {} {value_size} B: {} WRONG values in a sample of {}",
                s.running.kind(),
                sw.wrong,
                sw.found + sw.missing + sw.wrong
            );
        }
        checks.push((s.running.kind(), sw));
    }
    let loads = servers
        .into_iter()
        .map(|s| (s.running.kind(), s.loaded, s.stats, s.rss))
        .collect();
    Ok(Step {
        value_size,
        items,
        cut,
        get_keys,
        loads,
        runs,
        failures,
        checks,
    })
}

/// Runs `reads` (one size) or `sizes` (a sweep); prints the table (unless
/// JSON) and returns (no wrong value, its JSON).
pub(crate) fn run(
    bins: &Binaries,
    o: &FlashOpts,
    dir: &FlashDir,
    sizes: &[usize],
    ratio: f64,
    label: &str,
) -> Result<(bool, serde_json::Value), String> {
    let mut steps = Vec::new();
    for &size in sizes {
        steps.push(step(bins, o, dir, size, ratio, label)?);
    }
    let ok = steps.iter().all(|s| s.wrong() == 0);
    let value = json!({
        "value_sizes": sizes,
        "data_ratio": ratio,
        "conns": o.read_conns,
        "depth": 1,
        "duration": o.duration,
        "warmup": o.warmup,
        "drop_cache": format!("{:?}", o.drop_cache),
        "steps": steps.iter().map(|s| s.json(&o.servers)).collect::<Vec<_>>(),
    });
    if o.json {
        return Ok((ok, value));
    }
    println!(
        "flash {label}: GETs at depth 1 over {} connections, uniform over the keys loaded first (all but what -m {} could hold), {} x -m of item data per size, flash {}; page cache of the flash file dropped before each run; median of {} round(s)",
        o.read_conns, o.memory_mb, ratio, o.flash_size, o.rounds
    );
    let first = o.servers.first().map_or("first", |k| k.name());
    println!(
        "{:>8} {:<10} {:>9} {:>8} {:>8} {:>9} {:>7} {:>10} {:>10} {:>8} {:>8} {:>7}",
        "value B",
        "server",
        "ops/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        ">1ms %",
        "cpu us/req",
        format!("cpu/{first}").chars().take(10).collect::<String>(),
        "miss %",
        "flash %",
        "wrong"
    );
    println!("{}", "-".repeat(113));
    for s in &steps {
        let Some(base) = o.servers.first().map(|&k| s.summary(k)) else {
            continue;
        };
        for &kind in &o.servers {
            if !s.runs.iter().any(|r| r.kind == kind) {
                let e = s
                    .failures
                    .iter()
                    .find(|f| f.1 == kind)
                    .map_or("no run", |f| f.2.as_str());
                println!("{:>8} {:<10} stopped: {e}", s.value_size, kind);
                continue;
            }
            let m = s.summary(kind);
            println!(
                "{:>8} {:<10} {:>9.0} {:>8.1} {:>8.1} {:>9.1} {:>7} {:>10.2} {:>10} {:>8.2} {:>8} {:>7}",
                s.value_size,
                kind,
                m.ops_per_sec,
                m.p50_us,
                m.p99_us,
                m.p999_us,
                fmt_opt(s.med(kind, &Run::over_1ms).map(|x| x * 100.0), 2),
                m.cpu_us_per_req,
                fmt_opt(Some(m.cpu_us_per_req / base.cpu_us_per_req), 3),
                m.miss_ratio * 100.0,
                fmt_opt(s.med(kind, &Run::flash_share).map(|x| x * 100.0), 1),
                s.checks.iter().filter(|(k, _)| *k == kind).map(|(_, c)| c.wrong).sum::<u64>(),
            );
        }
    }
    if let Some(r) = steps.iter().flat_map(|s| &s.runs).next() {
        println!(
            "page cache: {} (see the per-run lines on stderr for what stayed resident)",
            r.dropped.method
        );
    }
    println!("flash %: the server's get_extstore / get_hits; miss %: client misses / gets; wrong: in a byte-exact check of {CHECK_SAMPLE} of the GET keys after the runs");
    Ok((ok, value))
}
