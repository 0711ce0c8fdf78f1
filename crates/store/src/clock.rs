//! The server clock, in memcached's units.
//!
//! memcached keeps time as `rel_time_t`: whole seconds since the process
//! "started", where the start is backdated by 62 s (ITEM_UPDATE_INTERVAL + 2)
//! so that no live timestamp is ever 0. Like memcached's once-a-second
//! timer, the clock advances one whole second per second elapsed since the
//! process started (monotonic), so its seconds turn over at the start's
//! sub-second phase: right after a turn, `process_started + now` equals the
//! wall clock's second, as memcached's does, and an item set with exptime 1
//! expires at the next turn, not one full second later.

use std::sync::atomic::{AtomicU32, Ordering};

/// memcached's REALTIME_MAXDELTA: exptimes above this are unix timestamps.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;
/// How stale an item's access time may get before a hit refreshes it.
pub const ITEM_UPDATE_INTERVAL: u32 = 60;

/// memcached's relative clock (see the module comment).
pub struct Clock {
    /// Unix time of relative second 0 (wall clock at start minus 62 s).
    process_started: i64,
    /// When the clock started counting (monotonic), at relative time
    /// `at_start`.
    started: std::time::Instant,
    at_start: u32,
    current: AtomicU32,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock starting now, at relative second 62.
    pub fn new() -> Clock {
        let backdate = i64::from(ITEM_UPDATE_INTERVAL) + 2;
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Clock {
            process_started: wall - backdate,
            started: std::time::Instant::now(),
            at_start: backdate as u32,
            current: AtomicU32::new(backdate as u32),
        }
    }

    /// The clock of an earlier run resumed (a warm restart): relative
    /// second 0 stays at `process_started`, so relative times kept from
    /// that run (expiries, access times) keep their meaning and the time
    /// spent stopped counts. Relative time never goes back: if the wall
    /// clock is behind `last_seen` (the last relative time that run saw),
    /// the clock resumes there.
    pub fn resume(process_started: i64, last_seen: u32) -> Clock {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let rel = u32::try_from((wall.as_secs() as i64 - process_started).max(0))
            .unwrap_or(u32::MAX)
            .max(last_seen);
        // Seconds turn over with the wall clock's, as they did before.
        let into_second = std::time::Duration::from_nanos(u64::from(wall.subsec_nanos()));
        let now = std::time::Instant::now();
        Clock {
            process_started,
            started: now.checked_sub(into_second).unwrap_or(now),
            at_start: rel,
            current: AtomicU32::new(rel),
        }
    }

    /// Current relative time (memcached's `current_time`).
    #[inline]
    pub fn now(&self) -> u32 {
        self.current.load(Ordering::Relaxed)
    }

    /// Re-reads the monotonic clock; called by the maintenance thread.
    pub fn tick(&self) {
        let rel = u64::from(self.at_start) + self.started.elapsed().as_secs();
        self.current
            .store(u32::try_from(rel).unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// Time until just after the clock's next second turns over.
    pub fn until_next_second(&self) -> std::time::Duration {
        let into = self.started.elapsed().subsec_nanos();
        std::time::Duration::from_nanos(u64::from(1_000_000_000 - into) + 500_000)
    }

    /// Moves the clock by `secs` (tests of expiry; never used by the server).
    #[doc(hidden)]
    pub fn advance_for_tests(&self, secs: u32) {
        self.current.fetch_add(secs, Ordering::Relaxed);
    }

    /// Unix time of relative second 0.
    pub fn process_started(&self) -> i64 {
        self.process_started
    }

    /// Unix time now, as memcached reports it (`time` stat).
    pub fn unix_now(&self) -> i64 {
        self.process_started + i64::from(self.now())
    }

    /// memcached's `realtime(EXPTIME_TO_POSITIVE_TIME(exptime))`: turns a
    /// client exptime into relative time, 0 meaning "never".
    pub fn expiry(&self, exptime: i32) -> u32 {
        let exptime: i64 = if exptime < 0 {
            REALTIME_MAXDELTA + 1
        } else {
            i64::from(exptime)
        };
        self.realtime(exptime)
    }

    /// memcached's `realtime()`.
    pub fn realtime(&self, exptime: i64) -> u32 {
        if exptime == 0 {
            return 0;
        }
        if exptime > REALTIME_MAXDELTA {
            if exptime <= self.process_started {
                return 1;
            }
            return (exptime - self.process_started) as u32;
        }
        (exptime + i64::from(self.now())) as u32
    }
}

/// CPU time the calling thread has used, in microseconds (0 where the
/// system cannot say): what the pack pass counts its work in.
pub fn thread_cpu_micros() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_rules() {
        let c = Clock::new();
        let now = c.now();
        assert_eq!(c.expiry(0), 0);
        assert_eq!(c.expiry(10), now + 10);
        assert_eq!(c.expiry(-1), 1, "negative exptime is already expired");
        assert_eq!(c.expiry(1), now + 1);
        let future = c.unix_now() + 100;
        assert_eq!(c.expiry(future as i32), now + 100);
        assert_eq!(
            c.expiry((REALTIME_MAXDELTA + 5) as i32),
            1,
            "absolute time in the past"
        );
    }

    #[test]
    fn a_resumed_clock_counts_the_time_stopped_and_never_goes_back() {
        let c = Clock::new();
        let wall = c.unix_now();
        // An earlier run that started 1000 s before this one.
        let r = Clock::resume(c.process_started() - 1000, 0);
        assert!((r.now() as i64 - (c.now() as i64 + 1000)).abs() <= 1);
        assert!((r.unix_now() - wall).abs() <= 1);
        r.tick();
        assert!(r.now() >= c.now() + 999);
        // The wall clock is behind what the earlier run saw.
        let behind = Clock::resume(c.process_started(), c.now() + 5000);
        assert_eq!(behind.now(), c.now() + 5000);
        behind.tick();
        assert!(behind.now() >= c.now() + 5000);
    }
}
