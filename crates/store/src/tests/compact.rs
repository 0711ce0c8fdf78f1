//! Compaction: dead space comes back before live items go, and a moved
//! item is the same item (value, flags, expiry, CAS unique, state bits,
//! frequency, access time).

use super::*;
use crate::arena::SegmentId;
use crate::index::Location;

/// Where `key`'s item is.
fn location(s: &Store, key: &[u8]) -> Location {
    let hash = hash_key(key);
    let table = s.shard(hash).read();
    table.find(&s.arena, key, hash).expect("linked").loc
}

/// Compacts `seg` now, as a writer would (it must be sealed).
fn compact_now(s: &Store, seg: SegmentId) -> bool {
    assert!(s.arena.claim_for_compaction(seg), "segment {seg} sealed");
    s.compact_segment(seg, false)
}

/// A value for key `i`, version `v`: sizes vary with both.
fn value(i: u32, v: u32) -> Vec<u8> {
    let len = 10 + ((i.wrapping_mul(7919) ^ v.wrapping_mul(104_729)) % 400) as usize;
    let mut out = format!("{i}:{v}:").into_bytes();
    out.resize(len.max(out.len()), b'a' + (v % 26) as u8);
    out
}

#[test]
fn churn_that_fits_evicts_nothing() {
    // 16 MiB; 20,000 keys of ~220 B (~4.5 MiB live) overwritten with new
    // sizes and deleted, 40x the memory written in all: every live key
    // stays, and compaction (not eviction) gives the dead space back.
    let s = shared_store(16 << 20, 2);
    let n = 20_000u32;
    let mut version = vec![0u32; n as usize];
    let mut live = vec![false; n as usize];
    let mut rng = 12345u64;
    for step in 0..600_000u32 {
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let i = ((rng >> 33) % u64::from(n)) as u32;
        let key = format!("key{i}");
        if step > 20_000 && (rng >> 20).is_multiple_of(10) {
            s.delete(key.as_bytes());
            live[i as usize] = false;
        } else {
            version[i as usize] += 1;
            let (st, _) = put(
                &s,
                (step % 2) as usize,
                StoreMode::Set,
                key.as_bytes(),
                0,
                0,
                &value(i, version[i as usize]),
                0,
            );
            assert_eq!(st, StoreStatus::Stored);
            live[i as usize] = true;
        }
    }
    let st = s.stats();
    assert_eq!(st.evictions, 0, "{st:?}");
    assert!(st.segments_compacted > 0, "{st:?}");
    let expected = live.iter().filter(|&&l| l).count() as u64;
    assert_eq!(st.curr_items, expected, "{st:?}");
    assert_eq!(st.live_bytes, st.bytes, "{st:?}");
    for i in 0..n {
        let key = format!("key{i}");
        let got = get(&s, key.as_bytes()).map(|(v, _, _)| v);
        if live[i as usize] {
            assert_eq!(got, Some(value(i, version[i as usize])), "{key}");
        } else {
            assert_eq!(got, None, "{key}");
        }
    }
}

#[test]
fn without_evictions_dead_space_is_reused() {
    // -M: 8 MiB, 2,000 values of 1 KiB overwritten 100 times over: the
    // dead versions are compacted away, never out of memory.
    let s = Store::new(StoreConfig {
        memory_limit: 8 << 20,
        evictions: false,
        write_heads: 1,
        ..StoreConfig::default()
    });
    for round in 0..100u32 {
        for i in 0..2_000u32 {
            let key = format!("k{i}");
            let v = vec![b'a' + (round % 26) as u8; 1000 + (i % 50) as usize];
            let (st, _) = put(&s, 0, StoreMode::Set, key.as_bytes(), 0, 0, &v, 0);
            assert_eq!(st, StoreStatus::Stored, "round {round} key {i}");
        }
    }
    let st = s.stats();
    assert_eq!(st.curr_items, 2_000);
    assert!(st.segments_compacted > 0, "{st:?}");
}

#[test]
fn a_moved_item_is_the_same_item() {
    let s = store();
    let exp = s.clock().expiry(1000);
    // Items of every kind, then enough filler to seal their segment.
    let (_, plain_cas) = put(&s, 0, StoreMode::Set, b"plain", 0, 0, b"v-plain", 0);
    let (_, flagged_cas) = put(&s, 0, StoreMode::Set, b"flagged", 77, exp, b"v-flag", 0);
    let hit = b"hot";
    put(&s, 0, StoreMode::Set, hit, 0, 0, b"v-hot", 0);
    for _ in 0..3 {
        assert!(get(&s, hit).is_some());
    }
    let bin = Write {
        mode: StoreMode::Set,
        key: b"binary",
        value: b"v-bin",
        binary_key: true,
        new_cas: 424_242,
        ..Write::default()
    };
    assert_eq!(s.store(0, &bin).0, StoreStatus::Stored);
    // A stale item (md I).
    put(&s, 0, StoreMode::Set, b"stale", 0, 0, b"v-stale", 0);
    let r = s.remove(
        0,
        b"stale",
        &Removal {
            mark_stale: true,
            ..Removal::default()
        },
    );
    assert!(matches!(r, RemoveResult::Kept), "{r:?}");
    let stale_cas = get(&s, b"stale").unwrap().2;
    let before: Vec<_> = [&b"plain"[..], b"flagged", b"hot", b"binary", b"stale"]
        .iter()
        .map(|k| {
            let loc = location(&s, k);
            let it = s.arena.item(loc.seg, loc.offset);
            (loc, it.state(), it.exptime(), s.base_atime(loc, it))
        })
        .collect();
    let seg = before[0].0.seg;
    assert!(before.iter().all(|b| b.0.seg == seg));
    // Fill the rest of the segment with items that are overwritten.
    let filler = vec![b'f'; 1000];
    for _ in 0..1200 {
        put(&s, 0, StoreMode::Set, b"filler", 0, 0, &filler, 0);
    }
    assert_ne!(location(&s, b"filler").seg, seg);
    assert!(compact_now(&s, seg));
    let st = s.stats();
    assert_eq!(st.segments_compacted, 1);
    assert_eq!(st.compact_items_moved, 5, "{st:?}");
    for (k, b) in [&b"plain"[..], b"flagged", b"hot", b"binary", b"stale"]
        .iter()
        .zip(&before)
    {
        let loc = location(&s, k);
        assert_ne!(loc, b.0, "{k:?} moved");
        let it = s.arena.item(loc.seg, loc.offset);
        // (The copy has the ext byte, bit 5, where it stores its unique.)
        assert_eq!(
            it.state() & !0x20,
            b.1 & !0x20,
            "{k:?}: state bits and frequency"
        );
        assert_eq!(it.exptime(), b.2, "{k:?}: expiry");
        assert_eq!(s.base_atime(loc, it), b.3, "{k:?}: access time");
    }
    assert_eq!(get(&s, b"plain"), Some((b"v-plain".to_vec(), 0, plain_cas)));
    assert_eq!(
        get(&s, b"flagged"),
        Some((b"v-flag".to_vec(), 77, flagged_cas))
    );
    assert_eq!(get(&s, b"binary").map(|g| g.2), Some(424_242));
    assert_eq!(get(&s, b"stale").map(|g| g.2), Some(stale_cas));
    // A CAS with the unique read before the move still succeeds.
    assert_eq!(
        set(&s, StoreMode::Cas, b"plain", b"v2", plain_cas),
        StoreStatus::Stored
    );
    // The moved items' segment went back to be reused.
    assert_eq!(s.arena.segment(seg).state.load(Ordering::Relaxed), 0);
}

#[test]
fn compaction_under_concurrent_readers_and_writers() {
    // Four writers, each owning its keys, overwrite and delete them in a
    // store their data fits in, while two readers get keys of all of them:
    // every value read is whole and its key's; at the end every live key
    // has its last value, and nothing was evicted.
    let s = shared_store(12 << 20, 4);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2u32)
        .map(|r| {
            let s = s.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut hits = 0u64;
                let mut i = r;
                while !stop.load(Ordering::Relaxed) {
                    i = i.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    let k = (i >> 8) % 16_000;
                    let key = format!("key{k}");
                    if let Some((v, flags, _)) = get(&s, key.as_bytes()) {
                        let prefix = format!("{k}:{flags}:");
                        assert!(v.starts_with(prefix.as_bytes()), "{key}");
                        assert_eq!(v, value(k, flags), "{key}");
                        hits += 1;
                    }
                }
                hits
            })
        })
        .collect();
    let writers: Vec<_> = (0..4u32)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut state = vec![None; 4_000];
                let mut rng = u64::from(t) + 1;
                for step in 0..150_000u32 {
                    rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let j = ((rng >> 33) % 4_000) as usize;
                    let k = j as u32 * 4 + t;
                    let key = format!("key{k}");
                    if (rng >> 20).is_multiple_of(8) {
                        s.delete(key.as_bytes());
                        state[j] = None;
                    } else {
                        let v = step + 1;
                        let (st, _) = put(
                            &s,
                            t as usize,
                            StoreMode::Set,
                            key.as_bytes(),
                            v,
                            0,
                            &value(k, v),
                            0,
                        );
                        assert_eq!(st, StoreStatus::Stored);
                        state[j] = Some(v);
                    }
                }
                state
            })
        })
        .collect();
    let states: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let hits: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(hits > 1000, "{hits}");
    let st = s.stats();
    assert_eq!(st.evictions, 0, "{st:?}");
    assert!(st.segments_compacted > 0, "{st:?}");
    let mut live = 0;
    for (t, state) in states.iter().enumerate() {
        for (j, v) in state.iter().enumerate() {
            let k = j as u32 * 4 + t as u32;
            let got = get(&s, format!("key{k}").as_bytes());
            match v {
                Some(v) => {
                    live += 1;
                    assert_eq!(got, Some((value(k, *v), *v, got.as_ref().unwrap().2)));
                }
                None => assert_eq!(got, None),
            }
        }
    }
    assert_eq!(st.curr_items, live);
}

#[test]
fn a_full_cache_of_live_items_still_evicts() {
    // Nothing is dead: writers make room by eviction, as before.
    let s = Store::new(StoreConfig {
        memory_limit: 4 << 20,
        ..StoreConfig::default()
    });
    fill(&s, "key", 20_000, 0, &[b'v'; 1000]);
    let st = s.stats();
    assert!(st.evictions > 0, "{st:?}");
    assert_eq!(st.segments_compacted, 0, "{st:?}");
    assert!(st.segments_evicted > 0, "{st:?}");
    assert!(st.evicted_live_bytes > st.evictions * 1000, "{st:?}");
}
