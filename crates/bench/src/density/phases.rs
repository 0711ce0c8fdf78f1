//! The phases `osmium-bench density --phases replay,gets,sets` runs on
//! each server after its fill (besides counting the items held): their
//! flags ([`PhaseArgs`]), one run's figures ([`Figures`]), the tables and
//! JSON, and the ratios the acceptance names: osmium packing
//! (`compression=cold`, `nodicts`) against `compression=off` and
//! memcached, all from the same invocation.
//!
//! The order on each server: the fill (`sets`: its CPU), the cleaner
//! settling, `gets` (hot and cold keys), the read-back of every key, the
//! depth-1 SETs (`sets`), the replay (`replay`: it writes, so last).

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::gets::GetFigures;
use super::replay::ReplayFigures;
use super::sets::SetFigures;
use super::Run;

/// A phase of `--phases`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Phase {
    /// A zipf cache-aside replay over the keys the fill sent: miss ratio.
    Replay,
    /// Closed-loop GETs of hot and of cold (packed) keys: latency, CPU.
    Gets,
    /// The fill's CPU per SET; depth-1 SETs: latency, CPU.
    Sets,
}

/// The phases' flags.
#[derive(clap::Args, Clone)]
pub(crate) struct PhaseArgs {
    /// Phases after each fill, comma separated: replay (a zipf cache-aside
    /// replay over the keys the fill sent, streams drawn once and
    /// replayed to every server: miss ratio), gets (closed-loop GETs, one
    /// at a time, of hot keys, the last 1 % written, and of as many cold
    /// ones, the oldest held with text values, packed with
    /// compression=cold: p50/p99/p999 and the server's CPU per GET), sets
    /// (the server's CPU per SET of the fill, the cleaner's packing
    /// included; then depth-1 SETs of the hot keys: latency and CPU).
    #[arg(long, value_delimiter = ',')]
    pub phases: Vec<Phase>,
    /// replay: measured requests (gets, and a set for each miss).
    #[arg(long, default_value_t = 1_000_000)]
    pub replay_requests: u64,
    /// replay: warm-up requests before them, not measured.
    #[arg(long, default_value_t = 500_000)]
    pub replay_warmup: u64,
    /// replay: connections, one thread each.
    #[arg(long, default_value_t = 4)]
    pub replay_conns: usize,
    /// replay: the zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    pub replay_alpha: f64,
    /// replay: requests per second over all connections, each
    /// connection's batches evenly spaced (as a cache-aside's misses come
    /// at the database's speed); 0: as fast as the server answers.
    #[arg(long, default_value_t = 0)]
    pub replay_rate: u64,
    /// gets: GETs measured on each key set (hot, cold).
    #[arg(long, default_value_t = 200_000)]
    pub gets: u64,
    /// sets: depth-1 SETs measured (0: only the fill's CPU per SET).
    #[arg(long, default_value_t = 20_000)]
    pub sets: u64,
}

impl PhaseArgs {
    pub(super) fn has(&self, p: Phase) -> bool {
        self.phases.contains(&p)
    }
}

/// Latency percentiles of a histogram of nanoseconds, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Latency {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    pub(super) fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Latency {
            count: h.len(),
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: h.max() as f64 / 1000.0,
        }
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "count": self.count,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "p999_us": self.p999_us,
            "max_us": self.max_us,
        })
    }
}

/// A histogram of nanoseconds up to ten minutes, three digits.
pub(super) fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 600_000_000_000, 3).map_err(|e| e.to_string())
}

/// What the phases measured on one server (None: not run).
#[derive(Default)]
pub(super) struct Figures {
    pub sets: Option<SetFigures>,
    pub gets: Option<GetFigures>,
    pub replay: Option<ReplayFigures>,
}

impl Figures {
    /// Adds `sets`, `gets` and `replay` to a row's JSON object.
    pub(super) fn add_json(&self, row: &mut Value) {
        let Some(o) = row.as_object_mut() else {
            return;
        };
        o.insert(
            "sets".into(),
            self.sets.as_ref().map_or(Value::Null, |s| s.json()),
        );
        o.insert(
            "gets".into(),
            self.gets.as_ref().map_or(Value::Null, |g| g.json()),
        );
        o.insert(
            "replay".into(),
            self.replay.as_ref().map_or(Value::Null, |r| r.json()),
        );
    }
}

/// One acceptance figure: a packing run's over a reference run's.
#[derive(Debug, PartialEq)]
pub(super) struct Ratio {
    pub name: &'static str,
    /// The run it is compared with.
    pub against: Run,
    pub value: f64,
    /// The most it may be.
    pub goal: f64,
}

/// `a / b`, when both are measured and `b` is not zero.
fn over(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The acceptance ratios of `run` (a packing run) against `off` and
/// `memcached` of the same invocation (those measured).
pub(super) fn ratios(
    run: &Figures,
    off: Option<&Figures>,
    memcached: Option<&Figures>,
) -> Vec<Ratio> {
    let miss = |f: &Figures| f.replay.as_ref().map(|r| r.miss_ratio());
    let hot_cpu = |f: &Figures| f.gets.as_ref().and_then(|g| g.hot.cpu_us_per_get());
    let hot_p99 = |f: &Figures| f.gets.as_ref().map(|g| g.hot.latency.p99_us);
    let cold_p99 = |f: &Figures| f.gets.as_ref().map(|g| g.cold.latency.p99_us);
    let set_cpu = |f: &Figures| f.sets.as_ref().and_then(|s| s.cpu_us_per_set());
    type Of = fn(&Figures) -> Option<f64>;
    let mut out = Vec::new();
    let mut add = |name, against: Run, of: Of, other: Option<&Figures>, goal| {
        if let Some(value) = other.and_then(|o| over(of(run), of(o))) {
            out.push(Ratio {
                name,
                against,
                value,
                goal,
            });
        }
    };
    add("replay miss ratio", Run::Memcached, miss, memcached, 0.7);
    add("replay miss ratio", Run::Off, miss, off, 1.0);
    add("hot GET CPU", Run::Off, hot_cpu, off, 1.02);
    add("hot GET p99", Run::Off, hot_p99, off, 1.05);
    add("cold GET p99", Run::Off, cold_p99, off, 1.5);
    add("SET CPU", Run::Off, set_cpu, off, 1.15);
    out
}

/// Every packing run's ratios: (run, its ratios).
fn all_ratios(rows: &[(Run, &Figures)]) -> Vec<(Run, Vec<Ratio>)> {
    let find = |want: Run| rows.iter().find(|(r, _)| *r == want).map(|(_, f)| *f);
    rows.iter()
        .filter(|(r, _)| matches!(r, Run::Cold | Run::Nodicts))
        .map(|(r, f)| (*r, ratios(f, find(Run::Off), find(Run::Memcached))))
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

/// The ratios as JSON: `{run: {"<name> vs <run>": {value, goal}}}`.
pub(super) fn ratios_json(rows: &[(Run, &Figures)]) -> Value {
    let mut out = serde_json::Map::new();
    for (run, rs) in all_ratios(rows) {
        let mut m = serde_json::Map::new();
        for r in rs {
            m.insert(
                format!("{} vs {}", r.name, r.against.name()),
                json!({"value": r.value, "goal": r.goal, "met": r.value <= r.goal}),
            );
        }
        out.insert(run.name().into(), Value::Object(m));
    }
    Value::Object(out)
}

/// Prints the phases' tables and the ratios (nothing when no phase ran).
pub(super) fn print(rows: &[(Run, &Figures)]) {
    let sets: Vec<_> = rows
        .iter()
        .filter_map(|(r, f)| Some((*r, f.sets.as_ref()?)))
        .collect();
    if !sets.is_empty() {
        println!();
        super::sets::print(&sets);
    }
    let gets: Vec<_> = rows
        .iter()
        .filter_map(|(r, f)| Some((*r, f.gets.as_ref()?)))
        .collect();
    if !gets.is_empty() {
        println!();
        super::gets::print(&gets);
    }
    let replay: Vec<_> = rows
        .iter()
        .filter_map(|(r, f)| Some((*r, f.replay.as_ref()?)))
        .collect();
    if !replay.is_empty() {
        println!();
        super::replay::print(&replay);
    }
    let all = all_ratios(rows);
    if all.is_empty() {
        return;
    }
    println!();
    for (run, rs) in all {
        for r in rs {
            println!(
                "{:<10} {:<18} vs {:<10} {:>6.3}x  (goal <= {}x: {})",
                run.name(),
                r.name,
                r.against.name(),
                r.value,
                r.goal,
                if r.value <= r.goal { "met" } else { "NOT met" }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_of_an_empty_histogram_is_zero() {
        assert_eq!(Latency::of(&histogram().unwrap()), Latency::default());
    }

    #[test]
    fn latency_percentiles_are_in_microseconds() {
        let mut h = histogram().unwrap();
        for ns in 1..=1000u64 {
            h.record(ns * 1000).unwrap();
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 1000);
        assert!((l.p50_us - 500.0).abs() <= 1.0, "{l:?}");
        assert!((l.p99_us - 990.0).abs() <= 1.0, "{l:?}");
        assert!((l.max_us - 1000.0).abs() <= 1.0, "{l:?}");
    }

    #[test]
    fn ratios_need_both_runs_measured() {
        let none = Figures::default();
        assert!(ratios(&none, Some(&none), Some(&none)).is_empty());
        assert!(ratios(&none, None, None).is_empty());
    }

    #[test]
    fn over_skips_a_zero_reference() {
        assert_eq!(over(Some(1.0), Some(0.0)), None);
        assert_eq!(over(Some(1.0), Some(2.0)), Some(0.5));
        assert_eq!(over(None, Some(2.0)), None);
    }
}
