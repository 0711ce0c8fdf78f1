//! The engine's configuration and the arguments and results of its
//! operations: what callers of [`Store`](crate::Store) build and match on,
//! in cache terms (which protocol command uses which option is the
//! server's business; the docs name memcached's commands where that helps
//! to find the rule an option follows).

use std::time::Duration;

use crate::backing::BackingKind;

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
    /// What holds item memory (see [`backing`](crate::backing)).
    pub backing: BackingKind,
    /// Threads that rebuild the index when a memory file is taken over.
    pub recovery_threads: usize,
    /// The flash tier, if any (`-o ext_path`).
    pub flash: Option<crate::flash::FlashConfig>,
    /// How dead space is cleaned (`-o compact_*`).
    pub clean: CleanConfig,
    /// Which values are stored packed (`-o compression`).
    pub compression: Compression,
    /// The zstd level values are packed at.
    pub compress_level: i32,
    /// Whether the pack pass trains dictionaries from the values it packs
    /// and packs with them (`-o compress_dicts`; see `dict`). Values packed
    /// with a dictionary are read whatever this says.
    pub compress_dicts: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            memory_limit: 64 << 20,
            item_size_max: 1 << 20,
            evictions: true,
            use_cas: true,
            write_heads: 4,
            backing: BackingKind::default(),
            recovery_threads: 4,
            flash: None,
            clean: CleanConfig::default(),
            compression: Compression::default(),
            compress_level: crate::codec::DEFAULT_LEVEL,
            compress_dicts: true,
        }
    }
}

/// Which values are stored packed (`-o compression`). Every setting
/// reads packed items (a memory file may hold some).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// None are packed.
    Off,
    /// Cold items, packed by the background cleaner when memory runs
    /// short (see `pack`); hot items stay raw.
    #[default]
    Cold,
    /// Every value worth it, when it is written (for measurements).
    All,
}

impl Compression {
    /// Its `-o compression=` and `stats settings` name.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Off => "off",
            Compression::Cold => "cold",
            Compression::All => "all",
        }
    }
}

/// How the cleaner works (`-o compact_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanConfig {
    /// How segments are ranked.
    pub policy: crate::arena::CleanPolicy,
    /// Percent of a segment that must be dead before the background
    /// cleaner compacts it, or before a writer compacts it rather than
    /// evict, in a cache whose live items fill it.
    pub threshold_percent: u32,
    /// Percent of the limit, on top of the segments the write heads and
    /// the spare hold, that live items may not fill before eviction
    /// starts.
    pub reserve_percent: u32,
    /// Whether the server runs a background cleaner (`clean_ahead`).
    pub background: bool,
}

impl Default for CleanConfig {
    fn default() -> Self {
        CleanConfig {
            policy: crate::arena::CleanPolicy::Greedy,
            threshold_percent: 25,
            reserve_percent: 2,
            background: true,
        }
    }
}

/// Segment size: 1 MiB, or the power of two that holds the largest item
/// when -I is larger.
///
/// Every item memcached accepts is smaller here than memcached's own
/// `ITEM_ntotal`, which -I bounds, so a segment of -I bytes holds any item.
pub fn segment_size_for(item_size_max: usize) -> usize {
    item_size_max.max(1 << 20).next_power_of_two()
}

/// Bytes memcached would charge for an item (its `ITEM_ntotal`): its size
/// check decides when a value is "too large", and osmium answers the same.
pub fn memcached_item_total(key_len: usize, flags: u32, value_len: usize, use_cas: bool) -> usize {
    48 + key_len + 1 + if flags == 0 { 0 } else { 4 } + value_len + 2 + if use_cas { 8 } else { 0 }
}

/// Which storage command: how a write treats the key's current item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreMode {
    /// Store unconditionally.
    #[default]
    Set,
    /// Store only if the key has no live item.
    Add,
    /// Store only if the key has a live item.
    Replace,
    /// Add the value after the live item's value.
    Append,
    /// Add the value before the live item's value.
    Prepend,
    /// Store only if the live item's CAS unique is [`Write::cas`].
    Cas,
}

/// Outcome of a storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreStatus {
    /// The item was stored.
    Stored,
    /// The mode's condition failed (add: the key has an item; replace, append,
    /// prepend: it has none), or an append or prepend made the item too large.
    NotStored,
    /// A compare-and-swap whose unique is not the item's.
    Exists,
    /// A compare-and-swap on a key with no live item.
    NotFound,
    /// The item is larger than memcached allows (`-I`) or a segment holds.
    TooLarge,
    /// No room could be made for the item.
    OutOfMemory,
}

/// A storage command's arguments. The fields after `cas` are options
/// beyond the classic commands; `..Default::default()` leaves them off.
#[derive(Debug, Clone, Copy, Default)]
pub struct Write<'a> {
    /// Which storage command.
    pub mode: StoreMode,
    /// The key.
    pub key: &'a [u8],
    /// The client flags stored with the value.
    pub flags: u32,
    /// Relative expiry (see [`Clock::expiry`](crate::clock::Clock::expiry)),
    /// 0 = never.
    pub exptime: u32,
    /// The value (the data appended or prepended, for those modes).
    pub value: &'a [u8],
    /// Compare-and-swap unique for `Cas` (and append/prepend, when not 0).
    pub cas: u64,
    /// A `Cas` whose unique is older than the item's still stores, keeping
    /// the old item's expiry, and marks the new item stale (memcached's
    /// `CAS_STALE`, ms `I`).
    pub stale_if_older: bool,
    /// The new item's CAS unique (0 = the next from the counter).
    pub new_cas: u64,
    /// The key is binary (the client sent it base64 encoded); the item
    /// remembers it.
    pub binary_key: bool,
    /// Append/prepend only: when the key has no live item, store the data
    /// as a new item with this expiry instead of failing.
    pub create_exptime: Option<u32>,
}

/// What [`Store::fetch`](crate::Store::fetch) does besides reading.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fetch {
    /// Count the read as a hit (the item becomes fetched, its access time
    /// and eviction frequency are updated), after the caller's closure ran.
    pub record_hit: bool,
    /// Set a new expiry; the view still shows the one before.
    pub new_exptime: Option<u32>,
    /// On a miss, create an empty item (a placeholder other clients see
    /// while the first one recomputes the value).
    pub create: Option<Placeholder>,
}

/// The empty item [`Fetch::create`] stores on a miss.
#[derive(Debug, Clone, Copy, Default)]
pub struct Placeholder {
    /// Its relative expiry, 0 = never.
    pub exptime: u32,
    /// Its CAS unique (0 = next from the counter).
    pub cas: u64,
    /// The key is binary (see [`Write::binary_key`]).
    pub binary_key: bool,
}

/// What [`Store::remove`](crate::Store::remove) does.
#[derive(Debug, Clone, Copy, Default)]
pub struct Removal {
    /// Only if the item's CAS unique is this.
    pub if_cas: Option<u64>,
    /// Keep the item but mark it stale (a new CAS unique, the token
    /// cleared) instead of removing it.
    pub mark_stale: bool,
    /// With `mark_stale`: a new expiry.
    pub exptime: Option<u32>,
    /// The kept item's new CAS unique (0 = next from the counter).
    pub new_cas: u64,
    /// Keep the item with an empty value instead of removing it, its
    /// client flags set to `flags`.
    pub drop_value: bool,
    /// With `drop_value`: the kept item's client flags.
    pub flags: u32,
}

/// Outcome of [`Store::remove`](crate::Store::remove).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoveResult {
    /// The item was unlinked.
    Removed,
    /// Marked stale or emptied in place.
    Kept,
    /// `if_cas` is not the item's CAS unique.
    Exists,
    /// The key has no live item.
    NotFound,
}

/// What [`Store::counter`](crate::Store::counter) does beyond incr/decr.
#[derive(Debug, Clone, Copy, Default)]
pub struct CounterUpdate {
    /// Only if the item's CAS unique is this (0 = no check, as memcached).
    pub if_cas: u64,
    /// The new CAS unique (0 = next from the counter).
    pub new_cas: u64,
    /// A new expiry, applied when the value is updated in place (as
    /// memcached, which leaves a replaced item's expiry as it was).
    pub exptime: Option<u32>,
    /// On a miss, create the item holding `.0` with expiry `.1`.
    pub create: Option<(u64, u32)>,
}

/// Outcome of [`Store::counter`](crate::Store::counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterResult {
    /// The counter was updated (or created).
    Done {
        /// Its new value.
        value: u64,
        /// Its new CAS unique.
        cas: u64,
        /// The item's expiry before the update (0 if created).
        exptime: u32,
        /// The key had no item, and `create` made one.
        created: bool,
    },
    /// The key has no live item (and nothing was created).
    NotFound,
    /// The value is no number as memcached reads one (empty, 24 bytes or more,
    /// or not digits).
    NonNumeric,
    /// `if_cas` is not the item's CAS unique.
    Exists,
    /// Creating the missing counter failed other than for memory.
    NotStored,
    /// No room for the counter's new item (updated or created).
    OutOfMemory,
}

/// Outcome of incr/decr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithResult {
    /// The new value.
    Value(u64),
    /// The key has no live item.
    NotFound,
    /// The value is not a decimal number.
    NonNumeric,
    /// No room for the new value.
    OutOfMemory,
}

/// Outcome of a lookup; hits carry the caller's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<R> {
    /// A live item: the caller's result for it.
    Hit(R),
    /// No item under the key.
    Miss,
    /// Found but expired (memcached's get_expired).
    Expired,
    /// Found but invalidated by flush_all (get_flushed).
    Flushed,
}

impl Lookup<()> {
    /// A miss of any kind, as a lookup with another hit type.
    pub(crate) fn map_hit<R>(self) -> Lookup<R> {
        match self {
            Lookup::Hit(()) | Lookup::Miss => Lookup::Miss,
            Lookup::Expired => Lookup::Expired,
            Lookup::Flushed => Lookup::Flushed,
        }
    }
}

/// Engine-wide figures for `stats`.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreStats {
    /// Linked items, in RAM and on the flash tier.
    pub curr_items: u64,
    /// Items stored since the start (or the last reset).
    pub total_items: u64,
    /// Bytes of the linked items, by the shards' and write heads' counts.
    pub bytes: u64,
    /// Live items evicted to make room.
    pub evictions: u64,
    /// Of those, items never fetched.
    pub evicted_unfetched: u64,
    /// Expired or flushed items unlinked by the evictor, the compactor or the
    /// background walks.
    pub reclaimed: u64,
    /// Of those, items never fetched.
    pub expired_unfetched: u64,
    /// The memory limit in bytes (`-m`, `cache_memlimit`).
    pub limit_maxbytes: u64,
    /// Bytes per segment.
    pub segment_size: u64,
    /// Segments given memory so far.
    pub segments_allocated: u64,
    /// Bytes of those segments items can still be written into (free
    /// segments, and what the segments being filled have left).
    pub segments_room_bytes: u64,
    /// The most segments the memory limit allows.
    pub segments_limit: u64,
    /// Bytes of the hash index's buckets.
    pub index_bytes: u64,
    /// Bytes of the items the index links to, by their segments' counts
    /// (`bytes` is the same figure from the shards' counts).
    pub live_bytes: u64,
    /// Bytes written into segments that no linked item holds any more:
    /// overwritten, deleted and abandoned items not yet reclaimed.
    pub dead_bytes: u64,
    /// Segments free for the writers (free list, never used under the
    /// limit).
    pub segments_free: u64,
    /// Segments emptied by compaction (their live items moved, none
    /// evicted), items moved and bytes copied doing it.
    pub segments_compacted: u64,
    /// Live items moved by compaction.
    pub compact_items_moved: u64,
    /// Bytes those moves copied.
    pub compact_bytes_copied: u64,
    /// Compactions run by a writer that found no free segment (the rest
    /// ran in the background cleaner), and compactions given up.
    pub compact_writer_runs: u64,
    /// Compactions given up for want of room to move the live items to.
    pub compact_aborted: u64,
    /// Segments emptied by eviction, and the bytes of the live items
    /// evicted from them (`evictions` counts those items).
    pub segments_evicted: u64,
    /// Bytes of the live items evicted.
    pub evicted_live_bytes: u64,
    /// Dead bytes freed with the segments that held them, by compaction
    /// or eviction.
    pub reclaimed_dead_bytes: u64,
    /// Items on the flash tier (counted in `curr_items` too).
    pub flash_items: u64,
    /// Packed values that did not decode and were dropped (answered as
    /// misses; none expected: item memory is trusted and flash records
    /// are checksummed).
    pub compress_errors: u64,
    /// The pack pass (`-o compression=cold`): segments pack-compacted
    /// (their cold items packed, the segment freed).
    pub pack_segments: u64,
    /// Segments the pass walked and left as they were (packing would
    /// have freed less than 20 % of them).
    pub pack_segments_not_worth: u64,
    /// Items the pass packed.
    pub pack_items: u64,
    /// Values the pass tried that did not save enough (kept raw, marked
    /// tried: never tried again).
    pub pack_rejected: u64,
    /// Cold values the pass did not try: their size class kept failing,
    /// or they start like a compressed format.
    pub pack_skipped: u64,
    /// CPU time the pass spent in its plans (walking and packing), µs.
    pub pack_cpu_us: u64,
    /// Packed items the evictor kept because they were hit, written back
    /// raw (hit three times or more: hot).
    pub pack_kept_raw: u64,
    /// Packed items the evictor kept as they were, packed (hit once or
    /// twice: warm; or any with `-o compression=all`).
    pub pack_kept_packed: u64,
    /// Packed items GETs kept hitting, written back raw by the cleaner
    /// without waiting for the evictor.
    pub pack_promoted: u64,
    /// Items linked now whose value is packed (by the pass, `-o
    /// compression=all`, or from a memory file).
    pub packed_items: u64,
    /// The client's bytes of their values.
    pub packed_raw_bytes: u64,
    /// Bytes those items take (headers, keys, frames).
    pub packed_bytes: u64,
    /// Compression dictionaries held now (`dict`).
    pub pack_dicts: u64,
    /// Their bytes.
    pub pack_dict_bytes: u64,
    /// Dictionary trainings run (installed or not).
    pub pack_dict_trainings: u64,
    /// Their CPU time, µs (not in `pack_cpu_us`, the plans').
    pub pack_dict_train_us: u64,
    /// Items linked now whose value was packed with a dictionary.
    pub packed_dict_items: u64,
    /// memcached's `evicted_nonzero`, `evicted_active`, `evicted_time`, `moves_to_warm`,
    /// `moves_within_lru`, `crawler_items_checked`, `crawler_reclaimed`
    /// (see `arena::CleanStats`).
    pub evicted_nonzero: u64,
    /// memcached's `evicted_active`: evicted items that had been hit.
    pub evicted_active: u64,
    /// memcached's `evicted_time`: seconds between the last access and the
    /// eviction of the last item evicted.
    pub evicted_time: u32,
    /// memcached's `moves_to_warm`: hit items the evictor kept by copying them
    /// from small to main.
    pub moves_to_warm: u64,
    /// memcached's `moves_within_lru`: hit items the evictor kept within main.
    pub moves_within_lru: u64,
    /// memcached's `crawler_items_checked`: items the background walks looked
    /// at.
    pub crawler_items_checked: u64,
    /// memcached's `crawler_reclaimed`: the expired or flushed ones they
    /// unlinked.
    pub crawler_reclaimed: u64,
}

/// S3-FIFO's queues as `stats items` shows them (see [`Store::queues`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct QueueStats {
    /// Linked items in RAM in small and main.
    pub small_items: u64,
    /// Linked items in RAM in main.
    pub main_items: u64,
    /// The oldest last access (relative clock) of the items in each
    /// queue's oldest segments; None for an empty queue.
    pub small_oldest: Option<u32>,
    /// As `small_oldest`, for main.
    pub main_oldest: Option<u32>,
    /// The oldest last access known of the items on the flash tier (as the
    /// RAM evictor saw them when it moved them there).
    pub flash_oldest: Option<u32>,
}

/// What opening the store found (see [`Store::open`](crate::Store::open)).
#[derive(Debug, Default)]
pub struct Restart {
    /// Why a memory file's cache was not taken over, if it was not.
    pub note: Option<String>,
    /// What was taken over, if anything.
    pub recovered: Option<Recovered>,
    /// What the flash tier took over, with a flash tier.
    pub flash: Option<crate::flash::Resumed>,
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
