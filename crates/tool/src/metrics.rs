//! Latency from a server's Prometheus endpoint: a plain HTTP/1.0 `GET
//! /metrics` to the address `stats settings` names in `metrics_addr`,
//! the buckets of `osmium_command_duration_seconds{command=...}` read
//! from the text format, and percentiles computed from the difference of
//! two scrapes (so they cover the last interval, not the server's life)
//! the way Prometheus' `histogram_quantile` does.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The histogram whose buckets are read.
pub const HISTOGRAM: &str = "osmium_command_duration_seconds";

/// One command's cumulative buckets: upper bound (seconds, `+Inf` as
/// infinity) → cumulative count, in bound order.
pub type Buckets = Vec<(f64, f64)>;

/// Every command's buckets.
pub type Histograms = BTreeMap<String, Buckets>;

/// Fetches `http://addr/metrics` and returns the body.
pub fn scrape(addr: &str) -> io::Result<String> {
    let timeout = Duration::from_secs(3);
    let sa = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::other(format!("{addr}: no address")))?;
    let mut s = TcpStream::connect_timeout(&sa, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET /metrics HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain;version=0.0.4\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::other("metrics: no HTTP header"))?;
    let status = head.lines().next().unwrap_or("");
    if status.split(' ').nth(1) != Some("200") {
        return Err(io::Error::other(format!("metrics: {status}")));
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    Ok(if chunked {
        dechunk(body)
    } else {
        body.to_string()
    })
}

/// A chunked body's data.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = size.split(';').next().unwrap_or("").trim();
        let Ok(n) = usize::from_str_radix(size, 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// A label's value in `{a="x",b="y"}` (no escapes inside the values we
/// read: command names and numbers).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == name).then(|| v.trim().trim_matches('"'))
    })
}

/// The `HISTOGRAM` buckets of a text-format (or OpenMetrics) body.
pub fn parse(body: &str) -> Histograms {
    let prefix = format!("{HISTOGRAM}_bucket{{");
    let mut out: Histograms = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let value = value.split_whitespace().next().unwrap_or("");
        let (Some(command), Some(le)) = (label(labels, "command"), label(labels, "le")) else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            match le.parse() {
                Ok(v) => v,
                Err(_) => continue,
            }
        };
        if let Ok(count) = value.parse::<f64>() {
            out.entry(command.to_string())
                .or_default()
                .push((le, count));
        }
    }
    for buckets in out.values_mut() {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// `now - before`, bucket by bucket (a bucket missing before counts from
/// 0; a counter that went back, a restart, counts from 0 too).
pub fn delta(now: &Buckets, before: Option<&Buckets>) -> Buckets {
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
pub fn merge<'a>(all: impl IntoIterator<Item = &'a Buckets>) -> Buckets {
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
pub fn quantile(buckets: &Buckets, q: f64) -> Option<f64> {
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
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
