//! Per-key-prefix statistics: `stats detail on|off|dump` and `-D <char>`,
//! as memcached's stats_prefix.c. Only touched while detail is enabled, so
//! a single mutex is fine. The dump order is memcached's: 256 buckets by
//! MurmurHash3_x86_32 (seed 0) of the prefix, newest first within a bucket.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

const PREFIX_HASH_SIZE: usize = 256;

struct Entry {
    prefix: Vec<u8>,
    gets: u64,
    hits: u64,
    sets: u64,
    deletes: u64,
}

pub(crate) struct PrefixStats {
    enabled: AtomicBool,
    delimiter: u8,
    buckets: Mutex<Vec<Vec<Entry>>>,
}

/// memcached's default hash (MurmurHash3_x86_32, seed 0).
pub(crate) fn murmur3_32(key: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h: u32 = 0;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = chunks.remainder();
    let mut k: u32 = 0;
    for (i, &b) in tail.iter().enumerate().rev() {
        k ^= u32::from(b) << (8 * i);
    }
    if !tail.is_empty() {
        k = k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h ^= k;
    }
    h ^= key.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

impl PrefixStats {
    pub(crate) fn new(delimiter: u8, enabled: bool) -> PrefixStats {
        PrefixStats {
            enabled: AtomicBool::new(enabled),
            delimiter,
            buckets: Mutex::new((0..PREFIX_HASH_SIZE).map(|_| Vec::new()).collect()),
        }
    }

    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed)
    }

    pub(crate) fn delimiter(&self) -> u8 {
        self.delimiter
    }

    fn with_entry(&self, key: &[u8], f: impl FnOnce(&mut Entry)) {
        let key = match key.iter().position(|&b| b == 0) {
            Some(p) => &key[..p],
            None => key,
        };
        let Some(len) = key.iter().position(|&b| b == self.delimiter) else {
            return;
        };
        let prefix = &key[..len];
        let bucket = murmur3_32(prefix) as usize % PREFIX_HASH_SIZE;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let list = &mut buckets[bucket];
        // memcached matches with strncmp(stored, key, len): a longer stored
        // prefix that starts with this one matches too.
        let pos = list
            .iter()
            .position(|e| e.prefix.len() >= len && &e.prefix[..len] == prefix);
        let pos = match pos {
            Some(p) => p,
            None => {
                list.insert(
                    0,
                    Entry {
                        prefix: prefix.to_vec(),
                        gets: 0,
                        hits: 0,
                        sets: 0,
                        deletes: 0,
                    },
                );
                0
            }
        };
        f(&mut list[pos]);
    }

    pub(crate) fn record_get(&self, key: &[u8], hit: bool) {
        self.with_entry(key, |e| {
            e.gets += 1;
            e.hits += u64::from(hit);
        })
    }

    pub(crate) fn record_set(&self, key: &[u8]) {
        self.with_entry(key, |e| e.sets += 1)
    }

    pub(crate) fn record_delete(&self, key: &[u8]) {
        self.with_entry(key, |e| e.deletes += 1)
    }

    pub(crate) fn clear(&self) {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        for b in buckets.iter_mut() {
            b.clear();
        }
    }

    /// `stats detail dump`.
    pub(crate) fn dump(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        let buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        for e in buckets.iter().flatten() {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(&e.prefix);
            let _ = write!(
                out,
                " get {} hit {} set {} del {}\r\n",
                e.gets, e.hits, e.sets, e.deletes
            );
        }
        out.extend_from_slice(b"END\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_reference_values() {
        // MurmurHash3_x86_32 test vectors (seed 0).
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog"),
            0x2e4f_f723
        );
    }

    #[test]
    fn records_by_prefix() {
        let p = PrefixStats::new(b':', true);
        p.record_set(b"foo:1");
        p.record_get(b"foo:1", true);
        p.record_get(b"foo:2", false);
        p.record_delete(b"foo:1");
        p.record_set(b"nodelimiter");
        let mut out = Vec::new();
        p.dump(&mut out);
        assert_eq!(out, b"PREFIX foo get 2 hit 1 set 1 del 1\r\nEND\r\n");
    }
}
