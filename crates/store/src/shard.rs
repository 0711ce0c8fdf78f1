//! An index shard as the store uses it: its table behind a reader-writer
//! lock plus a version for lock-free readers, and the per-write-head
//! counters of the writes that bypass the shard lock.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::arena::Arena;
use crate::index::{AddrCodec, Found, Table};

/// Times a GET re-reads a shard that a writer is changing before it
/// waits for the shard's lock instead.
const OPTIMISTIC_TRIES: usize = 4;

/// One index shard: its version, lock and table, on cache lines of its own
/// (the version, the lock word and the table's hot fields share the
/// first line, see `index::Table`).
///
/// The version is a sequence lock for lock-free GETs: even while no writer
/// holds the lock, odd while one does ([`ShardWrite`] bumps it on the way
/// in and out). A GET reads it, looks the key up without the lock, and
/// keeps what it read only if the version was even and is unchanged.
#[repr(C, align(128))]
pub(crate) struct Shard {
    pub(crate) version: AtomicU64,
    pub(crate) lock: RwLock<Table>,
}

impl Shard {
    pub(crate) fn new(codec: AddrCodec) -> Shard {
        Shard {
            version: AtomicU64::new(0),
            lock: RwLock::new(Table::new(codec)),
        }
    }

    /// The write lock, making the version odd until it is released.
    #[inline]
    pub(crate) fn write(&self) -> ShardWrite<'_> {
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
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Table> {
        self.lock.read()
    }

    /// Looks `key` up without the lock (see `Table::find_unlocked`): Some
    /// when a consistent snapshot was read (and the answer), None when
    /// writers kept the shard busy. The caller is pinned.
    #[inline]
    pub(crate) fn find_optimistic(
        &self,
        arena: &Arena,
        key: &[u8],
        hash: u64,
    ) -> Option<Option<Found>> {
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
pub(crate) struct ShardWrite<'a> {
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
pub(crate) struct HeadCounters {
    /// Net change of `bytes` (wrapping: the new item's size minus the old).
    pub(crate) bytes: AtomicU64,
    pub(crate) total_items: AtomicU64,
    /// The packed items these swaps linked and unlinked (net, wrapping:
    /// `codec::PackedCounts`' figures).
    pub(crate) packed_items: AtomicU64,
    pub(crate) packed_raw_bytes: AtomicU64,
    pub(crate) packed_bytes: AtomicU64,
}

impl HeadCounters {
    /// A swap linked a packed item (`add`) or unlinked one: out of line,
    /// so that a swap of raw items runs none of it.
    #[cold]
    #[inline(never)]
    pub(crate) fn count_packed(&self, size: usize, raw_len: usize, add: bool) {
        let (n, raw, size) = if add {
            (1u64, raw_len as u64, size as u64)
        } else {
            (
                1u64.wrapping_neg(),
                (raw_len as u64).wrapping_neg(),
                (size as u64).wrapping_neg(),
            )
        };
        self.packed_items.fetch_add(n, Ordering::Relaxed);
        self.packed_raw_bytes.fetch_add(raw, Ordering::Relaxed);
        self.packed_bytes.fetch_add(size, Ordering::Relaxed);
    }

    /// The packed items' counts, as `PackedCounts`.
    pub(crate) fn packed(&self) -> crate::codec::PackedCounts {
        crate::codec::PackedCounts {
            items: self.packed_items.load(Ordering::Relaxed),
            raw_bytes: self.packed_raw_bytes.load(Ordering::Relaxed),
            bytes: self.packed_bytes.load(Ordering::Relaxed),
        }
    }
}
