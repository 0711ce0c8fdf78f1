//! Unit tests of the engine's semantics, eviction and concurrency.

use super::*;
use std::sync::Arc;

/// `Store::store` with positional arguments, for brevity.
#[allow(clippy::too_many_arguments)]
fn put(
    s: &Store,
    head: usize,
    mode: StoreMode,
    key: &[u8],
    flags: u32,
    exptime: u32,
    value: &[u8],
    cas: u64,
) -> (StoreStatus, u64) {
    s.store(
        head,
        &Write {
            mode,
            key,
            flags,
            exptime,
            value,
            cas,
            ..Write::default()
        },
    )
}

fn store() -> Store {
    Store::new(StoreConfig::default())
}

/// A store of `memory_limit` bytes with `heads` write heads, to share
/// between threads.
fn shared_store(memory_limit: usize, heads: usize) -> Arc<Store> {
    Arc::new(Store::new(StoreConfig {
        memory_limit,
        write_heads: heads,
        ..StoreConfig::default()
    }))
}

fn get(s: &Store, key: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    match s.get(key, None, |it| (it.value().to_vec(), it.flags(), it.cas())) {
        Lookup::Hit(v) => Some(v),
        _ => None,
    }
}

fn set(s: &Store, mode: StoreMode, key: &[u8], value: &[u8], cas: u64) -> StoreStatus {
    put(s, 0, mode, key, 0, 0, value, cas).0
}

/// Sets `{prefix}0` .. `{prefix}{n-1}` to `value` through head 0, each
/// of which must be stored.
fn fill(s: &Store, prefix: &str, n: u32, exptime: u32, value: &[u8]) {
    for i in 0..n {
        let key = format!("{prefix}{i}");
        let (status, _) = put(s, 0, StoreMode::Set, key.as_bytes(), 0, exptime, value, 0);
        assert_eq!(status, StoreStatus::Stored, "{key}");
    }
}

#[test]
fn set_get_overwrite_delete() {
    let s = store();
    assert_eq!(get(&s, b"a"), None);
    assert_eq!(
        put(&s, 0, StoreMode::Set, b"a", 5, 0, b"one", 0).0,
        StoreStatus::Stored
    );
    let (v, f, c1) = get(&s, b"a").unwrap();
    assert_eq!((v.as_slice(), f), (&b"one"[..], 5));
    assert_eq!(
        set(&s, StoreMode::Set, b"a", b"two", 0),
        StoreStatus::Stored
    );
    let (v, _, c2) = get(&s, b"a").unwrap();
    assert_eq!(v, b"two");
    assert!(c2 > c1);
    assert_eq!(s.stats().curr_items, 1);
    assert!(s.delete(b"a"));
    assert!(!s.delete(b"a"));
    assert_eq!(get(&s, b"a"), None);
    assert_eq!(s.stats().curr_items, 0);
    assert_eq!(s.stats().bytes, 0);
}

#[test]
fn add_replace_cas() {
    let s = store();
    assert_eq!(
        set(&s, StoreMode::Replace, b"k", b"x", 0),
        StoreStatus::NotStored
    );
    assert_eq!(set(&s, StoreMode::Add, b"k", b"x", 0), StoreStatus::Stored);
    assert_eq!(
        set(&s, StoreMode::Add, b"k", b"y", 0),
        StoreStatus::NotStored
    );
    assert_eq!(
        set(&s, StoreMode::Replace, b"k", b"z", 0),
        StoreStatus::Stored
    );
    let (_, _, cas) = get(&s, b"k").unwrap();
    assert_eq!(
        set(&s, StoreMode::Cas, b"k", b"c", cas + 1),
        StoreStatus::Exists
    );
    assert_eq!(
        set(&s, StoreMode::Cas, b"k", b"c", cas),
        StoreStatus::Stored
    );
    assert_eq!(
        set(&s, StoreMode::Cas, b"k", b"d", cas),
        StoreStatus::Exists
    );
    assert_eq!(
        set(&s, StoreMode::Cas, b"missing", b"d", 1),
        StoreStatus::NotFound
    );
    assert_eq!(get(&s, b"k").unwrap().0, b"c");
}

#[test]
fn append_prepend_keep_flags() {
    let s = store();
    assert_eq!(
        set(&s, StoreMode::Append, b"k", b"x", 0),
        StoreStatus::NotStored
    );
    put(&s, 0, StoreMode::Set, b"k", 42, 0, b"mid", 0);
    assert_eq!(
        put(&s, 0, StoreMode::Append, b"k", 7, 0, b"-end", 0).0,
        StoreStatus::Stored
    );
    assert_eq!(
        put(&s, 0, StoreMode::Prepend, b"k", 9, 0, b"start-", 0).0,
        StoreStatus::Stored
    );
    let (v, f, _) = get(&s, b"k").unwrap();
    assert_eq!((v.as_slice(), f), (&b"start-mid-end"[..], 42));
    assert_eq!(s.stats().curr_items, 1);
}

#[test]
fn incr_decr_like_memcached() {
    let s = store();
    assert_eq!(s.arith(0, b"n", true, 1), ArithResult::NotFound);
    set(&s, StoreMode::Set, b"n", b"99", 0);
    assert_eq!(s.arith(0, b"n", true, 1), ArithResult::Value(100));
    assert_eq!(get(&s, b"n").unwrap().0, b"100");
    assert_eq!(s.arith(0, b"n", false, 1), ArithResult::Value(99));
    // in place: padded with a space, length kept
    assert_eq!(get(&s, b"n").unwrap().0, b"99 ");
    assert_eq!(s.arith(0, b"n", false, 1000), ArithResult::Value(0));
    set(&s, StoreMode::Set, b"n", b"18446744073709551615", 0);
    assert_eq!(s.arith(0, b"n", true, 2), ArithResult::Value(1));
    set(&s, StoreMode::Set, b"t", b"abc", 0);
    assert_eq!(s.arith(0, b"t", true, 1), ArithResult::NonNumeric);
    set(&s, StoreMode::Set, b"e", b"", 0);
    assert_eq!(s.arith(0, b"e", true, 1), ArithResult::NonNumeric);
}

#[test]
fn expiry_and_touch() {
    let s = store();
    let now = s.clock().now();
    put(&s, 0, StoreMode::Set, b"k", 0, s.clock().expiry(2), b"v", 0);
    put(
        &s,
        0,
        StoreMode::Set,
        b"gone",
        0,
        s.clock().expiry(-1),
        b"v",
        0,
    );
    assert!(get(&s, b"k").is_some());
    assert_eq!(s.get(b"gone", None, |_| ()), Lookup::Expired);
    assert_eq!(s.touch(b"k", now + 10), Lookup::Hit(()));
    s.clock().advance_for_tests(5);
    assert!(get(&s, b"k").is_some(), "touch extended the expiry");
    s.clock().advance_for_tests(10);
    assert_eq!(s.get(b"k", None, |_| ()), Lookup::Expired);
    assert_eq!(s.get(b"k", None, |_| ()), Lookup::Miss);
    assert_eq!(s.stats().curr_items, 0);
}

#[test]
fn flush_all_now_and_later() {
    let s = store();
    set(&s, StoreMode::Set, b"a", b"1", 0);
    s.flush_all(0);
    assert_eq!(s.get(b"a", None, |_| ()), Lookup::Flushed);
    set(&s, StoreMode::Set, b"b", b"2", 0);
    assert!(get(&s, b"b").is_some(), "items set after flush_all live");
    s.flush_all(2);
    assert!(get(&s, b"b").is_some());
    s.clock().advance_for_tests(3);
    assert_eq!(s.get(b"b", None, |_| ()), Lookup::Flushed);
}

#[test]
fn too_large_matches_memcached_accounting() {
    let s = store();
    let max = 1 << 20;
    // memcached: 48 + key + 1 + value + 2 + 8 (cas) <= item_size_max
    let fits = max - 48 - 1 - 1 - 2 - 8;
    assert!(!s.too_large(1, 0, fits));
    assert!(s.too_large(1, 0, fits + 1));
    assert!(s.too_large(1, 1, fits), "non-zero flags cost 4 bytes");
    let big = vec![b'x'; fits];
    assert_eq!(
        put(&s, 0, StoreMode::Set, b"b", 0, 0, &big, 0).0,
        StoreStatus::Stored
    );
    assert_eq!(get(&s, b"b").unwrap().0.len(), fits);
}

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
fn parallel_writers_and_readers() {
    let s = Arc::new(Store::new(StoreConfig {
        memory_limit: 16 << 20,
        ..StoreConfig::default()
    }));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    let key = format!("t{t}-{}", i % 3000);
                    let value = format!("value-{t}-{i}-{}", "x".repeat((i % 200) as usize));
                    put(
                        &s,
                        t,
                        StoreMode::Set,
                        key.as_bytes(),
                        i,
                        0,
                        value.as_bytes(),
                        0,
                    );
                    if let Lookup::Hit((v, f)) =
                        s.get(key.as_bytes(), None, |it| (it.value().to_vec(), it.flags()))
                    {
                        // whatever we read must be a complete value some writer stored
                        let text = String::from_utf8(v).unwrap();
                        assert!(text.starts_with(&format!("value-{t}-{f}-")), "{text}");
                    }
                    if i % 7 == 0 {
                        s.arith(t, key.as_bytes(), true, 1);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = s.stats();
    assert!(st.curr_items <= 12_000);
}

#[test]
fn fetch_creates_a_placeholder_once_and_reports_pre_hit_state() {
    let s = store();
    let create = Fetch {
        record_hit: true,
        create: Some(Placeholder {
            exptime: 0,
            cas: 0,
            binary_key: false,
        }),
        ..Fetch::default()
    };
    let first = s.fetch(0, b"k", &create, |it, created| (created, it.fetched()));
    assert_eq!(first, Lookup::Hit((true, false)));
    let second = s.fetch(0, b"k", &create, |it, created| (created, it.fetched()));
    assert_eq!(second, Lookup::Hit((false, true)));
    let hit = Fetch {
        record_hit: true,
        ..Fetch::default()
    };
    assert_eq!(s.fetch(0, b"nope", &hit, |_, _| ()), Lookup::Miss);
}

#[test]
fn cas_if_older_stores_an_older_unique_as_stale() {
    let s = store();
    put(&s, 0, StoreMode::Set, b"k", 0, 0, b"v1", 0);
    let (_, cas) = put(&s, 0, StoreMode::Set, b"k", 0, 0, b"v2", 0);
    let w = Write {
        mode: StoreMode::Cas,
        key: b"k",
        value: b"v3",
        cas: cas - 1,
        stale_if_older: true,
        ..Write::default()
    };
    assert_eq!(s.store(0, &w).0, StoreStatus::Stored);
    let stale = s.fetch(0, b"k", &Fetch::default(), |it, _| {
        (it.stale(), it.value().to_vec())
    });
    assert_eq!(stale, Lookup::Hit((true, b"v3".to_vec())));
    let w = Write {
        stale_if_older: false,
        ..w
    };
    assert_eq!(s.store(0, &w).0, StoreStatus::Exists);
}

#[test]
fn remove_marks_stale_and_checks_cas() {
    let s = store();
    let (_, cas) = put(&s, 0, StoreMode::Set, b"k", 0, 0, b"v", 0);
    let wrong = Removal {
        if_cas: Some(cas + 1),
        ..Removal::default()
    };
    assert_eq!(s.remove(0, b"k", &wrong), RemoveResult::Exists);
    let inval = Removal {
        mark_stale: true,
        new_cas: 777,
        ..Removal::default()
    };
    assert_eq!(s.remove(0, b"k", &inval), RemoveResult::Kept);
    let seen = s.fetch(0, b"k", &Fetch::default(), |it, _| (it.stale(), it.cas()));
    assert_eq!(seen, Lookup::Hit((true, 777)));
    let empty = Removal {
        drop_value: true,
        ..Removal::default()
    };
    assert_eq!(s.remove(0, b"k", &empty), RemoveResult::Kept);
    let len = s.fetch(0, b"k", &Fetch::default(), |it, _| it.value_len());
    assert_eq!(len, Lookup::Hit(0));
    assert_eq!(
        s.remove(0, b"k", &Removal::default()),
        RemoveResult::Removed
    );
    assert_eq!(
        s.remove(0, b"k", &Removal::default()),
        RemoveResult::NotFound
    );
}

#[test]
fn counter_creates_compares_and_sets_cas() {
    let s = store();
    let create = CounterUpdate {
        create: Some((5, 0)),
        ..CounterUpdate::default()
    };
    let r = s.counter(0, b"n", true, 1, &create);
    assert!(matches!(
        r,
        CounterResult::Done {
            value: 5,
            created: true,
            ..
        }
    ));
    let explicit = CounterUpdate {
        new_cas: 4242,
        ..CounterUpdate::default()
    };
    let r = s.counter(0, b"n", true, 1, &explicit);
    assert!(matches!(
        r,
        CounterResult::Done {
            value: 6,
            cas: 4242,
            ..
        }
    ));
    let stale = CounterUpdate {
        if_cas: 1,
        ..CounterUpdate::default()
    };
    assert_eq!(s.counter(0, b"n", false, 1, &stale), CounterResult::Exists);
    assert_eq!(
        s.counter(0, b"zz", true, 1, &CounterUpdate::default()),
        CounterResult::NotFound
    );
}

/// Stores `k0` .. `k{n-1}`, key `ki` with flags `i` and the value
/// `ki-i-` followed by `i` bytes of `y` (the shape the concurrency tests
/// check what they read against).
fn preload_numbered(s: &Store, n: u32) {
    for i in 0..n {
        let key = format!("k{i}");
        let value = format!("{key}-{i}-{}", "y".repeat(i as usize));
        put(
            s,
            0,
            StoreMode::Set,
            key.as_bytes(),
            i,
            0,
            value.as_bytes(),
            0,
        );
    }
}

#[test]
fn eviction_copies_under_concurrent_readers_and_writers() {
    // A small store (8 segments) under 4 threads sharing keys: evictions
    // copy hit items while others read, overwrite, touch and delete them.
    // Every value read must be whole and belong to its key.
    let s = shared_store(8 << 20, 4);
    preload_numbered(&s, 500);
    let threads: Vec<_> = (0..4usize)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut hits = 0u32;
                for i in 0..60_000u32 {
                    let k = (i.wrapping_mul(2_654_435_761) >> 8) % 20_000;
                    let key = format!("key{k}");
                    let body = format!("{key}:{}", "y".repeat((k % 300) as usize));
                    match i % 10 {
                        0..=5 => {
                            if let Lookup::Hit(v) =
                                s.get(key.as_bytes(), None, |it| it.value().to_vec())
                            {
                                assert_eq!(v, body.as_bytes(), "{key}");
                                hits += 1;
                            } else {
                                put(
                                    &s,
                                    t,
                                    StoreMode::Set,
                                    key.as_bytes(),
                                    0,
                                    0,
                                    body.as_bytes(),
                                    0,
                                );
                            }
                        }
                        6 => {
                            let exp = s.clock().expiry(100);
                            s.touch(key.as_bytes(), exp);
                        }
                        7 => {
                            s.delete(key.as_bytes());
                        }
                        _ => {
                            put(
                                &s,
                                t,
                                StoreMode::Set,
                                key.as_bytes(),
                                0,
                                0,
                                body.as_bytes(),
                                0,
                            );
                        }
                    }
                }
                hits
            })
        })
        .collect();
    let hits: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(hits > 10_000, "{hits}");
    let st = s.stats();
    assert!(st.evictions > 0, "{st:?}");
}

#[test]
fn cas_uniques_grow_per_key_across_write_heads() {
    let s = Store::new(StoreConfig {
        memory_limit: 16 << 20,
        write_heads: 2,
        ..StoreConfig::default()
    });
    // Head 0 takes the first segment, head 1 the second (a larger
    // sequence), so a version written through head 0 after one written
    // through head 1 sits in the older segment.
    put(&s, 0, StoreMode::Set, b"a", 0, 0, b"1", 0);
    let (_, first) = put(&s, 1, StoreMode::Set, b"k", 0, 0, b"v1", 0);
    let (_, second) = put(&s, 0, StoreMode::Set, b"k", 0, 0, b"v2", 0);
    assert!(second > first, "{second} after {first}");
    assert_eq!(get(&s, b"k").map(|g| g.2), Some(second));
    // ms I: a CAS older than the item's stores, marked stale.
    let w = Write {
        mode: StoreMode::Cas,
        key: b"k",
        value: b"v3",
        cas: first,
        stale_if_older: true,
        ..Write::default()
    };
    assert_eq!(s.store(1, &w).0, StoreStatus::Stored);
    // append and incr through the other head keep growing.
    let (_, third) = put(&s, 0, StoreMode::Append, b"k", 0, 0, b"!", 0);
    let before = get(&s, b"k").map(|g| g.2).unwrap();
    assert_eq!(third, before);
    put(&s, 1, StoreMode::Set, b"n", 0, 0, b"5", 0);
    let n1 = get(&s, b"n").unwrap().2;
    assert_eq!(s.arith(0, b"n", true, 1), ArithResult::Value(6));
    assert!(get(&s, b"n").unwrap().2 > n1);
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

#[test]
fn get_many_answers_every_key_in_order() {
    let s = store();
    // Keys 0..60, every third missing, one expired, one flushed-only-later.
    for i in 0..60u32 {
        if i % 3 != 0 {
            let key = format!("m{i}");
            put(
                &s,
                0,
                StoreMode::Set,
                key.as_bytes(),
                i,
                0,
                format!("v{i}").as_bytes(),
                0,
            );
        }
    }
    let keys: Vec<String> = (0..60)
        .map(|i| format!("m{i}"))
        .chain(["m1".to_string()])
        .collect();
    let mut seen = Vec::new();
    s.get_many(keys.iter().map(|k| k.as_bytes()), |key, r| {
        let k = String::from_utf8(key.to_vec()).unwrap();
        match r {
            Lookup::Hit(it) => {
                assert_eq!(it.value(), format!("v{}", &k[1..]).as_bytes());
                assert_eq!(it.flags().to_string(), k[1..]);
                seen.push((k, true));
            }
            Lookup::Miss => seen.push((k, false)),
            _ => panic!("{k}: expired or flushed"),
        }
        true
    });
    assert_eq!(seen.len(), 61);
    for (i, (k, hit)) in seen.iter().enumerate().take(60) {
        assert_eq!(k, &format!("m{i}"));
        assert_eq!(*hit, i % 3 != 0, "{k}");
    }
    assert_eq!(seen[60], ("m1".to_string(), true));
    // Stops when told to.
    let mut n = 0;
    s.get_many(keys.iter().map(|k| k.as_bytes()), |_, _| {
        n += 1;
        n < 5
    });
    assert_eq!(n, 5);
    // Hits count like single gets (fetched), and misses of expired items
    // say so.
    let e = s.clock().expiry(-1);
    put(&s, 0, StoreMode::Set, b"gone", 0, e, b"x", 0);
    let mut kinds = Vec::new();
    s.get_many([&b"gone"[..], b"m1"].into_iter(), |_, r| {
        kinds.push(matches!(r, Lookup::Hit(_)));
        true
    });
    assert_eq!(kinds, [false, true]);
}

#[test]
fn lock_free_gets_never_see_reused_memory() {
    // Two segments' worth of memory, rewritten over and over by two writers
    // while two readers get (singly and in batches) without locks: every
    // hit must be a whole value of its own key, with its own flags — a
    // reader that kept reading a segment after it was recycled would see
    // another key's bytes.
    let s = shared_store(4 << 20, 2);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let body = |k: u32, round: u32| {
        let len = 40 + (k * 7 + round) % 900;
        let mut v = format!("{k}:{round}:").into_bytes();
        v.resize(len as usize, b'a' + (k % 26) as u8);
        v
    };
    let check = move |key: &[u8], it: &ItemView<'_>| {
        let k: u32 = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
        let v = it.value();
        assert_eq!(it.flags(), k, "flags of {k}");
        let text = std::str::from_utf8(v).unwrap();
        let mut parts = text.splitn(3, ':');
        assert_eq!(parts.next().unwrap(), k.to_string(), "value of {k}");
        let round: u32 = parts.next().unwrap().parse().unwrap();
        assert_eq!(v, &body(k, round)[..], "value of {k}");
    };
    let writers: Vec<_> = (0..2usize)
        .map(|t| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    for k in (t as u32..20_000).step_by(2) {
                        let key = format!("k{k}");
                        put(
                            &s,
                            t,
                            StoreMode::Set,
                            key.as_bytes(),
                            k,
                            0,
                            &body(k, round),
                            0,
                        );
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u32)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let keys: Vec<String> = (0..20_000).map(|k| format!("k{k}")).collect();
                let mut hits = 0u64;
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                while std::time::Instant::now() < deadline {
                    for (i, chunk) in keys.chunks(24).enumerate() {
                        if (i as u32 + t).is_multiple_of(2) {
                            s.get_many(chunk.iter().map(|k| k.as_bytes()), |key, r| {
                                if let Lookup::Hit(it) = r {
                                    check(key, &it);
                                    hits += 1;
                                }
                                true
                            });
                        } else {
                            for key in chunk {
                                if let Lookup::Hit(()) =
                                    s.get(key.as_bytes(), None, |it| check(key.as_bytes(), &it))
                                {
                                    hits += 1;
                                }
                            }
                        }
                    }
                }
                hits
            })
        })
        .collect();
    let hits: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(hits > 1000, "{hits}");
    assert!(s.stats().evictions > 10_000, "{:?}", s.stats());
}

#[test]
fn lock_free_gets_of_resident_keys_never_miss() {
    // Readers get keys that stay stored while a writer fills the same
    // buckets with other keys (moving entries, growing every table many
    // times) and deletes them again: a lookup that trusted a bucket read
    // mid-change, or an outgrown table, would miss a resident key.
    let s = shared_store(256 << 20, 2);
    fill(&s, "stay", 2000, 0, b"resident");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) && n < 3_000_000 {
                let key = format!("churn{n}");
                put(&s, 1, StoreMode::Set, key.as_bytes(), 0, 0, b"c", 0);
                if !n.is_multiple_of(3) {
                    s.delete(key.as_bytes());
                }
                n += 1;
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                let keys: Vec<String> = (0..2000).map(|i| format!("stay{i}")).collect();
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                let mut rounds = 0;
                while std::time::Instant::now() < deadline {
                    for key in &keys {
                        let r = s.get(key.as_bytes(), None, |it| it.value() == b"resident");
                        assert!(matches!(r, Lookup::Hit(true)), "{key} missed");
                    }
                    let mut hits = 0;
                    s.get_many(keys.iter().map(|k| k.as_bytes()), |_, r| {
                        hits += usize::from(matches!(r, Lookup::Hit(_)));
                        true
                    });
                    assert_eq!(hits, keys.len());
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

/// `n` keys whose hashes share shard 0 and, while that shard's table has
/// its initial 64 buckets, the home bucket 0: they crowd one bucket and
/// spill into the next ones.
fn keys_of_one_bucket(n: usize) -> Vec<String> {
    (0u64..)
        .map(|i| format!("k{i}"))
        .filter(|k| {
            let h = hash_key(k.as_bytes());
            shard_of(h) == 0 && (((h >> 32) * 64) >> 32) == 0
        })
        .take(n)
        .collect()
}

#[test]
fn unlocked_sets_never_lose_a_write_to_locked_writers() {
    // 24 keys crowd one bucket (and spill into the next two). Two setters
    // own 8 each and overwrite them with increasing numbers (the unlocked
    // swap path), each set followed by a get that must see exactly that
    // number. A third thread, under the shard lock, touches the setters'
    // keys (which copies their items) and stores and deletes the other 8,
    // which moves the setters' entries from slot to slot (a removal moves
    // the bucket's last entry into the hole). A swap racing a locked
    // writer would lose a set (an older number read back) or leave the
    // counters wrong: with the bucket settling and the version re-check
    // disabled, the counters came out wrong in 2 runs out of 3.
    let s = shared_store(64 << 20, 3);
    let keys = keys_of_one_bucket(24);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (s, stop, keys) = (s.clone(), stop.clone(), keys.clone());
        std::thread::spawn(move || {
            let (owned, theirs) = keys.split_at(16);
            let (owned, keys) = (theirs.to_vec(), owned.to_vec());
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A touch rewrites the setters' items under the lock (a
                // copy with an expiry field), keeping their values.
                let exp = s.clock().expiry(1000);
                for key in &keys {
                    s.touch(key.as_bytes(), exp);
                }
                let keys = &owned;
                for key in keys {
                    put(&s, 2, StoreMode::Set, key.as_bytes(), 0, 0, b"c", 0);
                }
                for key in keys.iter().rev().step_by(2) {
                    s.delete(key.as_bytes());
                }
                n += 1;
            }
            n
        })
    };
    let setters: Vec<_> = (0..2usize)
        .map(|t| {
            let (s, keys) = (s.clone(), keys[t * 8..t * 8 + 8].to_vec());
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                let mut seq = 0u64;
                while std::time::Instant::now() < deadline {
                    for key in &keys {
                        seq += 1;
                        let value = seq.to_string();
                        let (status, _) = put(
                            &s,
                            t,
                            StoreMode::Set,
                            key.as_bytes(),
                            0,
                            0,
                            value.as_bytes(),
                            0,
                        );
                        assert_eq!(status, StoreStatus::Stored);
                        let got = get(&s, key.as_bytes()).map(|g| g.0);
                        assert_eq!(got.as_deref(), Some(value.as_bytes()), "{key}");
                    }
                }
                seq
            })
        })
        .collect();
    for t in setters {
        assert!(t.join().unwrap() > 1000);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(churn.join().unwrap() > 100);
    // The counters agree with what is stored.
    let (mut items, mut bytes) = (0, 0);
    for key in &keys {
        if let Lookup::Hit(size) = s.get(key.as_bytes(), None, |it| it.ptr.size()) {
            items += 1;
            bytes += size as u64;
        }
    }
    let st = s.stats();
    assert_eq!((st.curr_items, st.bytes), (items, bytes));
}

/// Stores `value` through `begin_incoming` as a connection reading it in
/// pieces would: `first` bytes with the request, the rest in `chunk`s.
fn put_incoming(
    s: &Store,
    mode: StoreMode,
    key: &[u8],
    value: &[u8],
    cas: u64,
    first: usize,
    chunk: usize,
) -> (StoreStatus, u64) {
    let w = Write {
        mode,
        key,
        flags: 7,
        value: &value[..first],
        cas,
        ..Write::default()
    };
    let mut inc = match s.begin_incoming(0, &w, value.len()) {
        Ok(inc) => inc,
        Err(status) => return (status, 0),
    };
    let mut at = first;
    while !inc.is_filled() {
        let space = s.incoming_space(&mut inc);
        let n = space.len().min(chunk);
        space[..n].copy_from_slice(&value[at..at + n]);
        at += n;
        s.incoming_filled(&mut inc, n);
    }
    s.finish_incoming(0, inc)
}

#[test]
fn incoming_items_store_like_store() {
    let s = store();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    // set, in pieces, then every mode's condition.
    let (st, cas) = put_incoming(&s, StoreMode::Set, b"k", &big, 0, 1000, 4096);
    assert_eq!(st, StoreStatus::Stored);
    assert_eq!(get(&s, b"k"), Some((big.clone(), 7, cas)));
    let other: Vec<u8> = big.iter().rev().copied().collect();
    assert_eq!(
        put_incoming(&s, StoreMode::Add, b"k", &other, 0, 0, 65536).0,
        StoreStatus::NotStored
    );
    assert_eq!(
        put_incoming(&s, StoreMode::Replace, b"none", &other, 0, 0, 65536).0,
        StoreStatus::NotStored
    );
    assert_eq!(
        put_incoming(&s, StoreMode::Cas, b"k", &other, cas + 1, 0, 65536).0,
        StoreStatus::Exists
    );
    assert_eq!(
        put_incoming(&s, StoreMode::Cas, b"none", &other, cas, 0, 65536).0,
        StoreStatus::NotFound
    );
    assert_eq!(get(&s, b"k").map(|g| g.0), Some(big.clone()));
    let (st, cas2) = put_incoming(&s, StoreMode::Cas, b"k", &other, cas, 5, 100_000);
    assert_eq!(st, StoreStatus::Stored);
    assert!(cas2 > cas);
    assert_eq!(get(&s, b"k"), Some((other.clone(), 7, cas2)));
    assert_eq!(
        put_incoming(&s, StoreMode::Replace, b"k", &big, 0, 0, 1 << 20).0,
        StoreStatus::Stored
    );
    assert_eq!(get(&s, b"k").map(|g| g.0), Some(big.clone()));
    // Over the item size limit: refused before anything is reserved.
    let huge = vec![0u8; 2 << 20];
    assert_eq!(
        put_incoming(&s, StoreMode::Set, b"h", &huge, 0, 0, 1 << 20).0,
        StoreStatus::TooLarge
    );
}

#[test]
fn an_abandoned_incoming_item_is_never_seen_and_frees_its_segment() {
    let s = shared_store(8 << 20, 1);
    set(&s, StoreMode::Set, b"k", b"old", 0);
    let w = Write {
        mode: StoreMode::Set,
        key: b"k",
        value: b"new",
        ..Write::default()
    };
    let inc = s.begin_incoming(0, &w, 100_000).unwrap();
    assert_eq!(get(&s, b"k").map(|g| g.0), Some(b"old".to_vec()));
    s.abandon_incoming(inc);
    assert_eq!(get(&s, b"k").map(|g| g.0), Some(b"old".to_vec()));
    // The store keeps working through many times its memory, so the
    // abandoned item's segment was evicted like any other.
    let v = vec![b'x'; 50_000];
    for i in 0..2000 {
        assert_eq!(
            set(&s, StoreMode::Set, format!("f{i}").as_bytes(), &v, 0),
            StoreStatus::Stored
        );
    }
}

#[test]
fn fetches_race_writers_and_evictions_safely() {
    // A fetch reads lock-free like a GET: with writers replacing, deleting and
    // evicting the same keys, every value it sees is a complete one that
    // was stored under that key with those flags.
    let s = shared_store(8 << 20, 4);
    preload_numbered(&s, 500);
    let threads: Vec<_> = (0..4usize)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let hit = Fetch {
                    record_hit: true,
                    ..Fetch::default()
                };
                let mut hits = 0;
                for i in 0..30_000u32 {
                    let key = format!("k{}", i % 500);
                    if t % 2 == 0 {
                        let value = format!("{key}-{i}-{}", "y".repeat((i % 3000) as usize));
                        put(
                            &s,
                            t,
                            StoreMode::Set,
                            key.as_bytes(),
                            i,
                            0,
                            value.as_bytes(),
                            0,
                        );
                        if i % 11 == 0 {
                            s.delete(key.as_bytes());
                        }
                    } else if let Lookup::Hit((v, f, lock_free)) =
                        s.fetch(t, key.as_bytes(), &hit, |it, _| {
                            (it.value().to_vec(), it.flags(), it.lock_free())
                        })
                    {
                        let text = String::from_utf8(v).unwrap();
                        let want = format!("{key}-{f}-");
                        assert!(text.starts_with(&want), "{text:.40}");
                        let pad = text.len() - want.len();
                        assert_eq!(pad, (f % 3000) as usize);
                        hits += usize::from(lock_free);
                    }
                }
                hits
            })
        })
        .collect();
    let lock_free_hits: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(lock_free_hits > 0);
}
