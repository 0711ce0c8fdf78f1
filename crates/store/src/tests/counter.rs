//! Counters: incr/decr and their options.

use super::*;

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
