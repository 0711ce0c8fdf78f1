//! Dumps: every live item once, with its figures; expired, flushed and
//! removed ones skipped; resuming across table growth; racing writers,
//! moves and evictions.

use super::*;
use std::collections::HashMap;

/// What a dump showed of one item.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    binary_key: bool,
    exptime: u32,
    atime: u32,
    cas: u64,
    fetched: bool,
    flags: u32,
    value_len: usize,
    total_size: usize,
}

/// A whole dump, by key; panics if a key is visited twice.
fn dump_all(s: &Store) -> HashMap<Vec<u8>, Seen> {
    let mut seen = HashMap::new();
    let mut cursor = DumpCursor::default();
    let mut more = true;
    while more {
        more = s.dump_step(&mut cursor, |e| {
            let entry = Seen {
                binary_key: e.binary_key,
                exptime: e.exptime,
                atime: e.atime,
                cas: e.cas,
                fetched: e.fetched,
                flags: e.flags,
                value_len: e.value_len,
                total_size: e.total_size,
            };
            let key = e.key.to_vec();
            assert!(
                seen.insert(key, entry).is_none(),
                "{} visited twice",
                String::from_utf8_lossy(e.key)
            );
        });
    }
    assert!(cursor.is_done());
    seen
}

/// The key's number: `{prefix}{n}` with a one-letter prefix.
fn number_of(key: &[u8]) -> u32 {
    let text = std::str::from_utf8(key).expect("a whole key");
    text[1..]
        .parse()
        .unwrap_or_else(|_| panic!("torn key {text:?}"))
}

#[test]
fn a_dump_visits_every_live_item_once_with_its_figures() {
    let s = store();
    let start = s.clock().now();
    let far = s.clock().expiry(1000);
    for i in 0..5000u32 {
        let key = format!("item{i}");
        let value = vec![b'v'; (i % 300) as usize];
        let w = Write {
            mode: StoreMode::Set,
            key: key.as_bytes(),
            flags: i,
            exptime: if i % 3 == 0 { far } else { 0 },
            value: &value,
            binary_key: i % 7 == 0,
            ..Write::default()
        };
        assert_eq!(s.store(0, &w).0, StoreStatus::Stored);
    }
    for i in (0..5000u32).step_by(5) {
        assert!(get(&s, format!("item{i}").as_bytes()).is_some());
    }
    let seen = dump_all(&s);
    assert_eq!(seen.len(), 5000);
    for i in 0..5000u32 {
        let key = format!("item{i}");
        let e = &seen[key.as_bytes()];
        let Lookup::Hit(cas) = s.fetch(0, key.as_bytes(), &Fetch::default(), |it, _| it.cas())
        else {
            panic!("{key} missing");
        };
        let value_len = (i % 300) as usize;
        let want = Seen {
            binary_key: i % 7 == 0,
            exptime: if i % 3 == 0 { far } else { 0 },
            atime: e.atime,
            cas,
            fetched: i % 5 == 0,
            flags: i,
            value_len,
            total_size: memcached_item_total(key.len(), i, value_len, true),
        };
        assert_eq!(e, &want, "{key}");
        assert!(e.atime >= start && e.atime <= s.clock().now(), "{key}");
    }
    // A finished cursor visits nothing more.
    let mut cursor = DumpCursor::default();
    while s.dump_step(&mut cursor, |_| {}) {}
    let mut visited = 0;
    assert!(!s.dump_step(&mut cursor, |_| visited += 1));
    assert_eq!(visited, 0);
}

#[test]
fn a_dump_without_cas_shows_no_unique() {
    let s = Store::new(StoreConfig {
        use_cas: false,
        ..StoreConfig::default()
    });
    put(&s, 0, StoreMode::Set, b"k", 3, 0, b"value", 0);
    let seen = dump_all(&s);
    let e = &seen[&b"k"[..]];
    assert_eq!((e.cas, e.flags, e.value_len), (0, 3, 5));
    assert_eq!(e.total_size, memcached_item_total(1, 3, 5, false));
}

#[test]
fn a_dump_skips_expired_flushed_and_removed_items() {
    let s = store();
    assert!(dump_all(&s).is_empty());
    fill(&s, "old", 100, 0, b"x");
    s.flush_all(0);
    fill(&s, "live", 100, 0, b"x");
    fill(&s, "short", 100, s.clock().expiry(1), b"x");
    fill(&s, "gone", 100, 0, b"x");
    for i in 0..100 {
        assert!(s.delete(format!("gone{i}").as_bytes()));
    }
    let marked = Removal {
        mark_stale: true,
        ..Removal::default()
    };
    assert_eq!(s.remove(0, b"live7", &marked), RemoveResult::Kept);
    s.clock().advance_for_tests(2);
    let mut keys: Vec<String> = dump_all(&s)
        .into_keys()
        .map(|k| String::from_utf8(k).unwrap())
        .collect();
    keys.sort();
    let mut want: Vec<String> = (0..100).map(|i| format!("live{i}")).collect();
    want.sort();
    assert_eq!(keys, want);
}

#[test]
fn a_dump_resumes_across_table_growth() {
    let s = store();
    fill(&s, "a", 2000, 0, b"v");
    let mut counts: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut cursor = DumpCursor::default();
    let (mut more, mut step) = (true, 0);
    while more {
        more = s.dump_step(&mut cursor, |e| {
            *counts.entry(e.key.to_vec()).or_default() += 1
        });
        // Every table grows many times while the dump walks it.
        fill(&s, &format!("b{step}-"), 300, 0, b"v");
        step += 1;
    }
    assert!(s.stats().curr_items > 256 * 300, "{:?}", s.stats());
    for i in 0..2000 {
        assert_eq!(counts.get(format!("a{i}").as_bytes()), Some(&1), "a{i}");
    }
    assert!(counts.values().all(|&n| n == 1));
    assert!(counts.len() > 2000, "some keys stored meanwhile are seen");
}

#[test]
fn a_dump_under_writers_sees_every_stable_key_once() {
    // Stable keys are rewritten in place of themselves (overwrites through
    // the unlocked swap and the locked path, copies by mark-stale), so they
    // move in memory but stay live; churn keys are stored and deleted,
    // which moves entries within buckets and grows every table. Every dump
    // must show each stable key once, and nothing twice or torn.
    let s = shared_store(512 << 20, 3);
    let value_of = |n: u32| vec![b'a' + (n % 26) as u8; (n % 100) as usize];
    for n in 0..3000u32 {
        let key = format!("s{n}");
        put(&s, 0, StoreMode::Set, key.as_bytes(), n, 0, &value_of(n), 0);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
    let mover = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let marked = Removal {
                mark_stale: true,
                ..Removal::default()
            };
            for round in 0..150u32 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                for n in 0..3000u32 {
                    let key = format!("s{n}");
                    if (n + round) % 4 == 0 {
                        assert_eq!(s.remove(1, key.as_bytes(), &marked), RemoveResult::Kept);
                    } else {
                        let (status, _) =
                            put(&s, 1, StoreMode::Set, key.as_bytes(), n, 0, &value_of(n), 0);
                        assert_eq!(status, StoreStatus::Stored);
                    }
                }
            }
        })
    };
    let churn = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            for round in 0..4u32 {
                // The first round always runs: it grows the tables.
                if round > 0 && stop.load(Ordering::Relaxed) {
                    break;
                }
                for n in 0..400_000u32 {
                    let key = format!("c{n}");
                    if (n + round) % 3 == 0 {
                        s.delete(key.as_bytes());
                    } else {
                        put(&s, 2, StoreMode::Set, key.as_bytes(), n, 0, &value_of(n), 0);
                    }
                }
            }
        })
    };
    let mut dumps = 0;
    while dumps == 0
        || (std::time::Instant::now() < deadline && !(mover.is_finished() && churn.is_finished()))
    {
        let seen = dump_all(&s);
        for (key, e) in &seen {
            let n = number_of(key);
            assert_eq!((e.flags, e.value_len), (n, (n % 100) as usize), "{key:?}");
        }
        for n in 0..3000u32 {
            assert!(
                seen.contains_key(format!("s{n}").as_bytes()),
                "s{n} missing"
            );
        }
        dumps += 1;
    }
    stop.store(true, Ordering::Relaxed);
    mover.join().unwrap();
    churn.join().unwrap();
    let st = s.stats();
    assert_eq!(st.evictions, 0, "the stable keys must stay stored");
    assert!(st.index_bytes > 1 << 20, "the tables grew: {st:?}");
    assert!(dumps > 1, "{dumps}");
}

#[test]
fn a_dump_under_evictions_sees_whole_keys_at_most_once() {
    // Four segments rewritten over and over: segments are evicted and
    // recycled under the dump. What it shows must be whole and consistent
    // with its key, and no key may be visited twice.
    let s = shared_store(4 << 20, 2);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..2usize)
        .map(|t| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = t as u32;
                while !stop.load(Ordering::Relaxed) {
                    let n = i % 50_000;
                    let key = format!("k{n}");
                    let value = vec![b'x'; 20 + (n % 700) as usize];
                    put(&s, t, StoreMode::Set, key.as_bytes(), n, 0, &value, 0);
                    if n.is_multiple_of(13) {
                        s.delete(key.as_bytes());
                    }
                    i = i.wrapping_add(2);
                }
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1000);
    let mut visited = 0;
    while std::time::Instant::now() < deadline {
        for (key, e) in dump_all(&s) {
            let n = number_of(&key);
            assert_eq!((e.flags, e.value_len), (n, 20 + (n % 700) as usize));
            visited += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(visited > 0);
    assert!(s.stats().evictions > 0, "{:?}", s.stats());
}
