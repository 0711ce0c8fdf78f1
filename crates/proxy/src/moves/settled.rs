//! The settled set of a move: 64-bit hashes of the moved keys whose new
//! owner is authoritative (written or deleted through the proxy since the
//! move began, or copied by the migration). Shared by the event loop and
//! the migration thread; sharded so that neither waits on the other for
//! long. An insert answers whether the key was settled before, which is
//! what makes "settle, then act" one step for both sides.
//!
//! A move replaced by a newer one (a reload while it ran) keeps its set,
//! frozen, linked to the newer move's set ([`Settled::supersede`]). The
//! freeze takes every shard's lock, so a key its migration thread settles
//! ([`Settled::settle`]) is either settled before the newer move routes
//! anything (and the newer move reads it from where it was copied), or
//! refused (and the thread undoes its copy): a key never changes source
//! under the newer move's feet. The thread, finishing a batch after the
//! newer move began, also asks [`Settled::settled_later`] before it writes
//! (a key a client wrote under the newer move is the newer move's).

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const SHARDS: usize = 64;

/// The 64-bit hash a key is settled by (FNV-1a 64 folded with its
/// length: a collision at worst sends one read to the new owner early).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ (key.len() as u64).rotate_left(56)
}

/// A hasher for already-hashed keys: the value itself, mixed once.
#[derive(Default)]
pub struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A set of key hashes.
pub type HashSet64 = HashSet<u64, BuildHasherDefault<Prehashed>>;

/// The settled set.
#[derive(Debug)]
pub struct Settled {
    shards: Vec<Mutex<HashSet64>>,
    /// The set of the move that replaced this one.
    later: OnceLock<Arc<Settled>>,
    /// The move was given up (no warm move replaced it): every key counts
    /// as settled later, so its thread writes nothing more.
    abandoned: AtomicBool,
    /// Replaced or given up: the migration settles nothing more. Set while
    /// every shard is locked.
    frozen: AtomicBool,
}

/// What [`Settled::settle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// Settled now.
    New,
    /// Settled before (a client, or an earlier copy).
    Already,
    /// The set is frozen (the move was replaced): not settled.
    Frozen,
}

impl Default for Settled {
    fn default() -> Settled {
        Settled {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashSet64::default()))
                .collect(),
            later: OnceLock::new(),
            abandoned: AtomicBool::new(false),
            frozen: AtomicBool::new(false),
        }
    }
}

impl Settled {
    fn shard(&self, h: u64) -> std::sync::MutexGuard<'_, HashSet64> {
        let m = &self.shards[(h >> 58) as usize % SHARDS];
        // A poisoned shard (a panic elsewhere) still holds a valid set.
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the key of hash `h` is settled.
    pub fn contains(&self, h: u64) -> bool {
        self.shard(h).contains(&h)
    }

    /// Settles the key of hash `h`; `true` when it was not settled before.
    pub fn insert(&self, h: u64) -> bool {
        self.shard(h).insert(h)
    }

    /// How many keys are settled.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Whether no key is settled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The migration's settle: refused once the set is frozen.
    pub fn settle(&self, h: u64) -> Settle {
        let mut shard = self.shard(h);
        if self.frozen.load(Ordering::Acquire) {
            return Settle::Frozen;
        }
        if shard.insert(h) {
            Settle::New
        } else {
            Settle::Already
        }
    }

    /// Whether the set is frozen.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::Acquire)
    }

    /// Freezes the set: every shard locked, so no settle is half done.
    fn freeze(&self) {
        let held: Vec<_> = (0..SHARDS as u64).map(|i| self.shard(i << 58)).collect();
        self.frozen.store(true, Ordering::Release);
        drop(held);
    }

    /// A newer move (set `next`) replaced this one: frozen, linked to it.
    pub fn supersede(&self, next: Arc<Settled>) {
        self.freeze();
        let _ = self.later.set(next);
    }

    /// The move was given up without a warm move after it.
    pub fn abandon(&self) {
        self.freeze();
        self.abandoned.store(true, Ordering::Release);
    }

    /// Whether a move that replaced this one (or one after it) settled
    /// the key of hash `h`, or the move was given up.
    pub fn settled_later(&self, h: u64) -> bool {
        let mut next = Some(self);
        while let Some(s) = next {
            if s.abandoned.load(Ordering::Acquire) {
                return true;
            }
            if !std::ptr::eq(s, self) && s.contains(h) {
                return true;
            }
            next = s.later.get().map(|a| a.as_ref());
        }
        false
    }

    /// Whether the key is settled here or by a later move.
    pub fn settled_here_or_later(&self, h: u64) -> bool {
        self.contains(h) || self.settled_later(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_says_whether_it_was_new() {
        let s = Settled::default();
        let h = key_hash(b"k");
        assert!(!s.contains(h));
        assert!(s.insert(h));
        assert!(!s.insert(h));
        assert!(s.contains(h));
        assert_ne!(key_hash(b"k"), key_hash(b"k\0"));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_later_move_settles_for_the_one_it_replaced() {
        let first = Settled::default();
        let second = Arc::new(Settled::default());
        let third = Arc::new(Settled::default());
        let (a, b) = (key_hash(b"a"), key_hash(b"b"));
        first.insert(a);
        assert!(!first.settled_later(a), "its own set is not later");
        first.supersede(second.clone());
        second.supersede(third.clone());
        third.insert(b);
        assert!(first.settled_later(b) && second.settled_later(b));
        assert!(!third.settled_later(b));
        assert!(first.settled_here_or_later(a) && !second.settled_here_or_later(a));
        assert_eq!(
            first.settle(key_hash(b"c")),
            Settle::Frozen,
            "replaced: frozen"
        );
        assert!(!first.contains(key_hash(b"c")));
        assert_eq!(third.settle(b), Settle::Already);
        assert_eq!(third.settle(a), Settle::New);
        second.abandon();
        assert!(first.settled_later(a), "given up: everything is later");
    }
}
