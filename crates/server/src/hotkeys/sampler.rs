//! Which requests a worker counts toward the hot keys, and what each
//! counted one weighs.
//!
//! A worker's [`Sampler`] has two lanes, reads and writes, each a
//! countdown: a request costs one decrement and a branch until the
//! countdown runs out; that request is the sample. The next countdown is
//! drawn from a geometric distribution of mean N, so every request has the
//! same chance 1/N of being the sample whatever came before it (no client
//! pattern aliases with the sampling), and the sample weighs N: it counts
//! as N requests (N × its bytes). A request's expected weight is then
//! exactly 1 whatever N was, so rates stay unbiased when N changes between
//! samples (the weight is the N its countdown was drawn at).
//!
//! **Adaptive** (the default, [`Sampling::Adaptive`]): each lane measures
//! its request rate over periods of about a second (the requests its
//! countdowns covered, on the coarse clock the maintenance thread
//! publishes, [`super::HotKeys::clock_ms`]) and takes N = ⌈rate / budget⌉:
//! every request is counted (N = 1, exact) while the worker's rate of that
//! kind stays under the budget of samples per second, and above it the
//! samples per second stay at about the budget, so their cost stays a
//! fixed amount of CPU per second that shrinks per request as the rate
//! grows. Within a period, a lane that has already taken a budget of
//! samples doubles N at once (a jump from idle to millions of requests a
//! second costs a few budgets of samples, not a second of them). Reads and
//! writes have a budget each: a key's writes are as precise as its reads
//! even where writes are a small share of the requests, which one
//! countdown shared with the reads would sample as sparsely.
//!
//! **Fixed** (`-o hotkeys_sample=1/N`): N never changes.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use super::sketch::Counts;
use super::HotKeys;

/// Samples per second a worker takes of each kind (reads, writes) once
/// its rate of that kind exceeds this (BENCHMARKS.md, "Hot keys right at
/// every rate"): every request below it.
pub(crate) const SAMPLE_BUDGET: u32 = 16_384;
/// The sparsest sampling: 1 request in this many.
pub(crate) const MAX_INTERVAL: u32 = 1 << 20;
/// How long a lane measures its rate before it sets N again, ms.
const PERIOD_MS: u64 = 1_000;

/// How requests are sampled (`-o hotkeys_sample`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sampling {
    /// Every request while a worker's rate of reads (or of writes) is
    /// under `budget` a second; about `budget` samples a second above.
    Adaptive { budget: u32 },
    /// About 1 request in N, whatever the rate.
    Fixed(u32),
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling::Adaptive {
            budget: SAMPLE_BUDGET,
        }
    }
}

/// As `stats settings` says it: `adaptive` or `1/N`.
impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sampling::Adaptive { .. } => f.write_str("adaptive"),
            Sampling::Fixed(n) => write!(f, "1/{n}"),
        }
    }
}

/// The interval that keeps `rate` requests a second to about `budget`
/// samples a second: 1 (every request) up to the budget.
fn interval_for(rate: u64, budget: u32) -> u32 {
    let n = rate.div_ceil(u64::from(budget.max(1)));
    n.clamp(1, u64::from(MAX_INTERVAL)) as u32
}

/// One kind of request's countdown and what it measures.
struct Lane {
    /// Requests until the next sample (the request that finds 1 is it).
    countdown: Cell<u32>,
    /// The mean N the countdown in progress was drawn at: the weight of
    /// the sample that ends it.
    interval: Cell<u32>,
    /// `ln(1 - 1/interval)`: the geometric draw's scale.
    log_skip: Cell<f64>,
    /// The length drawn for the countdown in progress.
    drawn: Cell<u32>,
    /// This period: the requests of the countdowns that ended in it, the
    /// samples taken since it began (or since N last doubled), and when it
    /// began (coarse ms).
    period_requests: Cell<u64>,
    period_samples: Cell<u32>,
    period_start: Cell<u64>,
}

impl Lane {
    fn new(interval: u32, now_ms: u64, rng: &mut Rng) -> Lane {
        let lane = Lane {
            countdown: Cell::new(1),
            interval: Cell::new(1),
            log_skip: Cell::new(0.0),
            drawn: Cell::new(1),
            period_requests: Cell::new(0),
            period_samples: Cell::new(0),
            period_start: Cell::new(now_ms),
        };
        lane.set_interval(interval);
        lane.redraw(rng);
        lane
    }

    /// Whether this request is the sample (else one is counted down).
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

    fn set_interval(&self, n: u32) {
        let n = n.clamp(1, MAX_INTERVAL);
        self.interval.set(n);
        self.log_skip.set((-1.0 / f64::from(n)).ln_1p());
    }

    /// Draws the next countdown: geometric of mean `interval` (1 when it
    /// is 1), at least 1.
    fn redraw(&self, rng: &mut Rng) {
        let n = if self.interval.get() <= 1 {
            1
        } else {
            // P(length = k) = (1 - p)^(k-1) p with p = 1/interval.
            let k = (rng.unit_open().ln() / self.log_skip.get()).floor() + 1.0;
            if k >= f64::from(u32::MAX) {
                u32::MAX
            } else {
                k as u32
            }
        };
        self.countdown.set(n);
        self.drawn.set(n);
    }

    /// A sample was taken at `now_ms`, ending a countdown of `drawn`
    /// requests: measures the rate and sets N for the next countdown.
    fn adapt(&self, now_ms: u64, drawn: u32, budget: u32) {
        let requests = self.period_requests.get() + u64::from(drawn);
        let samples = self.period_samples.get() + 1;
        let start = self.period_start.get();
        if now_ms < start {
            // The wall clock was set back: measure from now.
            self.period_start.set(now_ms);
        } else if now_ms - start >= PERIOD_MS {
            let rate = requests * 1000 / (now_ms - start);
            self.set_interval(interval_for(rate, budget));
            self.period_requests.set(0);
            self.period_samples.set(0);
            self.period_start.set(now_ms);
            return;
        } else if samples >= budget.max(1) {
            // A budget of samples before the period is over: the rate
            // grew; sparser at once.
            self.set_interval(self.interval.get().saturating_mul(2));
            self.period_requests.set(requests);
            self.period_samples.set(0);
            return;
        }
        self.period_requests.set(requests);
        self.period_samples.set(samples);
    }
}

/// A worker's sampler: which of its requests are counted, and their
/// weight.
pub(crate) struct Sampler {
    hot: Arc<HotKeys>,
    worker: usize,
    reads: Lane,
    writes: Lane,
    rng: Cell<Rng>,
}

impl Sampler {
    pub(crate) fn new(hot: Arc<HotKeys>, worker: usize) -> Sampler {
        let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15 ^ (worker as u64 + 1));
        let first = match hot.sampling() {
            Sampling::Adaptive { .. } => 1,
            Sampling::Fixed(n) => n,
        };
        let now = hot.clock_ms();
        let reads = Lane::new(first, now, &mut rng);
        let writes = Lane::new(first, now, &mut rng);
        Sampler {
            hot,
            worker,
            reads,
            writes,
            rng: Cell::new(rng),
        }
    }

    /// A read of `key` that sent `bytes` of value.
    #[inline]
    pub(crate) fn read(&self, key: &[u8], bytes: usize) {
        if self.reads.due() {
            self.sample(false, key, bytes);
        }
    }

    /// A write of `key` that received `bytes` of value.
    #[inline]
    pub(crate) fn write(&self, key: &[u8], bytes: usize) {
        if self.writes.due() {
            self.sample(true, key, bytes);
        }
    }

    #[cold]
    #[inline(never)]
    fn sample(&self, write: bool, key: &[u8], bytes: usize) {
        let lane = if write { &self.writes } else { &self.reads };
        let weight = u64::from(lane.interval.get());
        let drawn = lane.drawn.get();
        if let Sampling::Adaptive { budget } = self.hot.sampling() {
            lane.adapt(self.hot.clock_ms(), drawn, budget);
        }
        let mut rng = self.rng.get();
        lane.redraw(&mut rng);
        self.rng.set(rng);
        let add = Counts {
            reads: if write { 0 } else { weight },
            writes: if write { weight } else { 0 },
            bytes: (bytes as u64).saturating_mul(weight),
        };
        self.hot.count(self.worker, key, add, u64::from(drawn));
    }

    /// The N of each lane now: (reads, writes).
    #[cfg(test)]
    fn intervals(&self) -> (u32, u32) {
        (self.reads.interval.get(), self.writes.interval.get())
    }
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

    /// Uniform in (0, 1]: never 0, so its logarithm is finite.
    #[inline]
    fn unit_open(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
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
    use crate::hotkeys::EPOCH_MS;

    /// Hot keys with `sampling`, one worker, its clock at the start of an
    /// epoch (moved on by hand with `tick_at`).
    fn hot(sampling: Sampling) -> (Arc<HotKeys>, u64) {
        let t0 = 1_000 * EPOCH_MS;
        let hot = HotKeys::with_clock(32, sampling, 1, t0).unwrap();
        (hot, t0)
    }

    /// What the report says of `key` in weighted requests: (reads,
    /// writes, bytes), its rates times the report's window (integers in
    /// the summary: rounded back).
    fn counted(hot: &HotKeys, key: &[u8], now: u64) -> (f64, f64, f64) {
        let r = hot.report_at(256, now);
        let w = r.window_secs();
        r.keys
            .iter()
            .find(|k| k.key == key)
            .map_or((0.0, 0.0, 0.0), |k| {
                (
                    (k.reads_per_sec * w).round(),
                    (k.writes_per_sec * w).round(),
                    (k.bytes_per_sec * w).round(),
                )
            })
    }

    #[test]
    fn geometric_countdowns_average_the_interval() {
        let mut rng = Rng::new(3);
        let lane = Lane::new(8, 0, &mut rng);
        let n = 200_000;
        let mut sum = 0u64;
        let mut ones = 0;
        for _ in 0..n {
            lane.redraw(&mut rng);
            let d = lane.drawn.get();
            assert!(d >= 1);
            sum += u64::from(d);
            ones += usize::from(d == 1);
        }
        let mean = sum as f64 / n as f64;
        assert!((mean - 8.0).abs() < 0.1, "mean {mean}");
        // P(1) = 1/8: memoryless, every request the same chance.
        let p1 = ones as f64 / n as f64;
        assert!((p1 - 0.125).abs() < 0.005, "P(1) {p1}");
        lane.set_interval(1);
        lane.redraw(&mut rng);
        assert_eq!(lane.drawn.get(), 1);
    }

    #[test]
    fn the_interval_keeps_samples_under_the_budget() {
        assert_eq!(interval_for(0, 1000), 1);
        assert_eq!(interval_for(1000, 1000), 1);
        assert_eq!(interval_for(1001, 1000), 2);
        assert_eq!(interval_for(2_500_000, 16_384), 153);
        assert_eq!(interval_for(u64::MAX, 1), MAX_INTERVAL);
        assert_eq!(Sampling::default().to_string(), "adaptive");
        assert_eq!(Sampling::Fixed(32).to_string(), "1/32");
    }

    #[test]
    fn every_request_is_counted_at_low_rates() {
        // 100 requests a second for 4 s (under the budget): every one is
        // a sample of weight 1, so the counts are exact.
        let (hot, t0) = hot(Sampling::Adaptive { budget: 1000 });
        let s = Sampler::new(hot.clone(), 0);
        let mut t = t0;
        for i in 0..400u64 {
            if i % 10 == 0 {
                t = t0 + i * 10;
                hot.tick_at(t);
            }
            match i % 4 {
                0 | 1 => s.read(b"a", 10),
                2 => s.write(b"a", 100),
                _ => s.read(format!("k{i}").as_bytes(), 1),
            }
            assert_eq!(s.intervals(), (1, 1));
        }
        let (reads, writes, bytes) = counted(&hot, b"a", t + 1);
        assert_eq!((reads, writes), (200.0, 100.0));
        assert_eq!(bytes, 12_000.0);
        let r = hot.report_at(200, t + 1);
        assert_eq!((r.samples, r.requests), (400, 400));
        // Each of the 100 keys read once is there, exactly once.
        assert_eq!(r.keys.len(), 101);
        assert!(r.keys[1..]
            .iter()
            .all(|k| (k.reads_per_sec * r.window_secs() - 1.0).abs() < 1e-9));
    }

    /// What was sent to the hot key: requests, and the variance of their
    /// weighted count (a request counted with chance 1/N weighs N: its
    /// variance is N - 1).
    #[derive(Default, Clone, Copy)]
    struct Sent {
        reads: u64,
        writes: u64,
        read_var: f64,
        write_var: f64,
    }

    /// Feeds `n` requests at `per_ms` requests per ms of the clock, one in
    /// `share` of them to `key` (and one in `writes` of every key's
    /// requests a write), the rest to 100 other keys.
    #[allow(clippy::too_many_arguments)]
    fn feed(
        hot: &HotKeys,
        s: &Sampler,
        clock: &mut u64,
        n: u64,
        per_ms: u64,
        key: &[u8],
        share: u64,
        writes: u64,
        rng: &mut Rng,
        sent: &mut Sent,
    ) {
        let mut other = *b"other-00";
        for i in 0..n {
            if i % per_ms == 0 {
                *clock += 1;
                hot.tick_at(*clock);
            }
            let hot_key = rng.next().is_multiple_of(share);
            let write = rng.next().is_multiple_of(writes);
            let (nr, nw) = s.intervals();
            let k: &[u8] = if hot_key {
                key
            } else {
                other[6] = b'0' + (rng.next() % 10) as u8;
                other[7] = b'0' + (rng.next() % 10) as u8;
                &other
            };
            if write {
                s.write(k, 8);
            } else {
                s.read(k, 8);
            }
            match (hot_key, write) {
                (true, true) => {
                    sent.writes += 1;
                    sent.write_var += f64::from(nw - 1);
                }
                (true, false) => {
                    sent.reads += 1;
                    sent.read_var += f64::from(nr - 1);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn rates_stay_unbiased_across_changes_of_interval() {
        // Within one window, a worker goes from 50,000 requests a second
        // (over a budget of 1,000: N grows to about 50) to 1,000 (N back
        // to 1) and up again; a key has a tenth of the requests, a fifth
        // of every key's requests are writes. Each run's weighted counts
        // are within 4 standard deviations of what was sent (the
        // deviation from the N each request was sampled at), and over 20
        // runs too: no bias where N changed.
        let mut all = Sent::default();
        let mut sum = (0.0, 0.0);
        let mut seen_intervals = Vec::new();
        for run in 0..20u64 {
            let (hot, t0) = hot(Sampling::Adaptive { budget: 1000 });
            let s = Sampler::new(hot.clone(), 0);
            let mut rng = Rng::new(100 + run);
            let mut clock = t0;
            let mut sent = Sent::default();
            for (n, per_ms) in [(40_000, 50), (3_000, 1), (40_000, 50)] {
                feed(
                    &hot, &s, &mut clock, n, per_ms, b"hot", 10, 5, &mut rng, &mut sent,
                );
                seen_intervals.push(s.intervals());
            }
            assert!(clock - t0 < EPOCH_MS, "one epoch");
            let (reads, writes, _) = counted(&hot, b"hot", clock + 1);
            let within =
                |got: f64, want: u64, var: f64| (got - want as f64).abs() <= 4.0 * var.sqrt();
            assert!(
                within(reads, sent.reads, sent.read_var),
                "run {run}: reads {reads} of {}",
                sent.reads
            );
            assert!(
                within(writes, sent.writes, sent.write_var),
                "run {run}: writes {writes} of {}",
                sent.writes
            );
            sum = (sum.0 + reads, sum.1 + writes);
            all.reads += sent.reads;
            all.writes += sent.writes;
            all.read_var += sent.read_var;
            all.write_var += sent.write_var;
        }
        // The intervals did change: sparse at the high rate (the writes'
        // lane, a fifth of the traffic, denser than the reads'), every
        // request again at the low one.
        assert!(
            seen_intervals
                .iter()
                .any(|&(r, w)| r >= 16 && w >= 4 && w < r),
            "{seen_intervals:?}"
        );
        assert!(seen_intervals.contains(&(1, 1)), "{seen_intervals:?}");
        let bias = |got: f64, want: u64, var: f64| (got - want as f64).abs() / var.sqrt();
        assert!(
            bias(sum.0, all.reads, all.read_var) < 4.0,
            "reads {} of {}",
            sum.0,
            all.reads
        );
        assert!(
            bias(sum.1, all.writes, all.write_var) < 4.0,
            "writes {} of {}",
            sum.1,
            all.writes
        );
    }

    #[test]
    fn a_jump_in_rate_is_capped_within_the_period() {
        // Idle, then 10,000,000 requests within 1 ms of the clock: the
        // lane doubles N each time it has taken a budget of samples, so
        // the burst costs a few budgets of samples, not one per request.
        let (hot, t0) = hot(Sampling::Adaptive { budget: 1000 });
        let s = Sampler::new(hot.clone(), 0);
        hot.tick_at(t0 + 1);
        for _ in 0..10_000_000u32 {
            s.read(b"k", 1);
        }
        let r = hot.report_at(4, t0 + 2);
        assert!(r.samples < 1000 * 16, "{} samples", r.samples);
        assert!(s.intervals().0 >= 8192, "{:?}", s.intervals());
        // Still unbiased: ten million, within a few percent.
        let (reads, _, _) = counted(&hot, b"k", t0 + 2);
        assert!((reads / 1e7 - 1.0).abs() < 0.05, "{reads}");
        // Then 100 requests a second: one sparse countdown later (its
        // sample measures the burst's period), N follows the new rate and
        // is back to every request within two periods.
        let mut clock = t0 + 2;
        let mut requests = 0;
        while s.intervals().0 > 1 {
            clock += 10;
            hot.tick_at(clock);
            s.read(b"k", 1);
            requests += 1;
            assert!(requests < 100_000, "{:?}", s.intervals());
        }
    }

    #[test]
    fn a_fixed_sampling_never_changes() {
        let (hot, t0) = hot(Sampling::Fixed(4));
        let s = Sampler::new(hot.clone(), 0);
        for i in 0..100_000u64 {
            if i % 1000 == 0 {
                hot.tick_at(t0 + i / 1000 * 10);
            }
            s.read(b"x", 10);
        }
        assert_eq!(s.intervals(), (4, 4));
        let (reads, writes, _) = counted(&hot, b"x", t0 + 1_000);
        assert!((reads - 100_000.0).abs() < 2_000.0, "{reads}");
        assert_eq!(writes, 0.0);
        let r = hot.report_at(4, t0 + 1_000);
        assert!((r.samples as f64 - 25_000.0).abs() < 750.0, "{}", r.samples);
    }
}
