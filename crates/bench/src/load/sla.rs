//! `load --sla`: the highest open-loop rate at which 99.5 % of requests
//! finish within 1 ms, by bisection, for random and hot keys, against one
//! server or (`--vs`) several alternated.

use super::vs::{chart_title, start_servers};
use super::*;

/// How `--sla` searches: the highest open-loop rate at which the
/// workload's `quantile` of requests finish within `bound_us`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlaOpts {
    pub bound_us: f64,
    /// The hot-key distribution (the random one is the workload's).
    pub hot: KeyDist,
    /// Bisection steps after the capacity estimate.
    pub steps: usize,
    /// Measured seconds per step (after the workload's warm-up).
    pub step_duration: Duration,
    /// Runs of a step that went over before its rate counts as over.
    pub retries: usize,
}

/// The SLA rate of one distribution on `addr`: estimates capacity with a
/// short closed-loop run (depth 1), then searches the open-loop rate from
/// 1.5 × capacity (an open loop pipelines, so it can pass more than the
/// closed loop's capacity) with [`search_rate`]. A rate passes when its
/// quantile latency is within the bound and the generator kept up with it
/// (achieved ≥ 95 % of it), in its first run or in one of `retries` more
/// (this shared VM pauses now and then for tens of milliseconds, which
/// alone puts a 2 s step over 1 ms at the 99.5th percentile, at any rate).
/// Returns the highest passing rate and that run's outcome.
pub(crate) fn sla_rate(targets: &Targets, w: &Workload, o: &SlaOpts) -> Result<SlaSearch, String> {
    let probe = Workload {
        rate: None,
        depth: 1,
        duration: Duration::from_secs(1),
        warmup: Duration::from_millis(300),
        ..w.clone()
    };
    let no_cpu = Targets {
        pids: Vec::new(),
        ..targets.clone()
    };
    let capacity = run(&no_cpu, &probe)?.ops_per_sec();
    let mut best: Option<(f64, Outcome)> = None;
    let mut steps = Vec::new();
    let found = search_rate(capacity * 1.5, o.steps, |rate| {
        let step = Workload {
            rate: Some(rate),
            duration: o.step_duration,
            ..w.clone()
        };
        let mut tries = 0;
        let (out, pass) = loop {
            let out = run(targets, &step)?;
            let pass = out.pq_us <= o.bound_us && out.ops_per_sec() >= 0.95 * rate;
            eprintln!(
                "  {} at {:>9.0}/s: achieved {:>9.0}/s, p{} {:>8.1} us: {}",
                w.dist,
                rate,
                out.ops_per_sec(),
                w.quantile * 100.0,
                out.pq_us,
                if pass { "within" } else { "over" }
            );
            if pass || tries == o.retries {
                break (out, pass);
            }
            tries += 1;
        };
        steps.push((rate, out.ops_per_sec(), out.p99_us));
        if pass && best.as_ref().is_none_or(|(r, _)| rate > *r) {
            best = Some((rate, out));
        }
        Ok(pass)
    })?;
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(SlaSearch {
        rate: found,
        best: best.map(|(_, out)| out),
        steps,
    })
}

/// Growth steps [`search_rate`] takes at most before it gives up looking
/// for a failing rate (1.5^8 ≈ 26 × the first rate).
const MAX_GROWTH_STEPS: usize = 8;
/// Bisection steps [`search_rate`] takes at least once it has a failing
/// rate above a passing one.
const MIN_BISECTION_STEPS: usize = 3;

/// Searches for the highest rate that `passes`, from `first`: while every
/// rate has passed, the next is 1.5 × the last (so a fast server is not
/// capped by a range guessed in advance); once one fails, bisects between
/// the highest pass and the lowest failure. Takes `steps` steps in all,
/// or more when the growth used them up: then `MIN_BISECTION_STEPS` after
/// the first failure. Returns the highest passing rate, 0 if none passed.
pub(crate) fn search_rate(
    first: f64,
    steps: usize,
    mut passes: impl FnMut(f64) -> Result<bool, String>,
) -> Result<f64, String> {
    let (mut lo, mut hi) = (0.0f64, None::<f64>);
    let mut rate = first;
    let mut taken = 0;
    // Steps taken since the first failure.
    let mut bisecting = 0;
    loop {
        if passes(rate)? {
            lo = lo.max(rate);
        } else {
            hi = Some(hi.map_or(rate, |h| h.min(rate)));
        }
        taken += 1;
        match hi {
            None if taken > MAX_GROWTH_STEPS => return Ok(lo),
            None => rate *= 1.5,
            Some(h) => {
                if taken >= steps.max(1)
                    && bisecting >= MIN_BISECTION_STEPS.min(steps.saturating_sub(1))
                {
                    return Ok(lo);
                }
                bisecting += 1;
                rate = (lo + h) / 2.0;
            }
        }
    }
}

/// What [`sla_rate`] found.
pub(crate) struct SlaSearch {
    /// The highest rate that passed (0 if none did).
    pub rate: f64,
    /// That step's outcome.
    pub best: Option<Outcome>,
    /// Every step, by offered rate: (offered, achieved, p99 µs).
    pub steps: Vec<(f64, f64, f64)>,
}

/// `--plot DIR` with `--sla`: writes DIR/sla.svg, throughput and p99
/// against the offered rate of every bisection step, a line per server
/// and key distribution.
pub(crate) fn plot_sla(
    dir: Option<&std::path::Path>,
    title: &str,
    series: &[(String, &SlaSearch)],
) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let series: Vec<crate::plot::RateSeries> = series
        .iter()
        .map(|(name, search)| crate::plot::RateSeries {
            name,
            points: search.steps.clone(),
        })
        .collect();
    let path = dir.join("sla.svg");
    crate::plot::rates(&path, title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// One server's SLA figures as JSON: `server`, `random_rps`, `hot_rps`,
/// `overall` (0.8 × random + 0.2 × hot), with `first` (the first server's
/// overall) `overall_vs_first`, and `cpu_us_per_req` of the best random
/// step when there was one.
pub(crate) fn sla_json(
    server: &str,
    random: f64,
    hot: f64,
    first: Option<f64>,
    random_out: Option<&Outcome>,
) -> serde_json::Value {
    let overall = 0.8 * random + 0.2 * hot;
    let mut row = serde_json::Map::new();
    row.insert("server".into(), server.into());
    row.insert("random_rps".into(), random.into());
    row.insert("hot_rps".into(), hot.into());
    row.insert("overall".into(), overall.into());
    if let Some(first) = first {
        row.insert("overall_vs_first".into(), (overall / first).into());
    }
    let cpu = random_out
        .and_then(|o| o.cpu_us_per_req)
        .unwrap_or(f64::NAN);
    row.insert("cpu_us_per_req".into(), cpu.into());
    serde_json::Value::Object(row)
}

/// `--sla` on each server of `kinds` (started as for `--vs`, one at a
/// time in the order given): the random-key and hot-key SLA rates and
/// Overall = 0.8 × random + 0.2 × hot (seed 002), with ratios against the
/// first server.
pub(crate) fn run_sla(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    vs: &VsOpts,
    o: &SlaOpts,
) -> Result<bool, String> {
    // Every round searches each server in turn, the order alternating
    // (A B, B A, ...); each server's random and hot rates are the medians
    // over the rounds, so one stall of the shared machine in one step
    // does not decide the score.
    let mut runs: Vec<(Vec<SlaSearch>, Vec<SlaSearch>)> =
        kinds.iter().map(|_| (Vec::new(), Vec::new())).collect();
    for round in 0..vs.rounds.max(1) {
        let mut order: Vec<usize> = (0..kinds.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let kind = kinds[i];
            // One kind at a time: the others are not running meanwhile.
            let group = start_servers(bins, &[kind], w, vs)?.remove(0);
            eprintln!("round {} {kind}:", round + 1);
            let target = group.targets();
            let random = sla_rate(&target, w, o)?;
            let hot_w = Workload {
                dist: o.hot,
                ..w.clone()
            };
            let hot = sla_rate(&target, &hot_w, o)?;
            group.check_alive()?;
            runs[i].0.push(random);
            runs[i].1.push(hot);
        }
    }
    let median = |mut v: Vec<SlaSearch>| {
        v.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        // The lower middle for an even count.
        v.swap_remove((v.len() - 1) / 2)
    };
    let rows: Vec<_> = kinds
        .iter()
        .zip(runs)
        .map(|(&k, (random, hot))| (k, median(random), median(hot)))
        .collect();
    let overall = |r: &SlaSearch, h: &SlaSearch| 0.8 * r.rate + 0.2 * h.rate;
    let first = rows.first().map_or(f64::NAN, |(_, r, h)| overall(r, h));
    let series: Vec<(String, &SlaSearch)> = rows
        .iter()
        .flat_map(|(k, r, h)| [(format!("{k} random"), r), (format!("{k} hot"), h)])
        .collect();
    plot_sla(
        vs.plot.as_deref(),
        &format!(
            "SLA steps: {}",
            chart_title(w, &format!("{} B", w.value_size))
        ),
        &series,
    )?;
    if vs.json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(k, r, h)| sla_json(k.name(), r.rate, h.rate, Some(first), r.best.as_ref()))
            .collect();
        println!("{}", serde_json::Value::Array(out));
        return Ok(true);
    }
    println!(
        "SLA: {}% of requests within {} us; random keys {}, hot keys {}; {} connections, {:.0}% gets, {} B values, {:?}; servers -t {} -m {}{}; median of {} round(s)",
        w.quantile * 100.0,
        o.bound_us,
        w.dist,
        o.hot,
        w.conns,
        w.get_ratio * 100.0,
        w.value_size,
        w.protocol,
        vs.threads,
        vs.memory_mb,
        Pin::describe(vs.pin),
        vs.rounds.max(1)
    );
    println!(
        "{:>10} {:>14} {:>14} {:>14} {:>10} {:>12}",
        "server", "random req/s", "hot req/s", "overall", "vs first", "cpu us/req"
    );
    for (k, r, h) in &rows {
        println!(
            "{:>10} {:>14.0} {:>14.0} {:>14.0} {:>10.3} {:>12.2}",
            k.name(),
            r.rate,
            h.rate,
            overall(r, h),
            overall(r, h) / first,
            r.best
                .as_ref()
                .and_then(|o| o.cpu_us_per_req)
                .unwrap_or(f64::NAN)
        );
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs [`search_rate`] against a server that passes every rate up to
    /// `limit`; returns the result and the rates tried.
    fn search(first: f64, steps: usize, limit: f64) -> (f64, Vec<f64>) {
        let mut tried = Vec::new();
        let found = search_rate(first, steps, |rate| {
            tried.push(rate);
            Ok(rate <= limit)
        })
        .unwrap();
        (found, tried)
    }

    #[test]
    fn a_failing_first_rate_bisects_below_it_in_the_steps_given() {
        let (found, tried) = search(1000.0, 7, 400.0);
        assert_eq!(tried.len(), 7);
        assert_eq!(tried[1], 500.0);
        assert!(found <= 400.0 && found > 400.0 - 1000.0 / 64.0, "{found}");
    }

    #[test]
    fn passing_rates_grow_past_the_first_until_one_fails() {
        let (found, tried) = search(1000.0, 7, 3000.0);
        assert_eq!(&tried[..4], &[1000.0, 1500.0, 2250.0, 3375.0]);
        assert_eq!(tried.len(), 7);
        assert!(found <= 3000.0 && found > 2900.0, "{found}");
    }

    #[test]
    fn a_failure_late_in_the_growth_still_gets_bisection_steps() {
        let limit = 1000.0 * 1.5f64.powi(6) * 1.2;
        let (found, tried) = search(1000.0, 7, limit);
        assert_eq!(tried.len(), 8 + MIN_BISECTION_STEPS);
        assert!(found <= limit && found > 0.9 * limit, "{found}");
    }

    #[test]
    fn growth_stops_when_nothing_fails() {
        let (found, tried) = search(1000.0, 7, f64::INFINITY);
        assert_eq!(tried.len(), MAX_GROWTH_STEPS + 1);
        assert_eq!(found, *tried.last().unwrap());
    }

    #[test]
    fn nothing_passing_is_zero() {
        let (found, tried) = search(1000.0, 5, 0.0);
        assert_eq!(tried.len(), 5);
        assert_eq!(found, 0.0);
    }
}
