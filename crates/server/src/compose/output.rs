//! A connection's output: the replies composed and not yet sent, in a
//! write buffer lent by the worker's pool while there are any.
//!
//! ```text
//!   buf [....sent....|=====pending=====]
//!                    sent              len
//! ```
//!
//! Reply encoders append to [`Output::buf`]; the transport sends
//! [`Output::pending`] and reports [`Output::sent`]. A value of
//! `DIRECT_MIN` bytes or more may instead leave straight from item memory
//! ([`Output::put_value`]: one `writev` of the pending bytes, the value
//! where it lies and the reply's end), while the request still holds the
//! item; only what the socket does not take is copied. That needs a stream
//! socket and pending output that starts at the front of the buffer. A
//! direct write the socket did not take whole marks the socket full
//! ([`Output::socket_full`]): the session runs no further request until
//! the output drains, so pipelined large GETs are not copied one after
//! another into the buffer while the client catches up.
//!
//! While a connection runs plain GETs, large values are *gathered*
//! instead ([`Output::gather_values`]): each is recorded where it goes in
//! the buffer, the thread keeps its epoch pin so their memory stays valid
//! (`osmium_store::epoch::keep`), and [`Output::write_gathered`] sends the
//! buffer and all of them in one `writev` before anything else runs (the
//! session calls it before any other command and when it stops running
//! requests), as memcached sends a batch of replies in one `sendmsg`:
//!
//! ```text
//!   buf      [VALUE a 0 131072\r\n|\r\nVALUE b 0 131072\r\n|\r\nEND\r\n]
//!                                ^ at 0                     ^ at 1
//!   gathered [a's value in item memory] [b's value in item memory]
//!   writev   buf[..at0], a, buf[at0..at1], b, buf[at1..]
//! ```
//!
//! Over UDP every memcached response is sent as its own datagrams, so a
//! datagram endpoint's output also records where each response starts
//! (`marks`, see `udp_marks`).

use crate::buffers::{BufferPool, NoBuffer};
use crate::compose::udp_marks::ResponseMark;
use crate::stats::counters::ThreadStats;

/// Values at least this long are written from item memory.
pub const DIRECT_MIN: usize = 32 * 1024;

/// Most values one `writev` gathers (its iovecs: twice this, plus one).
const GATHER_VALUES: usize = 32;

/// Gathered values are written once they add up to this many bytes.
const GATHER_BYTES: usize = 1 << 20;

/// A value to be sent from item memory, inserted at `at` in the buffer.
struct Gathered {
    at: usize,
    ptr: *const u8,
    len: usize,
}

/// Stop running more requests while this much output waits to be sent.
pub const WRITE_HIGH_WATER: usize = 256 * 1024;

/// A write buffer whose unsent part is under a quarter of its capacity is
/// compacted down once it is this large: a slow reader keeps no more
/// memory than its unsent replies need.
const SHRINK_OVER: usize = 64 * 1024;

pub struct Output {
    buf: Vec<u8>,
    /// Capacity `buf` had when taken from the pool (what the pool counts).
    lent: usize,
    sent: usize,
    /// The stream's descriptor for direct writes, or -1 (UDP, tests).
    fd: i32,
    /// A direct write happened since this was last cleared: positions kept
    /// in the buffer are no longer valid.
    pub wrote_directly: bool,
    /// UDP: where each memcached response starts in `buf`.
    pub marks: Vec<ResponseMark>,
    /// A datagram endpoint's output (owns its buffer, never pooled).
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
    /// A direct write left part of a value behind: the socket is full, and
    /// until the output drains the next request waits (its large value can
    /// then leave from item memory too, instead of being copied here).
    socket_full: bool,
    /// Whether large values are gathered (the session runs plain GETs).
    gathering: bool,
    /// Values gathered for the next write, in buffer order.
    gathered: Vec<Gathered>,
    gathered_bytes: usize,
    /// Keeps the thread pinned while values are gathered: their memory is
    /// not rewritten before `write_gathered`.
    gather_pin: Option<osmium_store::epoch::Kept>,
}

impl Output {
    /// The output of a stream connection on descriptor `fd`.
    pub fn stream(fd: i32) -> Output {
        Output {
            buf: Vec::new(),
            lent: 0,
            sent: 0,
            fd,
            wrote_directly: false,
            marks: Vec::new(),
            datagram: false,
            epoch: 0,
            committed: 0,
            peak: 0,
            wanted: 0,
            socket_full: false,
            gathering: false,
            gathered: Vec::new(),
            gathered_bytes: 0,
            gather_pin: None,
        }
    }

    /// The output of a datagram endpoint: no direct writes, response marks.
    pub fn datagram() -> Output {
        Output {
            datagram: true,
            ..Output::stream(-1)
        }
    }

    /// Makes sure a write buffer is held (a stream takes one from the pool
    /// before running requests).
    #[inline]
    pub fn acquire(&mut self, pool: &BufferPool) -> Result<(), NoBuffer> {
        if self.buf.capacity() == 0 && !self.datagram {
            self.buf = pool.take_write(self.wanted)?;
            self.lent = self.buf.capacity();
        }
        Ok(())
    }

    /// Gives the write buffer back once everything was sent.
    #[inline]
    pub fn release_if_empty(&mut self, pool: &BufferPool) {
        if self.sent == self.buf.len() && self.buf.capacity() != 0 && !self.datagram {
            self.wanted = std::mem::take(&mut self.peak).max(self.buf.len());
            self.sent = 0;
            pool.give_write(std::mem::take(&mut self.buf), self.lent);
            self.lent = 0;
        }
    }

    /// Gives the write buffer back, dropping unsent output.
    pub fn release(&mut self, pool: &BufferPool) {
        self.sent = self.buf.len();
        self.release_if_empty(pool);
    }

    /// The buffer reply encoders append to.
    #[inline]
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Everything composed so far, sent or not (positions are offsets in
    /// this).
    #[inline]
    pub fn composed(&self) -> &[u8] {
        &self.buf
    }

    /// Bytes composed (offsets for `truncate`).
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Drops what was composed from `at` on (a reply replaced by an error).
    #[inline]
    pub fn truncate(&mut self, at: usize) {
        let at = at.max(self.sent);
        self.buf.truncate(at);
        while self.gathered.last().is_some_and(|g| g.at > at) {
            if let Some(g) = self.gathered.pop() {
                self.gathered_bytes -= g.len;
            }
        }
        if self.gathered.is_empty() {
            self.gather_pin = None;
        }
    }

    /// Output not yet sent (nothing is gathered outside a session's run).
    #[inline]
    pub fn pending(&self) -> &[u8] {
        debug_assert!(self.gathered.is_empty());
        &self.buf[self.sent..]
    }

    /// Bytes waiting to be sent.
    #[inline]
    pub fn queued(&self) -> usize {
        self.buf.len() - self.sent
    }

    /// Whether this is a datagram endpoint's output.
    #[inline]
    pub fn is_datagram(&self) -> bool {
        self.datagram
    }

    /// Marks the replies so far as written by memcached (a flush point).
    #[inline]
    pub fn commit(&mut self) {
        self.committed = self.buf.len();
    }

    /// Drops the replies not yet committed: memcached's
    /// `conn_release_items` after a get with a key over 250 bytes releases
    /// every response it has not written.
    pub fn release_uncommitted(&mut self) {
        let at = self.committed.min(self.buf.len());
        self.truncate(at);
    }

    /// Changes whenever bytes leave (offsets taken before are stale).
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Memory the output's buffer holds (its sent part is freed only once
    /// all of it left or the buffer is compacted).
    #[inline]
    pub fn footprint(&self) -> usize {
        self.buf.capacity()
    }

    /// Records that `n` bytes of `pending` were sent.
    #[inline]
    pub fn sent(&mut self, n: usize) {
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
    pub fn drain_front(&mut self, n: usize) {
        self.buf.drain(..n);
        self.committed = self.committed.saturating_sub(n);
        self.sent = self.sent.saturating_sub(n);
        for m in &mut self.marks {
            m.start -= n;
        }
    }

    /// Drops everything (a datagram endpoint starting over).
    pub fn clear(&mut self) {
        self.socket_full = false;
        self.buf.clear();
        self.sent = 0;
        self.committed = 0;
        self.marks.clear();
    }

    /// Whether a direct write found the socket full and its output has not
    /// drained since.
    #[inline]
    pub fn socket_full(&self) -> bool {
        self.socket_full
    }

    /// Whether a value of `len` bytes would be written directly: a stream
    /// whose pending output starts at the front of its buffer, a large
    /// value, and an item held without a shard lock (`lock_free`) so the
    /// system call delays no other thread.
    #[inline]
    pub fn direct_takes(&self, len: usize, lock_free: bool) -> bool {
        self.fd >= 0 && self.sent == 0 && len >= DIRECT_MIN && lock_free
    }

    /// Allows (true) or ends gathering large values (see the module
    /// comment); the session allows it only around plain GETs, whose
    /// lookups take no lock, and writes what was gathered before anything
    /// else runs.
    #[inline]
    pub fn gather_values(&mut self, on: bool) {
        self.gathering = on && !self.datagram;
    }

    /// Lets the next request gather large values if it is a plain GET;
    /// anything else first sends what was gathered, so it runs unpinned
    /// (it may take locks or wait for readers).
    #[inline]
    pub fn gather_for(&mut self, plain_get: bool, stats: &ThreadStats) {
        if !plain_get {
            self.write_gathered(stats);
        }
        self.gather_values(plain_get);
    }

    /// Whether values wait in `gathered` (and the thread keeps its pin).
    #[inline]
    pub fn has_gathered(&self) -> bool {
        !self.gathered.is_empty()
    }

    /// Appends `value` and then `trailer`; or (`direct_takes`) gathers the
    /// value for the next `write_gathered`; or writes the pending output,
    /// `value` and `trailer` to the socket at once and keeps only what the
    /// socket did not take.
    pub fn put_value(
        &mut self,
        value: &[u8],
        trailer: &[u8],
        lock_free: bool,
        stats: &ThreadStats,
    ) {
        if !self.direct_takes(value.len(), lock_free) {
            self.buf.reserve(value.len() + trailer.len());
            self.buf.extend_from_slice(value);
            self.buf.extend_from_slice(trailer);
            return;
        }
        if self.gathering {
            if self.gather_pin.is_none() {
                self.gather_pin = osmium_store::epoch::keep();
            }
            if self.gather_pin.is_some() {
                self.gathered.push(Gathered {
                    at: self.buf.len(),
                    ptr: value.as_ptr(),
                    len: value.len(),
                });
                self.gathered_bytes += value.len();
                self.buf.extend_from_slice(trailer);
                if self.gathered.len() == GATHER_VALUES || self.gathered_bytes >= GATHER_BYTES {
                    self.write_gathered(stats);
                }
                return;
            }
        }
        if self.has_gathered() {
            self.write_gathered(stats);
            if !self.direct_takes(value.len(), lock_free) {
                self.buf.extend_from_slice(value);
                self.buf.extend_from_slice(trailer);
                return;
            }
        }
        let parts = [&self.buf[..], value, trailer];
        let iov = parts.map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        });
        // SAFETY: three iovecs over live slices (the output buffer, the
        // item's value, which the caller holds, and the trailer), read-only
        // for the call; `fd` is the connection's open, non-blocking stream.
        let n = unsafe { libc::writev(self.fd, iov.as_ptr(), iov.len() as libc::c_int) };
        // An error (EAGAIN: the socket is full) writes nothing here; the
        // next flush meets it again and reports it.
        let mut n = usize::try_from(n).unwrap_or(0);
        self.socket_full = n < self.buf.len() + value.len() + trailer.len();
        if n == 0 {
            self.buf.extend_from_slice(value);
            self.buf.extend_from_slice(trailer);
            return;
        }
        stats.bytes_written.add(n as u64);
        self.wrote_directly = true;
        self.epoch += 1;
        // What was queued before the value has left.
        self.committed = 0;
        if n < self.buf.len() {
            self.buf.drain(..n);
            self.buf.extend_from_slice(value);
            self.buf.extend_from_slice(trailer);
            return;
        }
        n -= self.buf.len();
        self.buf.clear();
        if n < value.len() {
            self.buf.extend_from_slice(&value[n..]);
            self.buf.extend_from_slice(trailer);
        } else {
            self.buf.extend_from_slice(&trailer[n - value.len()..]);
        }
    }
}

impl Output {
    /// Sends the pending output with the gathered values in one `writev`,
    /// copies what the socket did not take into the buffer (in order) and
    /// lets the thread's pin go.
    pub fn write_gathered(&mut self, stats: &ThreadStats) {
        if self.gathered.is_empty() {
            self.gather_pin = None;
            return;
        }
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iov = [empty; 2 * GATHER_VALUES + 1];
        let mut count = 0;
        let mut from = self.sent;
        for g in &self.gathered {
            iov[count] = libc::iovec {
                iov_base: self.buf[from..g.at].as_ptr() as *mut libc::c_void,
                iov_len: g.at - from,
            };
            iov[count + 1] = libc::iovec {
                iov_base: g.ptr as *mut libc::c_void,
                iov_len: g.len,
            };
            count += 2;
            from = g.at;
        }
        iov[count] = libc::iovec {
            iov_base: self.buf[from..].as_ptr() as *mut libc::c_void,
            iov_len: self.buf.len() - from,
        };
        count += 1;
        let total = self.buf.len() - self.sent + self.gathered_bytes;
        // SAFETY: the iovecs cover the live buffer and the gathered values,
        // whose item memory is not rewritten while `gather_pin` keeps this
        // thread pinned; read-only for the call. `fd` is the connection's
        // open, non-blocking stream.
        let n = unsafe { libc::writev(self.fd, iov.as_ptr(), count as libc::c_int) };
        // An error (EAGAIN: the socket is full) writes nothing here; the
        // next flush meets it again and reports it.
        let n = usize::try_from(n).unwrap_or(0);
        self.socket_full = n < total;
        if n > 0 {
            stats.bytes_written.add(n as u64);
            self.wrote_directly = true;
            self.epoch += 1;
            self.committed = 0;
        }
        if n == total {
            self.buf.clear();
            self.sent = 0;
        } else {
            self.keep_unwritten(n);
        }
        self.gathered.clear();
        self.gathered_bytes = 0;
        // Only now may the values' memory be rewritten.
        self.gather_pin = None;
    }

    /// Forgets the gathered values unsent (the connection is closing).
    pub fn discard_gathered(&mut self) {
        self.gathered.clear();
        self.gathered_bytes = 0;
        self.gather_pin = None;
    }

    /// After a gathered write that sent `n` bytes: the rest of the buffer
    /// and of the values, in order, from the front of the buffer.
    fn keep_unwritten(&mut self, n: usize) {
        let mut skip = n;
        // The buffer's unsent pieces move to the front (never rightwards:
        // only bytes before them are dropped), and each value's unsent
        // part is noted at its new place.
        let mut w = 0;
        let mut from = self.sent;
        let mut keep = 0;
        for i in 0..=self.gathered.len() {
            let end = self.gathered.get(i).map_or(self.buf.len(), |g| g.at);
            let take = skip.min(end - from);
            skip -= take;
            self.buf.copy_within(from + take..end, w);
            w += end - from - take;
            from = end;
            if let Some(g) = self.gathered.get(i) {
                let sent = skip.min(g.len);
                skip -= sent;
                if sent < g.len {
                    self.gathered[keep] = Gathered {
                        at: w,
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
        for g in &self.gathered[..keep] {
            // SAFETY: the value's memory is valid while `gather_pin` holds.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn what_the_socket_and_the_buffer_hold_is_the_output_in_order() {
        // Values go to a socket nobody reads until it is full; from then
        // on they are copied, except what the reader's small reads make
        // room for. The peer's bytes followed by the buffer's must be
        // everything appended, in order.
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let stats = ThreadStats::default();
        let mut out = Output::stream(a.as_raw_fd());
        out.buf().extend_from_slice(b"queued before\r\n");
        let mut all = out.pending().to_vec();
        let mut got = Vec::new();
        let mut wrote = 0;
        for i in 0..60u8 {
            let value = bytes(DIRECT_MIN + 9_000 * usize::from(i), i);
            out.put_value(&value, b"\r\n", true, &stats);
            all.extend_from_slice(&value);
            all.extend_from_slice(b"\r\n");
            wrote += usize::from(std::mem::take(&mut out.wrote_directly));
            out.put_value(b"small", b"\r\n", true, &stats);
            all.extend_from_slice(b"small\r\n");
            if out.queued() > 0 {
                let mut chunk = [0u8; 20_000];
                let n = b.read(&mut chunk).unwrap();
                got.extend_from_slice(&chunk[..n]);
            }
        }
        assert!(wrote > 0, "some values were written directly");
        assert!(out.queued() > 0, "the socket filled up");
        let sent = stats.bytes_written.get() as usize;
        drop(a);
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), sent);
        got.extend_from_slice(out.pending());
        assert!(got == all);
    }

    #[test]
    fn only_streams_with_unsent_front_and_lock_free_items_write_directly() {
        let (a, _b) = UnixStream::pair().unwrap();
        let out = Output::stream(a.as_raw_fd());
        assert!(out.direct_takes(DIRECT_MIN, true));
        assert!(!out.direct_takes(DIRECT_MIN, false));
        assert!(!out.direct_takes(DIRECT_MIN - 1, true));
        assert!(!Output::datagram().direct_takes(DIRECT_MIN, true));
        let mut partly = Output::stream(a.as_raw_fd());
        partly.buf().extend_from_slice(b"abc");
        partly.sent(1);
        assert!(!partly.direct_takes(DIRECT_MIN, true));
    }

    #[test]
    fn a_value_the_socket_did_not_take_whole_marks_it_full_until_drained() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let stats = ThreadStats::default();
        let mut out = Output::stream(a.as_raw_fd());
        let small = bytes(DIRECT_MIN, 1);
        out.put_value(&small, b"\r\n", true, &stats);
        assert!(!out.socket_full(), "a value the socket took whole");
        let mut got = vec![0u8; small.len() + 2];
        b.read_exact(&mut got).unwrap();
        let huge = bytes(16 << 20, 2);
        out.put_value(&huge, b"\r\n", true, &stats);
        assert!(out.socket_full() && out.queued() > 0);
        let queued = out.queued();
        out.sent(queued);
        assert!(!out.socket_full(), "drained");
    }

    /// Gathers `values` (each after a small header, with a trailer) while
    /// pinned, as a session running GETs does; returns the whole output.
    fn gather(out: &mut Output, values: &[Vec<u8>], stats: &ThreadStats) -> Vec<u8> {
        let mut all = Vec::new();
        out.gather_values(true);
        for (i, v) in values.iter().enumerate() {
            let _pin = osmium_store::epoch::pin().expect("a reader slot");
            let head = format!("VALUE k{i} 0 {}\r\n", v.len());
            out.buf().extend_from_slice(head.as_bytes());
            out.put_value(v, b"\r\n", true, stats);
            all.extend_from_slice(head.as_bytes());
            all.extend_from_slice(v);
            all.extend_from_slice(b"\r\n");
        }
        out.buf().extend_from_slice(b"END\r\n");
        all.extend_from_slice(b"END\r\n");
        all
    }

    #[test]
    fn gathered_values_leave_in_one_write_in_order() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let stats = ThreadStats::default();
        let mut out = Output::stream(a.as_raw_fd());
        let values: Vec<_> = (0..3)
            .map(|i| bytes(DIRECT_MIN + 1000 * i, i as u8))
            .collect();
        let all = gather(&mut out, &values, &stats);
        assert!(out.has_gathered());
        assert!(osmium_store::epoch::pinned(), "kept while gathered");
        out.write_gathered(&stats);
        assert!(!out.has_gathered() && !osmium_store::epoch::pinned());
        let mut got = vec![0u8; stats.bytes_written.get() as usize];
        b.read_exact(&mut got).unwrap();
        got.extend_from_slice(out.pending());
        assert!(got == all);
    }

    #[test]
    fn what_a_full_socket_did_not_take_of_gathered_values_is_kept_in_order() {
        // Rounds of gathered values to a socket read slowly: the peer's
        // bytes followed by the buffer's are everything, in order.
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let stats = ThreadStats::default();
        let mut out = Output::stream(a.as_raw_fd());
        let mut all = Vec::new();
        let mut got = Vec::new();
        for round in 0..12u8 {
            if out.queued() == 0 {
                let values: Vec<_> = (0..5)
                    .map(|i| bytes(DIRECT_MIN + 7_919 * usize::from(i + round), i ^ round))
                    .collect();
                all.extend_from_slice(&gather(&mut out, &values, &stats));
                out.write_gathered(&stats);
                assert!(!out.has_gathered());
            } else {
                let mut chunk = [0u8; 50_000];
                let n = b.read(&mut chunk).unwrap();
                got.extend_from_slice(&chunk[..n]);
                // The transport sends the rest as the socket takes it.
                let pending = out.pending().to_vec();
                let n = nix_write(&a, &pending);
                out.sent(n);
            }
        }
        let sent = stats.bytes_written.get() as usize;
        assert!(out.queued() > 0, "the socket filled up");
        let pending = out.pending().to_vec();
        drop(a);
        b.read_to_end(&mut got).unwrap();
        got.extend_from_slice(&pending);
        assert!(sent > 0 && got == all);
    }

    /// A non-blocking write of `data`: how much the socket took.
    fn nix_write(a: &UnixStream, data: &[u8]) -> usize {
        use std::io::Write;
        let mut a = a;
        a.write(data).unwrap_or(0)
    }

    #[test]
    fn a_truncated_reply_drops_its_gathered_value() {
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let stats = ThreadStats::default();
        let mut out = Output::stream(a.as_raw_fd());
        let values = [bytes(DIRECT_MIN, 1), bytes(DIRECT_MIN, 2)];
        gather(&mut out, &values[..1], &stats);
        let kept = out.len();
        gather(&mut out, &values[1..], &stats);
        out.truncate(kept);
        out.write_gathered(&stats);
        let mut want = format!("VALUE k0 0 {}\r\n", DIRECT_MIN).into_bytes();
        want.extend_from_slice(&values[0]);
        want.extend_from_slice(b"\r\nEND\r\n");
        let mut got = vec![0u8; stats.bytes_written.get() as usize];
        b.read_exact(&mut got).unwrap();
        got.extend_from_slice(out.pending());
        assert!(got == want);
    }

    #[test]
    fn buffers_go_back_to_the_pool_when_sent() {
        let pool = BufferPool::new(0, Default::default());
        let mut out = Output::stream(-1);
        out.acquire(&pool).unwrap();
        out.buf().extend_from_slice(b"END\r\n");
        out.release_if_empty(&pool);
        assert!(out.buf.capacity() > 0, "still pending");
        out.sent(5);
        out.release_if_empty(&pool);
        assert_eq!(out.buf.capacity(), 0);
    }
}
