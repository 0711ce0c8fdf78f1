//! The bound on guessing the admin token (`admin`) on the stats port: how
//! many wrong tokens are compared, how slowly they are answered, and how
//! much they log. All on the event loop's thread, without sleeping: a
//! held answer is a deadline the stats port's tick meets.
//!
//! - **Per source address** (an IPv4 address; an IPv6 /64, what one host
//!   is usually given): a bucket of [`ADDRESS_BURST`] failed tries,
//!   refilled one per [`ADDRESS_REFILL`]. A try from an address whose
//!   bucket is empty is refused *unchecked* (`ERROR too many failed reload
//!   tries; try again later`), so guesses from one address are at most
//!   the burst, then one per refill interval, however many connections
//!   it opens. A right token fills its address's bucket again.
//! - **Over all addresses**: the same, [`GLOBAL_BURST`] and one per
//!   [`GLOBAL_REFILL`], against an attacker with many addresses (every
//!   127.0.0.0/8 address is the same host). While it is empty every
//!   `reload` on the port is refused (SIGHUP still reloads).
//! - **Per connection**: the answer to a wrong token is held, longer for
//!   each failure its address has in hand (250 ms, doubling, at most 4 s),
//!   so one connection after another waits out the growing delays.
//! - **The log**: the first refusal after a quiet interval is one WARN
//!   line with its address; those after it are counted and summed up in
//!   one WARN line per [`LOG_INTERVAL`] (how many, why, from how many
//!   addresses), never one line per try.
//!
//! Memory is bounded: an address whose bucket is full again is forgotten,
//! and the global bucket bounds how many are not.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Failed tries an address may make at once.
pub const ADDRESS_BURST: u32 = 5;
/// Then one more per this.
pub const ADDRESS_REFILL: Duration = Duration::from_secs(2);
/// Failed tries over all addresses at once.
pub const GLOBAL_BURST: u32 = 20;
/// Then one more per this.
pub const GLOBAL_REFILL: Duration = Duration::from_millis(500);
/// The hold of the answer to an address's first failure in hand.
pub const FIRST_DELAY: Duration = Duration::from_millis(250);
/// The longest hold.
pub const MAX_DELAY: Duration = Duration::from_secs(4);
/// How often refusals are summed up in the log.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Addresses remembered at most (their buckets not full).
const MAX_ADDRESSES: usize = 4096;

/// A token bucket of failed tries.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Tries left, in units of 1/`REFILL_STEPS` of a try.
    left: u64,
    at: Instant,
}

const STEPS: u64 = 1000;

impl Bucket {
    fn full(burst: u32, now: Instant) -> Bucket {
        Bucket {
            left: u64::from(burst) * STEPS,
            at: now,
        }
    }

    /// Refills it for the time since it was last seen.
    fn refill(&mut self, burst: u32, every: Duration, now: Instant) {
        let since = now.saturating_duration_since(self.at);
        let gained = since.as_nanos() * u128::from(STEPS) / every.as_nanos().max(1);
        let cap = u64::from(burst) * STEPS;
        self.left = (u128::from(self.left) + gained).min(u128::from(cap)) as u64;
        self.at = now;
    }

    fn has_one(&self) -> bool {
        self.left >= STEPS
    }

    fn take(&mut self) {
        self.left = self.left.saturating_sub(STEPS);
    }

    fn is_full(&self, burst: u32) -> bool {
        self.left >= u64::from(burst) * STEPS
    }

    /// Whole tries used of the burst.
    fn used(&self, burst: u32) -> u32 {
        let cap = u64::from(burst) * STEPS;
        (cap.saturating_sub(self.left)).div_ceil(STEPS) as u32
    }
}

/// Where tries come from: an IPv4 address, or an IPv6 /64.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Source(u128);

impl Source {
    /// The source of a try from `ip` (an IPv4-mapped IPv6 address as IPv4).
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source(u128::from(u32::from(v4))),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(u128::from(u32::from(v4))),
                None => Source((u128::from(v6) >> 64 << 64) | 1 << 32),
            },
        }
    }
}

/// Whether a `reload` try is checked.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    /// Compare its token.
    Check,
    /// Too many failed tries lately: refused unchecked.
    Refused,
}

/// Refusals counted since the last log line.
#[derive(Debug, Default)]
struct Tally {
    bad: u64,
    refused: u64,
    disabled: u64,
    /// The first address of the interval, and how many others.
    first: Option<String>,
    sources: Vec<Source>,
}

/// The stats port's guard against guessing.
#[derive(Debug)]
pub struct Guard {
    by_source: HashMap<Source, Bucket>,
    global: Bucket,
    tally: Tally,
    /// When the current log interval ends (none: quiet, the next refusal
    /// is logged at once).
    interval_end: Option<Instant>,
}

impl Guard {
    /// A guard with full buckets.
    pub fn new(now: Instant) -> Guard {
        Guard {
            by_source: HashMap::new(),
            global: Bucket::full(GLOBAL_BURST, now),
            tally: Tally::default(),
            interval_end: None,
        }
    }

    /// Whether a try from `ip` is checked now.
    pub fn admit(&mut self, ip: IpAddr, now: Instant) -> Admit {
        self.global.refill(GLOBAL_BURST, GLOBAL_REFILL, now);
        if !self.global.has_one() {
            return Admit::Refused;
        }
        match self.by_source.get_mut(&Source::of(ip)) {
            None => Admit::Check,
            Some(b) => {
                b.refill(ADDRESS_BURST, ADDRESS_REFILL, now);
                if b.has_one() {
                    Admit::Check
                } else {
                    Admit::Refused
                }
            }
        }
    }

    /// A checked try from `ip` had a wrong token: how long its answer is
    /// held.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) -> Duration {
        self.global.take();
        let source = Source::of(ip);
        if !self.by_source.contains_key(&source) && self.by_source.len() >= MAX_ADDRESSES {
            self.by_source.retain(|_, b| {
                b.refill(ADDRESS_BURST, ADDRESS_REFILL, now);
                !b.is_full(ADDRESS_BURST)
            });
        }
        let b = self
            .by_source
            .entry(source)
            .or_insert_with(|| Bucket::full(ADDRESS_BURST, now));
        b.refill(ADDRESS_BURST, ADDRESS_REFILL, now);
        b.take();
        let used = b.used(ADDRESS_BURST).max(1);
        FIRST_DELAY
            .saturating_mul(1 << (used - 1).min(8))
            .min(MAX_DELAY)
    }

    /// A checked try from `ip` had the right token.
    pub fn succeeded(&mut self, ip: IpAddr) {
        self.by_source.remove(&Source::of(ip));
    }

    /// Counts a refused try for the log (`why`: the answer's text);
    /// logs it at once when the log was quiet.
    pub fn count(&mut self, peer: &str, ip: Option<IpAddr>, why: &str, now: Instant) {
        let t = &mut self.tally;
        match why {
            w if w.starts_with("bad token") => t.bad += 1,
            w if w.starts_with("too many") => t.refused += 1,
            _ => t.disabled += 1,
        }
        if let Some(ip) = ip {
            let s = Source::of(ip);
            if t.sources.len() < 64 && !t.sources.contains(&s) {
                t.sources.push(s);
            }
        }
        if t.first.is_none() {
            t.first = Some(peer.to_string());
        }
        if self.interval_end.is_none() {
            tracing::warn!(
                "stats port: reload from {peer} refused: {why} (refusals in the next {} s \
                 are counted and logged together)",
                LOG_INTERVAL.as_secs()
            );
            self.tally = Tally::default();
            self.interval_end = Some(now + LOG_INTERVAL);
        }
    }

    /// When the log's interval ends (the loop's next timer).
    pub fn next_timer(&self) -> Option<Instant> {
        self.interval_end
    }

    /// Ends a log interval that is over: one line if anything was refused
    /// in it; then quiet.
    pub fn tick(&mut self, now: Instant) {
        let Some(end) = self.interval_end else {
            return;
        };
        if now < end {
            return;
        }
        let t = std::mem::take(&mut self.tally);
        let total = t.bad + t.refused + t.disabled;
        if total == 0 {
            self.interval_end = None;
            return;
        }
        let others = t.sources.len().saturating_sub(1);
        let more = if t.sources.len() >= 64 { "+" } else { "" };
        tracing::warn!(
            "stats port: {total} reload tries refused in the last {} s ({} bad token, {} too \
             many failed tries, {} not enabled), from {}{}",
            LOG_INTERVAL.as_secs(),
            t.bad,
            t.refused,
            t.disabled,
            t.first.as_deref().unwrap_or("?"),
            if others > 0 {
                format!(" and {others}{more} other addresses")
            } else {
                String::new()
            }
        );
        // Another interval: refusals keep being summed up until one
        // passes without any.
        self.interval_end = Some(now + LOG_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_gets_its_burst_then_one_try_per_refill() {
        let t0 = Instant::now();
        let mut g = Guard::new(t0);
        let a = ip("192.0.2.1");
        let mut delays = Vec::new();
        for _ in 0..ADDRESS_BURST {
            assert_eq!(g.admit(a, t0), Admit::Check);
            delays.push(g.failed(a, t0));
        }
        assert_eq!(
            delays,
            [250, 500, 1000, 2000, 4000].map(Duration::from_millis)
        );
        assert_eq!(g.admit(a, t0), Admit::Refused);
        assert_eq!(g.admit(ip("192.0.2.2"), t0), Admit::Check, "others are not");
        let t1 = t0 + ADDRESS_REFILL;
        assert_eq!(g.admit(a, t1), Admit::Check);
        g.failed(a, t1);
        assert_eq!(g.admit(a, t1), Admit::Refused);
        // The right token (checked once the bucket refilled) forgives.
        let t2 = t1 + ADDRESS_REFILL;
        assert_eq!(g.admit(a, t2), Admit::Check);
        g.succeeded(a);
        assert_eq!(g.admit(a, t2), Admit::Check);
        assert_eq!(g.failed(a, t2), FIRST_DELAY);
    }

    #[test]
    fn many_addresses_share_the_global_bound() {
        let t0 = Instant::now();
        let mut g = Guard::new(t0);
        let mut checked = 0;
        for i in 0..200u32 {
            let a = IpAddr::from(std::net::Ipv4Addr::from(0x7f00_0001 + i));
            if g.admit(a, t0) == Admit::Check {
                g.failed(a, t0);
                checked += 1;
            }
        }
        assert_eq!(checked, GLOBAL_BURST);
        let t1 = t0 + GLOBAL_REFILL;
        assert_eq!(g.admit(ip("198.51.100.7"), t1), Admit::Check);
    }

    #[test]
    fn ipv6_hosts_are_told_apart_by_their_64() {
        let a = Source::of(ip("2001:db8:1:2::1"));
        assert_eq!(a, Source::of(ip("2001:db8:1:2:ffff::9")));
        assert_ne!(a, Source::of(ip("2001:db8:1:3::1")));
        assert_eq!(
            Source::of(ip("::ffff:192.0.2.1")),
            Source::of(ip("192.0.2.1"))
        );
        assert_ne!(Source::of(ip("::1")), Source::of(ip("0.0.0.1")));
    }

    #[test]
    fn the_log_is_one_line_then_one_summary_per_interval() {
        let t0 = Instant::now();
        let mut g = Guard::new(t0);
        let a = Some(ip("192.0.2.1"));
        g.count("192.0.2.1:5", a, "bad token", t0);
        assert_eq!(g.next_timer(), Some(t0 + LOG_INTERVAL));
        for _ in 0..1000 {
            g.count("192.0.2.1:6", a, "too many failed reload tries", t0);
        }
        assert_eq!(g.tally.refused, 1000);
        g.tick(t0 + LOG_INTERVAL);
        assert_eq!(g.tally.refused, 0);
        g.tick(t0 + 2 * LOG_INTERVAL);
        assert_eq!(g.next_timer(), None, "quiet again");
    }
}
