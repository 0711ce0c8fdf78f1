//! What `top` and `--once --json` show of a server: a `Snapshot` (one
//! poll: `stats`, `stats settings`' `metrics_addr`, `stats hotkeys`, the
//! latency histograms of that address) and a `View`, the rates and gauges
//! computed from two snapshots, per server and summed over all; `json`
//! writes views in the documented schema (docs/tool.md, "The JSON document").

use std::collections::HashMap;
use std::time::Instant;

use serde_json::{json, Value};

use crate::conn::{normalize, Conn};
use crate::metrics::{self, Histograms};
use crate::verbs::{parse_hotkeys, HotKey};

/// One poll of one server.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    pub at: Instant,
    /// `stats`; empty when the server could not be reached.
    pub stats: HashMap<String, String>,
    /// `stats hotkeys`; `None` when the server answers it with an error.
    pub hotkeys: Option<Vec<HotKey>>,
    /// The latency histograms, when `stats settings` names a
    /// `metrics_addr` and it could be scraped.
    pub histograms: Option<Histograms>,
    /// Why the poll failed.
    pub error: Option<String>,
}

/// Polls the server at `addr` once (a new connection each time, so a
/// server that went away and came back is seen again).
pub(crate) fn poll(addr: &str) -> Snapshot {
    let at = Instant::now();
    let mut snap = Snapshot {
        at,
        stats: HashMap::new(),
        hotkeys: None,
        histograms: None,
        error: None,
    };
    let result = (|| -> std::io::Result<()> {
        let mut conn = Conn::connect(addr)?;
        snap.stats = conn.stats("")?.into_iter().collect();
        snap.hotkeys = conn.stats("hotkeys").ok().map(|s| parse_hotkeys(&s));
        let settings: HashMap<String, String> = conn
            .stats("settings")
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        if let Some(maddr) = settings.get("metrics_addr").filter(|a| is_addr(a)) {
            snap.histograms = metrics::scrape(maddr).ok().map(|b| metrics::parse(&b));
        }
        Ok(())
    })();
    if let Err(e) = result {
        snap.error = Some(e.to_string());
    }
    snap
}

/// Whether a `metrics_addr` value names an address (not `-`, `off`,
/// `NULL`, empty).
fn is_addr(v: &str) -> bool {
    v.contains(':') && !v.contains(' ')
}

/// The command label of the requests a poll sends (`stats`, `stats
/// hotkeys`, `stats settings`), left out of the merged latency so that
/// top does not report its own requests as the clients'.
pub(crate) const OWN_POLLS: &str = "stats";

/// p50 and p99, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
}

/// What is shown of a server (or of all of them: `total`).
#[derive(Clone, Debug, Default)]
pub(crate) struct View {
    pub addr: String,
    pub up: bool,
    pub error: Option<String>,
    pub version: Option<String>,
    pub uptime: Option<u64>,
    /// Per second, over the last interval.
    pub get: f64,
    pub set: f64,
    pub delete: f64,
    pub incr_decr: f64,
    pub touch: f64,
    pub hits: f64,
    pub misses: f64,
    pub evictions: f64,
    /// `get_hits / (get_hits + get_misses)` over the interval.
    pub hit_ratio: Option<f64>,
    /// Every command but `stats` (top's own polls) merged, then `get` and
    /// `set`.
    pub latency: Option<Latency>,
    pub latency_get: Option<Latency>,
    pub latency_set: Option<Latency>,
    pub bytes: Option<u64>,
    pub limit_maxbytes: Option<u64>,
    pub curr_items: Option<u64>,
    pub flash_bytes: Option<u64>,
    pub flash_limit: Option<u64>,
    pub flash_objects: Option<u64>,
    pub flash_reads: Option<f64>,
    pub flash_writes: Option<f64>,
    pub connections: Option<u64>,
    /// `replica_N_*` of `stats`: links up, links, the largest lag (µs),
    /// the summed backlog.
    pub repl_links: Option<(u64, u64)>,
    pub repl_lag_us: Option<u64>,
    pub repl_backlog: Option<u64>,
    pub hotkeys: Option<Vec<HotKey>>,
    /// Latency buckets of the interval (all commands merged), kept to sum
    /// servers into `total`.
    pub buckets: Option<metrics::Buckets>,
    pub ops: f64,
}

fn num(s: &HashMap<String, String>, name: &str) -> Option<u64> {
    s.get(name)?.parse().ok()
}

fn sum(s: &HashMap<String, String>, names: &[&str]) -> Option<u64> {
    let mut any = false;
    let mut total = 0;
    for n in names {
        if let Some(v) = num(s, n) {
            any = true;
            total += v;
        }
    }
    any.then_some(total)
}

fn latency(b: &metrics::Buckets) -> Option<Latency> {
    Some(Latency {
        p50_us: metrics::quantile(b, 0.50)? * 1e6,
        p99_us: metrics::quantile(b, 0.99)? * 1e6,
    })
}

impl View {
    /// The view of `now`, with rates against `before` (zero without it).
    pub(crate) fn new(addr: &str, before: Option<&Snapshot>, now: &Snapshot) -> View {
        let s = &now.stats;
        let mut v = View {
            addr: normalize(addr),
            up: now.error.is_none(),
            error: now.error.clone(),
            ..View::default()
        };
        if !v.up {
            return v;
        }
        let before = before.filter(|b| b.error.is_none() && b.at < now.at);
        let secs = before.map_or(0.0, |b| (now.at - b.at).as_secs_f64());
        let rate = |names: &[&str]| -> f64 {
            let (Some(b), true) = (before, secs > 0.0) else {
                return 0.0;
            };
            match (sum(s, names), sum(&b.stats, names)) {
                (Some(n), Some(o)) if n >= o => (n - o) as f64 / secs,
                _ => 0.0,
            }
        };
        v.version = s.get("version").cloned();
        v.uptime = num(s, "uptime");
        v.get = rate(&["cmd_get"]);
        v.set = rate(&["cmd_set"]);
        v.delete = rate(&["delete_hits", "delete_misses"]);
        v.incr_decr = rate(&["incr_hits", "incr_misses", "decr_hits", "decr_misses"]);
        v.touch = rate(&["cmd_touch"]);
        v.ops = v.get + v.set + v.delete + v.incr_decr + v.touch;
        v.hits = rate(&["get_hits"]);
        v.misses = rate(&["get_misses"]);
        v.hit_ratio = (v.hits + v.misses > 0.0).then(|| v.hits / (v.hits + v.misses));
        v.evictions = rate(&["evictions"]);
        v.bytes = num(s, "bytes");
        v.limit_maxbytes = num(s, "limit_maxbytes");
        v.curr_items = num(s, "curr_items");
        v.connections = num(s, "curr_connections");
        v.flash_bytes = num(s, "extstore_bytes_used");
        v.flash_limit = num(s, "extstore_limit_maxbytes");
        v.flash_objects = num(s, "extstore_objects_used");
        if s.contains_key("extstore_objects_read") {
            v.flash_reads = Some(rate(&["extstore_objects_read"]));
            v.flash_writes = Some(rate(&["extstore_objects_written"]));
        }
        let mut links = 0;
        let mut up = 0;
        let mut lag = None::<u64>;
        let mut backlog = None::<u64>;
        for i in 0.. {
            let Some(link) = s.get(&format!("replica_{i}_link")) else {
                break;
            };
            links += 1;
            up += u64::from(link == "up");
            if let Some(l) = num(s, &format!("replica_{i}_lag_us")) {
                lag = Some(lag.map_or(l, |m| m.max(l)));
            }
            if let Some(b) = num(s, &format!("replica_{i}_backlog")) {
                backlog = Some(backlog.unwrap_or(0) + b);
            }
        }
        if links > 0 {
            v.repl_links = Some((up, links));
            v.repl_lag_us = lag;
            v.repl_backlog = backlog;
        }
        v.hotkeys = now.hotkeys.clone();
        if let Some(h) = &now.histograms {
            let old = before.and_then(|b| b.histograms.as_ref());
            let d: HashMap<&String, metrics::Buckets> = h
                .iter()
                .map(|(cmd, b)| (cmd, metrics::delta(b, old.and_then(|o| o.get(cmd)))))
                .collect();
            // top's own polls are `stats` commands: the latency shown is
            // every other command's.
            let all = metrics::merge(
                d.iter()
                    .filter(|(cmd, _)| cmd.as_str() != OWN_POLLS)
                    .map(|(_, b)| b),
            );
            v.latency = latency(&all);
            v.latency_get = d.get(&"get".to_string()).and_then(latency);
            v.latency_set = d.get(&"set".to_string()).and_then(latency);
            v.buckets = Some(all);
        }
        v
    }

    /// All the servers summed: rates and sizes added, hit ratio and
    /// latency over the merged counts, lag the largest, hot keys left out.
    pub(crate) fn total(views: &[View]) -> View {
        let live: Vec<&View> = views.iter().filter(|v| v.up).collect();
        let opt_sum = |f: &dyn Fn(&View) -> Option<u64>| -> Option<u64> {
            let vals: Vec<u64> = live.iter().filter_map(|v| f(v)).collect();
            (!vals.is_empty()).then(|| vals.iter().sum())
        };
        let opt_fsum = |f: &dyn Fn(&View) -> Option<f64>| -> Option<f64> {
            let vals: Vec<f64> = live.iter().filter_map(|v| f(v)).collect();
            (!vals.is_empty()).then(|| vals.iter().sum())
        };
        let mut t = View {
            addr: "TOTAL".into(),
            up: !live.is_empty(),
            ..View::default()
        };
        for v in &live {
            t.get += v.get;
            t.set += v.set;
            t.delete += v.delete;
            t.incr_decr += v.incr_decr;
            t.touch += v.touch;
            t.ops += v.ops;
            t.hits += v.hits;
            t.misses += v.misses;
            t.evictions += v.evictions;
        }
        t.hit_ratio = (t.hits + t.misses > 0.0).then(|| t.hits / (t.hits + t.misses));
        t.bytes = opt_sum(&|v| v.bytes);
        t.limit_maxbytes = opt_sum(&|v| v.limit_maxbytes);
        t.curr_items = opt_sum(&|v| v.curr_items);
        t.connections = opt_sum(&|v| v.connections);
        t.flash_bytes = opt_sum(&|v| v.flash_bytes);
        t.flash_limit = opt_sum(&|v| v.flash_limit);
        t.flash_objects = opt_sum(&|v| v.flash_objects);
        t.flash_reads = opt_fsum(&|v| v.flash_reads);
        t.flash_writes = opt_fsum(&|v| v.flash_writes);
        t.repl_backlog = opt_sum(&|v| v.repl_backlog);
        t.repl_lag_us = live.iter().filter_map(|v| v.repl_lag_us).max();
        let links: Vec<(u64, u64)> = live.iter().filter_map(|v| v.repl_links).collect();
        if !links.is_empty() {
            t.repl_links = Some(links.iter().fold((0, 0), |a, l| (a.0 + l.0, a.1 + l.1)));
        }
        let buckets: Vec<&metrics::Buckets> =
            live.iter().filter_map(|v| v.buckets.as_ref()).collect();
        if !buckets.is_empty() {
            let all = metrics::merge(buckets);
            t.latency = latency(&all);
            t.buckets = Some(all);
        }
        t
    }
}

fn round(x: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    (x * m).round() / m
}

fn lat_json(l: Option<Latency>) -> Value {
    l.map_or(
        Value::Null,
        |l| json!({"p50": round(l.p50_us, 1), "p99": round(l.p99_us, 1)}),
    )
}

/// One view in the `--once --json` schema.
pub(crate) fn view_json(v: &View, with_hotkeys: bool) -> Value {
    let mut o = json!({
        "addr": v.addr,
        "up": v.up,
        "error": v.error,
        "version": v.version,
        "uptime_seconds": v.uptime,
        "ops_per_sec": {
            "total": round(v.ops, 1),
            "get": round(v.get, 1),
            "set": round(v.set, 1),
            "delete": round(v.delete, 1),
            "incr_decr": round(v.incr_decr, 1),
            "touch": round(v.touch, 1),
        },
        "get_hits_per_sec": round(v.hits, 1),
        "get_misses_per_sec": round(v.misses, 1),
        "hit_ratio": v.hit_ratio.map(|r| round(r, 4)),
        "latency_us": if v.latency.is_none() && v.latency_get.is_none() {
            Value::Null
        } else {
            json!({
                "all": lat_json(v.latency),
                "get": lat_json(v.latency_get),
                "set": lat_json(v.latency_set),
            })
        },
        "memory": {
            "bytes": v.bytes,
            "limit_maxbytes": v.limit_maxbytes,
            "curr_items": v.curr_items,
        },
        "flash": if v.flash_bytes.is_none() && v.flash_limit.is_none() {
            Value::Null
        } else {
            json!({
                "bytes_used": v.flash_bytes,
                "limit_maxbytes": v.flash_limit,
                "objects_used": v.flash_objects,
                "reads_per_sec": v.flash_reads.map(|r| round(r, 1)),
                "writes_per_sec": v.flash_writes.map(|r| round(r, 1)),
            })
        },
        "evictions_per_sec": round(v.evictions, 1),
        "connections": v.connections,
        "replication": v.repl_links.map_or(Value::Null, |(up, links)| json!({
            "links_up": up,
            "links": links,
            "max_lag_us": v.repl_lag_us,
            "backlog": v.repl_backlog,
        })),
    });
    if with_hotkeys {
        o["hotkeys"] = v.hotkeys.as_ref().map_or(Value::Null, |rows| {
            rows.iter()
                .map(|h| {
                    json!({
                        "rank": h.rank,
                        "key": h.key,
                        "reads_per_sec": h.reads,
                        "writes_per_sec": h.writes,
                        "bytes_per_sec": h.bytes,
                    })
                })
                .collect()
        });
    }
    o
}

/// The whole `--once --json` document.
pub(crate) fn json(interval: f64, views: &[View]) -> Value {
    let total = View::total(views);
    let mut t = view_json(&total, false);
    if let Some(o) = t.as_object_mut() {
        for k in ["addr", "error", "version", "uptime_seconds"] {
            o.remove(k);
        }
        o.insert(
            "servers_up".into(),
            json!(views.iter().filter(|v| v.up).count()),
        );
        o.insert("servers".into(), json!(views.len()));
    }
    json!({
        "interval_seconds": interval,
        "servers": views.iter().map(|v| view_json(v, true)).collect::<Vec<_>>(),
        "total": t,
    })
}
