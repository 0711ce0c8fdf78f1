//! memcached_exporter's metrics from the rows of the `stats` replies,
//! under its names, labels and types, as its `exporter.go` builds them
//! (its proxy-mode metrics aside: osmium has no proxy mode). Where the
//! exporter types a counter whose name does not end in `_total`
//! (`memcached_uptime_seconds`, `memcached_slab_items_evicted_time_seconds`,
//! `memcached_slab_items_moves_*`, `memcached_extstore_bytes_used`,
//! `memcached_slab_mem_requested_bytes`), it is a gauge here: the
//! encoders name every counter `<name>_total`, and keeping the exporter's
//! names keeps its dashboards working.

use std::collections::BTreeMap;

use super::families::{label, no_labels, num, Families, Rows};

/// Counters of `stats`, as the exporter names them.
const GENERAL_COUNTERS: &[(&str, &str, &str)] = &[
    (
        "rusage_user",
        "memcached_process_user_cpu_seconds_total",
        "Accumulated user time for this process.",
    ),
    (
        "rusage_system",
        "memcached_process_system_cpu_seconds_total",
        "Accumulated system time for this process.",
    ),
    (
        "bytes_read",
        "memcached_read_bytes_total",
        "Total number of bytes read by this server from network.",
    ),
    (
        "bytes_written",
        "memcached_written_bytes_total",
        "Total number of bytes sent by this server to network.",
    ),
    (
        "total_connections",
        "memcached_connections_total",
        "Total number of connections opened since the server started running.",
    ),
    (
        "rejected_connections",
        "memcached_connections_rejected_total",
        "Total number of connections rejected due to hitting the -c limit in maxconns_fast mode.",
    ),
    (
        "conn_yields",
        "memcached_connections_yielded_total",
        "Total number of connections yielded running due to hitting the -R limit.",
    ),
    (
        "listen_disabled_num",
        "memcached_connections_listener_disabled_total",
        "Number of times that the server has hit its connections limit and disabled its listener.",
    ),
    (
        "total_items",
        "memcached_items_total",
        "Total number of items stored during the life of this instance.",
    ),
    (
        "evictions",
        "memcached_items_evicted_total",
        "Total number of valid items removed from cache to free memory for new items.",
    ),
    (
        "reclaimed",
        "memcached_items_reclaimed_total",
        "Total number of times an entry was stored using memory from an expired entry.",
    ),
    (
        "store_too_large",
        "memcached_item_too_large_total",
        "The number of times an item exceeded the max-item-size when being stored.",
    ),
    (
        "store_no_memory",
        "memcached_item_no_memory_total",
        "The number of times an item could not be stored due to no more memory.",
    ),
    (
        "lru_crawler_starts",
        "memcached_lru_crawler_starts_total",
        "Times an LRU crawler was started.",
    ),
    (
        "direct_reclaims",
        "memcached_direct_reclaims_total",
        "Times worker threads had to directly reclaim or evict items.",
    ),
    (
        "crawler_items_checked",
        "memcached_lru_crawler_items_checked_total",
        "Total items examined by LRU Crawler.",
    ),
    (
        "crawler_reclaimed",
        "memcached_lru_crawler_reclaimed_total",
        "Total items freed by LRU Crawler.",
    ),
    (
        "moves_to_cold",
        "memcached_lru_crawler_moves_to_cold_total",
        "Total number of items moved from HOT/WARM to COLD LRU's.",
    ),
    (
        "moves_to_warm",
        "memcached_lru_crawler_moves_to_warm_total",
        "Total number of items moved from COLD to WARM LRU.",
    ),
    (
        "moves_within_lru",
        "memcached_lru_crawler_moves_within_lru_total",
        "Total number of items reshuffled within HOT or WARM LRU's.",
    ),
];

/// Gauges of `stats`, as the exporter names them.
const GENERAL_GAUGES: &[(&str, &str, &str)] = &[
    (
        "uptime",
        "memcached_uptime_seconds",
        "Number of seconds since the server started.",
    ),
    (
        "time",
        "memcached_time_seconds",
        "current UNIX time according to the server.",
    ),
    (
        "curr_connections",
        "memcached_current_connections",
        "Current number of open connections.",
    ),
    (
        "bytes",
        "memcached_current_bytes",
        "Current number of bytes used to store items.",
    ),
    (
        "limit_maxbytes",
        "memcached_limit_bytes",
        "Number of bytes this server is allowed to use for storage.",
    ),
    (
        "curr_items",
        "memcached_current_items",
        "Current number of items stored by this instance.",
    ),
    (
        "total_malloced",
        "memcached_malloced_bytes",
        "Number of bytes of memory allocated to slab pages.",
    ),
    (
        "accepting_conns",
        "memcached_accepting_connections",
        "The server is currently accepting new connections.",
    ),
];

/// The flash tier under memcached's `extstore_*` names: (stat, metric,
/// counter?, help).
const EXTSTORE: &[(&str, &str, bool, &str)] = &[
    (
        "extstore_compact_lost",
        "memcached_extstore_compact_lost_total",
        true,
        "Total number of items lost because they were locked during extstore compaction.",
    ),
    (
        "extstore_compact_rescues",
        "memcached_extstore_compact_rescued_total",
        true,
        "Total number of items moved to a new page during extstore compaction.",
    ),
    (
        "extstore_compact_skipped",
        "memcached_extstore_compact_skipped_total",
        true,
        "Total number of items dropped due to inactivity during extstore compaction.",
    ),
    (
        "extstore_page_allocs",
        "memcached_extstore_pages_allocated_total",
        true,
        "Total number of times a page was allocated in extstore.",
    ),
    (
        "extstore_page_evictions",
        "memcached_extstore_pages_evicted_total",
        true,
        "Total number of times a page was evicted from extstore.",
    ),
    (
        "extstore_page_reclaims",
        "memcached_extstore_pages_reclaimed_total",
        true,
        "Total number of times an empty extstore page was freed.",
    ),
    (
        "extstore_pages_free",
        "memcached_extstore_pages_free",
        false,
        "Number of extstore pages not yet containing any items.",
    ),
    (
        "extstore_pages_used",
        "memcached_extstore_pages_used",
        false,
        "Number of extstore pages containing at least one item.",
    ),
    (
        "extstore_objects_evicted",
        "memcached_extstore_objects_evicted_total",
        true,
        "Total number of items evicted from extstore to free up space.",
    ),
    (
        "extstore_objects_read",
        "memcached_extstore_objects_read_total",
        true,
        "Total number of items read from extstore.",
    ),
    (
        "extstore_objects_written",
        "memcached_extstore_objects_written_total",
        true,
        "Total number of items written to extstore.",
    ),
    (
        "extstore_objects_used",
        "memcached_extstore_objects_used",
        false,
        "Number of items stored in extstore.",
    ),
    (
        "extstore_bytes_evicted",
        "memcached_extstore_bytes_evicted_total",
        true,
        "Total number of bytes evicted from extstore to free up space.",
    ),
    (
        "extstore_bytes_written",
        "memcached_extstore_bytes_written_total",
        true,
        "Total number of bytes written to extstore.",
    ),
    (
        "extstore_bytes_read",
        "memcached_extstore_bytes_read_total",
        true,
        "Total number of bytes read from extstore.",
    ),
    (
        "extstore_bytes_used",
        "memcached_extstore_bytes_used",
        false,
        "Current number of bytes used to store items in extstore.",
    ),
    (
        "extstore_bytes_fragmented",
        "memcached_extstore_bytes_fragmented",
        false,
        "Current number of bytes in extstore pages allocated but not used to store an object.",
    ),
    (
        "extstore_limit_maxbytes",
        "memcached_extstore_bytes_limit",
        false,
        "Number of bytes of external storage allocated for this server.",
    ),
    (
        "extstore_io_queue",
        "memcached_extstore_io_queue_depth",
        false,
        "Number of items in the I/O queue waiting to be processed.",
    ),
];

/// `stats items` rows that the exporter exports as counters ending in
/// `_total`.
const ITEMS_COUNTERS: &[(&str, &str, &str)] = &[
    ("crawler_reclaimed", "memcached_slab_items_crawler_reclaimed_total", "Number of items freed by the LRU Crawler."),
    ("evicted", "memcached_slab_items_evicted_total", "Total number of times an item had to be evicted from the LRU before it expired."),
    ("evicted_nonzero", "memcached_slab_items_evicted_nonzero_total", "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired."),
    ("evicted_unfetched", "memcached_slab_items_evicted_unfetched_total", "Total number of items evicted and never fetched."),
    ("expired_unfetched", "memcached_slab_items_expired_unfetched_total", "Total number of valid items evicted from the LRU which were never touched after being set."),
    ("outofmemory", "memcached_slab_items_outofmemory_total", "Total number of items for this slab class that have triggered an out of memory error."),
    ("reclaimed", "memcached_slab_items_reclaimed_total", "Total number of items reclaimed."),
    ("tailrepairs", "memcached_slab_items_tailrepairs_total", "Total number of times the entries for a particular ID need repairing."),
];

/// `stats items` rows exported as gauges.
const ITEMS_GAUGES: &[(&str, &str, &str)] = &[
    (
        "number",
        "memcached_slab_current_items",
        "Number of items currently stored in this slab class.",
    ),
    (
        "age",
        "memcached_slab_items_age_seconds",
        "Number of seconds the oldest item has been in the slab class.",
    ),
    (
        "evicted_time",
        "memcached_slab_items_evicted_time_seconds",
        "Seconds since the last access for the most recent item evicted from this class.",
    ),
    (
        "moves_to_cold",
        "memcached_slab_items_moves_to_cold",
        "Number of items moved from HOT or WARM into COLD.",
    ),
    (
        "moves_to_warm",
        "memcached_slab_items_moves_to_warm",
        "Number of items moves from COLD into WARM.",
    ),
    (
        "moves_within_lru",
        "memcached_slab_items_moves_within_lru",
        "Number of times active items were bumped within HOT or WARM.",
    ),
    (
        "number_hot",
        "memcached_slab_hot_items",
        "Number of items presently stored in the HOT LRU.",
    ),
    (
        "number_warm",
        "memcached_slab_warm_items",
        "Number of items presently stored in the WARM LRU.",
    ),
    (
        "number_cold",
        "memcached_slab_cold_items",
        "Number of items presently stored in the COLD LRU.",
    ),
    (
        "number_temp",
        "memcached_slab_temporary_items",
        "Number of items presently stored in the TEMPORARY LRU.",
    ),
    (
        "age_hot",
        "memcached_slab_hot_age_seconds",
        "Age of the oldest item in HOT LRU.",
    ),
    (
        "age_warm",
        "memcached_slab_warm_age_seconds",
        "Age of the oldest item in WARM LRU.",
    ),
];

/// `stats slabs` rows exported as gauges.
const SLABS_GAUGES: &[(&str, &str, &str)] = &[
    (
        "chunk_size",
        "memcached_slab_chunk_size_bytes",
        "Number of bytes allocated to each chunk within this slab class.",
    ),
    (
        "chunks_per_page",
        "memcached_slab_chunks_per_page",
        "Number of chunks within a single page for this slab class.",
    ),
    (
        "total_pages",
        "memcached_slab_current_pages",
        "Number of pages allocated to this slab class.",
    ),
    (
        "total_chunks",
        "memcached_slab_current_chunks",
        "Number of chunks allocated to this slab class.",
    ),
    (
        "used_chunks",
        "memcached_slab_chunks_used",
        "Number of chunks allocated to an item.",
    ),
    (
        "free_chunks",
        "memcached_slab_chunks_free",
        "Number of chunks not yet allocated items.",
    ),
    (
        "free_chunks_end",
        "memcached_slab_chunks_free_end",
        "Number of free chunks at the end of the last allocated page.",
    ),
    (
        "mem_requested",
        "memcached_slab_mem_requested_bytes",
        "Number of bytes of memory actual items take up within a slab.",
    ),
];

/// Settings the exporter shows when the LRU crawler is on.
const CRAWLER_SETTINGS: &[(&str, &str, &str)] = &[
    (
        "lru_crawler_sleep",
        "memcached_lru_crawler_sleep",
        "Microseconds to sleep between LRU crawls.",
    ),
    (
        "lru_crawler_tocrawl",
        "memcached_lru_crawler_to_crawl",
        "Max items to crawl per slab per run.",
    ),
    (
        "hot_lru_pct",
        "memcached_lru_crawler_hot_percent",
        "Percent of slab memory reserved for HOT LRU.",
    ),
    (
        "warm_lru_pct",
        "memcached_lru_crawler_warm_percent",
        "Percent of slab memory reserved for WARM LRU.",
    ),
    (
        "hot_max_factor",
        "memcached_lru_crawler_hot_max_factor",
        "Set idle age of HOT LRU to COLD age * this",
    ),
    (
        "warm_max_factor",
        "memcached_lru_crawler_warm_max_factor",
        "Set idle age of WARM LRU to COLD age * this",
    ),
];

const COMMANDS_HELP: &str =
    "Total number of all requests broken down by command (get, set, etc.) and status.";
const SLAB_COMMANDS_HELP: &str =
    "Total number of all requests broken down by command (get, set, etc.) and status per slab.";

/// `stats`: the exporter's general metrics (and extstore's, with a flash
/// tier).
pub(super) fn general(f: &mut Families, s: &Rows) {
    if let Some(v) = s.get("version") {
        f.gauge(
            "memcached_version",
            "The version of this memcached server.",
            label("version", v),
            1.0,
        );
    }
    for &(key, name, help) in GENERAL_GAUGES {
        if let Some(v) = num(s, key) {
            f.gauge(name, help, no_labels(), v);
        }
    }
    for &(key, name, help) in GENERAL_COUNTERS {
        if let Some(v) = num(s, key) {
            f.counter(name, help, no_labels(), v);
        }
    }
    let cmd = |c: &str, st: &str| {
        vec![
            ("command".to_string(), c.to_string()),
            ("status".to_string(), st.to_string()),
        ]
    };
    for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
        for (suffix, status) in [("hits", "hit"), ("misses", "miss")] {
            if let Some(v) = num(s, &format!("{op}_{suffix}")) {
                f.counter(
                    "memcached_commands_total",
                    COMMANDS_HELP,
                    cmd(op, status),
                    v,
                );
            }
        }
    }
    if let Some(v) = num(s, "cas_badval") {
        f.counter(
            "memcached_commands_total",
            COMMANDS_HELP,
            cmd("cas", "badval"),
            v,
        );
    }
    if let Some(v) = num(s, "cmd_flush") {
        f.counter(
            "memcached_commands_total",
            COMMANDS_HELP,
            cmd("flush", "hit"),
            v,
        );
    }
    // memcached counts cas commands in cmd_set too.
    let cas: Option<f64> = ["cas_misses", "cas_hits", "cas_badval"]
        .iter()
        .map(|k| num(s, k))
        .sum();
    if let (Some(set), Some(cas)) = (num(s, "cmd_set"), cas) {
        f.counter(
            "memcached_commands_total",
            COMMANDS_HELP,
            cmd("set", "hit"),
            set - cas,
        );
    }
    // As the exporter: the extstore figures when the tier is on.
    if s.contains_key("extstore_limit_maxbytes") {
        for &(key, name, counter, help) in EXTSTORE {
            if let Some(v) = num(s, key) {
                if counter {
                    f.counter(name, help, no_labels(), v);
                } else {
                    f.gauge(name, help, no_labels(), v);
                }
            }
        }
    }
}

pub(super) fn settings(f: &mut Families, s: &Rows) {
    if let Some(v) = num(s, "maxconns") {
        f.gauge(
            "memcached_max_connections",
            "Maximum number of clients allowed.",
            no_labels(),
            v,
        );
    }
    if s.get("lru_crawler").map(String::as_str) != Some("yes") {
        return;
    }
    let yes = |k: &str| s.get(k).map(|v| if v == "yes" { 1.0 } else { 0.0 });
    if let Some(v) = yes("lru_crawler") {
        f.gauge(
            "memcached_lru_crawler_enabled",
            "Whether the LRU crawler is enabled.",
            no_labels(),
            v,
        );
    }
    for &(key, name, help) in CRAWLER_SETTINGS {
        if let Some(v) = num(s, key) {
            f.gauge(name, help, no_labels(), v);
        }
        if key == "lru_crawler_tocrawl" {
            if let Some(v) = yes("lru_maintainer_thread") {
                f.gauge(
                    "memcached_lru_crawler_maintainer_thread",
                    "Split LRU mode and background threads.",
                    no_labels(),
                    v,
                );
            }
        }
    }
}

pub(super) fn items(f: &mut Families, items: &BTreeMap<u32, Rows>, slabs: &BTreeMap<u32, Rows>) {
    for (class, u) in items {
        let slab = class.to_string();
        for &(key, name, help) in ITEMS_GAUGES {
            if let Some(v) = num(u, key) {
                f.gauge(name, help, label("slab", &slab), v);
            }
        }
        for (key, lru) in [
            ("hits_to_hot", "hot"),
            ("hits_to_warm", "warm"),
            ("hits_to_cold", "cold"),
            ("hits_to_temp", "temporary"),
        ] {
            if let Some(v) = num(u, key) {
                let labels = vec![
                    ("slab".to_string(), slab.clone()),
                    ("lru".to_string(), lru.to_string()),
                ];
                f.counter(
                    "memcached_slab_lru_hits_total",
                    "Number of get_hits to the LRU.",
                    labels,
                    v,
                );
            }
        }
        for &(key, name, help) in ITEMS_COUNTERS {
            if let Some(v) = num(u, key) {
                f.counter(name, help, label("slab", &slab), v);
            }
        }
        // Shown once per class: from `stats slabs` when its class has the
        // row (memcached 1.6.45's has not: `stats items` has it).
        if !slabs
            .get(class)
            .is_some_and(|s| s.contains_key("mem_requested"))
        {
            if let Some(v) = num(u, "mem_requested") {
                f.gauge(
                    "memcached_slab_mem_requested_bytes",
                    "Number of bytes of memory actual items take up within a slab.",
                    label("slab", &slab),
                    v,
                );
            }
        }
    }
}

pub(super) fn slabs(f: &mut Families, slabs: &BTreeMap<u32, Rows>) {
    for (class, v) in slabs {
        let slab = class.to_string();
        let cmd = |c: &str, st: &str| {
            vec![
                ("slab".to_string(), slab.clone()),
                ("command".to_string(), c.to_string()),
                ("status".to_string(), st.to_string()),
            ]
        };
        for op in ["get", "delete", "incr", "decr", "cas", "touch"] {
            if let Some(n) = num(v, &format!("{op}_hits")) {
                f.counter(
                    "memcached_slab_commands_total",
                    SLAB_COMMANDS_HELP,
                    cmd(op, "hit"),
                    n,
                );
            }
        }
        if let Some(n) = num(v, "cas_badval") {
            f.counter(
                "memcached_slab_commands_total",
                SLAB_COMMANDS_HELP,
                cmd("cas", "badval"),
                n,
            );
        }
        let cas: Option<f64> = ["cas_hits", "cas_badval"].iter().map(|k| num(v, k)).sum();
        if let (Some(set), Some(cas)) = (num(v, "cmd_set"), cas) {
            f.counter(
                "memcached_slab_commands_total",
                SLAB_COMMANDS_HELP,
                cmd("set", "hit"),
                set - cas,
            );
        }
        for &(key, name, help) in SLABS_GAUGES {
            if let Some(n) = num(v, key) {
                f.gauge(name, help, label("slab", &slab), n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::families::{text_rows, Value};

    #[test]
    fn exporter_names_for_stats_rows() {
        let general: Rows = text_rows(
            b"STAT version 1.6.45\r\nSTAT uptime 9\r\nSTAT get_hits 3\r\nSTAT get_misses 1\r\n\
              STAT cmd_set 10\r\nSTAT cas_hits 1\r\nSTAT cas_misses 1\r\nSTAT cas_badval 1\r\n\
              STAT rusage_user 0.500000\r\n",
        )
        .into_iter()
        .collect();
        let mut f = Families::default();
        super::general(&mut f, &general);
        assert!(f.has("memcached_version"));
        assert!(f.has("memcached_uptime_seconds"));
        assert!(f.has("memcached_commands"));
        assert!(f.has("memcached_process_user_cpu_seconds"));
        assert!(!f.has("memcached_extstore_bytes_limit"));
        let commands = &f.list[f.index["memcached_commands"]];
        let set = commands
            .samples
            .iter()
            .find(|(l, _)| l[0].1 == "set")
            .map(|(_, v)| match v {
                Value::Counter(c) => *c,
                _ => -1.0,
            });
        assert_eq!(set, Some(7.0));
    }

    #[test]
    fn mem_requested_from_stats_items_when_stats_slabs_lacks_it() {
        let class =
            |out: &[u8], prefix| crate::metrics::families::per_class(text_rows(out), prefix);
        let items = class(
            b"STAT items:1:number 3\r\nSTAT items:1:mem_requested 70\r\n",
            "items:",
        );
        let mut f = Families::default();
        super::items(&mut f, &items, &class(b"STAT 1:chunk_size 96\r\n", ""));
        assert!(f.has("memcached_slab_mem_requested_bytes"));
        let mut f = Families::default();
        let slabs = class(b"STAT 1:mem_requested 70\r\n", "");
        super::items(&mut f, &items, &slabs);
        assert!(!f.has("memcached_slab_mem_requested_bytes"));
    }
}
