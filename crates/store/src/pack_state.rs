//! The pack pass's state (`pack`): its counters, kept in the `Store`
//! (`Store::pack_stats`), and its working state from one segment to the
//! next (`Store::pack_work`: the packer, the plan of the segment being
//! packed, the frames made, each size class's last tries, the dictionary
//! trainer's samples). Apart from
//! `pack` so that `store`, which holds them, does not import the pass
//! that runs over the store.

use std::sync::atomic::AtomicU64;

use crate::codec::Packer;

/// The pack pass's counters (see `StoreStats`).
#[derive(Default)]
pub(crate) struct PackStats {
    /// Segments pack-compacted (walked, their cold items packed, freed).
    pub(crate) segments: AtomicU64,
    /// Segments walked whose pack would have freed too little: left as
    /// they were.
    pub(crate) not_worth: AtomicU64,
    /// Items the pass packed.
    pub(crate) items: AtomicU64,
    /// Values tried that did not save enough (copied raw, marked tried).
    pub(crate) rejected: AtomicU64,
    /// Cold values not tried: their size class keeps failing, or they
    /// start like a compressed format.
    pub(crate) skipped: AtomicU64,
    /// The cleaner's CPU time in the pass's plans (packing), µs.
    pub(crate) cpu_micros: AtomicU64,
    /// Packed items the evictor kept because they were hit, written back
    /// raw (their frequency at `evict::UNPACK_FREQ`: hot).
    pub(crate) kept_raw: AtomicU64,
    /// Packed items the evictor kept as they were, packed (hit less often,
    /// or `-o compression=all`).
    pub(crate) kept_packed: AtomicU64,
    /// Packed items GETs found hot, written back raw by the cleaner
    /// (`promote`).
    pub(crate) promoted: AtomicU64,
}

impl PackStats {
    /// Every counter, for `stats reset`.
    pub(crate) fn all(&self) -> [&AtomicU64; 9] {
        [
            &self.segments,
            &self.not_worth,
            &self.items,
            &self.rejected,
            &self.skipped,
            &self.cpu_micros,
            &self.kept_raw,
            &self.kept_packed,
            &self.promoted,
        ]
    }
}

/// Tries remembered per size class.
const HISTORY: u8 = 8;

/// A class whose last `HISTORY` tries all failed is tried for one item in
/// this many.
const SAMPLE: u8 = 16;

pub(crate) use crate::dict::{class_of, CLASSES};

/// How the plan copies an item.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// As it is: hot, small, packed or tried already, or not tried.
    Same,
    /// Packed: its frame is in the frames buffer.
    Packed,
    /// Raw, marked tried.
    RawTried,
}

/// One live item of the victim, as the plan found it.
#[derive(Clone, Copy)]
pub(crate) struct Planned {
    pub(crate) offset: u32,
    pub(crate) frame_at: u32,
    pub(crate) frame_len: u32,
    /// The packed frame's codec byte (its dictionary).
    pub(crate) codec: u8,
    pub(crate) how: How,
    pub(crate) hash: u64,
}

/// The last tries of one size class.
#[derive(Clone, Copy, Default)]
pub(crate) struct ClassHistory {
    /// One bit per try, the latest lowest: 1 = it did not pack.
    failures: u8,
    /// Tries remembered (at most `HISTORY`).
    tries: u8,
    /// Items passed over while the class keeps failing.
    skipped: u8,
}

impl ClassHistory {
    /// Whether to pass a value of this class over untried.
    pub(crate) fn skip(&mut self) -> bool {
        if self.tries < HISTORY || self.failures != u8::MAX {
            return false;
        }
        self.skipped = self.skipped.wrapping_add(1);
        !self.skipped.is_multiple_of(SAMPLE)
    }

    pub(crate) fn record(&mut self, failed: bool) {
        self.failures = (self.failures << 1) | u8::from(failed);
        self.tries = (self.tries + 1).min(HISTORY);
    }
}

/// The pass's working state, kept from one segment to the next (the
/// cleaner is its only user).
#[derive(Default)]
pub(crate) struct PackWork {
    pub(crate) packer: Option<Packer>,
    pub(crate) plan: Vec<Planned>,
    pub(crate) frames: Vec<u8>,
    pub(crate) classes: [ClassHistory; CLASSES],
    /// Dictionaries trained from the values the pass tries (`dict::train`).
    pub(crate) trainer: crate::train::Trainer,
    /// By queue (small, main): the number of activations before which
    /// the pass leaves the queue alone (see `PAUSE_SEGMENTS`).
    pub(crate) resume_at: [u64; 2],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_are_powers_of_two_from_64_bytes() {
        assert_eq!(class_of(64), 0);
        assert_eq!(class_of(127), 0);
        assert_eq!(class_of(128), 1);
        assert_eq!(class_of(5000), 6);
        assert_eq!(class_of(1 << 30), CLASSES - 1);
        assert_eq!(class_of(usize::MAX), CLASSES - 1);
    }

    #[test]
    fn a_class_that_keeps_failing_is_sampled_one_in_16() {
        let mut c = ClassHistory::default();
        for _ in 0..HISTORY - 1 {
            c.record(true);
            assert!(!c.skip(), "too few tries to judge");
        }
        c.record(true);
        let tried = (0..160).filter(|_| !c.skip()).count();
        assert_eq!(tried, 10);
        // One success ends the streak.
        c.record(false);
        assert!(!c.skip());
        // A mixed class is always tried.
        let mut m = ClassHistory::default();
        for i in 0..100 {
            m.record(i % 4 == 0);
            assert!(!m.skip());
        }
    }
}
