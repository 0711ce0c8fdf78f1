//! Warm restart: taking over the cache a memory file holds (see
//! `memfile`), after a graceful stop or a crash alike.
//!
//! The file holds the segments and their control blocks as the last run
//! left them; the index and everything else lived in that process only.
//! The arena takes the segments back (`Arena::recover`: what was being
//! written or walked becomes sealed, in activation order), and the index is
//! rebuilt in two passes over the sealed segments, each with several
//! threads taking segments in turn:
//!
//! ```text
//!  segment:  | item | item | item (dead) | item | ... | item |          |
//!            0                                         ^ used (every header
//!                                                        below it is whole)
//!  pass 1, reading item memory in order (fetched 16 KiB ahead):
//!     header sound?      no -> the rest of the segment is dropped
//!     packed with a dictionary not loaded?  yes -> marked dead (the
//!                        table was loaded before: `dict`, `Store::open`)
//!     dead?              yes -> skipped (removed, replaced, or never
//!                               committed: its writer did not finish)
//!     flushed, expired?  yes -> marked dead
//!     else noted (offset, size, key hash) and counted for its shard
//!  then every shard's table is sized once for its count
//!  pass 2, from the notes (item memory is read again only on a tag match):
//!     linked; if its key is linked already (the crash came between
//!     linking a new version and marking the old one dead, or a copy's
//!     linking and the original's death: a move, which may have packed the
//!     copy), the later version (higher CAS unique; the key and the CAS,
//!     never the stored bytes) stays; the buckets of the next keys are
//!     prefetched meanwhile
//! ```
//!
//! Why that is exactly the acknowledged state: a write commits its item
//! (clears the dead bit) only when it links it, under the key's shard lock
//! or in the lock-free swap, and answers the client after that; a removal
//! marks the item dead before it answers. So every acknowledged item is
//! committed in the file, every acknowledged removal is a dead bit, and an
//! item whose writer was cut short is dead. Two live versions of one key
//! can only come from a write that was not yet answered: either version is
//! a state the client may see.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::arena::SegmentId;
use crate::index::{hash_key, shard_of, Location, SHARDS};
use crate::item::{self, ItemPtr};
use crate::memfile::Resume;
use crate::store::Store;
use crate::types::{Lookup, Recovered};

impl Store {
    /// Takes over the cache of a memory file (see the module comment).
    pub(crate) fn recover(&self, resume: Resume, threads: usize) -> Recovered {
        let start = Instant::now();
        let (segments, dropped) = self.arena.recover();
        self.resume_flushes(resume.flushes);
        let mut totals = ScanCounts {
            damaged: dropped as u64,
            ..ScanCounts::default()
        };
        // First pass: drop what is stale, note each live item's place,
        // size and key hash, and count each shard's keys, so that every
        // table is sized once; second pass: link from the notes, without
        // reading item memory again.
        let per_shard: Vec<AtomicUsize> = (0..SHARDS).map(|_| AtomicUsize::new(0)).collect();
        let notes: Vec<std::sync::Mutex<Vec<Noted>>> = segments
            .iter()
            .map(|_| std::sync::Mutex::default())
            .collect();
        totals.add(&self.in_parallel(segments.len(), threads, |i| {
            let (counts, found) = self.sort_segment(segments[i], &per_shard);
            *notes[i].lock().expect("no panics while noting") = found;
            counts
        }));
        for (shard, n) in self.shards.iter().zip(&per_shard) {
            shard
                .write()
                .reserve(&self.arena, n.load(Ordering::Relaxed));
        }
        let live: Vec<AtomicUsize> = (0..self.arena.capacity())
            .map(|_| AtomicUsize::new(0))
            .collect();
        totals.add(&self.in_parallel(segments.len(), threads, |i| {
            let found = std::mem::take(&mut *notes[i].lock().expect("no panics while noting"));
            self.link_segment(segments[i], &found, &live)
        }));
        // A segment whose items all went (or were superseded by a later
        // version in another segment) is free again.
        for &seg in &segments {
            self.arena
                .free_if_empty(seg, live[seg as usize].load(Ordering::Relaxed));
        }
        Recovered {
            graceful: resume.graceful,
            items: totals.linked - totals.replaced,
            stale: totals.stale,
            superseded: totals.superseded + totals.replaced,
            segments: segments.len(),
            damaged: totals.damaged,
            elapsed: start.elapsed(),
        }
    }

    /// Runs `scan` on `0..n`, `threads` threads taking them in turn; the
    /// sum of what they counted.
    fn in_parallel(
        &self,
        n: usize,
        threads: usize,
        scan: impl Fn(usize) -> ScanCounts + Sync,
    ) -> ScanCounts {
        let next = AtomicUsize::new(0);
        let totals = std::sync::Mutex::new(ScanCounts::default());
        std::thread::scope(|scope| {
            for _ in 0..threads.clamp(1, n.max(1)) {
                scope.spawn(|| {
                    let mut mine = ScanCounts::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        mine.add(&scan(i));
                    }
                    totals.lock().expect("no panics while counting").add(&mine);
                });
            }
        });
        totals.into_inner().expect("no panics while counting")
    }

    /// The first pass over a recovered segment: stops it at damage, marks
    /// flushed and expired items dead, and notes the others, counting their
    /// keys by shard.
    fn sort_segment(&self, seg: SegmentId, per_shard: &[AtomicUsize]) -> (ScanCounts, Vec<Noted>) {
        let mut c = ScanCounts::default();
        let mut found = Vec::new();
        let s = self.arena.segment(seg);
        let used = s.used.load(Ordering::Acquire);
        let now = self.clock.now();
        let mut counts = [0u32; SHARDS];
        let mut offset = 0;
        // Item memory is read once, in order, from pages not yet in any
        // cache: fetch it a few pages ahead (the CPU's own prefetcher stops
        // at each 4 KiB page).
        let mut fetched = 0;
        while offset < used {
            while fetched < (offset + PREFETCH_AHEAD).min(used) {
                self.arena.prefetch_item(seg, fetched);
                fetched += 128;
            }
            let it = self.arena.item(seg, offset);
            let Some(size) = it.checked_size_within(used - offset, self.cfg.item_size_max) else {
                // Not an item header: nothing after it can be found.
                c.damaged += 1;
                s.used.store(offset, Ordering::Release);
                break;
            };
            if !it.is_dead()
                && it
                    .packed()
                    .is_some_and(|(codec, _)| !self.dicts.knows(codec))
            {
                // Packed with a dictionary that is not loaded: not served.
                it.mark_dead();
                c.damaged += 1;
            } else if !it.is_dead() {
                if matches!(
                    self.check(it, Location { seg, offset }, now),
                    Lookup::Hit(())
                ) {
                    let hash = hash_key(it.key());
                    counts[shard_of(hash)] += 1;
                    found.push(Noted {
                        offset: offset as u32,
                        size: size as u32,
                        hash,
                    });
                } else {
                    it.mark_dead();
                    c.stale += 1;
                }
            }
            offset += size;
        }
        for (total, n) in per_shard.iter().zip(counts) {
            if n > 0 {
                total.fetch_add(n as usize, Ordering::Relaxed);
            }
        }
        (c, found)
    }

    /// The second pass: links the items the first noted in a recovered
    /// segment, counting each segment's live items in `live`. The index
    /// buckets of the next few keys are prefetched while one is linked (a
    /// bucket is a cache miss, as for a multi-key get).
    fn link_segment(&self, seg: SegmentId, found: &[Noted], live: &[AtomicUsize]) -> ScanCounts {
        const AHEAD: usize = 8;
        let mut c = ScanCounts::default();
        for (i, n) in found.iter().enumerate() {
            if let Some(ahead) = found.get(i + AHEAD) {
                let shard = self.shard(ahead.hash);
                // SAFETY: the shard's table lives as long as the store.
                unsafe { crate::index::Table::prefetch_bucket(shard.lock.data_ptr(), ahead.hash) };
            }
            let offset = n.offset as usize;
            let it = self.arena.item(seg, offset);
            match self.relink(it, Location { seg, offset }, n.hash, n.size) {
                Relink::Linked => {
                    c.linked += 1;
                    live[seg as usize].fetch_add(1, Ordering::Relaxed);
                }
                Relink::Replaced(old) => {
                    c.linked += 1;
                    c.replaced += 1;
                    live[seg as usize].fetch_add(1, Ordering::Relaxed);
                    live[old as usize].fetch_sub(1, Ordering::Relaxed);
                }
                Relink::Superseded => c.superseded += 1,
            }
        }
        c
    }

    /// Links a recovered item, or keeps the version of its key linked
    /// already if that one is later.
    fn relink(&self, it: ItemPtr, loc: Location, hash: u64, size: u32) -> Relink {
        let mut table = self.shard(hash).write();
        // Only a tag match reads the item's key.
        match table.find_item(&self.arena, it, hash) {
            Some(other) if self.version_of(other.loc, other.item) >= self.version_of(loc, it) => {
                it.mark_dead();
                Relink::Superseded
            }
            Some(other) => {
                table.replace(&other, hash, loc);
                other.item.mark_dead();
                let other_size = other.item.size();
                self.arena.segment(other.loc.seg).sub_live(other_size);
                self.arena.segment(loc.seg).add_live(size as usize);
                let c = &mut table.counters;
                c.curr_items -= 1;
                c.bytes = c.bytes.wrapping_sub(other_size as u64);
                if let (size, Some(raw_len)) = other.item.footprint() {
                    c.packed.sub(size, raw_len);
                    self.count_dict_use(other.item, false);
                }
                count_recovered(&mut table.counters, &self.dicts, it, size);
                Relink::Replaced(other.loc.seg)
            }
            None => {
                table.insert(&self.arena, hash, loc);
                self.arena.segment(loc.seg).add_live(size as usize);
                count_recovered(&mut table.counters, &self.dicts, it, size);
                Relink::Linked
            }
        }
    }

    /// An item's version, to order two of one key: its CAS unique (stored,
    /// else its location's), whether or not CAS uniques are shown (-C).
    pub(crate) fn version_of(&self, loc: Location, it: ItemPtr) -> u64 {
        it.stored_cas().unwrap_or_else(|| {
            let seq = self.arena.segment(loc.seg).seq.load(Ordering::Relaxed);
            (seq << self.cas_offset_bits) + (loc.offset / item::ALIGN) as u64 + 1
        })
    }
}

/// How far ahead of its reads the first pass fetches item memory.
const PREFETCH_AHEAD: usize = 16 << 10;

/// What the first pass notes of a live item, for the second.
struct Noted {
    offset: u32,
    size: u32,
    hash: u64,
}

fn count_recovered(
    c: &mut crate::index::ShardCounters,
    dicts: &crate::dict::DictTable,
    it: ItemPtr,
    size: u32,
) {
    c.curr_items += 1;
    c.bytes = c.bytes.wrapping_add(u64::from(size));
    if let Some((codec, raw_len)) = it.packed() {
        c.packed.add(size as usize, raw_len);
        dicts.count_use(codec, true);
    }
}

/// What `relink` did with an item.
enum Relink {
    Linked,
    /// Linked in place of an earlier version of its key (now dead), which
    /// was in this segment.
    Replaced(SegmentId),
    /// Dead: a later version of its key is linked.
    Superseded,
}

#[derive(Default)]
struct ScanCounts {
    linked: u64,
    replaced: u64,
    stale: u64,
    superseded: u64,
    damaged: u64,
}

impl ScanCounts {
    fn add(&mut self, o: &ScanCounts) {
        self.linked += o.linked;
        self.replaced += o.replaced;
        self.stale += o.stale;
        self.superseded += o.superseded;
        self.damaged += o.damaged;
    }
}
