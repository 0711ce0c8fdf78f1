//! Dumps: visiting every live item's metadata a bounded batch at a time
//! ([`Store::dump_step`]), for the server's dump commands (memcached's
//! `lru_crawler metadump` and `mgdump`, `stats cachedump`), so that a dump
//! of millions of items is never buffered whole and never holds up writers
//! for long.
//!
//! A dump walks the index, not the segments: shard by shard, and within a
//! shard in the order of key hashes (the top 32 bits of a key's hash, its
//! *position*, decide its home bucket, and home buckets follow positions
//! whatever the table's size). A step reads the items of the keys whose
//! positions fall in the next range of about `BATCH_BUCKETS` home buckets,
//! under the shard's read lock, copies what the caller is shown, and calls
//! the caller back after the lock is released. The cursor keeps the
//! position where the next step starts, so the walk resumes correctly after
//! the table grew, and it is independent of where items live: eviction
//! keeping an item (a copy in another segment), a touch or an overwrite
//! move it in memory but not in hash order.
//!
//! Then the keys only the flash tier holds: its pages are read in log
//! order, a chunk a step (`Flash::walk_records`), and each record its
//! key's flash entry still points at is visited, unless expired or
//! flushed. A record keeps no access time: a flash item's `atime` is 0
//! (the clock's start).
//!
//! Guarantees, for a dump that runs while others read and write:
//!
//! * a key that is live (stored, not expired, not flushed) from the first
//!   step to the last is visited exactly once, with the version it has
//!   when its batch is read;
//! * a key stored, removed, expired or flushed meanwhile is visited at most
//!   once (each key's position lies in exactly one batch of one shard, and
//!   a batch reads each key's entry once);
//! * expired and flushed items are never visited (as memcached's crawler
//!   skips them), nor removed ones;
//! * every visited key and its figures are whole: they are read from an
//!   item linked in the index, under its shard's lock and pinned (an
//!   unlocked SET may replace the entry meanwhile, and the pin keeps the
//!   replaced item's memory from being reused before the copy is made; a
//!   thread that gets no pin slot relies on the lock alone, as lookups
//!   do);
//! * a key moved between RAM and flash during the dump may be visited in
//!   both (or, brought back to RAM behind the walk, in neither).

use crate::epoch;
use crate::flash::FlashWalk;
use crate::index::{hash_key, SHARDS};
use crate::item::{self, ItemPtr};
use crate::store::Store;
use crate::types::{memcached_item_total, Lookup};

/// Home buckets a dump step reads (about 12 × 0.8 keys each).
const BATCH_BUCKETS: usize = 64;

/// One past the last hash position.
const END: u64 = 1 << 32;

/// Where a dump is ([`Store::dump_step`]); `Default` is the start. It also
/// holds the copy of the last batch, reused from step to step.
#[derive(Debug, Default)]
pub struct DumpCursor {
    /// The shard being walked (`SHARDS` once done).
    shard: usize,
    /// The hash position in it where the next step starts.
    from: u64,
    batch: Vec<Copied>,
    keys: Vec<u8>,
    /// The walk of the flash tier, once RAM is done.
    flash: Option<FlashWalk>,
    flash_done: bool,
}

impl DumpCursor {
    /// Whether the whole cache has been visited.
    pub fn is_done(&self) -> bool {
        self.shard >= SHARDS && self.flash_done
    }
}

/// A batch entry as copied under the lock; its key is `keys[key]`.
#[derive(Debug)]
struct Copied {
    key: std::ops::Range<usize>,
    binary_key: bool,
    exptime: u32,
    atime: u32,
    cas: u64,
    fetched: bool,
    flags: u32,
    value_len: usize,
}

/// A live item as a dump shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpEntry<'a> {
    /// The key as stored (a binary key's raw bytes).
    pub key: &'a [u8],
    /// The key is binary (clients send it base64 encoded).
    pub binary_key: bool,
    /// Relative expiry, 0 = never (see `clock::Clock` to convert it).
    pub exptime: u32,
    /// Last access, on the relative clock.
    pub atime: u32,
    /// The CAS unique (0 with CAS off).
    pub cas: u64,
    /// Whether it was hit since it was stored.
    pub fetched: bool,
    /// Client flags.
    pub flags: u32,
    /// Value length.
    pub value_len: usize,
    /// What memcached would charge for it (see [`memcached_item_total`]).
    pub total_size: usize,
}

impl Store {
    /// Visits the live items of the next batch of keys (a few hundred at
    /// most), calling `f` for each after every lock is released; returns
    /// false once the whole cache has been visited (the step that visits
    /// the last batch returns false already; later steps visit nothing).
    /// See the `dump` module for what a dump guarantees while others read
    /// and write.
    pub fn dump_step(&self, cursor: &mut DumpCursor, f: impl FnMut(&DumpEntry<'_>)) -> bool {
        if cursor.is_done() {
            return false;
        }
        let now = self.clock.now();
        self.flush_due(now);
        cursor.batch.clear();
        cursor.keys.clear();
        if cursor.shard >= SHARDS {
            self.dump_flash(cursor, now);
            return self.dump_batch(cursor, f);
        }
        let from = cursor.from;
        let to = {
            let table = self.shards[cursor.shard].read();
            // Pinned once the lock is held (never wait for a lock while
            // pinned): see the module comment.
            let _pin = epoch::pin();
            let to = table.batch_end(from, BATCH_BUCKETS);
            let (batch, keys) = (&mut cursor.batch, &mut cursor.keys);
            table.entries_homed_in(from, to, |loc| {
                let it = self.arena.item(loc.seg, loc.offset);
                let meta = it.meta();
                let view = self.view_with(loc, it, meta);
                let key = view.key();
                let position = hash_key(key) >> 32;
                if position < from
                    || position >= to
                    || !matches!(self.check_exptime(meta.exptime, loc, now), Lookup::Hit(()))
                {
                    return;
                }
                let start = keys.len();
                keys.extend_from_slice(key);
                batch.push(Copied {
                    key: start..keys.len(),
                    binary_key: view.binary_key(),
                    exptime: view.exptime(),
                    atime: view.atime(),
                    cas: view.cas(),
                    fetched: view.fetched(),
                    flags: view.flags(),
                    value_len: view.value_len(),
                });
            });
            to
        };
        if to >= END {
            cursor.shard += 1;
            cursor.from = 0;
            if cursor.shard >= SHARDS && !self.flash.as_ref().is_some_and(|f| f.is_on()) {
                cursor.flash_done = true;
            }
        } else {
            cursor.from = to;
        }
        self.dump_batch(cursor, f)
    }

    /// Copies the next chunk of flash records into the cursor's batch.
    fn dump_flash(&self, cursor: &mut DumpCursor, now: u32) {
        let Some(flash) = &self.flash else {
            cursor.flash_done = true;
            return;
        };
        let walk = cursor.flash.get_or_insert_with(|| flash.walk());
        let use_cas = self.cfg.use_cas;
        let (batch, keys) = (&mut cursor.batch, &mut cursor.keys);
        let more = flash.walk_records(walk, |it: ItemPtr| {
            let meta = it.meta();
            if meta.exptime != 0 && meta.exptime <= now {
                return;
            }
            let key = it.key();
            let start = keys.len();
            keys.extend_from_slice(key);
            batch.push(Copied {
                key: start..keys.len(),
                binary_key: it.has_state(item::STATE_BINARY_KEY),
                exptime: meta.exptime,
                atime: 0,
                cas: if use_cas {
                    meta.stored_cas.unwrap_or(0)
                } else {
                    0
                },
                fetched: it.is_fetched(),
                flags: it.flags(),
                value_len: it.value_len(),
            });
        });
        if !more {
            cursor.flash_done = true;
            cursor.flash = None;
        }
    }

    /// Calls `f` for each item of the cursor's batch; false once the dump
    /// is over.
    fn dump_batch(&self, cursor: &mut DumpCursor, mut f: impl FnMut(&DumpEntry<'_>)) -> bool {
        let use_cas = self.cfg.use_cas;
        for c in &cursor.batch {
            let key = &cursor.keys[c.key.clone()];
            f(&DumpEntry {
                key,
                binary_key: c.binary_key,
                exptime: c.exptime,
                atime: c.atime,
                cas: c.cas,
                fetched: c.fetched,
                flags: c.flags,
                value_len: c.value_len,
                total_size: memcached_item_total(key.len(), c.flags, c.value_len, use_cas),
            });
        }
        !cursor.is_done()
    }
}
