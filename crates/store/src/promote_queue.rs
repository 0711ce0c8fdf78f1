//! The promotion queue (see `promote`): fixed-size hints of hot packed
//! items that GETs push with `try_lock` and the cleaner drains, in two
//! buffers of `HINTS` records allocated with the store (no allocation
//! after that, no GET ever waits on it).

use std::sync::atomic::{AtomicBool, AtomicU32};

use crate::index::Location;

/// Hints the queue holds.
pub(crate) const HINTS: usize = 64;

/// Longest key (memcached's limit).
pub(crate) const KEY_MAX: usize = 250;

/// One packed item to write back raw: where it was found.
#[derive(Clone, Copy)]
pub(crate) struct Hint {
    pub(crate) hash: u64,
    pub(crate) loc: Location,
    pub(crate) key_len: u8,
    pub(crate) key: [u8; KEY_MAX],
}

impl Hint {
    const EMPTY: Hint = Hint {
        hash: 0,
        loc: Location { seg: 0, offset: 0 },
        key_len: 0,
        key: [0; KEY_MAX],
    };

    pub(crate) fn key(&self) -> &[u8] {
        &self.key[..self.key_len as usize]
    }
}

/// A buffer of hints: the first `len` are set.
pub(crate) struct Hints {
    pub(crate) len: usize,
    pub(crate) slots: Box<[Hint]>,
}

impl Default for Hints {
    fn default() -> Hints {
        Hints {
            len: 0,
            slots: vec![Hint::EMPTY; HINTS].into_boxed_slice(),
        }
    }
}

/// The store's promotion queue: hints pushed by GETs, and the buffer the
/// cleaner drains (swapped with it under the lock).
#[derive(Default)]
pub(crate) struct PromoteQueue {
    pub(crate) pending: parking_lot::Mutex<Hints>,
    pub(crate) draining: parking_lot::Mutex<Hints>,
    /// The last drain found no segment free: a new hint does not wake
    /// the cleaner (its rounds, woken by writers or its timeout, drain
    /// the queue), so that GETs re-sending hints do not keep it busy.
    pub(crate) starved: AtomicBool,
    /// The clock's second (plus one) in which a promotion last made room.
    pub(crate) room_made: AtomicU32,
}

impl PromoteQueue {
    /// Adds a hint unless the queue is contended, full or has it already.
    /// Returns whether it was added to an empty queue (the cleaner is to
    /// be woken).
    pub(crate) fn push(&self, key: &[u8], hash: u64, loc: Location) -> bool {
        let Some(mut q) = self.pending.try_lock() else {
            return false;
        };
        let len = q.len;
        if len == HINTS || key.len() > KEY_MAX {
            return false;
        }
        if q.slots[..len]
            .iter()
            .any(|h| h.hash == hash && h.loc == loc)
        {
            return false;
        }
        let h = &mut q.slots[len];
        h.hash = hash;
        h.loc = loc;
        h.key_len = key.len() as u8;
        h.key[..key.len()].copy_from_slice(key);
        q.len = len + 1;
        len == 0
    }
}
