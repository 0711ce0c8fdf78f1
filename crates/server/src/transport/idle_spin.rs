//! A worker's wait for its next events: it polls without sleeping for a
//! short, adaptive while before it blocks in `epoll_wait`.
//!
//! A closed-loop client at low concurrency sends its next request a few
//! tens of microseconds after the last reply left. A worker that blocks at
//! once pays a sleep and a wake-up for each request: on a virtual machine
//! the wake-up of an idle vCPU alone takes tens of microseconds (an
//! inter-processor interrupt and a halt exit), more than the request's own
//! work, and it is paid again by every request of the next turn. Polling
//! for a while first catches the next request while the worker still runs:
//! lower latency, paid for with the polls' CPU (in a closed loop about
//! that of the wake-ups saved; at open-loop rates far more, which is why
//! it is off unless asked for).
//!
//! The budget adapts to the gaps between turns, so an idle or slow-paced
//! server does not burn a core:
//!
//! - events that came while polling: the budget stays;
//! - a block that ended within `max` (polling that long would have caught
//!   it): the budget becomes that gap and a quarter more;
//! - a block longer than `max` (spinning would not have caught it): the
//!   budget halves, down to nothing; a budget of nothing is tried at
//!   `max` again every `PROBE_EVERY` blocks (without polling, a client's
//!   gap includes the worker's wake-up and can look longer than `max`
//!   when polling would keep it short).
//!
//! A poll that lost its CPU (two polls far apart in time, and the thread
//! switched out involuntarily: another thread, of this server or of
//! another program, was given the CPU; a gap without a switch is the
//! hypervisor taking the vCPU, and is let be) ends that poll. Lost again
//! within `CONTENDED`, the CPU is contended: polling stops for
//! `PROBE_EVERY` blocked waits, twice as many each time it happens again
//! within `CALM` of the last time: on a shared CPU a polling worker would
//! take time from its neighbours and, having used its share, wait behind
//! them when a request comes. A lone loss (the server's maintenance
//! thread, which wakes every 100 ms, on a pinned server's one CPU) is not
//! contention.
//!
//! A worker that waited for its CPU (runnable while another thread ran,
//! the kernel's `schedstat`) for more than `CONTENDED_SHARE` of the last
//! `LOAD_WINDOW` does not poll until a window under `UNCONTENDED_SHARE`:
//! a neighbour that runs in short slices preempts a poll rarely enough to
//! pass the rule above, yet a polling worker uses up its share of the CPU
//! and a request that comes while the neighbour runs waits for the
//! neighbour's slice.
//!
//! A worker that spent more than `LOAD_BUSY` of the last `LOAD_WINDOW` in
//! its turns does not poll until a window where it was busy less than
//! `LOAD_RESUME`: near saturation a sleeping worker wakes to a batch of
//! requests, cheaper per request than the one or two a poll catches, and
//! the latency there is queueing, which polling does not shorten.
//!
//! So a busy worker does not poll at all, a closed-loop one polls about as
//! long as its clients take to answer, and one whose clients pause longer
//! than `max` stops polling after a few turns and sleeps as before.
//!
//! `max` is `-o idle_spin=<microseconds>`; 0, the default, never polls:
//! at open-loop rates a polling worker spends every gap shorter than
//! `max` polling, which costs more CPU per request than the wake-ups it
//! saves (see `settings::Settings::idle_spin_us`).

use std::io;
use std::time::{Duration, Instant};

use mio::{Events, Poll};

/// Blocked waits after which a budget that fell to nothing is tried at
/// `max` again.
const PROBE_EVERY: u32 = 64;
/// The longest back-off after polls that were preempted, in blocked waits.
const MAX_BACKOFF: u32 = 64 * 1024;
/// A gap this long between two polls of one wait means the worker lost its
/// CPU while polling: another thread wanted it.
const PREEMPTED: Duration = Duration::from_micros(250);
/// A poll preempted within this long of the last preempted one means the
/// CPU is contended: polling stops for a while. A lone preemption (the
/// server's maintenance thread wakes every 100 ms) only ends its poll.
const CONTENDED: Duration = Duration::from_millis(50);
/// After this long without a preempted poll the back-off starts again
/// from `PROBE_EVERY`.
const CALM: Duration = Duration::from_secs(10);
/// The window over which a worker's share of time spent in its turns is
/// measured.
const LOAD_WINDOW: Duration = Duration::from_millis(2);
/// A worker busy in its turns for more than this share of a window stops
/// polling until a window where it is busy less than `LOAD_RESUME`.
const LOAD_BUSY: f64 = 0.6;
const LOAD_RESUME: f64 = 0.4;
/// A worker that waited for its CPU (runnable, while another thread ran)
/// for more than this share of a load window does not poll until a window
/// where it waited less than `UNCONTENDED`.
const CONTENDED_SHARE: f64 = 0.05;
const UNCONTENDED_SHARE: f64 = 0.01;

/// A worker's polling budget.
pub(crate) struct IdleSpin {
    /// The longest poll before blocking; zero: never poll.
    max: Duration,
    /// The current budget, at most `max`.
    budget: Duration,
    /// Blocked waits left before a budget of nothing is tried at `max`.
    probe_in: u32,
    /// Blocked waits without polling after the next preempted poll:
    /// doubles with every preempted poll, back to `PROBE_EVERY` once
    /// `CALM` has passed without one.
    backoff: u32,
    /// When a poll was last preempted.
    last_preempted: Option<Instant>,
    /// This thread's involuntary context switches, as last read.
    involuntary_switches: i64,
    /// The budget is nothing because a poll was preempted (not because the
    /// gaps were long): only the probe brings polling back.
    held_off: bool,
    /// The worker is busy in its turns most of the time: it does not poll.
    loaded: bool,
    /// The worker's CPU is wanted by other threads: it does not poll.
    contended: bool,
    /// How long this thread has waited for a CPU, from the kernel.
    run_queue: RunQueueWait,
    /// When the current load window started.
    window_start: Instant,
    /// Time spent in turns (outside `wait`) in the current window.
    window_busy: Duration,
    /// When the last wait returned: the turn since then is busy time.
    turn_start: Instant,
}

impl IdleSpin {
    pub(crate) fn new(max: Duration) -> IdleSpin {
        IdleSpin {
            max,
            budget: max,
            probe_in: PROBE_EVERY,
            backoff: PROBE_EVERY,
            held_off: false,
            last_preempted: None,
            involuntary_switches: involuntary_switches(),
            loaded: false,
            contended: false,
            run_queue: RunQueueWait::default(),
            window_start: Instant::now(),
            window_busy: Duration::ZERO,
            turn_start: Instant::now(),
        }
    }

    /// Waits for events as `poll.poll(events, timeout)` does; polls for up
    /// to the budget first unless `timeout` is zero (work is waiting).
    pub(crate) fn wait(
        &mut self,
        poll: &mut Poll,
        events: &mut Events,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        if self.max.is_zero() {
            return poll.poll(events, timeout);
        }
        let start = Instant::now();
        self.turn_ended(start);
        if timeout == Some(Duration::ZERO) {
            // Work is waiting: the turn goes on (this poll counts as busy).
            self.turn_start = start;
            return poll.poll(events, timeout);
        }
        if !self.budget.is_zero() && !self.loaded && !self.contended {
            let until = start + self.budget;
            let mut last = start;
            loop {
                poll.poll(events, Some(Duration::ZERO))?;
                let now = Instant::now();
                if now - last > PREEMPTED && self.lost_cpu_to_a_thread() {
                    self.preempted(now);
                    if !events.is_empty() {
                        self.turn_start = now;
                        return Ok(());
                    }
                    break;
                }
                last = now;
                if !events.is_empty() {
                    self.turn_start = now;
                    return Ok(());
                }
                if now >= until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let result = poll.poll(events, timeout);
        self.turn_start = Instant::now();
        if !self.loaded && !self.contended {
            self.blocked_for(self.turn_start - start);
        }
        result
    }

    /// Counts the turn that ends at `now` and, at the end of a load
    /// window, decides whether the worker is too busy to poll.
    ///
    /// Near saturation, a worker that sleeps wakes to a batch of requests
    /// (its own wake-up is the time they gather in), and a batch costs
    /// less per request than the one or two a poll catches: polling there
    /// lowers the rate the worker can serve. Latency at that load is its
    /// queueing, which polling does not shorten.
    fn turn_ended(&mut self, now: Instant) {
        self.window_busy += now.saturating_duration_since(self.turn_start);
        let window = now.saturating_duration_since(self.window_start);
        if window < LOAD_WINDOW {
            return;
        }
        let busy = self.window_busy.as_secs_f64() / window.as_secs_f64();
        if busy > LOAD_BUSY {
            self.loaded = true;
        } else if busy < LOAD_RESUME {
            self.loaded = false;
        }
        if let Some(waited) = self.run_queue.since_last() {
            self.contended_for(waited, window);
        }
        self.window_start = now;
        self.window_busy = Duration::ZERO;
    }

    /// Decides from the time the worker waited for its CPU in a window
    /// whether the CPU is contended. A polling worker that shares its CPU
    /// uses up its share of it: the scheduler then lets the neighbour run
    /// on when a request comes, and the request waits (up to the
    /// neighbour's slice, milliseconds) where a worker that slept would
    /// have been run at once.
    fn contended_for(&mut self, waited: Duration, window: Duration) {
        let share = waited.as_secs_f64() / window.as_secs_f64();
        if share > CONTENDED_SHARE {
            self.contended = true;
        } else if share < UNCONTENDED_SHARE {
            self.contended = false;
        }
    }

    /// Whether this thread was switched out involuntarily since the last
    /// call: a gap between polls without that is the hypervisor taking the
    /// vCPU, which no thread here can give way to.
    fn lost_cpu_to_a_thread(&mut self) -> bool {
        let switches = involuntary_switches();
        let lost = switches != self.involuntary_switches;
        self.involuntary_switches = switches;
        lost
    }

    /// The worker lost its CPU while polling: another thread (of this
    /// server or another program) wants it, and polling would keep taking
    /// it. Stop for a while, longer each time it happens again.
    fn preempted(&mut self, now: Instant) {
        let since = self
            .last_preempted
            .map(|t| now.saturating_duration_since(t));
        self.last_preempted = Some(now);
        if since.is_some_and(|since| since > CALM) {
            self.backoff = PROBE_EVERY;
        }
        if since.is_none_or(|since| since > CONTENDED) {
            // A lone preemption (the server's own housekeeping, a
            // daemon's tick) ends this poll only.
            return;
        }
        self.budget = Duration::ZERO;
        self.held_off = true;
        self.probe_in = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// Adapts the budget after a wait that had to block and ended after
    /// `gap` (from the start of the wait).
    fn blocked_for(&mut self, gap: Duration) {
        if !self.budget.is_zero() {
            if gap <= self.max {
                self.budget = (gap + gap / 4).min(self.max);
            } else {
                let half = self.budget / 2;
                self.budget = if half < Duration::from_micros(1) {
                    self.probe_in = PROBE_EVERY;
                    Duration::ZERO
                } else {
                    half
                };
            }
            return;
        }
        if gap <= self.max && !self.held_off {
            self.budget = gap + gap / 4;
            return;
        }
        // Not polling: without it, the gap a closed-loop client leaves is
        // its round trip plus the worker's wake-up, which may be over
        // `max` when polling would keep it under; try again now and then.
        self.probe_in = self.probe_in.saturating_sub(1);
        if self.probe_in == 0 {
            self.budget = self.max;
            self.held_off = false;
            self.probe_in = PROBE_EVERY;
        }
    }
}

/// The calling thread's time spent runnable but waiting for a CPU, from
/// `/proc/thread-self/schedstat` (its second field, nanoseconds), opened
/// on first use by the thread that reads it.
#[derive(Default)]
struct RunQueueWait {
    /// The open file; None before the first read or where it cannot be
    /// read (then contention shows only as preempted polls).
    file: Option<std::fs::File>,
    /// The first read was tried.
    opened: bool,
    /// The total at the last read.
    last_ns: u64,
}

impl RunQueueWait {
    /// The time waited since the last call; None on the first call or if
    /// the kernel does not say.
    fn since_last(&mut self) -> Option<Duration> {
        if !self.opened {
            self.opened = true;
            self.file = std::fs::File::open("/proc/thread-self/schedstat").ok();
            self.last_ns = self.read()?;
            return None;
        }
        let now = self.read()?;
        let waited = now.saturating_sub(self.last_ns);
        self.last_ns = now;
        Some(Duration::from_nanos(waited))
    }

    fn read(&mut self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
        parse_run_delay(&buf[..n])
    }
}

/// The second field of a schedstat line (`<on cpu ns> <waiting ns>
/// <timeslices>`).
fn parse_run_delay(line: &[u8]) -> Option<u64> {
    std::str::from_utf8(line)
        .ok()?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The calling thread's involuntary context switches so far.
fn involuntary_switches() -> i64 {
    // SAFETY: an all-zero `rusage` is a valid value of that plain C
    // struct, and getrusage writes only into the one it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_THREAD, &mut usage) != 0 {
            return 0;
        }
        usage.ru_nivcsw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_micros(50);

    #[test]
    fn a_gap_within_max_sets_the_budget_to_cover_it() {
        let mut s = IdleSpin::new(MAX);
        s.budget = Duration::from_micros(4);
        s.blocked_for(Duration::from_micros(20));
        assert_eq!(s.budget, Duration::from_micros(25));
        s.blocked_for(Duration::from_micros(48));
        assert_eq!(s.budget, MAX);
    }

    #[test]
    fn long_gaps_halve_the_budget_down_to_nothing() {
        let mut s = IdleSpin::new(MAX);
        let mut steps = 0;
        while !s.budget.is_zero() {
            s.blocked_for(Duration::from_millis(5));
            steps += 1;
            assert!(steps < 10, "{:?}", s.budget);
        }
        // A short gap again brings polling back.
        s.blocked_for(Duration::from_micros(8));
        assert_eq!(s.budget, Duration::from_micros(10));
    }

    #[test]
    fn a_budget_of_nothing_is_tried_again_now_and_then() {
        let mut s = IdleSpin::new(MAX);
        s.budget = Duration::ZERO;
        for _ in 0..PROBE_EVERY - 1 {
            s.blocked_for(Duration::from_millis(1));
            assert!(s.budget.is_zero());
        }
        s.blocked_for(Duration::from_millis(1));
        assert_eq!(s.budget, MAX);
    }

    #[test]
    fn preempted_polls_back_off_longer_each_time() {
        let mut s = IdleSpin::new(MAX);
        let t = Instant::now();
        let ms = Duration::from_millis(1);
        // A lone preemption ends its poll only.
        s.preempted(t);
        assert_eq!(s.budget, MAX);
        // Another soon after: the CPU is contended.
        s.preempted(t + ms);
        assert!(s.budget.is_zero());
        assert_eq!(s.probe_in, PROBE_EVERY);
        for _ in 0..PROBE_EVERY {
            s.blocked_for(Duration::from_micros(10));
        }
        assert_eq!(s.budget, MAX);
        s.preempted(t + 2 * ms);
        assert_eq!(s.probe_in, 2 * PROBE_EVERY);
        for _ in 0..40 {
            s.preempted(t + 2 * ms);
        }
        assert_eq!(s.probe_in, MAX_BACKOFF);
        // After a calm stretch the back-off starts again.
        let later = t + CALM + Duration::from_secs(1);
        s.budget = MAX;
        s.held_off = false;
        s.preempted(later);
        assert_eq!(s.budget, MAX);
        s.preempted(later + ms);
        assert!(s.budget.is_zero());
        assert_eq!(s.probe_in, PROBE_EVERY);
    }

    #[test]
    fn preemptions_far_apart_do_not_stop_polling() {
        let mut s = IdleSpin::new(MAX);
        let t = Instant::now();
        for i in 0..50 {
            s.preempted(t + i * Duration::from_millis(100));
            assert_eq!(s.budget, MAX);
            assert!(!s.held_off);
        }
    }

    /// Runs `count` turns of `busy` microseconds, each followed by a wait
    /// of `idle`, from `now`.
    fn turns(s: &mut IdleSpin, now: &mut Instant, busy: u64, idle: u64, count: usize) {
        for _ in 0..count {
            s.turn_start = *now;
            *now += Duration::from_micros(busy);
            s.turn_ended(*now);
            *now += Duration::from_micros(idle);
        }
    }

    #[test]
    fn a_busy_worker_stops_polling_until_it_is_mostly_idle() {
        let mut s = IdleSpin::new(MAX);
        let mut now = s.window_start;
        turns(&mut s, &mut now, 90, 10, 40);
        assert!(s.loaded);
        // Half busy: between the two thresholds, it stays as it is.
        turns(&mut s, &mut now, 25, 25, 80);
        assert!(s.loaded);
        // Mostly idle: it polls again.
        turns(&mut s, &mut now, 10, 90, 40);
        assert!(!s.loaded);
    }

    #[test]
    fn waiting_for_the_cpu_stops_polling_until_it_is_free() {
        let mut s = IdleSpin::new(MAX);
        let window = Duration::from_millis(2);
        s.contended_for(Duration::from_micros(300), window);
        assert!(s.contended);
        // Between the two thresholds: as it was.
        s.contended_for(Duration::from_micros(50), window);
        assert!(s.contended);
        s.contended_for(Duration::from_micros(10), window);
        assert!(!s.contended);
    }

    #[test]
    fn the_run_queue_wait_is_the_second_schedstat_field() {
        assert_eq!(parse_run_delay(b"43261328 25860482 116\n"), Some(25860482));
        assert_eq!(parse_run_delay(b"43261328"), None);
        assert_eq!(parse_run_delay(b""), None);
        // This kernel's own, for this thread.
        let mut wait = RunQueueWait::default();
        assert_eq!(wait.since_last(), None);
        if wait.file.is_some() {
            assert!(wait.since_last().is_some());
        }
    }

    #[test]
    fn zero_max_never_polls() {
        let mut poll = Poll::new().unwrap();
        let mut events = Events::with_capacity(4);
        let mut s = IdleSpin::new(Duration::ZERO);
        s.wait(&mut poll, &mut events, Some(Duration::from_millis(1)))
            .unwrap();
        assert!(events.is_empty());
        assert!(s.budget.is_zero());
    }
}
