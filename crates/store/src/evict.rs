//! Eviction and reclamation: walking a claimed segment item by item under
//! each item's shard lock, to evict it (S3-FIFO: keep what was hit by
//! copying it into main, drop the rest, remember small's victims in the
//! ghost) or to reclaim only its expired and flushed items; freeing
//! segments whose items have all expired; and the memory upkeep the
//! maintainer runs (huge pages).
//!
//! The S3-FIFO frequency counts hits (`item::bump`, saturating at
//! `item::FREQ_MAX`, 3); a copy kept from small starts again from 0, one
//! kept in main from one less. A packed item kept (`-o compression=cold`)
//! is copied as it is, its frame and all, unless its frequency reached
//! `UNPACK_FREQ` (the counter's most, 3: hot), when it is written back
//! raw:
//!
//! ```text
//!   packed, freq 0:      evicted (to flash if there is a tier)
//!   packed, freq 1 or 2: kept packed (the pass passes packed items over)
//!   packed, freq 3:      kept raw
//! ```
//!
//! A warm item is read about once per turn of its queue: written back raw
//! it would take its raw size again (2-3x) and, not hit on a turn, be
//! packed again by the pass (the cleaner's CPU), while its few
//! decompressions per turn cost little. Measured on a zipf(0.99) replay
//! (`osmium-bench density --phases replay -m 256`), unpacking from
//! frequency 1 (every packed item kept), 2 and 3 missed 0.087, 0.087 and
//! 0.072 at 60,000 requests/s; never unpacking 0.049, but at 10-30 % more
//! server CPU per request than from 3, the hottest keys then decoded at
//! each GET.
//! With `-o compression=all` every kept item stays packed.

use std::sync::atomic::Ordering;

use crate::arena::{Queue, SegmentId, Slot};
use crate::index::{hash_key, Found, Location, Table};
use crate::item;
use crate::store::Store;
use crate::types::{Compression, Lookup};

/// Items a background walk (`reclaim_step`, `reclaim_expired_segments`)
/// visits between two yields of the CPU: about 50 µs of work. Walking a
/// whole segment in one go (a 1 MiB segment of small items is ~9,000 items,
/// ~1.7 ms) keeps a worker, or the clients, off the core the maintainer
/// shares with them for that long.
const WALK_ITEMS_PER_YIELD: usize = 256;

/// The S3-FIFO frequency from which a packed item the evictor keeps is
/// written back raw (the counter's most: hot); below it, it is copied
/// packed (see the module comment).
pub(crate) const UNPACK_FREQ: u8 = item::FREQ_MAX;

impl Store {
    /// Empties a segment claimed for eviction (S3-FIFO, see `arena`):
    /// expired and flushed items are reclaimed; items hit since they were
    /// written (or last kept) are copied to main, with their frequency
    /// reset (from small) or decremented (from main); the rest are evicted,
    /// and keys evicted from small are remembered in the ghost.
    pub(crate) fn evict_segment(&self, seg: SegmentId) {
        let dead = self.arena.segment(seg).dead();
        self.walk_segment(seg, true);
        let c = &self.clean_stats;
        c.segments_evicted.fetch_add(1, Ordering::Relaxed);
        c.dead_bytes_reclaimed
            .fetch_add(dead as u64, Ordering::Relaxed);
    }

    /// Walks the items of a claimed, fully written segment. With `evict`,
    /// every live item is kept (copied) or evicted as above; otherwise only
    /// expired/flushed ones are unlinked. Returns how many live items
    /// remain in it.
    ///
    /// Without `evict` (the maintainer's walks) it yields the CPU every
    /// `WALK_ITEMS_PER_YIELD` items, holding no lock then, so that a thread
    /// waiting for the core runs within ~50 µs. An eviction runs inline in
    /// a writer's request and does not yield.
    fn walk_segment(&self, seg: SegmentId, evict: bool) -> usize {
        let mut live = 0;
        let queue = self.arena.queue(seg);
        let used = self.arena.segment(seg).used.load(Ordering::Acquire);
        let mut offset = 0;
        let mut visited = 0usize;
        while offset < used {
            if !evict {
                visited += 1;
                if visited.is_multiple_of(WALK_ITEMS_PER_YIELD) {
                    std::thread::yield_now();
                }
            }
            let it = self.arena.item(seg, offset);
            let size = it.size();
            if !it.is_dead() {
                let key = it.key();
                let hash = hash_key(key);
                let loc = Location { seg, offset };
                let mut table = self.shard(hash).write();
                if let Some(found) = table.find_at(&self.arena, key, hash, loc) {
                    // Read before the check: see `keep`.
                    let flushes = self.arena.flush_epoch();
                    let now = self.clock.now();
                    let stale = !matches!(self.check(it, loc, now), Lookup::Hit(()));
                    let fetched = it.is_fetched();
                    if !evict {
                        self.clean_stats
                            .crawler_checked
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    if stale {
                        let c = &mut table.counters;
                        c.reclaimed += 1;
                        c.expired_unfetched += u64::from(!fetched);
                        if !evict {
                            self.clean_stats
                                .crawler_reclaimed
                                .fetch_add(1, Ordering::Relaxed);
                        }
                        self.unlink(&mut table, &found);
                    } else if !evict {
                        live += 1;
                    } else {
                        let freq = it.freq();
                        if freq == 0 || !self.keep(&mut table, hash, &found, queue, now, flushes) {
                            // To flash if there is a tier, else evicted.
                            if !self.demote(hash, &found, flushes) {
                                if self.events.wanted(crate::events::EVICTIONS) {
                                    self.report_eviction(it, found.loc, now);
                                }
                                let c = &mut table.counters;
                                c.evictions += 1;
                                c.evicted_unfetched += u64::from(!fetched);
                                let cs = &self.clean_stats;
                                cs.evicted_live_bytes
                                    .fetch_add(size as u64, Ordering::Relaxed);
                                if it.exptime() != 0 {
                                    cs.evicted_nonzero.fetch_add(1, Ordering::Relaxed);
                                }
                                if freq != 0 {
                                    // Hit, but no room to keep it.
                                    cs.evicted_active.fetch_add(1, Ordering::Relaxed);
                                }
                                let idle = now.saturating_sub(self.base_atime(loc, it));
                                cs.evicted_time.store(idle, Ordering::Relaxed);
                            }
                            self.unlink(&mut table, &found);
                            if queue == Queue::Small {
                                self.ghost.insert(hash);
                            }
                        }
                    }
                }
            }
            offset += size;
        }
        live
    }

    /// Tells the owner of an eviction (`events`).
    #[cold]
    fn report_eviction(&self, it: item::ItemPtr, loc: Location, now: u32) {
        let exptime = it.exptime();
        let e = crate::events::Evicted {
            key: it.key(),
            fetched: it.is_fetched(),
            ttl: if exptime == 0 {
                -1
            } else {
                i64::from(exptime) - i64::from(now)
            },
            last_access: now.saturating_sub(self.base_atime(loc, it)),
            flags: it.flags(),
            value_len: it.value_len(),
        };
        self.events.emit(&crate::events::Event::Evicted(e));
    }

    /// Copies an item the evictor keeps into main (keeping its CAS unique
    /// and access time; a packed one raw or packed as the module comment
    /// says). False if there was no room (it is then evicted).
    /// `flushes` is the arena's flush number read before the item was
    /// checked.
    fn keep(
        &self,
        table: &mut Table,
        hash: u64,
        found: &Found,
        from: Queue,
        now: u32,
        flushes: u32,
    ) -> bool {
        let it = found.item;
        let spec = item::ItemSpec {
            cas: self.explicit(self.cas_of(found.loc, it)),
            ..it.spec()
        };
        // A packed item whose frequency reached UNPACK_FREQ is hot:
        // written back raw; one hit less often stays packed, as does every
        // value with -o compression=all (see the module comment).
        let unpack = match spec.packed {
            Some((_, raw_len))
                if self.cfg.compression != Compression::All && it.freq() >= UNPACK_FREQ =>
            {
                Some(raw_len)
            }
            _ => None,
        };
        let spec = unpack.map_or(spec, |raw_len| spec.with_raw_value(raw_len));
        let Some(slot) = self.arena.reserve_evictor(&spec, now) else {
            return false;
        };
        if unpack.is_some() {
            if !self.write_unpacked(&slot, &spec, it) {
                return false;
            }
        } else {
            self.write_item(&slot, &spec, it.key(), &[it.stored_value()], it.state());
            if spec.packed.is_some() {
                self.pack_stats.kept_packed.fetch_add(1, Ordering::Relaxed);
            }
        }
        slot.ptr
            .set_atime(self.atime_in(slot.seg, self.base_atime(found.loc, it)));
        if from == Queue::Main {
            slot.ptr.set_freq(it.freq() - 1);
            self.clean_stats
                .kept_in_main
                .fetch_add(1, Ordering::Relaxed);
        } else {
            self.clean_stats
                .kept_from_small
                .fetch_add(1, Ordering::Relaxed);
        }
        let new = self.link_counted(table, hash, &slot, Some(found), false);
        if self.arena.flush_epoch() != flushes {
            // A flush_all ran since the item was checked (it marks
            // segments without shard locks): the copy goes, as the item
            // would have.
            if let Some(f) = table.find_at(&self.arena, it.key(), hash, new) {
                self.unlink(table, &f);
            }
        }
        self.arena.finish_write(slot.seg);
        true
    }

    /// Writes the copy of packed item `it` into `slot`, reserved for it
    /// raw (`spec`): its value decoded straight into the slot. False if it
    /// does not decode (the slot is given up, the error counted: the item
    /// is then evicted, as `drop_corrupt` would drop it).
    #[cold]
    fn write_unpacked(&self, slot: &Slot, spec: &item::ItemSpec, it: item::ItemPtr) -> bool {
        self.write_item(slot, spec, it.key(), &[], it.state());
        // SAFETY: the slot was reserved for `spec`, whose value is
        // `spec.value_len` bytes from `value_ptr`; it is this thread's
        // until linked (no reader can reach it).
        let value = unsafe { std::slice::from_raw_parts_mut(slot.ptr.value_ptr(), spec.value_len) };
        if self.value_of(it).write_into(value).is_err() {
            slot.ptr.mark_dead();
            self.arena.finish_write(slot.seg);
            self.compress_errors.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.pack_stats.kept_raw.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// One step of background maintenance: runs a due delayed flush, and
    /// walks the `cursor`-th sealed segment, unlinking its expired and
    /// flushed items. Returns false when there was nothing to walk.
    pub fn reclaim_step(&self, cursor: usize) -> bool {
        self.flush_due(self.clock.now());
        let Some(seg) = self.arena.claim_for_reclaim(cursor) else {
            return false;
        };
        if !self.arena.segment(seg).may_hold_stale() {
            // Nothing in it can expire and nothing was flushed: a walk
            // (~1.7 ms for a segment of 64 B items) would find nothing.
            self.arena.unclaim(seg, usize::MAX);
            return true;
        }
        let live = self.walk_segment(seg, false);
        self.arena.unclaim(seg, live);
        true
    }

    /// TTL-aware bulk reclamation: frees every segment whose items have all
    /// expired (known from segment headers alone), counting each item as
    /// reclaimed (and expired_unfetched if it was never fetched). Returns
    /// how many segments were freed.
    pub fn reclaim_expired_segments(&self) -> usize {
        let segs = self.arena.claim_expired(self.clock.now());
        for &seg in &segs {
            let live = self.walk_segment(seg, false);
            self.arena.unclaim(seg, live);
        }
        segs.len()
    }

    /// Backs full regions of item memory with huge pages (see
    /// `Arena::collapse_sealed`); the maintainer calls it.
    pub fn collapse_memory(&self, max_regions: usize) -> usize {
        self.arena.collapse_sealed(max_regions)
    }

    /// Sealed segments, for pacing the reclaimer.
    pub fn sealed_segments(&self) -> usize {
        self.arena.sealed_count()
    }
}
