//! Latency percentiles ([`Latency`]) of the density phases' histograms of
//! nanoseconds ([`histogram`]).

use hdrhistogram::Histogram;
use serde_json::{json, Value};

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
}
