//! A link's dirty queue: the keys written since its sender last looked
//! (and flush_all markers), in order, as bytes in one reused buffer, with
//! a sequence number per record, so that a sync-mode write knows which
//! acknowledgement covers it.
//!
//! ```text
//!   record := len:u8 key[len]          (1 <= len <= 250)
//!           | 0u8 delay:i64le          (flush_all [delay])
//! ```
//!
//! Workers append under the mutex (no allocation once the buffer has
//! grown); the sender swaps the whole buffer out for its own empty one.
//! A push does not wake a sleeping sender: the worker wakes it once its
//! turn is over (`wake_sender`), so a batch holds a turn's writes, not
//! the first key of a pipelined run (in sync mode every batch costs a
//! round trip: its `mn`, the MN, the workers woken). While the link is
//! closed nothing is queued: the full copy made when it opens covers
//! every write before it.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Bytes of queued records past which the queue is dropped and the link
/// resynchronized with a full copy instead.
const OVERFLOW: usize = 64 << 20;

/// A record tag that is not a key length.
pub(crate) const FLUSH_TAG: u8 = 0;

struct Inner {
    buf: Vec<u8>,
    /// Records queued ever (the last one's sequence number).
    seq: u64,
    /// Records in `buf`.
    queued: u64,
    /// Queueing on (the link is up).
    open: bool,
    /// The buffer outgrew `OVERFLOW` and was dropped.
    overflowed: bool,
    /// The sender sleeps on `cond`.
    sleeping: bool,
}

pub(crate) struct DirtyQueue {
    inner: Mutex<Inner>,
    cond: Condvar,
}

/// What [`DirtyQueue::take`] handed over.
pub(crate) struct Taken {
    /// The sequence number of the last record taken.
    pub seq: u64,
    pub records: u64,
    /// Records were dropped (overflow): a full copy is due.
    pub resync: bool,
}

impl Default for DirtyQueue {
    fn default() -> Self {
        DirtyQueue {
            inner: Mutex::new(Inner {
                buf: Vec::new(),
                seq: 0,
                queued: 0,
                open: false,
                overflowed: false,
                sleeping: false,
            }),
            cond: Condvar::new(),
        }
    }
}

impl DirtyQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a key; its sequence number, or None while the link is
    /// closed.
    #[inline]
    pub(crate) fn push_key(&self, key: &[u8]) -> Option<u64> {
        debug_assert!(!key.is_empty() && key.len() <= 255);
        self.push(|buf| {
            buf.push(key.len() as u8);
            buf.extend_from_slice(key);
        })
    }

    /// Queues a flush_all marker.
    pub(crate) fn push_flush(&self, delay: i64) -> Option<u64> {
        self.push(|buf| {
            buf.push(FLUSH_TAG);
            buf.extend_from_slice(&delay.to_le_bytes());
        })
    }

    #[inline]
    fn push(&self, write: impl FnOnce(&mut Vec<u8>)) -> Option<u64> {
        let mut q = self.lock();
        if !q.open {
            return None;
        }
        if q.buf.len() > OVERFLOW {
            q.buf.clear();
            q.overflowed = true;
        }
        write(&mut q.buf);
        q.seq += 1;
        q.queued += 1;
        Some(q.seq)
    }

    /// Wakes a sender sleeping in `take` if records wait (after a
    /// worker's turn queued some).
    pub(crate) fn wake_sender(&self) {
        let mut q = self.lock();
        if q.sleeping && (q.queued > 0 || q.overflowed) {
            q.sleeping = false;
            self.cond.notify_one();
        }
    }

    /// Opens the queue (the link is up), dropping what it held: the full
    /// copy that follows covers it. Returns the current sequence number.
    pub(crate) fn open(&self) -> u64 {
        let mut q = self.lock();
        q.open = true;
        q.buf.clear();
        q.queued = 0;
        q.overflowed = false;
        q.seq
    }

    /// Closes the queue (the link is down) and empties it.
    pub(crate) fn close(&self) {
        let mut q = self.lock();
        q.open = false;
        q.buf.clear();
        q.queued = 0;
        q.overflowed = false;
    }

    /// Swaps the queued records into `into` (cleared first), waiting up
    /// to `wait` for one.
    pub(crate) fn take(&self, into: &mut Vec<u8>, wait: Duration) -> Taken {
        into.clear();
        let mut q = self.lock();
        if q.queued == 0 && !q.overflowed && !wait.is_zero() {
            q.sleeping = true;
            q = self
                .cond
                .wait_timeout(q, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            q.sleeping = false;
        }
        std::mem::swap(&mut q.buf, into);
        let taken = Taken {
            seq: q.seq,
            records: q.queued,
            resync: std::mem::take(&mut q.overflowed),
        };
        q.queued = 0;
        taken
    }

    /// Like [`DirtyQueue::take`], without waiting.
    pub(crate) fn take_now(&self, into: &mut Vec<u8>) -> Taken {
        self.take(into, Duration::ZERO)
    }

    /// Wakes a sender waiting in `take`.
    pub(crate) fn poke(&self) {
        let mut q = self.lock();
        q.sleeping = false;
        self.cond.notify_one();
    }

    /// Records waiting (`replica_N_backlog`) and the last sequence number.
    pub(crate) fn backlog(&self) -> (u64, u64) {
        let q = self.lock();
        (q.queued, q.seq)
    }
}

/// The records of a taken buffer, in order.
pub(crate) fn records(buf: &[u8]) -> impl Iterator<Item = Record<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let tag = *buf.get(at)?;
        if tag == FLUSH_TAG {
            let bytes: [u8; 8] = buf.get(at + 1..at + 9)?.try_into().ok()?;
            at += 9;
            Some(Record::Flush(i64::from_le_bytes(bytes)))
        } else {
            let key = buf.get(at + 1..at + 1 + tag as usize)?;
            at += 1 + tag as usize;
            Some(Record::Key(key))
        }
    })
}

/// One queued record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    Key(&'a [u8]),
    Flush(i64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_queue_takes_nothing_and_open_drops_the_old() {
        let q = DirtyQueue::default();
        assert_eq!(q.push_key(b"a"), None);
        assert_eq!(q.open(), 0);
        assert_eq!(q.push_key(b"a"), Some(1));
        assert_eq!(q.push_flush(-3), Some(2));
        assert_eq!(q.push_key(b"bc"), Some(3));
        let mut buf = Vec::new();
        let t = q.take(&mut buf, Duration::ZERO);
        assert_eq!((t.seq, t.records, t.resync), (3, 3, false));
        let got: Vec<_> = records(&buf).collect();
        assert_eq!(
            got,
            vec![Record::Key(b"a"), Record::Flush(-3), Record::Key(b"bc")]
        );
        q.push_key(b"x");
        assert_eq!(q.open(), 4);
        let t = q.take(&mut buf, Duration::ZERO);
        assert_eq!(t.records, 0);
        assert!(buf.is_empty());
        q.close();
        assert_eq!(q.push_key(b"y"), None);
    }

    #[test]
    fn a_sleeping_sender_is_woken_once_keys_wait() {
        let q = std::sync::Arc::new(DirtyQueue::default());
        q.open();
        let q2 = q.clone();
        let t = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let t = q2.take(&mut buf, Duration::from_secs(10));
            (t.records, buf)
        });
        // Once it sleeps: a push queues, the worker's turn end wakes it.
        while !q.lock().sleeping {
            std::thread::yield_now();
        }
        q.push_key(b"k");
        q.wake_sender();
        let (n, buf) = t.join().unwrap();
        assert_eq!(n, 1);
        assert_eq!(buf, b"\x01k");
    }
}
