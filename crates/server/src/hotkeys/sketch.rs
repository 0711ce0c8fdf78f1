//! Space-Saving (Metwally, Agrawal, El Abbadi, "Efficient Computation of
//! Frequent and Top-k Elements in Data Streams", ICDT 2005) over a fixed
//! number of slots, all memory taken at creation, with the filter of
//! Filtered Space-Saving (Homem, Carvalho, "Finding top-k elements in
//! data streams", Information Sciences 180, 2010) in front.
//!
//! A sample comes with a weight (the number of requests it stands for:
//! the sampling interval it was taken at, [`super::sampler`]), and every
//! count below is in weighted requests: Space-Saving with weighted updates
//! keeps the same guarantees with counts in those units.
//!
//! Each slot holds a key (copied into a fixed 250-byte cell), its
//! Space-Saving count (an upper bound of the key's true count), the
//! error it inherited when it took the slot over, and what was counted
//! for it since: reads, writes and bytes. A key not tracked takes the slot
//! of the smallest count, inheriting that count as its error, so every key
//! seen more often than `total / slots` times is tracked, and `count -
//! error` (the requests counted since the key took its slot) is a lower
//! bound of its true count.
//!
//! The filter: counters indexed by key hash, each at least the true count
//! of any untracked key of its hash. An untracked key only bumps its
//! counter until the counter reaches the smallest count; then it takes
//! that slot with the counter as its error (and the key it evicts leaves
//! its count in its own counter). On a long tail (most requests of a zipf
//! load are to keys seen once in a while) most samples are thus one
//! increment, not a slot taken over, and a rare key does not push a
//! tracked one out.
//!
//! Keys are found through an open-addressed table of slot numbers (linear
//! probing, deletion by backward shift); the smallest count is the root of
//! a binary min-heap of slot numbers. An update is O(1) for the lookup and
//! O(log slots) for the heap.

use osmium_protocol::request::KEY_MAX_LENGTH;

const EMPTY: u32 = u32::MAX;

/// What one slot counted since its key took it (or what one sample
/// adds), in weighted requests and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
}

impl Counts {
    /// The requests counted: what orders keys.
    pub(crate) fn requests(&self) -> u64 {
        self.reads + self.writes
    }
}

/// A Space-Saving summary of a fixed number of slots.
pub(crate) struct SpaceSaving {
    capacity: usize,
    len: usize,
    /// `capacity` cells of `KEY_MAX_LENGTH` bytes.
    keys: Box<[u8]>,
    key_len: Box<[u8]>,
    hashes: Box<[u64]>,
    count: Box<[u64]>,
    error: Box<[u64]>,
    counts: Box<[Counts]>,
    /// Slot numbers, a min-heap by `count`.
    heap: Box<[u32]>,
    /// Each slot's place in `heap`.
    pos: Box<[u32]>,
    /// Open addressing: slot numbers or `EMPTY`.
    table: Box<[u32]>,
    mask: usize,
    /// The filter's counters (a power of two of them).
    filter: Box<[u64]>,
    filter_mask: usize,
}

impl SpaceSaving {
    /// A summary of `capacity` slots (at least 1).
    pub(crate) fn new(capacity: usize) -> SpaceSaving {
        let capacity = capacity.clamp(1, 1 << 20);
        let table = (capacity * 2).next_power_of_two();
        SpaceSaving {
            capacity,
            len: 0,
            keys: vec![0; capacity * KEY_MAX_LENGTH].into_boxed_slice(),
            key_len: vec![0; capacity].into_boxed_slice(),
            hashes: vec![0; capacity].into_boxed_slice(),
            count: vec![0; capacity].into_boxed_slice(),
            error: vec![0; capacity].into_boxed_slice(),
            counts: vec![Counts::default(); capacity].into_boxed_slice(),
            heap: vec![0; capacity].into_boxed_slice(),
            pos: vec![0; capacity].into_boxed_slice(),
            table: vec![EMPTY; table].into_boxed_slice(),
            mask: table - 1,
            filter: vec![0; table * 2].into_boxed_slice(),
            filter_mask: table * 2 - 1,
        }
    }

    /// The filter counter of `hash` (its high bits: the table uses the
    /// low ones).
    #[inline]
    fn filter_of(&self, hash: u64) -> usize {
        (hash >> 40) as usize & self.filter_mask
    }

    /// Forgets every key (the memory stays).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.table.fill(EMPTY);
        self.filter.fill(0);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The smallest count (0 while a slot is free): no key missing from
    /// the summary was seen more often.
    #[cfg(test)]
    pub(crate) fn min_count(&self) -> u64 {
        if self.len < self.capacity {
            0
        } else {
            self.count[self.heap[0] as usize]
        }
    }

    fn key(&self, slot: usize) -> &[u8] {
        let at = slot * KEY_MAX_LENGTH;
        &self.keys[at..at + self.key_len[slot] as usize]
    }

    /// Counts a sample of `key` (of hash `hash`; keys over 250 bytes are
    /// cut there) standing for `add.requests()` requests.
    pub(crate) fn offer(&mut self, key: &[u8], hash: u64, add: Counts) {
        let key = &key[..key.len().min(KEY_MAX_LENGTH)];
        let weight = add.requests();
        let slot = match self.find(key, hash) {
            Some(slot) => slot,
            None if self.len < self.capacity => {
                let slot = self.len;
                self.len += 1;
                let seen = self.filter[self.filter_of(hash)];
                self.count[slot] = seen;
                self.error[slot] = seen;
                self.counts[slot] = Counts::default();
                self.heap[slot] = slot as u32;
                self.pos[slot] = slot as u32;
                self.set_key(slot, key, hash);
                self.sift_up(slot);
                slot
            }
            None => {
                let f = self.filter_of(hash);
                let min = self.heap[0] as usize;
                if self.filter[f] + weight < self.count[min] {
                    // Not yet seen as often as the least tracked key.
                    self.filter[f] += weight;
                    return;
                }
                // Take over the slot of the smallest count; its key's
                // count stays in its filter counter.
                let evicted = self.filter_of(self.hashes[min]);
                self.filter[evicted] = self.filter[evicted].max(self.count[min]);
                self.unlink(min);
                let seen = self.filter[f];
                self.count[min] = seen;
                self.error[min] = seen;
                self.counts[min] = Counts::default();
                self.set_key(min, key, hash);
                min
            }
        };
        self.count[slot] += weight;
        let c = &mut self.counts[slot];
        c.reads += add.reads;
        c.writes += add.writes;
        c.bytes += add.bytes;
        self.sift_down(self.pos[slot] as usize);
    }

    /// Every tracked key with what was counted since it took its slot.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u8], Counts)> + '_ {
        (0..self.len).map(move |s| (self.key(s), self.counts[s]))
    }

    /// A key's Space-Saving count and error (tests).
    #[cfg(test)]
    pub(crate) fn estimate(&self, key: &[u8]) -> Option<(u64, u64)> {
        let slot = self.find(key, osmium_store::index::hash_key(key))?;
        Some((self.count[slot], self.error[slot]))
    }

    fn find(&self, key: &[u8], hash: u64) -> Option<usize> {
        let mut i = hash as usize & self.mask;
        loop {
            let s = self.table[i];
            if s == EMPTY {
                return None;
            }
            let slot = s as usize;
            if self.hashes[slot] == hash && self.key(slot) == key {
                return Some(slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    fn set_key(&mut self, slot: usize, key: &[u8], hash: u64) {
        let at = slot * KEY_MAX_LENGTH;
        self.keys[at..at + key.len()].copy_from_slice(key);
        self.key_len[slot] = key.len() as u8;
        self.hashes[slot] = hash;
        let mut i = hash as usize & self.mask;
        while self.table[i] != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.table[i] = slot as u32;
    }

    /// Removes `slot` from the table, shifting back the entries after it
    /// that would no longer be found.
    fn unlink(&mut self, slot: usize) {
        let mut hole = self.hashes[slot] as usize & self.mask;
        while self.table[hole] != slot as u32 {
            hole = (hole + 1) & self.mask;
        }
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let s = self.table[j];
            if s == EMPTY {
                break;
            }
            let home = self.hashes[s as usize] as usize & self.mask;
            // Whether `home` lies cyclically in (hole, j]: then the entry
            // stays where it is.
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.table[hole] = s;
                hole = j;
            }
        }
        self.table[hole] = EMPTY;
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a] as usize] = a as u32;
        self.pos[self.heap[b] as usize] = b as u32;
    }

    fn less(&self, a: usize, b: usize) -> bool {
        self.count[self.heap[a] as usize] < self.count[self.heap[b] as usize]
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(i, parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < self.len && self.less(l, least) {
                least = l;
            }
            if r < self.len && self.less(r, least) {
                least = r;
            }
            if least == i {
                return;
            }
            self.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osmium_store::index::hash_key;
    use proptest::prelude::*;
    use std::collections::HashMap;

    impl Counts {
        fn with_bytes(self, bytes: u64) -> Counts {
            Counts { bytes, ..self }
        }
    }

    fn read() -> Counts {
        Counts {
            reads: 1,
            writes: 0,
            bytes: 10,
        }
    }

    fn offer(s: &mut SpaceSaving, key: &[u8]) {
        s.offer(key, hash_key(key), read());
    }

    #[test]
    fn counts_until_full_then_replaces_the_smallest() {
        let mut s = SpaceSaving::new(2);
        for k in [&b"a"[..], b"a", b"a", b"b", b"b"] {
            offer(&mut s, k);
        }
        assert_eq!(s.estimate(b"a"), Some((3, 0)));
        assert_eq!(s.estimate(b"b"), Some((2, 0)));
        // c is filtered out once, then takes b's slot (b's count goes to
        // b's filter counter).
        offer(&mut s, b"c");
        assert_eq!(s.estimate(b"c"), None);
        offer(&mut s, b"c");
        assert_eq!(s.estimate(b"b"), None);
        assert_eq!(s.estimate(b"c"), Some((2, 1)));
        let c: HashMap<Vec<u8>, Counts> = s.entries().map(|(k, c)| (k.to_vec(), c)).collect();
        assert_eq!(c[&b"c"[..]].reads, 1);
        assert_eq!(c[&b"a"[..]].bytes, 30);
        s.clear();
        assert_eq!(s.len(), 0);
        assert_eq!(s.estimate(b"a"), None);
    }

    #[test]
    fn weighted_samples_count_as_their_weight() {
        // Samples of weight 4: the counts, the filter and the smallest
        // count are all in weighted requests.
        let mut s = SpaceSaving::new(2);
        let w4 = |reads, writes| Counts {
            reads,
            writes,
            bytes: 40,
        };
        s.offer(b"a", hash_key(b"a"), w4(4, 0));
        s.offer(b"a", hash_key(b"a"), w4(0, 4));
        s.offer(b"b", hash_key(b"b"), w4(4, 0));
        assert_eq!(s.estimate(b"a"), Some((8, 0)));
        assert_eq!(s.min_count(), 4);
        // c (0 in its filter + 4) is not under b's 4: it takes b's slot
        // (b's 4 go to b's filter counter).
        s.offer(b"c", hash_key(b"c"), w4(4, 0));
        assert_eq!(s.estimate(b"b"), None);
        assert_eq!(s.estimate(b"c"), Some((4, 0)));
        assert_eq!(s.filter[s.filter_of(hash_key(b"b"))], 4);
        // A sample of weight 1 of an untracked key only bumps its filter
        // counter while that stays under the smallest count.
        s.offer(b"d", hash_key(b"d"), read());
        assert_eq!(s.estimate(b"d"), None);
        let c: HashMap<Vec<u8>, Counts> = s.entries().map(|(k, c)| (k.to_vec(), c)).collect();
        assert_eq!(c[&b"a"[..]], w4(4, 4).with_bytes(80));
        assert_eq!(c[&b"c"[..]].requests(), 4);
    }

    #[test]
    fn a_long_key_is_cut_at_250_bytes() {
        let mut s = SpaceSaving::new(4);
        let long = vec![b'x'; 300];
        s.offer(&long, 7, read());
        s.offer(&long, 7, read());
        let e: Vec<_> = s.entries().collect();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0.len(), KEY_MAX_LENGTH);
        assert_eq!(e[0].1.reads, 2);
    }

    #[test]
    fn colliding_hashes_and_deletions_keep_every_key_findable() {
        // Every key on the same few homes: probing and backward-shift
        // deletion do all the work (keys come in turn, each twice, so the
        // filter lets them in).
        let mut s = SpaceSaving::new(8);
        for round in 0..400u64 {
            let key = format!("k{}", (round / 2) % 13);
            s.offer(key.as_bytes(), (round / 2) % 3, read());
            for slot in 0..s.len {
                let k = s.key(slot).to_vec();
                assert_eq!(s.find(&k, s.hashes[slot]), Some(slot));
            }
            let live = s.table.iter().filter(|&&t| t != EMPTY).count();
            assert_eq!(live, s.len);
        }
    }

    /// A zipf-like stream of `n` requests over `keys` keys (rank r drawn
    /// with weight 1/r^s), from a fixed generator.
    fn skewed(n: usize, keys: usize, s: f64, seed: u64) -> Vec<u32> {
        let mut cdf = Vec::with_capacity(keys);
        let mut total = 0.0;
        for r in 1..=keys {
            total += 1.0 / (r as f64).powf(s);
            cdf.push(total);
        }
        let mut rng = crate::hotkeys::sampler::Rng::new(seed);
        (0..n)
            .map(|_| {
                let x = rng.unit() * total;
                cdf.partition_point(|&c| c < x) as u32
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]
        /// On a skewed stream, every key seen more often than the
        /// smallest count is tracked, the smallest count stays within
        /// twice total/capacity, each count lies within [true, true +
        /// error], and the counts since the slot was taken never exceed
        /// the truth.
        #[test]
        fn heavy_hitters_are_found_and_counts_bounded(
            seed in 0u64..1000,
            s in 0.8f64..1.3,
            capacity in 16usize..200,
        ) {
            let stream = skewed(20_000, 5_000, s, seed);
            let mut sketch = SpaceSaving::new(capacity);
            let mut truth: HashMap<u32, u64> = HashMap::new();
            for &k in &stream {
                offer(&mut sketch, &k.to_le_bytes());
                *truth.entry(k).or_default() += 1;
            }
            let bound = stream.len() as u64 / capacity as u64;
            prop_assert!(sketch.min_count() <= 2 * bound);
            for (&k, &n) in &truth {
                match sketch.estimate(&k.to_le_bytes()) {
                    Some((count, error)) => {
                        prop_assert!(count >= n, "count {count} < true {n}");
                        prop_assert!(count - error <= n);
                    }
                    None => prop_assert!(n <= sketch.min_count(), "lost {k} seen {n} times"),
                }
            }
            for (key, c) in sketch.entries() {
                let k = u32::from_le_bytes(key.try_into().unwrap());
                prop_assert!(c.reads <= truth[&k]);
            }
        }
    }

    #[test]
    fn the_hottest_of_a_zipf_stream_come_out_exact_enough() {
        // zipf(0.99) over 100,000 keys, 200,000 requests, 256 slots: the
        // ten hottest are tracked with counts within 1 % of the truth.
        let stream = skewed(200_000, 100_000, 0.99, 5);
        let mut sketch = SpaceSaving::new(256);
        let mut truth: HashMap<u32, u64> = HashMap::new();
        for &k in &stream {
            offer(&mut sketch, &k.to_le_bytes());
            *truth.entry(k).or_default() += 1;
        }
        let mut top: Vec<(u32, u64)> = truth.into_iter().collect();
        top.sort_by_key(|e| std::cmp::Reverse(e.1));
        for &(k, n) in &top[..10] {
            let (count, error) = sketch.estimate(&k.to_le_bytes()).expect("tracked");
            let since = count - error;
            assert!((since as f64) >= 0.99 * n as f64, "key {k}: {since} of {n}");
        }
    }
}
