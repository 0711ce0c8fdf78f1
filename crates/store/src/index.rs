//! The hash index: key hash -> item location, split into 256 shards, each a
//! table of cache-line buckets behind its own reader-writer lock.
//!
//! An entry is 5 bytes: a 40-bit value holding the item's *address* (its
//! byte position in the arena divided by the item alignment, see
//! [`AddrCodec`]) and, above it, a tag of up to 8 hash bits that filters
//! non-matching entries without touching item memory. A tag match is
//! confirmed by comparing the key stored in the item.
//!
//! ```text
//!  64-bit key hash (xxh3):
//!   63                    32 31          16 15        8 7        0
//!  +------------------------+-------------+-----------+----------+
//!  | bucket (fastrange)     |   unused    |    tag    |  shard   |
//!  +------------------------+-------------+-----------+----------+
//!
//!  entry (40 bits, stored as lo: u32 + hi: u8):
//!   39            39-T+1 .. addr_bits   addr_bits-1            0
//!  +-----------------------+-----------------------------------+
//!  |  tag (T = min(8, 40 - addr_bits) bits) |  address         |
//!  +-----------------------+-----------------------------------+
//!
//!  bucket (64 bytes, one cache line):
//!  +---------------------------+----------------+-----+-----+----------+
//!  | lo: [u32; 12]   (48 B)    | hi: [u8; 12]   | len | pad | overflow |
//!  +---------------------------+----------------+-----+-----+----------+
//!    entries 0..len are live (kept packed: a removal moves the last entry
//!    into the hole); `overflow` (u16) counts entries whose home bucket is
//!    this one or an earlier one but which are stored after it.
//! ```
//!
//! A key's home bucket is `fastrange(hash >> 32, buckets)`; a full bucket
//! spills into the next ones (linear probing by bucket) and counts the spill
//! in `overflow`, so a lookup stops at the first bucket whose overflow is 0.
//! Bucket counts need not be powers of two: a table grows by a quarter when
//! it passes 90 % of its entries, so the load stays between ~72 % and 90 %
//! (5.9 – 7.4 bytes of index per item). Growing rehashes keys read from item
//! memory, so an entry needs no stored hash.

use crate::arena::{Arena, SegmentId};
use crate::item::{ItemMeta, ItemPtr};

pub const SHARD_BITS: u32 = 8;
pub const SHARDS: usize = 1 << SHARD_BITS;
const BUCKET_SLOTS: usize = 12;
/// One page of buckets.
const INITIAL_BUCKETS: usize = 64;
/// Grow past this many entries per 10 slots.
const MAX_LOAD_TENTHS: usize = 9;

#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

#[inline]
pub fn shard_of(hash: u64) -> usize {
    (hash as usize) & (SHARDS - 1)
}

#[inline]
fn home_of(hash: u64, buckets: usize) -> usize {
    (((hash >> 32) * buckets as u64) >> 32) as usize
}

/// Where an item lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub seg: SegmentId,
    pub offset: usize,
}

/// Converts locations to the packed addresses stored in entries. Shared by
/// every table of a store (all use the same arena geometry).
#[derive(Clone, Copy, Debug)]
pub struct AddrCodec {
    /// log2(segment size).
    seg_shift: u8,
    /// log2(item alignment).
    align_shift: u8,
    /// Bits of an address.
    addr_bits: u8,
    /// Bits of tag above the address (0..=8).
    tag_bits: u8,
}

impl AddrCodec {
    /// For an arena of `max_segments` segments of `1 << seg_shift` bytes
    /// holding items aligned to `1 << align_shift`.
    pub fn new(max_segments: usize, seg_shift: u32, align_shift: u32) -> AddrCodec {
        let seg_bits = usize::BITS - (max_segments.max(2) - 1).leading_zeros();
        let addr_bits = seg_bits + seg_shift - align_shift;
        assert!(addr_bits <= 40, "arena too large for 40-bit item addresses");
        AddrCodec {
            seg_shift: seg_shift as u8,
            align_shift: align_shift as u8,
            addr_bits: addr_bits as u8,
            tag_bits: (40 - addr_bits).min(8) as u8,
        }
    }

    #[inline]
    fn encode(&self, hash: u64, loc: Location) -> u64 {
        let addr = (((loc.seg as u64) << self.seg_shift) | loc.offset as u64) >> self.align_shift;
        debug_assert!(addr < (1 << self.addr_bits));
        (self.tag(hash) << self.addr_bits) | addr
    }

    #[inline]
    fn tag(&self, hash: u64) -> u64 {
        (hash >> 16) & ((1 << self.tag_bits) - 1)
    }

    #[inline]
    fn tag_of_entry(&self, v: u64) -> u64 {
        v >> self.addr_bits
    }

    #[inline]
    fn decode(&self, v: u64) -> Location {
        let addr = (v & ((1 << self.addr_bits) - 1)) << self.align_shift;
        Location {
            seg: (addr >> self.seg_shift) as SegmentId,
            offset: (addr & ((1 << self.seg_shift) - 1)) as usize,
        }
    }
}

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Bucket {
    lo: [u32; BUCKET_SLOTS],
    hi: [u8; BUCKET_SLOTS],
    len: u8,
    _pad: u8,
    overflow: u16,
}

impl Bucket {
    #[inline]
    fn entry(&self, i: usize) -> u64 {
        self.lo[i] as u64 | (self.hi[i] as u64) << 32
    }

    #[inline]
    fn set(&mut self, i: usize, v: u64) {
        self.lo[i] = v as u32;
        self.hi[i] = (v >> 32) as u8;
    }
}

/// A zeroed bucket array in its own anonymous mapping, so that the memory
/// of a table outgrown by `grow` goes back to the system at once (a heap
/// allocation would stay in the process as fragmentation: 256 shards grow
/// in step, each leaving a hole smaller than its next table).
struct BucketArray {
    ptr: std::ptr::NonNull<Bucket>,
    len: usize,
}

// SAFETY: BucketArray owns its mapping exclusively, like a Box<[Bucket]>.
unsafe impl Send for BucketArray {}
// SAFETY: shared access is read-only (&self gives &[Bucket]).
unsafe impl Sync for BucketArray {}

impl BucketArray {
    fn new(len: usize) -> BucketArray {
        let bytes = len * std::mem::size_of::<Bucket>();
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked before use. Fresh anonymous pages are zeroed,
        // and an all-zero Bucket is EMPTY_BUCKET.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "index: out of memory");
        BucketArray {
            ptr: std::ptr::NonNull::new(p as *mut Bucket).expect("mmap returned null"),
            len,
        }
    }
}

impl std::ops::Deref for BucketArray {
    type Target = [Bucket];
    fn deref(&self) -> &[Bucket] {
        // SAFETY: ptr maps len zero-initialised (valid) Buckets, owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for BucketArray {
    fn deref_mut(&mut self) -> &mut [Bucket] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for BucketArray {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in new(); no reference
        // into it can outlive self.
        unsafe {
            libc::munmap(
                self.ptr.as_ptr() as *mut libc::c_void,
                self.len * std::mem::size_of::<Bucket>(),
            );
        }
    }
}

/// One shard's table plus the counters that change with it (kept here so
/// they are updated under the same lock, with no shared atomics). Laid out
/// so that, behind the shard's 8-byte lock word, everything a get or a set
/// touches (the bucket array, the codec and the three counters a set
/// updates) is in the lock's cache line: a write moves one line between
/// cores, not two.
#[repr(C)]
pub struct Table {
    buckets: BucketArray,
    live: usize,
    codec: AddrCodec,
    pub counters: ShardCounters,
}

#[derive(Default, Clone, Copy, Debug)]
#[repr(C)]
pub struct ShardCounters {
    pub curr_items: u64,
    pub bytes: u64,
    pub total_items: u64,
    pub evictions: u64,
    pub evicted_unfetched: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
}

/// The position of a found key, valid until the table is modified.
#[derive(Clone, Copy)]
pub struct Found {
    bucket: usize,
    slot: usize,
    home: usize,
    pub loc: Location,
    pub item: ItemPtr,
    /// The item's header, decoded while comparing its key.
    pub meta: ItemMeta,
}

impl Table {
    pub fn new(codec: AddrCodec) -> Table {
        Table {
            buckets: BucketArray::new(INITIAL_BUCKETS),
            live: 0,
            codec,
            counters: ShardCounters::default(),
        }
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
        let n = self.buckets.len();
        let home = home_of(hash, n);
        let tag = self.codec.tag(hash);
        let mut b = home;
        loop {
            let bucket = &self.buckets[b];
            for slot in 0..bucket.len as usize {
                let v = bucket.entry(slot);
                if self.codec.tag_of_entry(v) == tag {
                    let loc = self.codec.decode(v);
                    let item = arena.item(loc.seg, loc.offset);
                    let meta = item.meta();
                    if item.key_at(&meta) == key {
                        return Some(Found {
                            bucket: b,
                            slot,
                            home,
                            loc,
                            item,
                            meta,
                        });
                    }
                }
            }
            if bucket.overflow == 0 {
                return None;
            }
            b = if b + 1 == n { 0 } else { b + 1 };
        }
    }

    /// The entry for `key` if it still points at `loc` (after a lock gap).
    pub fn find_at(&self, arena: &Arena, key: &[u8], hash: u64, loc: Location) -> Option<Found> {
        self.find(arena, key, hash).filter(|f| f.loc == loc)
    }

    /// Points an existing entry at a new location.
    #[inline]
    pub fn replace(&mut self, found: &Found, hash: u64, loc: Location) {
        let v = self.codec.encode(hash, loc);
        self.buckets[found.bucket].set(found.slot, v);
    }

    /// Removes a found entry.
    pub fn remove(&mut self, found: &Found) {
        let n = self.buckets.len();
        let bucket = &mut self.buckets[found.bucket];
        let last = bucket.len as usize - 1;
        let moved = bucket.entry(last);
        bucket.set(found.slot, moved);
        bucket.len -= 1;
        let mut b = found.home;
        while b != found.bucket {
            self.buckets[b].overflow -= 1;
            b = if b + 1 == n { 0 } else { b + 1 };
        }
        self.live -= 1;
    }

    /// Inserts a key known to be absent.
    pub fn insert(&mut self, arena: &Arena, hash: u64, loc: Location) {
        if (self.live + 1) * 10 > self.buckets.len() * BUCKET_SLOTS * MAX_LOAD_TENTHS {
            self.grow(arena);
        }
        let v = self.codec.encode(hash, loc);
        Self::place(&mut self.buckets, hash, v);
        self.live += 1;
    }

    fn place(buckets: &mut [Bucket], hash: u64, v: u64) {
        let n = buckets.len();
        let mut b = home_of(hash, n);
        loop {
            let bucket = &mut buckets[b];
            if (bucket.len as usize) < BUCKET_SLOTS {
                let i = bucket.len as usize;
                bucket.set(i, v);
                bucket.len += 1;
                return;
            }
            bucket.overflow += 1;
            b = if b + 1 == n { 0 } else { b + 1 };
        }
    }

    /// Rehashes into a table a quarter larger.
    fn grow(&mut self, arena: &Arena) {
        let n = self.buckets.len();
        let size = n + (n / 4).max(1);
        let old = std::mem::replace(&mut self.buckets, BucketArray::new(size));
        for bucket in old.iter() {
            for slot in 0..bucket.len as usize {
                let v = bucket.entry(slot);
                let loc = self.codec.decode(v);
                let hash = hash_key(arena.item(loc.seg, loc.offset).key());
                Self::place(&mut self.buckets, hash, v);
            }
        }
    }

    /// Bytes of index memory (for stats).
    pub fn memory(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }

    /// Every entry's location (tests).
    #[cfg(test)]
    pub fn entries(&self) -> impl Iterator<Item = Location> + '_ {
        self.buckets
            .iter()
            .flat_map(move |b| (0..b.len as usize).map(move |i| self.codec.decode(b.entry(i))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
    }

    #[test]
    fn a_set_touches_one_line_of_its_shard() {
        // The 8-byte lock word, then the table up to total_items.
        let end = 8 + std::mem::offset_of!(Table, counters) + 3 * 8;
        assert!(end <= 64, "{end}");
    }

    #[test]
    fn entry_encoding_roundtrip() {
        // 1 MiB segments, 2-byte alignment, 4096 segments: 31 address bits.
        let codec = AddrCodec::new(4096, 20, 1);
        assert_eq!((codec.addr_bits, codec.tag_bits), (31, 8));
        for (seg, offset) in [(0u32, 0usize), (5, 8), (4095, (1 << 20) - 2)] {
            let hash = 0xABCD_0000_005A_0000u64;
            let loc = Location { seg, offset };
            let v = codec.encode(hash, loc);
            assert!(v < 1 << 40);
            assert_eq!(codec.decode(v), loc);
            assert_eq!(codec.tag_of_entry(v), 0x5A);
        }
        // A huge arena leaves fewer tag bits.
        let big = AddrCodec::new(1 << 16, 20, 1);
        assert_eq!((big.addr_bits, big.tag_bits), (35, 5));
    }
}
