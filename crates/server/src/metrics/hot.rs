//! The hottest keys on the metrics endpoint. `/metrics` has their rates by
//! rank only: three gauges per rank (`osmium_hotkey_reads_per_second`,
//! `osmium_hotkey_writes_per_second`, `osmium_hotkey_bytes_per_second`),
//! labelled `rank="1"` to `rank="10"` and nothing else, so that the series
//! stay the same 30 however the hot set churns and no key (user data) is
//! ever a label value. The names are on `/hotkeys`, only with
//! `--metrics-hotkeys`: the `stats hotkeys` text, as the cache port
//! answers it. Nothing when hot keys are off (`-o hotkeys_top=0`).

use super::families::Families;
use crate::compose::stat_rows::StatRows;
use crate::compose::text;
use crate::context::Shared;
use crate::hotkeys;

/// How many ranks `/metrics` shows.
pub(crate) const TOP: usize = 10;

/// Adds the hottest keys' gauges, by rank, to a scrape.
pub(crate) fn add(sh: &Shared, f: &mut Families) {
    for (i, hot) in sh.hot_keys(TOP).iter().enumerate() {
        let rank = (i + 1).to_string();
        let labels = || vec![("rank".to_string(), rank.clone())];
        f.gauge(
            "osmium_hotkey_reads_per_second",
            "Reads per second of the key at this rank of the hottest, over the last 5 to 10 s.",
            labels(),
            hot.reads_per_sec,
        );
        f.gauge(
            "osmium_hotkey_writes_per_second",
            "Writes per second of the key at this rank of the hottest, over the last 5 to 10 s.",
            labels(),
            hot.writes_per_sec,
        );
        f.gauge(
            "osmium_hotkey_bytes_per_second",
            "Value bytes per second read and written of the key at this rank of the hottest.",
            labels(),
            hot.bytes_per_sec,
        );
    }
}

/// `/hotkeys`: what `stats hotkeys` answers (`STAT hotkey <rank> <key>
/// <reads/s> <writes/s> <bytes/s>` lines, keys URI-encoded, then `END`).
pub(crate) fn names(sh: &Shared) -> Vec<u8> {
    let mut rows = StatRows::new();
    hotkeys::stats_rows(sh.hotkeys.as_deref(), None, &mut rows);
    let mut out = Vec::new();
    text::stat_rows(&mut out, &rows);
    out.extend_from_slice(b"END\r\n");
    out
}
