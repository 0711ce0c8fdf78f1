//! The settled set of a move: 64-bit hashes of the moved keys whose new
//! owner is authoritative (written or deleted through the proxy since the
//! move began, or copied by the migration). Shared by the event loop and
//! the migration thread; sharded so that neither waits on the other for
//! long. An insert answers whether the key was settled before, which is
//! what makes "settle, then act" one step for both sides.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

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
}

impl Default for Settled {
    fn default() -> Settled {
        Settled {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashSet64::default()))
                .collect(),
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
}
