//! Readers that keep their pin across lookups (a connection gathering
//! values for one `writev`) while writers fill a small store, evict (the
//! evictor copying hit items), flush and delete: nothing waits forever,
//! and memory read under a kept pin is not rewritten until it is dropped.

use super::*;
use crate::epoch;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

fn body(k: u32) -> Vec<u8> {
    format!("{k}:{}", "v".repeat(200 + (k % 3000) as usize)).into_bytes()
}

#[test]
fn kept_pins_never_deadlock_writers_and_keep_their_memory() {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let s = shared_store(8 << 20, 4);
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for t in 0..2usize {
            let (s, stop) = (s.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut i = t as u32;
                while !stop.load(Ordering::Relaxed) {
                    i = i.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    let k = (i >> 8) % 20_000;
                    let key = format!("key{k}");
                    match i % 1000 {
                        0 => s.flush_all(1),
                        1..=20 => {
                            s.delete(key.as_bytes());
                        }
                        _ => {
                            put(&s, t, StoreMode::Set, key.as_bytes(), 0, 0, &body(k), 0);
                        }
                    }
                }
            }));
        }
        for t in 2..4usize {
            let (s, stop) = (s.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut i = t as u32;
                let mut kept_batches = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    // One batch: lookups whose values stay referenced, with
                    // the pin kept from the first hit on.
                    let mut kept = None;
                    let mut held: Vec<(u32, *const u8, usize)> = Vec::new();
                    for _ in 0..16 {
                        i = i.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        let k = (i >> 8) % 20_000;
                        let key = format!("key{k}");
                        let _ = s.get(key.as_bytes(), None, |it| {
                            if it.lock_free() {
                                if kept.is_none() {
                                    kept = epoch::keep();
                                }
                                if kept.is_some() {
                                    held.push((
                                        k,
                                        it.value().as_raw().unwrap().as_ptr(),
                                        it.value().len(),
                                    ));
                                }
                            }
                        });
                    }
                    for &(k, ptr, len) in &held {
                        // SAFETY: the pin kept since before this lookup is
                        // still held, so the memory was not rewritten.
                        let v = unsafe { std::slice::from_raw_parts(ptr, len) };
                        assert!(v == body(k).as_slice(), "key{k} changed under a kept pin");
                    }
                    kept_batches += u32::from(kept.is_some());
                    drop(kept);
                }
                assert!(kept_batches > 0, "some batches kept their pin");
            }));
        }
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        let _ = done_tx.send(s.stats().evictions);
    });
    let evictions = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("readers keeping pins and writers deadlocked");
    assert!(evictions > 0, "the writers evicted");
}
