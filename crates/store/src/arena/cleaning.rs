//! What the arena offers the cleaner (`Store::make_room`, `compact`,
//! `pack`): a scan of every segment's live and dead bytes that names the
//! best segment to compact (and each queue's oldest segment the pack pass
//! has not been over), claiming it, the compactor's destination heads, and
//! giving the emptied segment back; and the cleaner's counters and
//! outcomes.
//!
//! The compactor copies a victim's live items through one of two heads of
//! its own, one per queue, so items stay in the queue they were in. A
//! destination segment takes the FIFO position of the victim it was opened
//! for, so compaction moves items in space but not in eviction order:
//!
//! ```text
//!   main FIFO, oldest first:   A  [V]  B  C          V: 30 % live, claimed
//!   compactor opens D:         A  D(active)  [V]  B  C
//!   V's live items copied:     A  D  B  C             V freed (spare or free list)
//! ```
//!
//! A destination being filled is ACTIVE, so nothing walks or evicts it;
//! once full it is sealed where it stands. S3-FIFO meeting an idle
//! destination at the front of its queue seals it first
//! (`seal_idle_destination`). The destination's base time is its first
//! victim's (no earlier than 32,768 s before now), so the access times of
//! the items moved keep their meaning.

use std::sync::atomic::AtomicU64;

use super::*;

/// The oldest a destination's base time may be, in seconds before now:
/// half the range of a 16-bit access time, so items moved into it keep
/// access times up to nine hours old and can be hit for nine hours more
/// before theirs saturate.
const DESTINATION_PAST: u32 = 32_768;

/// The cleaner's counters (see `StoreStats`).
#[derive(Default)]
pub struct CleanStats {
    /// Segments emptied by compaction.
    pub segments_compacted: AtomicU64,
    /// Live items compaction moved.
    pub items_moved: AtomicU64,
    /// Bytes those moves copied.
    pub bytes_copied: AtomicU64,
    /// Compactions a writer ran because it found no segment.
    pub writer_compactions: AtomicU64,
    /// Compactions given up (no destination room).
    pub aborted: AtomicU64,
    /// Segments emptied by eviction.
    pub segments_evicted: AtomicU64,
    /// Dead bytes freed with the segments that held them (compacted or
    /// evicted).
    pub dead_bytes_reclaimed: AtomicU64,
    /// Bytes of the live items evicted.
    pub evicted_live_bytes: AtomicU64,
    /// Evicted items that had an expiry (memcached's `evicted_nonzero`).
    pub evicted_nonzero: AtomicU64,
    /// Evicted items that were hit (the evictor had no room to keep them;
    /// memcached's `evicted_active`).
    pub evicted_active: AtomicU64,
    /// Seconds between the last access and the eviction of the last item
    /// evicted (memcached's `evicted_time`).
    pub evicted_time: AtomicU32,
    /// Items the evictor kept because they were hit: copied from small to
    /// main (memcached's `moves_to_warm`), or within main
    /// (`moves_within_lru`).
    pub kept_from_small: AtomicU64,
    /// Hit items the evictor kept within main (memcached's `moves_within_lru`).
    pub kept_in_main: AtomicU64,
    /// Items the background walks (memcached's LRU crawler) looked at, and
    /// the expired or flushed ones they reclaimed.
    pub crawler_checked: AtomicU64,
    /// Expired or flushed items the background walks unlinked.
    pub crawler_reclaimed: AtomicU64,
}

/// What `make_room` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// A segment was freed (or another cleaner freed one).
    Made,
    /// Nothing now; perhaps once writers and walkers are done.
    Busy,
    /// Nothing can be freed: out of memory.
    None,
}

/// How the cleaner ranks segments to compact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CleanPolicy {
    /// The segment with the most dead bytes.
    #[default]
    Greedy,
    /// Sprite LFS's cost-benefit: dead fraction × age ÷ (1 + live
    /// fraction), so old segments, whose live items are likely to stay,
    /// are compacted at a lower dead fraction than young ones, which may
    /// yet die by themselves.
    CostBenefit,
}

/// What one scan of the control blocks found (see `Arena::scan`).
#[derive(Clone, Copy, Debug, Default)]
pub struct CleanScan {
    /// Bytes of linked items, every segment.
    pub live: usize,
    /// Dead bytes of every segment that holds items.
    pub dead: usize,
    /// The best segment to compact, by the policy, among the sealed ones
    /// with at least the minimum of dead bytes asked for.
    pub best: Option<SegmentId>,
    /// Its dead bytes.
    pub best_dead: usize,
    /// Segments on the free list, fresh ones under the limit, and the
    /// spare.
    pub free: usize,
    /// The limit in bytes (segments × segment size).
    pub limit: usize,
    /// For the pack pass, by queue (small, main): the oldest sealed, quiet
    /// segment (by activation) that the pass has not been over.
    pub pack: [Option<SegmentId>; 2],
    /// The same, the newest.
    pub pack_newest: [Option<SegmentId>; 2],
}

impl Arena {
    /// Reads every segment's control block: live and dead bytes in all,
    /// and the best sealed segment to compact with at least `min_dead`
    /// dead bytes. Takes the pool's lock only to read its counts.
    pub fn scan(&self, policy: CleanPolicy, min_dead: usize, now: u32) -> CleanScan {
        let (ids, free, limit) = {
            let pool = self.pool.lock();
            let fresh = pool.limit.saturating_sub(pool.allocated);
            (
                pool.next_fresh as usize,
                pool.free.len() + fresh + usize::from(pool.spare.is_some()),
                pool.limit,
            )
        };
        let mut scan = CleanScan {
            free,
            limit: limit * self.segment_size,
            ..CleanScan::default()
        };
        let mut best_score = 0u128;
        let (mut oldest, mut newest) = ([u64::MAX; 2], [0u64; 2]);
        for (id, s) in self.segments[..ids].iter().enumerate() {
            let state = s.state.load(Ordering::Acquire);
            if state == STATE_FREE {
                continue;
            }
            let live = s.live();
            let dead = s.dead();
            scan.live += live;
            scan.dead += dead;
            if state != STATE_SEALED || s.pending.load(Ordering::Acquire) != 0 {
                continue;
            }
            if s.packed.load(Ordering::Relaxed) == PACK_NOT_YET {
                let q = s.queue.load(Ordering::Relaxed).min(1) as usize;
                let seq = s.seq.load(Ordering::Relaxed);
                if seq < oldest[q] {
                    oldest[q] = seq;
                    scan.pack[q] = Some(id as SegmentId);
                }
                if seq >= newest[q] {
                    newest[q] = seq;
                    scan.pack_newest[q] = Some(id as SegmentId);
                }
            }
            if dead < min_dead {
                continue;
            }
            let score = match policy {
                CleanPolicy::Greedy => dead as u128,
                CleanPolicy::CostBenefit => {
                    let age = now.saturating_sub(s.base_time.load(Ordering::Relaxed)) + 1;
                    ((dead as u128 * u128::from(age)) << 20) / (self.segment_size + live) as u128
                }
            };
            if score > best_score {
                best_score = score;
                scan.best = Some(id as SegmentId);
                scan.best_dead = dead;
            }
        }
        scan
    }

    /// Claims a sealed segment for compaction: it stays in its FIFO (its
    /// destination takes its place there) until `release_compacted` or
    /// `unclaim`. False if it is no longer sealed and quiet.
    pub fn claim_for_compaction(&self, seg: SegmentId) -> bool {
        let _pool = self.pool.lock();
        let s = self.segment(seg);
        s.pending.load(Ordering::Acquire) == 0
            && s.state
                .compare_exchange(
                    STATE_SEALED,
                    STATE_CLAIMED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Room the compactor has for `queue`'s items without waiting for
    /// anyone: what is left in its destination, plus a whole segment if a
    /// free one (or the spare) can be had.
    pub fn compactor_room(&self, queue: Queue) -> usize {
        let left = {
            let h = self.heads[self.compactor_head(queue)].lock();
            h.seg.map_or(0, |_| self.segment_size - h.offset)
        };
        let pool = self.pool.lock();
        let segment = !pool.free.is_empty() || pool.spare.is_some() || pool.allocated < pool.limit;
        left + if segment { self.segment_size } else { 0 }
    }

    /// Reserves room for a copy of an item of `victim` (a `queue`
    /// segment claimed for compaction) in the compactor's destination;
    /// when that is full, opens a new one (a free segment, else the spare)
    /// at the victim's place in the FIFO. None if there is no segment to
    /// open. The caller holds no shard lock: opening a segment waits for
    /// the readers of its previous items.
    /// A copy the pack pass makes (`packing`) marks its destination as
    /// packed, so that the pass does not walk it again.
    pub fn reserve_compactor(
        &self,
        queue: Queue,
        spec: &ItemSpec,
        victim: SegmentId,
        now: u32,
        packing: bool,
    ) -> Option<Slot> {
        let size = spec.size();
        let mut h = self.heads[self.compactor_head(queue)].lock();
        if h.seg.is_none() || h.offset + size > self.segment_size {
            let seg = {
                let mut pool = self.pool.lock();
                if let Some(seg) = pool.free.pop() {
                    seg
                } else if let Some(seg) = (pool.allocated < pool.limit)
                    .then(|| self.fresh_id(&mut pool))
                    .flatten()
                {
                    pool.allocated += 1;
                    seg
                } else {
                    pool.spare.take()?
                }
            };
            // Its old readers are waited for without the pool's lock (see
            // `take_segment`); nobody waits for a compactor's head.
            epoch::wait_past(self.segment(seg).retired.load(Ordering::Acquire));
            let base = self.segment(victim).base_time.load(Ordering::Relaxed);
            let base = base.max(now.saturating_sub(DESTINATION_PAST)).min(now);
            let mut pool = self.pool.lock();
            if let Some(full) = h.seg.take() {
                // Sealed where it stands in the FIFO.
                self.segment(full)
                    .state
                    .store(STATE_SEALED, Ordering::Release);
            }
            self.activate_at(seg, queue, base);
            let fifo = &mut pool.fifo[queue as usize];
            let at = fifo.iter().position(|&x| x == victim).unwrap_or(fifo.len());
            fifo.insert(at, seg);
            h.seg = Some(seg);
            h.offset = 0;
        }
        let slot = self.take_slot(&mut h, spec);
        if packing {
            self.segment(slot.seg)
                .packed
                .store(PACKED, Ordering::Relaxed);
        }
        Some(slot)
    }

    /// Gives back a segment the compactor emptied: off its FIFO, and to
    /// the spare if that was used, else to the free list.
    pub fn release_compacted(&self, seg: SegmentId) {
        let mut pool = self.pool.lock();
        let q = self.queue(seg) as usize;
        if let Some(pos) = pool.fifo[q].iter().position(|&x| x == seg) {
            pool.fifo[q].remove(pos);
        }
        let s = self.segment(seg);
        s.retired.store(epoch::retire(), Ordering::Release);
        s.state.store(STATE_FREE, Ordering::Release);
        if pool.spare.is_none() && pool.limit >= 2 {
            pool.spare = Some(seg);
        } else {
            pool.free.push(seg);
        }
    }

    /// Seals `seg` if it is a compactor's destination that no compaction
    /// is filling right now (its head's lock is free), so that eviction
    /// can take it. The caller holds the pool's lock, hence `try_lock`
    /// (the compactor takes its head's lock before the pool's).
    pub(super) fn seal_idle_destination(&self, seg: SegmentId) {
        if self.segment(seg).state.load(Ordering::Acquire) != STATE_ACTIVE {
            return;
        }
        for queue in [Queue::Small, Queue::Main] {
            if let Some(mut h) = self.heads[self.compactor_head(queue)].try_lock() {
                if h.seg == Some(seg) {
                    h.seg = None;
                    self.segment(seg)
                        .state
                        .store(STATE_SEALED, Ordering::Release);
                    return;
                }
            }
        }
    }

    /// Free segments the writers can take now (free list, fresh ones
    /// under the limit), not counting the spare.
    pub fn free_segments(&self) -> usize {
        let pool = self.pool.lock();
        pool.free.len() + pool.limit.saturating_sub(pool.allocated)
    }
}
