//! Warm restart: taking over the cache a memory file holds (see
//! `memfile`), after a graceful stop or a crash alike.
//!
//! The file holds the segments and their control blocks as the last run
//! left them; the index and everything else lived in that process only.
//! The arena takes the segments back (`Arena::recover`: what was being
//! written or walked becomes sealed, in activation order), and the index is
//! rebuilt by scanning every sealed segment, several threads taking
//! segments in turn:
//!
//! ```text
//!  segment:  | item | item | item (dead) | item | ... | item |          |
//!            0                                         ^ used (every header
//!                                                        below it is whole)
//!  each item: header sound?  no -> the rest of the segment is dropped
//!             dead?          yes -> skipped (removed, replaced, or never
//!                                   committed: its writer did not finish)
//!             flushed, expired?   yes -> marked dead
//!             else linked; if its key is linked already (the crash came
//!             between linking a new version and marking the old one dead),
//!             the later version (higher CAS unique) stays
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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::arena::SegmentId;
use crate::index::{hash_key, Location};
use crate::item::{self, ItemPtr};
use crate::memfile::Resume;
use crate::store::Store;
use crate::types::Lookup;

/// What opening the store found (see [`Store::open`]).
#[derive(Debug, Default)]
pub struct Restart {
    /// Why a memory file's cache was not taken over, if it was not.
    pub note: Option<String>,
    /// What was taken over, if anything.
    pub recovered: Option<Recovered>,
}

/// What a warm restart took over.
#[derive(Debug, Default, Clone)]
pub struct Recovered {
    /// Whether the last run ended with a graceful stop (else it crashed).
    pub graceful: bool,
    /// Items linked back into the index.
    pub items: u64,
    /// Items found expired or flushed (dropped).
    pub stale: u64,
    /// Items dropped because another version of their key was later.
    pub superseded: u64,
    /// Segments scanned.
    pub segments: usize,
    /// Segments or item headers that could not be right (damage), dropped.
    pub damaged: u64,
    /// Time taken to rebuild the index.
    pub elapsed: Duration,
}

impl Store {
    /// Takes over the cache of a memory file (see the module comment).
    pub(crate) fn recover(&self, resume: Resume, threads: usize) -> Recovered {
        let start = Instant::now();
        let (segments, dropped) = self.arena.recover();
        self.resume_flushes(resume.flushes);
        let next = AtomicUsize::new(0);
        let items = AtomicU64::new(0);
        let stale = AtomicU64::new(0);
        let superseded = AtomicU64::new(0);
        let damaged = AtomicU64::new(dropped as u64);
        let threads = threads.clamp(1, segments.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&seg) = segments.get(i) else {
                        break;
                    };
                    let c = self.scan_segment(seg);
                    items.fetch_add(c.linked - c.replaced, Ordering::Relaxed);
                    stale.fetch_add(c.stale, Ordering::Relaxed);
                    superseded.fetch_add(c.superseded + c.replaced, Ordering::Relaxed);
                    damaged.fetch_add(c.damaged, Ordering::Relaxed);
                });
            }
        });
        // A segment whose items all went (or were superseded later by a
        // copy in another segment) is free again.
        for &seg in &segments {
            let live = self.live_in(seg);
            self.arena.free_if_empty(seg, live);
        }
        Recovered {
            graceful: resume.graceful,
            items: items.into_inner(),
            stale: stale.into_inner(),
            superseded: superseded.into_inner(),
            segments: segments.len(),
            damaged: damaged.into_inner(),
            elapsed: start.elapsed(),
        }
    }

    /// Links the live items of one recovered segment.
    fn scan_segment(&self, seg: SegmentId) -> ScanCounts {
        let mut c = ScanCounts::default();
        let s = self.arena.segment(seg);
        let used = s.used.load(Ordering::Acquire);
        let now = self.clock.now();
        let mut offset = 0;
        while offset < used {
            let it = self.arena.item(seg, offset);
            let Some(size) = it.checked_size(used - offset) else {
                // Not an item header: nothing after it can be found.
                c.damaged += 1;
                s.used.store(offset, Ordering::Release);
                break;
            };
            if !it.is_dead() {
                let loc = Location { seg, offset };
                if matches!(self.check(it, loc, now), Lookup::Hit(())) {
                    match self.relink(it, loc) {
                        Relink::Linked => c.linked += 1,
                        Relink::Replaced => {
                            c.linked += 1;
                            c.replaced += 1;
                        }
                        Relink::Superseded => c.superseded += 1,
                    }
                } else {
                    it.mark_dead();
                    c.stale += 1;
                }
            }
            offset += size;
        }
        c
    }

    /// Links a recovered item, or keeps the version of its key linked
    /// already if that one is later.
    fn relink(&self, it: ItemPtr, loc: Location) -> Relink {
        let key = it.key();
        let hash = hash_key(key);
        let mut table = self.shard(hash).write();
        match table.find(&self.arena, key, hash) {
            Some(other) if self.version_of(other.loc, other.item) >= self.version_of(loc, it) => {
                it.mark_dead();
                Relink::Superseded
            }
            Some(other) => {
                table.replace(&other, hash, loc);
                other.item.mark_dead();
                let c = &mut table.counters;
                c.curr_items -= 1;
                c.bytes = c.bytes.wrapping_sub(other.item.size() as u64);
                self.count_recovered(&mut table.counters, it);
                Relink::Replaced
            }
            None => {
                table.insert(&self.arena, hash, loc);
                self.count_recovered(&mut table.counters, it);
                Relink::Linked
            }
        }
    }

    fn count_recovered(&self, c: &mut crate::index::ShardCounters, it: ItemPtr) {
        c.curr_items += 1;
        c.bytes = c.bytes.wrapping_add(it.size() as u64);
    }

    /// Items of a recovered segment still linked.
    fn live_in(&self, seg: SegmentId) -> usize {
        let used = self.arena.segment(seg).used.load(Ordering::Acquire);
        let mut offset = 0;
        let mut live = 0;
        while offset < used {
            let it = self.arena.item(seg, offset);
            let Some(size) = it.checked_size(used - offset) else {
                break;
            };
            live += usize::from(!it.is_dead());
            offset += size;
        }
        live
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

/// What `relink` did with an item.
enum Relink {
    Linked,
    /// Linked in place of an earlier version of its key (now dead).
    Replaced,
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
