//! Concurrency: readers, writers and evictions racing on the same keys.

use super::*;

#[test]
fn parallel_writers_and_readers() {
    let s = Arc::new(Store::new(StoreConfig {
        memory_limit: 16 << 20,
        ..StoreConfig::default()
    }));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    let key = format!("t{t}-{}", i % 3000);
                    let value = format!("value-{t}-{i}-{}", "x".repeat((i % 200) as usize));
                    put(
                        &s,
                        t,
                        StoreMode::Set,
                        key.as_bytes(),
                        i,
                        0,
                        value.as_bytes(),
                        0,
                    );
                    if let Lookup::Hit((v, f)) = s.get(key.as_bytes(), None, |it| {
                        (it.value().to_vec().unwrap(), it.flags())
                    }) {
                        // whatever we read must be a complete value some writer stored
                        let text = String::from_utf8(v).unwrap();
                        assert!(text.starts_with(&format!("value-{t}-{f}-")), "{text}");
                    }
                    if i % 7 == 0 {
                        s.arith(t, key.as_bytes(), true, 1);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = s.stats();
    assert!(st.curr_items <= 12_000);
}

#[test]
fn eviction_copies_under_concurrent_readers_and_writers() {
    // A small store (8 segments) under 4 threads sharing keys, more than
    // fit: evictions copy hit items (and compactions move live ones)
    // while others read, overwrite, touch and delete them. Every value
    // read must be whole and belong to its key.
    let s = shared_store(8 << 20, 4);
    preload_numbered(&s, 500);
    let threads: Vec<_> = (0..4usize)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut hits = 0u32;
                for i in 0..60_000u32 {
                    let k = (i.wrapping_mul(2_654_435_761) >> 8) % 50_000;
                    let key = format!("key{k}");
                    let body = format!("{key}:{}", "y".repeat((k % 300) as usize));
                    match i % 10 {
                        0..=5 => {
                            if let Lookup::Hit(v) =
                                s.get(key.as_bytes(), None, |it| it.value().to_vec().unwrap())
                            {
                                assert_eq!(v, body.as_bytes(), "{key}");
                                hits += 1;
                            } else {
                                put(
                                    &s,
                                    t,
                                    StoreMode::Set,
                                    key.as_bytes(),
                                    0,
                                    0,
                                    body.as_bytes(),
                                    0,
                                );
                            }
                        }
                        6 => {
                            let exp = s.clock().expiry(100);
                            s.touch(key.as_bytes(), exp);
                        }
                        7 => {
                            s.delete(key.as_bytes());
                        }
                        _ => {
                            put(
                                &s,
                                t,
                                StoreMode::Set,
                                key.as_bytes(),
                                0,
                                0,
                                body.as_bytes(),
                                0,
                            );
                        }
                    }
                }
                hits
            })
        })
        .collect();
    let hits: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(hits > 10_000, "{hits}");
    let st = s.stats();
    assert!(st.evictions > 0, "{st:?}");
}

#[test]
fn lock_free_gets_never_see_reused_memory() {
    // Two segments' worth of memory, rewritten over and over by two writers
    // while two readers get (singly and in batches) without locks: every
    // hit must be a whole value of its own key, with its own flags — a
    // reader that kept reading a segment after it was recycled would see
    // another key's bytes.
    let s = shared_store(4 << 20, 2);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let body = |k: u32, round: u32| {
        let len = 40 + (k * 7 + round) % 900;
        let mut v = format!("{k}:{round}:").into_bytes();
        v.resize(len as usize, b'a' + (k % 26) as u8);
        v
    };
    let check = move |key: &[u8], it: &ItemView<'_>| {
        let k: u32 = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
        let v = it.value().as_raw().unwrap();
        assert_eq!(it.flags(), k, "flags of {k}");
        let text = std::str::from_utf8(v).unwrap();
        let mut parts = text.splitn(3, ':');
        assert_eq!(parts.next().unwrap(), k.to_string(), "value of {k}");
        let round: u32 = parts.next().unwrap().parse().unwrap();
        assert_eq!(v, &body(k, round)[..], "value of {k}");
    };
    let writers: Vec<_> = (0..2usize)
        .map(|t| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    for k in (t as u32..20_000).step_by(2) {
                        let key = format!("k{k}");
                        put(
                            &s,
                            t,
                            StoreMode::Set,
                            key.as_bytes(),
                            k,
                            0,
                            &body(k, round),
                            0,
                        );
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2u32)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let keys: Vec<String> = (0..20_000).map(|k| format!("k{k}")).collect();
                let mut hits = 0u64;
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                while std::time::Instant::now() < deadline {
                    for (i, chunk) in keys.chunks(24).enumerate() {
                        if (i as u32 + t).is_multiple_of(2) {
                            s.get_many(chunk.iter().map(|k| k.as_bytes()), |key, r| {
                                if let Lookup::Hit(it) = r {
                                    check(key, &it);
                                    hits += 1;
                                }
                                true
                            });
                        } else {
                            for key in chunk {
                                if let Lookup::Hit(()) =
                                    s.get(key.as_bytes(), None, |it| check(key.as_bytes(), &it))
                                {
                                    hits += 1;
                                }
                            }
                        }
                    }
                }
                hits
            })
        })
        .collect();
    let hits: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(hits > 1000, "{hits}");
    assert!(s.stats().evictions > 10_000, "{:?}", s.stats());
}

#[test]
fn lock_free_gets_of_resident_keys_never_miss() {
    // Readers get keys that stay stored while a writer fills the same
    // buckets with other keys (moving entries, growing every table many
    // times) and deletes them again: a lookup that trusted a bucket read
    // mid-change, or an outgrown table, would miss a resident key.
    let s = shared_store(256 << 20, 2);
    fill(&s, "stay", 2000, 0, b"resident");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) && n < 3_000_000 {
                let key = format!("churn{n}");
                put(&s, 1, StoreMode::Set, key.as_bytes(), 0, 0, b"c", 0);
                if !n.is_multiple_of(3) {
                    s.delete(key.as_bytes());
                }
                n += 1;
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                let keys: Vec<String> = (0..2000).map(|i| format!("stay{i}")).collect();
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                let mut rounds = 0;
                while std::time::Instant::now() < deadline {
                    for key in &keys {
                        let r = s.get(key.as_bytes(), None, |it| {
                            it.value().as_raw() == Some(&b"resident"[..])
                        });
                        assert!(matches!(r, Lookup::Hit(true)), "{key} missed");
                    }
                    let mut hits = 0;
                    s.get_many(keys.iter().map(|k| k.as_bytes()), |_, r| {
                        hits += usize::from(matches!(r, Lookup::Hit(_)));
                        true
                    });
                    assert_eq!(hits, keys.len());
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}

/// `n` keys whose hashes share shard 0 and, while that shard's table has
/// its initial 64 buckets, the home bucket 0: they crowd one bucket and
/// spill into the next ones.
fn keys_of_one_bucket(n: usize) -> Vec<String> {
    (0u64..)
        .map(|i| format!("k{i}"))
        .filter(|k| {
            let h = hash_key(k.as_bytes());
            shard_of(h) == 0 && (((h >> 32) * 64) >> 32) == 0
        })
        .take(n)
        .collect()
}

#[test]
fn unlocked_sets_never_lose_a_write_to_locked_writers() {
    // 24 keys crowd one bucket (and spill into the next two). Two setters
    // own 8 each and overwrite them with increasing numbers (the unlocked
    // swap path), each set followed by a get that must see exactly that
    // number. A third thread, under the shard lock, touches the setters'
    // keys (which copies their items) and stores and deletes the other 8,
    // which moves the setters' entries from slot to slot (a removal moves
    // the bucket's last entry into the hole). A swap racing a locked
    // writer would lose a set (an older number read back) or leave the
    // counters wrong: with the bucket settling and the version re-check
    // disabled, the counters came out wrong in 2 runs out of 3.
    let s = shared_store(64 << 20, 3);
    let keys = keys_of_one_bucket(24);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (s, stop, keys) = (s.clone(), stop.clone(), keys.clone());
        std::thread::spawn(move || {
            let (owned, theirs) = keys.split_at(16);
            let (owned, keys) = (theirs.to_vec(), owned.to_vec());
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // A touch rewrites the setters' items under the lock (a
                // copy with an expiry field), keeping their values.
                let exp = s.clock().expiry(1000);
                for key in &keys {
                    s.touch(key.as_bytes(), exp);
                }
                let keys = &owned;
                for key in keys {
                    put(&s, 2, StoreMode::Set, key.as_bytes(), 0, 0, b"c", 0);
                }
                for key in keys.iter().rev().step_by(2) {
                    s.delete(key.as_bytes());
                }
                n += 1;
            }
            n
        })
    };
    let setters: Vec<_> = (0..2usize)
        .map(|t| {
            let (s, keys) = (s.clone(), keys[t * 8..t * 8 + 8].to_vec());
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                let mut seq = 0u64;
                while std::time::Instant::now() < deadline {
                    for key in &keys {
                        seq += 1;
                        let value = seq.to_string();
                        let (status, _) = put(
                            &s,
                            t,
                            StoreMode::Set,
                            key.as_bytes(),
                            0,
                            0,
                            value.as_bytes(),
                            0,
                        );
                        assert_eq!(status, StoreStatus::Stored);
                        let got = get(&s, key.as_bytes()).map(|g| g.0);
                        assert_eq!(got.as_deref(), Some(value.as_bytes()), "{key}");
                    }
                }
                seq
            })
        })
        .collect();
    for t in setters {
        assert!(t.join().unwrap() > 1000);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(churn.join().unwrap() > 100);
    // The counters agree with what is stored.
    let (mut items, mut bytes) = (0, 0);
    for key in &keys {
        if let Lookup::Hit(size) = s.get(key.as_bytes(), None, |it| it.ptr.size()) {
            items += 1;
            bytes += size as u64;
        }
    }
    let st = s.stats();
    assert_eq!((st.curr_items, st.bytes), (items, bytes));
}

#[test]
fn fetches_race_writers_and_evictions_safely() {
    // A fetch reads lock-free like a GET: with writers replacing, deleting and
    // evicting the same keys, every value it sees is a complete one that
    // was stored under that key with those flags.
    let s = shared_store(8 << 20, 4);
    preload_numbered(&s, 500);
    let threads: Vec<_> = (0..4usize)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let hit = Fetch {
                    record_hit: true,
                    ..Fetch::default()
                };
                let mut hits = 0;
                for i in 0..30_000u32 {
                    let key = format!("k{}", i % 500);
                    if t % 2 == 0 {
                        let value = format!("{key}-{i}-{}", "y".repeat((i % 3000) as usize));
                        put(
                            &s,
                            t,
                            StoreMode::Set,
                            key.as_bytes(),
                            i,
                            0,
                            value.as_bytes(),
                            0,
                        );
                        if i % 11 == 0 {
                            s.delete(key.as_bytes());
                        }
                    } else if let Lookup::Hit((v, f, lock_free)) =
                        s.fetch(t, key.as_bytes(), &hit, |it, _| {
                            (it.value().to_vec().unwrap(), it.flags(), it.lock_free())
                        })
                    {
                        let text = String::from_utf8(v).unwrap();
                        let want = format!("{key}-{f}-");
                        assert!(text.starts_with(&want), "{text:.40}");
                        let pad = text.len() - want.len();
                        assert_eq!(pad, (f % 3000) as usize);
                        hits += usize::from(lock_free);
                    }
                }
                hits
            })
        })
        .collect();
    let lock_free_hits: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(lock_free_hits > 0);
}
