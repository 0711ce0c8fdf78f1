//! A fixed GET loop for counting instructions per lookup (not a timing
//! benchmark): loads 100,000 items (16 B keys, 64 B values), then runs ten
//! passes of lone `Store::get`s over them in a scattered order, through a
//! function that is never inlined, so a profiler can attribute its cost.
//!
//!     cargo build --release --example get_loop -p osmium-store
//!     valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out target/release/examples/get_loop
//!     callgrind_annotate --inclusive=yes /tmp/cg.out | grep 'get_loop::gets'
//!
//! The inclusive count of `get_loop::gets` divided by 1,000,000 is the
//! instructions per GET (see `BENCHMARKS.md`).

use osmium_store::{Lookup, Store, StoreConfig, StoreMode, Write};

const ITEMS: usize = 100_000;
const PASSES: usize = 10;

fn key(i: usize) -> [u8; 16] {
    let mut k = [b'0'; 16];
    k[0] = b'k';
    let mut n = i;
    for b in k[1..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// `PASSES` passes of GETs over `keys`; the sum of the values' lengths.
#[inline(never)]
fn gets(store: &Store, keys: &[[u8; 16]]) -> usize {
    let mut bytes = 0;
    for _ in 0..PASSES {
        for k in keys {
            if let Lookup::Hit(len) =
                store.get(std::hint::black_box(k), None, |it| it.value().len())
            {
                bytes += len;
            }
        }
    }
    bytes
}

fn main() {
    let store = Store::new(StoreConfig {
        memory_limit: 1 << 28,
        write_heads: 2,
        ..StoreConfig::default()
    });
    for i in 0..ITEMS {
        let w = Write {
            mode: StoreMode::Set,
            key: &key(i),
            value: &[b'v'; 64],
            ..Write::default()
        };
        store.store(i % 2, &w);
    }
    // A prime stride visits every key once per pass, in no useful order.
    let keys: Vec<[u8; 16]> = (0..ITEMS).map(|j| key((j * 611_953) % ITEMS)).collect();
    let bytes = gets(&store, &keys);
    assert_eq!(bytes, PASSES * ITEMS * 64, "every GET should hit");
    println!("{} gets, {bytes} value bytes", PASSES * ITEMS);
}
