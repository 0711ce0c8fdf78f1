//! The server stats `churn` shows: the optional engine stats (osmium's
//! live/dead bytes and compaction counters; `-` where a server has none),
//! the flash stats of `--flash`, any other stat whose name looks like one
//! of those (so a new counter shows up without a code change), their table
//! cells and legend, a stats sample, and `stats` as JSON (every line).

use std::collections::HashMap;

use serde_json::{json, Map, Value};

/// A `stats` reply.
pub(crate) type Stats = HashMap<String, String>;

/// Engine stats of the sample tables, in this order.
pub(crate) const ENGINE: [&str; 6] = [
    "live_bytes",
    "dead_bytes",
    "segments_compacted",
    "compact_bytes_copied",
    "evicted_live_bytes",
    "reclaimed_dead_bytes",
];

/// Flash stats of the tables with `--flash`, in this order.
pub(crate) const FLASH: [&str; 7] = [
    "extstore_objects_used",
    "extstore_bytes_used",
    "extstore_bytes_written",
    "extstore_page_reclaims",
    "extstore_objects_evicted",
    "extstore_compact_rescues",
    "extstore_write_amplification",
];

/// The short column header of a stat of [`ENGINE`] or [`FLASH`].
pub(crate) fn header(name: &str) -> &'static str {
    match name {
        "live_bytes" => "live MiB",
        "dead_bytes" => "dead MiB",
        "segments_compacted" => "segs cmp",
        "compact_bytes_copied" => "cmp cp MiB",
        "evicted_live_bytes" => "ev live MiB",
        "reclaimed_dead_bytes" => "recl dead MiB",
        "extstore_objects_used" => "fl objs",
        "extstore_bytes_used" => "fl used MiB",
        "extstore_bytes_written" => "fl wr MiB",
        "extstore_page_reclaims" => "pg recl",
        "extstore_objects_evicted" => "fl evict",
        "extstore_compact_rescues" => "fl rescue",
        "extstore_write_amplification" => "wr amp",
        _ => "?",
    }
}

/// The columns of the tables.
pub(crate) fn columns(flash: bool) -> Vec<&'static str> {
    let mut c = ENGINE.to_vec();
    if flash {
        c.extend(FLASH);
    }
    c
}

/// What the short headers stand for.
pub(crate) fn legend(flash: bool) -> String {
    let parts: Vec<String> = columns(flash)
        .iter()
        .map(|n| format!("{} = {n}", header(n)))
        .collect();
    format!(
        "columns: {} (MiB columns in MiB; `-`: the server does not report it)",
        parts.join(", ")
    )
}

/// A stat as a table cell: bytes (a name with `bytes` in it) in MiB,
/// others as reported, `-` when absent.
pub(crate) fn cell(stats: &Stats, name: &str) -> String {
    match stats.get(name) {
        None => "-".into(),
        Some(v) if name.contains("bytes") => v
            .parse::<u64>()
            .map_or_else(|_| v.clone(), |b| format!("{:.1}", crate::mib(b))),
        Some(v) => v.clone(),
    }
}

/// Is `name` an engine stat of the kind [`ENGINE`] lists (compaction,
/// live or dead bytes)?
fn engine_like(name: &str) -> bool {
    name.starts_with("compact_")
        || name.starts_with("segments_")
        || name == "live_bytes"
        || name == "dead_bytes"
        || name.ends_with("_dead_bytes")
        || name.ends_with("_live_bytes")
}

/// Is `name` a flash stat of the kind `--flash` reports in addition?
fn flash_like(name: &str) -> bool {
    name.starts_with("extstore_compact_")
        || name.starts_with("extstore_dead")
        || name == "extstore_write_amplification"
}

/// Stats in `stats` that look like [`ENGINE`]'s (and with `flash`,
/// [`FLASH`]'s) but are not in the tables: (name, value), sorted.
pub(crate) fn extras(stats: &Stats, flash: bool) -> Vec<(String, String)> {
    let shown = columns(flash);
    let mut out: Vec<(String, String)> = stats
        .iter()
        .filter(|(n, _)| engine_like(n) || (flash && flash_like(n)))
        .filter(|(n, _)| !shown.contains(&n.as_str()))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    out.sort();
    out
}

/// `stats` as a JSON object, numbers as numbers.
pub(crate) fn json(stats: &Stats) -> Value {
    let mut names: Vec<&String> = stats.keys().collect();
    names.sort();
    let mut m = Map::new();
    for n in names {
        let v = &stats[n];
        let value = if let Ok(i) = v.parse::<u64>() {
            i.into()
        } else if let Ok(f) = v.parse::<f64>() {
            crate::flash::json_f64(Some(f))
        } else {
            v.clone().into()
        };
        m.insert(n.clone(), value);
    }
    Value::Object(m)
}

/// The fixed engine (and flash) stats of `stats`, null when absent.
pub(crate) fn optional_json(stats: &Stats, flash: bool) -> Value {
    let mut m = Map::new();
    for n in columns(flash) {
        m.insert(
            n.into(),
            stats
                .get(n)
                .and_then(|v| v.parse::<f64>().ok())
                .map_or(Value::Null, |f| crate::flash::json_f64(Some(f))),
        );
    }
    for (n, v) in extras(stats, flash) {
        m.insert(n, v.parse::<f64>().map_or(Value::String(v), Value::from));
    }
    Value::Object(m)
}

/// A numeric stat, None when absent.
pub(crate) fn num(stats: &Stats, name: &str) -> Option<u64> {
    stats.get(name)?.parse().ok()
}

/// The same, 0 when absent.
pub(crate) fn num0(stats: &Stats, name: &str) -> u64 {
    num(stats, name).unwrap_or(0)
}

/// One stats sample taken while a workload ran.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    /// Seconds since the phase started.
    pub secs: f64,
    /// Operations the client had completed.
    pub ops: u64,
    /// Keys (and value bytes) the client knew to be live, when it knows.
    pub client_live: Option<u64>,
    pub client_live_bytes: Option<u64>,
    /// Taken after the writers stopped.
    pub end: bool,
    pub stats: Stats,
}

impl Sample {
    pub(crate) fn json(&self) -> Value {
        json!({
            "seconds": self.secs,
            "ops": self.ops,
            "end": self.end,
            "client_live_keys": self.client_live,
            "client_live_value_bytes": self.client_live_bytes,
            "curr_items": num(&self.stats, "curr_items"),
            "evictions": num(&self.stats, "evictions"),
            "bytes": num(&self.stats, "bytes"),
            "stats": json(&self.stats),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_stats_show_up_as_extras() {
        let mut s = Stats::new();
        for (n, v) in [
            ("live_bytes", "1048576"),
            ("compact_runs", "3"),
            ("segment_dead_bytes", "7"),
            ("extstore_compact_skipped", "2"),
            ("curr_items", "5"),
        ] {
            s.insert(n.into(), v.into());
        }
        assert_eq!(cell(&s, "live_bytes"), "1.0");
        assert_eq!(cell(&s, "dead_bytes"), "-");
        let names: Vec<String> = extras(&s, false).into_iter().map(|e| e.0).collect();
        assert_eq!(names, ["compact_runs", "segment_dead_bytes"]);
        assert_eq!(extras(&s, true).len(), 3);
    }
}
