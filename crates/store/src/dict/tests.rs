//! The table, its slots' generations and lifetimes, packing and unpacking
//! with a dictionary, training, and the table's file.

use super::*;
use crate::codec::{Packed, Packer, ValueRef};

/// Small JSON records of one schema, `len` bytes, different per seed.
pub(crate) fn record(len: usize, seed: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 96);
    let mut i = seed.wrapping_mul(2_654_435_761) | 1;
    while v.len() < len {
        i ^= i << 13;
        i ^= i >> 17;
        i ^= i << 5;
        v.extend_from_slice(
            format!(
                "{{\"session\":\"{:08x}\",\"user\":\"name{}\",\"country\":\"{}\",\"cart\":[{},{}],\"ok\":{}}}",
                i,
                i % 997,
                ["fr", "de", "us", "jp"][(i % 4) as usize],
                i % 50,
                (i >> 8) % 70,
                i.is_multiple_of(2)
            )
            .as_bytes(),
        );
    }
    v.truncate(len);
    v
}

/// A trained dictionary for values like `record(len, _)` (trained once
/// per length).
fn trained(len: usize) -> Vec<u8> {
    static MADE: std::sync::Mutex<Vec<(usize, Vec<u8>)>> = std::sync::Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap();
    if let Some((_, d)) = made.iter().find(|(l, _)| *l == len) {
        return d.clone();
    }
    let samples: Vec<Vec<u8>> = (0..2000).map(|i| record(len, i)).collect();
    let d = zstd::dict::from_samples(&samples, 16 << 10).expect("trains");
    made.push((len, d.clone()));
    d
}

fn pack(p: &mut Packer, v: &[u8], d: Option<&Dict>) -> Option<Vec<u8>> {
    match p.pack_with(v, d) {
        Packed::Frame(f) => Some(f.to_vec()),
        _ => None,
    }
}

fn read(t: &DictTable, frame: &[u8], codec: u8, raw_len: usize) -> Result<Vec<u8>, Corrupt> {
    ValueRef::Packed {
        frame,
        codec,
        raw_len: raw_len as u32,
        dicts: t,
    }
    .to_vec()
}

use crate::codec::Corrupt;

/// Collects once every reader pinned so far (other tests' GETs) is done,
/// so that the dictionaries removed earlier are freed and their slots free.
fn settle(t: &DictTable) {
    crate::epoch::wait_past(crate::epoch::retire());
    t.collect();
}

#[test]
fn codec_bytes_hold_the_slot_and_the_generation_mod_4() {
    assert_eq!(codec_of(1, 0), 1);
    assert_eq!(codec_of(63, 0), 63);
    assert_eq!(codec_of(5, 1), 5 | 0x40);
    assert_eq!(codec_of(5, 3), 5 | 0xc0);
    assert_eq!(codec_of(5, 4), 5);
    assert_eq!(codec_of(5, 7), codec_of(5, 3));
    for g in 0..8 {
        assert_eq!(slot_of(codec_of(17, g)), 17);
    }
}

#[test]
fn a_dictionary_packs_small_values_smaller_and_they_read_back_only_through_it() {
    let t = DictTable::new();
    // 300 bytes: class 2 (256 to 511 bytes).
    let d = t.install(2, trained(300), 1).expect("installed").codec();
    assert_eq!(t.current_codec(2), d);
    assert!(t.knows(d) && t.knows(CODEC_PLAIN));
    assert!(!t.knows(d ^ 0x40), "another generation of the slot");
    assert!(!t.knows(d + 1), "an empty slot");
    let mut p = Packer::new(1);
    let (mut plain, mut with) = (0, 0);
    for i in 0..50 {
        let v = record(300, 10_000 + i);
        let dict = t.for_len(v.len()).expect("class 2 has one");
        assert_eq!(dict.codec(), d);
        let f = pack(&mut p, &v, Some(dict)).expect("packs with the dictionary");
        with += f.len();
        plain += pack(&mut p, &v, None).map_or(v.len(), |f| f.len());
        assert_eq!(read(&t, &f, d, v.len()).unwrap(), v);
        // Without the dictionary, or with an unknown codec: corrupt.
        assert_eq!(read(&t, &f, d ^ 0x80, v.len()), Err(Corrupt));
        // A plain packing still reads after a dictionary was used.
        let g = pack(&mut p, &v, None).unwrap_or_default();
        if !g.is_empty() {
            assert_eq!(read(&t, &g, CODEC_PLAIN, v.len()).unwrap(), v);
        }
    }
    assert!(with * 2 < plain, "with {with}, plain {plain}");
    // Other classes have none.
    assert!(t.for_len(5000).is_none());
    assert!(t.for_len(64).is_none());
}

#[test]
fn a_retired_dictionary_lives_while_an_item_names_it_and_its_slot_comes_back_a_generation_later() {
    let t = DictTable::new();
    let first = t.install(0, trained(100), 1).unwrap().codec();
    // Two items name it.
    t.count_use(first, true);
    t.count_use(first, true);
    let second = t.install(0, trained(120), 1).unwrap().codec();
    assert_ne!(slot_of(first), slot_of(second));
    assert_eq!(t.current_codec(0), second);
    t.collect();
    assert!(t.knows(first), "still named by two items");
    t.count_use(first, true); // a copy linked ...
    t.count_use(first, false); // ... before its original went
    t.count_use(first, false);
    t.collect();
    assert!(t.knows(first), "one item left");
    t.count_use(first, false);
    t.collect();
    assert!(!t.knows(first), "removed: no item names it");
    settle(&t);
    assert!(t.knows(second), "the current one stays, named or not");
    // Fill every other slot: the removed one is reused last, at its next
    // generation, and its old codec byte stays unknown.
    let mut codecs = vec![second];
    while let Some(d) = t.install(2, trained(100), 1) {
        codecs.push(d.codec());
        if slot_of(d.codec()) == slot_of(first) {
            break;
        }
    }
    let again = *codecs.last().unwrap();
    assert_eq!(slot_of(again), slot_of(first));
    assert_ne!(again, first);
    assert!(!t.knows(first));
    assert_eq!(
        codecs.len(),
        SLOTS - 1,
        "every slot was used once before the reuse"
    );
}

#[test]
fn an_item_of_an_old_generation_never_reads_through_the_new_dictionary_of_its_slot() {
    // A model of the worst case: an item packed with the dictionary of
    // slot s, generation g, read after s was reused. It must read as
    // corrupt (the codec byte's generation differs), never as other bytes.
    let t = DictTable::new();
    let v = record(200, 7);
    let mut p = Packer::new(1);
    let old = t.install(0, trained(200), 1).unwrap().codec();
    let frame = pack(&mut p, &v, t.get(old)).unwrap();
    let mut live = vec![old];
    // Retrain class 0 over and over; the old dictionary goes as soon as
    // nothing names it (the item was deleted but a reader kept its bytes),
    // and its slot comes back round-robin, a generation later each time
    // (three times in 150 rounds of 63 slots).
    for round in 0..150 {
        let d = t.install(0, trained(200 + round % 3), 1).unwrap().codec();
        live.push(d);
        settle(&t);
        // Right, or corrupt: never other bytes.
        if let Ok(bytes) = read(&t, &frame, old, v.len()) {
            assert_eq!(bytes, v, "round {round}");
        }
    }
    assert!(!t.knows(old));
    // The slot was reused (several generations later): still corrupt.
    assert!(live.iter().skip(1).any(|&c| slot_of(c) == slot_of(old)));
    assert_eq!(read(&t, &frame, old, v.len()), Err(Corrupt));
}

#[test]
fn with_the_flash_tier_retired_dictionaries_stay_and_the_table_fills() {
    let t = DictTable::new();
    t.keep_retired(true);
    let first = t.install(0, trained(100), 1).unwrap().codec();
    let mut n = 1;
    while t.install(0, trained(100), 1).is_some() {
        t.collect();
        n += 1;
    }
    assert_eq!(n, SLOTS - 1);
    assert!(t.knows(first));
    assert_eq!(t.in_use().0, (SLOTS - 1) as u64);
}

#[test]
fn the_table_file_keeps_dictionaries_and_refuses_a_damaged_one() {
    let dir = std::env::temp_dir().join(format!("osmium-dicts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mem = dir.join("mem");
    let (a, b);
    {
        let t = DictTable::new();
        t.attach(DictFile::beside(&mem).unwrap(), 1);
        a = t.install(0, trained(100), 1).unwrap().codec();
        b = t.install(2, trained(300), 1).unwrap().codec();
        let c = t.install(0, trained(110), 1).unwrap().codec();
        // `c` retired `a`; nothing names `a`: removed from the file too.
        t.collect();
        assert!(!t.knows(a));
        assert!(t.knows(c));
    }
    {
        let t = DictTable::new();
        assert_eq!(t.attach(DictFile::beside(&mem).unwrap(), 1), 2);
        assert!(t.knows(b) && !t.knows(a));
        assert_eq!(t.current_codec(2), b);
        assert_ne!(t.current_codec(0), CODEC_PLAIN);
        // A new dictionary takes a slot none of the loaded ones hold.
        let d = t.install(4, trained(2000), 1).unwrap().codec();
        assert!(t.knows(b) && t.knows(d));
        // In the slot `a` had, a generation later (the file kept it).
        assert_eq!(slot_of(d), slot_of(a));
        assert_ne!(d, a);
    }
    // Damage one dictionary's bytes: it is not loaded, the others are.
    let path = DictFile::path_beside(&mem);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"XX", 4096 + (slot_of(b) * DICT_MAX) as u64 + 100)
        .unwrap();
    let t = DictTable::new();
    assert_eq!(t.attach(DictFile::beside(&mem).unwrap(), 1), 2);
    assert!(!t.knows(b));
    // A file of something else is made a table file with no entries.
    std::fs::write(&path, b"not a table").unwrap();
    let t = DictTable::new();
    assert_eq!(t.attach(DictFile::beside(&mem).unwrap(), 1), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
