//! flush_all, now and delayed.

use super::*;

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
