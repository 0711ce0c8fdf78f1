//! The hottest keys on `/metrics`: the top 10 of `stats hotkeys` as three
//! gauges per key (`osmium_hotkey_reads_per_second`,
//! `osmium_hotkey_writes_per_second`, `osmium_hotkey_bytes_per_second`),
//! labelled with the rank and the key URI-encoded as `stats hotkeys` shows
//! it. Nothing when hot keys are off (`-o hotkeys_top=0`).

use super::families::Families;
use crate::context::Shared;
use crate::hotkeys;

/// How many keys `/metrics` shows.
pub const TOP: usize = 10;

/// Adds the hottest keys' gauges to a scrape.
pub fn add(sh: &Shared, f: &mut Families) {
    let mut encoded = Vec::new();
    for (i, hot) in sh.hot_keys(TOP).iter().enumerate() {
        encoded.clear();
        hotkeys::uri_encode(&hot.key, &mut encoded);
        let key = String::from_utf8_lossy(&encoded).into_owned();
        let rank = (i + 1).to_string();
        let labels = || {
            vec![
                ("rank".to_string(), rank.clone()),
                ("key".to_string(), key.clone()),
            ]
        };
        f.gauge(
            "osmium_hotkey_reads_per_second",
            "Reads per second of one of the hottest keys, over the last 5 to 10 s.",
            labels(),
            hot.reads_per_sec,
        );
        f.gauge(
            "osmium_hotkey_writes_per_second",
            "Writes per second of one of the hottest keys, over the last 5 to 10 s.",
            labels(),
            hot.writes_per_sec,
        );
        f.gauge(
            "osmium_hotkey_bytes_per_second",
            "Value bytes per second read and written of one of the hottest keys.",
            labels(),
            hot.bytes_per_sec,
        );
    }
}
