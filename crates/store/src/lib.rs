//! osmium-store: the cache engine — the "hash table" and "value store"
//! stages of the pipeline.
//!
//! Its parts:
//!
//! * [`arena`]: item memory, fixed-size segments bounded by `-m` in one
//!   mapping, appended to by write heads, in two FIFOs (S3-FIFO's small and
//!   main queues), reclaimed a whole segment at a time;
//! * [`segment`]: a segment's control block (kept with the segments);
//! * [`backing`]: the mapping that holds the control blocks and the
//!   segments: a memfd, anonymous memory, or a file that outlives the
//!   process;
//! * [`memfile`]: the memory file's header and whether a start takes its
//!   cache over (`recover` rebuilds the index from its segments);
//!   `memfd`: item memory in a memfd, handed over at a binary upgrade and
//!   taken over the same way;
//! * [`index`]: the sharded hash index from key to `(SegmentId, offset)`;
//! * [`item`]: the item record layout (5-byte header);
//! * [`codec`]: packed values (zstd frames an item may hold in place of
//!   its value) and how readers get the client's bytes back; [`dict`]:
//!   the dictionaries a packed value may name;
//! * [`flash`]: the flash tier (`-o ext_path`): items the evictor would
//!   drop, on flash, found through an index of ~12 bytes per item (`tier`
//!   is the store's side of it);
//! * [`ghost`]: keys recently evicted from small;
//! * [`clock`]: memcached's relative clock and exptime rules;
//! * [`epoch`]: grace periods that let GETs read without locks.
//!
//! The [`Store`] ties them together (`store`: its construction and the
//! plumbing its operations share; `shard`: an index shard's lock and
//! version). Its operations are grouped by concern, each an `impl Store`
//! of its own: `read` (get, get_many, fetch, touch, prefetch hints),
//! `write` (the storage commands and items received in pieces), `remove`,
//! `counter` (incr/decr), `evict` (eviction and reclamation walks),
//! `compact` (getting dead space back: compaction, and when to compact
//! rather than evict), `pack` (`-o compression=cold`: the cleaner packs
//! cold items),
//! `flush` (flush_all), `stats` and `dump` (visiting every live item's
//! metadata in batches, for the dump commands). Their arguments and
//! results, in cache terms, are in `types` and re-exported here.
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
pub mod backing;
pub mod clock;
pub mod codec;
pub mod dict;
pub mod epoch;
pub mod events;
pub mod flash;
pub mod ghost;
pub mod index;
pub mod item;
pub mod memfile;
pub mod segment;

mod compact;
mod counter;
mod dump;
mod evict;
mod fault;
mod flush;
mod memfd;
mod new_files;
mod pack;
mod pack_state;
mod promote;
mod promote_queue;
mod read;
mod recover;
mod remove;
mod shard;
mod stats;
mod store;
mod tier;
mod train;
mod types;
mod write;

pub use arena::CleanPolicy;
pub use backing::BackingKind;
pub use codec::{Corrupt, ValueRef};
pub use dump::{DumpCursor, DumpEntry};
pub use flash::{FlashConfig, FlashPath};
pub use item::{ItemView, HEADER_SIZE};
pub use store::Store;
pub use tier::FlashFetch;
pub use types::{
    memcached_item_total, segment_size_for, ArithResult, CleanConfig, Compression, CounterResult,
    CounterUpdate, Fetch, Lookup, Placeholder, QueueStats, Removal, RemoveResult, StoreConfig,
    StoreMode, StoreStats, StoreStatus, Write,
};
pub use types::{Recovered, Restart};
pub use write::Incoming;

#[cfg(test)]
mod tests;
