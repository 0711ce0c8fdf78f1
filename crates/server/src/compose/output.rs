//! A connection's output: the replies composed and not yet sent, queued
//! as bytes in a write buffer (lent by the worker's pool while there are
//! any) and values referenced where they lie in item memory. The output
//! never writes: the transport takes the queue ([`Sink`]).
//!
//! ```text
//!   buf  [....sent....|VALUE a 0 131072\r\n|\r\nVALUE b 0 131072\r\n|\r\nEND\r\n]
//!                     sent               ^ at 0                     ^ at 1      len
//!   refs [a's value in item memory] [b's value in item memory]
//!   the queue: buf[sent..at0], a, buf[at0..at1], b, buf[at1..]
//! ```
//!
//! Reply encoders append to [`Output::buf`]. A value of `DIRECT_MIN` bytes
//! or more ([`Output::put_value`]) is not copied: it is recorded where it
//! goes in the buffer, and the thread keeps its epoch pin
//! (`osmium_store::epoch::keep`) so the value's memory is not rewritten
//! until the transport has sent it. That needs a stream and pending output
//! that starts at the front of the buffer, and an item read without a
//! shard lock.
//!
//! While a connection runs plain GETs, values accumulate (are *gathered*)
//! until `GATHER_VALUES` of them or `GATHER_BYTES` wait ([`Output::due`]),
//! and leave in one write, as memcached sends a batch of replies in one
//! `sendmsg`; a value queued by any other request is due at once. The
//! session hands the queue to the transport after a request that made it
//! due (only its whole batches then leave, [`Output::sendable`]: the rest
//! stays gathered, so batches run across requests), before any request
//! that is not a plain GET (which may take locks or wait for readers, so
//! it must run unpinned), and when it stops running requests: values are
//! referenced only during a session's run.
//!
//! The transport sends what the connection takes ([`Output::pieces`]) and
//! reports it ([`Output::sent_queue`]): only what it did not take of the
//! values is then copied into the buffer, in order, and the pin goes. A
//! write of values that left part of the queue behind marks the socket
//! full ([`Output::socket_full`]): the session runs no further request
//! until the output drains, so pipelined large GETs are not copied one
//! after another into the buffer while the client catches up. Plain
//! stream sockets send the queue with one `writev` a batch
//! (`transport::stream`); TLS feeds the same pieces to rustls
//! (`transport::tls`), which copies them once, into records.
//!
//! Invariants: the queue is sent in order; replies before `committed`
//! (a flush point) are never dropped by a failing get; truncating a reply
//! drops the values queued in it; the buffer goes back to the pool once
//! everything left, and a large buffer shrinks once most of it was sent.
//!
//! Over UDP every memcached response is sent as its own datagrams, so a
//! datagram endpoint's output never references values and records where
//! each response starts (`marks`, see `udp_marks`).

use std::io::{self, IoSlice};

use crate::buffers::{BufferPool, NoBuffer};
use crate::compose::udp_marks::ResponseMark;
use crate::stats::counters::ThreadStats;

/// Values at least this long are sent from item memory.
pub(crate) const DIRECT_MIN: usize = 32 * 1024;

/// Most values one write gathers.
pub(crate) const GATHER_VALUES: usize = 32;

/// Pieces one write of the queue may have: every gathered value between
/// two slices of the buffer.
pub(crate) const GATHER_PIECES: usize = 2 * GATHER_VALUES + 1;

/// Gathered values are written once they add up to this many bytes.
const GATHER_BYTES: usize = 1 << 20;

/// A value to be sent from item memory, inserted at `at` in the buffer;
/// its trailer ends at `end`.
struct ValueRef {
    at: usize,
    end: usize,
    ptr: *const u8,
    len: usize,
}

/// Stop running more requests while this much output waits to be sent.
pub(crate) const WRITE_HIGH_WATER: usize = 256 * 1024;

/// A write buffer whose unsent part is under a quarter of its capacity is
/// compacted down once it is this large: a slow reader keeps no more
/// memory than its unsent replies need.
const SHRINK_OVER: usize = 64 * 1024;

/// A transport that takes an output's queue.
pub(crate) trait Sink {
    /// Sends as much of `out`'s queue as the connection takes now, then
    /// reports it with [`Output::sent_queue`] (or [`Output::sent`]), so no
    /// value stays referenced. Ok(true) when everything left.
    fn send(&mut self, out: &mut Output, stats: &ThreadStats) -> io::Result<bool>;
}

pub(crate) struct Output {
    buf: Vec<u8>,
    /// Capacity `buf` had when taken from the pool (what the pool counts).
    lent: usize,
    sent: usize,
    /// Bytes left during this run with values: positions kept in the
    /// buffer are no longer valid.
    pub wrote_directly: bool,
    /// UDP: where each memcached response starts in `buf`.
    pub marks: Vec<ResponseMark>,
    /// The storage verdict noreply kept from the client, for `-vv`'s
    /// `>FD NOREPLY STORED` (memcached logs what it did not send).
    pub unsent_verdict: Option<&'static str>,
    /// A datagram endpoint's output (owns its buffer, never pooled, never
    /// references values).
    datagram: bool,
    /// Counts the times bytes left: offsets into the buffer kept across a
    /// change of it are stale.
    epoch: u64,
    /// Replies before this offset are committed: memcached has written them
    /// (at a flush point such as `mn`), so a failing get cannot drop them.
    committed: usize,
    /// Most bytes the buffer held since it was taken from the pool, and
    /// that figure for the buffer given back last: the next one taken is a
    /// large one when the last replies needed it.
    peak: usize,
    wanted: usize,
    /// A write of values left part of the queue behind: the socket is
    /// full, and until the output drains the next request waits (its large
    /// value can then leave from item memory too, instead of being copied
    /// here).
    socket_full: bool,
    /// Whether values are gathered (the session runs plain GETs) rather
    /// than due as soon as queued.
    gathering: bool,
    /// The queue's values, in buffer order.
    refs: Vec<ValueRef>,
    ref_bytes: usize,
    /// The queue is to be sent before the next request runs.
    due: bool,
    /// The transport is to send the queue's whole batches only.
    batches_only: bool,
    /// Keeps the thread pinned while values are referenced: their memory
    /// is not rewritten before the transport sent (or copied) them.
    pin: Option<osmium_store::epoch::Kept>,
    /// The meta hit encoder met a packed value that does not decode and
    /// left its reply out (see [`Output::take_corrupt`]).
    corrupt: bool,
}

impl Output {
    /// The output of a stream connection.
    pub(crate) fn stream() -> Output {
        Output {
            buf: Vec::new(),
            lent: 0,
            sent: 0,
            wrote_directly: false,
            marks: Vec::new(),
            unsent_verdict: None,
            datagram: false,
            epoch: 0,
            committed: 0,
            peak: 0,
            wanted: 0,
            socket_full: false,
            gathering: false,
            refs: Vec::new(),
            ref_bytes: 0,
            due: false,
            batches_only: false,
            pin: None,
            corrupt: false,
        }
    }

    /// The output of a datagram endpoint: values copied, response marks.
    pub(crate) fn datagram() -> Output {
        Output {
            datagram: true,
            ..Output::stream()
        }
    }

    /// Makes sure a write buffer is held (a stream takes one from the pool
    /// before running requests).
    #[inline]
    pub(crate) fn acquire(&mut self, pool: &BufferPool) -> Result<(), NoBuffer> {
        if self.buf.capacity() == 0 && !self.datagram {
            self.buf = pool.take_write(self.wanted)?;
            self.lent = self.buf.capacity();
        }
        Ok(())
    }

    /// Gives the write buffer back once everything was sent.
    #[inline]
    pub(crate) fn release_if_empty(&mut self, pool: &BufferPool) {
        if self.sent == self.buf.len() && self.buf.capacity() != 0 && !self.datagram {
            self.wanted = std::mem::take(&mut self.peak).max(self.buf.len());
            self.sent = 0;
            pool.give_write(std::mem::take(&mut self.buf), self.lent);
            self.lent = 0;
        }
    }

    /// Gives the write buffer back, dropping unsent output.
    pub(crate) fn release(&mut self, pool: &BufferPool) {
        self.discard_refs();
        self.sent = self.buf.len();
        self.release_if_empty(pool);
    }

    /// Notes that the meta hit just taken back had a packed value that
    /// does not decode: the executor answers a miss instead
    /// (`take_corrupt`).
    #[cold]
    pub(crate) fn note_corrupt(&mut self) {
        self.corrupt = true;
    }

    /// Whether the last meta hit was taken back (`note_corrupt`), and
    /// forgets it.
    #[inline]
    pub(crate) fn take_corrupt(&mut self) -> bool {
        // A load on every meta hit; a store only after a corrupt one.
        if self.corrupt {
            self.corrupt = false;
            return true;
        }
        false
    }

    /// The buffer reply encoders append to.
    #[inline]
    pub(crate) fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Everything composed so far, sent or not, without the referenced
    /// values (positions are offsets in this).
    #[inline]
    pub(crate) fn composed(&self) -> &[u8] {
        &self.buf
    }

    /// Bytes composed (offsets for `truncate`).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Drops what was composed from `at` on (a reply replaced by an
    /// error), the values queued in it too.
    #[inline]
    pub(crate) fn truncate(&mut self, at: usize) {
        let at = at.max(self.sent);
        self.buf.truncate(at);
        while self.refs.last().is_some_and(|g| g.at > at) {
            if let Some(g) = self.refs.pop() {
                self.ref_bytes -= g.len;
            }
        }
        if self.refs.is_empty() {
            self.pin = None;
            self.due = false;
        }
    }

    /// The buffer's unsent bytes: all of the queue when no value is
    /// referenced (always so outside a session's run).
    #[inline]
    pub(crate) fn pending(&self) -> &[u8] {
        debug_assert!(self.refs.is_empty());
        &self.buf[self.sent..]
    }

    /// Bytes of the buffer waiting to be sent.
    #[inline]
    pub(crate) fn queued(&self) -> usize {
        self.buf.len() - self.sent
    }

    /// Bytes of the whole queue: the buffer's and the values'.
    #[inline]
    pub(crate) fn queued_with_values(&self) -> usize {
        self.queued() + self.ref_bytes
    }

    /// Whether this is a datagram endpoint's output.
    #[inline]
    pub(crate) fn is_datagram(&self) -> bool {
        self.datagram
    }

    /// Marks the replies so far as written by memcached (a flush point).
    #[inline]
    pub(crate) fn commit(&mut self) {
        self.committed = self.buf.len();
    }

    /// Drops the replies not yet committed: memcached's
    /// `conn_release_items` after a get with a key over 250 bytes releases
    /// every response it has not written.
    pub(crate) fn release_uncommitted(&mut self) {
        let at = self.committed.min(self.buf.len());
        self.truncate(at);
    }

    /// Changes whenever bytes leave (offsets taken before are stale).
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Memory the output's buffer holds (its sent part is freed only once
    /// all of it left or the buffer is compacted).
    #[inline]
    pub(crate) fn footprint(&self) -> usize {
        self.buf.capacity()
    }

    /// Records that `n` bytes of `pending` were sent.
    #[inline]
    pub(crate) fn sent(&mut self, n: usize) {
        self.epoch += 1;
        self.sent += n;
        if self.sent == self.buf.len() {
            self.socket_full = false;
            self.peak = self.peak.max(self.buf.len());
            self.buf.clear();
            self.sent = 0;
            self.committed = 0;
            if self.buf.capacity() > crate::buffers::LARGE_KEEP_MAX {
                // Larger than the pool keeps: give its memory back now.
                self.buf.shrink_to(crate::buffers::READ_CHUNK);
            }
        } else if self.buf.capacity() > SHRINK_OVER && self.queued() < self.buf.capacity() / 4 {
            self.peak = self.peak.max(self.buf.len());
            self.buf.drain(..self.sent);
            self.committed = self.committed.saturating_sub(self.sent);
            self.sent = 0;
            self.buf
                .shrink_to(self.buf.len().max(crate::buffers::READ_CHUNK));
        }
    }

    /// Drops `n` bytes from the front of the buffer (a datagram endpoint
    /// forgetting sent responses) and moves the marks with them.
    pub(crate) fn drain_front(&mut self, n: usize) {
        self.buf.drain(..n);
        self.committed = self.committed.saturating_sub(n);
        self.sent = self.sent.saturating_sub(n);
        for m in &mut self.marks {
            m.start -= n;
        }
    }

    /// Drops everything (a datagram endpoint starting over).
    pub(crate) fn clear(&mut self) {
        self.discard_refs();
        self.socket_full = false;
        self.buf.clear();
        self.sent = 0;
        self.committed = 0;
        self.marks.clear();
    }

    /// Whether a write of values found the socket full and the output has
    /// not drained since.
    #[inline]
    pub(crate) fn socket_full(&self) -> bool {
        self.socket_full
    }

    /// Whether a value of `len` bytes would be referenced rather than
    /// copied: a stream whose pending output starts at the front of its
    /// buffer, a large value, and an item held without a shard lock
    /// (`lock_free`), which is what the epoch pin protects.
    #[inline]
    pub(crate) fn direct_takes(&self, len: usize, lock_free: bool) -> bool {
        !self.datagram && self.sent == 0 && len >= DIRECT_MIN && lock_free
    }

    /// Allows (true) or ends gathering values (see the module comment);
    /// the session allows it only around plain GETs, whose lookups take no
    /// lock.
    #[inline]
    pub(crate) fn gather_values(&mut self, on: bool) {
        self.gathering = on && !self.datagram;
    }

    /// Whether values are referenced (the thread keeps its pin): the
    /// transport must send the queue, not just `pending`.
    #[inline]
    pub(crate) fn has_refs(&self) -> bool {
        !self.refs.is_empty()
    }

    /// Whether the queue is to be sent before the next request runs.
    #[inline]
    pub(crate) fn due(&self) -> bool {
        self.due
    }

    /// Before a send of a due queue: while gathering, only whole batches
    /// are to leave (see [`Output::sendable`]).
    #[inline]
    pub(crate) fn send_due_batches(&mut self) {
        self.batches_only = self.gathering && !self.refs.is_empty();
    }

    /// Bytes of the queue the transport is to send now: all of it, or
    /// (after `send_due_batches`) its whole batches: `GATHER_VALUES`
    /// values, or values reaching `GATHER_BYTES`, up to the last one's
    /// trailer (as when the batch was written the moment it was full).
    pub(crate) fn sendable(&self) -> usize {
        if self.batches_only {
            self.whole_batches().0
        } else {
            self.queued_with_values()
        }
    }

    /// The bytes of the queue's whole batches, how many values they hold,
    /// and where in the buffer they end.
    fn whole_batches(&self) -> (usize, usize, usize) {
        let mut whole = (0, 0, self.sent);
        let mut bytes = 0;
        let mut from = self.sent;
        let (mut values, mut value_bytes) = (0, 0);
        for (i, g) in self.refs.iter().enumerate() {
            bytes += g.at - from + g.len;
            from = g.at;
            values += 1;
            value_bytes += g.len;
            if values == GATHER_VALUES || value_bytes >= GATHER_BYTES {
                bytes += g.end - from;
                from = g.end;
                whole = (bytes, i + 1, g.end);
                (values, value_bytes) = (0, 0);
            }
        }
        whole
    }

    /// Appends `value` and then `trailer`; or (`direct_takes`) queues a
    /// reference to `value`, whose memory the thread's pin keeps, and
    /// appends `trailer`. The transport sends it (see [`Output::due`]).
    #[inline]
    pub(crate) fn put_value(&mut self, value: &[u8], trailer: &[u8], lock_free: bool) {
        if self.direct_takes(value.len(), lock_free) {
            if self.pin.is_none() {
                self.pin = osmium_store::epoch::keep();
            }
            if self.pin.is_some() {
                let at = self.buf.len();
                self.buf.extend_from_slice(trailer);
                self.refs.push(ValueRef {
                    at,
                    end: self.buf.len(),
                    ptr: value.as_ptr(),
                    len: value.len(),
                });
                self.ref_bytes += value.len();
                self.due |= !self.gathering
                    || self.refs.len() >= GATHER_VALUES
                    || self.ref_bytes >= GATHER_BYTES;
                return;
            }
        }
        self.buf.reserve(value.len() + trailer.len());
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(trailer);
    }

    /// Fills `iov` with the queue's pieces from `skip` bytes in, in order,
    /// for one write: at most `max` bytes (the last piece cut short), and
    /// values up to `GATHER_VALUES` of them or until they reach
    /// `GATHER_BYTES` (then up to that value's trailer). Returns how many
    /// pieces and their bytes; (0, 0) when nothing is left.
    pub(crate) fn pieces<'a>(
        &'a self,
        skip: usize,
        max: usize,
        iov: &mut [IoSlice<'a>],
    ) -> (usize, usize) {
        let total = self.queued_with_values();
        if skip == 0 && max >= total && iov.len() > 2 * self.refs.len() && self.one_write() {
            // The common case, all of the queue in one write.
            let mut from = self.sent;
            for (g, pair) in self.refs.iter().zip(iov.chunks_exact_mut(2)) {
                // SAFETY: the value's memory stays valid while `pin` holds,
                // and `pin` is held while any value is referenced.
                let value = unsafe { std::slice::from_raw_parts(g.ptr, g.len) };
                pair[0] = IoSlice::new(&self.buf[from..g.at]);
                pair[1] = IoSlice::new(value);
                from = g.at;
            }
            let count = 2 * self.refs.len();
            iov[count] = IoSlice::new(&self.buf[from..]);
            return (count + 1, total);
        }
        let mut fill = Fill {
            iov,
            count: 0,
            bytes: 0,
            skip,
            max,
        };
        let mut values = 0;
        let mut value_bytes = 0;
        let mut from = self.sent;
        for g in &self.refs {
            if !fill.add(&self.buf[from..g.at]) {
                return fill.done();
            }
            from = g.at;
            let skipped = fill.skip;
            // SAFETY: as above.
            let value = unsafe { std::slice::from_raw_parts(g.ptr, g.len) };
            let more = fill.add(value);
            if skipped < g.len {
                // Some of this value is in the write.
                values += 1;
                value_bytes += g.len - skipped;
            }
            if !more {
                return fill.done();
            }
            if values == GATHER_VALUES || value_bytes >= GATHER_BYTES {
                // The batch ends with this value's trailer.
                fill.add(&self.buf[from..g.end]);
                return fill.done();
            }
        }
        fill.add(&self.buf[from..]);
        fill.done()
    }

    /// Whether the whole queue is one batch: no value before the last
    /// reaches the gather limits, and nothing follows the last one's
    /// trailer if it does.
    #[inline]
    fn one_write(&self) -> bool {
        let Some(last) = self.refs.last() else {
            return true;
        };
        let values = self.refs.len();
        if values < GATHER_VALUES && self.ref_bytes < GATHER_BYTES {
            return true;
        }
        values <= GATHER_VALUES
            && self.ref_bytes - last.len < GATHER_BYTES
            && last.end == self.buf.len()
    }

    /// How many values are referenced.
    #[inline]
    pub(crate) fn ref_count(&self) -> usize {
        self.refs.len()
    }

    /// After the transport sent `n` bytes of the queue: the rest, values
    /// included, is kept in the buffer in order, and the pin goes; or,
    /// when the whole batches asked for all left, the rest stays queued.
    pub(crate) fn sent_queue(&mut self, n: usize) {
        if std::mem::take(&mut self.batches_only) && !self.refs.is_empty() {
            let (bytes, values, end) = self.whole_batches();
            if n == bytes && 0 < values && values < self.refs.len() {
                self.sent_batches(values, end);
                return;
            }
        }
        if self.refs.is_empty() {
            if n > 0 {
                self.sent(n);
            }
            self.pin = None;
            self.due = false;
            return;
        }
        let total = self.queued_with_values();
        self.socket_full = n < total;
        if n > 0 {
            self.wrote_directly = true;
            self.epoch += 1;
            // What was queued has left, or moves.
            self.committed = 0;
        }
        if n == total {
            self.buf.clear();
            self.sent = 0;
        } else {
            self.keep_unwritten(n);
        }
        self.refs.clear();
        self.ref_bytes = 0;
        self.due = false;
        // Only now may the values' memory be rewritten.
        self.pin = None;
    }

    /// The first `values` values and the buffer up to `end` left: the
    /// rest of the queue moves to the front of the buffer, its values
    /// still referenced.
    fn sent_batches(&mut self, values: usize, end: usize) {
        self.socket_full = false;
        self.wrote_directly = true;
        self.epoch += 1;
        self.committed = 0;
        for g in self.refs.drain(..values) {
            self.ref_bytes -= g.len;
        }
        self.buf.drain(..end);
        self.sent = 0;
        for g in &mut self.refs {
            g.at -= end;
            g.end -= end;
        }
        self.due = self.refs.len() >= GATHER_VALUES || self.ref_bytes >= GATHER_BYTES;
    }

    /// Forgets the referenced values unsent (the connection is closing).
    pub(crate) fn discard_refs(&mut self) {
        self.refs.clear();
        self.ref_bytes = 0;
        self.due = false;
        self.pin = None;
    }

    /// After a write of values that sent `n` bytes: the rest of the buffer
    /// and of the values, in order, from the front of the buffer.
    fn keep_unwritten(&mut self, n: usize) {
        let mut skip = n;
        // The buffer's unsent pieces move to the front (never rightwards:
        // only bytes before them are dropped), and each value's unsent
        // part is noted at its new place.
        let mut w = 0;
        let mut from = self.sent;
        let mut keep = 0;
        for i in 0..=self.refs.len() {
            let end = self.refs.get(i).map_or(self.buf.len(), |g| g.at);
            let take = skip.min(end - from);
            skip -= take;
            self.buf.copy_within(from + take..end, w);
            w += end - from - take;
            from = end;
            if let Some(g) = self.refs.get(i) {
                let sent = skip.min(g.len);
                skip -= sent;
                if sent < g.len {
                    self.refs[keep] = ValueRef {
                        at: w,
                        end: w,
                        // SAFETY: within the value (sent < len).
                        ptr: unsafe { g.ptr.add(sent) },
                        len: g.len - sent,
                    };
                    keep += 1;
                }
            }
        }
        self.buf.truncate(w);
        self.sent = 0;
        // Then the values' parts go in, front to back (each insertion moves
        // only buffer bytes).
        let mut shift = 0;
        for g in &self.refs[..keep] {
            // SAFETY: the value's memory is valid while `pin` holds.
            let part = unsafe { std::slice::from_raw_parts(g.ptr, g.len) };
            let at = g.at + shift;
            let old = self.buf.len();
            self.buf.resize(old + part.len(), 0);
            self.buf.copy_within(at..old, at + part.len());
            self.buf[at..at + part.len()].copy_from_slice(part);
            shift += part.len();
        }
    }
}

/// `Output::pieces` filling a write's slices.
struct Fill<'a, 'b> {
    iov: &'b mut [IoSlice<'a>],
    count: usize,
    bytes: usize,
    /// Bytes of the queue already sent, still to pass over.
    skip: usize,
    max: usize,
}

impl<'a> Fill<'a, '_> {
    /// Adds what of `piece` is not skipped, up to `max`; false once the
    /// write is full.
    #[inline]
    fn add(&mut self, piece: &'a [u8]) -> bool {
        let passed = self.skip.min(piece.len());
        self.skip -= passed;
        let piece = &piece[passed..];
        let piece = &piece[..piece.len().min(self.max - self.bytes)];
        if !piece.is_empty() && self.count < self.iov.len() {
            self.iov[self.count] = IoSlice::new(piece);
            self.count += 1;
            self.bytes += piece.len();
        }
        self.bytes < self.max
    }

    fn done(self) -> (usize, usize) {
        (self.count, self.bytes)
    }
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
