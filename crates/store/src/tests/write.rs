//! Writes: the storage commands, CAS uniques, items received in pieces.

use super::*;

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
        (it.stale(), it.value().to_vec().unwrap())
    });
    assert_eq!(stale, Lookup::Hit((true, b"v3".to_vec())));
    let w = Write {
        stale_if_older: false,
        ..w
    };
    assert_eq!(s.store(0, &w).0, StoreStatus::Exists);
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
