//! Eviction and reclamation: what is evicted, kept and reclaimed.

use super::*;

#[test]
fn evicts_oldest_when_full() {
    let s = Store::new(StoreConfig {
        memory_limit: 4 << 20,
        ..StoreConfig::default()
    });
    let value = vec![b'v'; 1000];
    fill(&s, "key", 20_000, 0, &value);
    let st = s.stats();
    assert!(st.evictions > 0);
    assert!(st.curr_items > 1000 && st.curr_items < 20_000, "{st:?}");
    assert!(st.bytes <= 4 << 20);
    // the newest keys survive, the oldest are gone
    assert!(get(&s, b"key19999").is_some());
    assert!(get(&s, b"key0").is_none());
    assert_eq!(st.curr_items + st.evictions, 20_000);
}

#[test]
fn no_evictions_means_out_of_memory() {
    let s = Store::new(StoreConfig {
        memory_limit: 2 << 20,
        evictions: false,
        ..StoreConfig::default()
    });
    let value = vec![b'v'; 10_000];
    let mut oom = false;
    for i in 0..1000u32 {
        let key = format!("key{i}");
        match put(&s, 0, StoreMode::Set, key.as_bytes(), 0, 0, &value, 0).0 {
            StoreStatus::Stored => {}
            StoreStatus::OutOfMemory => {
                oom = true;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(oom);
    assert_eq!(s.stats().evictions, 0);
    assert!(get(&s, b"key0").is_some());
}

#[test]
fn reclaimer_frees_expired_items() {
    let s = Store::new(StoreConfig {
        memory_limit: 8 << 20,
        ..StoreConfig::default()
    });
    let value = vec![b'v'; 1000];
    let exp = s.clock().expiry(1);
    fill(&s, "k", 5000, exp, &value);
    s.clock().advance_for_tests(2);
    let sealed = s.sealed_segments();
    assert!(sealed > 0);
    for c in 0..sealed * 2 {
        s.reclaim_step(c);
    }
    let st = s.stats();
    assert!(st.reclaimed > 0);
    assert_eq!(st.expired_unfetched, st.reclaimed);
}

#[test]
fn reclaimer_skips_segments_that_cannot_hold_stale_items_but_not_flushed_ones() {
    let s = Store::new(StoreConfig {
        memory_limit: 8 << 20,
        ..StoreConfig::default()
    });
    let value = vec![b'v'; 1000];
    fill(&s, "k", 5000, 0, &value);
    let sealed = s.sealed_segments();
    assert!(sealed > 0);
    for c in 0..sealed * 2 {
        assert!(s.reclaim_step(c), "a sealed segment was there to claim");
    }
    assert_eq!(s.stats().reclaimed, 0);
    assert_eq!(s.stats().curr_items, 5000);
    // After a flush the same segments hold only flushed items.
    s.flush_all(0);
    for c in 0..sealed * 2 {
        s.reclaim_step(c);
    }
    assert!(s.stats().reclaimed > 0);
}

#[test]
fn wholly_expired_segments_are_freed_from_their_headers() {
    let s = Store::new(StoreConfig {
        memory_limit: 16 << 20,
        ..StoreConfig::default()
    });
    let value = vec![b'v'; 1000];
    let exp = s.clock().expiry(1);
    // Short-lived items, then long-lived ones in later segments.
    fill(&s, "t", 5000, exp, &value);
    fill(&s, "p", 2000, 0, &value);
    assert!(get(&s, b"t1").is_some());
    assert_eq!(s.reclaim_expired_segments(), 0, "nothing has expired yet");
    s.clock().advance_for_tests(2);
    let freed = s.reclaim_expired_segments();
    assert!(freed >= 3, "{freed} segments freed");
    let st = s.stats();
    assert!(st.reclaimed >= freed as u64 * 900, "{st:?}");
    assert_eq!(st.expired_unfetched + 1, st.reclaimed, "t1 was fetched");
    // Immortal items were not touched.
    assert!(get(&s, b"p0").is_some() && get(&s, b"p1999").is_some());
    assert_eq!(s.reclaim_expired_segments(), 0);
}

#[test]
fn eviction_keeps_hit_items_and_resists_a_scan() {
    // 8 segments: small is 1 of them, main the rest.
    let s = Store::new(StoreConfig {
        memory_limit: 8 << 20,
        write_heads: 1,
        ..StoreConfig::default()
    });
    let value = vec![b'v'; 1000];
    fill(&s, "hot", 3000, 0, &value);
    let Lookup::Hit(cas_before) = s.get(b"hot7", None, |it| it.cas()) else {
        panic!("hot7 missing");
    };
    // Hit the hot set a few times, then scan far more than fits.
    for _ in 0..3 {
        for i in 0..3000u32 {
            assert!(get(&s, format!("hot{i}").as_bytes()).is_some(), "hot{i}");
        }
    }
    fill(&s, "scan", 40_000, 0, &value);
    let kept = (0..3000u32)
        .filter(|i| get(&s, format!("hot{i}").as_bytes()).is_some())
        .count();
    assert!(
        kept > 2700,
        "only {kept} of 3000 hot items survived the scan"
    );
    assert!(s.stats().evictions > 30_000);
    // A kept (copied) item keeps its CAS unique.
    if let Lookup::Hit(cas) = s.get(b"hot7", None, |it| it.cas()) {
        assert_eq!(cas, cas_before);
    }
}

#[test]
fn a_one_segment_cache_keeps_evicting() {
    let s = Store::new(StoreConfig {
        memory_limit: 1 << 20,
        write_heads: 1,
        ..StoreConfig::default()
    });
    let value = vec![b'v'; 1000];
    fill(&s, "k", 5000, 0, &value);
    assert!(get(&s, b"k4999").is_some());
    assert!(s.stats().evictions > 0);
}

/// `stats items`' figures: items per queue add up to `curr_items`, the
/// oldest access moves with the clock and with hits, and the evictor's
/// keeps, evictions with an expiry and the last evicted item's idle time
/// are counted.
#[test]
fn queue_figures_ages_and_eviction_counts() {
    let s = Store::new(StoreConfig {
        memory_limit: 4 << 20,
        ..StoreConfig::default()
    });
    let value = vec![b'v'; 1000];
    fill(&s, "old", 500, 0, &value);
    let q = s.queues();
    assert_eq!(q.small_items + q.main_items, 500);
    let written = q.small_oldest.expect("an oldest item");
    s.clock().advance_for_tests(7);
    let now = s.clock().now();
    assert_eq!(s.queues().small_oldest, Some(written));
    assert!(now - written >= 7);
    // Hit half of them, then push everything through small: the hit ones
    // are kept in main, the others evicted.
    for i in 0..250 {
        assert!(get(&s, format!("old{i}").as_bytes()).is_some());
    }
    let exp = s.clock().expiry(10_000);
    fill(&s, "new", 8_000, exp, &value);
    let st = s.stats();
    assert!(st.evictions > 0, "{st:?}");
    assert!(st.moves_to_warm > 0, "{st:?}");
    assert!(st.evicted_nonzero > 0, "{st:?}");
    assert!(st.evicted_nonzero <= st.evictions);
    let q = s.queues();
    assert_eq!(q.small_items + q.main_items, st.curr_items, "{q:?} {st:?}");
    assert!(q.main_items > 0, "{q:?}");
    // The last item evicted was written after the clock moved: idle < 7 s.
    assert!(st.evicted_time < 7, "{st:?}");
    s.reset_stats();
    assert_eq!(s.stats().moves_to_warm, 0);
}
