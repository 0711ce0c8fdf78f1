//! The hash index: key hash -> item location, split into shards, each an
//! open-addressing table of 8-byte slots behind its own reader-writer lock.
//!
//! ```text
//!  64-bit key hash (xxh3):
//!   63            48 47                              8 7        0
//!  +----------------+---------------------------------+----------+
//!  |      tag       |        home slot (masked)       |  shard   |
//!  +----------------+---------------------------------+----------+
//!
//!  slot (u64):
//!   63            48 47                28 27                     0
//!  +----------------+-------------------+------------------------+
//!  |      tag       |  SegmentId + 1    |  offset / 8            |
//!  +----------------+-------------------+------------------------+
//!  0 = empty, u64::MAX = tombstone (deleted; skipped by lookups)
//! ```
//!
//! The tag filters almost all non-matching slots without touching item
//! memory; a tag match is confirmed by comparing the key stored in the item.
//! Linear probing; a table grows (or is rebuilt to drop tombstones) when
//! live + tombstone slots pass 3/4 of its size. Rebuilding rehashes keys read
//! from item memory, so the slot needs no stored hash.

use crate::arena::{Arena, SegmentId};
use crate::item::ItemPtr;

pub const SHARD_BITS: u32 = 8;
pub const SHARDS: usize = 1 << SHARD_BITS;
const EMPTY: u64 = 0;
const TOMBSTONE: u64 = u64::MAX;
const OFFSET_BITS: u32 = 28;
const SEG_BITS: u32 = 20;
const INITIAL_SLOTS: usize = 256;

#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

#[inline]
pub fn shard_of(hash: u64) -> usize {
    (hash as usize) & (SHARDS - 1)
}

#[inline]
fn tag_of(hash: u64) -> u64 {
    hash >> 48
}

#[inline]
fn home_of(hash: u64, mask: usize) -> usize {
    ((hash >> SHARD_BITS) as usize) & mask
}

/// Where an item lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub seg: SegmentId,
    pub offset: usize,
}

#[inline]
fn encode(hash: u64, loc: Location) -> u64 {
    debug_assert!(loc.offset.is_multiple_of(8) && (loc.offset >> 3) < (1 << OFFSET_BITS));
    debug_assert!((loc.seg as u64 + 1) < (1 << SEG_BITS));
    (tag_of(hash) << 48) | ((loc.seg as u64 + 1) << OFFSET_BITS) | (loc.offset as u64 >> 3)
}

#[inline]
fn decode(slot: u64) -> Location {
    Location {
        seg: (((slot >> OFFSET_BITS) & ((1 << SEG_BITS) - 1)) - 1) as SegmentId,
        offset: ((slot & ((1 << OFFSET_BITS) - 1)) << 3) as usize,
    }
}

/// One shard's table plus the counters that change with it (kept here so
/// they are updated under the same lock, with no shared atomics).
pub struct Table {
    slots: Vec<u64>,
    live: usize,
    tombstones: usize,
    pub counters: ShardCounters,
}

#[derive(Default, Clone, Copy, Debug)]
pub struct ShardCounters {
    pub curr_items: u64,
    pub bytes: u64,
    pub total_items: u64,
    pub evictions: u64,
    pub evicted_unfetched: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            slots: vec![EMPTY; INITIAL_SLOTS],
            live: 0,
            tombstones: 0,
            counters: ShardCounters::default(),
        }
    }
}

/// The position of a found key, valid until the table is modified.
#[derive(Clone, Copy)]
pub struct Found {
    pos: usize,
    pub loc: Location,
    pub item: ItemPtr,
}

impl Table {
    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Finds `key` (whose hash is `hash`).
    #[inline]
    pub fn find(&self, arena: &Arena, key: &[u8], hash: u64) -> Option<Found> {
        let mask = self.mask();
        let tag = tag_of(hash);
        let mut pos = home_of(hash, mask);
        loop {
            let slot = self.slots[pos];
            if slot == EMPTY {
                return None;
            }
            if slot != TOMBSTONE && slot >> 48 == tag {
                let loc = decode(slot);
                let item = arena.item(loc.seg, loc.offset);
                if item.key() == key {
                    return Some(Found { pos, loc, item });
                }
            }
            pos = (pos + 1) & mask;
        }
    }

    /// Does the slot at `found` still point at `loc`? (After a lock gap.)
    pub fn find_at(&self, arena: &Arena, key: &[u8], hash: u64, loc: Location) -> Option<Found> {
        self.find(arena, key, hash).filter(|f| f.loc == loc)
    }

    /// Points an existing entry at a new location.
    #[inline]
    pub fn replace(&mut self, found: &Found, hash: u64, loc: Location) {
        self.slots[found.pos] = encode(hash, loc);
    }

    /// Removes a found entry.
    #[inline]
    pub fn remove(&mut self, found: &Found) {
        self.slots[found.pos] = TOMBSTONE;
        self.live -= 1;
        self.tombstones += 1;
    }

    /// Inserts a key known to be absent.
    pub fn insert(&mut self, arena: &Arena, hash: u64, loc: Location) {
        if (self.live + self.tombstones + 1) * 4 > self.slots.len() * 3 {
            self.rebuild(arena);
        }
        let mask = self.mask();
        let mut pos = home_of(hash, mask);
        loop {
            let slot = self.slots[pos];
            if slot == EMPTY || slot == TOMBSTONE {
                if slot == TOMBSTONE {
                    self.tombstones -= 1;
                }
                self.slots[pos] = encode(hash, loc);
                self.live += 1;
                return;
            }
            pos = (pos + 1) & mask;
        }
    }

    /// Rehashes into a table sized for the live entries (doubling if more
    /// than half full), dropping tombstones.
    fn rebuild(&mut self, arena: &Arena) {
        let mut size = self.slots.len();
        if (self.live + 1) * 2 > size {
            size *= 2;
        }
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; size]);
        let mask = size - 1;
        for slot in old {
            if slot == EMPTY || slot == TOMBSTONE {
                continue;
            }
            let loc = decode(slot);
            let hash = hash_key(arena.item(loc.seg, loc.offset).key());
            let mut pos = home_of(hash, mask);
            while self.slots[pos] != EMPTY {
                pos = (pos + 1) & mask;
            }
            self.slots[pos] = slot;
        }
        self.tombstones = 0;
    }

    /// Bytes of index memory (for stats).
    pub fn memory(&self) -> usize {
        self.slots.len() * 8
    }

    /// Drops every entry (flush that frees memory at once is not needed:
    /// memcached flushes lazily too, so this is only used by tests).
    #[cfg(test)]
    pub fn entries(&self) -> impl Iterator<Item = Location> + '_ {
        self.slots
            .iter()
            .filter(|&&s| s != EMPTY && s != TOMBSTONE)
            .map(|&s| decode(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_encoding_roundtrip() {
        for (seg, offset) in [(0u32, 0usize), (5, 8), ((1 << 20) - 3, ((1 << 28) - 1) * 8)] {
            let hash = 0xABCD_0000_0000_0000u64;
            let loc = Location { seg, offset };
            let s = encode(hash, loc);
            assert_ne!(s, EMPTY);
            assert_ne!(s, TOMBSTONE);
            assert_eq!(decode(s), loc);
            assert_eq!(s >> 48, 0xABCD);
        }
    }
}
