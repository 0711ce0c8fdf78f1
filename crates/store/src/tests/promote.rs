//! Promotion (`promote`): a packed item GETs keep hitting is written back
//! raw by the cleaner's next round, with its value, CAS unique, flags,
//! expiry and frequency; a hint for an item changed meanwhile, or with
//! `Compression::All`, writes nothing; lock-free GETs during promotions
//! see whole values.

use super::pack::{location, pack_now, seal_segment_of, text};
use super::*;
use crate::item::FREQ_MAX;

/// Whether `key`'s item is packed, and its frequency, read under the
/// shard's lock (no hit counted).
fn state(s: &Store, key: &[u8]) -> (bool, u8) {
    let hash = hash_key(key);
    let table = s.shard(hash).read();
    let it = table.find(&s.arena, key, hash).expect("linked").item;
    (it.packed().is_some(), it.freq())
}

fn exptime(s: &Store, key: &[u8]) -> u32 {
    match s.get(key, None, |it| it.exptime()) {
        Lookup::Hit(e) => e,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_packed_item_gets_keep_hitting_is_written_back_raw_by_the_cleaner() {
    let s = store();
    let exp = s.clock().expiry(1000);
    let value = text(5000, 1);
    let (_, cas) = put(&s, 0, StoreMode::Set, b"k", 9, exp, &value, 0);
    let seg = seal_segment_of(&s, b"k");
    assert!(pack_now(&s, seg));
    assert_eq!(state(&s, b"k"), (true, 0));
    let packed_at = location(&s, b"k");
    // Hits below the cap note nothing.
    for hits in 1..FREQ_MAX {
        assert_eq!(get(&s, b"k"), Some((value.clone(), 9, cas)));
        assert_eq!(s.promote_hot(), 0, "after {hits} hits");
    }
    assert_eq!(state(&s, b"k"), (true, FREQ_MAX - 1));
    // The hit that reaches the cap notes it; the cleaner's round
    // writes it back raw.
    assert_eq!(get(&s, b"k"), Some((value.clone(), 9, cas)));
    assert_eq!(get(&s, b"k"), Some((value.clone(), 9, cas)));
    s.clean_ahead();
    assert_eq!(state(&s, b"k"), (false, FREQ_MAX), "raw, still hot");
    assert_ne!(location(&s, b"k"), packed_at);
    assert_eq!(get(&s, b"k"), Some((value, 9, cas)));
    assert_eq!(exptime(&s, b"k"), exp);
    let st = s.stats();
    assert_eq!(
        (st.pack_promoted, st.packed_items, st.pack_kept_raw),
        (1, 0, 0),
        "{st:?}"
    );
    // Raw now: GETs note nothing more.
    assert_eq!(s.promote_hot(), 0);
    assert_eq!(s.stats().curr_items, 2, "k and the filler");
}

#[test]
fn a_hint_for_an_item_changed_since_writes_nothing() {
    let s = store();
    let value = text(5000, 2);
    put(&s, 0, StoreMode::Set, b"k", 1, 0, &value, 0);
    put(&s, 0, StoreMode::Set, b"gone", 2, 0, &value, 0);
    let seg = seal_segment_of(&s, b"k");
    assert!(pack_now(&s, seg));
    for _ in 0..FREQ_MAX {
        assert!(get(&s, b"k").is_some());
        assert!(get(&s, b"gone").is_some());
    }
    // Replaced, and deleted, after the hints.
    let newer = text(3000, 3);
    let (_, cas) = put(&s, 0, StoreMode::Set, b"k", 5, 0, &newer, 0);
    assert!(s.delete(b"gone"));
    assert_eq!(s.promote_hot(), 0);
    assert_eq!(get(&s, b"k"), Some((newer, 5, cas)));
    assert!(get(&s, b"gone").is_none());
    assert_eq!(s.stats().pack_promoted, 0);
}

#[test]
fn with_compression_all_packed_items_stay_packed() {
    let s = Store::new(StoreConfig {
        compression: Compression::All,
        ..StoreConfig::default()
    });
    let value = text(5000, 4);
    let (_, cas) = put(&s, 0, StoreMode::Set, b"k", 0, 0, &value, 0);
    assert!(state(&s, b"k").0);
    for _ in 0..2 * FREQ_MAX {
        assert_eq!(get(&s, b"k"), Some((value.clone(), 0, cas)));
    }
    assert_eq!(s.promote_hot(), 0);
    assert_eq!(state(&s, b"k"), (true, FREQ_MAX));
}

#[test]
fn lock_free_gets_during_promotions_see_whole_values() {
    let s = shared_store(64 << 20, 1);
    let keys: Vec<(String, Vec<u8>)> = (0..40u32)
        .map(|i| (format!("key{i}"), text(1000 + 97 * i as usize, 10 + i)))
        .collect();
    let mut cas = Vec::new();
    for (i, (key, value)) in keys.iter().enumerate() {
        let (st, c) = put(&s, 0, StoreMode::Set, key.as_bytes(), i as u32, 0, value, 0);
        assert_eq!(st, StoreStatus::Stored);
        cas.push(c);
    }
    let seg = seal_segment_of(&s, keys[0].0.as_bytes());
    assert!(keys
        .iter()
        .all(|(k, _)| location(&s, k.as_bytes()).seg == seg));
    assert!(pack_now(&s, seg));
    assert!(keys.iter().all(|(k, _)| state(&s, k.as_bytes()).0));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = {
        let (s, keys, cas) = (s.clone(), keys.clone(), cas.clone());
        let (done, reads) = (done.clone(), reads.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                for (i, (key, value)) in keys.iter().enumerate() {
                    let got = get(&s, key.as_bytes());
                    assert_eq!(got, Some((value.clone(), i as u32, cas[i])), "{key}");
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    // The reader is reading while each round promotes.
    let reader_moved_on = || {
        let from = reads.load(Ordering::Relaxed);
        while reads.load(Ordering::Relaxed) < from + 2 {
            assert!(!reader.is_finished(), "the reader failed");
            std::thread::yield_now();
        }
    };
    // Hot (the reader's hits count too), then written back raw, a few
    // keys a round.
    for chunk in keys.chunks(8) {
        for (key, _) in chunk {
            for _ in 0..FREQ_MAX {
                assert!(get(&s, key.as_bytes()).is_some());
            }
        }
        reader_moved_on();
        s.promote_hot();
    }
    // A hint dropped while the queue was contended is sent again.
    for _ in 0..1000 {
        if !keys.iter().any(|(k, _)| state(&s, k.as_bytes()).0) {
            break;
        }
        for (key, _) in &keys {
            get(&s, key.as_bytes());
        }
        reader_moved_on();
        s.promote_hot();
    }
    done.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    let st = s.stats();
    assert_eq!(st.pack_promoted, keys.len() as u64, "{st:?}");
    assert_eq!(st.packed_items, 0);
    for (i, (key, value)) in keys.iter().enumerate() {
        assert_eq!(
            get(&s, key.as_bytes()),
            Some((value.clone(), i as u32, cas[i]))
        );
    }
}
