//! Cleaning: getting dead space back before live items go.
//!
//! Items never move while they live, so an overwritten or deleted item
//! leaves dead bytes in its segment (`Segment::dead`) until the segment is
//! emptied. Two ways empty one:
//!
//! * **compaction** (this module): the live items of a mostly dead
//!   segment are copied into the compactor's destination for its queue
//!   (see `arena::cleaning`), each keeping its CAS unique (stored in the
//!   copy), flags, expiry, access time, state bits and S3-FIFO frequency,
//!   and the segment is freed: nothing is evicted;
//! * **eviction** (`evict`): S3-FIFO's victim loses its live items that
//!   were not hit.
//!
//! Who cleans, and when (`make_room`, `clean_ahead`):
//!
//! ```text
//!   background cleaner (a thread of the server, woken when free segments
//!   run low): while free < low water and a segment is at least
//!   `threshold` dead -> compact it (yielding every 256 items); none
//!   that dead -> pack the cold items of a segment (`pack`)
//!
//!   a writer with no segment to take (make_room):
//!     dead bytes >= reserve          -> compact the deadest segment
//!     deadest is >= threshold dead   -> compact it
//!     otherwise                      -> evict (S3-FIFO)
//! ```
//!
//! The reserve is two segments and `reserve_percent` of the limit. So no
//! live item is evicted while the live bytes are below the limit less the
//! reserve, less the unfilled tails of the write heads' segments and the
//! spare; and in a cache that is over full, where the dead bytes stay
//! under the reserve, a segment is compacted rather than evicted only
//! when it is mostly dead. Compactions and evictions of writers and of the background
//! cleaner take turns (the cleaner lock), so the spare segment that both
//! need is always there for one of them.
//!
//! Moving an item is safe for lock-free readers as the evictor's copies
//! are: the copy is written and linked under the key's shard lock, and
//! the victim's memory is reused only after every reader pinned while it
//! was linked has finished (`epoch`). A crash between linking the copy and
//! marking the original dead leaves two live versions with the same CAS
//! unique and the same contents; a recovery keeps one.

use std::sync::atomic::Ordering;

use crate::arena::{Queue, Room, SegmentId};
use crate::index::{hash_key, Location};
use crate::item::{self, ItemPtr};
use crate::store::Store;
use crate::types::Lookup;

/// Items the background cleaner copies between two yields of the CPU
/// (about 50 µs of work; see `evict::WALK_ITEMS_PER_YIELD`).
const ITEMS_PER_YIELD: usize = 256;

/// How far ahead of its reads the planning pass fetches item memory.
const READ_AHEAD: usize = 16 << 10;

/// How many items ahead the moving pass fetches index lines.
const MOVES_AHEAD: usize = 8;

/// Least dead bytes, as a fraction of a segment (1/64), that make a
/// segment worth compacting at all.
const MIN_DEAD_SHIFT: u32 = 6;

/// How `move_item` writes an item's copy.
#[derive(Clone, Copy)]
pub(crate) enum CopyAs<'a> {
    /// As it is (a packed value stays packed, a raw one raw).
    Same,
    /// Packed (the pack pass): this frame, made with the dictionary this
    /// codec byte names (`dict`; 0: none), in place of the item's raw
    /// value.
    Packed(&'a [u8], u8),
    /// Raw, marked as tried: the value did not pack (the pack pass).
    RawTried,
}

/// What `move_planned` did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Moves {
    /// Every item was moved (or was gone): the victim is empty.
    pub(crate) emptied: bool,
    /// Items moved, and the bytes their copies took.
    pub(crate) moved: u64,
    pub(crate) copied: u64,
    /// Of the items moved, those copied packed (`CopyAs::Packed`).
    pub(crate) packed: u64,
}

/// What `move_item` did.
enum Moved {
    Copied(usize),
    /// Gone meanwhile (replaced, deleted, expired): nothing to copy.
    Gone,
    /// No room at the destination: the compaction stops.
    NoRoom,
}

impl Store {
    /// A writer found no segment to take: compacts or evicts one (see
    /// the module comment).
    pub(crate) fn make_room(&self) -> Room {
        // A segment reused below does not wait for this thread's own pin.
        debug_assert!(!crate::epoch::keeps(), "making room with a kept pin");
        let _turn = self.cleaner.lock();
        if self.arena.free_segments() > 0 {
            // Another cleaner made room while this one waited.
            return Room::Made;
        }
        let seg_size = self.arena.segment_size();
        let scan = self.arena.scan(
            self.cfg.clean.policy,
            seg_size >> MIN_DEAD_SHIFT,
            self.clock.now(),
        );
        // Every segment holds items (or is a head's, or the spare): what
        // is not live is dead, or the heads' unfilled tails.
        let keep_live = scan.dead >= self.clean_reserve() || !self.cfg.evictions;
        let worth = scan.best_dead * 100 >= seg_size * self.cfg.clean.threshold_percent as usize;
        if let Some(victim) = scan.best.filter(|_| keep_live || worth) {
            if self.arena.claim_for_compaction(victim) {
                self.clean_stats
                    .writer_compactions
                    .fetch_add(1, Ordering::Relaxed);
                if self.compact_segment(victim, false) {
                    return Room::Made;
                }
            }
        }
        if let Some(victim) = self.arena.claim_eviction_victim() {
            self.evict_segment(victim);
            self.arena.recycle(victim);
            return Room::Made;
        }
        if self.cfg.evictions || scan.dead >= seg_size {
            // Segments being written or walked may be evictable, or dead
            // space compactable, in a moment.
            Room::Busy
        } else {
            // -M, full of live items: out of memory.
            Room::None
        }
    }

    /// Dead bytes that make a writer compact rather than evict, whatever
    /// the cost: two segments' worth (compacting frees a whole segment
    /// only once a victim's dead bytes and the destination's room add up
    /// to one) and `reserve_percent` of the limit. So no live item is
    /// evicted while the live bytes are below the limit less that, less
    /// the unfilled tails of the write heads' segments and the spare.
    pub(crate) fn clean_reserve(&self) -> usize {
        let (_, limit) = self.arena.usage();
        let seg_size = self.arena.segment_size();
        2 * seg_size + limit * seg_size / 100 * self.cfg.clean.reserve_percent as usize
    }

    /// Free segments the background cleaner keeps ahead of the writers:
    /// one per write head, and 1/256 of the limit.
    fn low_water(&self) -> usize {
        let (_, limit) = self.arena.usage();
        (limit / 256)
            .max(self.arena.head_count().min(limit / 8))
            .max(1)
    }

    /// One step of the background cleaner: writes back raw the hot packed
    /// items GETs noted (`promote`); then, when the arena is full and
    /// fewer than the low-water mark of segments are free, compacts the
    /// best segment that is at least `threshold_percent` dead, or else
    /// (`-o compression=cold`) packs the cold items of one segment (see
    /// `pack`). False when there was nothing to do (the caller waits for
    /// `wait_for_cleaning`).
    pub fn clean_ahead(&self) -> bool {
        // Hot packed items GETs noted first: each round, free segments
        // low or not (see `promote`).
        self.promote_hot();
        if self.arena.free_segments() >= self.low_water() {
            return false;
        }
        let Some(_turn) = self.cleaner.try_lock() else {
            // A writer is making room itself.
            return false;
        };
        let seg_size = self.arena.segment_size();
        let min_dead = seg_size * self.cfg.clean.threshold_percent as usize / 100;
        let scan = self.arena.scan(
            self.cfg.clean.policy,
            min_dead.max(seg_size >> MIN_DEAD_SHIFT),
            self.clock.now(),
        );
        let Some(victim) = scan.best else {
            // Nothing dead enough: pack cold items instead (the pass
            // takes the cleaner lock for its moves only).
            drop(_turn);
            return self.pack_ahead(&scan);
        };
        if !self.arena.claim_for_compaction(victim) {
            return true;
        }
        self.compact_segment(victim, true);
        true
    }

    /// Blocks the background cleaner until a writer finds free segments
    /// low, or `timeout` passes.
    pub fn wait_for_cleaning(&self, timeout: std::time::Duration) {
        let mut wanted = self.clean_wanted.0.lock();
        if !*wanted {
            self.clean_wanted.1.wait_for(&mut wanted, timeout);
        }
        *wanted = false;
    }

    /// Wakes the background cleaner (to stop it: it returns from
    /// `wait_for_cleaning` at once).
    pub fn wake_cleaner(&self) {
        *self.clean_wanted.0.lock() = true;
        self.clean_wanted.1.notify_one();
    }

    /// Wakes the background cleaner if free segments are low (a writer
    /// that just took one calls it).
    pub(crate) fn note_segment_taken(&self) {
        if self.cfg.clean.background && self.arena.free_segments() < self.low_water() {
            let mut wanted = self.clean_wanted.0.lock();
            if !*wanted {
                *wanted = true;
                self.clean_wanted.1.notify_one();
            }
        }
    }

    /// Compacts a segment claimed for compaction: copies its live items
    /// to the compactor's destination for its queue and frees it. True if
    /// it was emptied; false if it was given back (sealed, with what is
    /// left in it) because the copies would not fit or would not free
    /// anything. `background` yields the CPU every few hundred items.
    ///
    /// Two passes: the first reads the segment in order (fetched ahead of
    /// the reads, as a recovery does) and notes each live item's offset
    /// and key hash, and what the copies will take; the second moves
    /// them, fetching the shard lock lines and index buckets of the items
    /// a few ahead, so a move rarely waits for memory.
    pub(crate) fn compact_segment(&self, victim: SegmentId, background: bool) -> bool {
        let mut plan = self.compact_plan.lock();
        let queue = self.arena.queue(victim);
        let s = self.arena.segment(victim);
        let used = s.used.load(Ordering::Acquire);
        let need = self.plan_moves(victim, used, &mut plan);
        let seg_size = self.arena.segment_size();
        if need + (seg_size >> MIN_DEAD_SHIFT) > used || need > self.arena.compactor_room(queue) {
            self.clean_stats.aborted.fetch_add(1, Ordering::Relaxed);
            self.arena.unclaim(victim, usize::MAX);
            return false;
        }
        let dead = used.saturating_sub(s.live());
        let moves = self.move_planned(
            victim,
            plan.len(),
            |i| (plan[i].0, plan[i].1, CopyAs::Same),
            background,
            false,
        );
        let c = &self.clean_stats;
        if !moves.emptied {
            c.aborted.fetch_add(1, Ordering::Relaxed);
            self.arena.unclaim(victim, usize::MAX);
            return false;
        }
        c.segments_compacted.fetch_add(1, Ordering::Relaxed);
        c.dead_bytes_reclaimed
            .fetch_add(dead as u64, Ordering::Relaxed);
        self.arena.release_compacted(victim);
        true
    }

    /// The moving pass of a compaction or a pack: moves the `n` items
    /// `entry` names (offset in `victim`, key hash, how to copy) to the
    /// compactor's destination for the victim's queue, fetching the index
    /// lines of the items a few ahead; counts the moves in the cleaner's
    /// stats. Stops at the first item that finds no room (`emptied`
    /// false). `background` yields the CPU every few hundred items;
    /// `packing` marks the destinations as the pack pass's.
    pub(crate) fn move_planned<'p>(
        &self,
        victim: SegmentId,
        n: usize,
        entry: impl Fn(usize) -> (u32, u64, CopyAs<'p>),
        background: bool,
        packing: bool,
    ) -> Moves {
        let queue = self.arena.queue(victim);
        let mut m = Moves {
            emptied: true,
            ..Moves::default()
        };
        for i in 0..n {
            let (offset, hash, copy) = entry(i);
            if i + MOVES_AHEAD < n {
                self.prefetch_index(entry(i + MOVES_AHEAD).1);
            }
            if background && (i + 1).is_multiple_of(ITEMS_PER_YIELD) {
                std::thread::yield_now();
            }
            let offset = offset as usize;
            let it = self.arena.item(victim, offset);
            if it.is_dead() {
                continue;
            }
            let loc = Location {
                seg: victim,
                offset,
            };
            match self.move_item(loc, it, hash, queue, copy, packing) {
                Moved::Copied(bytes) => {
                    m.moved += 1;
                    m.copied += bytes as u64;
                    m.packed += u64::from(matches!(copy, CopyAs::Packed(..)));
                }
                Moved::Gone => {}
                Moved::NoRoom => {
                    m.emptied = false;
                    break;
                }
            }
        }
        let c = &self.clean_stats;
        c.items_moved.fetch_add(m.moved, Ordering::Relaxed);
        c.bytes_copied.fetch_add(m.copied, Ordering::Relaxed);
        m
    }

    /// A walk of `seg`'s items at `offset` (of `used` bytes): fetches
    /// item memory up to `READ_AHEAD` bytes past it, `fetched` being where
    /// the fetches have reached.
    #[inline]
    pub(crate) fn read_ahead(
        &self,
        seg: SegmentId,
        offset: usize,
        used: usize,
        fetched: &mut usize,
    ) {
        while *fetched < (offset + READ_AHEAD).min(used) {
            self.arena.prefetch_item(seg, *fetched);
            *fetched += 128;
        }
    }

    /// The first pass of `compact_segment`: notes the offset and key hash
    /// of every item of `seg` not marked dead into `plan`, and returns the
    /// bytes their copies will take (each as big as the item, plus its CAS
    /// unique if it does not store one yet).
    fn plan_moves(&self, seg: SegmentId, used: usize, plan: &mut Vec<(u32, u64)>) -> usize {
        plan.clear();
        let mut need = 0;
        let mut offset = 0;
        let mut fetched = 0;
        while offset < used {
            self.read_ahead(seg, offset, used, &mut fetched);
            let it = self.arena.item(seg, offset);
            let size = it.size();
            if !it.is_dead() {
                need += self
                    .copy_spec(Location { seg, offset }, it, CopyAs::Same)
                    .size();
                plan.push((offset as u32, hash_key(it.key())));
            }
            offset += size;
        }
        need
    }

    /// What a moved copy of the item at `loc` holds: the same, with its
    /// CAS unique stored (a copy's location would give it another), and
    /// its value as `copy` says.
    pub(crate) fn copy_spec(&self, loc: Location, it: ItemPtr, copy: CopyAs<'_>) -> item::ItemSpec {
        let spec = item::ItemSpec {
            cas: self.explicit(self.cas_of(loc, it)),
            ..it.spec()
        };
        match copy {
            CopyAs::Same => spec,
            CopyAs::Packed(frame, codec) => item::ItemSpec {
                value_len: frame.len(),
                packed: Some((codec, it.value_len())),
                raw_tried: false,
                ..spec
            },
            CopyAs::RawTried => item::ItemSpec {
                raw_tried: true,
                ..spec
            },
        }
    }

    /// Moves the item at `loc` of a victim of `queue` to the compactor's
    /// destination, if the index still links to it and it is live, its
    /// value copied as `copy` says (`packing`: for the pack pass). The key
    /// and value (immutable) are copied before the shard lock is taken;
    /// the expiry, state bits, frequency and access time (which change in
    /// place) under it.
    fn move_item(
        &self,
        loc: Location,
        it: ItemPtr,
        hash: u64,
        queue: Queue,
        copy: CopyAs<'_>,
        packing: bool,
    ) -> Moved {
        let now = self.clock.now();
        let key = it.key();
        if it.exptime() != 0 && it.exptime() <= now {
            // Expired: unlinked without a copy.
            self.unlink_stale(key, hash, loc);
            return Moved::Gone;
        }
        let spec = self.copy_spec(loc, it, copy);
        let flushes = self.arena.flush_epoch();
        let Some(slot) = self
            .arena
            .reserve_compactor(queue, &spec, loc.seg, now, packing)
        else {
            return Moved::NoRoom;
        };
        let value = match copy {
            CopyAs::Packed(frame, _) => frame,
            CopyAs::Same | CopyAs::RawTried => it.stored_value(),
        };
        self.write_item(&slot, &spec, key, &[value], 0);
        let mut table = self.shard(hash).write();
        let Some(found) = table.find_at(&self.arena, key, hash, loc) else {
            drop(table);
            self.abandon(slot);
            return Moved::Gone;
        };
        let now = self.clock.now();
        if !matches!(self.check(found.item, found.loc, now), Lookup::Hit(())) {
            let c = &mut table.counters;
            c.reclaimed += 1;
            c.expired_unfetched += u64::from(!it.is_fetched());
            self.unlink(&mut table, &found);
            drop(table);
            self.abandon(slot);
            return Moved::Gone;
        }
        // What may have changed since the copy was written.
        let exptime = it.exptime();
        if exptime != spec.exptime {
            // SAFETY: the copy has the field (same layout as the item) and
            // is not linked yet: nobody else reads or writes it.
            unsafe { slot.ptr.set_exptime(exptime) };
            self.arena.segment(slot.seg).note_expiry(exptime);
        }
        let state = it.state();
        slot.ptr.set_state(
            state
                & (item::STATE_FETCHED
                    | item::STATE_STALE
                    | item::STATE_TOKEN_SENT
                    | item::STATE_BINARY_KEY),
        );
        slot.ptr.set_freq(it.freq());
        slot.ptr
            .set_atime(self.atime_in(slot.seg, self.base_atime(loc, it)));
        let new = self.link_counted(&mut table, hash, &slot, Some(&found), false);
        if self.arena.flush_epoch() != flushes {
            // A flush_all ran since the item was checked: the copy may be
            // above the flush's mark in its segment, so it goes (as it
            // would have).
            if let Some(f) = table.find_at(&self.arena, key, hash, new) {
                self.unlink(&mut table, &f);
            }
        }
        drop(table);
        self.arena.finish_write(slot.seg);
        Moved::Copied(spec.size())
    }
}
