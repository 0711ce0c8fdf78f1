//! The phases `osmium-bench density --phases replay,gets,sets` runs on
//! each server after its fill (besides counting the items held): their
//! flags (`phase_args`), one run's figures ([`Figures`]), the tables and
//! JSON, and the ratios the acceptance names: osmium packing
//! (`compression=cold`, `nodicts`) against `compression=off` and
//! memcached, all from the same invocation.
//!
//! The order on each server: the fill (`sets`: its CPU), the cleaner
//! settling, `gets` (hot and cold keys), the read-back of every key, the
//! depth-1 SETs (`sets`), the replay (`replay`: it writes, so last).

use serde_json::{json, Value};

use super::gets::GetFigures;
use super::replay::ReplayFigures;
use super::sets::SetFigures;
use super::Run;

pub(crate) use super::phase_args::{Phase, PhaseArgs};

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
