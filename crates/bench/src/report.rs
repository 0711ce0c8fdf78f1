//! What `load` prints: the figures of one server (one run, or the medians
//! over `--vs` rounds) as a [`Summary`], shown as a table row or as a JSON
//! object with the same field names in every mode (single server, `--vs`,
//! `--rate`, `--sla`, `--sweep`, `--targets`).

use hdrhistogram::Histogram;
use serde_json::{Map, Value};

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    pub requests: u64,
    pub seconds: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Latency at the workload's `quantile`.
    pub pq_us: f64,
    /// Server CPU per request (µs), when the server's PID was known.
    pub cpu_us_per_req: Option<f64>,
    /// Gets measured, and those answered with a miss (none after a
    /// preload).
    pub gets: u64,
    pub misses: u64,
    /// Sets sent because a get missed (cache-aside), measured.
    pub fills: u64,
    /// The latencies measured (ns), for plots.
    pub latency: Option<Histogram<u64>>,
}

impl Outcome {
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    /// Misses per get seen by the client (NaN without gets).
    pub(crate) fn miss_ratio(&self) -> f64 {
        self.misses as f64 / self.gets as f64
    }
}

/// The figures of one server: medians over the runs it was given.
#[derive(Clone, Debug)]
pub(crate) struct Summary {
    /// `memcached`, `osmium`, `floor`, or the address loaded.
    pub server: String,
    pub ops_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Server CPU per request (NaN when the PID is not known).
    pub cpu_us_per_req: f64,
    /// Misses per get seen by the client (NaN without gets).
    pub miss_ratio: f64,
    /// Gets, misses and cache-aside fills, summed over the runs.
    pub gets: u64,
    pub misses: u64,
    pub fills: u64,
    pub runs: usize,
    /// The latencies (ns) of all the runs together, for plots.
    pub latency: Option<Histogram<u64>>,
}

impl Summary {
    /// The medians of `runs` (NaN figures when there is none).
    pub(crate) fn of(server: &str, runs: &[Outcome]) -> Summary {
        let med = |f: &dyn Fn(&Outcome) -> f64| {
            crate::median(runs.iter().map(f).collect()).unwrap_or(f64::NAN)
        };
        Summary {
            server: server.to_string(),
            ops_per_sec: med(&|o| o.ops_per_sec()),
            p50_us: med(&|o| o.p50_us),
            p99_us: med(&|o| o.p99_us),
            p999_us: med(&|o| o.p999_us),
            cpu_us_per_req: med(&|o| o.cpu_us_per_req.unwrap_or(f64::NAN)),
            miss_ratio: med(&|o| o.miss_ratio()),
            gets: runs.iter().map(|o| o.gets).sum(),
            misses: runs.iter().map(|o| o.misses).sum(),
            fills: runs.iter().map(|o| o.fills).sum(),
            runs: runs.len(),
            latency: runs.iter().filter_map(|o| o.latency.as_ref()).fold(
                None,
                |acc: Option<Histogram<u64>>, h| match acc {
                    None => Some(h.clone()),
                    Some(mut a) => {
                        a.add(h).ok();
                        Some(a)
                    }
                },
            ),
        }
    }

    /// The JSON object of this summary; with `first` (the first server of
    /// a comparison) and `floor` (the floor server's), the CPU ratios
    /// `cpu_vs_<first>` and `cpu_vs_floor`.
    pub(crate) fn json(
        &self,
        first: Option<&Summary>,
        floor: Option<&Summary>,
    ) -> Map<String, Value> {
        let mut row = Map::new();
        row.insert("server".into(), self.server.clone().into());
        for (name, v) in [
            ("ops_per_sec", self.ops_per_sec),
            ("p50_us", self.p50_us),
            ("p99_us", self.p99_us),
            ("p999_us", self.p999_us),
            ("cpu_us_per_req", self.cpu_us_per_req),
            ("miss_ratio", self.miss_ratio),
        ] {
            row.insert(name.into(), v.into());
        }
        for (name, v) in [
            ("gets", self.gets),
            ("misses", self.misses),
            ("fills", self.fills),
            ("runs", self.runs as u64),
        ] {
            row.insert(name.into(), v.into());
        }
        if let Some(first) = first {
            row.insert(
                format!("cpu_vs_{}", first.server),
                (self.cpu_us_per_req / first.cpu_us_per_req).into(),
            );
        }
        if let Some(floor) = floor {
            row.insert(
                "cpu_vs_floor".into(),
                (self.cpu_us_per_req / floor.cpu_us_per_req).into(),
            );
        }
        row
    }
}

/// The header of [`table_row`]'s columns; `lead` names a first column
/// (e.g. the value size of a sweep), `misses` adds the miss ratio.
pub(crate) fn table_header(lead: Option<&str>, first: &str, misses: bool) -> String {
    let mut line = String::new();
    if let Some(lead) = lead {
        line.push_str(&format!("{lead:>9} "));
    }
    line.push_str(&format!(
        "{:>10} {:>12} {:>9} {:>9} {:>9} {:>12} {:>10} {:>10}",
        "server",
        "ops/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "cpu us/req",
        format!("cpu/{first}").chars().take(10).collect::<String>(),
        "cpu/floor"
    ));
    if misses {
        line.push_str(&format!(" {:>10}", "miss ratio"));
    }
    line
}

/// One server's row under [`table_header`].
pub(crate) fn table_row(
    lead: Option<&str>,
    s: &Summary,
    first: &Summary,
    floor: Option<&Summary>,
    misses: bool,
) -> String {
    let mut line = String::new();
    if let Some(lead) = lead {
        line.push_str(&format!("{lead:>9} "));
    }
    line.push_str(&format!(
        "{:>10} {:>12.0} {:>9.1} {:>9.1} {:>9.1} {:>12.2} {:>10.3} {:>10}",
        s.server,
        s.ops_per_sec,
        s.p50_us,
        s.p99_us,
        s.p999_us,
        s.cpu_us_per_req,
        s.cpu_us_per_req / first.cpu_us_per_req,
        // "-" when the run has no floor server to compare with.
        floor.map_or("-".to_string(), |f| format!(
            "{:.3}",
            s.cpu_us_per_req / f.cpu_us_per_req
        ))
    ));
    if misses {
        line.push_str(&format!(" {:>10.4}", s.miss_ratio));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(requests: u64, cpu: f64, gets: u64, misses: u64) -> Outcome {
        Outcome {
            requests,
            seconds: 1.0,
            p50_us: 10.0,
            p99_us: 20.0,
            p999_us: 30.0,
            pq_us: 25.0,
            cpu_us_per_req: Some(cpu),
            gets,
            misses,
            fills: misses,
            latency: None,
        }
    }

    #[test]
    fn summaries_take_medians_and_json_has_the_ratios() {
        let a = Summary::of(
            "memcached",
            &[outcome(100, 2.0, 10, 5), outcome(300, 4.0, 10, 1)],
        );
        assert_eq!(a.ops_per_sec, 200.0);
        assert_eq!(a.cpu_us_per_req, 3.0);
        assert_eq!(a.miss_ratio, 0.3);
        assert_eq!((a.gets, a.misses, a.fills), (20, 6, 6));
        let b = Summary::of("floor", &[outcome(100, 1.5, 0, 0)]);
        let row = b.json(Some(&a), Some(&b));
        assert_eq!(row["server"], "floor");
        assert_eq!(row["cpu_vs_memcached"], 0.5);
        assert_eq!(row["cpu_vs_floor"], 1.0);
        assert!(row["miss_ratio"].is_null(), "no gets: NaN, null in JSON");
        let row = table_row(Some("64"), &b, &a, None, true);
        assert!(row.contains("floor"));
        // Without a floor server the column says so instead of NaN.
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[8], "-", "{row}");
        assert!(table_row(None, &b, &a, Some(&b), false).ends_with("1.000"));
    }
}
