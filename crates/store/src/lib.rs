//! osmium-store: the cache engine — the "hash table" and "value store"
//! stages of the pipeline (seed 001).
//!
//! * [`arena`]: item memory, fixed-size segments bounded by `-m` in one
//!   mapping, appended to by write heads, in two FIFOs (S3-FIFO's small and
//!   main queues), reclaimed a whole segment at a time;
//! * [`index`]: the sharded hash index from key to `(SegmentId, offset)`;
//! * [`item`]: the item record layout (5-byte header);
//! * [`ghost`]: keys recently evicted from small;
//! * [`clock`]: memcached's relative clock and exptime rules;
//! * [`epoch`]: grace periods that let GETs read without locks.
//!
//! Locking: a GET takes no lock. It pins its thread ([`epoch`]), reads the
//! key's index shard optimistically (validated by the shard's version, a
//! sequence lock) and copies the value out; the pin keeps the item's
//! segment from being rewritten meanwhile. `get_many` also prefetches the
//! buckets and items of the keys ahead. Writes reserve space on their
//! worker's write head (no shard lock held), write the item, then take the
//! shard's write lock to apply the command's semantics and publish; a plain
//! SET of a present key publishes without it, swapping the entry under its
//! bucket's lock byte (`Table::swap_unlocked`). Eviction
//! and expiry walk a claimed segment and unlink (or copy) each item under
//! its own shard's write lock, so no lock is ever held over the whole cache;
//! an emptied segment is retired and rewritten only after the readers that
//! could still see it have unpinned.
//!
//! Semantics follow memcached 1.6: exptime conversion, lazy expiry on
//! access, incr/decr results space padded to the old length when shorter,
//! flush_all invalidating everything stored up to memcached's `oldest_live`
//! second. Every modification writes a new item, whose CAS unique comes
//! from its location (see `item`).

pub mod arena;
pub mod clock;
pub mod epoch;
pub mod ghost;
pub mod index;
pub mod item;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use arena::{Arena, Queue, Reserve, SegmentId, Slot};
use clock::{Clock, ITEM_UPDATE_INTERVAL};
use index::{hash_key, shard_of, AddrCodec, Found, Location, ShardCounters, Table, SHARDS};
use item::{ItemPtr, ItemView};

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

/// An item whose value is being received (see [`Store::begin_incoming`]):
/// reserved and written up to `filled` bytes of value, not yet published.
#[must_use = "an incoming item must be finished or abandoned"]
pub struct Incoming {
    slot: Slot,
    spec: item::ItemSpec,
    hash: u64,
    mode: StoreMode,
    cas: u64,
    filled: usize,
}

impl Incoming {
    /// The whole value has been written.
    pub fn is_filled(&self) -> bool {
        self.filled == self.spec.value_len
    }
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

/// Times a GET re-reads a shard that a writer is changing before it
/// waits for the shard's lock instead.
const OPTIMISTIC_TRIES: usize = 4;

/// Items a background walk (`reclaim_step`, `reclaim_expired_segments`)
/// visits between two yields of the CPU: about 50 µs of work. Walking a
/// whole segment in one go (a 1 MiB segment of small items is ~9,000 items,
/// ~1.7 ms) keeps a worker, or the clients, off the core the maintainer
/// shares with them for that long.
const WALK_ITEMS_PER_YIELD: usize = 256;

/// One index shard: its version, lock and table, on cache lines of its own
/// (the version, the lock word and the table's hot fields share the
/// first line, see `index::Table`).
///
/// The version is a sequence lock for lock-free GETs: even while no writer
/// holds the lock, odd while one does ([`ShardWrite`] bumps it on the way
/// in and out). A GET reads it, looks the key up without the lock, and
/// keeps what it read only if the version was even and is unchanged.
#[repr(C, align(128))]
struct Shard {
    version: AtomicU64,
    lock: RwLock<Table>,
}

impl Shard {
    fn new(codec: AddrCodec) -> Shard {
        Shard {
            version: AtomicU64::new(0),
            lock: RwLock::new(Table::new(codec)),
        }
    }

    /// The write lock, making the version odd until it is released.
    #[inline]
    fn write(&self) -> ShardWrite<'_> {
        let guard = self.lock.write();
        // SeqCst: the odd version is ordered before the holder's reads of
        // bucket lock bytes (`index::settle`), against the lock-then-read
        // of `Table::swap_unlocked`.
        self.version.fetch_add(1, Ordering::SeqCst);
        // The odd version is visible before anything the holder writes.
        fence(Ordering::Release);
        ShardWrite {
            guard,
            version: &self.version,
        }
    }

    #[inline]
    fn read(&self) -> RwLockReadGuard<'_, Table> {
        self.lock.read()
    }

    /// Looks `key` up without the lock (see `Table::find_unlocked`): Some
    /// when a consistent snapshot was read (and the answer), None when
    /// writers kept the shard busy. The caller is pinned.
    #[inline]
    fn find_optimistic(&self, arena: &Arena, key: &[u8], hash: u64) -> Option<Option<Found>> {
        for _ in 0..OPTIMISTIC_TRIES {
            let v = self.version.load(Ordering::Acquire);
            if v & 1 == 0 {
                // SAFETY: the table lives as long as the shard, and the
                // caller is pinned (it holds an epoch::Guard).
                let found = unsafe { Table::find_unlocked(self.lock.data_ptr(), arena, key, hash) };
                // The reads above happen before the version is re-read.
                fence(Ordering::Acquire);
                if self.version.load(Ordering::Relaxed) == v {
                    return Some(found);
                }
            }
            std::hint::spin_loop();
        }
        None
    }
}

/// A shard's write lock (derefs to its table); releasing it makes the
/// shard's version even again, then unlocks.
struct ShardWrite<'a> {
    guard: RwLockWriteGuard<'a, Table>,
    version: &'a AtomicU64,
}

impl Drop for ShardWrite<'_> {
    #[inline]
    fn drop(&mut self) {
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v + 1, Ordering::Release);
    }
}

impl std::ops::Deref for ShardWrite<'_> {
    type Target = Table;
    #[inline]
    fn deref(&self) -> &Table {
        &self.guard
    }
}

impl std::ops::DerefMut for ShardWrite<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.guard
    }
}

/// Counters of the SETs that replaced an entry without the shard lock
/// (`Table::swap_unlocked`), one line per write head; `stats` adds them to
/// the shards' counters.
#[repr(align(128))]
#[derive(Default)]
struct HeadCounters {
    /// Net change of `bytes` (wrapping: the new item's size minus the old).
    bytes: AtomicU64,
    total_items: AtomicU64,
}

pub struct Store {
    cfg: StoreConfig,
    /// Indexed by write head (modulo its length).
    head_counters: Box<[HeadCounters]>,
    clock: Clock,
    arena: Arena,
    shards: Box<[Shard]>,
    /// The write head of copies made outside a worker's own writes (touch
    /// and gat give no head).
    copy_head: usize,
    /// Keys recently evicted from the small queue.
    ghost: ghost::Ghost,
    /// Pending flushes of a flush_all (relative times, 0 = none): see
    /// `flush_all_after`.
    flush_at: [AtomicU32; 2],
    limit_maxbytes: AtomicU64,
    /// log2(segment size / item alignment): the bits of a location CAS
    /// below the segment sequence.
    cas_offset_bits: u32,
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
            head_counters: (0..heads).map(|_| HeadCounters::default()).collect(),
            copy_head: arena.copy_head(),
            ghost: ghost::Ghost::new(cfg.memory_limit / 96),
            cas_offset_bits: arena.segment_shift() - item::ALIGN.trailing_zeros(),
            arena,
            shards: (0..SHARDS).map(|_| Shard::new(codec)).collect(),
            clock: Clock::new(),
            flush_at: [AtomicU32::new(0), AtomicU32::new(0)],
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
            || item::ItemSpec {
                key_len,
                value_len,
                flags,
                exptime_field: true,
                cas: Some(0),
                ..Default::default()
            }
            .size()
                > self.arena.segment_size()
    }

    /// The CAS unique of the item at `loc` (see `item`): its stored one,
    /// else its location's. 0 with -C.
    #[inline]
    fn cas_of(&self, loc: Location, it: ItemPtr) -> u64 {
        if !self.cfg.use_cas {
            return 0;
        }
        it.stored_cas().unwrap_or_else(|| {
            let seq = self.arena.segment(loc.seg).seq.load(Ordering::Relaxed);
            (seq << self.cas_offset_bits) + (loc.offset / item::ALIGN) as u64 + 1
        })
    }

    /// An explicit CAS unique to store (meta E), if CAS is on.
    #[inline]
    fn explicit(&self, cas: u64) -> Option<u64> {
        (cas != 0 && self.cfg.use_cas).then_some(cas)
    }

    /// `now` as an access time of an item in `seg`.
    #[inline]
    fn atime_in(&self, seg: SegmentId, now: u32) -> u16 {
        let base = self.arena.segment(seg).base_time.load(Ordering::Relaxed);
        now.saturating_sub(base).min(u32::from(u16::MAX)) as u16
    }

    /// Runs a delayed flush_all whose time has come. Called at the start of
    /// every command (before anything is written) and by the maintainer.
    #[inline]
    fn flush_due(&self, now: u32) {
        for at in &self.flush_at {
            let t = at.load(Ordering::Relaxed);
            if t != 0
                && t <= now
                && at
                    .compare_exchange(t, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                self.arena.flush();
            }
        }
    }

    /// Classifies a found item: usable, expired or flushed.
    #[inline]
    fn check(&self, it: ItemPtr, loc: Location, now: u32) -> Lookup<()> {
        self.check_exptime(it.exptime(), loc, now)
    }

    /// `check` for an item whose expiry is known.
    #[inline]
    fn check_exptime(&self, e: u32, loc: Location, now: u32) -> Lookup<()> {
        let seg = self.arena.segment(loc.seg);
        if loc.offset < seg.flushed_below.load(Ordering::Relaxed) {
            return Lookup::Flushed;
        }
        if e != 0 && e <= now {
            Lookup::Expired
        } else {
            Lookup::Hit(())
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard {
        &self.shards[shard_of(hash)]
    }

    /// Unlinks a found entry; the caller holds the shard's write lock.
    fn unlink(&self, table: &mut Table, found: &Found) {
        table.remove(found);
        self.release_item(table, found.item);
    }

    fn release_item(&self, table: &mut Table, it: ItemPtr) {
        it.mark_dead();
        let size = it.size();
        table.counters.curr_items -= 1;
        // Wrapping: a shard's bytes can sink below zero when the item was
        // counted through a head (see HeadCounters); the sum is right.
        table.counters.bytes = table.counters.bytes.wrapping_sub(size as u64);
    }

    fn account_link(&self, table: &mut Table, it: ItemPtr, new: bool) {
        let size = it.size();
        table.counters.curr_items += 1;
        table.counters.total_items += u64::from(new);
        table.counters.bytes = table.counters.bytes.wrapping_add(size as u64);
    }

    /// After an unlocked check found `key` expired or flushed, unlink it if
    /// it is still the same item.
    fn unlink_stale(&self, key: &[u8], hash: u64, loc: Location) {
        let mut table = self.shard(hash).write();
        if let Some(f) = table.find_at(&self.arena, key, hash, loc) {
            let now = self.clock.now();
            if !matches!(self.check(f.item, f.loc, now), Lookup::Hit(())) {
                self.unlink(&mut table, &f);
            }
        }
    }

    #[inline]
    fn view<'a>(&self, loc: Location, it: ItemPtr) -> ItemView<'a> {
        self.view_with(loc, it, it.meta())
    }

    /// A view of an item whose header is decoded already.
    #[inline]
    fn view_with<'a>(&self, loc: Location, it: ItemPtr, meta: item::ItemMeta) -> ItemView<'a> {
        let seg = self.arena.segment(loc.seg);
        let cas = if !self.cfg.use_cas {
            0
        } else {
            meta.stored_cas.unwrap_or_else(|| {
                let seq = seg.seq.load(Ordering::Relaxed);
                (seq << self.cas_offset_bits) + (loc.offset / item::ALIGN) as u64 + 1
            })
        };
        ItemView {
            ptr: it,
            meta,
            cas,
            base_time: seg.base_time.load(Ordering::Relaxed),
            exptime: meta.exptime,
            lock_free: false,
            _lock: std::marker::PhantomData,
        }
    }

    /// Looks `key` up; on a hit runs `f` on the item (lock-free, pinned; or
    /// under the shard's lock). `touch` sets a new expiry (gat/gats/touch).
    /// `f` must not call back into the store.
    pub fn get<R>(
        &self,
        key: &[u8],
        touch: Option<u32>,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Lookup<R> {
        let hash = hash_key(key);
        let now = self.clock.now();
        self.flush_due(now);
        if let Some(exptime) = touch {
            return self.touched(self.copy_head, key, hash, exptime, true, |v, _| f(v));
        }
        self.lookup(key, hash, now, f)
    }

    /// Looks up several keys (a multi-key get), calling `f` for each in
    /// order with its item or its kind of miss, until `f` returns false.
    /// Overlaps the keys' memory accesses: while key `i` is served, the
    /// home bucket of key `i + 2 × AHEAD` and the item that key `i + AHEAD`
    /// probably points at are prefetched, so up to 2 × AHEAD cache misses
    /// are in flight instead of the one or two a lone lookup allows.
    pub fn get_many<'k, I>(
        &self,
        keys: I,
        mut f: impl FnMut(&'k [u8], Lookup<ItemView<'_>>) -> bool,
    ) where
        I: Iterator<Item = &'k [u8]> + Clone,
    {
        const AHEAD: usize = 4;
        const RING: usize = 4 * AHEAD;
        let now = self.clock.now();
        self.flush_due(now);
        // Hashes of the keys from i to i + 2 × AHEAD, by position mod RING.
        let mut hashes = [0u64; RING];
        let mut lead = keys.clone();
        let mut led = 0;
        for (i, key) in keys.enumerate() {
            while led <= i + 2 * AHEAD {
                let Some(k) = lead.next() else { break };
                hashes[led % RING] = self.prefetch_bucket(k);
                led += 1;
            }
            if i + AHEAD < led {
                self.prefetch_item(hashes[(i + AHEAD) % RING]);
            }
            let hash = hashes[i % RING];
            let go = match self.lookup(key, hash, now, |v| f(key, Lookup::Hit(v))) {
                Lookup::Hit(go) => go,
                Lookup::Miss => f(key, Lookup::Miss),
                Lookup::Expired => f(key, Lookup::Expired),
                Lookup::Flushed => f(key, Lookup::Flushed),
            };
            if !go {
                return;
            }
        }
    }

    /// Asks the CPU to fetch the home bucket of `key` (a hint for a lookup
    /// coming soon) and returns the key's hash, for [`Store::prefetch_item`]
    /// once the bucket has had time to arrive. The server calls it for the
    /// first request of every connection an event loop turn will serve.
    #[inline]
    pub fn prefetch_bucket(&self, key: &[u8]) -> u64 {
        let hash = hash_key(key);
        // SAFETY: the shard's table lives as long as the store.
        unsafe { Table::prefetch_bucket(self.shard(hash).lock.data_ptr(), hash) };
        hash
    }

    /// Asks the CPU to fetch the item that the first entry of `hash`'s home
    /// bucket with a matching tag points at (a guess read without a lock;
    /// nothing is dereferenced). Cheap once the bucket is cached.
    #[inline]
    pub fn prefetch_item(&self, hash: u64) {
        // SAFETY: the shard's table lives as long as the store.
        if let Some(loc) = unsafe { Table::guess_location(self.shard(hash).lock.data_ptr(), hash) }
        {
            self.arena.prefetch_item(loc.seg, loc.offset);
        }
    }

    /// Prefetches what a write of a key with this hash will lock and read
    /// in the index: its shard's first line and its home bucket.
    #[inline]
    fn prefetch_index(&self, hash: u64) {
        let shard = self.shard(hash);
        arena::prefetch(shard as *const Shard as *const u8);
        // SAFETY: the shard's table lives as long as the store.
        unsafe { Table::prefetch_bucket(shard.lock.data_ptr(), hash) };
    }

    /// A GET of `key` (whose hash is `hash`) at time `now`.
    #[inline]
    fn lookup<R>(
        &self,
        key: &[u8],
        hash: u64,
        now: u32,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Lookup<R> {
        let shard = self.shard(hash);
        // Lock-free first: pinned, so the item's memory is not reused
        // before `f` is done with it (see `epoch`).
        if let Some(pin) = epoch::pin() {
            if let Some(found) = shard.find_optimistic(&self.arena, key, hash) {
                let Some(found) = found else {
                    return Lookup::Miss;
                };
                return match self.serve(&found, now, true, f) {
                    Ok(r) => Lookup::Hit(r),
                    Err(stale) => {
                        // Never wait for a lock while pinned.
                        drop(pin);
                        self.unlink_stale(key, hash, found.loc);
                        stale.map_hit()
                    }
                };
            }
        }
        let table = shard.read();
        let Some(found) = table.find(&self.arena, key, hash) else {
            return Lookup::Miss;
        };
        match self.serve(&found, now, false, f) {
            Ok(r) => Lookup::Hit(r),
            Err(stale) => {
                drop(table);
                self.unlink_stale(key, hash, found.loc);
                stale.map_hit()
            }
        }
    }

    /// A GET's answer for a found item: runs `f` on it (counting the hit),
    /// or says it is expired or flushed. The caller holds the shard's lock
    /// or (`lock_free`) is pinned.
    #[inline]
    fn serve<R>(
        &self,
        found: &Found,
        now: u32,
        lock_free: bool,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<R, Lookup<()>> {
        match self.check_exptime(found.meta.exptime, found.loc, now) {
            Lookup::Hit(()) => {}
            stale => return Err(stale),
        }
        found.item.bump(self.atime_in(found.loc.seg, now));
        let mut view = self.view_with(found.loc, found.item, found.meta);
        view.lock_free = lock_free;
        Ok(f(view))
    }

    /// Finds a live entry under a write lock, unlinking it if expired or
    /// flushed (and saying which).
    fn find_checked(&self, table: &mut Table, key: &[u8], hash: u64) -> Result<Found, Lookup<()>> {
        let Some(found) = table.find(&self.arena, key, hash) else {
            return Err(Lookup::Miss);
        };
        match self.check(found.item, found.loc, self.clock.now()) {
            Lookup::Hit(()) => Ok(found),
            stale => {
                self.unlink(table, &found);
                Err(stale)
            }
        }
    }

    /// Finds a live entry under a write lock, unlinking it if stale.
    fn find_live(&self, table: &mut Table, key: &[u8], hash: u64) -> Option<Found> {
        self.find_checked(table, key, hash).ok()
    }

    /// A hit that sets a new expiry: in place when the item has an expiry
    /// field, else by replacing it with a copy that has one (keeping its
    /// CAS unique). Runs `f` under the write lock on the (possibly new)
    /// item, whose view still shows the expiry from before, and whether
    /// it was hit (bumped) if `bump`.
    fn touched<R>(
        &self,
        head: usize,
        key: &[u8],
        hash: u64,
        exptime: u32,
        bump: bool,
        f: impl FnOnce(ItemView<'_>, bool) -> R,
    ) -> Lookup<R> {
        loop {
            let mut table = self.shard(hash).write();
            let found = match self.find_checked(&mut table, key, hash) {
                Ok(found) => found,
                Err(missed) => return missed.map_hit(),
            };
            let it = found.item;
            if it.has_exptime_field() || exptime == 0 {
                let view = self.view(found.loc, it);
                if it.has_exptime_field() {
                    // SAFETY: we hold the shard write lock.
                    unsafe { it.set_exptime(exptime) };
                    self.arena.segment(found.loc.seg).note_expiry(exptime);
                }
                let r = f(view, false);
                if bump {
                    it.bump(self.atime_in(found.loc.seg, self.clock.now()));
                }
                return Lookup::Hit(r);
            }
            // Copy it with an expiry field, keeping its CAS unique.
            let spec = item::ItemSpec {
                exptime,
                exptime_field: true,
                cas: self.explicit(self.cas_of(found.loc, it)),
                ..it.spec()
            };
            let old_loc = found.loc;
            drop(table);
            let Some(slot) = self.reserve(head, spec.size()) else {
                return Lookup::Miss;
            };
            let Some((mut table, old)) = self.relock_at(key, hash, old_loc) else {
                // Changed while we reserved: start over.
                self.abandon(slot);
                continue;
            };
            let view_before = self.view(old.loc, old.item);
            self.write_item(&slot, &spec, key, &[old.item.value()], old.item.state());
            slot.ptr
                .set_atime(self.atime_in(slot.seg, self.base_atime(old.loc, old.item)));
            self.link_counted(&mut table, hash, &slot, Some(&old), false);
            let r = f(
                ItemView {
                    ptr: slot.ptr,
                    meta: slot.ptr.meta(),
                    ..view_before
                },
                false,
            );
            if bump {
                slot.ptr.bump(self.atime_in(slot.seg, self.clock.now()));
            }
            drop(table);
            self.arena.finish_write(slot.seg);
            return Lookup::Hit(r);
        }
    }

    /// The absolute access time of an item.
    fn base_atime(&self, loc: Location, it: ItemPtr) -> u32 {
        self.arena
            .segment(loc.seg)
            .base_time
            .load(Ordering::Relaxed)
            + u32::from(it.atime())
    }

    /// Drops a reserved slot that will not be published (after the shard
    /// lock it was checked under is released).
    fn abandon(&self, slot: Slot) {
        slot.ptr.mark_dead();
        self.arena.finish_write(slot.seg);
    }

    /// Takes `key`'s shard write lock again after a gap (a reservation) and
    /// returns it with the entry, if that is still the live item at `loc`.
    fn relock_at(&self, key: &[u8], hash: u64, loc: Location) -> Option<(ShardWrite<'_>, Found)> {
        let table = self.shard(hash).write();
        let found = table
            .find_at(&self.arena, key, hash, loc)
            .filter(|f| matches!(self.check(f.item, f.loc, self.clock.now()), Lookup::Hit(())))?;
        Some((table, found))
    }

    /// mg: looks `key` up and runs `f` on the item *before* the hit is
    /// recorded (so `h`/`l` see the previous state): lock-free and pinned
    /// as a GET (`ItemView::lock_free`), else under the shard's lock;
    /// `f` also gets whether the item was just created. With `vivify`, a
    /// miss creates an empty item (mg N). `bump` records the hit (not u).
    /// `touch` sets a new expiry (mg T); the view shows the one before.
    pub fn meta_get<R>(
        &self,
        head: usize,
        key: &[u8],
        bump: bool,
        touch: Option<u32>,
        vivify: Option<&Vivify>,
        f: impl FnOnce(ItemView<'_>, bool) -> R,
    ) -> Lookup<R> {
        let hash = hash_key(key);
        let now = self.clock.now();
        self.flush_due(now);
        let mut f = Some(f);
        let missed = if let Some(exptime) = touch {
            let lane = self.arena.head(head, Queue::Main);
            let r = self.touched(lane, key, hash, exptime, bump, |v, c| {
                (f.take().expect("called once"))(v, c)
            });
            match r {
                Lookup::Hit(r) => return Lookup::Hit(r),
                Lookup::Miss => Lookup::Miss,
                Lookup::Expired => Lookup::Expired,
                Lookup::Flushed => Lookup::Flushed,
            }
        } else {
            // As a GET: lock-free (pinned) first, else under the read lock;
            // `f` sees the item before the hit is recorded either way.
            let shard = self.shard(hash);
            let mut pin = epoch::pin();
            let optimistic = pin
                .as_ref()
                .and_then(|_| shard.find_optimistic(&self.arena, key, hash));
            let table = if optimistic.is_none() {
                // Never wait for a lock while pinned (an evictor holding
                // it may be waiting for the pin).
                pin = None;
                Some(shard.read())
            } else {
                None
            };
            let found = match (&table, optimistic) {
                (_, Some(found)) => found,
                (Some(table), None) => table.find(&self.arena, key, hash),
                (None, None) => None,
            };
            match found {
                None => Lookup::Miss,
                Some(found) => match self.check_exptime(found.meta.exptime, found.loc, now) {
                    Lookup::Hit(()) => {
                        let mut view = self.view_with(found.loc, found.item, found.meta);
                        view.lock_free = table.is_none();
                        let r = (f.take().expect("called once"))(view, false);
                        if bump {
                            found.item.bump(self.atime_in(found.loc.seg, now));
                        }
                        return Lookup::Hit(r);
                    }
                    stale => {
                        // Never wait for a lock while pinned.
                        drop(table);
                        drop(pin);
                        self.unlink_stale(key, hash, found.loc);
                        stale.map_hit()
                    }
                },
            }
        };
        let Some(v) = vivify else {
            return missed;
        };
        let spec = item::ItemSpec {
            key_len: key.len(),
            exptime: v.exptime,
            cas: self.explicit(v.cas),
            ..Default::default()
        };
        let Some(slot) = self.reserve(self.new_item_head(head, hash), spec.size()) else {
            return missed;
        };
        let state = if v.key_binary {
            item::STATE_KEY_BINARY
        } else {
            0
        };
        let mut table = self.shard(hash).write();
        // Written under the lock: a racing vivify may have won.
        let (loc, it, created) = match self.find_live(&mut table, key, hash) {
            Some(existing) => {
                slot.ptr.mark_dead();
                (existing.loc, existing.item, false)
            }
            None => {
                self.write_item(&slot, &spec, key, &[], state);
                (self.link(&mut table, hash, &slot, None), slot.ptr, true)
            }
        };
        let r = (f.take().expect("called once"))(self.view(loc, it), created);
        if bump {
            it.bump(self.atime_in(loc.seg, self.clock.now()));
        }
        drop(table);
        self.arena.finish_write(slot.seg);
        Lookup::Hit(r)
    }

    /// touch: sets a new expiry. Returns whether the key was live.
    pub fn touch(&self, key: &[u8], exptime: u32) -> Lookup<()> {
        self.get(key, Some(exptime), |_| ())
    }

    /// Worker `worker`'s write head for a new item: main if the key was
    /// evicted from small recently (it is in the ghost), else small.
    #[inline]
    fn new_item_head(&self, worker: usize, hash: u64) -> usize {
        let queue = if self.ghost.take(hash) {
            Queue::Main
        } else {
            Queue::Small
        };
        self.arena.head(worker, queue)
    }

    /// Worker `worker`'s write head for a new version of a found item: main
    /// if the item is in main or was hit, else small.
    #[inline]
    fn update_head(&self, worker: usize, f: &Found) -> usize {
        let queue = if self.arena.queue(f.loc.seg) == Queue::Main || f.item.freq() > 0 {
            Queue::Main
        } else {
            Queue::Small
        };
        self.arena.head(worker, queue)
    }

    /// Reserves item space on arena head `head`, evicting as needed. No
    /// shard lock may be held.
    fn reserve(&self, head: usize, size: usize) -> Option<Slot> {
        let mut busy = 0;
        loop {
            match self.arena.reserve(head, size, self.clock.now()) {
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

    /// Empties a segment claimed for eviction (S3-FIFO, see `arena`):
    /// expired and flushed items are reclaimed; items hit since they were
    /// written (or last kept) are copied to main, with their frequency
    /// reset (from small) or decremented (from main); the rest are evicted,
    /// and keys evicted from small are remembered in the ghost.
    fn evict_segment(&self, seg: SegmentId) {
        self.walk_segment(seg, true);
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
                    let now = self.clock.now();
                    let stale = !matches!(self.check(it, loc, now), Lookup::Hit(()));
                    let fetched = it.is_fetched();
                    if stale {
                        let c = &mut table.counters;
                        c.reclaimed += 1;
                        c.expired_unfetched += u64::from(!fetched);
                        self.unlink(&mut table, &found);
                    } else if !evict {
                        live += 1;
                    } else {
                        let freq = it.freq();
                        if freq == 0 || !self.keep(&mut table, hash, &found, queue, now) {
                            let c = &mut table.counters;
                            c.evictions += 1;
                            c.evicted_unfetched += u64::from(!fetched);
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

    /// Copies an item the evictor keeps into main (keeping its CAS unique
    /// and access time). False if there was no room (it is then evicted).
    fn keep(&self, table: &mut Table, hash: u64, found: &Found, from: Queue, now: u32) -> bool {
        let it = found.item;
        let spec = item::ItemSpec {
            cas: self.explicit(self.cas_of(found.loc, it)),
            ..it.spec()
        };
        let Some(slot) = self.arena.reserve_evictor(spec.size(), now) else {
            return false;
        };
        self.write_item(&slot, &spec, it.key(), &[it.value()], it.state());
        slot.ptr
            .set_atime(self.atime_in(slot.seg, self.base_atime(found.loc, it)));
        if from == Queue::Main {
            slot.ptr.set_freq(it.freq() - 1);
        }
        self.link_counted(table, hash, &slot, Some(found), false);
        self.arena.finish_write(slot.seg);
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

    /// Writes a new item into a reserved slot, accessed now.
    fn write_item(
        &self,
        slot: &Slot,
        spec: &item::ItemSpec,
        key: &[u8],
        parts: &[&[u8]],
        state: u8,
    ) {
        let atime = self.atime_in(slot.seg, self.clock.now());
        self.arena.segment(slot.seg).note_expiry(spec.exptime);
        // SAFETY: the slot was reserved for at least spec.size() bytes and
        // is owned by this thread until published.
        unsafe { slot.ptr.init(spec, key, parts, atime, state) };
    }

    /// Publishes `slot` under `key`, replacing `old` if given. Caller holds
    /// the shard write lock. Returns the new item's location.
    fn link(&self, table: &mut Table, hash: u64, slot: &Slot, old: Option<&Found>) -> Location {
        self.link_counted(table, hash, slot, old, true)
    }

    /// As `link`; `new` is false for a copy that stands for an update
    /// memcached makes in place (not counted in total_items).
    fn link_counted(
        &self,
        table: &mut Table,
        hash: u64,
        slot: &Slot,
        old: Option<&Found>,
        new: bool,
    ) -> Location {
        let loc = Location {
            seg: slot.seg,
            offset: slot.offset,
        };
        match old {
            Some(f) => {
                table.replace(f, hash, loc);
                self.release_item(table, f.item);
            }
            None => table.insert(&self.arena, hash, loc),
        }
        self.account_link(table, slot.ptr, new);
        loc
    }

    /// Does publishing `slot` in place of `old` need a stored CAS unique?
    /// Location uniques grow with the segment sequence, but two write heads
    /// fill segments side by side, so a new version written through one
    /// head can sit in an older segment than the version it replaces. A
    /// key's uniques must grow (ms `I` compares them), so such a version is
    /// written again with the unique `old + 1` stored. None if no conflict
    /// (or the slot stores its unique already, or CAS is off).
    fn cas_conflict(&self, slot: &Slot, stored: bool, old: Option<&Found>) -> Option<u64> {
        let old = old?;
        if stored || !self.cfg.use_cas {
            return None;
        }
        let old_cas = self.cas_of(old.loc, old.item);
        (self.slot_cas(slot) <= old_cas).then(|| old_cas.wrapping_add(1))
    }

    /// The CAS unique a slot's item gets once linked.
    #[inline]
    fn slot_cas(&self, slot: &Slot) -> u64 {
        self.cas_of(
            Location {
                seg: slot.seg,
                offset: slot.offset,
            },
            slot.ptr,
        )
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
            ..
        } = *w;
        if self.too_large(key.len(), flags, value.len()) {
            return (StoreStatus::TooLarge, 0, 0);
        }
        let now = self.clock.now();
        self.flush_due(now);
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
        // Start fetching the shard's lock line and the key's home bucket
        // now: they arrive while the item is written.
        self.prefetch_index(hash);
        let spec = item::ItemSpec {
            key_len: key.len(),
            value_len: value.len(),
            flags,
            exptime,
            // A stale-ok CAS may keep the old item's expiry.
            exptime_field: w.stale_ok,
            cas: self.explicit(w.new_cas),
        };
        let Some(slot) = self.reserve(self.new_item_head(head, hash), spec.size()) else {
            return self.out_of_memory(w);
        };
        self.write_item(&slot, &spec, key, &[value], Self::new_state(w));
        let (status, cas) = self.publish(head, w, hash, slot, spec);
        (status, cas, value.len())
    }

    /// The state bits a new item written by `w` starts with.
    fn new_state(w: &Write<'_>) -> u8 {
        if w.key_binary {
            item::STATE_KEY_BINARY
        } else {
            0
        }
    }

    /// No room for `w`'s item.
    fn out_of_memory(&self, w: &Write<'_>) -> (StoreStatus, u64, usize) {
        if w.mode == StoreMode::Set {
            // memcached drops the old value rather than keep stale data.
            self.delete(w.key);
        }
        (StoreStatus::OutOfMemory, 0, 0)
    }

    /// Publishes the complete item in `slot` (written from `spec`) as `w`
    /// asks (set/add/replace/cas: `w.value` is not used), or marks it dead
    /// when `w`'s condition fails; releases the slot either way. A CAS
    /// conflict (see `cas_conflict`) rewrites the item with the unique it
    /// must have into a new slot.
    fn publish(
        &self,
        head: usize,
        w: &Write<'_>,
        hash: u64,
        mut slot: Slot,
        mut spec: item::ItemSpec,
    ) -> (StoreStatus, u64) {
        let Write { mode, key, cas, .. } = *w;
        loop {
            if mode == StoreMode::Set && spec.cas.is_none() && self.swap(head, key, hash, &slot) {
                self.arena.finish_write(slot.seg);
                return (StoreStatus::Stored, self.slot_cas(&slot));
            }
            let mut table = self.shard(hash).write();
            let old = self.find_live(&mut table, key, hash);
            let now = self.clock.now();
            let links = match (mode, &old) {
                (StoreMode::Add, Some(_)) | (StoreMode::Replace, None) | (StoreMode::Cas, None) => {
                    false
                }
                (StoreMode::Cas, Some(f)) if cas == 0 || self.cas_of(f.loc, f.item) != cas => {
                    w.stale_ok && cas != 0 && cas < self.cas_of(f.loc, f.item)
                }
                _ => true,
            };
            if links {
                if let Some(c) = self.cas_conflict(&slot, spec.cas.is_some(), old.as_ref()) {
                    drop(table);
                    spec.cas = self.explicit(w.new_cas).or(Some(c));
                    let Some(next) = self.reserve(self.new_item_head(head, hash), spec.size())
                    else {
                        self.abandon(slot);
                        let (status, cas, _) = self.out_of_memory(w);
                        return (status, cas);
                    };
                    self.write_item(&next, &spec, key, &[slot.ptr.value()], Self::new_state(w));
                    self.abandon(slot);
                    slot = next;
                    continue;
                }
            }
            let result = match (mode, &old) {
                (StoreMode::Add, Some(f)) => {
                    let atime = self.base_atime(f.loc, f.item);
                    if atime < now.saturating_sub(ITEM_UPDATE_INTERVAL) {
                        f.item.set_atime(self.atime_in(f.loc.seg, now));
                    }
                    (StoreStatus::NotStored, 0)
                }
                (StoreMode::Replace, None) => (StoreStatus::NotStored, 0),
                (StoreMode::Cas, None) => (StoreStatus::NotFound, 0),
                // A zero CAS never matches (so with -C every cas is EXISTS).
                (StoreMode::Cas, Some(f)) if cas == 0 || self.cas_of(f.loc, f.item) != cas => {
                    if links {
                        // memcached's CAS_STALE: store, keeping the old TTL,
                        // marked stale (and keeping a sent token).
                        // SAFETY: the slot is ours until published.
                        unsafe { slot.ptr.set_exptime(f.item.exptime()) };
                        slot.ptr.set_state(item::STATE_STALE);
                        if f.item.has_state(item::STATE_TOKEN_SENT) {
                            slot.ptr.set_state(item::STATE_TOKEN_SENT);
                        }
                        self.link(&mut table, hash, &slot, old.as_ref());
                        (StoreStatus::Stored, self.slot_cas(&slot))
                    } else {
                        (StoreStatus::Exists, 0)
                    }
                }
                _ => {
                    self.link(&mut table, hash, &slot, old.as_ref());
                    (StoreStatus::Stored, self.slot_cas(&slot))
                }
            };
            if result.0 != StoreStatus::Stored {
                slot.ptr.mark_dead();
            }
            drop(table);
            self.arena.finish_write(slot.seg);
            return result;
        }
    }

    /// Starts a set/add/replace/cas whose value arrives in pieces (a large
    /// value read from the network straight into item memory, as memcached
    /// reads into its item): checks the size, reserves the item, writes
    /// its header, key and the first `w.value.len()` bytes of its
    /// `value_len`-byte value. The caller fills the rest (`incoming_space`,
    /// `incoming_filled`), then publishes it (`finish_incoming`) or gives it
    /// up (`abandon_incoming`), and must do one of the two: until then the
    /// item's segment cannot be evicted. Not for append/prepend, or ms
    /// with I, E, b or N (their writes need the old item first).
    pub fn begin_incoming(
        &self,
        head: usize,
        w: &Write<'_>,
        value_len: usize,
    ) -> Result<Incoming, StoreStatus> {
        debug_assert!(matches!(
            w.mode,
            StoreMode::Set | StoreMode::Add | StoreMode::Replace | StoreMode::Cas
        ));
        debug_assert!(!w.stale_ok && w.new_cas == 0 && !w.key_binary && w.vivify.is_none());
        debug_assert!(w.value.len() <= value_len);
        if self.too_large(w.key.len(), w.flags, value_len) {
            return Err(StoreStatus::TooLarge);
        }
        self.flush_due(self.clock.now());
        let hash = hash_key(w.key);
        let spec = item::ItemSpec {
            key_len: w.key.len(),
            value_len,
            flags: w.flags,
            exptime: w.exptime,
            exptime_field: false,
            cas: None,
        };
        let Some(slot) = self.reserve(self.new_item_head(head, hash), spec.size()) else {
            return Err(self.out_of_memory(w).0);
        };
        self.write_item(&slot, &spec, w.key, &[w.value], 0);
        Ok(Incoming {
            slot,
            spec,
            hash,
            mode: w.mode,
            cas: w.cas,
            filled: w.value.len(),
        })
    }

    /// The part of an incoming item's value not yet filled.
    pub fn incoming_space<'a>(&'a self, incoming: &'a mut Incoming) -> &'a mut [u8] {
        let value = incoming.slot.ptr.value_ptr();
        // SAFETY: the slot was reserved for the whole item and stays owned
        // by `incoming` (not published, so no reader can reach it, and its
        // segment cannot be evicted while the write is pending); the value
        // is `spec.value_len` bytes from `value_ptr`, of which the first
        // `filled` are written. The arena outlives `&self`.
        unsafe {
            std::slice::from_raw_parts_mut(
                value.add(incoming.filled),
                incoming.spec.value_len - incoming.filled,
            )
        }
    }

    /// Records that `n` more bytes of an incoming value were written into
    /// `incoming_space`.
    pub fn incoming_filled(&self, incoming: &mut Incoming, n: usize) {
        incoming.filled = (incoming.filled + n).min(incoming.spec.value_len);
    }

    /// Publishes a filled incoming item (see `begin_incoming`).
    pub fn finish_incoming(&self, head: usize, incoming: Incoming) -> (StoreStatus, u64) {
        debug_assert!(incoming.is_filled());
        let key = incoming.slot.ptr.key();
        let w = Write {
            mode: incoming.mode,
            key,
            flags: incoming.spec.flags,
            exptime: incoming.spec.exptime,
            cas: incoming.cas,
            ..Write::default()
        };
        self.publish(head, &w, incoming.hash, incoming.slot, incoming.spec)
    }

    /// Gives up an incoming item (bad data, a closed connection).
    pub fn abandon_incoming(&self, incoming: Incoming) {
        self.abandon(incoming.slot);
    }

    /// A plain SET's fast path: publishes `slot` in place of the live item
    /// of `key` without the shard's lock (see `Table::swap_unlocked`), if
    /// the key is present, live, and its CAS unique below the new one.
    /// False if it changed nothing: the caller takes the locked path.
    #[inline]
    fn swap(&self, head: usize, key: &[u8], hash: u64, slot: &Slot) -> bool {
        let Some(_pin) = epoch::pin() else {
            return false;
        };
        let shard = self.shard(hash);
        let loc = Location {
            seg: slot.seg,
            offset: slot.offset,
        };
        let now = self.clock.now();
        let accept = |f: &Found| {
            matches!(
                self.check_exptime(f.meta.exptime, f.loc, now),
                Lookup::Hit(())
            ) && (!self.cfg.use_cas || self.slot_cas(slot) > self.cas_of(f.loc, f.item))
        };
        // SAFETY: the shard's table lives as long as the store, its version
        // is the shard's, and this thread is pinned.
        let Some(old) = (unsafe {
            Table::swap_unlocked(
                shard.lock.data_ptr(),
                &shard.version,
                &self.arena,
                key,
                hash,
                loc,
                accept,
            )
        }) else {
            return false;
        };
        // Still pinned: the old item's memory is not reused yet.
        old.item.mark_dead();
        let c = &self.head_counters[head % self.head_counters.len()];
        let delta = (slot.ptr.size() as u64).wrapping_sub(old.item.size() as u64);
        c.bytes.fetch_add(delta, Ordering::Relaxed);
        c.total_items.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// append/prepend: the new item is old value + data (or data + old).
    /// A miss is NotStored with size `usize::MAX`.
    fn concat(&self, head: usize, w: &Write<'_>) -> (StoreStatus, u64, usize) {
        let (mode, key, data, cas) = (w.mode, w.key, w.value, w.cas);
        let hash = hash_key(key);
        let mut forced = None;
        loop {
            let (old_loc, spec, lane) = {
                let mut table = self.shard(hash).write();
                let Some(f) = self.find_live(&mut table, key, hash) else {
                    return (StoreStatus::NotStored, 0, usize::MAX);
                };
                if cas != 0 && self.cas_of(f.loc, f.item) != cas {
                    return (StoreStatus::Exists, 0, 0);
                }
                let old = f.item.spec();
                let spec = item::ItemSpec {
                    value_len: old.value_len + data.len(),
                    cas: self.explicit(w.new_cas).or(forced),
                    ..old
                };
                (f.loc, spec, self.update_head(head, &f))
            };
            if self.too_large(key.len(), spec.flags, spec.value_len) {
                return (StoreStatus::NotStored, 0, 0);
            }
            let Some(slot) = self.reserve(lane, spec.size()) else {
                return (StoreStatus::OutOfMemory, 0, 0);
            };
            let Some((mut table, old)) = self.relock_at(key, hash, old_loc) else {
                // Changed while we reserved: start over.
                self.abandon(slot);
                continue;
            };
            // The expiry may have been touched in place meanwhile.
            let spec = item::ItemSpec {
                exptime: old.item.exptime(),
                ..spec
            };
            let old_value = old.item.value();
            let parts: [&[u8]; 2] = if mode == StoreMode::Append {
                [old_value, data]
            } else {
                [data, old_value]
            };
            let binary = w.key_binary || old.item.has_state(item::STATE_KEY_BINARY);
            let state = if binary { item::STATE_KEY_BINARY } else { 0 };
            self.write_item(&slot, &spec, key, &parts, state);
            if let Some(c) = self.cas_conflict(&slot, spec.cas.is_some(), Some(&old)) {
                forced = Some(c);
                drop(table);
                self.abandon(slot);
                continue;
            }
            self.link(&mut table, hash, &slot, Some(&old));
            let new_cas = self.slot_cas(&slot);
            drop(table);
            self.arena.finish_write(slot.seg);
            return (StoreStatus::Stored, new_cas, spec.value_len);
        }
    }

    /// delete: true if a live item was removed.
    pub fn delete(&self, key: &[u8]) -> bool {
        let hash = hash_key(key);
        self.flush_due(self.clock.now());
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
    /// optionally only if the CAS unique matches. Invalidating and
    /// emptying replace the item with a copy (it gets a new CAS unique).
    pub fn meta_delete(&self, head: usize, key: &[u8], d: &MetaDelete) -> MetaDeleteResult {
        let hash = hash_key(key);
        self.flush_due(self.clock.now());
        let mut forced = None;
        loop {
            let mut table = self.shard(hash).write();
            let Some(f) = self.find_live(&mut table, key, hash) else {
                return MetaDeleteResult::NotFound;
            };
            if d.compare_cas
                .is_some_and(|c| c != self.cas_of(f.loc, f.item))
            {
                return MetaDeleteResult::Exists;
            }
            if !d.remove_value && !d.invalidate {
                self.unlink(&mut table, &f);
                return MetaDeleteResult::Deleted;
            }
            let old = f.item.spec();
            let exptime = match (d.invalidate, d.exptime) {
                (true, Some(e)) => e,
                _ => old.exptime,
            };
            let spec = if d.remove_value {
                item::ItemSpec {
                    key_len: key.len(),
                    value_len: 0,
                    flags: d.flags,
                    exptime,
                    exptime_field: old.exptime_field,
                    cas: self.explicit(d.new_cas).or(forced),
                }
            } else {
                item::ItemSpec {
                    exptime,
                    exptime_field: old.exptime_field,
                    cas: self.explicit(d.new_cas).or(forced),
                    ..old
                }
            };
            let old_loc = f.loc;
            let lane = self.update_head(head, &f);
            drop(table);
            let Some(slot) = self.reserve(lane, spec.size()) else {
                return MetaDeleteResult::NotFound;
            };
            let Some((mut table, f)) = self.relock_at(key, hash, old_loc) else {
                // Changed while we reserved: start over.
                self.abandon(slot);
                continue;
            };
            let spec = if d.invalidate && d.exptime.is_some() {
                spec
            } else {
                item::ItemSpec {
                    exptime: f.item.exptime(),
                    ..spec
                }
            };
            let old_state = f.item.state();
            let state = if d.remove_value {
                let keep =
                    item::STATE_KEY_BINARY | if d.invalidate { 0 } else { item::STATE_STALE };
                (old_state & keep) | if d.invalidate { item::STATE_STALE } else { 0 }
            } else {
                (old_state & !item::STATE_TOKEN_SENT) | item::STATE_STALE
            };
            let value: &[u8] = if d.remove_value { &[] } else { f.item.value() };
            self.write_item(&slot, &spec, key, &[value], state);
            slot.ptr
                .set_atime(self.atime_in(slot.seg, self.base_atime(f.loc, f.item)));
            // md I is in place in memcached, md x a new item.
            if let Some(c) = self.cas_conflict(&slot, spec.cas.is_some(), Some(&f)) {
                forced = Some(c);
                drop(table);
                self.abandon(slot);
                continue;
            }
            self.link_counted(&mut table, hash, &slot, Some(&f), d.remove_value);
            drop(table);
            self.arena.finish_write(slot.seg);
            return MetaDeleteResult::Kept;
        }
    }

    /// incr/decr with memcached's rules: 64-bit wrap on incr, clamp at 0 on
    /// decr, values of 1..=23 decimal bytes only; a shorter result is space
    /// padded to the old length, as memcached's in-place update.
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
    /// extras). The result is always a new item (a new CAS unique).
    pub fn meta_arith(
        &self,
        head: usize,
        key: &[u8],
        incr: bool,
        delta: u64,
        m: &MetaArith,
    ) -> MetaArithResult {
        let hash = hash_key(key);
        self.flush_due(self.clock.now());
        let mut forced = None;
        loop {
            let (value, width, old_loc, spec, in_place, lane) = {
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
                if m.compare_cas != 0 && self.cas_of(f.loc, f.item) != m.compare_cas {
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
                let len = itoa::Buffer::new().format(value).len();
                // memcached updates in place (space padded) when the result
                // fits; that is also when ma's T applies.
                let in_place = len <= cur.len();
                let width = len.max(cur.len() * usize::from(in_place));
                let spec = item::ItemSpec {
                    value_len: width,
                    cas: self.explicit(m.new_cas).or(forced),
                    exptime_field: f.item.has_exptime_field() || (in_place && m.exptime.is_some()),
                    ..f.item.spec()
                };
                (
                    value,
                    width,
                    f.loc,
                    spec,
                    in_place,
                    self.update_head(head, &f),
                )
            };
            let Some(slot) = self.reserve(lane, spec.size()) else {
                return MetaArithResult::OutOfMemory;
            };
            let Some((mut table, old)) = self.relock_at(key, hash, old_loc) else {
                // Changed while we reserved: start over.
                self.abandon(slot);
                continue;
            };
            let exptime = old.item.exptime();
            let new_exptime = match m.exptime {
                Some(e) if in_place => e,
                _ => exptime,
            };
            let spec = item::ItemSpec {
                exptime: new_exptime,
                ..spec
            };
            let mut buf = itoa::Buffer::new();
            let text = buf.format(value).as_bytes();
            let pad = [b' '; 24];
            let parts: [&[u8]; 2] = [text, &pad[..width - text.len()]];
            // In place, memcached keeps the item's state; a new item has
            // none but its key's encoding.
            let state = old.item.state()
                & if in_place {
                    item::STATE_KEY_BINARY
                        | item::STATE_FETCHED
                        | item::STATE_STALE
                        | item::STATE_TOKEN_SENT
                } else {
                    item::STATE_KEY_BINARY
                };
            self.write_item(&slot, &spec, key, &parts, state);
            if let Some(c) = self.cas_conflict(&slot, spec.cas.is_some(), Some(&old)) {
                forced = Some(c);
                drop(table);
                self.abandon(slot);
                continue;
            }
            self.link_counted(&mut table, hash, &slot, Some(&old), !in_place);
            let cas = self.slot_cas(&slot);
            drop(table);
            self.arena.finish_write(slot.seg);
            return MetaArithResult::Done {
                value,
                cas,
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
    ///
    /// memcached invalidates items whose time is at or before its
    /// `oldest_live` (the deadline minus one with CAS on, the deadline with
    /// -C) from that second on. Here the arena marks every item written so
    /// far as flushed (see `Arena::flush`) at the start of that second and
    /// once more at the start of the next, which covers the items stored
    /// during it.
    pub fn flush_all_after(&self, delay: i64) {
        let now = self.clock.now();
        let new_oldest = if delay > 0 {
            self.clock.realtime(delay)
        } else {
            now
        };
        let oldest_live = if self.cfg.use_cas {
            new_oldest.wrapping_sub(1)
        } else {
            new_oldest
        };
        // memcached: an oldest_live of 0 (a unix time before the process
        // started) flushes nothing.
        let (first, second) = if oldest_live == 0 {
            (0, 0)
        } else if oldest_live > now {
            (oldest_live, oldest_live + 1)
        } else {
            self.arena.flush();
            (0, if oldest_live == now { now + 1 } else { 0 })
        };
        self.flush_at[0].store(first, Ordering::Relaxed);
        self.flush_at[1].store(second, Ordering::Relaxed);
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
            total.bytes = total.bytes.wrapping_add(c.bytes);
            total.total_items += c.total_items;
            total.evictions += c.evictions;
            total.evicted_unfetched += c.evicted_unfetched;
            total.reclaimed += c.reclaimed;
            total.expired_unfetched += c.expired_unfetched;
            index_bytes += t.memory();
        }
        for h in self.head_counters.iter() {
            total.bytes = total.bytes.wrapping_add(h.bytes.load(Ordering::Relaxed));
            total.total_items += h.total_items.load(Ordering::Relaxed);
        }
        let (allocated, limit) = self.arena.usage();
        StoreStats {
            curr_items: total.curr_items,
            total_items: total.total_items,
            // Shards and heads are read one after the other: a sum caught
            // between a swap and its count must not show as ~2^64.
            bytes: if (total.bytes as i64) < 0 {
                0
            } else {
                total.bytes
            },
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
        for h in self.head_counters.iter() {
            h.total_items.store(0, Ordering::Relaxed);
        }
    }
}

impl Lookup<()> {
    /// A miss of any kind, as a lookup with another hit type.
    fn map_hit<R>(self) -> Lookup<R> {
        match self {
            Lookup::Hit(()) | Lookup::Miss => Lookup::Miss,
            Lookup::Expired => Lookup::Expired,
            Lookup::Flushed => Lookup::Flushed,
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
