//! Promotion of hot packed items: a packed item (see `pack`) that GETs
//! keep hitting is written back raw by the background cleaner, without
//! waiting for the evictor to reach its segment (in a read-mostly period
//! no segment is evicted, and every GET of it would decompress it).
//!
//! ```text
//!   GET (serve, after the hit is counted): the item is packed and its
//!       S3-FIFO frequency is at the cap (PROMOTE_AT)
//!         -> note_hot_packed: its key, hash and location pushed into
//!            `pending` with try_lock (contended, full, or already
//!            there: the hint is dropped; the GET never waits, never
//!            allocates); the cleaner woken if `pending` was empty
//!            (unless its last drain found no segment free)
//!   cleaner (each round, `clean_ahead` -> promote_hot):
//!       swap `pending` and `draining` (two fixed buffers, one lock)
//!       per hint: reserve a raw slot on the copy head; with no segment
//!         free, room is made as a writer makes it (compaction, or
//!         eviction of S3-FIFO's victim) at most once a second; else
//!         the hints left are dropped, and later GETs send them again
//!         shard write lock: still that packed item at that location?
//!         decode its value into the slot, keep CAS unique, flags,
//!         expiry, access time, state bits and frequency; link it in
//!         the item's place (`pack_promoted`)
//! ```
//!
//! Hints are fixed-size records (`HINTS` of them, keys up to 250 bytes)
//! in two buffers allocated with the store. Correctness is `touched`'s
//! (`read`): the copy is written dead, linked under the key's shard
//! write lock, and the packed item's memory is reused only after the
//! readers pinned while it was linked have finished, so a lock-free GET
//! sees the packed item or the whole raw copy. A flush_all between the
//! check and the link takes the copy, as `evict`'s `keep` does.

use std::sync::atomic::Ordering;

use crate::arena::{Reserve, Room, Slot};
use crate::index::Location;
use crate::item::{self, ItemPtr};
use crate::promote_queue::Hint;
use crate::store::Store;
use crate::types::Compression;

/// The frequency (hits counted by `bump`, saturating at `FREQ_MAX`) at
/// which a packed item is hot enough to be written back raw.
pub(crate) const PROMOTE_AT: u8 = item::FREQ_MAX;

impl Store {
    /// A GET hit a packed item (`read`'s `serve`, after `bump`): notes it
    /// for promotion if it is hot (see the module comment). Never waits.
    #[cold]
    #[inline(never)]
    pub(crate) fn note_hot_packed(&self, it: ItemPtr, hash: u64, loc: Location) {
        if it.freq() < PROMOTE_AT
            || self.cfg.compression == Compression::All
            || !self.cfg.clean.background
        {
            return;
        }
        let q = &self.promote_queue;
        if q.push(it.key(), hash, loc) && !q.starved.load(Ordering::Relaxed) {
            // The cleaner may be asleep: wake it, unless that would wait.
            if let Some(mut wanted) = self.clean_wanted.0.try_lock() {
                if !*wanted {
                    *wanted = true;
                    self.clean_wanted.1.notify_one();
                }
            }
        }
    }

    /// The cleaner's promotion step: writes back raw the hot packed items
    /// GETs noted (see the module comment). Returns how many it wrote.
    pub fn promote_hot(&self) -> usize {
        let mut draining = self.promote_queue.draining.lock();
        {
            let mut pending = self.promote_queue.pending.lock();
            if pending.len == 0 {
                return 0;
            }
            std::mem::swap(&mut *pending, &mut *draining);
        }
        let (mut promoted, mut starved) = (0, false);
        for h in &draining.slots[..draining.len] {
            match self.promote_one(h) {
                Some(done) => promoted += usize::from(done),
                None => {
                    // No segment free: none of the others fits either.
                    starved = true;
                    break;
                }
            }
        }
        draining.len = 0;
        self.promote_queue.starved.store(starved, Ordering::Relaxed);
        self.pack_stats
            .promoted
            .fetch_add(promoted as u64, Ordering::Relaxed);
        promoted
    }

    /// Writes the packed item a hint names back raw, if it is still that
    /// item: true if it did, false if it is not. None if there was no
    /// room (no segment free).
    fn promote_one(&self, h: &Hint) -> Option<bool> {
        let (key, hash, loc) = (h.key(), h.hash, h.loc);
        let spec = {
            let table = self.shard(hash).read();
            let Some(found) = table.find_at(&self.arena, key, hash, loc) else {
                return Some(false);
            };
            match found.item.packed() {
                Some((_, raw_len)) => self.raw_spec(found.item, loc, raw_len),
                None => return Some(false),
            }
        };
        let slot = match self.arena.reserve(self.copy_head, &spec, self.clock.now()) {
            Reserve::Slot(slot) => slot,
            Reserve::Full => self.promotion_room(&spec)?,
        };
        if slot.offset == 0 {
            self.note_segment_taken();
        }
        // Read before the check: see `evict`'s `keep`.
        let flushes = self.arena.flush_epoch();
        let Some((mut table, old)) = self.relock_at(key, hash, loc) else {
            self.abandon(slot);
            return Some(false);
        };
        let it = old.item;
        // Still packed (the same item); its expiry may have changed.
        let spec = match it.packed() {
            Some((_, raw_len)) => self.raw_spec(it, loc, raw_len),
            None => {
                drop(table);
                self.abandon(slot);
                return Some(false);
            }
        };
        if !self.write_decoded(&slot, &spec, it) {
            return Some(false);
        }
        slot.ptr
            .set_atime(self.atime_in(slot.seg, self.base_atime(loc, it)));
        // Still hot: the evictor keeps it (`write_item` starts at 0).
        slot.ptr.set_freq(it.freq());
        let new = self.link_counted(&mut table, hash, &slot, Some(&old), false);
        if self.arena.flush_epoch() != flushes {
            // A flush_all ran since the item was checked (it marks
            // segments without shard locks): the copy goes, as the item
            // would have.
            if let Some(f) = table.find_at(&self.arena, key, hash, new) {
                self.unlink(&mut table, &f);
            }
        }
        drop(table);
        self.arena.finish_write(slot.seg);
        Some(true)
    }

    /// A slot for a promotion when no segment is free: room is made as a
    /// writer makes it (compacting, or evicting S3-FIFO's victim, whose
    /// hit items it keeps) at most once a second, so that reads that hit
    /// a whole cache of packed items over and over do not evict what
    /// packing keeps at a writer's pace. None otherwise.
    fn promotion_room(&self, spec: &item::ItemSpec) -> Option<Slot> {
        let now = self.clock.now();
        let q = &self.promote_queue;
        if q.room_made.load(Ordering::Relaxed) == now.wrapping_add(1) {
            return None;
        }
        q.room_made.store(now.wrapping_add(1), Ordering::Relaxed);
        if !matches!(self.make_room(), Room::Made) {
            return None;
        }
        match self.arena.reserve(self.copy_head, spec, now) {
            Reserve::Slot(slot) => Some(slot),
            Reserve::Full => None,
        }
    }

    /// The spec of a raw copy of packed item `it` (at `loc`), keeping its
    /// CAS unique.
    fn raw_spec(&self, it: ItemPtr, loc: Location, raw_len: usize) -> item::ItemSpec {
        item::ItemSpec {
            cas: self.explicit(self.cas_of(loc, it)),
            ..it.spec()
        }
        .with_raw_value(raw_len)
    }

    /// Writes the raw copy of packed item `it` into `slot`, reserved for
    /// `spec`: its header and state bits, its value
    /// decoded straight into the slot. False if it does not decode (the
    /// slot is given up, the error counted; the reader that next finds it
    /// drops it, see `drop_corrupt`).
    fn write_decoded(&self, slot: &Slot, spec: &item::ItemSpec, it: ItemPtr) -> bool {
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
        true
    }
}
