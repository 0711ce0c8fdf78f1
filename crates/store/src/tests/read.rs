//! Reads: lookups, expiry and touch, multi-key gets, fetches.

use super::*;

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
                assert_eq!(
                    it.value().as_raw(),
                    Some(format!("v{}", &k[1..]).as_bytes())
                );
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
