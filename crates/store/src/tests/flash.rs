//! The flash tier under the store: items the evictor would drop are on
//! flash, found by GETs byte for byte; other commands see them; flush_all,
//! expiry, deletes and damage hold; full flash reclaims oldest first and
//! keeps what was read.

use super::*;
use crate::flash::{FlashConfig, FlashPath};

pub(super) struct TempDir(pub(super) std::path::PathBuf);

impl TempDir {
    pub(super) fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("osmium-flash-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A store of 4 MiB of RAM over `flash_mb` MiB of flash in 1 MiB pages
/// (raw cold items packed on their way to flash: `-o compression=cold`).
pub(super) fn flash_store(dir: &TempDir, flash_mb: u64) -> Store {
    flash_store_as(dir, flash_mb, Compression::Cold)
}

/// The same with `compression` (`Off`: every record as the item is, for
/// the tests that fill the tier with values that would pack to nothing).
fn flash_store_as(dir: &TempDir, flash_mb: u64, compression: Compression) -> Store {
    Store::new(StoreConfig {
        memory_limit: 4 << 20,
        write_heads: 1,
        compression,
        flash: Some(FlashConfig {
            paths: vec![FlashPath {
                path: dir.0.join("flash"),
                size: flash_mb << 20,
            }],
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            ..FlashConfig::default()
        }),
        ..StoreConfig::default()
    })
}

fn value(i: u32, len: usize) -> Vec<u8> {
    let mut v = format!("v{i}-").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

pub(super) fn on_flash(s: &Store) -> usize {
    s.flash().unwrap().index.len()
}

#[test]
fn items_beyond_ram_are_read_back_read_flash_byte_for_byte() {
    let dir = TempDir::new("read");
    let s = flash_store(&dir, 64);
    let n = 20_000u32;
    for i in 0..n {
        let len = 100 + (i as usize * 37) % 900;
        let (st, _) = put(
            &s,
            0,
            StoreMode::Set,
            format!("k{i}").as_bytes(),
            i,
            0,
            &value(i, len),
            0,
        );
        assert_eq!(st, StoreStatus::Stored);
    }
    assert!(on_flash(&s) > n as usize / 2, "{} on flash", on_flash(&s));
    assert_eq!(s.stats().evictions, 0, "nothing dropped");
    let mut read_flash = 0;
    for i in 0..n {
        let key = format!("k{i}");
        let len = 100 + (i as usize * 37) % 900;
        let (v, flags, _) = get(&s, key.as_bytes()).unwrap_or_else(|| panic!("{key} missing"));
        assert_eq!((v, flags), (value(i, len), i), "{key}");
        read_flash += usize::from(
            s.shard(hash_key(key.as_bytes()))
                .read()
                .find(&s.arena, key.as_bytes(), hash_key(key.as_bytes()))
                .is_none(),
        );
    }
    assert!(read_flash > 0);
    let st = &s.flash().unwrap().stats;
    assert!(st.objects_written.load(Ordering::Relaxed) > 0);
    assert!(st.get_hits.load(Ordering::Relaxed) > 0);
}

#[test]
fn other_commands_see_a_key_on_flash() {
    let dir = TempDir::new("commands");
    let s = flash_store(&dir, 64);
    put(&s, 0, StoreMode::Set, b"counter", 0, 0, b"41", 0);
    put(&s, 0, StoreMode::Set, b"text", 0, 0, b"abc", 0);
    put(&s, 0, StoreMode::Set, b"gone", 0, 0, b"x", 0);
    // (Not read: an item hit in RAM is kept there longer.)
    let (_, cas) = put(&s, 0, StoreMode::Set, b"cas", 0, 0, b"c1", 0);
    // Push them out of RAM.
    fill(&s, "filler", 10_000, 0, &[b'f'; 1000]);
    let h = |k: &[u8]| hash_key(k);
    for k in [&b"counter"[..], b"text", b"gone", b"cas"] {
        assert!(
            s.flash().unwrap().index.get(h(k)).is_some(),
            "{:?} on flash",
            k
        );
    }
    assert_eq!(
        set(&s, StoreMode::Add, b"text", b"no", 0),
        StoreStatus::NotStored
    );
    assert_eq!(
        set(&s, StoreMode::Append, b"text", b"def", 0),
        StoreStatus::Stored
    );
    assert_eq!(get(&s, b"text").unwrap().0, b"abcdef");
    assert_eq!(s.arith(0, b"counter", true, 1), ArithResult::Value(42));
    assert!(s.delete(b"gone"));
    assert_eq!(get(&s, b"gone"), None);
    assert_eq!(
        get(&s, b"cas").unwrap().2,
        cas,
        "the CAS unique moved with the item"
    );
    assert_eq!(
        set(&s, StoreMode::Cas, b"cas", b"c2", cas),
        StoreStatus::Stored
    );
    assert_eq!(get(&s, b"cas").unwrap().0, b"c2");
}

#[test]
fn flush_all_and_expiry_reach_flash() {
    let dir = TempDir::new("flush");
    let s = flash_store(&dir, 64);
    let now = s.clock().now();
    put(&s, 0, StoreMode::Set, b"short", 0, now + 1, b"s", 0);
    put(&s, 0, StoreMode::Set, b"long", 0, now + 1000, b"l", 0);
    fill(&s, "a", 10_000, 0, &[b'a'; 1000]);
    assert!(s.flash().unwrap().index.get(hash_key(b"short")).is_some());
    s.clock().advance_for_tests(2);
    assert_eq!(get(&s, b"short"), None, "expired on flash");
    assert_eq!(get(&s, b"long").unwrap().0, b"l");
    s.flush_all(0);
    assert_eq!(get(&s, b"long"), None, "flushed on flash");
    assert_eq!(get(&s, b"a10"), None);
}

#[test]
fn full_flash_reclaims_oldest_pages_and_keeps_what_was_read() {
    let dir = TempDir::new("reclaim");
    let s = flash_store_as(&dir, 8, Compression::Off);
    put(&s, 0, StoreMode::Set, b"hot", 0, 0, &[b'h'; 500], 0);
    fill(&s, "a", 12_000, 0, &[b'a'; 500]);
    assert!(s.flash().unwrap().index.get(hash_key(b"hot")).is_some());
    // Far more than the 8 MiB of flash, "hot" read now and then (on
    // flash: a reclaim keeps what was read since it was written).
    for round in 0..12 {
        assert!(get(&s, b"hot").is_some(), "round {round}");
        fill(&s, &format!("b{round}-"), 5_000, 0, &[b'b'; 500]);
    }
    let st = &s.flash().unwrap().stats;
    assert!(st.page_reclaims.load(Ordering::Relaxed) > 0);
    assert!(st.objects_evicted.load(Ordering::Relaxed) > 0);
    assert_eq!(
        get(&s, b"hot").unwrap().0,
        vec![b'h'; 500],
        "kept by the reclaims"
    );
    assert_eq!(get(&s, b"a1"), None, "the oldest went");
    let (total, free, _) = s.flash().unwrap().pages();
    assert!(free < total);
}

#[test]
fn mostly_dead_pages_are_compacted_and_their_live_items_kept() {
    // 16 MiB of flash under 4 MiB of RAM. Cold keys go to flash first and
    // are never read again; then 12,000 keys (6 MB, more than RAM holds)
    // are overwritten round after round, so their flash copies die. The
    // pages they filled are compacted, most fragmented first, keeping the
    // tenth of those keys written once; the cold keys' page, still live,
    // is not reclaimed (a reclaim would drop them all: none was read).
    let dir = TempDir::new("compact");
    let s = flash_store_as(&dir, 16, Compression::Off);
    fill(&s, "cold", 1_500, 0, &[b'c'; 500]);
    for round in 0..12u32 {
        for i in 0..12_000u32 {
            if round > 0 && i % 10 == 0 {
                // Written once: live records among dead ones, never read.
                continue;
            }
            let key = format!("churn{i}");
            let v = value(round * 100_000 + i, 500);
            let (st, _) = put(&s, 0, StoreMode::Set, key.as_bytes(), 0, 0, &v, 0);
            assert_eq!(st, StoreStatus::Stored);
        }
    }
    let f = s.flash().unwrap();
    let st = &f.stats;
    assert!(
        st.pages_compacted.load(Ordering::Relaxed) > 0,
        "pages compacted"
    );
    assert!(st.compact_kept.load(Ordering::Relaxed) > 0);
    let (live, dead) = f.live_dead_bytes();
    assert!(live > 0 && live + dead <= 16 << 20, "{live} {dead}");
    let lost = (0..1_500)
        .filter(|i| get(&s, format!("cold{i}").as_bytes()).map(|g| g.0) != Some(vec![b'c'; 500]))
        .count();
    assert_eq!(
        lost,
        0,
        "cold keys lost; reclaims {} compacted {} kept {} evicted {} ram evictions {}",
        st.page_reclaims.load(Ordering::Relaxed),
        st.pages_compacted.load(Ordering::Relaxed),
        st.compact_kept.load(Ordering::Relaxed),
        st.objects_evicted.load(Ordering::Relaxed),
        s.stats().evictions
    );
    for i in 0..12_000u32 {
        let key = format!("churn{i}");
        let round = if i % 10 == 0 { 0 } else { 11 };
        assert_eq!(
            get(&s, key.as_bytes()).map(|g| g.0),
            Some(value(round * 100_000 + i, 500)),
            "{key}"
        );
    }
    // Once every buffer is on flash, the rewrites count in the write
    // amplification, not as bytes given to the tier.
    f.shutdown();
    let (written, stored) = (
        st.bytes_written.load(Ordering::Relaxed),
        st.bytes_stored.load(Ordering::Relaxed),
    );
    let kept = st.compact_kept.load(Ordering::Relaxed);
    assert!(written >= stored + kept * 500, "{written} {stored} {kept}");
}

#[test]
fn a_damaged_record_is_a_miss_never_a_wrong_value() {
    let dir = TempDir::new("damage");
    let s = flash_store_as(&dir, 64, Compression::Off);
    fill(&s, "k", 20_000, 0, &[b'v'; 300]);
    // Wait for the flusher, then damage every byte of the file's first
    // page after its first block.
    std::thread::sleep(std::time::Duration::from_millis(200));
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.0.join("flash"))
        .unwrap();
    f.write_at(&vec![0x5a; (1 << 20) - 4096], 4096).unwrap();
    drop(f);
    let mut missing = 0;
    for i in 0..20_000 {
        match get(&s, format!("k{i}").as_bytes()) {
            Some((v, _, _)) => assert_eq!(v, vec![b'v'; 300]),
            None => missing += 1,
        }
    }
    assert!(missing > 0, "the damaged page's items miss");
    assert!(s.flash().unwrap().stats.badcrc.load(Ordering::Relaxed) > 0);
}

/// A store of 4 MiB of RAM in a memory file, over 64 MiB of flash.
pub(super) fn restartable(dir: &TempDir) -> Store {
    Store::open(StoreConfig {
        memory_limit: 4 << 20,
        write_heads: 1,
        backing: crate::backing::BackingKind::File(dir.0.join("mem")),
        flash: Some(FlashConfig {
            paths: vec![FlashPath {
                path: dir.0.join("flash"),
                size: 64 << 20,
            }],
            page_size: 1 << 20,
            wbuf_size: 256 << 10,
            ..FlashConfig::default()
        }),
        ..StoreConfig::default()
    })
    .unwrap()
    .0
}

#[test]
fn with_a_memory_file_the_flash_tier_comes_back_after_a_stop_or_a_kill() {
    let dir = TempDir::new("restart");
    let n = 20_000u32;
    let len = |i: u32| 100 + (i as usize * 37) % 900;
    {
        let s = restartable(&dir);
        for i in 0..n {
            put(
                &s,
                0,
                StoreMode::Set,
                format!("k{i}").as_bytes(),
                i,
                0,
                &value(i, len(i)),
                0,
            );
        }
        assert!(s.delete(b"k5"), "k5 is on flash");
        assert!(on_flash(&s) > 10_000);
        s.close().unwrap();
    }
    for round in 0..2 {
        let s = restartable(&dir);
        let mut back = 0;
        for i in 0..n {
            match get(&s, format!("k{i}").as_bytes()) {
                Some((v, flags, _)) => {
                    assert_eq!((v, flags), (value(i, len(i)), i), "k{i}");
                    back += 1;
                }
                None => assert_eq!(i, 5, "k{i} lost (round {round})"),
            }
        }
        assert_eq!(get(&s, b"k5"), None, "a delete holds");
        // All of them, after the stop and after the kill (the write
        // buffers are in the metadata file: a restart writes them out).
        assert_eq!(back, n - 1, "round {round}");
        // Round 0 ends with a kill: dropped without a close.
        if round == 1 {
            s.close().unwrap();
        }
    }
    // Taken over without the dictionaries its records may name (FILE.dicts
    // lost): no dictionary is made, so none takes a lost one's codec byte.
    std::fs::remove_file(crate::dict::DictFile::path_beside(&dir.0.join("mem"))).unwrap();
    let s = restartable(&dir);
    assert!(on_flash(&s) > 10_000);
    assert!(s.dicts.install(0, vec![b'x'; 2000], 1).is_none());
}
