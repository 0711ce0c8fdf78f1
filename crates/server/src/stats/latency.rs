//! Latency histograms measured inside the server, for `/metrics`: one per
//! command kind (`osmium_command_duration_seconds{command}`) and one for
//! the flash tier's reads (`osmium_flash_read_duration_seconds`).
//!
//! Each worker owns a [`Latency`]; only that worker writes it (plain
//! load + store on relaxed atomics, as [`Counter`] does: no shared cache
//! line, no read-modify-write), and a scrape sums every worker's.
//!
//! What a command's time is: the worker reads the clock once when it
//! starts a connection's batch of requests (`WorkerCtx::lap_start`) and
//! once after each request of the batch has run (`WorkerCtx::lap`); a
//! request's time is from the end of the one before it in the batch (or
//! the batch's start) to its own end: framing, parsing, executing against
//! the store and composing its reply into the output. Not in it: the
//! socket reads and writes, the wait for a data block still on the wire
//! (the command is timed when it runs whole), and a GET's wait for its
//! flash reads (timed in the flash histogram; the GET is timed when it
//! runs again with its records in memory). One clock read per request
//! plus one per batch. (One exception to "no socket I/O": values of
//! 32 KiB and more that a batch gathers leave with one `writev` when they
//! reach 32 values or 1 MiB, between two requests; that write counts in
//! the time of the request after it.)
//!
//! The clock ([`now`]): the CPU's time-stamp counter where the kernel
//! itself keeps time with it (clocksource `tsc`: invariant and in step
//! across CPUs), about 8 ns a read against about 24 ns for
//! `Instant::now` here; elsewhere `Instant`. Ticks become nanoseconds with
//! a rate measured against `Instant` at start ([`calibrate`]); a
//! histogram keeps its bucket bounds in ticks, so a request costs one
//! read, a short compare loop and two stores to the worker's own lines.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use osmium_protocol::request::{Command, Reply, Request, StoreMode};

use super::counters::Counter;

/// Upper bounds of the buckets, in nanoseconds: 10 µs to 100 ms, then
/// +Inf.
pub(crate) const BOUNDS_NS: [u64; 13] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
];

/// Buckets: one per bound and +Inf.
pub(crate) const BUCKETS: usize = BOUNDS_NS.len() + 1;

macro_rules! commands {
    ($($variant:ident = $name:literal),* $(,)?) => {
        /// What a request is, as the `command` label names it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub(crate) enum Cmd { $($variant,)* }

        impl Cmd {
            pub(crate) const ALL: &'static [Cmd] = &[$(Cmd::$variant,)*];
            pub(crate) fn name(self) -> &'static str {
                match self { $(Cmd::$variant => $name,)* }
            }
        }
    };
}

commands!(
    Get = "get",
    Gets = "gets",
    Gat = "gat",
    Gats = "gats",
    Touch = "touch",
    Set = "set",
    Add = "add",
    Replace = "replace",
    Append = "append",
    Prepend = "prepend",
    Cas = "cas",
    Delete = "delete",
    Incr = "incr",
    Decr = "decr",
    Mg = "mg",
    Ms = "ms",
    Md = "md",
    Ma = "ma",
    Mn = "mn",
    Me = "me",
    Noop = "noop",
    FlushAll = "flush_all",
    Stats = "stats",
    Error = "error",
    Other = "other",
);

impl Cmd {
    /// The kind of a parsed request (text, meta or binary alike: a binary
    /// GET is a `get`, a binary GAT a `gat`).
    #[inline]
    pub(crate) fn of(req: &Request<'_>) -> Cmd {
        let meta = matches!(req.reply, Reply::Meta(_));
        match &req.command {
            Command::Get {
                touch, with_cas, ..
            } => match (touch.is_some(), with_cas) {
                (false, false) => Cmd::Get,
                (false, true) => Cmd::Gets,
                (true, false) => Cmd::Gat,
                (true, true) => Cmd::Gats,
            },
            Command::Touch { .. } => Cmd::Touch,
            Command::MetaGet(_) => Cmd::Mg,
            Command::MetaDebug { .. } => Cmd::Me,
            Command::Store(_) if meta => Cmd::Ms,
            Command::Store(s) => match s.mode {
                StoreMode::Set => Cmd::Set,
                StoreMode::Add => Cmd::Add,
                StoreMode::Replace => Cmd::Replace,
                StoreMode::Append => Cmd::Append,
                StoreMode::Prepend => Cmd::Prepend,
                StoreMode::Cas => Cmd::Cas,
            },
            Command::Delete(_) if meta => Cmd::Md,
            Command::Delete(_) => Cmd::Delete,
            Command::Arith(_) if meta => Cmd::Ma,
            Command::Arith(a) if a.incr => Cmd::Incr,
            Command::Arith(_) => Cmd::Decr,
            Command::Noop if meta => Cmd::Mn,
            Command::Noop => Cmd::Noop,
            Command::FlushAll { .. } => Cmd::FlushAll,
            Command::Stats { .. } => Cmd::Stats,
            Command::Error { .. } => Cmd::Error,
            _ => Cmd::Other,
        }
    }
}

/// Whether [`now`] reads the time-stamp counter.
static USE_TSC: AtomicBool = AtomicBool::new(false);

/// The clock's origin and rate (set once, by [`calibrate`]).
struct Rate {
    origin: Instant,
    ticks_per_ns: f64,
}

static RATE: OnceLock<Rate> = OnceLock::new();

/// Chooses the clock and measures its rate (once; later calls return at
/// once). Called at start, before any worker runs.
pub(crate) fn calibrate() {
    RATE.get_or_init(|| {
        let origin = Instant::now();
        let tsc = cfg!(target_arch = "x86_64")
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc");
        if !tsc {
            return Rate {
                origin,
                ticks_per_ns: 1.0,
            };
        }
        let (t0, c0) = (Instant::now(), tsc_now());
        std::thread::sleep(Duration::from_millis(5));
        let (t1, c1) = (Instant::now(), tsc_now());
        let ns = t1.duration_since(t0).as_nanos() as f64;
        let ticks_per_ns = c1.wrapping_sub(c0) as f64 / ns;
        if !(0.1..=100.0).contains(&ticks_per_ns) {
            return Rate {
                origin,
                ticks_per_ns: 1.0,
            };
        }
        USE_TSC.store(true, Ordering::Relaxed);
        Rate {
            origin,
            ticks_per_ns,
        }
    });
}

fn rate() -> &'static Rate {
    calibrate();
    RATE.get().expect("calibrated")
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn tsc_now() -> u64 {
    // SAFETY: RDTSC reads a counter; it has no memory effects and exists
    // on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn tsc_now() -> u64 {
    0
}

/// The histograms' clock, in ticks (see the module's comment).
#[inline]
pub(crate) fn now() -> u64 {
    if USE_TSC.load(Ordering::Relaxed) {
        return tsc_now();
    }
    let r = rate();
    r.origin.elapsed().as_nanos() as u64
}

/// One histogram, written by one thread; bounds and sum in ticks.
pub(crate) struct Histogram {
    buckets: [Counter; BUCKETS],
    sum: Counter,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: Default::default(),
            sum: Counter::default(),
        }
    }

    #[inline]
    fn record_ticks(&self, ticks: u64, bounds: &[u64; BUCKETS - 1]) {
        let i = bounds
            .iter()
            .position(|&b| ticks <= b)
            .unwrap_or(BUCKETS - 1);
        self.buckets[i].incr();
        self.sum.add(ticks);
    }

    fn add_to(&self, t: &mut HistogramTotals, ticks_per_ns: f64) {
        for (sum, b) in t.buckets.iter_mut().zip(&self.buckets) {
            *sum += b.get();
        }
        t.sum_ns += (self.sum.get() as f64 / ticks_per_ns) as u64;
    }
}

/// A sum of histograms: per-bucket (not cumulative) counts.
#[derive(Default, Clone, Copy, Debug)]
pub(crate) struct HistogramTotals {
    pub buckets: [u64; BUCKETS],
    pub sum_ns: u64,
}

impl HistogramTotals {
    pub(crate) fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// One worker's histograms.
pub(crate) struct Latency {
    commands: Vec<Histogram>,
    flash_read: Histogram,
    /// `BOUNDS_NS` in ticks.
    bounds: [u64; BUCKETS - 1],
    ticks_per_ns: f64,
}

impl Default for Latency {
    fn default() -> Latency {
        let ticks_per_ns = rate().ticks_per_ns;
        Latency {
            commands: Cmd::ALL.iter().map(|_| Histogram::new()).collect(),
            flash_read: Histogram::new(),
            bounds: BOUNDS_NS.map(|ns| (ns as f64 * ticks_per_ns) as u64),
            ticks_per_ns,
        }
    }
}

impl Latency {
    /// A request of kind `cmd` took from `start` to `end` ([`now`]).
    #[inline]
    pub(crate) fn command(&self, cmd: Cmd, start: u64, end: u64) {
        self.commands[cmd as usize].record_ticks(end.saturating_sub(start), &self.bounds);
    }

    /// A flash read started at `start` ([`now`]) has completed.
    #[inline]
    pub(crate) fn flash_read(&self, start: u64) {
        self.flash_read
            .record_ticks(now().saturating_sub(start), &self.bounds);
    }

    /// Adds this worker's command histograms to `t` (indexed as
    /// `Cmd::ALL`).
    pub(crate) fn add_commands_to(&self, t: &mut [HistogramTotals]) {
        for (t, h) in t.iter_mut().zip(&self.commands) {
            h.add_to(t, self.ticks_per_ns);
        }
    }

    pub(crate) fn add_flash_to(&self, t: &mut HistogramTotals) {
        self.flash_read.add_to(t, self.ticks_per_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_into_the_first_bucket_that_holds_it() {
        let l = Latency::default();
        let ticks = |us: u64| (us as f64 * 1000.0 * l.ticks_per_ns) as u64;
        for us in [3, 9, 11, 1_000_000] {
            l.command(Cmd::Get, 1000, 1000 + ticks(us));
        }
        let mut t = vec![HistogramTotals::default(); Cmd::ALL.len()];
        l.add_commands_to(&mut t);
        let g = t[Cmd::Get as usize];
        assert_eq!(g.buckets[0], 2);
        assert_eq!(g.buckets[1], 1);
        assert_eq!(g.buckets[BUCKETS - 1], 1);
        assert_eq!(g.count(), 4);
        let want = (3 + 9 + 11 + 1_000_000) * 1000;
        assert!(g.sum_ns.abs_diff(want) < want / 1000, "{}", g.sum_ns);
        assert_eq!(t[Cmd::Set as usize].count(), 0);
    }

    #[test]
    fn the_clock_measures_time() {
        calibrate();
        let l = Latency::default();
        let start = now();
        std::thread::sleep(Duration::from_millis(20));
        l.command(Cmd::Set, start, now());
        let mut t = vec![HistogramTotals::default(); Cmd::ALL.len()];
        l.add_commands_to(&mut t);
        let ns = t[Cmd::Set as usize].sum_ns;
        assert!((20_000_000..200_000_000).contains(&ns), "{ns}");
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = Cmd::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Cmd::ALL.len());
    }
}
