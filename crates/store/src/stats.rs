//! Engine statistics: summing the shards' and write heads' counters into
//! [`StoreStats`], and resetting the resettable ones.

use std::sync::atomic::Ordering;

use crate::index::ShardCounters;
use crate::store::Store;
use crate::types::StoreStats;

impl Store {
    pub fn stats(&self) -> StoreStats {
        let mut total = ShardCounters::default();
        let mut index_bytes = 0;
        for shard in self.shards.iter() {
            let t = shard.read();
            let c = t.counters;
            total.curr_items += c.curr_items;
            total.bytes = total.bytes.wrapping_add(c.bytes);
            total.total_items += c.total_items;
            total.evictions += c.evictions;
            total.evicted_unfetched += c.evicted_unfetched;
            total.reclaimed += c.reclaimed;
            total.expired_unfetched += c.expired_unfetched;
            index_bytes += t.memory();
        }
        for h in self.head_counters.iter() {
            total.bytes = total.bytes.wrapping_add(h.bytes.load(Ordering::Relaxed));
            total.total_items += h.total_items.load(Ordering::Relaxed);
        }
        let (allocated, limit) = self.arena.usage();
        let scan = self
            .arena
            .scan(crate::arena::CleanPolicy::Greedy, usize::MAX, 0);
        let c = &self.clean_stats;
        StoreStats {
            live_bytes: scan.live as u64,
            dead_bytes: scan.dead as u64,
            segments_free: self.arena.free_segments() as u64,
            segments_compacted: c.segments_compacted.load(Ordering::Relaxed),
            compact_items_moved: c.items_moved.load(Ordering::Relaxed),
            compact_bytes_copied: c.bytes_copied.load(Ordering::Relaxed),
            compact_writer_runs: c.writer_compactions.load(Ordering::Relaxed),
            compact_aborted: c.aborted.load(Ordering::Relaxed),
            segments_evicted: c.segments_evicted.load(Ordering::Relaxed),
            evicted_live_bytes: c.evicted_live_bytes.load(Ordering::Relaxed),
            reclaimed_dead_bytes: c.dead_bytes_reclaimed.load(Ordering::Relaxed),
            curr_items: total.curr_items,
            total_items: total.total_items,
            // Shards and heads are read one after the other: a sum caught
            // between a swap and its count must not show as ~2^64.
            bytes: if (total.bytes as i64) < 0 {
                0
            } else {
                total.bytes
            },
            evictions: total.evictions,
            evicted_unfetched: total.evicted_unfetched,
            reclaimed: total.reclaimed,
            expired_unfetched: total.expired_unfetched,
            limit_maxbytes: self.limit_maxbytes.load(Ordering::Relaxed),
            segment_size: self.arena.segment_size() as u64,
            segments_allocated: allocated as u64,
            segments_limit: limit as u64,
            index_bytes: index_bytes as u64,
        }
    }

    /// Zeroes the resettable engine counters (`stats reset`).
    pub fn reset_stats(&self) {
        for shard in self.shards.iter() {
            let mut t = shard.write();
            let c = &mut t.counters;
            c.total_items = 0;
            c.evictions = 0;
            c.evicted_unfetched = 0;
            c.reclaimed = 0;
            c.expired_unfetched = 0;
        }
        for h in self.head_counters.iter() {
            h.total_items.store(0, Ordering::Relaxed);
        }
        let c = &self.clean_stats;
        for n in [
            &c.segments_compacted,
            &c.items_moved,
            &c.bytes_copied,
            &c.writer_compactions,
            &c.aborted,
            &c.segments_evicted,
            &c.evicted_live_bytes,
            &c.dead_bytes_reclaimed,
        ] {
            n.store(0, Ordering::Relaxed);
        }
    }
}
