//! Warm restart: a store over a memory file, dropped without a close (as
//! a killed process leaves it) or closed, and opened again.

use super::*;
use crate::backing::BackingKind;
use crate::item::ItemSpec;

struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        let dir =
            std::env::temp_dir().join(format!("osmium-restart-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempFile(dir.join("mem"))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

fn config(file: &TempFile, memory_limit: usize) -> StoreConfig {
    StoreConfig {
        memory_limit,
        write_heads: 2,
        backing: BackingKind::File(file.0.clone()),
        recovery_threads: 2,
        ..StoreConfig::default()
    }
}

fn open(file: &TempFile, memory_limit: usize) -> (Store, Restart) {
    Store::open(config(file, memory_limit)).unwrap()
}

fn value_of(i: u32) -> Vec<u8> {
    // 1 byte to ~200 KiB, each value different.
    let len = match i % 7 {
        0 => 1,
        1 => 100,
        2 => 1000,
        3 => 5000,
        4 => 70_000,
        5 => 200_000,
        _ => 30,
    };
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

#[test]
fn every_live_item_comes_back_byte_for_byte_after_a_crash_or_a_stop() {
    let file = TempFile::new("items");
    let mut cas = std::collections::HashMap::new();
    {
        let (s, r) = open(&file, 32 << 20);
        assert!(r.recovered.is_none() && r.note.is_none());
        for i in 0..300u32 {
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
        // Overwritten, deleted, appended.
        for i in 0..50u32 {
            let key = format!("key{i}");
            let (st, c) = put(&s, 0, StoreMode::Set, key.as_bytes(), 7, 0, b"second", 0);
            assert_eq!(st, StoreStatus::Stored);
            cas.insert(key, c);
        }
        for i in 50..80u32 {
            assert!(s.delete(format!("key{i}").as_bytes()));
        }
        assert_eq!(
            set(&s, StoreMode::Append, b"key0", b"+more", 0),
            StoreStatus::Stored
        );
        cas.insert("key0".into(), get(&s, b"key0").unwrap().2);
        // Dropped without a close: what a killed process leaves.
    }
    for round in 0..2 {
        let (s, r) = open(&file, 32 << 20);
        let rec = r.recovered.expect("taken over");
        assert_eq!(rec.graceful, round == 1);
        // (Each round adds one item.)
        assert_eq!(rec.items, 270 + round);
        assert_eq!(s.stats().curr_items, 270 + round);
        for i in 0..300u32 {
            let key = format!("key{i}");
            let got = get(&s, key.as_bytes());
            match i {
                0 => assert_eq!(got.as_ref().unwrap().0, b"second+more"),
                1..=49 => assert_eq!(got.as_ref().unwrap().0, b"second"),
                50..=79 => assert_eq!(got, None, "{key} was deleted"),
                _ => {
                    let (v, f, _) = got.as_ref().unwrap();
                    assert_eq!((v.as_slice(), *f), (value_of(i).as_slice(), i), "{key}");
                }
            }
            if let Some((_, _, c)) = got {
                assert_eq!(c, cas[&key], "{key} keeps its CAS unique");
            }
        }
        // New writes get CAS uniques above every old one.
        let (_, c) = put(
            &s,
            0,
            StoreMode::Set,
            format!("new{round}").as_bytes(),
            0,
            0,
            b"x",
            0,
        );
        assert!(cas.values().all(|&old| c > old));
        cas.insert(format!("new{round}"), c);
        s.close().unwrap();
    }
}

#[test]
fn an_item_whose_writer_did_not_finish_is_not_taken_over() {
    let file = TempFile::new("uncommitted");
    {
        let (s, _) = open(&file, 8 << 20);
        put(&s, 0, StoreMode::Set, b"done", 0, 0, b"v1", 0);
        // A writer that reserved and wrote its item, and was cut short
        // before linking it.
        let spec = ItemSpec {
            key_len: 4,
            value_len: 2,
            ..ItemSpec::default()
        };
        let slot = s.reserve(0, &spec).unwrap();
        s.write_item(&slot, &spec, b"half", &[b"v2"], 0);
        // And another that reserved only.
        let spec = ItemSpec {
            key_len: 5,
            value_len: 100,
            ..ItemSpec::default()
        };
        let _slot = s.reserve(0, &spec).unwrap();
        put(&s, 0, StoreMode::Set, b"after", 0, 0, b"v3", 0);
    }
    let (s, r) = open(&file, 8 << 20);
    assert_eq!(r.recovered.unwrap().items, 2);
    assert_eq!(get(&s, b"done").unwrap().0, b"v1");
    assert_eq!(get(&s, b"half"), None);
    assert_eq!(
        get(&s, b"after").unwrap().0,
        b"v3",
        "found past the unwritten slot"
    );
}

#[test]
fn of_two_linked_versions_of_a_key_the_later_stays() {
    let file = TempFile::new("versions");
    {
        let (s, _) = open(&file, 8 << 20);
        put(&s, 0, StoreMode::Set, b"k", 0, 0, b"old", 0);
        let old = s
            .shard(hash_key(b"k"))
            .read()
            .find(&s.arena, b"k", hash_key(b"k"))
            .unwrap();
        put(&s, 1, StoreMode::Set, b"k", 0, 0, b"new", 0);
        // The crash came between linking the new version and marking the
        // old one dead.
        old.item.commit();
    }
    let (s, r) = open(&file, 8 << 20);
    let rec = r.recovered.unwrap();
    assert_eq!((rec.items, rec.superseded), (1, 1));
    assert_eq!(get(&s, b"k").unwrap().0, b"new");
    assert_eq!(s.stats().curr_items, 1);
}

#[test]
fn expiry_counts_in_wall_clock_time_across_a_stop() {
    let file = TempFile::new("expiry");
    {
        let (s, _) = open(&file, 8 << 20);
        let now = s.clock().now();
        put(&s, 0, StoreMode::Set, b"short", 0, now + 1, b"a", 0);
        put(&s, 0, StoreMode::Set, b"long", 0, now + 3600, b"b", 0);
        put(&s, 0, StoreMode::Set, b"touched", 0, now + 1, b"c", 0);
        assert!(matches!(s.touch(b"touched", now + 3600), Lookup::Hit(())));
        s.close().unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let (s, r) = open(&file, 8 << 20);
    let rec = r.recovered.unwrap();
    assert_eq!((rec.items, rec.stale), (2, 1));
    assert_eq!(get(&s, b"short"), None, "expired while stopped");
    assert_eq!(get(&s, b"long").unwrap().0, b"b");
    assert_eq!(get(&s, b"touched").unwrap().0, b"c");
}

#[test]
fn flush_all_holds_across_a_restart_and_a_pending_one_still_applies() {
    let file = TempFile::new("flush");
    {
        let (s, _) = open(&file, 8 << 20);
        put(&s, 0, StoreMode::Set, b"before", 0, 0, b"a", 0);
        s.flush_all(0);
        // memcached flushes what is stored in the flush's second too: wait
        // for the next.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        s.tick_clock();
        put(&s, 0, StoreMode::Set, b"after", 0, 0, b"b", 0);
        assert_eq!(get(&s, b"after").unwrap().0, b"b");
    }
    {
        let (s, _) = open(&file, 8 << 20);
        assert_eq!(get(&s, b"before"), None);
        assert_eq!(
            get(&s, b"after").unwrap().0,
            b"b",
            "a flush that ran is not run again"
        );
        // A delayed flush pending at the stop (it runs at the start of
        // memcached's `oldest_live` second, the deadline less one: 4 to 5
        // s from now, well after this stop and the next start, even on a
        // loaded machine that takes a second to write the file out).
        s.flush_all(6);
        put(&s, 0, StoreMode::Set, b"doomed", 0, 0, b"c", 0);
        s.close().unwrap();
    }
    {
        let (s, _) = open(&file, 8 << 20);
        assert_eq!(get(&s, b"doomed").unwrap().0, b"c", "not yet");
    }
    std::thread::sleep(std::time::Duration::from_millis(6100));
    let (s, _) = open(&file, 8 << 20);
    assert_eq!(get(&s, b"doomed"), None, "the pending flush applied");
    assert_eq!(get(&s, b"after"), None);
    put(&s, 0, StoreMode::Set, b"later", 0, 0, b"d", 0);
    drop(s);
    let (s, _) = open(&file, 8 << 20);
    assert_eq!(get(&s, b"later").unwrap().0, b"d", "and not again");
}

#[test]
fn other_settings_start_clean_and_say_why() {
    let file = TempFile::new("settings");
    {
        let (s, _) = open(&file, 8 << 20);
        put(&s, 0, StoreMode::Set, b"k", 0, 0, b"v", 0);
    }
    let (s, r) = open(&file, 16 << 20);
    assert!(r.recovered.is_none());
    assert!(r.note.unwrap().contains("maxbytes"));
    assert_eq!(get(&s, b"k"), None);
    assert_eq!(s.stats().curr_items, 0);
}

#[test]
fn a_damaged_segment_loses_its_items_from_the_damage_on_and_nothing_else() {
    let file = TempFile::new("damage");
    let loc;
    {
        let (s, _) = open(&file, 8 << 20);
        for i in 0..100u32 {
            put(
                &s,
                0,
                StoreMode::Set,
                format!("k{i}").as_bytes(),
                0,
                0,
                b"value",
                0,
            );
        }
        let h = hash_key(b"k50");
        loc = s.shard(h).read().find(&s.arena, b"k50", h).unwrap().loc;
    }
    // Zero the key length of k50's header in the file.
    let (_, capacity) = crate::arena::Arena::geometry(8 << 20, 1 << 20, true);
    let layout = crate::backing::Layout::new(capacity, 1 << 20);
    let at = layout.data_offset + loc.seg as usize * layout.segment_size + loc.offset + 3;
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&file.0)
        .unwrap();
    f.write_at(&[0], at as u64).unwrap();
    drop(f);
    let (s, r) = open(&file, 8 << 20);
    let rec = r.recovered.unwrap();
    assert_eq!((rec.items, rec.damaged), (50, 1));
    assert_eq!(get(&s, b"k49").unwrap().0, b"value");
    assert_eq!(get(&s, b"k50"), None);
}

#[test]
fn packed_items_come_back_after_a_crash_and_serve_with_compression_off() {
    let file = TempFile::new("packed");
    let mut want = Vec::new();
    {
        let (s, _) = Store::open(StoreConfig {
            compression: Compression::All,
            ..config(&file, 16 << 20)
        })
        .unwrap();
        for i in 0..200u32 {
            let key = format!("key{i}");
            let value = value_of(i);
            let (st, c) = put(&s, 0, StoreMode::Set, key.as_bytes(), i, 0, &value, 0);
            assert_eq!(st, StoreStatus::Stored);
            want.push((key, value, c));
        }
        let packed = want
            .iter()
            .filter(|(k, _, _)| s.get(k.as_bytes(), None, |it| it.is_packed()) == Lookup::Hit(true))
            .count();
        assert!(packed > 100, "{packed} packed");
        // Dropped without a close: what a killed process leaves.
    }
    let (s, r) = open(&file, 16 << 20);
    assert_eq!(s.config().compression, Compression::Cold);
    assert_eq!(r.recovered.expect("taken over").items, 200);
    for (i, (key, value, cas)) in want.iter().enumerate() {
        assert_eq!(
            get(&s, key.as_bytes()),
            Some((value.clone(), i as u32, *cas)),
            "{key}"
        );
    }
}

#[test]
fn a_pack_pass_cut_short_by_a_crash_loses_nothing() {
    let file = TempFile::new("pack-crash");
    let mut want = Vec::new();
    {
        let (s, _) = open(&file, 16 << 20);
        assert_eq!(s.config().compression, Compression::Cold);
        for i in 0..600u32 {
            let key = format!("key{i}");
            let value = super::pack::text(2000 + i as usize, i);
            let (st, c) = put(&s, 0, StoreMode::Set, key.as_bytes(), i, 0, &value, 0);
            assert_eq!(st, StoreStatus::Stored);
            want.push((key, value, c));
        }
        let locate = |key: &[u8]| {
            let hash = hash_key(key);
            let table = s.shard(hash).read();
            table.find(&s.arena, key, hash).expect("linked").loc
        };
        let victim = locate(b"key0").seg;
        let originals: Vec<_> = want
            .iter()
            .map(|w| locate(w.0.as_bytes()))
            .filter(|l| l.seg == victim)
            .collect();
        assert!(originals.len() > 100, "{}", originals.len());
        assert!(s.arena.claim_for_compaction(victim));
        assert!(s.pack_segment(victim, false));
        assert_eq!(s.stats().pack_items, originals.len() as u64);
        // What a kill between linking the packed copies and marking the
        // originals dead leaves: both versions live, the victim claimed.
        for l in &originals {
            s.arena
                .item(l.seg, l.offset)
                .clear_state(crate::item::STATE_DEAD);
        }
        s.arena
            .segment(victim)
            .state
            .store(crate::arena::STATE_CLAIMED, Ordering::Release);
        // Dropped without a close: what a killed process leaves.
    }
    let (s, r) = open(&file, 16 << 20);
    let rec = r.recovered.expect("taken over");
    assert_eq!(rec.items, 600, "{rec:?}");
    assert_eq!(s.stats().curr_items, 600);
    for (i, (key, value, cas)) in want.iter().enumerate() {
        assert_eq!(
            get(&s, key.as_bytes()),
            Some((value.clone(), i as u32, *cas)),
            "{key}"
        );
    }
}
