//! The writes a full copy coming in must not replace: while a server with
//! targets receives a full copy (its catch-up pull from each target, from
//! its start, and any peer's target link opening with its copy), the keys
//! written here by
//! anything but a copy are recorded, and a copy's `ms`/`md` for a
//! recorded key is skipped. A copy sends each key's state as the sender
//! read it, possibly before this server's newer write of that key reached
//! it; CAS cannot tell which is newer (`E<cas>` carries the other server's
//! counter), the record can.
//!
//! ```text
//!   recording while: a catch-up pull is not synced (from the start), or a copy is coming in
//!   write (client; a peer's stream)  ── stripe(key) shared ── apply ── changed? record key ── release
//!   copy item (ms/md in copy mode)   ── stripe(key) exclusive ── recorded? skip : apply ── release
//!   flush_all                        ── every stripe shared ── apply ── record "every key"
//! ```
//!
//! The rule, which writes a copy may replace and which it may not:
//!
//! - never replaced: any client write that changed the key (set, add,
//!   replace, append, prepend, cas, ms, delete, md, incr, decr, ma, touch,
//!   gat, mg with `T` or `N`; flush_all as a write of every key), and any
//!   write a peer's *stream* applies (a neighbour's batches of its clients'
//!   writes, the other ring neighbour's included, and those interleaved in
//!   a copy): all are writes made after the state the copy carries was
//!   read, or concurrent with it. The record is of the write, not of the
//!   item: a recorded key that expires, is evicted or deleted stays
//!   recorded, so the copy does not bring back its older state;
//! - replaced as they arrive: what other copies applied. A copy item is a
//!   state, not a write; two copies of a key (the target's follow copy and
//!   a neighbour's link copy) end with the one applied last;
//! - not a write: a command that changed nothing (a miss, a failed add,
//!   replace, append, prepend, cas or counter): it is neither recorded
//!   nor queued for replication (its key's state here may be the
//!   incomplete one of a server still catching up: queued, an `md` would
//!   delete the target's copy), and the copy's state, the only one, comes.
//!
//! A copy item and a write of the same key never interleave: the write
//! holds its key's stripe shared from before it applies until it is
//! recorded, the copy item holds it exclusively from the check to the end
//! of its apply. Writes do not wait for each other; a write and a copy
//! item of one stripe wait for the other's end, and nothing that holds a
//! stripe waits for anything else (a write takes one stripe, a flush_all
//! every stripe in order, a copy item one, each after the record's lock),
//! so no wait is circular.
//!
//! Bounded: the record is a Bloom filter of `RECORD_BITS` bits (4 MiB)
//! with `PROBES` probes, allocated when recording starts and freed when it
//! stops, whatever the size of the cache or the number of writes. A false
//! positive only skips a copy item for a key nothing wrote (the key stays
//! on the sender, this server misses it); it never lets an older state
//! through. With n keys written during one recording the chance is
//! (1 - e^(-4n/2^25))^4: 2e-8 at 100,000, 2e-4 at a million.
//!
//! Off the fast path: with nothing coming in, a write costs one relaxed
//! load (`recording`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use osmium_store::index::hash_key;

/// Bits of the record (a power of two).
const RECORD_BITS: usize = 1 << 25;
const RECORD_WORDS: usize = RECORD_BITS / 64;
/// Bits set per recorded key.
const PROBES: u64 = 4;
/// Locks that order copy items against writes of the same keys.
const STRIPES: usize = 64;

/// The keys written since recording started.
struct Record {
    bits: Box<[AtomicU64]>,
    /// A flush_all was recorded: every key counts as written.
    every_key: AtomicBool,
}

impl Record {
    fn new() -> Record {
        Record {
            bits: (0..RECORD_WORDS).map(|_| AtomicU64::new(0)).collect(),
            every_key: AtomicBool::new(false),
        }
    }

    /// The record's bits for a key hash.
    fn probes(hash: u64) -> impl Iterator<Item = usize> {
        let step = hash.rotate_left(32) | 1;
        (0..PROBES)
            .map(move |i| (hash.wrapping_add(i.wrapping_mul(step)) as usize) & (RECORD_BITS - 1))
    }

    fn record(&self, hash: u64) {
        for bit in Self::probes(hash) {
            self.bits[bit / 64].fetch_or(1 << (bit % 64), Relaxed);
        }
    }

    fn holds(&self, hash: u64) -> bool {
        self.every_key.load(Relaxed)
            || Self::probes(hash)
                .all(|bit| self.bits[bit / 64].load(Relaxed) & (1 << (bit % 64)) != 0)
    }
}

/// Why it records.
#[derive(Default)]
struct Reasons {
    /// A catch-up pull has not delivered its whole copy yet.
    pulls_pending: bool,
    /// Copies coming in on peer connections.
    copies_open: usize,
}

pub(crate) struct FreshWrites {
    /// Writes are recorded (one relaxed load per write).
    recording: AtomicBool,
    record: RwLock<Option<Record>>,
    stripes: [RwLock<()>; STRIPES],
    reasons: Mutex<Reasons>,
    /// Copy items skipped for a recorded key (`replica_copy_skipped`).
    skipped: AtomicU64,
}

/// A write that holds its key's stripe until dropped (once the write
/// applied and, if it changed the key, was recorded).
pub(crate) struct WriteTicket<'a> {
    record: RwLockReadGuard<'a, Option<Record>>,
    _stripe: RwLockReadGuard<'a, ()>,
    hash: u64,
}

impl WriteTicket<'_> {
    fn record(&self) {
        if let Some(r) = &*self.record {
            r.record(self.hash);
        }
    }
}

/// A write of every key (flush_all): holds every stripe until it is
/// dropped.
pub(crate) struct FlushTicket<'a> {
    record: RwLockReadGuard<'a, Option<Record>>,
    /// (On the heap: the gate of every write stays small.)
    _stripes: Vec<RwLockReadGuard<'a, ()>>,
}

impl FlushTicket<'_> {
    /// Records every key (a flush_all, after it applied).
    pub(crate) fn record_every_key(&self) {
        if let Some(r) = &*self.record {
            r.every_key.store(true, Relaxed);
        }
    }
}

/// A copy item allowed to apply: holds its key's stripe exclusively
/// until dropped.
pub(crate) struct CopyTicket<'a> {
    _record: RwLockReadGuard<'a, Option<Record>>,
    _stripe: RwLockWriteGuard<'a, ()>,
}

/// What a write about to apply holds, or does instead; kept until it has
/// applied.
pub(crate) enum WriteGate<'a> {
    /// Nothing is recorded: apply it.
    Open,
    /// A write of one key (`WriteGate::wrote` once it changed it).
    Write(WriteTicket<'a>),
    /// A flush_all (`WriteGate::record_every_key` once it applied).
    Flush(FlushTicket<'a>),
    /// A copy item to apply.
    Copy { _held: CopyTicket<'a> },
    /// A copy item for a key a write was recorded for: not applied (it is
    /// answered as if it had been).
    Skip,
}

impl WriteGate<'_> {
    #[inline]
    pub(crate) fn skips(&self) -> bool {
        matches!(self, WriteGate::Skip)
    }

    /// The write of one key changed it: records the key. (A write that
    /// changed nothing, a miss or a failed condition, is not recorded: the
    /// copy's state is then the newer.)
    pub(crate) fn wrote(&self) {
        if let WriteGate::Write(t) = self {
            t.record();
        }
    }

    /// Records every key (a flush_all that applied).
    pub(crate) fn record_every_key(&self) {
        if let WriteGate::Flush(t) = self {
            t.record_every_key();
        }
    }
}

fn stripe_of(hash: u64) -> usize {
    (hash >> 58) as usize % STRIPES
}

impl FreshWrites {
    /// Recording from the start when a catch-up pull is to come.
    pub(crate) fn new(pulls_pending: bool) -> FreshWrites {
        FreshWrites {
            recording: AtomicBool::new(pulls_pending),
            record: RwLock::new(pulls_pending.then(Record::new)),
            stripes: std::array::from_fn(|_| RwLock::new(())),
            reasons: Mutex::new(Reasons {
                pulls_pending,
                copies_open: 0,
            }),
            skipped: AtomicU64::new(0),
        }
    }

    /// Whether writes are recorded now.
    #[inline]
    pub(crate) fn recording(&self) -> bool {
        self.recording.load(Relaxed)
    }

    fn record_lock(&self) -> RwLockReadGuard<'_, Option<Record>> {
        self.record.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A write of `key` is about to apply, or, when `copy`, a copy's item
    /// for it.
    pub(crate) fn gate(&self, key: &[u8], copy: bool) -> WriteGate<'_> {
        if copy {
            return self.copy_item(key);
        }
        self.write(key).map_or(WriteGate::Open, WriteGate::Write)
    }

    /// A flush_all is about to apply.
    pub(crate) fn gate_flush(&self) -> WriteGate<'_> {
        self.write_every_key()
            .map_or(WriteGate::Open, WriteGate::Flush)
    }

    fn write(&self, key: &[u8]) -> Option<WriteTicket<'_>> {
        if !self.recording() {
            return None;
        }
        let record = self.record_lock();
        record.as_ref()?;
        let hash = hash_key(key);
        let stripe = self.stripes[stripe_of(hash)]
            .read()
            .unwrap_or_else(|e| e.into_inner());
        Some(WriteTicket {
            record,
            _stripe: stripe,
            hash,
        })
    }

    fn write_every_key(&self) -> Option<FlushTicket<'_>> {
        if !self.recording() {
            return None;
        }
        let record = self.record_lock();
        record.as_ref()?;
        let stripes = self
            .stripes
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()))
            .collect();
        Some(FlushTicket {
            record,
            _stripes: stripes,
        })
    }

    fn copy_item(&self, key: &[u8]) -> WriteGate<'_> {
        if !self.recording() {
            return WriteGate::Open;
        }
        let record = self.record_lock();
        let Some(r) = record.as_ref() else {
            return WriteGate::Open;
        };
        let hash = hash_key(key);
        let stripe = self.stripes[stripe_of(hash)]
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if r.holds(hash) {
            self.skipped.fetch_add(1, Relaxed);
            return WriteGate::Skip;
        }
        WriteGate::Copy {
            _held: CopyTicket {
                _record: record,
                _stripe: stripe,
            },
        }
    }

    /// Copy items skipped so far.
    pub(crate) fn skipped(&self) -> u64 {
        self.skipped.load(Relaxed)
    }

    /// Every catch-up pull delivered its copy (or not).
    pub(crate) fn set_pulls_pending(&self, pending: bool) {
        self.change(|r| r.pulls_pending = pending);
    }

    /// A copy started coming in on a peer connection.
    pub(crate) fn copy_opened(&self) {
        self.change(|r| r.copies_open += 1);
    }

    /// A copy that came in ended (delivered whole, or its connection
    /// closed).
    pub(crate) fn copy_closed(&self) {
        self.change(|r| r.copies_open = r.copies_open.saturating_sub(1));
    }

    /// Applies a change of the reasons; starts or stops recording.
    fn change(&self, f: impl FnOnce(&mut Reasons)) {
        let mut reasons = self.reasons.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut reasons);
        let wanted = reasons.pulls_pending || reasons.copies_open > 0;
        if wanted == self.recording() {
            return;
        }
        let mut record = self.record.write().unwrap_or_else(|e| e.into_inner());
        if wanted {
            *record = Some(Record::new());
            self.recording.store(true, Relaxed);
        } else {
            self.recording.store(false, Relaxed);
            *record = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applies(f: &FreshWrites, key: &[u8]) -> bool {
        !f.gate(key, true).skips()
    }

    #[test]
    fn a_copy_skips_the_keys_written_while_it_comes_in() {
        let f = FreshWrites::new(false);
        assert!(!f.recording());
        assert!(f.write(b"early").is_none());
        f.copy_opened();
        assert!(f.recording());
        f.gate(b"k1", false).wrote();
        f.gate(b"k2", false).wrote();
        // A write that changed nothing is not recorded.
        drop(f.gate(b"missed", false));
        assert!(!applies(&f, b"k1") && !applies(&f, b"k2"));
        assert!(applies(&f, b"early") && applies(&f, b"other") && applies(&f, b"missed"));
        assert_eq!(f.skipped(), 2);
        f.copy_closed();
        assert!(!f.recording());
        // A new recording starts empty.
        f.copy_opened();
        assert!(applies(&f, b"k1"));
    }

    #[test]
    fn flush_all_counts_as_a_write_of_every_key() {
        let f = FreshWrites::new(true);
        assert!(applies(&f, b"x"));
        f.gate_flush().record_every_key();
        assert!(!applies(&f, b"x") && !applies(&f, b"y"));
    }

    #[test]
    fn recording_lasts_while_a_pull_or_a_copy_is_open() {
        let f = FreshWrites::new(true);
        f.copy_opened();
        f.set_pulls_pending(false);
        assert!(f.recording());
        f.copy_closed();
        assert!(!f.recording());
        // Closed more often than opened (a connection closing after its
        // copy ended) leaves it off.
        f.copy_closed();
        assert!(!f.recording());
    }

    #[test]
    fn a_copy_item_waits_for_a_write_of_its_stripe() {
        let f = std::sync::Arc::new(FreshWrites::new(true));
        let gate = f.gate(b"raced", false);
        let f2 = f.clone();
        let copy = std::thread::spawn(move || applies(&f2, b"raced"));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !copy.is_finished(),
            "the copy item did not wait for the write"
        );
        gate.wrote();
        drop(gate);
        assert!(!copy.join().unwrap(), "the copy item replaced the write");
    }

    #[test]
    fn distinct_keys_are_rarely_mistaken() {
        let f = FreshWrites::new(true);
        for i in 0..100_000u32 {
            f.gate(format!("written{i}").as_bytes(), false).wrote();
        }
        let mistaken = (0..100_000u32)
            .filter(|i| !applies(&f, format!("other{i}").as_bytes()))
            .count();
        assert!(mistaken <= 1, "{mistaken} false positives");
    }
}
