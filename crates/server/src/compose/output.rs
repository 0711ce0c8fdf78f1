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
//! Over UDP every memcached response is sent as its own datagrams, so a
//! datagram endpoint's output also records where each response starts
//! (`marks`, see `udp_marks`).

use crate::buffers::{BufferPool, NoBuffer};
use crate::compose::udp_marks::ResponseMark;
use crate::stats::counters::ThreadStats;

/// Values at least this long are written from item memory.
pub const DIRECT_MIN: usize = 32 * 1024;

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
        self.buf.truncate(at.max(self.sent));
    }

    /// Output not yet sent.
    #[inline]
    pub fn pending(&self) -> &[u8] {
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

    /// Appends `value` and then `trailer`, or (`direct_takes`) writes the
    /// pending output, `value` and `trailer` to the socket at once and
    /// keeps only what the socket did not take.
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
