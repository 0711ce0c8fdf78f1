//! Hot keys, always on: which keys take the most requests right now, with
//! their read, write and byte rates (`stats hotkeys`, [`top`]).
//!
//! Every worker samples about 1 request in N (`-o hotkeys_sample=1/N`)
//! and counts the sampled ones in a Space-Saving summary of its own
//! (Metwally, Agrawal, El Abbadi, ICDT 2005), with the hashed filter of
//! Filtered Space-Saving (Homem, Carvalho, 2010) in front ([`sketch`]).
//! Space-Saving rather than HeavyKeeper (Gong et al., USENIX ATC 2018):
//! on skewed loads both find the heavy hitters, and HeavyKeeper needs
//! less memory for the same accuracy at the tail, but here the sampling,
//! not the summary, bounds the accuracy (a few hundred slots count the
//! hottest keys of a zipf load within 1 % of what was sampled), and
//! Space-Saving gives what HeavyKeeper does not: a deterministic
//! guarantee (a key seen more often than the smallest count is tracked,
//! its count bracketed by `[count - error, count]`), exact per-key side
//! counters (reads, writes, bytes) in the same slot, and an update with no
//! probabilistic decay to draw: one table probe and, for a tracked key, a
//! heap sift; the filter makes a sample of a rare key (most samples of a
//! zipf load's tail) one counter increment. Its memory is fixed at
//! start: `max(8 × hotkeys_top, 256)` slots of a 250-byte key cell per
//! summary, two summaries per worker (about 90 KiB each by default).
//!
//! **Which requests**: reads are get/gets/gat/gats and binary GET/GAT
//! (every key of a multi-key get), and mg; writes are every storage
//! command (set/add/replace/append/prepend/cas, ms, binary SET...),
//! incr/decr/ma, delete/md and touch (they change the item). Misses
//! count: a hot key that misses is as interesting as one that hits (a
//! store refused at its command line, a value too large for any item, is
//! not counted). Bytes are value bytes: sent for a hit, received for a
//! store.
//!
//! **Sampling**: a countdown per worker, reset after each sample to a
//! random interval uniform in `[1, 2N - 1]` (mean N, so counts × N are
//! unbiased rates, and a client that cycles through N keys is not aliased
//! onto one of them). Between samples a request costs one decrement and a
//! branch; the sampled one a hash, an uncontended lock and a summary
//! update (no clock read, no allocation: the key is copied into its
//! slot). With `hotkeys_top=0` the workers have no sampler at all. The
//! default, 1/32, costs about 1 % of the server CPU of the cheapest GET
//! (a pipelined one, 0.5 µs) and keeps the ten hottest of a zipf load
//! within 3 % from about 500,000 requests/s; 1/8 costs about 3 to 4 % of
//! that GET and is as exact from about 100,000 (BENCHMARKS.md, "Hot
//! keys").
//!
//! **Window**: time is cut into epochs of [`EPOCH_MS`] (5 s, aligned on
//! the wall clock so a client can tell which window was reported; the
//! maintenance thread moves the epoch on, [`HotKeys::tick`], within
//! milliseconds of the boundary); each worker has the summary of the
//! current epoch and of the one before, the older one dropped when a new
//! epoch starts. Rates are what the two hold divided by the time since
//! the previous epoch started: a window of 5 to 10 s ending now, never
//! older. A key nobody asks for any more is gone from the report within
//! 10 s. (Exponential decay was the other way: no hard edge, so a key
//! would fade but never leave, and every slot would need its own time.)
//!
//! **Merged on demand**: [`top`] locks each worker's summaries in turn
//! (a worker takes its own lock only to count a sample), sums every key
//! over workers and both epochs, and sorts by requests (reads + writes).

mod sketch;

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use sketch::{Counts, SpaceSaving};

/// Length of an epoch: rates cover the current epoch and the one before.
pub const EPOCH_MS: u64 = 5_000;

/// `-o hotkeys_top` by default.
pub const DEFAULT_TOP: usize = 32;
/// `-o hotkeys_sample=1/N` by default (see BENCHMARKS.md, "Hot keys").
pub const DEFAULT_SAMPLE: u32 = 32;

/// A hot key and its rates over the window (requests and bytes per
/// second, scaled by the sampling).
#[derive(Debug, Clone, PartialEq)]
pub struct HotKey {
    pub key: Vec<u8>,
    pub reads_per_sec: f64,
    pub writes_per_sec: f64,
    pub bytes_per_sec: f64,
}

/// One worker's two epochs.
struct Tracker {
    epoch: u64,
    current: SpaceSaving,
    /// Epoch `epoch - 1` (empty when that epoch saw no sample).
    previous: SpaceSaving,
}

impl Tracker {
    /// Moves to `epoch`: the current summary becomes the previous one when
    /// `epoch` follows it, else (a gap, a clock set back) both start over.
    fn advance(&mut self, epoch: u64) {
        if self.epoch == epoch {
            return;
        }
        if epoch == self.epoch + 1 {
            std::mem::swap(&mut self.current, &mut self.previous);
        } else {
            self.previous.clear();
        }
        self.current.clear();
        self.epoch = epoch;
    }
}

/// Every worker's summaries.
pub struct HotKeys {
    top: usize,
    sample: u32,
    /// Wall-clock ms when tracking started (the window starts no earlier).
    started_ms: u64,
    /// The current epoch (wall-clock ms / `EPOCH_MS`), moved on by
    /// [`HotKeys::tick`]: what a sample reads instead of a clock.
    epoch: AtomicU64,
    /// When the current and the previous epoch began (wall-clock ms, as
    /// [`HotKeys::tick`] saw it).
    starts: Mutex<[u64; 2]>,
    workers: Vec<Mutex<Tracker>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl HotKeys {
    /// None when `top` is 0 (off).
    pub fn new(top: usize, sample: u32, threads: usize) -> Option<Arc<HotKeys>> {
        if top == 0 {
            return None;
        }
        let slots = (top * 8).max(256);
        let workers = (0..threads.max(1))
            .map(|_| {
                Mutex::new(Tracker {
                    epoch: 0,
                    current: SpaceSaving::new(slots),
                    previous: SpaceSaving::new(slots),
                })
            })
            .collect();
        let now = now_ms();
        Some(Arc::new(HotKeys {
            top,
            sample: sample.max(1),
            started_ms: now,
            epoch: AtomicU64::new(now / EPOCH_MS),
            starts: Mutex::new([now, now]),
            workers,
        }))
    }

    /// `-o hotkeys_top`: the most keys reported.
    pub fn limit(&self) -> usize {
        self.top
    }

    /// Moves to the epoch of the wall clock: called by the maintenance
    /// thread, which wakes just after every second turns over (and every
    /// 100 ms), so an epoch starts within milliseconds of its boundary.
    pub fn tick(&self) {
        self.tick_at(now_ms());
    }

    fn tick_at(&self, now: u64) {
        let epoch = now / EPOCH_MS;
        let old = self.epoch.load(Ordering::Relaxed);
        if epoch == old {
            return;
        }
        let mut starts = self.starts.lock().unwrap_or_else(|e| e.into_inner());
        starts[1] = if epoch == old + 1 {
            starts[0]
        } else {
            // A gap (or a clock set back): the epoch before had nothing.
            epoch.saturating_sub(1) * EPOCH_MS
        };
        starts[0] = now;
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// Counts a sample of worker `worker`.
    fn count(&self, worker: usize, key: &[u8], add: Counts) {
        let hash = osmium_store::index::hash_key(key);
        let epoch = self.epoch.load(Ordering::Relaxed);
        let Some(m) = self.workers.get(worker) else {
            return;
        };
        let mut t = m.lock().unwrap_or_else(|e| e.into_inner());
        t.advance(epoch);
        t.current.offer(key, hash, add);
    }

    /// The `n` hottest keys now, hottest first.
    pub fn hottest(&self, n: usize) -> Vec<HotKey> {
        self.hottest_at(n, now_ms())
    }

    fn hottest_at(&self, n: usize, now: u64) -> Vec<HotKey> {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let previous_start = self.starts.lock().unwrap_or_else(|e| e.into_inner())[1];
        let mut sums: HashMap<Vec<u8>, Counts> = HashMap::new();
        for w in &self.workers {
            let t = w.lock().unwrap_or_else(|e| e.into_inner());
            let parts: &[&SpaceSaving] = if t.epoch == epoch {
                &[&t.current, &t.previous]
            } else if t.epoch + 1 == epoch {
                &[&t.current]
            } else {
                &[]
            };
            for part in parts {
                for (key, c) in part.entries() {
                    if c.reads + c.writes == 0 {
                        continue;
                    }
                    let s = sums.entry(key.to_vec()).or_default();
                    s.reads += c.reads;
                    s.writes += c.writes;
                    s.bytes += c.bytes;
                }
            }
        }
        let mut keys: Vec<(Vec<u8>, Counts)> = sums.into_iter().collect();
        keys.sort_by(|a, b| {
            (b.1.reads + b.1.writes)
                .cmp(&(a.1.reads + a.1.writes))
                .then(b.1.bytes.cmp(&a.1.bytes))
                .then(a.0.cmp(&b.0))
        });
        keys.truncate(n);
        // The window: since the previous epoch began, or since tracking
        // did; at least a second (a clock set back shortens nothing
        // below that).
        let from = previous_start.max(self.started_ms);
        let window = (now.saturating_sub(from) as f64 / 1000.0).max(1.0);
        let scale = f64::from(self.sample) / window;
        keys.into_iter()
            .map(|(key, c)| HotKey {
                key,
                reads_per_sec: c.reads as f64 * scale,
                writes_per_sec: c.writes as f64 * scale,
                bytes_per_sec: c.bytes as f64 * scale,
            })
            .collect()
    }
}

/// The `n` hottest keys, hottest first (none when hot keys are off):
/// for `stats hotkeys` and the metrics endpoint (`Shared::hot_keys`).
pub fn top(hot: Option<&HotKeys>, n: usize) -> Vec<HotKey> {
    hot.map_or_else(Vec::new, |h| h.hottest(n))
}

/// `stats hotkeys [N]`: `STAT hotkey <rank> <key> <reads/s> <writes/s>
/// <bytes/s>` per key, hottest first, at most `hotkeys_top` (or N if
/// fewer); keys URI-encoded as memcached's `watch` prints them.
pub fn stats_rows(hot: Option<&HotKeys>, n: Option<usize>, out: &mut Vec<u8>) {
    let Some(h) = hot else {
        return;
    };
    let n = n.map_or(h.limit(), |n| n.min(h.limit()));
    for (rank, k) in top(hot, n).iter().enumerate() {
        out.extend_from_slice(b"STAT hotkey ");
        out.extend_from_slice(itoa::Buffer::new().format(rank + 1).as_bytes());
        out.push(b' ');
        uri_encode(&k.key, out);
        let rates = format!(
            " {:.1} {:.1} {:.1}\r\n",
            k.reads_per_sec, k.writes_per_sec, k.bytes_per_sec
        );
        out.extend_from_slice(rates.as_bytes());
    }
}

pub use osmium_protocol::encode::uri_encode;

/// A worker's sampler: which requests are counted.
pub struct Sampler {
    hot: Arc<HotKeys>,
    worker: usize,
    /// Requests until the next sample.
    countdown: Cell<u32>,
    rng: Cell<Rng>,
}

impl Sampler {
    pub fn new(hot: Arc<HotKeys>, worker: usize) -> Sampler {
        let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15 ^ (worker as u64 + 1));
        let first = interval(&mut rng, hot.sample);
        Sampler {
            hot,
            worker,
            countdown: Cell::new(first),
            rng: Cell::new(rng),
        }
    }

    /// A read of `key` that sent `bytes` of value.
    #[inline]
    pub fn read(&self, key: &[u8], bytes: usize) {
        if self.due() {
            self.sample(key, 1, 0, bytes);
        }
    }

    /// A write of `key` that received `bytes` of value.
    #[inline]
    pub fn write(&self, key: &[u8], bytes: usize) {
        if self.due() {
            self.sample(key, 0, 1, bytes);
        }
    }

    #[inline]
    fn due(&self) -> bool {
        let left = self.countdown.get();
        if left > 1 {
            self.countdown.set(left - 1);
            false
        } else {
            true
        }
    }

    #[cold]
    #[inline(never)]
    fn sample(&self, key: &[u8], reads: u64, writes: u64, bytes: usize) {
        let mut rng = self.rng.get();
        self.countdown.set(interval(&mut rng, self.hot.sample));
        self.rng.set(rng);
        let add = Counts {
            reads,
            writes,
            bytes: bytes as u64,
        };
        self.hot.count(self.worker, key, add);
    }
}

/// Requests to the next sample: uniform in `[1, 2n - 1]`, mean `n`.
#[inline]
fn interval(rng: &mut Rng, n: u32) -> u32 {
    if n <= 1 {
        return 1;
    }
    let span = u64::from(n) * 2 - 1;
    1 + (rng.next() % span) as u32
}

/// xorshift64*: the sampler's (and the tests') cheap generator.
#[derive(Clone, Copy)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    #[inline]
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    #[cfg(test)]
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(key: &[u8]) -> String {
        let mut out = Vec::new();
        uri_encode(key, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn keys_are_uri_encoded_as_memcached_does() {
        assert_eq!(encoded(b"user-1.a_b~c"), "user-1.a_b~c");
        assert_eq!(encoded(b"a b:c/\r\n"), "a%20b%3Ac%2F%0D%0A");
        assert_eq!(encoded(&[0, 0x7f, 0xff, b'%']), "%00%7F%FF%25");
    }

    #[test]
    fn intervals_average_the_sampling_rate() {
        let mut rng = Rng::new(3);
        let n = 100_000;
        let sum: u64 = (0..n).map(|_| u64::from(interval(&mut rng, 8))).sum();
        let mean = sum as f64 / n as f64;
        assert!((mean - 8.0).abs() < 0.1, "mean {mean}");
        assert_eq!(interval(&mut rng, 1), 1);
        for _ in 0..1000 {
            assert!((1..=15).contains(&interval(&mut rng, 8)));
        }
    }

    #[test]
    fn rates_cover_two_epochs_then_fade() {
        let hot = HotKeys::new(4, 1, 2).unwrap();
        // Tracking started long ago; feed worker 0 by hand at fixed times.
        let hot = HotKeys {
            started_ms: 0,
            ..Arc::try_unwrap(hot).ok().unwrap()
        };
        let t0 = 1_000 * EPOCH_MS; // an epoch's start
        let c = Counts {
            reads: 1,
            writes: 0,
            bytes: 100,
        };
        let put = |w: usize, key: &[u8]| hot.count(w, key, c);
        hot.tick_at(t0);
        for _ in 0..50 {
            put(0, b"a"); // 50 in the first epoch, on worker 0
        }
        hot.tick_at(t0 + EPOCH_MS);
        for _ in 0..50 {
            put(1, b"a"); // 50 in the second, on worker 1
        }
        put(0, b"b");
        // 10 s after t0: 100 reads over 10 s.
        let top = hot.hottest_at(10, t0 + 2 * EPOCH_MS - 1);
        assert_eq!(top[0].key, b"a");
        assert!((top[0].reads_per_sec - 10.0).abs() < 0.1, "{top:?}");
        assert!((top[0].bytes_per_sec - 1000.0).abs() < 10.0);
        assert_eq!(top[1].key, b"b");
        assert_eq!(hot.hottest_at(1, t0 + 2 * EPOCH_MS - 1).len(), 1);
        // An epoch later only the second epoch counts, over 5 to 10 s.
        hot.tick_at(t0 + 2 * EPOCH_MS);
        let top = hot.hottest_at(10, t0 + 2 * EPOCH_MS + 2_500);
        assert!((top[0].reads_per_sec - 50.0 / 7.5).abs() < 0.1, "{top:?}");
        // Two epochs later: gone.
        hot.tick_at(t0 + 3 * EPOCH_MS);
        assert!(hot.hottest_at(10, t0 + 3 * EPOCH_MS).is_empty());
        // A clock set back starts over.
        put(0, b"c");
        hot.tick_at(t0);
        assert!(hot.hottest_at(10, t0 + 1).is_empty());
    }

    /// The hot path's cost per request, sampled updates included:
    /// `cargo test --release -p osmium-server --bin osmium hotkeys_cost --
    /// --ignored --nocapture` (BENCHMARKS.md, "Hot keys").
    #[test]
    #[ignore]
    fn hotkeys_cost() {
        // 1,000,000 distinct 16-byte keys, zipf-like order (rank from a
        // skewed draw), 20,000,000 requests.
        let mut rng = Rng::new(7);
        let keys: Vec<[u8; 16]> = (0..1 << 16)
            .map(|_| {
                let u = rng.unit().max(1e-12);
                let rank = (1_000_000f64.powf(u) as u64).min(999_999);
                let mut k = *b"k000000000000000";
                let digits = rank.to_string();
                k[16 - digits.len()..].copy_from_slice(digits.as_bytes());
                k
            })
            .collect();
        let n = 20_000_000usize;
        for sample in [1u32, 8, 16, 32, 64] {
            let hot = HotKeys::new(DEFAULT_TOP, sample, 1).unwrap();
            let s = Sampler::new(hot, 0);
            let t = std::time::Instant::now();
            for i in 0..n {
                s.read(std::hint::black_box(&keys[i & 0xffff]), 64);
            }
            let with = t.elapsed().as_nanos() as f64 / n as f64;
            let t = std::time::Instant::now();
            for i in 0..n {
                std::hint::black_box(&keys[i & 0xffff]);
            }
            let without = t.elapsed().as_nanos() as f64 / n as f64;
            println!(
                "hotkeys_sample=1/{sample}: {:.2} ns per request ({with:.2} - {without:.2} loop)",
                with - without
            );
        }
    }

    #[test]
    fn a_sampler_scales_by_its_rate() {
        let hot = HotKeys::new(8, 4, 1).unwrap();
        let s = Sampler::new(hot.clone(), 0);
        for _ in 0..40_000 {
            s.read(b"x", 10);
        }
        let top = hot.hottest(4);
        // About 40,000 reads counted in all (1 in 4 sampled, scaled back),
        // over the shortest window (a second).
        let counted = top[0].reads_per_sec;
        assert!((counted - 40_000.0).abs() < 2_000.0, "{counted}");
        assert_eq!(top[0].writes_per_sec, 0.0);
    }
}
