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
//! plus one per batch.

use std::time::Duration;

use osmium_protocol::request::{Command, Reply, Request, StoreMode};

use super::counters::Counter;

/// Upper bounds of the buckets, in nanoseconds: 10 µs to 100 ms, then
/// +Inf.
pub const BOUNDS_NS: [u64; 13] = [
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
pub const BUCKETS: usize = BOUNDS_NS.len() + 1;

macro_rules! commands {
    ($($variant:ident = $name:literal),* $(,)?) => {
        /// What a request is, as the `command` label names it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Cmd { $($variant,)* }

        impl Cmd {
            pub const ALL: &'static [Cmd] = &[$(Cmd::$variant,)*];
            pub fn name(self) -> &'static str {
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
    pub fn of(req: &Request<'_>) -> Cmd {
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

/// One histogram, written by one thread.
#[derive(Default)]
pub struct Histogram {
    buckets: [Counter; BUCKETS],
    sum_ns: Counter,
}

impl Histogram {
    #[inline]
    pub fn record(&self, d: Duration) {
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        let i = BOUNDS_NS
            .iter()
            .position(|&b| ns <= b)
            .unwrap_or(BUCKETS - 1);
        self.buckets[i].incr();
        self.sum_ns.add(ns);
    }

    pub fn add_to(&self, t: &mut HistogramTotals) {
        for (sum, b) in t.buckets.iter_mut().zip(&self.buckets) {
            *sum += b.get();
        }
        t.sum_ns += self.sum_ns.get();
    }
}

/// A sum of histograms: per-bucket (not cumulative) counts.
#[derive(Default, Clone, Copy, Debug)]
pub struct HistogramTotals {
    pub buckets: [u64; BUCKETS],
    pub sum_ns: u64,
}

impl HistogramTotals {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// One worker's histograms.
pub struct Latency {
    commands: Vec<Histogram>,
    pub flash_read: Histogram,
}

impl Default for Latency {
    fn default() -> Latency {
        Latency {
            commands: Cmd::ALL.iter().map(|_| Histogram::default()).collect(),
            flash_read: Histogram::default(),
        }
    }
}

impl Latency {
    #[inline]
    pub fn command(&self, cmd: Cmd, d: Duration) {
        self.commands[cmd as usize].record(d);
    }

    /// Adds this worker's command histograms to `t` (indexed as
    /// `Cmd::ALL`).
    pub fn add_commands_to(&self, t: &mut [HistogramTotals]) {
        for (t, h) in t.iter_mut().zip(&self.commands) {
            h.add_to(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_into_the_first_bucket_that_holds_it() {
        let h = Histogram::default();
        h.record(Duration::from_micros(3));
        h.record(Duration::from_micros(10));
        h.record(Duration::from_micros(11));
        h.record(Duration::from_secs(1));
        let mut t = HistogramTotals::default();
        h.add_to(&mut t);
        assert_eq!(t.buckets[0], 2);
        assert_eq!(t.buckets[1], 1);
        assert_eq!(t.buckets[BUCKETS - 1], 1);
        assert_eq!(t.count(), 4);
        assert_eq!(t.sum_ns, 3_000 + 10_000 + 11_000 + 1_000_000_000);
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = Cmd::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Cmd::ALL.len());
    }
}
