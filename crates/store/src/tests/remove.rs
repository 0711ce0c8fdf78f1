//! Removals: delete, marking stale, dropping the value.

use super::*;

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
