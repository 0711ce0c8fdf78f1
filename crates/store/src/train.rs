//! Training dictionaries from the cache's own values, in the pack pass
//! (the background cleaner, never a request): per size class of values
//! from 64 B to 4 KiB (`DICT_CLASSES`), the cold values the pass tries are
//! sampled; once a class has enough, a dictionary is trained from 7/8 of
//! them (`zstd::dict::from_continuous`, zstd's fastCover), and installed
//! as the class's current dictionary (`DictTable::install`) only if it
//! packs the held-out 1/8 at least 10 % smaller than plain zstd does.
//!
//! Why size classes and not key prefixes: the pass keeps its statistics
//! per size class already, a value's class costs nothing to find, and
//! keys follow no convention the server could rely on; values of one size
//! tend to be one kind of record (a session, a rendered fragment, a JSON
//! object of one schema), which is what a dictionary captures.
//!
//! ```text
//!  class:  no dict ──samples full──▶ train ──beats plain──▶ current
//!            ▲                         │ does not                │ ratio on packed values
//!            └── after 64 MiB << n ────┘                         │ 25 % worse than at training
//!                 more of the class                               ▼
//!                                          train again (new slot) ◀── sampling
//! ```
//!
//! CPU: one training of 512 KiB of samples (fastCover, 16 KiB dictionary)
//! takes tens of milliseconds. The first training of each class runs as
//! soon as its samples are in; every later one waits until the pass has
//! spent `BUDGET` times the CPU of the trainings so far on packing, so
//! retraining takes at most 1/`BUDGET` of the pass's CPU.

use crate::clock::thread_cpu_micros;
use crate::codec::{Packed, Packer};

use crate::dict::{Dict, DictTable, CODEC_PLAIN, DICT_CLASSES, DICT_MAX};

/// Sample bytes per class before a training.
const SAMPLE_BYTES: usize = 512 << 10;
/// Or this many samples.
const SAMPLE_COUNT: usize = 4096;
/// At least this many samples.
const SAMPLE_MIN: usize = 64;
/// The size of a dictionary trained.
const DICT_SIZE: usize = 16 << 10;
/// Retraining takes at most 1/BUDGET of the pass's CPU.
const BUDGET: u64 = 20;
/// Bytes of a class packed with its dictionary between two looks at its
/// ratio.
const WINDOW: u64 = 8 << 20;
/// Bytes of a class seen after a training that did not beat plain zstd
/// before the next (doubled at each failure, up to 64 times).
const BACKOFF: u64 = 64 << 20;

const _: () = assert!(DICT_SIZE <= DICT_MAX);

/// One size class's training state.
#[derive(Default)]
struct Class {
    /// Sampling for a (new) dictionary.
    sampling: bool,
    samples: Vec<u8>,
    sizes: Vec<usize>,
    /// Client bytes seen in this class (tried by the pass).
    seen: u64,
    /// No sampling before `seen` reaches this (after a failure).
    resume_at: u64,
    failures: u32,
    /// Since the last look: bytes packed with the current dictionary, and
    /// the frames they made.
    raw: u64,
    packed: u64,
    /// Frame bytes per 1024 client bytes of the held-out samples at
    /// training (0: not known, e.g. a dictionary loaded at a start).
    baseline: u64,
    /// Whether a dictionary was installed once (a retraining is budgeted).
    trained: bool,
}

/// The trainer's state, kept in the pack pass's working state.
#[derive(Default)]
pub(crate) struct Trainer {
    classes: [Class; DICT_CLASSES],
    /// CPU (µs) of every training so far.
    spent: u64,
}

/// What a training did (for tests and the stats).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Trained {
    /// Installed: its codec byte.
    Installed(u8),
    /// Did not beat plain zstd on the held-out samples.
    NoGain,
    /// zstd could not train one, or no slot was free.
    Failed,
}

impl Trainer {
    /// A cold value of `class` the pass is about to try: counted, and
    /// kept as a sample while the class samples.
    pub(crate) fn sample(&mut self, class: usize, value: &[u8], dicts: &DictTable) {
        let Some(c) = self.classes.get_mut(class) else {
            return;
        };
        c.seen += value.len() as u64;
        if !c.sampling {
            let none = dicts.current_codec(class) == CODEC_PLAIN;
            if !(none && c.seen >= c.resume_at) {
                return;
            }
            c.sampling = true;
        }
        if c.samples.len() < SAMPLE_BYTES && c.sizes.len() < SAMPLE_COUNT {
            c.samples.extend_from_slice(value);
            c.sizes.push(value.len());
        }
    }

    /// A value of `class` was packed with the class's dictionary into a
    /// frame of `frame` bytes: its ratio is watched (see the module
    /// comment).
    pub(crate) fn packed_with_dict(&mut self, class: usize, raw: usize, frame: usize) {
        let Some(c) = self.classes.get_mut(class) else {
            return;
        };
        c.raw += raw as u64;
        c.packed += frame as u64;
        if c.raw < WINDOW {
            return;
        }
        let ratio = c.packed * 1024 / c.raw;
        (c.raw, c.packed) = (0, 0);
        if c.baseline == 0 {
            c.baseline = ratio;
        } else if ratio * 4 > c.baseline * 5 && !c.sampling {
            // Decayed by a quarter: the values changed. Sample again.
            c.sampling = true;
        }
    }

    /// Trains one class whose samples are in, if the CPU budget allows:
    /// `pass_cpu` is the pack pass's CPU so far (µs). None if none was
    /// due.
    pub(crate) fn train_due(
        &mut self,
        dicts: &DictTable,
        level: i32,
        pass_cpu: u64,
    ) -> Option<Trained> {
        let budget_ok = self.spent.saturating_mul(BUDGET) <= pass_cpu;
        let class = (0..DICT_CLASSES).find(|&i| {
            let c = &self.classes[i];
            c.sampling
                && c.sizes.len() >= SAMPLE_MIN
                && (c.samples.len() >= SAMPLE_BYTES || c.sizes.len() >= SAMPLE_COUNT)
                && (!c.trained || budget_ok)
        })?;
        let cpu = thread_cpu_micros();
        let c = &mut self.classes[class];
        let outcome = train(class, &c.samples, &c.sizes, dicts, level);
        c.sampling = false;
        c.samples = Vec::new();
        c.sizes = Vec::new();
        match &outcome {
            (Trained::Installed(_), baseline) => {
                c.trained = true;
                c.failures = 0;
                c.baseline = *baseline;
                (c.raw, c.packed) = (0, 0);
            }
            _ => {
                c.resume_at = c.seen + (BACKOFF << c.failures.min(6));
                c.failures += 1;
            }
        }
        let spent = thread_cpu_micros().saturating_sub(cpu);
        self.spent += spent;
        dicts
            .train_cpu_micros
            .fetch_add(spent, std::sync::atomic::Ordering::Relaxed);
        dicts
            .trainings
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(outcome.0)
    }
}

/// Trains a dictionary for `class` from `samples` (the concatenation of
/// values of the `sizes` given), keeps every 8th value out to judge it,
/// and installs it if it packs them at least 10 % smaller than plain zstd
/// at `level`. With the held-out ratio (frame bytes per 1024).
fn train(
    class: usize,
    samples: &[u8],
    sizes: &[usize],
    dicts: &DictTable,
    level: i32,
) -> (Trained, u64) {
    let (mut train_bytes, mut train_sizes) = (Vec::with_capacity(samples.len()), Vec::new());
    let mut held_out = Vec::new();
    let mut at = 0;
    for (i, &n) in sizes.iter().enumerate() {
        let v = &samples[at..at + n];
        at += n;
        if i % 8 == 7 {
            held_out.push(v);
        } else {
            train_bytes.extend_from_slice(v);
            train_sizes.push(n);
        }
    }
    let size = DICT_SIZE.min(train_bytes.len() / 8).max(1024);
    let Ok(bytes) = zstd::dict::from_continuous(&train_bytes, &train_sizes, size) else {
        return (Trained::Failed, 0);
    };
    let Some(candidate) = Dict::new(1, 0, class as u8, bytes.clone(), level) else {
        return (Trained::Failed, 0);
    };
    let mut packer = Packer::new(level);
    let (mut raw, mut plain, mut with) = (0u64, 0u64, 0u64);
    for v in &held_out {
        raw += v.len() as u64;
        plain += frame_len(packer.pack(v), v.len());
        with += frame_len(packer.pack_with(v, Some(&candidate)), v.len());
    }
    if raw == 0 || with * 10 > plain * 9 {
        return (Trained::NoGain, 0);
    }
    match dicts.install(class as u8, bytes, level) {
        Some(d) => (Trained::Installed(d.codec()), with * 1024 / raw),
        None => (Trained::Failed, 0),
    }
}

/// What a value takes stored: its frame, or itself when it does not pack.
fn frame_len(p: Packed<'_>, raw: usize) -> u64 {
    match p {
        Packed::Frame(f) => f.len() as u64,
        _ => raw as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::tests::record;

    #[test]
    fn the_trainer_installs_a_dictionary_that_beats_plain_zstd_and_not_one_that_does_not() {
        let t = DictTable::new();
        let mut tr = Trainer::default();
        for i in 0..5000 {
            tr.sample(1, &record(150, i), &t);
            if let Some(outcome) = tr.train_due(&t, 1, 0) {
                assert!(matches!(outcome, Trained::Installed(_)), "{outcome:?}");
                break;
            }
        }
        let d = t.current_codec(1);
        assert_ne!(d, CODEC_PLAIN);
        assert_eq!(t.trainings.load(std::sync::atomic::Ordering::Relaxed), 1);
        // Sampling stops once the class has a dictionary.
        for i in 0..5000 {
            tr.sample(1, &record(150, i), &t);
        }
        assert_eq!(tr.train_due(&t, 1, 0), None);
        // Values a dictionary cannot help (noise) are not given one.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut noise = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect()
        };
        let mut outcome = None;
        for _ in 0..5000 {
            tr.sample(3, &noise(600), &t);
            outcome = tr.train_due(&t, 1, u64::MAX);
            if outcome.is_some() {
                break;
            }
        }
        assert!(
            matches!(outcome, Some(Trained::NoGain | Trained::Failed)),
            "{outcome:?}"
        );
        assert_eq!(t.current_codec(3), CODEC_PLAIN);
    }

    #[test]
    fn a_decayed_class_trains_again_within_its_cpu_budget() {
        let t = DictTable::new();
        let mut tr = Trainer::default();
        let mut i = 0;
        while tr.train_due(&t, 1, 0).is_none() {
            tr.sample(0, &record(100, i), &t);
            i += 1;
        }
        let first = t.current_codec(0);
        assert_ne!(first, CODEC_PLAIN);
        // 8 MiB that the dictionary no longer packs at all: decayed.
        for _ in 0..=(8 << 20) / 100 {
            tr.packed_with_dict(0, 100, 100);
        }
        for j in 0..5000 {
            tr.sample(0, &record(100, 1_000_000 + j), &t);
        }
        // No budget yet: the pass has spent no CPU.
        assert_eq!(tr.train_due(&t, 1, 0), None);
        let again = tr.train_due(&t, 1, u64::MAX);
        assert!(matches!(again, Some(Trained::Installed(_))), "{again:?}");
        assert_ne!(t.current_codec(0), first);
        assert!(
            t.knows(first),
            "retired, not removed while the trainer has not collected"
        );
    }
}
