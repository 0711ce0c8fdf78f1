//! osmium-store: the cache engine — the "hash table" and "value store"
//! stages of the pipeline (seed 001).
//!
//! * [`arena`]: item memory, fixed-size segments bounded by `-m`, appended to
//!   by per-worker write heads, reclaimed a whole segment at a time (FIFO
//!   eviction of the oldest segment when memory is full);
//! * [`index`]: the sharded hash index from key to `(SegmentId, offset)`;
//! * [`item`]: the item record layout;
//! * [`clock`]: memcached's relative clock and exptime rules.
//!
//! Locking: a GET takes one index shard's read lock (never a global lock)
//! and copies the value out under it. Writes reserve space on their worker's
//! write head (no shard lock held), write the item, then take the shard's
//! write lock to apply the command's semantics and publish. Eviction and
//! expiry walk a claimed segment and unlink each item under its own shard's
//! write lock, so no lock is ever held over the whole cache.
//!
//! Semantics follow memcached 1.6: exptime conversion, lazy expiry on access,
//! flush_all via `oldest_live`/`oldest_cas`, CAS uniques from one global
//! counter, incr/decr in place (space padded) when the result fits.

pub mod arena;
pub mod clock;
pub mod index;
pub mod item;

use parking_lot::RwLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use arena::{Arena, Reserve, SegmentId, Slot};
use clock::{Clock, ITEM_UPDATE_INTERVAL};
use index::{hash_key, shard_of, AddrCodec, Found, Location, ShardCounters, Table, SHARDS};
use item::{item_size, ItemPtr, ItemView};

pub use item::HEADER_SIZE;

/// Engine configuration (from the command line).
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// `-m`, in bytes.
    pub memory_limit: usize,
    /// `-I`, in bytes.
    pub item_size_max: usize,
    /// `!-M`.
    pub evictions: bool,
    /// `!-C`.
    pub use_cas: bool,
    /// Write heads; one per worker thread.
    pub write_heads: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            memory_limit: 64 << 20,
            item_size_max: 1 << 20,
            evictions: true,
            use_cas: true,
            write_heads: 4,
        }
    }
}

/// Outcome of a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreStatus {
    Stored,
    NotStored,
    Exists,
    NotFound,
    TooLarge,
    OutOfMemory,
}

/// Which storage command (the protocol's own enum: one definition).
pub use osmium_protocol::text::StoreMode;

/// A storage command's arguments. The fields after `cas` are the meta
/// protocol's extras; `..Default::default()` leaves them off.
#[derive(Debug, Clone, Copy, Default)]
pub struct Write<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub flags: u32,
    /// Relative expiry (see [`Clock::expiry`]), 0 = never.
    pub exptime: u32,
    pub value: &'a [u8],
    /// Compare-and-swap unique for `Cas` (and binary append/prepend).
    pub cas: u64,
    /// ms `I`: a `Cas` with an older unique still stores, marked stale.
    pub stale_ok: bool,
    /// ms `E`: the new item's CAS unique (0 = the next from the counter).
    pub new_cas: u64,
    /// ms `b`: the key was sent base64 encoded.
    pub key_binary: bool,
    /// ms `N` in append/prepend mode: on a miss, store the data as a new
    /// item with this expiry.
    pub vivify: Option<u32>,
}

/// mg `N`: create an empty item on a miss.
#[derive(Debug, Clone, Copy, Default)]
pub struct Vivify {
    pub exptime: u32,
    /// `E`: its CAS unique (0 = next from the counter).
    pub cas: u64,
    pub key_binary: bool,
}

/// md: what a meta delete does.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaDelete {
    /// `C`: only if the item's CAS unique is this.
    pub compare_cas: Option<u64>,
    /// `I`: mark stale (new CAS, token cleared) instead of removing.
    pub invalidate: bool,
    /// `T` (with `I`): new expiry.
    pub exptime: Option<u32>,
    /// `E`: the new CAS unique (0 = next from the counter).
    pub new_cas: u64,
    /// `x`: replace the value with an empty one (keeping the item), client
    /// flags set to `flags`.
    pub remove_value: bool,
    pub flags: u32,
}

/// Outcome of a meta delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaDeleteResult {
    Deleted,
    /// Marked stale or emptied in place.
    Kept,
    Exists,
    NotFound,
}

/// ma: what a meta incr/decr does beyond the text command.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaArith {
    /// `C`: compare CAS (0 = no check, as memcached).
    pub compare_cas: u64,
    /// `E`: new CAS unique (0 = next from the counter).
    pub new_cas: u64,
    /// `T`: new expiry, applied when the value is updated in place (as
    /// memcached, whose T lands on the replaced item otherwise).
    pub exptime: Option<u32>,
    /// `N` (+ `J`): on a miss create the item holding `initial` with expiry
    /// `created_exptime` (the last of `N`/`T` in request order).
    pub vivify: Option<(u64, u32)>,
}

/// Outcome of a meta incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaArithResult {
    Done {
        value: u64,
        cas: u64,
        /// The item's expiry before `T`/`N` were applied (0 if created).
        exptime: u32,
        created: bool,
    },
    NotFound,
    NonNumeric,
    Exists,
    NotStored,
    OutOfMemory,
}

/// Outcome of a lookup; hits carry the caller's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<R> {
    Hit(R),
    Miss,
    /// Found but expired (memcached's get_expired).
    Expired,
    /// Found but invalidated by flush_all (get_flushed).
    Flushed,
}

/// Outcome of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithResult {
    Value(u64),
    NotFound,
    NonNumeric,
    OutOfMemory,
}

/// Engine-wide figures for `stats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreStats {
    pub curr_items: u64,
    pub total_items: u64,
    pub bytes: u64,
    pub evictions: u64,
    pub evicted_unfetched: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub limit_maxbytes: u64,
    pub segment_size: u64,
    pub segments_allocated: u64,
    pub segments_limit: u64,
    pub index_bytes: u64,
}

/// Longest a caller spins waiting for a busy segment before giving up.
const RESERVE_RETRIES: usize = 64;

pub struct Store {
    cfg: StoreConfig,
    clock: Clock,
    arena: Arena,
    shards: Box<[RwLock<Table>]>,
    cas_id: AtomicU64,
    /// memcached's settings.oldest_live (relative time, 0 = none).
    oldest_live: AtomicU32,
    /// memcached's settings.oldest_cas.
    oldest_cas: AtomicU64,
    limit_maxbytes: AtomicU64,
}

/// Bytes memcached would charge for an item (its `ITEM_ntotal`): its size
/// check decides when a value is "too large", and osmium answers the same.
pub fn memcached_item_total(key_len: usize, flags: u32, value_len: usize, use_cas: bool) -> usize {
    48 + key_len + 1 + if flags == 0 { 0 } else { 4 } + value_len + 2 + if use_cas { 8 } else { 0 }
}

impl Store {
    pub fn new(cfg: StoreConfig) -> Store {
        let segment_size = segment_size_for(cfg.item_size_max);
        let max_heads = (cfg.memory_limit / segment_size / 4).max(1);
        let heads = cfg.write_heads.clamp(1, max_heads);
        let arena = Arena::new(cfg.memory_limit, segment_size, heads, cfg.evictions);
        let codec = AddrCodec::new(
            arena.capacity(),
            arena.segment_shift(),
            item::ALIGN.trailing_zeros(),
        );
        Store {
            arena,
            shards: (0..SHARDS)
                .map(|_| RwLock::new(Table::new(codec)))
                .collect(),
            clock: Clock::new(),
            cas_id: AtomicU64::new(0),
            oldest_live: AtomicU32::new(0),
            oldest_cas: AtomicU64::new(0),
            limit_maxbytes: AtomicU64::new(cfg.memory_limit as u64),
            cfg,
        }
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Would memcached refuse a value of this size as "too large"?
    pub fn too_large(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        memcached_item_total(key_len, flags, value_len, self.cfg.use_cas) > self.cfg.item_size_max
            || item_size(key_len, value_len) > self.arena.segment_size()
    }

    #[inline]
    fn next_cas(&self) -> u64 {
        if self.cfg.use_cas {
            self.cas_id.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            0
        }
    }

    #[inline]
    fn is_expired(&self, it: ItemPtr, now: u32) -> bool {
        let e = it.exptime();
        e != 0 && e <= now
    }

    /// memcached's `item_is_flushed`.
    #[inline]
    fn is_flushed(&self, it: ItemPtr, now: u32) -> bool {
        let oldest_live = self.oldest_live.load(Ordering::Relaxed);
        if oldest_live == 0 || oldest_live > now {
            return false;
        }
        let oldest_cas = self.oldest_cas.load(Ordering::Relaxed);
        let cas = it.cas();
        it.atime() <= oldest_live || (oldest_cas != 0 && cas != 0 && cas < oldest_cas)
    }

    /// Classifies a found item: usable, expired or flushed.
    #[inline]
    fn check(&self, it: ItemPtr, now: u32) -> Lookup<()> {
        if self.is_flushed(it, now) {
            Lookup::Flushed
        } else if self.is_expired(it, now) {
            Lookup::Expired
        } else {
            Lookup::Hit(())
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Table> {
        &self.shards[shard_of(hash)]
    }

    /// Unlinks a found entry; the caller holds the shard's write lock.
    fn unlink(&self, table: &mut Table, found: &Found) {
        table.remove(found);
        self.release_item(table, found.loc, found.item);
    }

    fn release_item(&self, table: &mut Table, loc: Location, it: ItemPtr) {
        it.mark_dead();
        let size = it.size();
        table.counters.curr_items -= 1;
        table.counters.bytes -= size as u64;
        let seg = self.arena.segment(loc.seg);
        seg.live_items.fetch_sub(1, Ordering::AcqRel);
        seg.live_bytes.fetch_sub(size, Ordering::AcqRel);
    }

    fn account_link(&self, table: &mut Table, loc: Location, it: ItemPtr) {
        let size = it.size();
        table.counters.curr_items += 1;
        table.counters.total_items += 1;
        table.counters.bytes += size as u64;
        let seg = self.arena.segment(loc.seg);
        seg.live_items.fetch_add(1, Ordering::AcqRel);
        seg.live_bytes.fetch_add(size, Ordering::AcqRel);
    }

    /// After an unlocked check found `key` expired or flushed, unlink it if
    /// it is still the same item.
    fn unlink_stale(&self, key: &[u8], hash: u64, loc: Location) {
        let mut table = self.shard(hash).write();
        if let Some(f) = table.find_at(&self.arena, key, hash, loc) {
            let now = self.clock.now();
            if !matches!(self.check(f.item, now), Lookup::Hit(())) {
                self.unlink(&mut table, &f);
            }
        }
    }

    /// Looks `key` up; on a hit runs `f` on the item while the shard lock
    /// is held. `touch` sets a new expiry (gat/gats/touch).
    pub fn get<R>(
        &self,
        key: &[u8],
        touch: Option<u32>,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Lookup<R> {
        let hash = hash_key(key);
        let now = self.clock.now();
        let table = self.shard(hash).read();
        let Some(found) = table.find(&self.arena, key, hash) else {
            return Lookup::Miss;
        };
        let it = found.item;
        match self.check(it, now) {
            Lookup::Hit(()) => {}
            stale => {
                drop(table);
                self.unlink_stale(key, hash, found.loc);
                return match stale {
                    Lookup::Flushed => Lookup::Flushed,
                    _ => Lookup::Expired,
                };
            }
        }
        if let Some(exptime) = touch {
            it.set_exptime(exptime);
        }
        it.bump(now);
        Lookup::Hit(f(self.view(it)))
    }

    #[inline]
    fn view<'a>(&self, it: ItemPtr) -> ItemView<'a> {
        ItemView {
            ptr: it,
            use_cas: self.cfg.use_cas,
            _lock: std::marker::PhantomData,
        }
    }

    /// mg: looks `key` up and runs `f` on the item under its shard lock
    /// *before* the hit is recorded (so `h`/`l` see the previous state);
    /// `f` also gets whether the item was just created. With `vivify`, a
    /// miss creates an empty item (mg N). `bump` records the hit (not u).
    pub fn meta_get<R>(
        &self,
        head: usize,
        key: &[u8],
        bump: bool,
        vivify: Option<&Vivify>,
        f: impl FnOnce(ItemView<'_>, bool) -> R,
    ) -> Lookup<R> {
        let hash = hash_key(key);
        let now = self.clock.now();
        let mut missed = Lookup::Miss;
        {
            let table = self.shard(hash).read();
            if let Some(found) = table.find(&self.arena, key, hash) {
                match self.check(found.item, now) {
                    Lookup::Hit(()) => {
                        let r = f(self.view(found.item), false);
                        if bump {
                            found.item.bump(now);
                        }
                        return Lookup::Hit(r);
                    }
                    stale => {
                        drop(table);
                        self.unlink_stale(key, hash, found.loc);
                        missed = match stale {
                            Lookup::Flushed => Lookup::Flushed,
                            _ => Lookup::Expired,
                        };
                    }
                }
            }
        }
        let Some(v) = vivify else {
            return missed;
        };
        let Some(slot) = self.reserve(head, item_size(key.len(), 0)) else {
            return missed;
        };
        self.write_item(&slot, key, 0, v.exptime, &[]);
        if v.key_binary {
            slot.ptr.set_state(item::STATE_KEY_BINARY);
        }
        let mut table = self.shard(hash).write();
        let (it, created) = match self.find_live(&mut table, key, hash) {
            Some(existing) => {
                slot.ptr.mark_dead();
                (existing.item, false)
            }
            None => {
                self.link(&mut table, hash, &slot, None, v.cas);
                (slot.ptr, true)
            }
        };
        let r = f(self.view(it), created);
        if bump {
            it.bump(self.clock.now());
        }
        drop(table);
        self.arena.finish_write(slot.seg);
        Lookup::Hit(r)
    }

    /// touch: sets a new expiry. Returns whether the key was live.
    pub fn touch(&self, key: &[u8], exptime: u32) -> Lookup<()> {
        self.get(key, Some(exptime), |_| ())
    }

    /// Reserves item space, evicting as needed. No shard lock may be held.
    fn reserve(&self, head: usize, size: usize) -> Option<Slot> {
        let mut busy = 0;
        loop {
            match self.arena.reserve(head, size) {
                Reserve::Slot(slot) => return Some(slot),
                Reserve::Evict(seg) => {
                    self.evict_segment(seg);
                    self.arena.recycle(seg);
                }
                Reserve::OutOfMemory => {
                    busy += 1;
                    if busy > RESERVE_RETRIES {
                        return None;
                    }
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Unlinks every live item of a claimed segment: evicted, or reclaimed
    /// if it had expired.
    fn evict_segment(&self, seg: SegmentId) {
        self.walk_segment(seg, true);
    }

    /// Walks the items of a claimed, fully written segment. With `evict`,
    /// every live item is unlinked; otherwise only expired/flushed ones.
    fn walk_segment(&self, seg: SegmentId, evict: bool) {
        let used = self.arena.segment(seg).used.load(Ordering::Acquire);
        let mut offset = 0;
        while offset < used {
            let it = self.arena.item(seg, offset);
            let size = it.size();
            if !it.is_dead() {
                let key = it.key();
                let hash = hash_key(key);
                let loc = Location { seg, offset };
                let mut table = self.shard(hash).write();
                if let Some(found) = table.find_at(&self.arena, key, hash, loc) {
                    let now = self.clock.now();
                    let stale = !matches!(self.check(it, now), Lookup::Hit(()));
                    if stale || evict {
                        let fetched = it.is_fetched();
                        let c = &mut table.counters;
                        if stale {
                            c.reclaimed += 1;
                            c.expired_unfetched += u64::from(!fetched);
                        } else {
                            c.evictions += 1;
                            c.evicted_unfetched += u64::from(!fetched);
                        }
                        self.unlink(&mut table, &found);
                    }
                }
            }
            offset += size;
        }
    }

    /// One step of background expiry: walks the `cursor`-th sealed segment
    /// and unlinks its expired and flushed items. Returns false when there
    /// was nothing to walk.
    pub fn reclaim_step(&self, cursor: usize) -> bool {
        let Some(seg) = self.arena.claim_for_reclaim(cursor) else {
            return false;
        };
        self.walk_segment(seg, false);
        self.arena.unclaim(seg);
        true
    }

    /// Sealed segments, for pacing the reclaimer.
    pub fn sealed_segments(&self) -> usize {
        self.arena.sealed_count()
    }

    /// Writes a new item into a reserved slot.
    fn write_item(&self, slot: &Slot, key: &[u8], flags: u32, exptime: u32, parts: &[&[u8]]) {
        let vlen = parts.iter().map(|p| p.len()).sum();
        // SAFETY: the slot was just reserved for exactly item_size(key, vlen)
        // bytes and is owned by this thread until published.
        unsafe {
            slot.ptr
                .init(key, flags, exptime, self.clock.now(), vlen, parts)
        };
    }

    /// Publishes `slot` under `key`, replacing `old` if given. Caller holds
    /// the shard write lock. Returns the new CAS.
    fn link(
        &self,
        table: &mut Table,
        hash: u64,
        slot: &Slot,
        old: Option<&Found>,
        explicit_cas: u64,
    ) -> u64 {
        let cas = if explicit_cas != 0 && self.cfg.use_cas {
            explicit_cas
        } else {
            self.next_cas()
        };
        // SAFETY: the item is not yet published; we hold the shard lock.
        unsafe { slot.ptr.set_cas(cas) };
        let loc = Location {
            seg: slot.seg,
            offset: slot.offset,
        };
        match old {
            Some(f) => {
                table.replace(f, hash, loc);
                self.release_item(table, f.loc, f.item);
            }
            None => table.insert(&self.arena, hash, loc),
        }
        self.account_link(table, loc, slot.ptr);
        cas
    }

    /// Finds a live entry under a write lock, unlinking it if stale.
    fn find_live(&self, table: &mut Table, key: &[u8], hash: u64) -> Option<Found> {
        let found = table.find(&self.arena, key, hash)?;
        let now = self.clock.now();
        if matches!(self.check(found.item, now), Lookup::Hit(())) {
            Some(found)
        } else {
            self.unlink(table, &found);
            None
        }
    }

    /// set/add/replace/append/prepend/cas. `head` picks the write head
    /// (the worker index). Returns the status and the new CAS unique.
    pub fn store(&self, head: usize, w: &Write<'_>) -> (StoreStatus, u64) {
        let (status, cas, _) = self.store_sized(head, w);
        (status, cas)
    }

    /// As [`Store::store`], also returning the stored value's length (ms s:
    /// the new size after an append).
    pub fn store_sized(&self, head: usize, w: &Write<'_>) -> (StoreStatus, u64, usize) {
        let Write {
            mode,
            key,
            flags,
            exptime,
            value,
            cas,
            ..
        } = *w;
        if self.too_large(key.len(), flags, value.len()) {
            return (StoreStatus::TooLarge, 0, 0);
        }
        if matches!(mode, StoreMode::Append | StoreMode::Prepend) {
            let r = self.concat(head, w);
            if r.0 == StoreStatus::NotStored && r.2 == usize::MAX {
                if let Some(exptime) = w.vivify {
                    // ms N in append mode: the miss creates the item.
                    let add = Write {
                        mode: StoreMode::Add,
                        exptime,
                        cas: 0,
                        vivify: None,
                        ..*w
                    };
                    return self.store_sized(head, &add);
                }
            }
            return (r.0, r.1, if r.2 == usize::MAX { 0 } else { r.2 });
        }
        let hash = hash_key(key);
        let Some(slot) = self.reserve(head, item_size(key.len(), value.len())) else {
            if mode == StoreMode::Set {
                // memcached drops the old value rather than keep stale data.
                self.delete(key);
            }
            return (StoreStatus::OutOfMemory, 0, 0);
        };
        self.write_item(&slot, key, flags, exptime, &[value]);
        if w.key_binary {
            slot.ptr.set_state(item::STATE_KEY_BINARY);
        }
        let mut table = self.shard(hash).write();
        let old = self.find_live(&mut table, key, hash);
        let now = self.clock.now();
        let result = match (mode, &old) {
            (StoreMode::Add, Some(f)) => {
                if f.item.atime() < now.saturating_sub(ITEM_UPDATE_INTERVAL) {
                    f.item.set_atime(now);
                }
                (StoreStatus::NotStored, 0)
            }
            (StoreMode::Replace, None) => (StoreStatus::NotStored, 0),
            (StoreMode::Cas, None) => (StoreStatus::NotFound, 0),
            // A zero CAS never matches (so with -C every cas is EXISTS).
            (StoreMode::Cas, Some(f)) if cas == 0 || f.item.cas() != cas => {
                if w.stale_ok && cas != 0 && cas < f.item.cas() {
                    // memcached's CAS_STALE: store, keeping the old TTL,
                    // marked stale (and keeping a sent token).
                    slot.ptr.set_exptime(f.item.exptime());
                    slot.ptr.set_state(item::STATE_STALE);
                    if f.item.has_state(item::STATE_TOKEN_SENT) {
                        slot.ptr.set_state(item::STATE_TOKEN_SENT);
                    }
                    let new_cas = self.link(&mut table, hash, &slot, old.as_ref(), w.new_cas);
                    (StoreStatus::Stored, new_cas)
                } else {
                    (StoreStatus::Exists, 0)
                }
            }
            _ => {
                let new_cas = self.link(&mut table, hash, &slot, old.as_ref(), w.new_cas);
                (StoreStatus::Stored, new_cas)
            }
        };
        if result.0 != StoreStatus::Stored {
            slot.ptr.mark_dead();
        }
        drop(table);
        self.arena.finish_write(slot.seg);
        (result.0, result.1, value.len())
    }

    /// append/prepend: the new item is old value + data (or data + old).
    /// A miss is NotStored with size `usize::MAX`.
    fn concat(&self, head: usize, w: &Write<'_>) -> (StoreStatus, u64, usize) {
        let (mode, key, data, cas) = (w.mode, w.key, w.value, w.cas);
        let hash = hash_key(key);
        loop {
            let (old_loc, old_len, old_flags) = {
                let mut table = self.shard(hash).write();
                let Some(f) = self.find_live(&mut table, key, hash) else {
                    return (StoreStatus::NotStored, 0, usize::MAX);
                };
                if cas != 0 && f.item.cas() != cas {
                    return (StoreStatus::Exists, 0, 0);
                }
                (f.loc, f.item.value_len(), f.item.flags())
            };
            let total = old_len + data.len();
            if self.too_large(key.len(), old_flags, total) {
                return (StoreStatus::NotStored, 0, 0);
            }
            let Some(slot) = self.reserve(head, item_size(key.len(), total)) else {
                return (StoreStatus::OutOfMemory, 0, 0);
            };
            let mut table = self.shard(hash).write();
            let Some(old) = table
                .find_at(&self.arena, key, hash, old_loc)
                .filter(|f| matches!(self.check(f.item, self.clock.now()), Lookup::Hit(())))
            else {
                // Changed while we reserved: start over.
                slot.ptr.mark_dead();
                drop(table);
                self.arena.finish_write(slot.seg);
                continue;
            };
            let old_value = old.item.value();
            let parts: [&[u8]; 2] = if mode == StoreMode::Append {
                [old_value, data]
            } else {
                [data, old_value]
            };
            self.write_item(&slot, key, old.item.flags(), old.item.exptime(), &parts);
            if w.key_binary || old.item.has_state(item::STATE_KEY_BINARY) {
                slot.ptr.set_state(item::STATE_KEY_BINARY);
            }
            let new_cas = self.link(&mut table, hash, &slot, Some(&old), w.new_cas);
            drop(table);
            self.arena.finish_write(slot.seg);
            return (StoreStatus::Stored, new_cas, total);
        }
    }

    /// delete: true if a live item was removed.
    pub fn delete(&self, key: &[u8]) -> bool {
        let hash = hash_key(key);
        let mut table = self.shard(hash).write();
        match self.find_live(&mut table, key, hash) {
            Some(f) => {
                self.unlink(&mut table, &f);
                true
            }
            None => false,
        }
    }

    /// md: delete, or invalidate (mark stale), or empty the value, each
    /// optionally only if the CAS unique matches.
    pub fn meta_delete(&self, head: usize, key: &[u8], d: &MetaDelete) -> MetaDeleteResult {
        let hash = hash_key(key);
        // x needs an empty item written before the shard lock is taken.
        let slot = if d.remove_value {
            match self.reserve(head, item_size(key.len(), 0)) {
                Some(slot) => Some(slot),
                None => return MetaDeleteResult::NotFound,
            }
        } else {
            None
        };
        let mut table = self.shard(hash).write();
        let found = self.find_live(&mut table, key, hash);
        let result = match &found {
            None => MetaDeleteResult::NotFound,
            Some(f) if d.compare_cas.is_some_and(|c| c != f.item.cas()) => MetaDeleteResult::Exists,
            Some(f) => {
                if let Some(slot) = &slot {
                    let exptime = match (d.invalidate, d.exptime) {
                        (true, Some(e)) => e,
                        _ => f.item.exptime(),
                    };
                    self.write_item(slot, key, d.flags, exptime, &[]);
                    let keep =
                        item::STATE_KEY_BINARY | if d.invalidate { 0 } else { item::STATE_STALE };
                    let mut state = f.item.state() & keep;
                    if d.invalidate {
                        state |= item::STATE_STALE;
                    }
                    slot.ptr.set_state(state);
                    self.link(&mut table, hash, slot, Some(f), d.new_cas);
                    MetaDeleteResult::Kept
                } else if d.invalidate {
                    if let Some(e) = d.exptime {
                        f.item.set_exptime(e);
                    }
                    f.item.set_state(item::STATE_STALE);
                    f.item.clear_state(item::STATE_TOKEN_SENT);
                    let cas = if d.new_cas != 0 && self.cfg.use_cas {
                        d.new_cas
                    } else {
                        self.next_cas()
                    };
                    // SAFETY: we hold the shard write lock.
                    unsafe { f.item.set_cas(cas) };
                    MetaDeleteResult::Kept
                } else {
                    self.unlink(&mut table, f);
                    MetaDeleteResult::Deleted
                }
            }
        };
        if let Some(slot) = slot {
            if result != MetaDeleteResult::Kept {
                slot.ptr.mark_dead();
            }
            drop(table);
            self.arena.finish_write(slot.seg);
        }
        result
    }

    /// incr/decr with memcached's rules: 64-bit wrap on incr, clamp at 0 on
    /// decr, values of 1..=23 decimal bytes only, result written in place
    /// (space padded) when it fits.
    pub fn arith(&self, head: usize, key: &[u8], incr: bool, delta: u64) -> ArithResult {
        match self.meta_arith(head, key, incr, delta, &MetaArith::default()) {
            MetaArithResult::Done { value, .. } => ArithResult::Value(value),
            MetaArithResult::NotFound | MetaArithResult::Exists | MetaArithResult::NotStored => {
                ArithResult::NotFound
            }
            MetaArithResult::NonNumeric => ArithResult::NonNumeric,
            MetaArithResult::OutOfMemory => ArithResult::OutOfMemory,
        }
    }

    /// ma: incr/decr with a CAS check, an explicit new CAS, a TTL update
    /// and creation on a miss (memcached's `do_add_delta` plus the meta
    /// extras).
    pub fn meta_arith(
        &self,
        head: usize,
        key: &[u8],
        incr: bool,
        delta: u64,
        m: &MetaArith,
    ) -> MetaArithResult {
        let hash = hash_key(key);
        loop {
            let (value, new_len, old_loc, exptime) = {
                let mut table = self.shard(hash).write();
                let Some(f) = self.find_live(&mut table, key, hash) else {
                    drop(table);
                    return match m.vivify {
                        Some((initial, exptime)) => {
                            self.arith_create(head, key, initial, exptime, m)
                        }
                        None => MetaArithResult::NotFound,
                    };
                };
                let cur = f.item.value();
                // memcached's do_add_delta: an empty value, then the CAS,
                // then the number (a CAS mismatch wins over a value too
                // long to be a number).
                if cur.is_empty() {
                    return MetaArithResult::NonNumeric;
                }
                if m.compare_cas != 0 && f.item.cas() != m.compare_cas {
                    return MetaArithResult::Exists;
                }
                if cur.len() >= 24 {
                    return MetaArithResult::NonNumeric;
                }
                let digits = match memchr_nul(cur) {
                    Some(p) => &cur[..p],
                    None => cur,
                };
                let Some(n) = osmium_protocol::numbers::safe_strtoull(digits) else {
                    return MetaArithResult::NonNumeric;
                };
                let value = if incr {
                    n.wrapping_add(delta)
                } else {
                    n.saturating_sub(delta)
                };
                let mut buf = itoa::Buffer::new();
                let text = buf.format(value).as_bytes();
                let exptime = f.item.exptime();
                if text.len() <= cur.len() {
                    let cas = if m.new_cas != 0 && self.cfg.use_cas {
                        m.new_cas
                    } else {
                        self.next_cas()
                    };
                    // SAFETY: we hold the shard write lock.
                    unsafe {
                        f.item.set_cas(cas);
                        let v = f.item.value_mut();
                        v[..text.len()].copy_from_slice(text);
                        v[text.len()..].fill(b' ');
                    }
                    if let Some(e) = m.exptime {
                        f.item.set_exptime(e);
                    }
                    return MetaArithResult::Done {
                        value,
                        cas: if self.cfg.use_cas { cas } else { 0 },
                        exptime,
                        created: false,
                    };
                }
                (value, text.len(), f.loc, exptime)
            };
            // The result is longer: write a new item (no lock held while
            // reserving, which may evict).
            let Some(slot) = self.reserve(head, item_size(key.len(), new_len)) else {
                return MetaArithResult::OutOfMemory;
            };
            let mut table = self.shard(hash).write();
            let Some(old) = table.find_at(&self.arena, key, hash, old_loc) else {
                slot.ptr.mark_dead();
                drop(table);
                self.arena.finish_write(slot.seg);
                continue;
            };
            let mut buf = itoa::Buffer::new();
            let text = buf.format(value).as_bytes();
            if text.len() != new_len {
                slot.ptr.mark_dead();
                drop(table);
                self.arena.finish_write(slot.seg);
                continue;
            }
            self.write_item(&slot, key, old.item.flags(), old.item.exptime(), &[text]);
            let cas = self.link(&mut table, hash, &slot, Some(&old), m.new_cas);
            drop(table);
            self.arena.finish_write(slot.seg);
            return MetaArithResult::Done {
                value,
                cas: if self.cfg.use_cas { cas } else { 0 },
                exptime,
                created: false,
            };
        }
    }

    /// ma N on a miss: add the initial value.
    fn arith_create(
        &self,
        head: usize,
        key: &[u8],
        initial: u64,
        exptime: u32,
        m: &MetaArith,
    ) -> MetaArithResult {
        let mut buf = itoa::Buffer::new();
        let text = buf.format(initial).as_bytes();
        let w = Write {
            mode: StoreMode::Add,
            key,
            exptime,
            value: text,
            new_cas: m.new_cas,
            ..Write::default()
        };
        match self.store(head, &w) {
            (StoreStatus::Stored, cas) => MetaArithResult::Done {
                value: initial,
                cas,
                exptime: 0,
                created: true,
            },
            (StoreStatus::OutOfMemory, _) => MetaArithResult::OutOfMemory,
            _ => MetaArithResult::NotStored,
        }
    }

    /// flush_all [delay], as memcached's process_flush_all_command.
    pub fn flush_all(&self, delay: i32) {
        self.flush_all_after(i64::from(delay))
    }

    /// flush_all with a delay of any width (the binary protocol's is an
    /// unsigned 32-bit number): > 0 is a delay or a unix time, else now.
    pub fn flush_all_after(&self, delay: i64) {
        let now = self.clock.now();
        let new_oldest = if delay > 0 {
            self.clock.realtime(delay)
        } else {
            now
        };
        if self.cfg.use_cas {
            let oldest_live = new_oldest.wrapping_sub(1);
            self.oldest_live.store(oldest_live, Ordering::Relaxed);
            if oldest_live <= now {
                let cas = self.cas_id.fetch_add(1, Ordering::Relaxed) + 1;
                self.oldest_cas.store(cas, Ordering::Relaxed);
            }
        } else {
            self.oldest_live.store(new_oldest, Ordering::Relaxed);
        }
    }

    /// cache_memlimit: true if the new limit was applied.
    pub fn set_memory_limit(&self, bytes: usize) -> bool {
        if self.arena.set_limit(bytes) {
            self.limit_maxbytes.store(bytes as u64, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    pub fn stats(&self) -> StoreStats {
        let mut total = ShardCounters::default();
        let mut index_bytes = 0;
        for shard in self.shards.iter() {
            let t = shard.read();
            let c = t.counters;
            total.curr_items += c.curr_items;
            total.bytes += c.bytes;
            total.total_items += c.total_items;
            total.evictions += c.evictions;
            total.evicted_unfetched += c.evicted_unfetched;
            total.reclaimed += c.reclaimed;
            total.expired_unfetched += c.expired_unfetched;
            index_bytes += t.memory();
        }
        let (allocated, limit) = self.arena.usage();
        StoreStats {
            curr_items: total.curr_items,
            total_items: total.total_items,
            bytes: total.bytes,
            evictions: total.evictions,
            evicted_unfetched: total.evicted_unfetched,
            reclaimed: total.reclaimed,
            expired_unfetched: total.expired_unfetched,
            limit_maxbytes: self.limit_maxbytes.load(Ordering::Relaxed),
            segment_size: self.arena.segment_size() as u64,
            segments_allocated: allocated as u64,
            segments_limit: limit as u64,
            index_bytes: index_bytes as u64,
        }
    }

    /// Zeroes the resettable engine counters (`stats reset`).
    pub fn reset_stats(&self) {
        for shard in self.shards.iter() {
            let mut t = shard.write();
            let c = &mut t.counters;
            c.total_items = 0;
            c.evictions = 0;
            c.evicted_unfetched = 0;
            c.reclaimed = 0;
            c.expired_unfetched = 0;
        }
    }
}

fn memchr_nul(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == 0)
}

/// Segment size: 1 MiB, or the power of two that holds the largest item
/// when -I is larger.
///
/// Every item memcached accepts is smaller here than memcached's own
/// `ITEM_ntotal`, which -I bounds, so a segment of -I bytes holds any item.
pub fn segment_size_for(item_size_max: usize) -> usize {
    item_size_max.max(1 << 20).next_power_of_two()
}

#[cfg(test)]
mod tests;
