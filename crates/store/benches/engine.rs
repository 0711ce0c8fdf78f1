//! Storage-only micro-benchmarks: get and set ns/op on a 1,000,000-item
//! cache (16-byte keys, 64-byte values), single thread.

// criterion_group! defines the `pub fn benches` it runs, and takes no
// doc comment for it.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use osmium_store::{Lookup, Store, StoreConfig, StoreMode, Write};

fn key(i: u64) -> [u8; 16] {
    let mut k = [b'0'; 16];
    let s = format!("k{i:015}");
    k.copy_from_slice(s.as_bytes());
    k
}

fn set<'a>(key: &'a [u8], value: &'a [u8]) -> Write<'a> {
    Write {
        mode: StoreMode::Set,
        key,
        flags: 0,
        exptime: 0,
        value,
        cas: 0,
        ..Write::default()
    }
}

fn engine(c: &mut Criterion) {
    let store = Store::new(StoreConfig {
        memory_limit: 1 << 30,
        ..StoreConfig::default()
    });
    let value = [b'v'; 64];
    let n = 1_000_000u64;
    for i in 0..n {
        store.store(0, &set(&key(i), &value));
    }
    let mut i = 0u64;
    c.bench_function("get_hit_1m", |b| {
        b.iter(|| {
            i = (i + 7919) % n;
            let k = key(i);
            match store.get(black_box(&k), None, |it| it.value().len()) {
                Lookup::Hit(len) => black_box(len),
                _ => 0,
            }
        })
    });
    c.bench_function("set_1m", |b| {
        b.iter(|| {
            i = (i + 7919) % n;
            let k = key(i);
            store.store(0, &set(black_box(&k), &value))
        })
    });
}

criterion_group!(benches, engine);
criterion_main!(benches);
