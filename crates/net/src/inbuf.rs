//! [`InBuf`]: a connection's read buffer, bytes read from a socket and
//! not yet framed (a [`crate::nb::Conn`]'s, the proxy's client
//! connections'). The socket is read straight into the buffer's free tail
//! (no staging copy, nothing zeroed per read); framed bytes are consumed
//! from the front, and the rest moves to the front only when the tail is
//! short.

use std::io::{self, Read};

/// The buffer's first size, and the least free tail a read is given.
const CHUNK: usize = 16 * 1024;

/// Unframed bytes of one connection.
#[derive(Debug, Default)]
pub struct InBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

impl InBuf {
    /// The unframed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    /// The number of unframed bytes.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether every byte read was framed.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Drops the first `n` unframed bytes.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Drops every unframed byte.
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Appends `bytes` after the unframed ones (an upgrade's carried
    /// input).
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let need = self.end + bytes.len();
        if self.data.len() < need {
            self.data.resize(need, 0);
        }
        self.data[self.end..need].copy_from_slice(bytes);
        self.end = need;
    }

    /// Room for at least `CHUNK` more bytes at the tail.
    fn make_room(&mut self) {
        if self.data.len() - self.end >= CHUNK {
            return;
        }
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.data.len() - self.end < CHUNK {
            let size = (self.data.len() * 2).max(CHUNK).max(self.end + CHUNK);
            self.data.resize(size, 0);
        }
    }

    /// Reads what `r` has. A read that does not fill the free tail means
    /// the socket is drained (its edge-triggered readiness comes back
    /// with new bytes), so reading stops there, unless `to_end`: then it
    /// goes on to `WouldBlock` (the peer has shut down its side, and the
    /// end of stream must be seen). `Ok(false)` at end of stream.
    pub fn fill(&mut self, r: &mut impl Read, to_end: bool) -> io::Result<bool> {
        loop {
            self.make_room();
            let room = self.data.len() - self.end;
            match r.read(&mut self.data[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end += n;
                    if n < room && !to_end {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out its bytes `step` at a time, then `WouldBlock`.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
        reads: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            if self.at == self.bytes.len() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.step.min(buf.len()).min(self.bytes.len() - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn keeps_unconsumed_bytes_in_order_across_growth() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut r = Trickle {
            bytes: bytes.clone(),
            at: 0,
            step: usize::MAX,
            reads: 0,
        };
        let mut b = InBuf::default();
        assert!(b.fill(&mut r, false).unwrap());
        assert_eq!(b.bytes(), &bytes[..], "full reads go on until a short one");
        b.consume(99_990);
        assert_eq!(b.bytes(), &bytes[99_990..]);
        b.consume(10);
        assert!(b.is_empty());
    }

    #[test]
    fn extend_appends_after_the_unframed_bytes() {
        let mut b = InBuf::default();
        b.extend(b"get a\r\nget");
        b.consume(7);
        b.extend(b" b\r\n");
        assert_eq!(b.bytes(), b"get b\r\n");
        let mut r = Trickle {
            bytes: b"get c\r\n".to_vec(),
            at: 0,
            step: usize::MAX,
            reads: 0,
        };
        b.fill(&mut r, false).unwrap();
        assert_eq!(b.bytes(), b"get b\r\nget c\r\n", "reads go after them");
    }

    #[test]
    fn a_short_read_ends_filling_unless_to_end() {
        let mut r = Trickle {
            bytes: vec![7; 300],
            at: 0,
            step: 100,
            reads: 0,
        };
        let mut b = InBuf::default();
        b.fill(&mut r, false).unwrap();
        assert_eq!((b.len(), r.reads), (100, 1));
        b.fill(&mut r, true).unwrap();
        assert_eq!((b.len(), r.reads), (300, 4), "on to WouldBlock");
    }
}
