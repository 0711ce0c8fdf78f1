//! `load --vs --cpu-sweep P1,P2,...`: server CPU per request against the
//! offered rate, for every server in one alternated run.
//!
//! A closed-loop run of the workload (its `--conns` and `--depth`) on
//! every server, `--rounds` rounds alternated, gives each server's
//! saturation; the first server's median is the reference rate S (with
//! `--servers memcached,osmium`, memcached's). Then every server runs
//! open loop (`--arrivals uniform|poisson`) at each P % of S, alternated
//! the same way. One table: a row per step and server (the saturation
//! rows first), with CPU per request and latency ratios against the first
//! server; with `--plot DIR`, DIR/cpu-sweep.svg draws CPU per request
//! (top) and p50 and p99 (bottom) against the offered rate.

use super::vs::{describe, measure, print_steps, start_servers, Step, VsOpts};
use super::Workload;
use crate::report::Summary;

/// Runs the sweep; `percents` of the first server's saturation rate.
pub(crate) fn run_cpu_sweep_vs(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
    percents: &[f64],
) -> Result<bool, String> {
    if percents.iter().any(|&p| !(p > 0.0 && p <= 100.0)) {
        return Err("--cpu-sweep takes percentages in (0, 100]".into());
    }
    let groups = start_servers(bins, kinds, w, o)?;
    eprintln!(
        "saturation (closed loop, {} conns x depth {}):",
        w.conns, w.depth
    );
    let closed = Workload {
        rate: None,
        ..w.clone()
    };
    let saturated = measure(&groups, &closed, o.rounds)?;
    let reference = saturated
        .first()
        .map(|s| s.ops_per_sec)
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or("the first server's saturation rate is unknown")?;
    eprintln!("reference saturation: {reference:.0} req/s");
    let mut steps = vec![Step {
        lead: "saturation".into(),
        fields: vec![("offered_percent", "saturation".into())],
        summaries: saturated,
    }];
    let mut points: Vec<(f64, Vec<Summary>)> = Vec::new();
    for &p in percents {
        let rate = reference * p / 100.0;
        eprintln!(
            "{p}% of saturation: offered {rate:.0} req/s ({:?} arrivals):",
            w.arrivals
        );
        let open = Workload {
            rate: Some(rate),
            ..w.clone()
        };
        let summaries = measure(&groups, &open, o.rounds)?;
        points.push((rate, summaries.clone()));
        steps.push(Step {
            lead: format!("{p}% {rate:.0}"),
            fields: vec![("offered_percent", p.into()), ("offered_rps", rate.into())],
            summaries,
        });
    }
    plot(o.plot.as_deref(), w, &points)?;
    print_steps(&steps, "offered", o.json, false, || {
        format!(
            "{}; open loop at % of the first server's saturation ({reference:.0} req/s), {:?} arrivals",
            describe(w, o, &format!("{} B", w.value_size)),
            w.arrivals
        )
    });
    Ok(true)
}

/// `--plot DIR`: DIR/cpu-sweep.svg.
fn plot(
    dir: Option<&std::path::Path>,
    w: &Workload,
    points: &[(f64, Vec<Summary>)],
) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    let Some((_, first)) = points.first() else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let series: Vec<crate::plot::CpuSeries> = first
        .iter()
        .enumerate()
        .map(|(i, s)| crate::plot::CpuSeries {
            name: &s.server,
            points: points
                .iter()
                .map(|(rate, sums)| {
                    let s = &sums[i];
                    (*rate, s.cpu_us_per_req, s.p50_us, s.p99_us)
                })
                .collect(),
        })
        .collect();
    let path = dir.join("cpu-sweep.svg");
    let title = format!(
        "CPU per request, {} B {:.0}% gets, {} conns, {:?} arrivals",
        w.value_size,
        w.get_ratio * 100.0,
        w.conns,
        w.arrivals
    );
    crate::plot::cpu_sweep(&path, &title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
