//! Hot keys, always on: which keys take the most requests right now, with
//! their read, write and byte rates (`stats hotkeys`, [`top`]).
//!
//! Every worker counts its requests ([`sampler`]: every one while its
//! rate is low, a weighted sample of them as it grows, or 1 in N with
//! `-o hotkeys_sample=1/N`) in a Space-Saving summary of its own
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
//! **Cost**: between samples a request costs one decrement and a branch;
//! a sample a hash, an uncontended lock and a summary update (no clock
//! read, no allocation: the key is copied into its slot). Adaptive
//! sampling keeps each worker's samples to a budget a second per kind of
//! request, so their cost is a fixed amount of CPU a second, under 1 % of
//! the cheapest GET's (a pipelined one, 0.5 µs) at the rates where that
//! GET is the whole of a worker's work (BENCHMARKS.md, "Hot keys right at
//! every rate"). With `hotkeys_top=0` the workers have no sampler at all.
//!
//! **Window**: time is cut into epochs of [`EPOCH_MS`] (5 s, aligned on
//! the wall clock; the maintenance thread moves the epoch on,
//! [`HotKeys::tick`], within milliseconds of the boundary, and publishes
//! the coarse clock the samplers measure their rates on); each worker has
//! the summary of the current epoch and of the one before, the older one
//! dropped when a new epoch starts. Rates are what the two hold divided
//! by the time since the previous epoch started: a window of 5 to 10 s
//! ending now, never older, which the report states (`hotkeys_window`,
//! from and to in Unix ms). A key nobody asks for any more is gone from
//! the report within 10 s. (Exponential decay was the other way: no hard
//! edge, so a key would fade but never leave, and every slot would need
//! its own time.)
//!
//! **Merged on demand**: [`top`] locks each worker's summaries in turn
//! (a worker takes its own lock only to count a sample), sums every key's
//! weighted counts over workers and both epochs, and sorts by requests
//! (reads + writes).

mod sampler;
mod sketch;

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use sketch::{Counts, SpaceSaving};

use crate::compose::stat_rows::StatRows;

pub(crate) use sampler::{Sampler, Sampling, MAX_INTERVAL};

/// Length of an epoch: rates cover the current epoch and the one before.
pub(crate) const EPOCH_MS: u64 = 5_000;

/// `-o hotkeys_top` by default.
pub(crate) const DEFAULT_TOP: usize = 32;

/// A hot key and its rates over the window (requests and bytes per
/// second).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HotKey {
    pub key: Vec<u8>,
    pub reads_per_sec: f64,
    pub writes_per_sec: f64,
    pub bytes_per_sec: f64,
}

/// The hottest keys and what they were counted over.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    /// Hottest first.
    pub keys: Vec<HotKey>,
    /// The window, Unix ms: rates are counts over `to_ms - from_ms`, at
    /// least a second.
    pub from_ms: u64,
    pub to_ms: u64,
    /// Samples taken in the window, and the requests they were taken
    /// from (every worker's, up to its last sample): equal while every
    /// request is counted.
    pub samples: u64,
    pub requests: u64,
}

impl Report {
    /// What the rates are per: the window in seconds, at least 1.
    pub(crate) fn window_secs(&self) -> f64 {
        (self.to_ms.saturating_sub(self.from_ms) as f64 / 1000.0).max(1.0)
    }
}

/// One epoch of one worker: its summary and how much it sampled.
struct Epoch {
    summary: SpaceSaving,
    samples: u64,
    requests: u64,
}

impl Epoch {
    fn clear(&mut self) {
        self.summary.clear();
        self.samples = 0;
        self.requests = 0;
    }
}

/// One worker's two epochs.
struct Tracker {
    epoch: u64,
    current: Epoch,
    /// Epoch `epoch - 1` (empty when that epoch saw no sample).
    previous: Epoch,
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
pub(crate) struct HotKeys {
    top: usize,
    sampling: Sampling,
    /// Wall-clock ms when tracking started (the window starts no earlier).
    started_ms: u64,
    /// The current epoch (wall-clock ms / `EPOCH_MS`), moved on by
    /// [`HotKeys::tick`]: what a sample reads instead of a clock.
    epoch: AtomicU64,
    /// The wall clock (ms) as [`HotKeys::tick`] last saw it: what the
    /// samplers measure their rates on.
    clock_ms: AtomicU64,
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
    pub(crate) fn new(top: usize, sampling: Sampling, threads: usize) -> Option<Arc<HotKeys>> {
        HotKeys::with_clock(top, sampling, threads, now_ms())
    }

    /// As [`HotKeys::new`], started at `now` (wall-clock ms).
    fn with_clock(
        top: usize,
        sampling: Sampling,
        threads: usize,
        now: u64,
    ) -> Option<Arc<HotKeys>> {
        if top == 0 {
            return None;
        }
        let slots = (top * 8).max(256);
        let epoch = || Epoch {
            summary: SpaceSaving::new(slots),
            samples: 0,
            requests: 0,
        };
        let workers = (0..threads.max(1))
            .map(|_| {
                Mutex::new(Tracker {
                    epoch: 0,
                    current: epoch(),
                    previous: epoch(),
                })
            })
            .collect();
        let sampling = match sampling {
            Sampling::Fixed(n) => Sampling::Fixed(n.clamp(1, MAX_INTERVAL)),
            adaptive => adaptive,
        };
        Some(Arc::new(HotKeys {
            top,
            sampling,
            started_ms: now,
            epoch: AtomicU64::new(now / EPOCH_MS),
            clock_ms: AtomicU64::new(now),
            starts: Mutex::new([now, now]),
            workers,
        }))
    }

    /// `-o hotkeys_top`: the most keys reported.
    pub(crate) fn limit(&self) -> usize {
        self.top
    }

    /// `-o hotkeys_sample`.
    pub(crate) fn sampling(&self) -> Sampling {
        self.sampling
    }

    /// The wall clock (ms) at the maintenance thread's last tick (at most
    /// about 100 ms old).
    #[inline]
    pub(crate) fn clock_ms(&self) -> u64 {
        self.clock_ms.load(Ordering::Relaxed)
    }

    /// Moves to the epoch of the wall clock: called by the maintenance
    /// thread, which wakes just after every second turns over (and every
    /// 100 ms), so an epoch starts within milliseconds of its boundary.
    pub(crate) fn tick(&self) {
        self.tick_at(now_ms());
    }

    fn tick_at(&self, now: u64) {
        self.clock_ms.store(now, Ordering::Relaxed);
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

    /// Counts a sample of worker `worker` (weighted in `add`), taken
    /// after `requests` requests of its kind since that kind's sample
    /// before.
    fn count(&self, worker: usize, key: &[u8], add: Counts, requests: u64) {
        let hash = osmium_store::index::hash_key(key);
        let epoch = self.epoch.load(Ordering::Relaxed);
        let Some(m) = self.workers.get(worker) else {
            return;
        };
        let mut t = m.lock().unwrap_or_else(|e| e.into_inner());
        t.advance(epoch);
        t.current.summary.offer(key, hash, add);
        t.current.samples += 1;
        t.current.requests += requests;
    }

    /// The `n` hottest keys now, hottest first, and their window.
    pub(crate) fn report(&self, n: usize) -> Report {
        self.report_at(n, now_ms())
    }

    fn report_at(&self, n: usize, now: u64) -> Report {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let previous_start = self.starts.lock().unwrap_or_else(|e| e.into_inner())[1];
        let mut sums: HashMap<Vec<u8>, Counts> = HashMap::new();
        let (mut samples, mut requests) = (0, 0);
        for w in &self.workers {
            let t = w.lock().unwrap_or_else(|e| e.into_inner());
            let parts: &[&Epoch] = if t.epoch == epoch {
                &[&t.current, &t.previous]
            } else if t.epoch + 1 == epoch {
                &[&t.current]
            } else {
                &[]
            };
            for part in parts {
                samples += part.samples;
                requests += part.requests;
                for (key, c) in part.summary.entries() {
                    if c.requests() == 0 {
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
            b.1.requests()
                .cmp(&a.1.requests())
                .then(b.1.bytes.cmp(&a.1.bytes))
                .then(a.0.cmp(&b.0))
        });
        keys.truncate(n);
        // The window: since the previous epoch began, or since tracking
        // did (a clock set back shortens nothing below a second).
        let mut report = Report {
            keys: Vec::new(),
            from_ms: previous_start.max(self.started_ms),
            to_ms: now,
            samples,
            requests,
        };
        let scale = 1.0 / report.window_secs();
        report.keys = keys
            .into_iter()
            .map(|(key, c)| HotKey {
                key,
                reads_per_sec: c.reads as f64 * scale,
                writes_per_sec: c.writes as f64 * scale,
                bytes_per_sec: c.bytes as f64 * scale,
            })
            .collect();
        report
    }
}

/// The `n` hottest keys, hottest first (none when hot keys are off):
/// for the metrics endpoint (`Shared::hot_keys`).
pub(crate) fn top(hot: Option<&HotKeys>, n: usize) -> Vec<HotKey> {
    hot.map_or_else(Vec::new, |h| h.report(n).keys)
}

/// `stats hotkeys [N]`: `STAT hotkey <rank> <key> <reads/s> <writes/s>
/// <bytes/s>` per key, hottest first, at most `hotkeys_top` (or N if
/// fewer), keys URI-encoded as memcached's `watch` prints them; then
/// `STAT hotkeys_window <from> <to>` (Unix ms: what the rates are over,
/// at least a second) and `STAT hotkeys_sampled <samples> <requests>`
/// (samples in the window and the requests they were taken from).
pub(crate) fn stats_rows(hot: Option<&HotKeys>, n: Option<usize>, out: &mut StatRows) {
    let Some(h) = hot else {
        return;
    };
    let n = n.map_or(h.limit(), |n| n.min(h.limit()));
    let report = h.report(n);
    for (rank, k) in report.keys.iter().enumerate() {
        out.push_with("hotkey", |value| {
            let _ = write!(value, "{} ", rank + 1);
            uri_encode(&k.key, value);
            let _ = write!(
                value,
                " {:.2} {:.2} {:.2}",
                k.reads_per_sec, k.writes_per_sec, k.bytes_per_sec
            );
        });
    }
    out.push(
        "hotkeys_window",
        format_args!("{} {}", report.from_ms, report.to_ms),
    );
    out.push(
        "hotkeys_sampled",
        format_args!("{} {}", report.samples, report.requests),
    );
}

pub(crate) use osmium_protocol::encode::uri_encode;

#[cfg(test)]
mod tests {
    use super::sampler::Rng;
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

    fn read(weight: u64) -> Counts {
        Counts {
            reads: weight,
            writes: 0,
            bytes: 100 * weight,
        }
    }

    #[test]
    fn rates_cover_two_epochs_then_fade() {
        // Tracking started long ago; feed the workers by hand at fixed
        // times.
        let hot = HotKeys::with_clock(4, Sampling::Fixed(1), 2, 0).unwrap();
        let t0 = 1_000 * EPOCH_MS; // an epoch's start
        let put = |w: usize, key: &[u8]| hot.count(w, key, read(1), 1);
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
        let r = hot.report_at(10, t0 + 2 * EPOCH_MS - 1);
        let top = &r.keys;
        assert_eq!(top[0].key, b"a");
        assert!((top[0].reads_per_sec - 10.0).abs() < 0.1, "{top:?}");
        assert!((top[0].bytes_per_sec - 1000.0).abs() < 10.0);
        assert_eq!(top[1].key, b"b");
        assert_eq!((r.from_ms, r.to_ms), (t0, t0 + 2 * EPOCH_MS - 1));
        assert_eq!((r.samples, r.requests), (101, 101));
        assert_eq!(hot.report_at(1, t0 + 2 * EPOCH_MS - 1).keys.len(), 1);
        // An epoch later only the second epoch counts, over 5 to 10 s.
        hot.tick_at(t0 + 2 * EPOCH_MS);
        let top = hot.report_at(10, t0 + 2 * EPOCH_MS + 2_500).keys;
        assert!((top[0].reads_per_sec - 50.0 / 7.5).abs() < 0.1, "{top:?}");
        // Two epochs later: gone.
        hot.tick_at(t0 + 3 * EPOCH_MS);
        assert!(hot.report_at(10, t0 + 3 * EPOCH_MS).keys.is_empty());
        // A clock set back starts over.
        put(0, b"c");
        hot.tick_at(t0);
        assert!(hot.report_at(10, t0 + 1).keys.is_empty());
    }

    #[test]
    fn weighted_samples_make_the_rates() {
        // Samples taken 1 in 8 weigh 8: 30 of them are 240 reads.
        let t0 = 2_000 * EPOCH_MS;
        let hot = HotKeys::with_clock(4, Sampling::Fixed(8), 1, t0).unwrap();
        for _ in 0..30 {
            hot.count(0, b"k", read(8), 8);
        }
        hot.count(
            0,
            b"k",
            Counts {
                reads: 0,
                writes: 8,
                bytes: 0,
            },
            8,
        );
        let r = hot.report_at(4, t0 + 2_000);
        assert_eq!(r.window_secs(), 2.0);
        assert_eq!(r.keys[0].reads_per_sec, 120.0);
        assert_eq!(r.keys[0].writes_per_sec, 4.0);
        assert_eq!(r.keys[0].bytes_per_sec, 12_000.0);
        assert_eq!((r.samples, r.requests), (31, 248));
    }

    #[test]
    fn stats_rows_say_the_rates_and_their_window() {
        let hot = HotKeys::new(4, Sampling::default(), 1).unwrap();
        let s = Sampler::new(hot.clone(), 0);
        for _ in 0..3 {
            s.read(b"a b", 10);
        }
        s.write(b"a b", 5);
        s.read(b"c", 1);
        let mut out = StatRows::new();
        stats_rows(Some(&hot), Some(10), &mut out);
        let text = out.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        // Within the first second the window is the 1 s floor.
        assert!(
            lines[0].starts_with("STAT hotkey 1 a%20b 3.00 1.00 35.00")
                || lines[0].starts_with("STAT hotkey 1 a%20b "),
            "{text}"
        );
        assert!(lines[1].starts_with("STAT hotkey 2 c "), "{text}");
        let w: Vec<u64> = lines[2]
            .strip_prefix("STAT hotkeys_window ")
            .unwrap()
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(w[0] <= w[1] && w[1] - w[0] < 60_000, "{text}");
        assert_eq!(lines[3], "STAT hotkeys_sampled 5 5");
        let mut one = StatRows::new();
        stats_rows(Some(&hot), Some(1), &mut one);
        assert_eq!(one.text().lines().count(), 3);
        let mut none = StatRows::new();
        stats_rows(None, None, &mut none);
        assert!(none.text().is_empty());
    }

    /// The hot path's cost per request, sampled updates included:
    /// `cargo test --release -p osmium-server --bin osmium hotkeys_cost --
    /// --ignored --nocapture` (BENCHMARKS.md, "Hot keys").
    #[test]
    #[ignore]
    fn hotkeys_cost() {
        // 65,536 draws of 16-byte keys among 1,000,000, zipf-like order
        // (rank from a skewed draw), 20,000,000 requests.
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
        let t = std::time::Instant::now();
        for i in 0..n {
            std::hint::black_box(&keys[i & 0xffff]);
        }
        let without = t.elapsed().as_nanos() as f64 / n as f64;
        // Fixed samplings, then adaptive at a worker's rate of R requests
        // a second (the clock moved on by 1 ms every R / 1000 requests).
        let runs: [(&str, Sampling, u64); 8] = [
            ("1/1", Sampling::Fixed(1), 0),
            ("1/8", Sampling::Fixed(8), 0),
            ("1/32", Sampling::Fixed(32), 0),
            ("1/64", Sampling::Fixed(64), 0),
            ("adaptive at 100,000/s", Sampling::default(), 100_000),
            ("adaptive at 500,000/s", Sampling::default(), 500_000),
            ("adaptive at 1,000,000/s", Sampling::default(), 1_000_000),
            ("adaptive at 2,500,000/s", Sampling::default(), 2_500_000),
        ];
        for (name, sampling, rate) in runs {
            let hot = HotKeys::with_clock(DEFAULT_TOP, sampling, 1, 0).unwrap();
            let s = Sampler::new(hot.clone(), 0);
            let per_ms = (rate / 1000).max(1) as usize;
            let mut clock = 0;
            let t = std::time::Instant::now();
            for i in 0..n {
                if rate > 0 && i % per_ms == 0 {
                    clock += 1;
                    hot.tick_at(clock);
                }
                s.read(std::hint::black_box(&keys[i & 0xffff]), 64);
            }
            let with = t.elapsed().as_nanos() as f64 / n as f64;
            let r = hot.report_at(1, clock);
            println!(
                "{name}: {:.2} ns per request ({with:.2} - {without:.2} loop), 1 in {:.1} sampled",
                with - without,
                r.requests as f64 / r.samples.max(1) as f64
            );
        }
    }
}
