//! Which workers hold sync-mode replies, and for what: per worker and
//! target slot, the lowest sequence number one of its held connections
//! waits for. A link's ack thread wakes only the workers an MN may
//! release (`Replication::acknowledged_by`), not every worker for every
//! MN (a worker woken for nothing costs a wake-up and a turn).
//!
//! ```text
//!   worker:     hold (lowest = min(lowest, wait))   ack thread:  acked = seq
//!               fence                                            fence
//!               check every held connection                      lowest <= seq: wake
//!               (release; lowest = what the rest wait for)
//!               sleep
//! ```
//!
//! No wake is lost: a worker publishes what it waits for before its last
//! check of the acknowledgements before it sleeps, and an ack thread
//! stores the acknowledgement before it reads what the workers published,
//! each with a sequentially consistent fence between: one of the two sees
//! the other's store. What a worker publishes is never above what a
//! connection it holds waits for (a wake too many is harmless; one too
//! few would leave a connection to the worker's recheck timer).

use std::sync::atomic::{fence, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};

use super::{Wait, TARGET_SLOTS};

/// Nothing held for a slot.
const NONE: u64 = u64::MAX;

pub(crate) struct HeldWaits {
    /// Per worker, per target slot: the lowest sequence number waited for.
    lowest: Vec<[AtomicU64; TARGET_SLOTS]>,
}

impl HeldWaits {
    pub(crate) fn new(workers: usize) -> HeldWaits {
        HeldWaits {
            lowest: (0..workers)
                .map(|_| std::array::from_fn(|_| AtomicU64::new(NONE)))
                .collect(),
        }
    }

    /// Worker `worker` holds a connection that waits for `wait`.
    pub(crate) fn hold(&self, worker: usize, wait: &Wait) {
        if let Some(lowest) = self.lowest.get(worker) {
            for (l, &seq) in lowest.iter().zip(wait) {
                if seq > 0 {
                    l.fetch_min(seq, Relaxed);
                }
            }
        }
    }

    /// Worker `worker`'s held connections wait for `wait` now (per slot
    /// the lowest; 0: nothing), after it released some.
    pub(crate) fn set(&self, worker: usize, wait: &Wait) {
        if let Some(lowest) = self.lowest.get(worker) {
            for (l, &seq) in lowest.iter().zip(wait) {
                l.store(if seq == 0 { NONE } else { seq }, Relaxed);
            }
        }
    }

    /// Between a worker's `hold` and its check of the acknowledgements
    /// (and between an ack thread's store and `may_release`).
    pub(crate) fn fence() {
        fence(SeqCst);
    }

    /// Whether an acknowledgement up to `acked` on `slot` may release a
    /// connection `worker` holds.
    pub(crate) fn may_release(&self, worker: usize, slot: usize, acked: u64) -> bool {
        self.lowest
            .get(worker)
            .and_then(|l| l.get(slot))
            .is_none_or(|l| l.load(Relaxed) <= acked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_woken_only_for_what_it_holds() {
        let held = HeldWaits::new(2);
        let mut wait = Wait::default();
        // Nothing held: no acknowledgement releases anything.
        assert!(!held.may_release(0, 0, 100));
        wait[0] = 7;
        held.hold(0, &wait);
        wait[0] = 5;
        held.hold(0, &wait);
        assert!(!held.may_release(0, 0, 4));
        assert!(held.may_release(0, 0, 5));
        // Another slot, another worker: not theirs.
        assert!(!held.may_release(0, 1, 100));
        assert!(!held.may_release(1, 0, 100));
        // The connection waiting for 5 left; the one for 7 is held.
        wait[0] = 7;
        held.set(0, &wait);
        assert!(!held.may_release(0, 0, 6));
        assert!(held.may_release(0, 0, 7));
        held.set(0, &Wait::default());
        assert!(!held.may_release(0, 0, u64::MAX - 1));
        // A worker not counted is always woken.
        assert!(held.may_release(9, 0, 0));
    }
}
