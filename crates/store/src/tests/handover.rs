//! A binary upgrade's hand-over of item memory in a memfd: a store hands
//! its memfd over, is dropped (as the old image's mapping goes at the
//! exec), and a store opened on that fd serves every item as it was; with
//! a flash tier, its metadata's memfd too, and every item on flash is
//! found again.

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

#[test]
fn a_flash_tier_handed_over_gives_every_item_on_flash_back() {
    let dir = std::env::temp_dir().join(format!("osmium-handover-flash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let with_flash = || StoreConfig {
        memory_limit: 4 << 20,
        write_heads: 1,
        flash: Some(crate::flash::FlashConfig {
            paths: vec![crate::flash::FlashPath {
                path: dir.join("flash"),
                size: 64 << 20,
            }],
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            ..crate::flash::FlashConfig::default()
        }),
        ..config(4 << 20)
    };
    let value = |i: u32| -> Vec<u8> {
        let len = 100 + (i as usize * 37) % 900;
        (0..len).map(|j| (i as usize * 31 + j * 7) as u8).collect()
    };
    let n = 20_000u32;
    let (memory, flash_meta, on_flash) = {
        let (s, _) = Store::open(with_flash()).unwrap();
        for i in 0..n {
            let (st, _) = put(
                &s,
                0,
                StoreMode::Set,
                format!("k{i}").as_bytes(),
                i,
                0,
                &value(i),
                0,
            );
            assert_eq!(st, StoreStatus::Stored);
        }
        let on_flash = s.flash().unwrap().index.len();
        assert!(on_flash > n as usize / 2, "{on_flash} on flash");
        let memory = s.hand_over().unwrap().expect("item memory");
        let flash_meta = s.hand_over_flash().unwrap().expect("the flash metadata");
        (memory, flash_meta, on_flash)
    };
    let (s, r) =
        Store::open_handed_over(with_flash(), Some(memory.as_fd()), Some(flash_meta.as_fd()))
            .unwrap();
    let f = r.flash.expect("a flash tier");
    assert!(f.taken_over && !f.crashed && f.note.is_none(), "{f:?}");
    assert_eq!(f.items, on_flash);
    for i in 0..n {
        let key = format!("k{i}");
        let (v, flags, _) = get(&s, key.as_bytes()).unwrap_or_else(|| panic!("{key} missing"));
        assert_eq!((v, flags), (value(i), i), "{key}");
    }
    s.close().unwrap();
    // Without the metadata the tier starts empty.
    let (s, r) = Store::open_handed_over(with_flash(), None, None).unwrap();
    assert!(!r.flash.unwrap().taken_over);
    assert_eq!(s.flash().unwrap().index.len(), 0);
    s.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
