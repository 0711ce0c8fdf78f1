//! Engine statistics: summing the shards' and write heads' counters into
//! [`StoreStats`], resetting the resettable ones, and S3-FIFO's queues as
//! `stats items` shows them ([`QueueStats`]: items per queue, and the
//! oldest access time of each queue's oldest segments, found by walking
//! their item headers).

use std::sync::atomic::Ordering;

use crate::arena::SegmentId;
use crate::epoch;
use crate::index::ShardCounters;
use crate::store::Store;
use crate::types::{QueueStats, StoreStats};

/// Segments of a queue walked for its oldest access time: the oldest
/// segment may hold only recently hit items while the next does not.
const OLDEST_SEGMENTS_WALKED: usize = 2;

impl Store {
    /// The engine's figures for `stats`, summed from the shards, write heads
    /// and cleaner.
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
            total.packed.merge(&c.packed);
            index_bytes += t.memory();
        }
        for h in self.head_counters.iter() {
            total.bytes = total.bytes.wrapping_add(h.bytes.load(Ordering::Relaxed));
            total.total_items += h.total_items.load(Ordering::Relaxed);
            total.packed.merge(&h.packed());
        }
        // Read one after the other, as `bytes` (below).
        let gauge = |n: u64| if (n as i64) < 0 { 0 } else { n };
        let p = &self.pack_stats;
        let (allocated, limit) = self.arena.usage();
        let scan = self
            .arena
            .scan(crate::arena::CleanPolicy::Greedy, usize::MAX, 0);
        let c = &self.clean_stats;
        let flash_items = match &self.flash {
            Some(f) if f.is_on() => f.index.len() as u64,
            _ => 0,
        };
        let (pack_dicts, pack_dict_bytes) = self.dicts.in_use();
        StoreStats {
            pack_dicts,
            pack_dict_bytes,
            pack_dict_trainings: self.dicts.trainings.load(Ordering::Relaxed),
            pack_dict_train_us: self.dicts.train_cpu_micros.load(Ordering::Relaxed),
            packed_dict_items: gauge(self.dicts.live_total()),
            flash_items,
            compress_errors: self.compress_errors(),
            pack_segments: p.segments.load(Ordering::Relaxed),
            pack_segments_not_worth: p.not_worth.load(Ordering::Relaxed),
            pack_items: p.items.load(Ordering::Relaxed),
            pack_rejected: p.rejected.load(Ordering::Relaxed),
            pack_skipped: p.skipped.load(Ordering::Relaxed),
            pack_cpu_us: p.cpu_micros.load(Ordering::Relaxed),
            pack_kept_raw: p.kept_raw.load(Ordering::Relaxed),
            pack_kept_packed: p.kept_packed.load(Ordering::Relaxed),
            pack_promoted: p.promoted.load(Ordering::Relaxed),
            packed_items: gauge(total.packed.items),
            packed_raw_bytes: gauge(total.packed.raw_bytes),
            packed_bytes: gauge(total.packed.bytes),
            evicted_nonzero: c.evicted_nonzero.load(Ordering::Relaxed),
            evicted_active: c.evicted_active.load(Ordering::Relaxed),
            evicted_time: c.evicted_time.load(Ordering::Relaxed),
            moves_to_warm: c.kept_from_small.load(Ordering::Relaxed),
            moves_within_lru: c.kept_in_main.load(Ordering::Relaxed),
            crawler_items_checked: c.crawler_checked.load(Ordering::Relaxed),
            crawler_reclaimed: c.crawler_reclaimed.load(Ordering::Relaxed),
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
            curr_items: total.curr_items + flash_items,
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
            segments_room_bytes: self.arena.room() as u64,
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
            &c.evicted_nonzero,
            &c.evicted_active,
            &c.kept_from_small,
            &c.kept_in_main,
            &c.crawler_checked,
            &c.crawler_reclaimed,
        ]
        .into_iter()
        .chain(self.pack_stats.all())
        {
            n.store(0, Ordering::Relaxed);
        }
        c.evicted_time.store(0, Ordering::Relaxed);
    }

    /// S3-FIFO's queues: the items each holds in RAM and the oldest last
    /// access among the items of its oldest segments (a walk of up to
    /// `OLDEST_SEGMENTS_WALKED` segments' headers per queue).
    pub fn queues(&self) -> QueueStats {
        let [small, main] = self.arena.queue_figures(OLDEST_SEGMENTS_WALKED);
        let oldest = |segs: &[(SegmentId, u64)]| {
            segs.iter()
                .filter_map(|&(seg, seq)| self.oldest_access_in(seg, seq))
                .min()
        };
        QueueStats {
            small_items: small.items,
            main_items: main.items,
            small_oldest: oldest(&small.oldest),
            main_oldest: oldest(&main.oldest),
            flash_oldest: match &self.flash {
                Some(f) if f.is_on() => f.oldest_access(),
                _ => None,
            },
        }
    }

    /// The oldest last access (relative clock) of the live items of `seg`,
    /// if it is still the activation numbered `seq`. Pinned, so that the
    /// segment is not reused during the walk (a reuse after the pin waits
    /// for it; one before it changed `seq`); headers below `used` are whole
    /// (written before `used` moved), and an item being written is marked
    /// dead until it is committed.
    fn oldest_access_in(&self, seg: SegmentId, seq: u64) -> Option<u32> {
        let _pin = epoch::pin();
        let s = self.arena.segment(seg);
        if s.seq.load(Ordering::Acquire) != seq {
            return None;
        }
        let base = s.base_time.load(Ordering::Acquire);
        let used = s.used.load(Ordering::Acquire);
        let now = self.clock.now();
        let mut offset = 0;
        let mut oldest: Option<u32> = None;
        while offset < used {
            let it = self.arena.item(seg, offset);
            let size = it.size();
            if size == 0 {
                break;
            }
            if !it.is_dead() {
                let atime = (base + u32::from(it.atime())).min(now);
                oldest = Some(oldest.map_or(atime, |o| o.min(atime)));
            }
            offset += size;
        }
        if s.seq.load(Ordering::Acquire) != seq {
            return None;
        }
        oldest
    }
}
