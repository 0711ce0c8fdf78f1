//! Waiting for the server's background cleaner (compaction, packing,
//! eviction) to settle after a fill, before a phase measures.

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::Duration;

use super::{num, stats};

/// The counts of the cleaner's work: it settled when they stay the same.
const CLEANER_STATS: [&str; 8] = [
    "pack_segments",
    "pack_segments_not_worth",
    "pack_items",
    "pack_rejected",
    "pack_skipped",
    "pack_dict_trainings",
    "segments_compacted",
    "evictions",
];

/// Waits until the cleaner settled after the fill: its counts unchanged
/// for a second (a minute at most); returns the stats.
pub(super) fn settle_cleaner(c: &mut TcpStream) -> Result<HashMap<String, String>, String> {
    let mut last = None;
    for _ in 0..60 {
        std::thread::sleep(Duration::from_secs(1));
        let st = stats(c)?;
        let now: Vec<Option<u64>> = CLEANER_STATS.iter().map(|s| num(&st, s)).collect();
        if last.as_ref() == Some(&now) {
            return Ok(st);
        }
        last = Some(now);
    }
    stats(c)
}
