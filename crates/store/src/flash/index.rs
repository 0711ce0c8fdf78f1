//! The flash index: key hash → where the key's item lies on flash, about
//! 12 bytes of RAM per item and no key. Sharded like the RAM index (the
//! key hash's low 8 bits pick the shard), each shard a table of 64-byte
//! buckets behind a reader-writer lock.
//!
//! ```text
//!  entry (80 bits, stored as lo: u64 + hi: u16):
//!   79   78                                  42 41    36 35                 0
//!  +-----+--------------------------------------+--------+--------------------+
//!  | hot | hash: 37 bits of the key hash        | class  | addr: 16-byte units|
//!  +-----+--------------------------------------+--------+--------------------+
//!   hash = key hash bits 8..45 (bits 0..8 chose the shard); class = the
//!   record's size class (how much to read, see `record`); addr 0 = none;
//!   hot = read since it was written (reclaim keeps it, see `Flash`)
//!
//!  bucket (64 bytes):
//!  +----------------------+------------------+-----+-----+----------+
//!  | lo: [u64; 6] (48 B)  | hi: [u16; 6]     | len | pad | overflow |
//!  +----------------------+------------------+-----+-----+----------+
//!   entries 0..len live, packed; overflow counts entries homed here or
//!   earlier but stored after this bucket (linear probing by bucket)
//! ```
//!
//! The tables live in the tier's metadata mapping (`meta`): with a memory
//! file they are in `FILE.flash` and outlive the process. A table that
//! grows is written whole elsewhere, then its shard's descriptor is
//! switched with one store; an entry changes with stores to its bucket only
//! (moves and counts included), so after a crash a table is whole except
//! for what the write in progress was changing: `repair` rebuilds every
//! table, dropping duplicates and entries that point nowhere.
//!
//! Beside the tables (in RAM only, counted again at start), each page's
//! live bytes: the size classes of the entries pointing into it, kept as
//! entries come and go, so the flusher knows which pages are mostly dead
//! (see `Flash`).
//!
//! An entry holds 37 bits of the key's hash and not the key: two keys whose
//! hashes agree on those bits and the shard's 8 share one entry (the later
//! write replaces the earlier, which then misses). A lookup's answer is
//! confirmed by the key stored on flash, so a shared entry is a miss, never
//! another key's value. Growing rehashes from the stored hash bits alone
//! (a key's home bucket is a monotonic function of its top 32 stored bits),
//! so no key is read back from flash.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::meta::Meta;
use crate::index::{shard_of, SHARDS};

const SLOTS: usize = 6;
const INITIAL_BUCKETS: usize = 16;
/// Grow past this many entries per 20 slots (95 %; growing by an eighth,
/// a table's load stays between 84 and 95 %, 11.2 to 12.7 bytes per
/// entry; probes stay short, and only RAM is probed).
const MAX_LOAD_TWENTIETHS: usize = 19;

const ADDR_BITS: u32 = 36;
const CLASS_BITS: u32 = 6;
const HASH_BITS: u32 = 37;
const HASH_SHIFT: u32 = ADDR_BITS + CLASS_BITS;
const HOT_BIT: u32 = HASH_SHIFT + HASH_BITS;

/// The largest flash address an entry holds (in 16-byte units: 1 TiB).
pub const MAX_ADDR: u64 = (1 << ADDR_BITS) - 1;

/// What an entry says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Record address in 16-byte units (never 0).
    pub addr: u64,
    /// The record's size class.
    pub class: u8,
    /// Read since it was written.
    pub hot: bool,
}

#[inline]
fn stored_hash(hash: u64) -> u64 {
    (hash >> 8) & ((1 << HASH_BITS) - 1)
}

#[inline]
fn pack(h: u64, e: Entry) -> u128 {
    debug_assert!(e.addr != 0 && e.addr <= MAX_ADDR && u32::from(e.class) < 1 << CLASS_BITS);
    u128::from(e.addr)
        | u128::from(e.class) << ADDR_BITS
        | u128::from(h) << HASH_SHIFT
        | u128::from(e.hot) << HOT_BIT
}

#[inline]
fn unpack(v: u128) -> (u64, Entry) {
    (
        (v >> HASH_SHIFT) as u64 & ((1 << HASH_BITS) - 1),
        Entry {
            addr: v as u64 & MAX_ADDR,
            class: (v >> ADDR_BITS) as u8 & ((1 << CLASS_BITS) - 1) as u8,
            hot: (v >> HOT_BIT) & 1 == 1,
        },
    )
}

/// A key's home bucket among `n`, from its stored hash bits.
#[inline]
fn home_of(h: u64, n: usize) -> usize {
    (((h >> (HASH_BITS - 32)) * n as u64) >> 32) as usize
}

#[repr(C, align(64))]
#[derive(Clone, Copy, Default)]
struct Bucket {
    lo: [u64; SLOTS],
    hi: [u16; SLOTS],
    len: u8,
    _pad: u8,
    overflow: u16,
}

const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

impl Bucket {
    #[inline]
    fn get(&self, slot: usize) -> u128 {
        u128::from(self.lo[slot]) | u128::from(self.hi[slot]) << 64
    }

    #[inline]
    fn put(&mut self, slot: usize, v: u128) {
        self.lo[slot] = v as u64;
        self.hi[slot] = (v >> 64) as u16;
    }
}

/// One shard's table: `n` buckets at `offset` of the metadata mapping.
struct Table {
    shard: usize,
    offset: usize,
    n: usize,
    ptr: *mut Bucket,
    len: usize,
}

// SAFETY: the buckets are memory of the metadata mapping that only this
// table (behind its shard's lock) touches.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

/// A table descriptor: (offset / 4 KiB) << 24 | buckets.
fn descriptor(offset: usize, n: usize) -> u64 {
    debug_assert!(n < 1 << 24 && offset.is_multiple_of(4096));
    ((offset / 4096) as u64) << 24 | n as u64
}

impl Table {
    /// A new table of `n` empty buckets for `shard` (not yet published);
    /// None when the metadata's address space is used up.
    fn create(meta: &Meta, shard: usize, n: usize) -> Option<Table> {
        let offset = meta.alloc(n * std::mem::size_of::<Bucket>())?;
        Some(Table {
            shard,
            offset,
            n,
            ptr: meta.at(offset) as *mut Bucket,
            len: 0,
        })
    }

    /// The table the header describes for `shard`, if any.
    fn attach(meta: &Meta, shard: usize) -> Option<Table> {
        let d = meta.header().tables[shard].load(Ordering::Acquire);
        if d == 0 {
            return None;
        }
        let offset = (d >> 24) as usize * 4096;
        let n = (d & ((1 << 24) - 1)) as usize;
        let mut t = Table {
            shard,
            offset,
            n,
            ptr: meta.at(offset) as *mut Bucket,
            len: 0,
        };
        t.len = t
            .buckets()
            .iter()
            .map(|b| usize::from(b.len.min(SLOTS as u8)))
            .sum();
        Some(t)
    }

    fn publish(&self, meta: &Meta) {
        meta.header().tables[self.shard].store(descriptor(self.offset, self.n), Ordering::Release);
    }

    fn buckets(&self) -> &[Bucket] {
        // SAFETY: `n` buckets at `ptr`, inside the mapping, used only
        // through this table.
        unsafe { std::slice::from_raw_parts(self.ptr, self.n) }
    }

    fn buckets_mut(&mut self) -> &mut [Bucket] {
        // SAFETY: as above, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.n) }
    }

    /// (bucket, slot) of the entry with stored hash `h`.
    fn position(&self, h: u64) -> Option<(usize, usize)> {
        let buckets = self.buckets();
        let n = buckets.len();
        let mut b = home_of(h, n);
        for _ in 0..n {
            let bucket = &buckets[b];
            for slot in 0..(bucket.len as usize).min(SLOTS) {
                if unpack(bucket.get(slot)).0 == h {
                    return Some((b, slot));
                }
            }
            if bucket.overflow == 0 {
                return None;
            }
            b = if b + 1 == n { 0 } else { b + 1 };
        }
        None
    }

    fn place(buckets: &mut [Bucket], h: u64, v: u128) {
        let n = buckets.len();
        let mut b = home_of(h, n);
        loop {
            let bucket = &mut buckets[b];
            if (bucket.len as usize) < SLOTS {
                let slot = bucket.len as usize;
                bucket.put(slot, v);
                bucket.len += 1;
                return;
            }
            bucket.overflow += 1;
            b = if b + 1 == n { 0 } else { b + 1 };
        }
    }

    /// Moves every entry that `keep` accepts into a new table of `n`
    /// buckets, published in place of this one (whose memory goes back).
    fn rebuild(&mut self, meta: &Meta, n: usize, mut keep: impl FnMut(u128) -> bool) -> bool {
        let Some(mut next) = Table::create(meta, self.shard, n) else {
            return false;
        };
        let mut len = 0;
        for bucket in self.buckets() {
            for slot in 0..(bucket.len as usize).min(SLOTS) {
                let v = bucket.get(slot);
                if v != 0 && keep(v) {
                    Self::place(next.buckets_mut(), unpack(v).0, v);
                    len += 1;
                }
            }
        }
        next.len = len;
        next.publish(meta);
        let old = std::mem::replace(self, next);
        meta.free(old.offset, old.n * std::mem::size_of::<Bucket>());
        true
    }

    /// False when the table was full and could not grow.
    fn insert(&mut self, meta: &Meta, h: u64, e: Entry) -> bool {
        if let Some((b, slot)) = self.position(h) {
            self.buckets_mut()[b].put(slot, pack(h, e));
            return true;
        }
        if (self.len + 1) * 20 > self.n * SLOTS * MAX_LOAD_TWENTIETHS {
            // An eighth more: the load stays between 84 and 95 %.
            let n = self.n + (self.n / 8).max(1);
            if n >= 1 << 24 || !self.rebuild(meta, n, |_| true) {
                return false;
            }
        }
        Self::place(self.buckets_mut(), h, pack(h, e));
        self.len += 1;
        true
    }

    fn remove_at(&mut self, b: usize, slot: usize, h: u64) {
        let buckets = self.buckets_mut();
        let n = buckets.len();
        let bucket = &mut buckets[b];
        let last = bucket.len as usize - 1;
        let moved = bucket.get(last);
        bucket.put(slot, moved);
        bucket.put(last, 0);
        bucket.len -= 1;
        // The buckets it spilled past no longer hold an entry for it.
        let mut p = home_of(h, n);
        while p != b {
            buckets[p].overflow -= 1;
            p = if p + 1 == n { 0 } else { p + 1 };
        }
        self.len -= 1;
    }
}

/// The flash index (see the module comment).
pub struct FlashIndex {
    meta: Arc<Meta>,
    shards: Box<[RwLock<Table>]>,
    /// Bytes of live records on each page, by their entries' size classes
    /// (see `track_pages`); empty until asked for.
    page_live: Box<[AtomicU64]>,
    /// A page's size in 16-byte address units.
    page_units: u64,
}

/// The bytes an entry's record takes, as far as the index knows: its size
/// class's (at most a fifth more than the record).
#[inline]
fn entry_bytes(e: &Entry) -> u64 {
    super::record::class_bytes(e.class) as u64
}

impl FlashIndex {
    /// The index whose tables `meta` holds (taken over when it has them),
    /// else empty. None when the metadata has no room for a table.
    pub fn new(meta: Arc<Meta>) -> Option<FlashIndex> {
        let shards = (0..SHARDS)
            .map(|i| {
                let t = match Table::attach(&meta, i) {
                    Some(t) => t,
                    None => {
                        let t = Table::create(&meta, i, INITIAL_BUCKETS)?;
                        t.publish(&meta);
                        t
                    }
                };
                Some(RwLock::new(t))
            })
            .collect::<Option<_>>()?;
        Some(FlashIndex {
            meta,
            shards,
            page_live: Box::new([]),
            page_units: 1,
        })
    }

    /// Counts live bytes per page from now on, for `pages` pages of
    /// `page_size` bytes, starting from the entries the index holds.
    pub fn track_pages(&mut self, page_size: usize, pages: usize) {
        self.page_units = (page_size / super::record::ALIGN) as u64;
        self.page_live = (0..pages).map(|_| AtomicU64::new(0)).collect();
        self.recount_pages();
    }

    /// Counts every page's live bytes again from the entries.
    fn recount_pages(&self) {
        for n in self.page_live.iter() {
            n.store(0, Ordering::Relaxed);
        }
        for shard in self.shards.iter() {
            let t = shard.read();
            for bucket in t.buckets() {
                for slot in 0..(bucket.len as usize).min(SLOTS) {
                    let (_, e) = unpack(bucket.get(slot));
                    if e.addr != 0 {
                        self.note(Some(&e), true);
                    }
                }
            }
        }
    }

    /// Adds (or takes off) an entry's bytes to its page's count.
    #[inline]
    fn note(&self, e: Option<&Entry>, add: bool) {
        let Some(e) = e else { return };
        let page = ((e.addr - 1) / self.page_units) as usize;
        if let Some(n) = self.page_live.get(page) {
            if add {
                n.fetch_add(entry_bytes(e), Ordering::Relaxed);
            } else {
                n.fetch_sub(entry_bytes(e), Ordering::Relaxed);
            }
        }
    }

    /// Bytes of live records on page `p` (by size class).
    pub fn page_live(&self, p: usize) -> usize {
        self.page_live
            .get(p)
            .map_or(0, |n| n.load(Ordering::Relaxed) as usize)
    }

    /// After a restart: rebuilds every table from its entries, so that
    /// every bucket's counts are right, keeping only entries `valid`
    /// accepts and, of entries with the same stored hash, the one `newer`
    /// prefers.
    pub fn repair(&self, valid: impl Fn(&Entry) -> bool, newer: impl Fn(&Entry, &Entry) -> bool) {
        for shard in self.shards.iter() {
            let mut t = shard.write();
            let mut best: std::collections::HashMap<u64, u128> = std::collections::HashMap::new();
            for bucket in t.buckets() {
                for slot in 0..(bucket.len as usize).min(SLOTS) {
                    let v = bucket.get(slot);
                    let (h, e) = unpack(v);
                    if v == 0 || e.addr == 0 || !valid(&e) {
                        continue;
                    }
                    let better = best.get(&h).is_none_or(|&w| newer(&e, &unpack(w).1));
                    if better {
                        best.insert(h, v);
                    }
                }
            }
            let n = t.n.max(INITIAL_BUCKETS);
            let keep: std::collections::HashSet<u128> = best.into_values().collect();
            let meta = self.meta.clone();
            t.rebuild(&meta, n, |v| keep.contains(&v));
        }
        self.recount_pages();
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Table> {
        &self.shards[shard_of(hash)]
    }

    /// The entry of the key with this hash, if any.
    pub fn get(&self, hash: u64) -> Option<Entry> {
        let t = self.shard(hash).read();
        let h = stored_hash(hash);
        t.position(h)
            .map(|(b, slot)| unpack(t.buckets()[b].get(slot)).1)
    }

    /// Points the key with this hash at `e` (replacing its entry); false
    /// when the index is out of room (the item is not kept).
    pub fn insert(&self, hash: u64, e: Entry) -> bool {
        let mut t = self.shard(hash).write();
        let h = stored_hash(hash);
        let old = t
            .position(h)
            .map(|(b, slot)| unpack(t.buckets()[b].get(slot)).1);
        if !t.insert(&self.meta, h, e) {
            return false;
        }
        self.note(old.as_ref(), false);
        self.note(Some(&e), true);
        true
    }

    /// Removes the key's entry; true if it had one.
    pub fn remove(&self, hash: u64) -> bool {
        let mut t = self.shard(hash).write();
        let h = stored_hash(hash);
        match t.position(h) {
            Some((b, slot)) => {
                let (_, e) = unpack(t.buckets()[b].get(slot));
                t.remove_at(b, slot, h);
                self.note(Some(&e), false);
                true
            }
            None => false,
        }
    }

    /// Removes the key's entry if it still points at `addr` (a record being
    /// reclaimed or found damaged); true if it did.
    pub fn remove_at(&self, hash: u64, addr: u64) -> bool {
        let mut t = self.shard(hash).write();
        let h = stored_hash(hash);
        match t.position(h) {
            Some((b, slot)) if unpack(t.buckets()[b].get(slot)).1.addr == addr => {
                let (_, e) = unpack(t.buckets()[b].get(slot));
                t.remove_at(b, slot, h);
                self.note(Some(&e), false);
                true
            }
            _ => false,
        }
    }

    /// Moves the key's entry from `from` to `to` (a record rewritten by a
    /// reclaim) if it still points at `from`; true if it did.
    pub fn relocate(&self, hash: u64, from: u64, to: Entry) -> bool {
        let mut t = self.shard(hash).write();
        let h = stored_hash(hash);
        match t.position(h) {
            Some((b, slot)) if unpack(t.buckets()[b].get(slot)).1.addr == from => {
                let (_, e) = unpack(t.buckets()[b].get(slot));
                t.buckets_mut()[b].put(slot, pack(h, to));
                self.note(Some(&e), false);
                self.note(Some(&to), true);
                true
            }
            _ => false,
        }
    }

    /// Marks the key's entry read (if it still points at `addr`).
    pub fn mark_hot(&self, hash: u64, addr: u64) {
        let mut t = self.shard(hash).write();
        let h = stored_hash(hash);
        if let Some((b, slot)) = t.position(h) {
            let (_, mut e) = unpack(t.buckets()[b].get(slot));
            if e.addr == addr && !e.hot {
                e.hot = true;
                t.buckets_mut()[b].put(slot, pack(h, e));
            }
        }
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len).sum()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of RAM the index uses.
    pub fn memory(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().n * std::mem::size_of::<Bucket>())
            .sum::<usize>()
            + self.shards.len() * std::mem::size_of::<RwLock<Table>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::hash_key;

    fn entry(addr: u64) -> Entry {
        Entry {
            addr,
            class: (addr % 64) as u8,
            hot: false,
        }
    }

    #[test]
    fn packs_every_field() {
        let e = Entry {
            addr: MAX_ADDR,
            class: 63,
            hot: true,
        };
        let h = (1 << HASH_BITS) - 1;
        assert_eq!(unpack(pack(h, e)), (h, e));
        assert_eq!(unpack(pack(5, entry(9))), (5, entry(9)));
    }

    fn index() -> FlashIndex {
        let meta = Meta::open(crate::flash::MetaSource::Anonymous, 1, 4, 2, 4096, 1 << 30)
            .unwrap()
            .meta;
        FlashIndex::new(Arc::new(meta)).unwrap()
    }

    #[test]
    fn inserts_finds_replaces_and_removes_through_growth() {
        let idx = index();
        let n = 200_000u64;
        for i in 1..=n {
            idx.insert(hash_key(format!("key{i}").as_bytes()), entry(i));
        }
        assert_eq!(idx.len(), n as usize);
        for i in 1..=n {
            assert_eq!(
                idx.get(hash_key(format!("key{i}").as_bytes())),
                Some(entry(i))
            );
        }
        // About 12 bytes per entry.
        let per = idx.memory() as f64 / n as f64;
        assert!(per < 16.0, "{per} bytes per entry");
        for i in (1..=n).step_by(2) {
            let h = hash_key(format!("key{i}").as_bytes());
            assert!(idx.remove(h));
            assert!(!idx.remove(h));
        }
        for i in 1..=n {
            let got = idx.get(hash_key(format!("key{i}").as_bytes()));
            assert_eq!(got, (i % 2 == 0).then(|| entry(i)), "key{i}");
        }
        let h = hash_key(b"key2");
        idx.insert(h, entry(77));
        assert_eq!(idx.get(h), Some(entry(77)));
        assert!(!idx.remove_at(h, 2));
        assert!(idx.relocate(h, 77, entry(78)));
        idx.mark_hot(h, 78);
        assert!(idx.get(h).unwrap().hot);
        assert!(idx.remove_at(h, 78));
        assert_eq!(idx.get(h), None);
        assert_eq!(idx.len(), n as usize / 2 - 1);
    }
}
