//! A binary upgrade's hand-over of item memory in a memfd: a store hands
//! its memfd over, is dropped (as the old image's mapping goes at the
//! exec), and a store opened on that fd serves every item as it was.

use super::*;
use std::os::fd::AsFd;

fn config(memory_limit: usize) -> StoreConfig {
    StoreConfig {
        memory_limit,
        write_heads: 2,
        backing: BackingKind::Memfd,
        recovery_threads: 2,
        ..StoreConfig::default()
    }
}

fn value_of(i: u32) -> Vec<u8> {
    let len = [1, 100, 1000, 5000, 70_000, 30][i as usize % 6];
    (0..len).map(|j| (i as usize * 17 + j) as u8).collect()
}

#[test]
fn a_memfd_handed_over_gives_every_item_back_byte_for_byte() {
    let mut cas = std::collections::HashMap::new();
    let handed = {
        let (s, r) = Store::open(config(16 << 20)).unwrap();
        assert!(r.recovered.is_none() && r.note.is_none(), "{:?}", r.note);
        assert_eq!(s.item_memory(), "memfd");
        for i in 0..400u32 {
            let key = format!("key{i}");
            let (st, c) = put(
                &s,
                (i % 2) as usize,
                StoreMode::Set,
                key.as_bytes(),
                i,
                0,
                &value_of(i),
                0,
            );
            assert_eq!(st, StoreStatus::Stored);
            cas.insert(key, c);
        }
        for i in 0..20u32 {
            assert!(s.delete(format!("key{i}").as_bytes()));
        }
        s.hand_over().unwrap().expect("a memfd to hand over")
    };
    // A store whose memory was not taken over closes nothing of ours: the
    // same fd can be taken over twice (as the old image again would).
    for round in 0..2 {
        let (s, r) = Store::open_inherited(config(16 << 20), handed.as_fd()).unwrap();
        assert!(r.note.is_none(), "{:?}", r.note);
        let rec = r.recovered.expect("taken over");
        // The hand-over recorded a clean stop; the first take-over was
        // dropped without one.
        assert_eq!(rec.graceful, round == 0);
        assert_eq!(rec.items, 380);
        for i in 0..400u32 {
            let key = format!("key{i}");
            let got = get(&s, key.as_bytes());
            if i < 20 {
                assert_eq!(got, None, "{key} was deleted");
            } else {
                let (v, f, c) = got.unwrap_or_else(|| panic!("{key} is back"));
                assert_eq!((v, f, c), (value_of(i), i, cas[&key]), "{key}");
            }
        }
    }
    // Other settings: a clean cache, and a note why.
    let (s, r) = Store::open_inherited(config(32 << 20), handed.as_fd()).unwrap();
    assert!(r.recovered.is_none());
    assert!(r.note.unwrap().contains("[maxbytes]"));
    assert_eq!(get(&s, b"key30"), None);
}

#[test]
fn anonymous_memory_hands_nothing_over() {
    let s = store();
    assert_eq!(s.item_memory(), "anonymous");
    assert!(s.hand_over().unwrap().is_none());
}
