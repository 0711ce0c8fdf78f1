//! Storage-only benchmarks of issue 4 (no network): `get` and `set` on an
//! `osmium_store::Store` holding 1,000,000 items (16 B keys `k%015d`, 64 B
//! values, 1 GiB limit, 2 write heads), with one thread and with two.
//!
//! How to read the figures: every benchmark reports `Throughput::Elements(1)`
//! per iteration, and its iteration time is *wall time per operation of all
//! threads together*: with 2 threads each thread does `iters` operations on
//! its own half of the keys with its own write head, and the routine returns
//! wall time / 2, so criterion's time/iter = wall / (2 × iters) and its
//! `thrpt` is the aggregate operations per second. Hence
//! `set/2threads thrpt ÷ set/1thread thrpt` (= time of `set/1thread` ÷ time
//! of `set/2threads`) is the two-thread scaling factor (issue 4 wants ≥ 1.7);
//! the last lines printed give that ratio directly, from every timed batch.
//!
//! Keys are precomputed in a scattered visiting order (stride by a large
//! prime), so the timed loops allocate nothing and format nothing, walk the
//! key array sequentially, and hit the store's memory in no useful order.
//!
//! Because nothing else happens between two lookups, the CPU overlaps the
//! cache misses of consecutive gets (their keys are known in advance): `get`
//! figures are throughput. `get/1thread-dependent` makes each key wait for
//! the previous lookup's result, so its time is the latency of one lookup.
//! Neither is comparable with `osmium-store`'s `engine` bench (`get_hit_1m`),
//! which formats a key with `format!` (about 60 ns) between lookups, which
//! also keeps the misses of consecutive lookups from overlapping.

// criterion_group! defines the `pub fn benches` it runs, and takes no
// doc comment for it.
#![allow(missing_docs)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime};

use criterion::{black_box, criterion_group, BenchmarkId, Criterion, Throughput};
use osmium_store::{Lookup, Store, StoreConfig, StoreMode, Write};

const ITEMS: usize = 1_000_000;
const VALUE: [u8; 64] = [b'v'; 64];

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

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Key ids `lo..hi` in the order `lo + (j × stride mod len)`, with a large
/// prime stride coprime with the length, as ready-made keys.
fn scattered(lo: usize, hi: usize) -> Vec<[u8; 16]> {
    let len = hi - lo;
    let stride = [611_953, 611_957, 611_969, 611_971]
        .into_iter()
        .find(|&p| gcd(p, len) == 1)
        .expect("a coprime stride");
    (0..len).map(|j| key(lo + (j * stride) % len)).collect()
}

fn set<'a>(key: &'a [u8], value: &'a [u8]) -> Write<'a> {
    Write {
        mode: StoreMode::Set,
        key,
        value,
        ..Write::default()
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Get,
    /// A get whose next key waits for this one's result: no two lookups
    /// overlap, so this is the latency of one lookup, not the throughput.
    GetDependent,
    Set,
    /// Gets in batches of `BATCH` keys through `Store::get_many` (how the
    /// server serves a multi-key get), which overlaps their misses.
    GetBatch,
}

/// Keys per `get_many` call in `get/1thread-batch16`.
const BATCH: usize = 16;

/// A worker's keys and where it is in them (kept between criterion's calls,
/// so every call continues the walk instead of restarting it).
struct Lane {
    keys: Vec<[u8; 16]>,
    pos: usize,
    misses: u64,
}

impl Lane {
    /// `iters` operations; returns when it started and ended.
    fn run(&mut self, store: &Store, head: usize, op: Op, iters: u64) -> (Instant, Instant) {
        let n = self.keys.len();
        let mut pos = self.pos;
        let start = Instant::now();
        match op {
            Op::Get => {
                for _ in 0..iters {
                    let k = &self.keys[pos];
                    pos += 1;
                    if pos == n {
                        pos = 0;
                    }
                    match store.get(black_box(k), None, |it| it.value().len()) {
                        Lookup::Hit(len) => {
                            black_box(len);
                        }
                        _ => self.misses += 1,
                    }
                }
            }
            Op::GetDependent => {
                for _ in 0..iters {
                    let k = &self.keys[pos];
                    let len = match store.get(black_box(k), None, |it| it.value().len()) {
                        Lookup::Hit(len) => len,
                        _ => {
                            self.misses += 1;
                            0
                        }
                    };
                    // Always 1, but only known once the lookup is done.
                    pos += 1 + (black_box(len) >> 40);
                    if pos >= n {
                        pos = 0;
                    }
                }
            }
            Op::GetBatch => {
                let mut done = 0;
                while done < iters {
                    let take = (BATCH as u64).min(iters - done).min((n - pos) as u64) as usize;
                    let batch = self.keys[pos..pos + take].iter().map(|k| &k[..]);
                    store.get_many(black_box(batch), |_, r| {
                        match r {
                            Lookup::Hit(it) => {
                                black_box(it.value().len());
                            }
                            _ => self.misses += 1,
                        }
                        true
                    });
                    done += take as u64;
                    pos += take;
                    if pos == n {
                        pos = 0;
                    }
                }
            }
            Op::Set => {
                for _ in 0..iters {
                    let k = &self.keys[pos];
                    pos += 1;
                    if pos == n {
                        pos = 0;
                    }
                    black_box(store.store(head, &set(black_box(k), &VALUE)));
                }
            }
        }
        let end = Instant::now();
        self.pos = pos;
        (start, end)
    }
}

/// Sum of (operations, nanoseconds of wall time) of every timed batch of a
/// benchmark, warm-up included: [get1, get2, set1, set2, get1-dependent,
/// get1-batch16].
static TOTALS: [(AtomicU64, AtomicU64); 6] = [
    (AtomicU64::new(0), AtomicU64::new(0)),
    (AtomicU64::new(0), AtomicU64::new(0)),
    (AtomicU64::new(0), AtomicU64::new(0)),
    (AtomicU64::new(0), AtomicU64::new(0)),
    (AtomicU64::new(0), AtomicU64::new(0)),
    (AtomicU64::new(0), AtomicU64::new(0)),
];

fn record(slot: usize, ops: u64, wall: Duration) {
    TOTALS[slot].0.fetch_add(ops, Ordering::Relaxed);
    TOTALS[slot]
        .1
        .fetch_add(wall.as_nanos() as u64, Ordering::Relaxed);
}

/// Aggregate million operations per second recorded in `slot`.
fn mops(slot: usize) -> Option<f64> {
    let ops = TOTALS[slot].0.load(Ordering::Relaxed);
    let ns = TOTALS[slot].1.load(Ordering::Relaxed);
    (ops > 0 && ns > 0).then(|| ops as f64 * 1e3 / ns as f64)
}

fn storage(c: &mut Criterion) {
    let store = Store::new(StoreConfig {
        memory_limit: 1 << 30,
        write_heads: 2,
        ..StoreConfig::default()
    });
    let t = Instant::now();
    for i in 0..ITEMS {
        store.store(i % 2, &set(&key(i), &VALUE));
    }
    let st = store.stats();
    // What the server's maintenance thread does within a second or two of
    // a load: back the full regions of item memory with huge pages.
    let regions = store.collapse_memory(usize::MAX);
    eprintln!(
        "storage: loaded {ITEMS} items in {:.2} s (curr_items {}, evictions {}); {regions} huge-page regions",
        t.elapsed().as_secs_f64(),
        st.curr_items,
        st.evictions
    );
    // One lane walking every key (1 thread), two lanes walking halves.
    let mut single = [Lane {
        keys: scattered(0, ITEMS),
        pos: 0,
        misses: 0,
    }];
    let mut pair = [
        Lane {
            keys: scattered(0, ITEMS / 2),
            pos: 0,
            misses: 0,
        },
        Lane {
            keys: scattered(ITEMS / 2, ITEMS),
            pos: 0,
            misses: 0,
        },
    ];

    for (op, name, slot0) in [(Op::Get, "get", 0), (Op::Set, "set", 2)] {
        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::from_parameter("1thread"), |b| {
            b.iter_custom(|iters| {
                let (s, e) = single[0].run(&store, 0, op, iters);
                let wall = e - s;
                record(slot0, iters, wall);
                wall
            })
        });
        g.bench_function(BenchmarkId::from_parameter("2threads"), |b| {
            b.iter_custom(|iters| {
                let barrier = Barrier::new(2);
                let store = &store;
                let barrier = &barrier;
                let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
                    let hs: Vec<_> = pair
                        .iter_mut()
                        .enumerate()
                        .map(|(head, lane)| {
                            s.spawn(move || {
                                barrier.wait();
                                lane.run(store, head, op, iters)
                            })
                        })
                        .collect();
                    hs.into_iter()
                        .map(|h| h.join().expect("bench thread"))
                        .collect()
                });
                let start = spans.iter().map(|s| s.0).min().expect("two spans");
                let end = spans.iter().map(|s| s.1).max().expect("two spans");
                let wall = end - start;
                record(slot0 + 1, 2 * iters, wall);
                // criterion divides by iters: report wall / (2 × iters) per op.
                wall / 2
            })
        });
        if op == Op::Get {
            g.bench_function(BenchmarkId::from_parameter("1thread-dependent"), |b| {
                b.iter_custom(|iters| {
                    let (s, e) = single[0].run(&store, 0, Op::GetDependent, iters);
                    record(4, iters, e - s);
                    e - s
                })
            });
            g.bench_function(BenchmarkId::from_parameter("1thread-batch16"), |b| {
                b.iter_custom(|iters| {
                    let (s, e) = single[0].run(&store, 0, Op::GetBatch, iters);
                    record(5, iters, e - s);
                    e - s
                })
            });
        }
        g.finish();
        if op == Op::Get {
            let misses: u64 = single.iter().chain(pair.iter()).map(|l| l.misses).sum();
            if misses > 0 {
                eprintln!("storage: WARNING: {misses} gets missed (every key should be resident)");
            }
        }
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = storage
}

/// The 1-minute load average (the 2-thread figures need both cores free).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// criterion's output directory: `$CRITERION_HOME`, else `criterion` in the
/// target directory (this executable is `<target>/<profile>/deps/storage-…`).
fn criterion_dir() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return Some(PathBuf::from(home));
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return Some(PathBuf::from(target).join("criterion"));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.join("criterion"))
}

/// criterion's point estimate of the time per iteration (ns) of `id`
/// (`group/function`), from the run that started at `since`: the slope when
/// it fitted one (linear sampling), else the mean.
fn criterion_estimate(id: &str, since: SystemTime) -> Option<f64> {
    let path = criterion_dir()?.join(id).join("new").join("estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    ["slope", "mean"]
        .iter()
        .find_map(|k| v.get(k)?.get("point_estimate")?.as_f64())
}

fn main() {
    let since = SystemTime::now();
    let load_before = load_average();
    benches();
    Criterion::default().configure_from_args().final_summary();
    let names = [
        "get/1thread",
        "get/2threads",
        "set/1thread",
        "set/2threads",
        "get/1thread-dependent",
        "get/1thread-batch16",
    ];
    let figures: Vec<(usize, f64)> = (0..names.len())
        .filter_map(|i| mops(i).map(|m| (i, m)))
        .collect();
    if figures.is_empty() {
        return;
    }
    let estimates: Vec<Option<f64>> = names.iter().map(|n| criterion_estimate(n, since)).collect();
    println!();
    println!(
        "summary (load average {load_before} before, {} after; 2 cores):",
        load_average()
    );
    println!(
        "  {:<21} {:>14} {:>14}   {:>22}",
        "benchmark", "criterion ns", "criterion Mops", "all timed batches"
    );
    for (i, m) in &figures {
        let (ns, mops) = match estimates[*i] {
            Some(ns) => (format!("{ns:.1}"), format!("{:.2}", 1e3 / ns)),
            None => ("-".into(), "-".into()),
        };
        println!(
            "  {:<21} {ns:>14} {mops:>14}   {:>8.1} ns {:>6.2} Mops",
            names[*i],
            1e3 / m,
            m
        );
    }
    for (one, two, what) in [(0, 1, "get"), (2, 3, "set")] {
        if let (Some(a), Some(b)) = (mops(one), mops(two)) {
            let by_criterion = match (estimates[one], estimates[two]) {
                (Some(t1), Some(t2)) => format!("{:.2}x", t1 / t2),
                _ => "-".into(),
            };
            println!(
                "  {what} throughput 2 threads / 1 thread: {by_criterion} (criterion estimates), {:.2}x (all timed batches)",
                b / a
            );
        }
    }
}
