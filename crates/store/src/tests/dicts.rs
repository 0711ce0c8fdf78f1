//! Compression dictionaries in the pack pass (`dict`): trained from the
//! values the pass packs, used for the small ones, every item read back
//! byte for byte; and kept with the items by a warm restart (`-e`) and a
//! memfd's hand-over, an item naming a dictionary that was lost dropped,
//! never read through another.

use super::pack::text;
use super::*;
use crate::arena::SegmentId;
use crate::backing::BackingKind;
use crate::segment::STATE_SEALED;
use std::os::fd::AsFd;

/// Values of 150 to 350 bytes (size classes 1 and 2).
fn small(i: u32) -> Vec<u8> {
    text(150 + (i as usize * 37) % 200, i)
}

const N: u32 = 24_000;

/// Stores keys `key0..` with `small` values, each with flags `i`.
fn fill_small(s: &Store) -> Vec<u64> {
    (0..N)
        .map(|i| {
            let key = format!("key{i}");
            let (st, cas) = put(s, 0, StoreMode::Set, key.as_bytes(), i, 0, &small(i), 0);
            assert_eq!(st, StoreStatus::Stored, "{key}");
            cas
        })
        .collect()
}

/// Runs the pack pass over every sealed segment it has not been over,
/// oldest id first, as the cleaner would; then again over the ones left
/// (the destinations of the first round are marked packed).
fn pack_everything(s: &Store) {
    for _ in 0..2 {
        for seg in 0..s.arena.capacity() as SegmentId {
            let segment = s.arena.segment(seg);
            if segment.state.load(Ordering::Relaxed) == STATE_SEALED
                && segment.packed.load(Ordering::Relaxed) == 0
                && s.arena.claim_for_compaction(seg)
            {
                s.pack_segment(seg, false);
            }
        }
    }
}

/// Every key reads back as it was written (or is missing, if `may_miss`);
/// how many read back.
fn check_all(s: &Store, cas: &[u64], may_miss: bool) -> usize {
    let mut held = 0;
    for i in 0..N {
        let key = format!("key{i}");
        match get(s, key.as_bytes()) {
            Some((v, f, c)) => {
                assert!(v == small(i), "{key}: other bytes");
                assert_eq!((f, c), (i, cas[i as usize]), "{key}");
                held += 1;
            }
            None => assert!(may_miss, "{key} is missing"),
        }
    }
    held
}

#[test]
fn the_pack_pass_trains_dictionaries_and_packs_small_values_with_them() {
    let s = Store::new(StoreConfig {
        memory_limit: 32 << 20,
        ..StoreConfig::default()
    });
    let cas = fill_small(&s);
    pack_everything(&s);
    let st = s.stats();
    assert!(st.pack_dicts >= 1, "{st:?}");
    assert!(st.pack_dict_bytes > 1000);
    assert!(st.pack_dict_trainings >= 1);
    assert!(st.packed_dict_items > 1000, "{st:?}");
    assert!(st.packed_items > st.packed_dict_items);
    assert_eq!(check_all(&s, &cas, false), N as usize);
    // The same values packed without dictionaries take more room.
    let plain = Store::new(StoreConfig {
        memory_limit: 32 << 20,
        compress_dicts: false,
        ..StoreConfig::default()
    });
    fill_small(&plain);
    pack_everything(&plain);
    let p = plain.stats();
    assert_eq!((p.pack_dicts, p.packed_dict_items), (0, 0));
    let per_raw = |s: &StoreStats| s.packed_bytes as f64 / s.packed_raw_bytes as f64;
    assert!(
        per_raw(&st) < per_raw(&p),
        "with {:.3}, without {:.3}",
        per_raw(&st),
        per_raw(&p)
    );
    // Overwritten and deleted packed items are uncounted.
    for i in 0..N {
        let key = format!("key{i}");
        if i % 2 == 0 {
            assert!(s.delete(key.as_bytes()));
        } else {
            set(&s, StoreMode::Set, key.as_bytes(), b"raw", 0);
        }
    }
    assert_eq!(s.stats().packed_dict_items, 0);
    assert_eq!(s.dicts.live_total(), 0);
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("osmium-dicts-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn file_config(path: &std::path::Path) -> StoreConfig {
    StoreConfig {
        memory_limit: 32 << 20,
        write_heads: 2,
        backing: BackingKind::File(path.to_path_buf()),
        recovery_threads: 2,
        ..StoreConfig::default()
    }
}

#[test]
fn a_warm_restart_keeps_the_dictionaries_and_every_item_and_a_lost_one_drops_its_items() {
    let dir = TempDir::new("restart");
    let mem = dir.0.join("mem");
    let (cas, dict_items, dicts) = {
        let (s, _) = Store::open(file_config(&mem)).unwrap();
        let cas = fill_small(&s);
        pack_everything(&s);
        let st = s.stats();
        assert!(st.packed_dict_items > 1000, "{st:?}");
        // Dropped without a close: what a killed process leaves.
        (cas, st.packed_dict_items, st.pack_dicts)
    };
    {
        let (s, r) = Store::open(file_config(&mem)).unwrap();
        assert_eq!(r.recovered.expect("taken over").items, N as u64);
        let st = s.stats();
        assert_eq!((st.pack_dicts, st.packed_dict_items), (dicts, dict_items));
        assert_eq!(check_all(&s, &cas, false), N as usize);
        s.close().unwrap();
    }
    // The dictionaries lost: the items naming them are dropped by the
    // recovery, every other one reads back as it was.
    std::fs::remove_file(crate::dict::DictFile::path_beside(&mem)).unwrap();
    let (s, r) = Store::open(file_config(&mem)).unwrap();
    let rec = r.recovered.expect("taken over");
    assert_eq!(rec.items, N as u64 - dict_items);
    assert!(rec.damaged >= dict_items);
    assert_eq!(s.stats().pack_dicts, 0);
    assert_eq!(check_all(&s, &cas, true), (N as u64 - dict_items) as usize);
}

#[test]
fn a_memfd_handed_over_takes_its_dictionaries_along() {
    let config = || StoreConfig {
        memory_limit: 32 << 20,
        write_heads: 2,
        backing: BackingKind::Memfd,
        recovery_threads: 2,
        ..StoreConfig::default()
    };
    let (cas, dict_items, handed) = {
        let (s, _) = Store::open(config()).unwrap();
        assert_eq!(s.item_memory(), "memfd");
        let cas = fill_small(&s);
        pack_everything(&s);
        let dict_items = s.stats().packed_dict_items;
        assert!(dict_items > 1000);
        (cas, dict_items, s.hand_over().unwrap().expect("a memfd"))
    };
    let (s, r) = Store::open_inherited(config(), handed.as_fd()).unwrap();
    assert_eq!(r.recovered.expect("taken over").items, N as u64);
    assert_eq!(s.stats().packed_dict_items, dict_items);
    assert_eq!(check_all(&s, &cas, false), N as usize);
}
