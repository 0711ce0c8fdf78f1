//! The hash index: key hash -> item location, split into 256 shards, each a
//! table of cache-line buckets behind its own reader-writer lock (writers)
//! and version (lock-free readers, see [`Table::find_unlocked`]).
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
//!  entry (40 bits, stored as lo: u32 + hi: u8), T = min(8, 40 - addr_bits):
//!   39         40-T   40-T-1                                    0
//!  +--------------+-------------------------------------------------+
//!  | tag (T bits) |  (zeros) address (addr_bits bits)               |
//!  +--------------+-------------------------------------------------+
//!   The tag sits at the top of `hi` (the whole of `hi` when addresses
//!   fit 32 bits): a lookup compares one byte per slot, and a prefetch
//!   guess compares all twelve at once (`candidates`).
//!
//!  bucket (64 bytes, one cache line):
//!  +---------------------------+----------------+-----+------+----------+
//!  | lo: [u32; 12]   (48 B)    | hi: [u8; 12]   | len | lock | overflow |
//!  +---------------------------+----------------+-----+------+----------+
//!    entries 0..len are live (kept packed: a removal moves the last entry
//!    into the hole); `overflow` (u16) counts entries whose home bucket is
//!    this one or an earlier one but which are stored after it; `lock` is
//!    1 while an unlocked SET swaps one of the bucket's entries (below).
//! ```
//!
//! Writers hold their shard's write lock, except one: a plain SET of a key
//! that is present (the steady state of a cache) swaps the entry's `lo` in
//! place with one atomic store ([`Table::swap_unlocked`]), holding only the
//! bucket's `lock` byte, so it writes no line but the bucket's. It found
//! the entry without a lock (validated by the shard's version) and stores
//! only if, with the bucket locked, the version is still the same; a
//! shard writer makes the version odd and then, before it reads a bucket,
//! waits for the bucket's lock byte to clear (`settle`). Both sides order
//! their write before their read with sequentially consistent operations,
//! so either the SET sees the writer's version and backs off to the locked
//! path, or the writer sees the SET's lock byte and waits for it: a
//! shard writer never acts on a bucket that changes under it. The tag
//! byte does not change (same key), so lock-free readers see the old or
//! the new location, never a mix.
//!
//! A key's home bucket is `fastrange(hash >> 32, buckets)`; a full bucket
//! spills into the next ones (linear probing by bucket) and counts the spill
//! in `overflow`, so a lookup stops at the first bucket whose overflow is 0.
//! Bucket counts need not be powers of two: a table grows by a quarter when
//! it passes 90 % of its entries, so the load stays between ~72 % and 90 %
//! (5.9 – 7.4 bytes of index per item). Growing rehashes keys read from item
//! memory, so an entry needs no stored hash.

use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::arena::{Arena, SegmentId};
use crate::item::{ItemMeta, ItemPtr};

/// log2 of [`SHARDS`].
pub const SHARD_BITS: u32 = 8;
/// Index shards, each with its own lock and table.
pub const SHARDS: usize = 1 << SHARD_BITS;
const BUCKET_SLOTS: usize = 12;
/// One page of buckets.
const INITIAL_BUCKETS: usize = 64;
/// Grow past this many entries per 10 slots.
const MAX_LOAD_TENTHS: usize = 9;

/// The hash of a key (XXH3, 64 bits): its shard, bucket and flash index entry.
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The shard of a key's hash (its low bits).
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
    /// The segment.
    pub seg: SegmentId,
    /// Byte offset of the item in its segment.
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
        (self.tag(hash) << (40 - self.tag_bits)) | addr
    }

    #[inline]
    fn tag(&self, hash: u64) -> u64 {
        (hash >> 16) & ((1 << self.tag_bits) - 1)
    }

    #[cfg(test)]
    fn tag_of_entry(&self, v: u64) -> u64 {
        v >> (40 - self.tag_bits)
    }

    /// A tag as it sits in an entry's high byte (its top `tag_bits`).
    #[inline]
    fn tag_byte(&self, tag: u64) -> u8 {
        (tag << (8 - self.tag_bits)) as u8
    }

    /// What `candidates` compares a bucket's high bytes with for `hash`.
    #[inline]
    fn probe(&self, hash: u64) -> (u64, u64) {
        (
            splat(self.tag_byte(self.tag(hash))),
            splat(self.tag_byte_mask()),
        )
    }

    /// The bits of an entry's high byte that hold its tag.
    #[inline]
    fn tag_byte_mask(&self) -> u8 {
        !(0xFFu16 >> self.tag_bits) as u8
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
    /// 1 while `Table::swap_unlocked` holds the bucket.
    lock: u8,
    overflow: u16,
}

/// `byte` in every byte of a u64.
#[inline]
fn splat(byte: u8) -> u64 {
    u64::from(byte) * 0x0101_0101_0101_0101
}

/// 0x80 in each byte of `v` that is zero, 0 elsewhere (exact: no borrow
/// between bytes).
#[inline]
fn zero_bytes(v: u64) -> u64 {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    !(((v & LOW7) + LOW7) | v | LOW7)
}

/// The top bit of each byte of `v` (which has no other bits set), gathered
/// into the low 8 bits (byte i's into bit i).
#[inline]
fn gather_top_bits(v: u64) -> u64 {
    ((v >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
}

/// Slots of a bucket whose tag matches, as a mask with bit `slot` set per
/// candidate among the first `len`: the twelve high bytes compared without
/// a branch per slot. Used by the prefetch guess (`guess_location`), which
/// must not stop on a mispredicted branch; lookups compare slot by slot
/// (see `probe_buckets`). `w6` and `w7` are the bucket's last
/// two words (little-endian: `hi[0..8]`, then `hi[8..12]`, `len`, the pad
/// byte and `overflow`); `probe` is the tag as (`splat(tag byte)`,
/// `splat(tag mask)`).
#[inline]
fn candidates(w6: u64, w7: u64, probe: (u64, u64)) -> u32 {
    let (pat, mask) = probe;
    let len = u32::from((w7 >> 32) as u8).min(BUCKET_SLOTS as u32);
    let a = gather_top_bits(zero_bytes((w6 ^ pat) & mask));
    let b = gather_top_bits(zero_bytes((u64::from(w7 as u32) ^ pat) & mask)) & 0xF;
    ((a | b << 8) as u32) & ((1u32 << len) - 1)
}

/// The last two words of the bucket at `p` (see `candidates`).
///
/// # Safety
/// `p` points at a bucket of a live mapping.
#[inline(always)]
unsafe fn tag_words(p: *const Bucket) -> (u64, u64) {
    let w = p as *const AtomicU64;
    // SAFETY: words 6 and 7 of an aligned 64-byte bucket.
    unsafe {
        (
            (*w.add(6)).load(Ordering::Relaxed),
            (*w.add(7)).load(Ordering::Relaxed),
        )
    }
}

/// The high byte (with the tag) of entry `slot` (< 12) of the bucket at `p`.
///
/// # Safety
/// `p` points at a bucket of a live mapping.
#[inline(always)]
unsafe fn tag_at(p: *const Bucket, slot: usize) -> u8 {
    // SAFETY: hi[slot] is inside the bucket.
    unsafe { (*(p as *const AtomicU8).add(4 * BUCKET_SLOTS + slot)).load(Ordering::Relaxed) }
}

/// The lock byte of the bucket at `p` (see the module comment).
///
/// # Safety
/// `p` points at a bucket of a live mapping, which outlives `'a`.
#[inline(always)]
unsafe fn lock_of<'a>(p: *const Bucket) -> &'a AtomicU8 {
    // SAFETY: `lock` is inside the bucket; the caller's contract.
    unsafe { &*(p as *const AtomicU8).add(std::mem::offset_of!(Bucket, lock)) }
}

/// Waits until no unlocked SET holds the bucket at `p`. A shard writer
/// calls it (its version already odd) before it reads the bucket; from
/// then on, until it unlocks the shard, no SET changes the bucket.
///
/// # Safety
/// `p` points at a bucket of a live mapping.
#[inline(always)]
unsafe fn settle(p: *const Bucket) {
    // SAFETY: the caller's contract.
    let lock = unsafe { lock_of(p) };
    // SeqCst: pairs with the version bump of `Shard::write` and the lock
    // and version read of `swap_unlocked` (see the module comment).
    let mut spins = 0u32;
    while lock.load(Ordering::SeqCst) != 0 {
        // The holder keeps it for a few instructions, unless it was
        // preempted there: then let it run.
        spins += 1;
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Entry `slot` (< 12) of the bucket at `p`, read with relaxed atomic loads.
///
/// # Safety
/// `p` points at a bucket of a live mapping.
#[inline(always)]
unsafe fn entry_at(p: *const Bucket, slot: usize) -> u64 {
    // SAFETY: lo[slot] and hi[slot] are inside the bucket and aligned.
    unsafe {
        let lo = (*(p as *const AtomicU32).add(slot)).load(Ordering::Relaxed);
        let hi = (*(p as *const AtomicU8).add(4 * BUCKET_SLOTS + slot)).load(Ordering::Relaxed);
        u64::from(lo) | u64::from(hi) << 32
    }
}

/// The key a probe compares tag matches with: a key in hand, or the key of
/// an item, read only when a tag matches (a recovery linking items it has
/// not read yet: see `Table::find_item`).
trait KeySource<'k>: Copy {
    fn key(self) -> &'k [u8];
}

impl<'k> KeySource<'k> for &'k [u8] {
    #[inline(always)]
    fn key(self) -> &'k [u8] {
        self
    }
}

impl KeySource<'static> for ItemPtr {
    #[inline(always)]
    fn key(self) -> &'static [u8] {
        ItemPtr::key(self)
    }
}

/// A lookup in the `n` buckets at `buckets`: shared by `Table::find` (the
/// caller holds the shard lock) and `Table::find_unlocked` (it does not,
/// and validates the result afterwards). Buckets are read a word at a time
/// with relaxed atomic loads (plain loads on x86-64 and arm64), only the
/// words a lookup needs, and the decoded location is checked against the
/// arena before its item is read, so a torn or stale read stays inside
/// mapped memory. With `SETTLE` (a shard writer's lookup), each bucket is
/// settled before it is read.
///
/// # Safety
/// `buckets` points at `n ≥ 1` buckets of a live mapping.
#[inline(always)]
unsafe fn probe_buckets<'k, const SETTLE: bool>(
    buckets: *const Bucket,
    n: usize,
    codec: AddrCodec,
    arena: &Arena,
    key: impl KeySource<'k>,
    hash: u64,
) -> Option<Found> {
    let home = home_of(hash, n);
    let (tag_byte, mask_byte) = (codec.tag_byte(codec.tag(hash)), codec.tag_byte_mask());
    let mut b = home;
    for _ in 0..n {
        let bucket = buckets.wrapping_add(b);
        if SETTLE {
            // SAFETY: b < n: one of the n buckets of the mapping.
            unsafe { settle(bucket) };
        }
        // SAFETY: as above.
        let (_, w7) = unsafe { tag_words(bucket) };
        let len = usize::from((w7 >> 32) as u8).min(BUCKET_SLOTS);
        // One slot at a time: the compare of each tag is a branch the CPU
        // predicts, so the item load can start before the tags are in
        // (comparing all twelve at once with word arithmetic measured
        // ~40 ns slower per dependent lookup: the item address then waits
        // for the arithmetic).
        for slot in 0..len {
            // SAFETY: as above, and slot < 12.
            if unsafe { tag_at(bucket, slot) } & mask_byte != tag_byte {
                continue;
            }
            // SAFETY: as above.
            let loc = codec.decode(unsafe { entry_at(bucket, slot) });
            if loc.seg as usize >= arena.capacity() {
                continue;
            }
            let item = arena.item(loc.seg, loc.offset);
            let meta = item.meta();
            if item.key_is(&meta, key.key()) {
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
        if w7 >> 48 == 0 {
            return None;
        }
        b = if b + 1 == n { 0 } else { b + 1 };
    }
    None
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
///
/// Its pointer and length are atomics because lock-free readers load them
/// (see [`find_unlocked`]) while a writer may be replacing the array:
/// `grow` stores the pointer, then the length, and readers load the length,
/// then the pointer, so a reader never pairs an old (smaller) array with a
/// new length. An outgrown array is emptied (`MADV_DONTNEED`: it reads back
/// as empty buckets) but stays mapped until the table drops, so a reader
/// still holding it reads zeros, never unmapped memory.
struct BucketArray {
    ptr: AtomicPtr<Bucket>,
    len: AtomicUsize,
}

fn map_buckets(len: usize) -> *mut Bucket {
    let bytes = len * std::mem::size_of::<Bucket>();
    // SAFETY: an anonymous private mapping with no address hint; the
    // result is checked before use. Fresh anonymous pages are zeroed,
    // and an all-zero Bucket is an empty bucket.
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
    p as *mut Bucket
}

fn unmap_buckets(ptr: usize, len: usize) {
    // SAFETY: unmaps exactly a mapping made by map_buckets(len), which no
    // reader can be using any more (its table is being dropped).
    unsafe {
        libc::munmap(
            ptr as *mut libc::c_void,
            len * std::mem::size_of::<Bucket>(),
        );
    }
}

impl BucketArray {
    fn new(len: usize) -> BucketArray {
        BucketArray {
            ptr: AtomicPtr::new(map_buckets(len)),
            len: AtomicUsize::new(len),
        }
    }

    /// Publishes `next` (a fully built array) in place of the current one,
    /// which is emptied (but stays mapped); returns it as (address, length)
    /// for the owner to unmap when no reader can hold it.
    fn replace(&mut self, next: *mut Bucket, next_len: usize) -> (usize, usize) {
        let (old, old_len) = (self.ptr.load(Ordering::Relaxed), self.len());
        self.ptr.store(next, Ordering::Release);
        self.len.store(next_len, Ordering::Release);
        // SAFETY: the range is exactly the old mapping; readers that still
        // read it see zero pages (empty buckets), and retry.
        unsafe {
            libc::madvise(
                old as *mut libc::c_void,
                old_len * std::mem::size_of::<Bucket>(),
                libc::MADV_DONTNEED,
            );
        }
        (old as usize, old_len)
    }

    #[inline]
    fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

impl std::ops::Deref for BucketArray {
    type Target = [Bucket];
    #[inline]
    fn deref(&self) -> &[Bucket] {
        // SAFETY: ptr maps len zero-initialised (valid) Buckets, owned by
        // self; only the holder of the shard lock (the owner of &self or
        // &mut self here) changes them.
        unsafe { std::slice::from_raw_parts(self.ptr.load(Ordering::Relaxed), self.len()) }
    }
}

impl std::ops::DerefMut for BucketArray {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Bucket] {
        // SAFETY: as above, and &mut self gives exclusive access among
        // lock holders (lock-free readers only copy buckets out, and
        // validate what they read against the shard's version).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.load(Ordering::Relaxed), self.len()) }
    }
}

impl Drop for BucketArray {
    fn drop(&mut self) {
        unmap_buckets(self.ptr.load(Ordering::Relaxed) as usize, self.len());
    }
}

/// One shard's table plus the counters that change with it (kept here so
/// they are updated under the same lock, with no shared atomics). Laid out
/// so that, behind the shard's 8-byte lock word, everything a get or a
/// locked write touches (the bucket array, the codec and the three counters
/// a set updates) is in the lock's cache line: a locked write moves one
/// line between cores besides its bucket. (An unlocked SET only reads it.)
#[repr(C)]
pub struct Table {
    buckets: BucketArray,
    codec: AddrCodec,
    /// `curr_items` is also the number of entries.
    pub counters: ShardCounters,
    /// Outgrown bucket arrays (address, length): emptied, still mapped for
    /// lock-free readers that may hold them, unmapped with the table.
    retired: Vec<(usize, usize)>,
}

impl Drop for Table {
    fn drop(&mut self) {
        for &(p, len) in &self.retired {
            unmap_buckets(p, len);
        }
    }
}

/// A shard's share of the engine counters of [`StoreStats`](crate::StoreStats),
/// kept under its lock.
#[derive(Default, Clone, Copy, Debug)]
#[repr(C)]
pub struct ShardCounters {
    /// Linked items in RAM.
    pub curr_items: u64,
    /// Bytes of those items, wrapping: the write heads count some of them, so
    /// only the sum over shards and heads is right.
    pub bytes: u64,
    /// Items stored (the write heads count the rest).
    pub total_items: u64,
    /// Live items evicted.
    pub evictions: u64,
    /// Of those, items never fetched.
    pub evicted_unfetched: u64,
    /// Expired or flushed items unlinked by a walk (evictor, compactor, crawler).
    pub reclaimed: u64,
    /// Of those, items never fetched.
    pub expired_unfetched: u64,
    /// The packed items linked (wrapping, as `bytes`).
    pub packed: crate::codec::PackedCounts,
}

/// The position of a found key, valid until the table is modified.
#[derive(Clone, Copy)]
pub struct Found {
    bucket: usize,
    slot: usize,
    home: usize,
    /// Where the item is.
    pub loc: Location,
    /// The item.
    pub item: ItemPtr,
    /// The item's header, decoded while comparing its key.
    pub meta: ItemMeta,
}

impl Table {
    /// An empty table with one page of buckets.
    pub fn new(codec: AddrCodec) -> Table {
        Table {
            buckets: BucketArray::new(INITIAL_BUCKETS),
            codec,
            counters: ShardCounters::default(),
            retired: Vec::new(),
        }
    }

    /// Items the table links.
    pub fn len(&self) -> usize {
        self.counters.curr_items as usize
    }

    /// Whether the table links no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Finds `key` (whose hash is `hash`).
    #[inline]
    pub fn find(&self, arena: &Arena, key: &[u8], hash: u64) -> Option<Found> {
        let n = self.buckets.len();
        let p = self.buckets.ptr.load(Ordering::Relaxed);
        // SAFETY: the array holds n buckets, and the caller's lock keeps it.
        unsafe { probe_buckets::<true>(p, n, self.codec, arena, key, hash) }
    }

    /// Finds the entry of the key of item `it` (whose hash is `hash`),
    /// reading the item's key only if a tag matches.
    pub fn find_item(&self, arena: &Arena, it: ItemPtr, hash: u64) -> Option<Found> {
        let n = self.buckets.len();
        let p = self.buckets.ptr.load(Ordering::Relaxed);
        // SAFETY: the array holds n buckets, and the caller's lock keeps it.
        unsafe { probe_buckets::<true>(p, n, self.codec, arena, it, hash) }
    }

    /// The bucket array (length, pointer) and codec of the table at
    /// `table`, read without its lock: the length before the pointer (a
    /// writer publishes them the other way round, see `BucketArray`), so
    /// the array always has at least that many buckets.
    ///
    /// # Safety
    /// `table` points at a live `Table` (locked or not).
    #[inline(always)]
    unsafe fn snapshot(table: *const Table) -> (usize, *const Bucket, AddrCodec) {
        // SAFETY: the fields are read through raw pointers, the atomics
        // atomically, the codec (never written after Table::new) by copy.
        unsafe {
            let n = (*std::ptr::addr_of!((*table).buckets.len)).load(Ordering::Acquire);
            let p = (*std::ptr::addr_of!((*table).buckets.ptr)).load(Ordering::Acquire);
            (
                n,
                p as *const Bucket,
                std::ptr::addr_of!((*table).codec).read(),
            )
        }
    }

    /// `find` for a reader that holds no lock (a GET; see `Store::get`):
    /// reads the table at `table` while a writer may be changing it.
    /// Whatever it races with, it reads only inside the table's bucket
    /// arrays (current or outgrown, all still mapped) and inside the arena
    /// mapping (a location's segment is checked against the capacity, and
    /// the mapping has room past the last segment for one item header and
    /// key); each bucket is copied out with one volatile read. The result
    /// means something only if the shard's version was the same, and even,
    /// before and after the call: the caller checks.
    ///
    /// # Safety
    /// `table` points at a live `Table` (locked or not), and the caller is
    /// pinned (`epoch::pin`), so item memory it finds stays mapped.
    #[inline]
    pub unsafe fn find_unlocked(
        table: *const Table,
        arena: &Arena,
        key: &[u8],
        hash: u64,
    ) -> Option<Found> {
        // SAFETY: the caller's contract.
        let (n, buckets, codec) = unsafe { Self::snapshot(table) };
        // SAFETY: the array at `buckets` has at least n buckets (lengths
        // are published after pointers) and stays mapped.
        unsafe { probe_buckets::<false>(buckets, n, codec, arena, key, hash) }
    }

    /// A SET's replacement of the entry of a present `key` with `loc`,
    /// without the shard's lock (see the module comment): finds the entry
    /// as `find_unlocked` does, at the shard version `version` holds (which
    /// must be even), asks `accept` whether to replace that item, and
    /// swaps the entry while holding its bucket's lock byte if the version
    /// is still the same and the entry unchanged. Returns the replaced
    /// entry, or None if nothing changed (the caller then takes the lock).
    ///
    /// # Safety
    /// `table` points at a live `Table` (locked or not) whose shard version
    /// is `version`, and the caller is pinned (`epoch::pin`).
    #[inline]
    pub unsafe fn swap_unlocked(
        table: *const Table,
        version: &AtomicU64,
        arena: &Arena,
        key: &[u8],
        hash: u64,
        loc: Location,
        accept: impl FnOnce(&Found) -> bool,
    ) -> Option<Found> {
        let v = version.load(Ordering::Acquire);
        if v & 1 != 0 {
            return None;
        }
        // SAFETY: the caller's contract.
        let (n, buckets, codec) = unsafe { Self::snapshot(table) };
        // SAFETY: as in find_unlocked.
        let found = unsafe { probe_buckets::<false>(buckets, n, codec, arena, key, hash) }?;
        // The reads above happen before the version is re-read.
        std::sync::atomic::fence(Ordering::Acquire);
        if version.load(Ordering::Relaxed) != v || !accept(&found) {
            return None;
        }
        let (old, new) = (codec.encode(hash, found.loc), codec.encode(hash, loc));
        if old >> 32 != new >> 32 {
            // Address bits in the high byte: not one store.
            return None;
        }
        let bucket = buckets.wrapping_add(found.bucket);
        // SAFETY: found.bucket < n, and the array stays mapped. (If the
        // table grew meanwhile, the array is an outgrown one: the lock byte
        // is taken and given back on an emptied page, and the version check
        // below fails.)
        let lock = unsafe { lock_of(bucket) };
        lock.compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed)
            .ok()?;
        // SAFETY: as above; found.slot < 12.
        let swapped =
            version.load(Ordering::SeqCst) == v && unsafe { entry_at(bucket, found.slot) } == old;
        if swapped {
            // SAFETY: as above. Release: a reader that loads the new entry
            // sees the item written before it.
            unsafe {
                (*(bucket as *const AtomicU32).add(found.slot)).store(new as u32, Ordering::Release)
            };
        }
        lock.store(0, Ordering::Release);
        swapped.then_some(found)
    }

    /// Asks the CPU to fetch the home bucket of `hash` (a hint for a lookup
    /// coming soon; see `Store::get_many`).
    ///
    /// # Safety
    /// `table` points at a live `Table` (locked or not).
    #[inline]
    pub unsafe fn prefetch_bucket(table: *const Table, hash: u64) {
        // SAFETY: the caller's contract; only an address is computed.
        let (n, buckets, _) = unsafe { Self::snapshot(table) };
        crate::arena::prefetch(buckets.wrapping_add(home_of(hash, n)) as *const u8);
    }

    /// Where the first entry of `hash`'s home bucket whose tag matches
    /// points, read without a lock: a guess, for prefetching only (it may
    /// be another key's, or torn, or stale).
    ///
    /// # Safety
    /// As for `find_unlocked`, except that the caller need not be pinned
    /// (the location is not dereferenced).
    #[inline]
    pub unsafe fn guess_location(table: *const Table, hash: u64) -> Option<Location> {
        // SAFETY: the caller's contract.
        let (n, buckets, codec) = unsafe { Self::snapshot(table) };
        let bucket = buckets.wrapping_add(home_of(hash, n));
        // SAFETY: the home bucket is one of the n buckets of the array (see
        // find_unlocked).
        let (w6, w7) = unsafe { tag_words(bucket) };
        let m = candidates(w6, w7, codec.probe(hash));
        if m == 0 {
            return None;
        }
        // SAFETY: as above.
        let v = unsafe { entry_at(bucket, m.trailing_zeros() as usize) };
        Some(codec.decode(v))
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
    }

    /// Inserts a key known to be absent.
    pub fn insert(&mut self, arena: &Arena, hash: u64, loc: Location) {
        if (self.len() + 1) * 10 > self.buckets.len() * BUCKET_SLOTS * MAX_LOAD_TENTHS {
            self.grow(arena);
        }
        let v = self.codec.encode(hash, loc);
        Self::place(&mut self.buckets, hash, v);
    }

    fn place(buckets: &mut [Bucket], hash: u64, v: u64) {
        let n = buckets.len();
        let mut b = home_of(hash, n);
        loop {
            // SAFETY: b < n.
            unsafe { settle(buckets.as_ptr().add(b)) };
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

    /// Makes room for `entries` entries in all, so that inserting them
    /// rehashes nothing more: the table is sized for a load of about 80 %
    /// (a warm restart, which knows how many keys each shard will hold,
    /// sizes each table once instead of growing it step by step).
    pub fn reserve(&mut self, arena: &Arena, entries: usize) {
        let size = (entries * 10).div_ceil(BUCKET_SLOTS * 8);
        if size > self.buckets.len() {
            self.grow_to(arena, size);
        }
    }

    /// Rehashes into a table a quarter larger.
    fn grow(&mut self, arena: &Arena) {
        let n = self.buckets.len();
        self.grow_to(arena, n + (n / 4).max(1));
    }

    /// Rehashes into a table of `size` buckets.
    fn grow_to(&mut self, arena: &Arena, size: usize) {
        let next = map_buckets(size);
        {
            // SAFETY: a fresh mapping of `size` zeroed buckets, not yet
            // published: this is the only reference to it.
            let new = unsafe { std::slice::from_raw_parts_mut(next, size) };
            for (b, bucket) in self.buckets.iter().enumerate() {
                // SAFETY: b < the array's length.
                unsafe { settle(self.buckets.as_ptr().add(b)) };
                for slot in 0..bucket.len as usize {
                    let v = bucket.entry(slot);
                    let loc = self.codec.decode(v);
                    let hash = hash_key(arena.item(loc.seg, loc.offset).key());
                    Self::place(new, hash, v);
                }
            }
        }
        let old = self.buckets.replace(next, size);
        self.retired.push(old);
    }

    /// Where a walk of the table in hash order (see `entries_homed_in`)
    /// that starts at hash position `from` (the top 32 bits of a key hash,
    /// below 2^32) ends after the keys of `home_buckets` home buckets: the
    /// first position whose home bucket is past them, 2^32 at the end.
    pub fn batch_end(&self, from: u64, home_buckets: usize) -> u64 {
        let n = self.buckets.len();
        let end = (home_of(from << 32, n) + home_buckets.max(1)).min(n);
        // The first position whose home bucket is `end`.
        ((end as u64) << 32).div_ceil(n as u64)
    }

    /// Calls `f` with the location of every entry whose key's hash
    /// position (the top 32 bits of its hash) is in `from..to`, and of
    /// some others stored among them: the caller tells them apart by
    /// hashing the key. An entry's home bucket follows from its position
    /// (`home_of` is monotonic), and it is stored there or in a later
    /// bucket (wrapping) no further than where `overflow` drops to 0, so
    /// the walk reads the home buckets of `from..to` and the spill after
    /// them only. Under the shard lock (read or write): entries do not
    /// move, though an unlocked SET may swap one's location for another
    /// of the same key (either is read, whole).
    pub fn entries_homed_in(&self, from: u64, to: u64, mut f: impl FnMut(Location)) {
        if to <= from {
            return;
        }
        let n = self.buckets.len();
        let p = self.buckets.ptr.load(Ordering::Relaxed);
        let first = home_of(from << 32, n);
        let last = home_of((to - 1) << 32, n);
        let mut b = first;
        for step in 0..n {
            let bucket = p.wrapping_add(b);
            // SAFETY: b < n: one of the table's buckets, which the caller's
            // lock keeps mapped and in place.
            let (_, w7) = unsafe { tag_words(bucket) };
            let len = usize::from((w7 >> 32) as u8).min(BUCKET_SLOTS);
            for slot in 0..len {
                // SAFETY: as above, and slot < 12.
                f(self.codec.decode(unsafe { entry_at(bucket, slot) }));
            }
            if step >= last - first && w7 >> 48 == 0 {
                return;
            }
            b = if b + 1 == n { 0 } else { b + 1 };
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
    fn lookups_read_tags_len_and_overflow_from_the_last_two_words() {
        let mut b = Bucket {
            lo: [0; BUCKET_SLOTS],
            hi: [0; BUCKET_SLOTS],
            len: 0,
            lock: 0,
            overflow: 0,
        };
        b.hi = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        b.len = 11;
        b.overflow = 0x1234;
        b.lo[5] = 0xDEAD_BEEF;
        // SAFETY: Bucket is 64 plain bytes; reading it as words is fine.
        let w: [u64; 8] = unsafe { std::mem::transmute(b) };
        assert_eq!(w[6], 0x0807_0605_0403_0201);
        assert_eq!(w[7] as u32, 0x0C0B_0A09);
        assert_eq!((w[7] >> 32) as u8, 11);
        assert_eq!(w[7] >> 48, 0x1234);
        assert_eq!((w[2] >> 32) as u32, 0xDEAD_BEEF);
        // Tag 10 (slot 9) matches under a full mask; slot 11 is beyond len.
        let m = candidates(w[6], w[7], (splat(10), splat(0xFF)));
        assert_eq!(m, 1 << 9);
        let m = candidates(w[6], w[7], (splat(12), splat(0xFF)));
        assert_eq!(m, 0);
        // A 4-bit mask matches every byte whose top nibble matches.
        let m = candidates(w[6], w[7], (splat(0), splat(0xF0)));
        assert_eq!(m.count_ones(), 11);
    }

    #[test]
    fn a_set_touches_one_line_of_its_shard() {
        // The shard's version and lock words, then the table up to
        // total_items.
        let end = 16 + std::mem::offset_of!(Table, counters) + 3 * 8;
        assert!(end <= 64, "{end}");
    }

    #[test]
    fn batches_in_hash_order_cover_every_position_once() {
        let t = Table::new(AddrCodec::new(4096, 20, 1));
        let n = INITIAL_BUCKETS;
        let mut from = 0;
        let mut homes = Vec::new();
        while from < 1 << 32 {
            let to = t.batch_end(from, 5);
            assert!(to > from);
            homes.push((home_of(from << 32, n), home_of((to - 1) << 32, n)));
            from = to;
        }
        assert_eq!(from, 1 << 32);
        assert_eq!(homes.len(), n.div_ceil(5));
        for (i, &(first, last)) in homes.iter().enumerate() {
            assert_eq!((first, last), (5 * i, (5 * i + 4).min(n - 1)));
        }
        // A batch that starts inside a bucket (the table grew since the
        // position was chosen) ends where that bucket's successors do.
        let inside = (3u64 << 32) / n as u64 + 12345;
        assert_eq!(t.batch_end(inside, 1), (4u64 << 32) / n as u64);
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
