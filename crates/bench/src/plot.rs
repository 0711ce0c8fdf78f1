//! `load --plot DIR`: SVG charts of a run, drawn with plotters' SVG backend
//! alone (no font libraries: plotters estimates text sizes itself).
//!
//! * [`latency_cdf`]: each server's latency against percentile, from its
//!   HDR histogram, on a log scale of the tail (0, 90, 99, 99.9, 99.99,
//!   99.999: x = log10(1 / (1 − q))) and log-scaled microseconds;
//! * [`rates`]: achieved throughput and p99 latency against the offered
//!   rate of an open-loop `--rates` sweep, a line per server;
//! * [`cpu_sweep`]: server CPU per request, and p50 and p99 latency,
//!   against the offered rate of a `--cpu-sweep`, a colour per server;
//! * [`closed_loop`]: throughput, and p50 and p99 latency, against the
//!   connection count of an `osmium-bench closed` sweep, a colour per
//!   server;
//! * [`timeline`]: a figure per second over a run, a line per series, with
//!   the moments of events marked (`cluster --mode resize`).

use std::path::Path;

use hdrhistogram::Histogram;
use plotters::prelude::*;

/// One server's latency distribution.
pub(crate) struct CdfSeries<'a> {
    pub name: &'a str,
    /// Latencies in ns.
    pub hist: &'a Histogram<u64>,
}

/// One server's figures at each offered rate: (offered req/s, achieved
/// req/s, p99 µs).
pub(crate) struct RateSeries<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64, f64)>,
}

/// One server's figures at each offered rate of a `--cpu-sweep`:
/// (offered req/s, CPU µs per request, p50 µs, p99 µs).
pub(crate) struct CpuSeries<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// One server's figures at each connection count of a closed-loop sweep:
/// (connections, ops/s, p50 µs, p99 µs).
pub(crate) struct ConnSeries<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64, f64, f64)>,
}

/// The deepest percentile drawn: 99.999 (x = 5).
const TAIL_X: f64 = 5.0;

/// The percentile (as "99.9") at x of the tail axis.
fn percentile_label(x: f64) -> String {
    let p = 100.0 * (1.0 - 10f64.powf(-x));
    let s = format!("{p:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// (x, latency µs) points of `hist` from the minimum to 99.999 %.
pub(crate) fn cdf_points(hist: &Histogram<u64>) -> Vec<(f64, f64)> {
    let start = 0.0;
    let steps = 150;
    (0..=steps)
        .map(|i| {
            let x = start + (TAIL_X - start) * i as f64 / steps as f64;
            let q = 1.0 - 10f64.powf(-x);
            (x, hist.value_at_quantile(q).max(1) as f64 / 1000.0)
        })
        .collect()
}

fn color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(23, 190, 207),
    ];
    COLORS[i % COLORS.len()]
}

/// Every chart's legend: upper left, on a translucent white box.
fn draw_legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

/// Writes the latency CDF of every series to `path` (SVG).
pub(crate) fn latency_cdf(path: &Path, title: &str, series: &[CdfSeries]) -> Result<(), String> {
    let curves: Vec<Vec<(f64, f64)>> = series.iter().map(|s| cdf_points(s.hist)).collect();
    let (lo, hi) = curves
        .iter()
        .flatten()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &(_, y)| {
            (lo.min(y), hi.max(y))
        });
    if lo > hi {
        return Err("plot: no latency to draw".into());
    }
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..TAIL_X, ((lo * 0.8)..(hi * 1.25)).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .x_labels(6)
        .y_desc("latency (us)")
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(err)?;
    for (i, (s, curve)) in series.iter().zip(curves).enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(curve, c.stroke_width(2)))
            .map_err(err)?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    draw_legend(&mut chart)?;
    root.present().map_err(err)
}

/// Writes throughput (top) and p99 latency (bottom) against offered rate
/// to `path` (SVG), a line per series.
pub(crate) fn rates(path: &Path, title: &str, series: &[RateSeries]) -> Result<(), String> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let max_rate = all().fold(1.0f64, |m, p| m.max(p.0).max(p.1));
    let (lo, hi) = all().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.2), hi.max(p.2))
    });
    if lo > hi {
        return Err("plot: no rate to draw".into());
    }
    let root = SVGBackend::new(path, (900, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let (top, bottom) = root.split_vertically(430);
    let mut chart = ChartBuilder::on(&top)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..max_rate * 1.05, 0.0..max_rate * 1.05)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered (req/s)")
        .y_desc("achieved (req/s)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 0.0), (max_rate, max_rate)],
            BLACK.mix(0.3),
        ))
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(
                s.points.iter().map(|p| (p.0, p.1)),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|p| Circle::new((p.0, p.1), 3, c.filled())),
            )
            .map_err(err)?;
    }
    draw_legend(&mut chart)?;
    let mut chart = ChartBuilder::on(&bottom)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..max_rate * 1.05, ((lo * 0.8)..(hi * 1.25)).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered (req/s)")
        .y_desc("p99 latency (us)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(
                s.points.iter().map(|p| (p.0, p.2)),
                c.stroke_width(2),
            ))
            .map_err(err)?;
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|p| Circle::new((p.0, p.2), 3, c.filled())),
            )
            .map_err(err)?;
    }
    root.present().map_err(err)
}

/// The powers of two from `lo` to `hi`, the ticks of a log2 connection
/// axis; just `lo` when there is none between them.
fn powers_of_two(lo: f64, hi: f64) -> Vec<f64> {
    let first = lo.max(1.0).log2().ceil() as i32;
    let last = hi.max(1.0).log2().floor() as i32;
    if first > last {
        return vec![lo];
    }
    (first..=last).map(|e| 2f64.powi(e)).collect()
}

/// 1, 2, 5 times the powers of ten from `lo` to `hi`, the ticks of a log
/// latency axis; just `lo` when there is none between them.
fn one_two_five(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let first = lo.max(1e-3).log10().floor() as i32;
    let last = hi.max(1e-3).log10().floor() as i32;
    for exponent in first..=last {
        for step in [1.0, 2.0, 5.0] {
            let t = step * 10f64.powi(exponent);
            if (lo..=hi).contains(&t) {
                ticks.push(t);
            }
        }
    }
    if ticks.is_empty() {
        ticks.push(lo);
    }
    ticks
}

/// Writes ops/s (top) and latency (bottom, log scale: p50 solid, p99
/// dashed) against connections (log2 scale) to `path` (SVG), a colour per
/// series. Points with a figure that is not finite are left out.
pub(crate) fn closed_loop(path: &Path, title: &str, series: &[ConnSeries]) -> Result<(), String> {
    let finite = |p: &&(f64, f64, f64, f64)| {
        p.0 > 0.0 && p.1.is_finite() && p.2.is_finite() && p.3.is_finite()
    };
    let curves: Vec<Vec<(f64, f64, f64, f64)>> = series
        .iter()
        .map(|s| s.points.iter().filter(finite).copied().collect())
        .collect();
    let all = || curves.iter().flatten();
    let (min_conns, max_conns) = all().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.0), hi.max(p.0))
    });
    if min_conns > max_conns {
        return Err("plot: no connection count to draw".into());
    }
    let max_ops = all().fold(1.0f64, |m, p| m.max(p.1));
    let (lo, hi) = all().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.2).min(p.3), hi.max(p.2).max(p.3))
    });
    let (lo, hi) = (lo.max(0.01), hi.max(0.01));
    let x_range = || {
        ((min_conns / 1.25)..(max_conns * 1.25))
            .log_scale()
            .with_key_points(powers_of_two(min_conns, max_conns))
    };
    let root = SVGBackend::new(path, (900, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let (top, bottom) = root.split_vertically(430);
    let mut chart = ChartBuilder::on(&top)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range(), 0.0..max_ops * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("connections")
        .y_desc("throughput (ops/s)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(err)?;
    for (i, (s, points)) in series.iter().zip(&curves).enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.0, p.1)),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Circle::new((p.0, p.1), 3, c.filled())),
            )
            .map_err(err)?;
    }
    draw_legend(&mut chart)?;
    let mut chart = ChartBuilder::on(&bottom)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(
            x_range(),
            ((lo * 0.8)..(hi * 1.25))
                .log_scale()
                .with_key_points(one_two_five(lo * 0.8, hi * 1.25)),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("connections")
        .y_desc("latency (us): p50 solid, p99 dashed")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(err)?;
    for (i, (s, points)) in series.iter().zip(&curves).enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.0, p.2)),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(format!("{} p50", s.name))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(DashedLineSeries::new(
                points.iter().map(|p| (p.0, p.3)),
                6,
                4,
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(format!("{} p99", s.name))
            .legend(move |(x, y)| {
                plotters::element::DashedPathElement::new(
                    vec![(x, y), (x + 20, y)],
                    6,
                    4,
                    c.stroke_width(2),
                )
            });
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Circle::new((p.0, p.2), 3, c.filled())),
            )
            .map_err(err)?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| TriangleMarker::new((p.0, p.3), 4, c.filled())),
            )
            .map_err(err)?;
    }
    draw_legend(&mut chart)?;
    root.present().map_err(err)
}

/// One series of a [`timeline`]: (seconds, value) points.
pub(crate) struct TimeSeries<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// Writes `series` against time to `path` (SVG), a line per series, with
/// a dashed vertical line at every second of `marks`.
pub(crate) fn timeline(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[TimeSeries],
    marks: &[f64],
) -> Result<(), String> {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let max_x = all().fold(1.0f64, |m, p| m.max(p.0));
    let max_y = all()
        .filter(|p| p.1.is_finite())
        .fold(1.0f64, |m, p| m.max(p.1));
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..max_x * 1.02, 0.0..max_y * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(err)?;
    for &m in marks {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(m, 0.0), (m, max_y * 1.1)],
                6,
                4,
                BLACK.mix(0.5).stroke_width(1),
            ))
            .map_err(err)?;
    }
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied().filter(|p| p.1.is_finite()),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Writes CPU per request (top) and latency (bottom, log scale: p50
/// solid, p99 dashed) against offered rate to `path` (SVG), a colour per
/// series. Points with a figure that is not finite are left out.
pub(crate) fn cpu_sweep(path: &Path, title: &str, series: &[CpuSeries]) -> Result<(), String> {
    let finite = |p: &&(f64, f64, f64, f64)| {
        p.1.is_finite() && p.2.is_finite() && p.3.is_finite() && p.2 > 0.0
    };
    let all = || series.iter().flat_map(|s| s.points.iter().filter(finite));
    let max_rate = all().fold(1.0f64, |m, p| m.max(p.0));
    let max_cpu = all().fold(0.0f64, |m, p| m.max(p.1));
    let (lo, hi) = all().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.2), hi.max(p.3))
    });
    if lo > hi {
        return Err("plot: no CPU figure to draw".into());
    }
    let root = SVGBackend::new(path, (900, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let (top, bottom) = root.split_vertically(430);
    let mut chart = ChartBuilder::on(&top)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..max_rate * 1.05, 0.0..max_cpu * 1.15)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered (req/s)")
        .y_desc("server CPU per request (us)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        let pts: Vec<(f64, f64)> = s.points.iter().filter(finite).map(|p| (p.0, p.1)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
            .map_err(err)?;
    }
    draw_legend(&mut chart)?;
    let mut chart = ChartBuilder::on(&bottom)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..max_rate * 1.05, ((lo * 0.8)..(hi * 1.25)).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered (req/s)")
        .y_desc("latency (us): p50 solid, p99 dashed")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        let p50: Vec<(f64, f64)> = s.points.iter().filter(finite).map(|p| (p.0, p.2)).collect();
        let p99: Vec<(f64, f64)> = s.points.iter().filter(finite).map(|p| (p.0, p.3)).collect();
        chart
            .draw_series(LineSeries::new(p50, c.stroke_width(2)))
            .map_err(err)?;
        chart
            .draw_series(DashedLineSeries::new(p99, 6, 4, c.stroke_width(2)))
            .map_err(err)?;
    }
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x of percentile q on the tail axis.
    fn tail_x(q: f64) -> f64 {
        -(1.0 - q).log10()
    }

    #[test]
    fn tail_axis_labels_percentiles() {
        assert_eq!(percentile_label(tail_x(0.5)), "50");
        assert_eq!(percentile_label(1.0), "90");
        assert_eq!(percentile_label(3.0), "99.9");
        assert_eq!(percentile_label(5.0), "99.999");
    }

    #[test]
    fn charts_are_written_as_svg() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for i in 1..10_000u64 {
            h.record(10_000 + i * 10).unwrap();
        }
        let points = cdf_points(&h);
        assert!(points.windows(2).all(|w| w[0].1 <= w[1].1));
        let dir = std::env::temp_dir().join(format!("osmium-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cdf = dir.join("cdf.svg");
        latency_cdf(
            &cdf,
            "t",
            &[CdfSeries {
                name: "a",
                hist: &h,
            }],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&cdf).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("99.999") && svg.contains("polyline"));
        let r = dir.join("rates.svg");
        let series = [RateSeries {
            name: "a",
            points: vec![(1000.0, 990.0, 50.0), (2000.0, 1900.0, 80.0)],
        }];
        rates(&r, "t", &series).unwrap();
        assert!(std::fs::read_to_string(&r).unwrap().contains("offered"));
        let closed = dir.join("closed.svg");
        let series = [
            ConnSeries {
                name: "memcached",
                points: vec![(1.0, 20_000.0, 40.0, 90.0), (64.0, 150_000.0, 400.0, 900.0)],
            },
            ConnSeries {
                name: "osmium",
                points: vec![(1.0, 21_000.0, 38.0, 85.0), (64.0, f64::NAN, 1.0, 1.0)],
            },
        ];
        closed_loop(&closed, "t", &series).unwrap();
        let tl = dir.join("timeline.svg");
        let lines = [TimeSeries {
            name: "warm",
            points: vec![(0.5, 10.0), (1.5, 900.0), (2.5, f64::NAN)],
        }];
        timeline(&tl, "t", "database reads per second", &lines, &[1.0]).unwrap();
        let svg = std::fs::read_to_string(&tl).unwrap();
        assert!(svg.contains("database reads per second") && svg.contains("warm"));
        let svg = std::fs::read_to_string(&closed).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("connections"),
            "{svg}"
        );
        assert!(svg.contains("osmium p99") && svg.contains("memcached p50"));
        // The x ticks are the powers of two from 1 to 64.
        assert!(svg.contains("\n64\n") && svg.contains("\n32\n"));
        // The latency ticks are 1-2-5 steps.
        assert!(svg.contains("\n50\n") && svg.contains("\n500\n"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn connection_ticks_are_powers_of_two() {
        assert_eq!(
            powers_of_two(1.0, 64.0),
            [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
        );
        assert_eq!(powers_of_two(3.0, 5.0), [4.0]);
        assert_eq!(powers_of_two(3.0, 3.0), [3.0]);
        assert_eq!(
            one_two_five(30.0, 1125.0),
            [50.0, 100.0, 200.0, 500.0, 1000.0]
        );
        assert_eq!(one_two_five(6.0, 9.0), [6.0]);
    }
}
