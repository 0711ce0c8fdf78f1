//! osmium's own metrics (`osmium_*`): the latency histograms, the hit
//! ratio, the flash tier's figures beyond memcached's, replication per
//! target, TLS, and connections by listener.

use std::sync::atomic::Ordering;

use super::families::{label, no_labels, num, Families, Rows};
use crate::context::Shared;
use crate::stats::latency::{Cmd, HistogramTotals};

/// osmium's own flash figures (rows of `stats`): (stat, metric, counter?,
/// help).
const FLASH_OWN: &[(&str, &str, bool, &str)] = &[
    (
        "get_extstore",
        "osmium_flash_gets_total",
        true,
        "GET lookups that found their item on the flash tier.",
    ),
    (
        "miss_from_extstore",
        "osmium_flash_get_misses_total",
        true,
        "Flash tier lookups whose record was gone or unreadable.",
    ),
    (
        "recache_from_extstore",
        "osmium_flash_recaches_total",
        true,
        "Items read from flash and brought back to memory.",
    ),
    (
        "badcrc_from_extstore",
        "osmium_flash_bad_crc_total",
        true,
        "Flash records that failed their checksum.",
    ),
    (
        "extstore_io_errors",
        "osmium_flash_io_errors_total",
        true,
        "I/O errors on the flash tier's files.",
    ),
    (
        "extstore_write_waits",
        "osmium_flash_write_waits_total",
        true,
        "Times a write to the flash tier waited for the disk.",
    ),
    (
        "extstore_index_bytes",
        "osmium_flash_index_bytes",
        false,
        "Memory the flash tier's index takes.",
    ),
    (
        "extstore_live_bytes",
        "osmium_flash_live_bytes",
        false,
        "Bytes of live records on the flash tier.",
    ),
    (
        "extstore_dead_bytes",
        "osmium_flash_dead_bytes",
        false,
        "Bytes of dead records on the flash tier, not compacted yet.",
    ),
    (
        "extstore_packed_items",
        "osmium_flash_packed_items_total",
        true,
        "Items given to the flash tier with a packed (zstd) value.",
    ),
    (
        "extstore_packed_raw_bytes",
        "osmium_flash_packed_raw_bytes_total",
        true,
        "The client's bytes of the values given to the flash tier packed.",
    ),
    (
        "extstore_packed_bytes",
        "osmium_flash_packed_bytes_total",
        true,
        "Bytes of the frames of the values given to the flash tier packed.",
    ),
    (
        "extstore_pack_staged",
        "osmium_flash_pack_staged_total",
        true,
        "Raw items staged to be packed on their way to the flash tier.",
    ),
    (
        "extstore_staged_bytes",
        "osmium_flash_staged_bytes",
        false,
        "Bytes of raw items staged in memory, waiting to be packed and written to flash.",
    ),
    (
        "extstore_pack_rejected",
        "osmium_flash_pack_rejected_total",
        true,
        "Staged values tried that did not pack enough (written raw).",
    ),
    (
        "extstore_pack_skipped",
        "osmium_flash_pack_skipped_total",
        true,
        "Staged values not tried (their size class keeps failing, or a compressed format).",
    ),
    (
        "extstore_pack_cpu_us",
        "osmium_flash_pack_cpu_microseconds_total",
        true,
        "CPU time the flash tier's flusher spent packing staged values.",
    ),
];

/// The pack pass's figures and the packed items' (rows of `stats`):
/// (stat, metric, counter?, help).
const PACKING: &[(&str, &str, bool, &str)] = &[
    (
        "pack_segments",
        "osmium_pack_segments_total",
        true,
        "Segments the pack pass (-o compression=cold) pack-compacted: cold items packed, the segment freed.",
    ),
    (
        "pack_segments_not_worth",
        "osmium_pack_segments_not_worth_total",
        true,
        "Segments the pack pass walked and left as they were (packing would have freed under 20 %).",
    ),
    (
        "pack_items",
        "osmium_pack_items_total",
        true,
        "Items the pack pass packed.",
    ),
    (
        "pack_rejected",
        "osmium_pack_rejected_total",
        true,
        "Values the pack pass tried that did not save enough (kept raw, never tried again).",
    ),
    (
        "pack_skipped",
        "osmium_pack_skipped_total",
        true,
        "Cold values the pack pass did not try: their size class kept failing, or they look compressed.",
    ),
    (
        "pack_kept_raw",
        "osmium_pack_kept_raw_total",
        true,
        "Packed items hit and kept by the evictor, written back raw (hit three times or more).",
    ),
    (
        "pack_kept_packed",
        "osmium_pack_kept_packed_total",
        true,
        "Packed items hit and kept by the evictor as they were, packed (hit once or twice).",
    ),
    (
        "pack_promoted",
        "osmium_pack_promoted_total",
        true,
        "Packed items GETs kept hitting, written back raw by the cleaner.",
    ),
    (
        "packed_items",
        "osmium_packed_items",
        false,
        "Items linked now whose value is packed.",
    ),
    (
        "packed_raw_bytes",
        "osmium_packed_raw_bytes",
        false,
        "The client's bytes of the packed items' values.",
    ),
    (
        "packed_bytes",
        "osmium_packed_bytes",
        false,
        "Bytes the packed items take in memory (headers, keys, frames).",
    ),
    (
        "packed_dict_items",
        "osmium_packed_dict_items",
        false,
        "Items linked now whose value was packed with a compression dictionary.",
    ),
    (
        "pack_dicts",
        "osmium_pack_dicts",
        false,
        "Compression dictionaries held (trained from the cache's values, -o compress_dicts).",
    ),
    (
        "pack_dict_bytes",
        "osmium_pack_dict_bytes",
        false,
        "Bytes of the compression dictionaries held.",
    ),
    (
        "pack_dict_trainings",
        "osmium_pack_dict_trainings_total",
        true,
        "Compression dictionary trainings run (installed or not).",
    ),
];

/// Adds osmium's own metrics.
pub(super) fn add(f: &mut Families, sh: &Shared, s: &Rows) {
    // Latency, summed over the workers.
    let mut commands = vec![HistogramTotals::default(); Cmd::ALL.len()];
    let mut flash = HistogramTotals::default();
    for l in &sh.latency {
        l.add_commands_to(&mut commands);
        l.add_flash_to(&mut flash);
    }
    for (cmd, h) in Cmd::ALL.iter().zip(commands) {
        f.histogram(
            "osmium_command_duration_seconds",
            "Time a worker spent on a request: framing, parsing, executing and composing its reply (not socket I/O, not waits for its data or flash reads).",
            label("command", cmd.name()),
            h,
        );
    }
    let hits = num(s, "get_hits").unwrap_or(0.0);
    let misses = num(s, "get_misses").unwrap_or(0.0);
    let ratio = if hits + misses > 0.0 {
        hits / (hits + misses)
    } else {
        0.0
    };
    f.gauge(
        "osmium_get_hit_ratio",
        "get_hits / (get_hits + get_misses) since start (or stats reset).",
        no_labels(),
        ratio,
    );

    if sh.store.flash().is_some() {
        f.histogram(
            "osmium_flash_read_duration_seconds",
            "Time of a flash tier read a worker waited for (io_uring), from its start to its completion.",
            no_labels(),
            flash,
        );
        for &(key, name, counter, help) in FLASH_OWN {
            if let Some(v) = num(s, key) {
                if counter {
                    f.counter(name, help, no_labels(), v);
                } else {
                    f.gauge(name, help, no_labels(), v);
                }
            }
        }
    }

    if let Some(v) = num(s, "compress_errors") {
        f.counter(
            "osmium_compress_errors_total",
            "Packed values (-o compression) that did not decode: dropped and answered as misses.",
            no_labels(),
            v,
        );
    }
    for &(key, name, counter, help) in PACKING {
        if let Some(v) = num(s, key) {
            if counter {
                f.counter(name, help, no_labels(), v);
            } else {
                f.gauge(name, help, no_labels(), v);
            }
        }
    }
    if let Some(v) = num(s, "pack_cpu_us") {
        f.counter(
            "osmium_pack_cpu_seconds_total",
            "CPU time of the pack pass's walks and packing.",
            no_labels(),
            v / 1e6,
        );
    }
    if let Some(v) = num(s, "pack_dict_train_us") {
        f.counter(
            "osmium_pack_dict_train_cpu_seconds_total",
            "CPU time of the compression dictionary trainings.",
            no_labels(),
            v / 1e6,
        );
    }

    replication(f, s);

    if let Some(tls) = &sh.tls {
        f.counter(
            "osmium_tls_handshakes_total",
            "TLS handshakes completed by client connections.",
            no_labels(),
            tls.handshakes.load(Ordering::Relaxed) as f64,
        );
        for (key, name, help) in [
            (
                "ssl_handshake_errors",
                "osmium_tls_handshake_errors_total",
                "TLS handshakes that failed.",
            ),
            (
                "ssl_proto_errors",
                "osmium_tls_protocol_errors_total",
                "TLS errors after the handshake.",
            ),
            (
                "ssl_new_sessions",
                "osmium_tls_new_sessions_total",
                "TLS sessions made (not resumed) with the session cache on.",
            ),
        ] {
            if let Some(v) = num(s, key) {
                f.counter(name, help, no_labels(), v);
            }
        }
    }

    let path = sh.settings.unix_socket.as_deref();
    for (listener, tls, clients) in sh.conns.clients_by_listener(path) {
        let labels = vec![
            ("listener".to_string(), listener),
            ("tls".to_string(), tls.to_string()),
        ];
        f.gauge(
            "osmium_listener_connections",
            "Open client connections by listening socket (address or unix socket path).",
            labels,
            clients as f64,
        );
    }
}

/// `replica_<i>_*` rows of `stats`, labelled by target address.
fn replication(f: &mut Families, s: &Rows) {
    for i in 0.. {
        let Some(addr) = s.get(&format!("replica_{i}_addr")) else {
            break;
        };
        let l = || label("replica", addr);
        let get = |k: &str| num(s, &format!("replica_{i}_{k}"));
        let up = s.get(&format!("replica_{i}_link")).map(String::as_str) == Some("up");
        f.gauge(
            "osmium_replication_link_up",
            "Whether the link to this replication target is up.",
            l(),
            if up { 1.0 } else { 0.0 },
        );
        if let Some(v) = get("backlog") {
            f.gauge(
                "osmium_replication_backlog",
                "Writes queued for this target, not sent yet.",
                l(),
                v,
            );
        }
        if let Some(v) = get("seq_lag") {
            f.gauge(
                "osmium_replication_seq_lag",
                "Writes sent to this target and not acknowledged yet.",
                l(),
                v,
            );
        }
        if let Some(v) = get("lag_us") {
            f.gauge(
                "osmium_replication_lag_seconds",
                "Time between a write and its acknowledgement by this target (the last measured).",
                l(),
                v / 1e6,
            );
        }
        for (key, name, help) in [
            (
                "sent",
                "osmium_replication_sent_total",
                "Writes sent to this target.",
            ),
            (
                "errors",
                "osmium_replication_errors_total",
                "Errors on the link to this target.",
            ),
            (
                "full_copies",
                "osmium_replication_full_copies_total",
                "Full copies of the cache sent to this target.",
            ),
            (
                "reconnects",
                "osmium_replication_reconnects_total",
                "Reconnections to this target.",
            ),
        ] {
            if let Some(v) = get(key) {
                f.counter(name, help, l(), v);
            }
        }
    }
    if let Some(v) = num(s, "replica_follow_links") {
        f.gauge(
            "osmium_replication_follow_links",
            "Follow links (catch-up pulls) open from replication sources.",
            no_labels(),
            v,
        );
    }
    if let Some(v) = num(s, "replica_auth_failures") {
        f.counter(
            "osmium_replication_auth_failures_total",
            "Replication peers that failed to authenticate.",
            no_labels(),
            v,
        );
    }
}
