//! The pack pass (`Compression::Cold`): cold items are packed by the
//! cleaner, hot ones stay raw, values that do not compress are left raw
//! (and soon not tried), every item reads back byte for byte with its
//! flags, expiry and CAS unique, and a cache of text holds far more items
//! than without the pass.

use super::*;
use crate::arena::{SegmentId, PACKED, PACK_NOT_WORTH};
use crate::evict::UNPACK_FREQ;
use crate::index::Location;

/// JSON-like text that compresses about as well as a cache's values,
/// `len` bytes, different for each `seed`.
pub(super) fn text(len: usize, seed: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 96);
    let mut i = seed.wrapping_mul(2_654_435_761);
    while v.len() < len {
        i = i.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        v.extend_from_slice(
            format!(
                "{{\"id\":{},\"user\":\"name{}\",\"score\":{},\"tags\":[\"t{}\"]}},",
                i >> 8,
                (i >> 4) % 97,
                (i >> 12) % 1000,
                i % 13
            )
            .as_bytes(),
        );
    }
    v.truncate(len);
    v
}

/// Bytes that do not compress.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

pub(super) fn location(s: &Store, key: &[u8]) -> Location {
    let hash = hash_key(key);
    let table = s.shard(hash).read();
    table.find(&s.arena, key, hash).expect("linked").loc
}

/// Whether `key`'s value is stored packed, if it is there.
fn packed(s: &Store, key: &[u8]) -> Option<bool> {
    match s.get(key, None, |it| it.is_packed()) {
        Lookup::Hit(p) => Some(p),
        _ => None,
    }
}

/// Pack-compacts `seg` now, as the cleaner would (it must be sealed).
pub(super) fn pack_now(s: &Store, seg: SegmentId) -> bool {
    assert!(s.arena.claim_for_compaction(seg), "segment {seg} sealed");
    s.pack_segment(seg, false)
}

/// Overwrites one key until the segment of `key` is sealed (so the
/// segment is left with its live items and dead filler).
pub(super) fn seal_segment_of(s: &Store, key: &[u8]) -> SegmentId {
    let seg = location(s, key).seg;
    let filler = vec![b'f'; 1000];
    while s.arena.segment(seg).state.load(Ordering::Relaxed) != crate::arena::STATE_SEALED {
        put(s, 0, StoreMode::Set, b"filler", 0, 0, &filler, 0);
    }
    seg
}

#[test]
fn cold_items_are_packed_hot_ones_stay_raw_and_every_item_is_the_same() {
    let s = store();
    let exp = s.clock().expiry(1000);
    let mut want = Vec::new();
    let mut kinds = Vec::new();
    for i in 0..40u32 {
        let key = format!("cold{i}");
        let value = text(500 + 100 * i as usize, i);
        let (st, cas) = put(&s, 0, StoreMode::Set, key.as_bytes(), i, exp, &value, 0);
        assert_eq!(st, StoreStatus::Stored);
        want.push((key.clone(), value, i, cas));
        kinds.push("cold");
    }
    for i in 0..5u32 {
        let key = format!("hot{i}");
        let value = text(3000, 100 + i);
        let (_, cas) = put(&s, 0, StoreMode::Set, key.as_bytes(), 0, 0, &value, 0);
        assert!(get(&s, key.as_bytes()).is_some());
        want.push((key, value, 0, cas));
        kinds.push("hot");
    }
    let raw = [
        ("small", text(60, 7)),
        ("noise", noise(4000, 3)),
        ("gz", [&[0x1f, 0x8b, 8, 0][..], &text(3000, 9)].concat()),
    ];
    for (key, value) in &raw {
        let (_, cas) = put(&s, 0, StoreMode::Set, key.as_bytes(), 5, 0, value, 0);
        want.push((key.to_string(), value.clone(), 5, cas));
        kinds.push(key);
    }
    let seg = location(&s, b"cold0").seg;
    assert!(want.iter().all(|w| location(&s, w.0.as_bytes()).seg == seg));
    seal_segment_of(&s, b"cold0");
    let bytes_before = s.stats().bytes;
    let exptimes: Vec<u32> = want
        .iter()
        .map(|w| s.get(w.0.as_bytes(), None, |it| it.exptime()))
        .map(|l| match l {
            Lookup::Hit(e) => e,
            other => panic!("{other:?}"),
        })
        .collect();
    // (The reads above made every item hot: make the cold ones cold again.)
    for (w, kind) in want.iter().zip(&kinds) {
        if *kind != "hot" {
            let loc = location(&s, w.0.as_bytes());
            s.arena.item(loc.seg, loc.offset).set_freq(0);
        }
    }
    assert!(pack_now(&s, seg));
    let st = s.stats();
    assert_eq!(st.pack_segments, 1, "{st:?}");
    assert_eq!(st.pack_items, 40, "{st:?}");
    assert_eq!(st.packed_items, 40, "{st:?}");
    assert!(st.packed_raw_bytes > 2 * st.packed_bytes, "{st:?}");
    assert!(st.bytes < bytes_before, "{st:?} (before: {bytes_before})");
    assert_eq!(st.pack_rejected, 1, "the noise: {st:?}");
    assert_eq!(st.pack_skipped, 1, "the gzip header: {st:?}");
    assert!(
        st.pack_cpu_us > 0 || cfg!(not(target_os = "linux")),
        "{st:?}"
    );
    assert_eq!(
        s.arena.segment(seg).state.load(Ordering::Relaxed),
        0,
        "freed"
    );
    for ((w, kind), exptime) in want.iter().zip(&kinds).zip(exptimes) {
        let key = w.0.as_bytes();
        let loc = location(&s, key);
        assert_ne!(loc.seg, seg, "{kind}: moved");
        assert_eq!(
            s.arena.segment(loc.seg).packed.load(Ordering::Relaxed),
            PACKED
        );
        let it = s.arena.item(loc.seg, loc.offset);
        assert_eq!(packed(&s, key), Some(*kind == "cold"), "{kind}");
        assert_eq!(
            it.raw_tried(),
            *kind == "noise" || *kind == "gz",
            "{kind}: raw-tried"
        );
        assert_eq!(it.exptime(), exptime, "{kind}: expiry");
        assert_eq!(
            get(&s, key),
            Some((w.1.clone(), w.2, w.3)),
            "{kind}: value, flags, CAS"
        );
    }
    // A CAS with a unique read before the pack still succeeds.
    assert_eq!(
        set(&s, StoreMode::Cas, b"cold3", b"new", want[3].3),
        StoreStatus::Stored
    );
    let st = s.stats();
    assert_eq!(st.packed_items, 39, "replaced: {st:?}");
    s.delete(b"cold4");
    assert_eq!(s.stats().packed_items, 38);
}

#[test]
fn values_that_do_not_compress_are_left_alone_and_soon_not_tried() {
    let s = store();
    // Segment after segment of noise (4 KiB values): the first is walked,
    // found not worth packing and left as it was; its class keeps
    // failing, so the next ones are mostly not tried.
    let mut want = Vec::new();
    for i in 0..1000u32 {
        let key = format!("n{i}");
        let value = noise(4000, u64::from(i));
        put(&s, 0, StoreMode::Set, key.as_bytes(), 0, 0, &value, 0);
        want.push((key, value));
    }
    let mut segs: Vec<SegmentId> = want
        .iter()
        .map(|w| location(&s, w.0.as_bytes()).seg)
        .collect();
    segs.dedup();
    segs.pop(); // still being written
    assert!(segs.len() >= 3, "{segs:?}");
    assert!(!pack_now(&s, segs[0]));
    let first = s.stats();
    assert_eq!(first.pack_segments_not_worth, 1, "{first:?}");
    assert_eq!(first.pack_items, 0);
    // Eight tries fail, then one value in 16 is tried.
    assert!(first.pack_rejected >= 8, "{first:?}");
    assert!(first.pack_skipped > 4 * first.pack_rejected, "{first:?}");
    assert_eq!(
        s.arena.segment(segs[0]).packed.load(Ordering::Relaxed),
        PACK_NOT_WORTH
    );
    assert_eq!(
        s.arena.segment(segs[0]).state.load(Ordering::Relaxed),
        2,
        "sealed again"
    );
    assert!(!pack_now(&s, segs[1]));
    let second = s.stats();
    let tried = second.pack_rejected - first.pack_rejected;
    let skipped = second.pack_skipped - first.pack_skipped;
    assert!(tried * 8 < skipped, "tried {tried}, skipped {skipped}");
    // Nothing moved, nothing lost.
    assert_eq!(second.compact_items_moved, 0);
    for (key, value) in &want {
        assert_eq!(get(&s, key.as_bytes()).map(|g| g.0).as_ref(), Some(value));
    }
}

/// Whether `key`'s item is stored packed, its eviction frequency and its
/// expiry, seen without a hit.
fn packed_freq_exptime(s: &Store, key: &[u8]) -> (bool, u8, u32) {
    let loc = location(s, key);
    let it = s.arena.item(loc.seg, loc.offset);
    (it.packed().is_some(), it.freq(), it.exptime())
}

#[test]
fn packed_items_hit_once_or_twice_are_kept_packed_and_a_hot_one_written_back_raw() {
    let s = store();
    let exp = s.clock().expiry(1000);
    // (key, flags, hits while packed): warm, warm, hot.
    let items: [(&[u8], u32, u8); 3] =
        [(b"once", 9, 1), (b"twice", 8, 2), (b"hot", 7, UNPACK_FREQ)];
    let mut want = Vec::new();
    for &(key, flags, _) in &items {
        let value = text(5000, flags);
        let (_, cas) = put(&s, 0, StoreMode::Set, key, flags, exp, &value, 0);
        want.push((value, flags, cas));
    }
    let seg = seal_segment_of(&s, b"once");
    assert!(items.iter().all(|i| location(&s, i.0).seg == seg));
    assert!(pack_now(&s, seg));
    // Hit while packed (the reads decode it).
    for (&(key, _, hits), w) in items.iter().zip(&want) {
        assert_eq!(packed_freq_exptime(&s, key), (true, 0, exp));
        for _ in 0..hits {
            assert_eq!(get(&s, key).as_ref(), Some(w));
        }
        assert_eq!(packed_freq_exptime(&s, key), (true, hits, exp));
    }
    // The pack's destination took its victim's place at the front of
    // small: S3-FIFO's next victim (sealed first: nothing writes it now).
    let seg = location(&s, b"once").seg;
    assert!(items.iter().all(|i| location(&s, i.0).seg == seg));
    assert_eq!(s.arena.claim_eviction_victim(), Some(seg));
    s.evict_segment(seg);
    s.arena.recycle(seg);
    // Kept (copied) from small: their frequency starts again from 0.
    for &(key, _, hits) in &items {
        assert_ne!(location(&s, key).seg, seg, "{key:?} kept");
        let packed = hits < UNPACK_FREQ;
        assert_eq!(packed_freq_exptime(&s, key), (packed, 0, exp), "{key:?}");
    }
    let st = s.stats();
    assert_eq!(
        (st.pack_kept_packed, st.pack_kept_raw, st.packed_items),
        (2, 1, 2),
        "{st:?}"
    );
    // Whole, with their flags and CAS uniques.
    for (&(key, _, _), w) in items.iter().zip(&want) {
        assert_eq!(get(&s, key).as_ref(), Some(w));
    }
}

/// Sets `n` keys of ~`len`-byte text through head 0, the cleaner's step
/// run after each as a background cleaner that keeps up would; returns
/// how many of them are still held.
fn fill_and_count(s: &Store, n: u32, len: usize) -> u32 {
    for i in 0..n {
        let key = format!("key{i}");
        let value = text(len + (i as usize % 64) * 16, i);
        let (st, _) = put(s, 0, StoreMode::Set, key.as_bytes(), i, 0, &value, 0);
        assert_eq!(st, StoreStatus::Stored);
        while s.clean_ahead() {}
    }
    let mut held = 0;
    for i in 0..n {
        let key = format!("key{i}");
        if let Some((v, flags, _)) = get(s, key.as_bytes()) {
            assert_eq!(v, text(len + (i as usize % 64) * 16, i), "{key}");
            assert_eq!(flags, i);
            held += 1;
        }
    }
    held
}

#[test]
fn a_cache_of_cold_text_holds_twice_the_items() {
    let limit = 16 << 20;
    let cold = Store::new(StoreConfig {
        memory_limit: limit,
        write_heads: 1,
        ..StoreConfig::default()
    });
    let off = Store::new(StoreConfig {
        memory_limit: limit,
        write_heads: 1,
        compression: Compression::Off,
        ..StoreConfig::default()
    });
    let n = 12_000;
    let (held_cold, held_off) = (
        fill_and_count(&cold, n, 4000),
        fill_and_count(&off, n, 4000),
    );
    let st = cold.stats();
    assert!(held_off < n / 2, "off holds {held_off}");
    assert!(
        held_cold > 2 * held_off,
        "cold {held_cold}, off {held_off}: {st:?}"
    );
    assert!(st.pack_segments > 0 && st.pack_items > 0, "{st:?}");
    assert_eq!(off.stats().pack_items, 0);
}

#[test]
fn with_no_segment_free_the_pass_packs_the_newest_segment() {
    // Writers that find no free segment evict the oldest: the pass,
    // behind them, packs the newest sealed segment instead, whose items
    // then stay a whole turn of the queue.
    let s = Store::new(StoreConfig {
        memory_limit: 16 << 20,
        write_heads: 1,
        ..StoreConfig::default()
    });
    let mut i = 0u32;
    while s.arena.free_segments() > 0 {
        let key = format!("key{i}");
        put(
            &s,
            0,
            StoreMode::Set,
            key.as_bytes(),
            0,
            0,
            &text(4000, i),
            0,
        );
        i += 1;
    }
    // (The write that took the last segment evicted the oldest one.)
    let first = (0..i)
        .find(|k| packed(&s, format!("key{k}").as_bytes()).is_some())
        .unwrap();
    let first = format!("key{first}");
    let oldest = location(&s, first.as_bytes()).seg;
    // The newest sealed segment: the one before the head's.
    let head = location(&s, format!("key{}", i - 1).as_bytes()).seg;
    let mut j = i - 1;
    while location(&s, format!("key{j}").as_bytes()).seg == head {
        j -= 1;
    }
    let newest = location(&s, format!("key{j}").as_bytes()).seg;
    assert!(s.clean_ahead());
    assert_eq!(packed(&s, format!("key{j}").as_bytes()), Some(true));
    assert_eq!(packed(&s, first.as_bytes()), Some(false));
    assert_eq!(location(&s, first.as_bytes()).seg, oldest);
    assert_ne!(location(&s, format!("key{j}").as_bytes()).seg, newest);
    assert_eq!(s.stats().pack_segments, 1);
}
