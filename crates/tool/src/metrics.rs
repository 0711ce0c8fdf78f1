//! Latency from a server's Prometheus endpoint: `GET /metrics` (ureq) from
//! the address `stats settings` names in `metrics_addr`, the buckets of
//! `osmium_command_duration_seconds{command=...}` read from the text
//! format (prometheus-parse), and percentiles computed from the difference
//! of two scrapes (so they cover the last interval, not the server's life)
//! the way Prometheus' `histogram_quantile` does.

use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

use prometheus_parse::{Scrape, Value};

/// The histogram whose buckets are read.
pub(crate) const HISTOGRAM: &str = "osmium_command_duration_seconds";

/// One command's cumulative buckets: upper bound (seconds, `+Inf` as
/// infinity) → cumulative count, in bound order.
pub(crate) type Buckets = Vec<(f64, f64)>;

/// Every command's buckets.
pub(crate) type Histograms = BTreeMap<String, Buckets>;

/// Fetches `http://addr/metrics` in the text format 0.0.4 and returns the
/// body.
pub(crate) fn scrape(addr: &str) -> io::Result<String> {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(3))
        .build();
    let reply = agent
        .get(&format!("http://{addr}/metrics"))
        .set("Accept", "text/plain;version=0.0.4")
        .call()
        .map_err(|e| io::Error::other(format!("metrics: {e}")))?;
    reply.into_string()
}

/// The `HISTOGRAM` buckets of a text-format body.
pub(crate) fn parse(body: &str) -> Histograms {
    let mut out: Histograms = BTreeMap::new();
    let Ok(scrape) = Scrape::parse(body.lines().map(|l| Ok(l.to_string()))) else {
        return out;
    };
    for sample in scrape.samples {
        let Value::Histogram(counts) = &sample.value else {
            continue;
        };
        if sample.metric != HISTOGRAM {
            continue;
        }
        let Some(command) = sample.labels.get("command") else {
            continue;
        };
        let buckets = out.entry(command.to_string()).or_default();
        buckets.extend(counts.iter().map(|c| (c.less_than, c.count)));
    }
    for buckets in out.values_mut() {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// `now - before`, bucket by bucket (a bucket missing before counts from
/// 0; a counter that went back, a restart, counts from 0 too).
pub(crate) fn delta(now: &Buckets, before: Option<&Buckets>) -> Buckets {
    now.iter()
        .map(|&(le, count)| {
            let old = before
                .and_then(|b| b.iter().find(|(l, _)| *l == le))
                .map_or(0.0, |&(_, c)| c);
            (le, if count >= old { count - old } else { count })
        })
        .collect()
}

/// The sum of several commands' buckets (bounds matched exactly).
pub(crate) fn merge<'a>(all: impl IntoIterator<Item = &'a Buckets>) -> Buckets {
    let mut sum: Vec<(f64, f64)> = Vec::new();
    for buckets in all {
        for &(le, c) in buckets {
            match sum.iter_mut().find(|(l, _)| *l == le) {
                Some(slot) => slot.1 += c,
                None => sum.push((le, c)),
            }
        }
    }
    sum.sort_by(|a, b| a.0.total_cmp(&b.0));
    sum
}

/// The `q` quantile (0..1) of cumulative buckets, in seconds, by linear
/// interpolation inside the bucket that holds it (Prometheus'
/// `histogram_quantile`); `None` without observations. In the `+Inf`
/// bucket it is the highest finite bound.
pub(crate) fn quantile(buckets: &Buckets, q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev_le = 0.0;
    let mut prev_count = 0.0;
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(prev_le);
            }
            let inside = count - prev_count;
            if inside <= 0.0 {
                return Some(le);
            }
            return Some(prev_le + (le - prev_le) * (rank - prev_count) / inside);
        }
        prev_le = le;
        prev_count = count;
    }
    Some(prev_le)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "# HELP osmium_command_duration_seconds x\n\
# TYPE osmium_command_duration_seconds histogram\n\
osmium_command_duration_seconds_bucket{command=\"get\",le=\"0.0001\"} 50\n\
osmium_command_duration_seconds_bucket{command=\"get\",le=\"0.001\"} 90\n\
osmium_command_duration_seconds_bucket{command=\"get\",le=\"+Inf\"} 100\n\
osmium_command_duration_seconds_sum{command=\"get\"} 0.5\n\
osmium_command_duration_seconds_bucket{le=\"0.001\",command=\"set\"} 10\n\
osmium_command_duration_seconds_bucket{le=\"+Inf\",command=\"set\"} 10\n";

    #[test]
    fn parses_and_interpolates() {
        let h = parse(BODY);
        assert_eq!(h["get"].len(), 3);
        assert_eq!(h["set"], vec![(0.001, 10.0), (f64::INFINITY, 10.0)]);
        let get = &h["get"];
        assert!((quantile(get, 0.5).unwrap() - 0.0001).abs() < 1e-12);
        // p70: 20 of the 40 in (0.0001, 0.001].
        let p70 = quantile(get, 0.7).unwrap();
        assert!((p70 - 0.00055).abs() < 1e-9, "{p70}");
        // p99 falls in +Inf: the highest finite bound.
        assert_eq!(quantile(get, 0.99), Some(0.001));
        assert_eq!(quantile(&vec![(1.0, 0.0)], 0.5), None);
    }

    #[test]
    fn deltas_and_merges() {
        let before = vec![(0.001, 5.0), (f64::INFINITY, 5.0)];
        let now = vec![(0.001, 7.0), (f64::INFINITY, 9.0)];
        let d = delta(&now, Some(&before));
        assert_eq!(d, vec![(0.001, 2.0), (f64::INFINITY, 4.0)]);
        let m = merge([&d, &now]);
        assert_eq!(m, vec![(0.001, 9.0), (f64::INFINITY, 13.0)]);
    }
}
