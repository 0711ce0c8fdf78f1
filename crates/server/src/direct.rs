//! Large values sent straight from item memory: a GET hit whose value is
//! at least `DIRECT_MIN` bytes is written to the socket with one `writev`
//! of the output queued before it, the value where it lies in the arena,
//! and the bytes that end the reply, instead of being copied into the
//! connection's write buffer first (memcached's `sendmsg` likewise points
//! its iovecs at the item). Only what the socket does not take is copied.
//!
//! The caller holds the item while the value is written, so its memory
//! cannot be reused under the system call: pinned, never under its
//! shard's lock (a GET that found it under the lock, a gat or touch,
//! copies), so the system call holds up no other thread.
//! A session writes directly only when it is a stream (not UDP, whose
//! replies are cut into datagrams later) and none of its output is
//! partially written (the write buffer's pending output starts at its
//! first byte, so the buffer can be shortened by what the socket took).
//!
//! What changes for the client is only when the bytes leave: a batch of
//! pipelined requests is answered in more than one write. Where a later
//! request of the same batch makes the server drop the batch's unsent
//! replies (a binary request with a bad magic byte closes the connection
//! after the replies memcached would already have sent), replies written
//! directly have already left, as they would have had the client sent the
//! bad request in a later packet; `Direct::wrote` tells the caller that
//! its write buffer was shortened, so that positions it kept in it are no
//! longer valid.

use crate::stats::ThreadStats;

/// Values at least this long are written from item memory.
pub const DIRECT_MIN: usize = 32 * 1024;

/// Whether (and where) a session's hits may be written directly.
pub struct Direct {
    /// The stream's descriptor, or -1: copy every value.
    fd: i32,
    /// A direct write happened since the caller last cleared this: the
    /// write buffer no longer starts where it did.
    pub wrote: bool,
}

impl Direct {
    /// For a session writing to stream `fd` whose pending output starts at
    /// the start of its write buffer (`wpos == 0`).
    #[inline]
    pub fn new(fd: i32, udp: bool, wpos: usize) -> Direct {
        Direct {
            fd: if udp || wpos != 0 { -1 } else { fd },
            wrote: false,
        }
    }

    /// Whether a value of `len` bytes would be written directly: only if
    /// the caller holds its item without a shard lock (`lock_free`, see
    /// `ItemView::lock_free`), so that the system call delays no other
    /// thread's access to the shard.
    #[inline]
    pub fn takes(&self, len: usize, lock_free: bool) -> bool {
        self.fd >= 0 && len >= DIRECT_MIN && lock_free
    }

    /// Appends `value` and then `trailer` to `out`, the session's whole
    /// pending output, or (`takes(value.len(), lock_free)`) writes `out`,
    /// `value` and `trailer` to the socket at once and keeps in `out` only
    /// what the socket did not take.
    pub fn put_value(
        &mut self,
        out: &mut Vec<u8>,
        value: &[u8],
        trailer: &[u8],
        lock_free: bool,
        stats: &ThreadStats,
    ) {
        if !self.takes(value.len(), lock_free) {
            out.reserve(value.len() + trailer.len());
            out.extend_from_slice(value);
            out.extend_from_slice(trailer);
            return;
        }
        let parts = [&out[..], value, trailer];
        let iov = parts.map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        });
        // SAFETY: three iovecs over live slices (the output buffer, the
        // item's value, which the caller holds, and the trailer), read-only
        // for the call; `fd` is the session's open stream, non-blocking.
        let n = unsafe { libc::writev(self.fd, iov.as_ptr(), iov.len() as libc::c_int) };
        // An error (EAGAIN: the socket is full) writes nothing here; the
        // next flush meets it again and reports it.
        let mut n = usize::try_from(n).unwrap_or(0);
        if n == 0 {
            out.extend_from_slice(value);
            out.extend_from_slice(trailer);
            return;
        }
        stats.bytes_written.add(n as u64);
        self.wrote = true;
        if n < out.len() {
            out.drain(..n);
            out.extend_from_slice(value);
            out.extend_from_slice(trailer);
            return;
        }
        n -= out.len();
        out.clear();
        if n < value.len() {
            out.extend_from_slice(&value[n..]);
            out.extend_from_slice(trailer);
        } else {
            out.extend_from_slice(&trailer[n - value.len()..]);
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
        // room for, which is less than what is queued. The peer's bytes
        // followed by the buffer's must be everything appended, in order.
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let stats = ThreadStats::default();
        let mut direct = Direct::new(a.as_raw_fd(), false, 0);
        let mut out = b"queued before\r\n".to_vec();
        let mut all = out.clone();
        let mut got = Vec::new();
        let mut wrote = 0;
        for i in 0..60u8 {
            let value = bytes(DIRECT_MIN + 9_000 * usize::from(i), i);
            direct.put_value(&mut out, &value, b"\r\n", true, &stats);
            all.extend_from_slice(&value);
            all.extend_from_slice(b"\r\n");
            wrote += usize::from(std::mem::take(&mut direct.wrote));
            // A small reply in between is always copied.
            direct.put_value(&mut out, b"small", b"\r\n", true, &stats);
            all.extend_from_slice(b"small\r\n");
            if !out.is_empty() {
                // Full: the reader takes a little.
                let mut chunk = [0u8; 20_000];
                let n = b.read(&mut chunk).unwrap();
                got.extend_from_slice(&chunk[..n]);
            }
        }
        assert!(wrote > 0, "some values were written directly");
        assert!(!out.is_empty(), "the socket filled up");
        let sent = stats.bytes_written.get() as usize;
        drop(a);
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), sent);
        got.extend_from_slice(&out);
        assert!(got == all);
    }

    #[test]
    fn udp_partly_written_and_locked_copy() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert!(Direct::new(a.as_raw_fd(), false, 0).takes(DIRECT_MIN, true));
        assert!(!Direct::new(a.as_raw_fd(), false, 0).takes(DIRECT_MIN, false));
        assert!(!Direct::new(a.as_raw_fd(), false, 0).takes(DIRECT_MIN - 1, true));
        assert!(!Direct::new(a.as_raw_fd(), true, 0).takes(DIRECT_MIN, true));
        assert!(!Direct::new(a.as_raw_fd(), false, 7).takes(DIRECT_MIN, true));
    }
}
