//! A link's Noise transport frames on plain TCP, both directions: what
//! is sent ([`Outbound`]: plaintext sealed into frames, the frames kept
//! until the socket takes them) and what is received ([`Inbound`]: bytes
//! from the socket, opened frame by frame, the plaintext read out). No
//! I/O of its own: each is handed the socket (blocking or not) to use.
//!
//! ```text
//!   frame := len:u16 big-endian ‖ ciphertext[len]      17 <= len <= 65535 (16: the tag)
//!   nonce := the frame's number in its direction, from 0
//! ```
//!
//! A frame that fails to open (altered, replayed, reordered, dropped
//! before it, or under another key) is an error that ends the link: no
//! byte of it, nor of anything after it, is ever handed out.

use std::io::{self, Read, Write};
use std::sync::Arc;

use snow::StatelessTransportState;

/// The most bytes of one frame's ciphertext (Noise's message limit).
pub const MAX_FRAME: usize = 65535;
/// The AEAD tag of each frame.
pub const TAG: usize = 16;
/// The most plaintext one frame carries.
pub const MAX_PLAINTEXT: usize = MAX_FRAME - TAG;
/// The most plaintext this end seals into one frame: as a TLS record, so
/// the receiving end can apply the start of a large write while the rest
/// is on its way (it opens whole frames only).
pub const SEAL_PLAINTEXT: usize = 16 << 10;
/// Bytes read from the socket at a time (at least).
const READ_CHUNK: usize = 64 << 10;
/// The receiving buffer: a whole frame not yet opened, and room for a
/// read after it. Allocated (and zeroed) once per link, when it first
/// reads.
const RAW_SIZE: usize = 2 + MAX_FRAME + READ_CHUNK;

/// Why received bytes were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// A frame shorter than its tag.
    Short,
    /// A frame that does not open under this link's key and its nonce.
    Decrypt,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FrameError::Short => "a replication link frame shorter than its tag",
            FrameError::Decrypt => "a replication link frame failed to authenticate",
        })
    }
}

impl std::error::Error for FrameError {}

impl From<FrameError> for io::Error {
    fn from(e: FrameError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// The frame error inside an I/O error, if it is one.
pub fn frame_error(e: &io::Error) -> Option<FrameError> {
    e.get_ref()?.downcast_ref::<FrameError>().copied()
}

/// A finished handshake's keys, both directions (`handshake`). A clone
/// shares the keys; each `split` counts its nonces from 0 (a clone is
/// for tests and fuzzing, which replay one link's keys).
#[derive(Clone)]
pub struct Transport(pub(crate) Arc<StatelessTransportState>);

impl Transport {
    /// The two directions, each usable by a thread of its own.
    pub fn split(self) -> (Outbound, Inbound) {
        (
            Outbound {
                state: self.0.clone(),
                nonce: 0,
                frames: Vec::new(),
                sent: 0,
                end: 0,
            },
            Inbound {
                state: self.0,
                nonce: 0,
                raw: Vec::new(),
                raw_pos: 0,
                raw_end: 0,
                plain: Vec::new(),
                plain_pos: 0,
                plain_end: 0,
                failed: None,
                socket_drained: false,
            },
        )
    }
}

/// The sending direction: plaintext sealed into frames, kept until sent.
pub struct Outbound {
    state: Arc<StatelessTransportState>,
    nonce: u64,
    /// Sealed frames: `frames[sent..end]` not yet taken by the socket
    /// (the buffer keeps its size, zeroed once as it grows).
    frames: Vec<u8>,
    sent: usize,
    end: usize,
}

impl Outbound {
    /// Seals `plain` (split into frames as needed) after the frames
    /// already waiting.
    pub fn seal(&mut self, mut plain: &[u8]) -> io::Result<()> {
        if self.sent == self.end {
            self.sent = 0;
            self.end = 0;
        }
        while !plain.is_empty() {
            let n = plain.len().min(SEAL_PLAINTEXT);
            let at = self.end;
            if self.frames.len() < at + 2 + n + TAG {
                self.frames.resize(at + 2 + n + TAG, 0);
            }
            let len = self
                .state
                .write_message(self.nonce, &plain[..n], &mut self.frames[at + 2..])
                .map_err(|e| io::Error::other(format!("sealing a frame: {e}")))?;
            debug_assert_eq!(len, n + TAG);
            self.frames[at..at + 2].copy_from_slice(&(len as u16).to_be_bytes());
            self.end = at + 2 + len;
            self.nonce += 1;
            plain = &plain[n..];
        }
        Ok(())
    }

    /// Bytes of sealed frames the socket has not taken.
    pub fn pending(&self) -> usize {
        self.end - self.sent
    }

    /// Writes the waiting frames while `sock` takes them: Ok(true) when
    /// none is left, Ok(false) when a non-blocking socket is full.
    pub fn flush_to<W: Write>(&mut self, sock: &mut W) -> io::Result<bool> {
        while self.sent < self.end {
            match sock.write(&self.frames[self.sent..self.end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.sent = 0;
        self.end = 0;
        Ok(true)
    }
}

/// The receiving direction: socket bytes in, opened plaintext out.
pub struct Inbound {
    state: Arc<StatelessTransportState>,
    nonce: u64,
    /// Bytes from the socket not yet opened: `raw[raw_pos..raw_end]`.
    raw: Vec<u8>,
    raw_pos: usize,
    raw_end: usize,
    /// Opened plaintext not yet read: `plain[plain_pos..plain_end]` (a
    /// frame's room, made and zeroed once, when a frame first does not
    /// fit the reader's buffer).
    plain: Vec<u8>,
    plain_pos: usize,
    plain_end: usize,
    /// A frame failed: everything after it is refused too.
    failed: Option<FrameError>,
    /// The last read of the socket returned less than it was offered
    /// (the socket was empty then).
    socket_drained: bool,
}

impl Inbound {
    /// Whether nothing is left to read without the socket saying so: its
    /// last read was short and nothing waits here but the start of a
    /// frame (no plaintext, no whole frame): the rest of that frame comes
    /// with the socket's next readable event.
    pub fn drained(&self) -> bool {
        self.socket_drained && self.plain_pos == self.plain_end && !self.holds_frame()
    }

    /// Whether a read would return plaintext without reading the socket:
    /// opened plaintext waits, or a whole frame is in.
    pub fn holds_whole_frame(&self) -> bool {
        self.plain_pos < self.plain_end || self.next_plain_len().is_some()
    }

    /// Plaintext opened and not yet read.
    pub fn buffered(&self) -> &[u8] {
        &self.plain[self.plain_pos..self.plain_end]
    }

    /// Puts bytes the socket delivered into the inbound queue, as if read
    /// from it (a connection handed over with bytes already received).
    pub fn push_raw(&mut self, bytes: &[u8]) {
        let mut raw = self.raw[self.raw_pos..self.raw_end].to_vec();
        raw.extend_from_slice(bytes);
        self.raw_end = raw.len();
        self.raw_pos = 0;
        raw.resize(raw.len().max(RAW_SIZE), 0);
        self.raw = raw;
    }

    /// The opened plaintext that is waiting and the socket bytes not yet
    /// opened, moved out (for a handover: `push_plain`, `push_raw`).
    pub fn take_buffers(&mut self) -> (Vec<u8>, Vec<u8>) {
        let plain = self.plain[self.plain_pos..self.plain_end].to_vec();
        let raw = self.raw[self.raw_pos..self.raw_end].to_vec();
        self.plain_pos = 0;
        self.plain_end = 0;
        self.raw_pos = 0;
        self.raw_end = 0;
        (plain, raw)
    }

    /// Puts plaintext in front of what is read next (already opened
    /// elsewhere: a handover).
    pub fn push_plain(&mut self, bytes: &[u8]) {
        let mut p = bytes.to_vec();
        p.extend_from_slice(&self.plain[self.plain_pos..self.plain_end]);
        self.plain_end = p.len();
        self.plain_pos = 0;
        p.resize(p.len().max(MAX_PLAINTEXT), 0);
        self.plain = p;
    }

    /// Room to read into: the buffer made on the first read; what is not
    /// opened yet moved to its front when the room after it runs short
    /// (what waits is less than a whole frame, so a read always has at
    /// least `READ_CHUNK`).
    fn room(&mut self) -> &mut [u8] {
        if self.raw.len() < RAW_SIZE {
            self.raw.resize(RAW_SIZE, 0);
        }
        if self.raw_pos == self.raw_end {
            self.raw_pos = 0;
            self.raw_end = 0;
        } else if self.raw.len() - self.raw_end < READ_CHUNK {
            self.raw.copy_within(self.raw_pos..self.raw_end, 0);
            self.raw_end -= self.raw_pos;
            self.raw_pos = 0;
        }
        &mut self.raw[self.raw_end..]
    }

    /// Opens the first complete frame of `raw` into `plain` (or straight
    /// into `direct` when it fits there and nothing waits in `plain`):
    /// Ok(Some(n)) bytes put in `direct`, Ok(Some(0)) opened into `plain`
    /// or an empty frame, Ok(None) no complete frame yet.
    fn open_one(&mut self, direct: &mut [u8]) -> Result<Option<usize>, FrameError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let raw = &self.raw[self.raw_pos..self.raw_end];
        if raw.len() < 2 {
            return Ok(None);
        }
        let len = usize::from(u16::from_be_bytes([raw[0], raw[1]]));
        if raw.len() < 2 + len {
            return Ok(None);
        }
        if len < TAG {
            self.failed = Some(FrameError::Short);
            return Err(FrameError::Short);
        }
        let frame = &raw[2..2 + len];
        let plain_len = len - TAG;
        // Called only when no opened plaintext waits (`read_from`).
        debug_assert_eq!(self.plain_pos, self.plain_end);
        let into_direct = direct.len() >= plain_len;
        let opened = if into_direct {
            self.state.read_message(self.nonce, frame, direct)
        } else {
            if self.plain.len() < MAX_PLAINTEXT {
                self.plain.resize(MAX_PLAINTEXT, 0);
            }
            self.plain_pos = 0;
            self.plain_end = 0;
            let r = self.state.read_message(self.nonce, frame, &mut self.plain);
            if r.is_ok() {
                self.plain_end = plain_len;
            }
            r
        };
        if opened.is_err() {
            self.failed = Some(FrameError::Decrypt);
            return Err(FrameError::Decrypt);
        }
        self.nonce += 1;
        self.raw_pos += 2 + len;
        Ok(Some(if into_direct { plain_len } else { 0 }))
    }

    /// After a frame opened into the reader's buffer: the whole frames
    /// waiting behind it that fit in the rest of it, opened there too, so
    /// a reader gets at once what a plain socket's read would have given
    /// (a server answers a read's requests in one write: one frame per
    /// read made it answer each small frame on its own). A frame that
    /// fails to open stops this; its error comes with the next read.
    fn open_more(&mut self, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while let Some(len) = self.next_plain_len() {
            if len == 0 || len > buf.len() - n {
                break;
            }
            match self.open_one(&mut buf[n..]) {
                Ok(Some(k)) if k > 0 => n += k,
                _ => break,
            }
        }
        n
    }

    /// Whether the whole of the next frame is in (whether it opens or
    /// not).
    fn holds_frame(&self) -> bool {
        let raw = &self.raw[self.raw_pos..self.raw_end];
        raw.len() >= 2 && raw.len() >= 2 + usize::from(u16::from_be_bytes([raw[0], raw[1]]))
    }

    /// The plaintext length of the next frame, if the whole of it is in.
    fn next_plain_len(&self) -> Option<usize> {
        let raw = &self.raw[self.raw_pos..self.raw_end];
        if raw.len() < 2 {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([raw[0], raw[1]]));
        (raw.len() >= 2 + len && len >= TAG).then(|| len - TAG)
    }

    /// Copies waiting plaintext into `buf`.
    fn take_plain(&mut self, buf: &mut [u8]) -> usize {
        let waiting = &self.plain[self.plain_pos..self.plain_end];
        let n = waiting.len().min(buf.len());
        buf[..n].copy_from_slice(&waiting[..n]);
        self.plain_pos += n;
        n
    }

    /// Reads plaintext into `buf`, reading `sock` only when no whole frame
    /// is waiting. Ok(0): the socket closed between frames (the peer
    /// closed); a close inside a frame is `UnexpectedEof`. A non-blocking
    /// socket's `WouldBlock` is returned only when nothing is waiting.
    /// A frame that fails to open is `InvalidData` holding a
    /// [`FrameError`], now and for every later call.
    pub fn read_from<R: Read>(&mut self, sock: &mut R, buf: &mut [u8]) -> io::Result<usize> {
        self.read_frames(sock, buf, false)
    }

    /// As [`Inbound::read_from`], for a non-blocking socket whose
    /// readiness is edge-triggered: a socket read that emptied the socket
    /// (it returned less than it was offered) and left no whole frame is
    /// `WouldBlock` at once, without the read that would only say so.
    pub fn read_available<R: Read>(&mut self, sock: &mut R, buf: &mut [u8]) -> io::Result<usize> {
        self.read_frames(sock, buf, true)
    }

    fn read_frames<R: Read>(
        &mut self,
        sock: &mut R,
        buf: &mut [u8],
        edge: bool,
    ) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut emptied = false;
        loop {
            if self.plain_pos < self.plain_end {
                return Ok(self.take_plain(buf));
            }
            match self.open_one(buf)? {
                Some(0) => continue,
                Some(n) => return Ok(n + self.open_more(&mut buf[n..])),
                None if emptied => return Err(io::ErrorKind::WouldBlock.into()),
                None => {}
            }
            let room = self.room();
            let offered = room.len();
            match sock.read(room) {
                Ok(0) if self.raw_pos == self.raw_end => return Ok(0),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.raw_end += n;
                    self.socket_drained = n < offered;
                    emptied = edge && self.socket_drained;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication_link::handshake::tests::pair;

    /// A socket that gives its bytes `step` at a time, then WouldBlock
    /// (or end of stream when `eof`).
    struct Drip {
        data: Vec<u8>,
        pos: usize,
        step: usize,
        eof: bool,
    }

    impl Read for Drip {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.pos == self.data.len() {
                return if self.eof {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                };
            }
            let n = self.step.min(buf.len()).min(self.data.len() - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    fn drip(data: Vec<u8>, step: usize, eof: bool) -> Drip {
        Drip {
            data,
            pos: 0,
            step,
            eof,
        }
    }

    fn read_all(inb: &mut Inbound, sock: &mut Drip, chunk: usize) -> io::Result<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; chunk];
        loop {
            match inb.read_from(sock, &mut buf) {
                Ok(0) => return Ok(got),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(got),
                Err(e) => return Err(e),
            }
        }
    }

    fn sealed(out: &mut Outbound, parts: &[&[u8]]) -> Vec<u8> {
        for p in parts {
            out.seal(p).unwrap();
        }
        let mut wire = Vec::new();
        assert!(out.flush_to(&mut wire).unwrap());
        wire
    }

    #[test]
    fn frames_carry_any_size_in_order_whatever_the_reads() {
        let (a, b) = pair();
        let (mut a_out, _) = a.split();
        let (_, mut b_in) = b.split();
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let parts: [&[u8]; 4] = [b"ms k 1 q\r\nv\r\n", &big, b"", b"mn\r\n"];
        let wire = sealed(&mut a_out, &parts);
        // 200,000 bytes take thirteen frames of at most 16 KiB.
        assert_eq!(wire.len(), 13 + 4 + 200_000 + 15 * (2 + TAG));
        let want: Vec<u8> = parts.concat();
        for (step, chunk) in [(1, 7), (3, 1 << 20), (65537, 100), (1 << 20, 1 << 17)] {
            let (a, b) = pair();
            let (mut a_out, _) = a.split();
            let (_, mut b_in2) = b.split();
            let wire = sealed(&mut a_out, &parts);
            let mut sock = drip(wire, step, true);
            assert_eq!(read_all(&mut b_in2, &mut sock, chunk).unwrap(), want);
        }
        // Both directions at once, on one transport each.
        let mut sock = drip(wire, 4096, false);
        assert_eq!(read_all(&mut b_in, &mut sock, 4096).unwrap(), want);
    }

    #[test]
    fn a_read_takes_every_whole_frame_that_fits() {
        let (a, b) = pair();
        let (mut out, _) = a.split();
        let (_, mut inb) = b.split();
        let parts: [&[u8]; 4] = [
            b"ms a 1 q\r\nb\r\n",
            b"mn\r\n",
            b"ms c 1 q\r\nd\r\n",
            b"mn\r\n",
        ];
        let wire = sealed(&mut out, &parts);
        let mut sock = drip(wire, 1 << 20, false);
        // Four frames in one socket read: one read of the link gives all
        // of them, as a plain socket's read would.
        let mut buf = [0u8; 1024];
        let n = inb.read_from(&mut sock, &mut buf).unwrap();
        assert_eq!(&buf[..n], parts.concat().as_slice());
        // A buffer too small for the next frame gets the ones before it.
        let (a, b) = pair();
        let (mut out, _) = a.split();
        let (_, mut inb) = b.split();
        let wire = sealed(&mut out, &[b"0123456789", b"abcdefghijklmnop", b"xy"]);
        let mut sock = drip(wire, 1 << 20, false);
        let mut buf = [0u8; 20];
        let n = inb.read_from(&mut sock, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"0123456789");
        // The frames left are whole: the next read needs no socket read.
        assert!(inb.holds_whole_frame());
        let n = inb.read_from(&mut sock, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"abcdefghijklmnopxy");
        assert!(!inb.holds_whole_frame());
        // Part of a frame is not a frame to read.
        let (a, b) = pair();
        let (mut out, _) = a.split();
        let (_, mut inb) = b.split();
        let mut wire = sealed(&mut out, &[b"0123456789", b"abcdefghijklmnop"]);
        wire.pop();
        let mut sock = drip(wire, 1 << 20, false);
        let n = inb.read_from(&mut sock, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"0123456789");
        assert!(!inb.holds_whole_frame());
    }

    /// Counts the reads of the socket it wraps.
    struct Counted<R> {
        sock: R,
        reads: usize,
    }

    impl<R: Read> Read for Counted<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            self.sock.read(buf)
        }
    }

    #[test]
    fn an_edge_triggered_read_stops_at_an_emptied_socket() {
        let part = |edge: bool| {
            let (a, b) = pair();
            let (mut out, _) = a.split();
            let (_, mut inb) = b.split();
            let wire = sealed(&mut out, &[b"ms a 1 q\r\nb\r\n"]);
            let half = wire.len() / 2;
            let mut sock = Counted {
                sock: drip(wire[..half].to_vec(), 1 << 20, false),
                reads: 0,
            };
            let mut buf = [0u8; 64];
            let e = if edge {
                inb.read_available(&mut sock, &mut buf).unwrap_err()
            } else {
                inb.read_from(&mut sock, &mut buf).unwrap_err()
            };
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            (inb, wire[half..].to_vec(), sock.reads)
        };
        // Half a frame, and the socket is empty: the blocking reader's
        // read asks the socket again, the edge-triggered one does not.
        let (_, _, reads) = part(false);
        assert_eq!(reads, 2);
        let (mut inb, rest, reads) = part(true);
        assert_eq!(reads, 1);
        // Nothing to read until the socket says more came.
        assert!(inb.drained());
        assert!(!inb.holds_whole_frame());
        let mut buf = [0u8; 64];
        let n = inb
            .read_available(&mut drip(rest, 1 << 20, false), &mut buf)
            .unwrap();
        assert_eq!(&buf[..n], b"ms a 1 q\r\nb\r\n");
        assert!(inb.drained());
        // A whole frame that does not open is reported by that read.
        let (_, b) = pair();
        let (_, mut inb) = b.split();
        let mut sock = drip(vec![0, 3, b'a', b'b', b'c'], 1 << 20, false);
        let e = inb.read_available(&mut sock, &mut buf).unwrap_err();
        assert_eq!(frame_error(&e), Some(FrameError::Short));
    }

    #[test]
    fn a_flipped_replayed_dropped_or_foreign_frame_ends_the_link() {
        let frames = |n: usize| {
            let (a, b) = pair();
            let (mut out, _) = a.split();
            let (_, inb) = b.split();
            let mut wire = Vec::new();
            let mut ends = Vec::new();
            for i in 0..n {
                out.seal(format!("frame {i}\r\n").as_bytes()).unwrap();
                out.flush_to(&mut wire).unwrap();
                ends.push(wire.len());
            }
            (wire, ends, inb)
        };
        let refused = |inb: &mut Inbound, wire: Vec<u8>| {
            let mut sock = drip(wire, 5, true);
            let mut got = Vec::new();
            let mut buf = [0u8; 64];
            let err = loop {
                match inb.read_from(&mut sock, &mut buf) {
                    Ok(0) => panic!("accepted: {:?}", String::from_utf8_lossy(&got)),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => break e,
                }
            };
            (got, err)
        };
        // A flipped bit in the second frame: the first is read, nothing after.
        let (mut wire, ends, mut inb) = frames(3);
        wire[ends[0] + 5] ^= 1;
        let (got, e) = refused(&mut inb, wire);
        assert_eq!(got, b"frame 0\r\n");
        assert_eq!(frame_error(&e), Some(FrameError::Decrypt));
        // And for ever after.
        let e = inb
            .read_from(&mut drip(vec![], 1, true), &mut [0; 4])
            .unwrap_err();
        assert_eq!(frame_error(&e), Some(FrameError::Decrypt));
        // The first frame again (a replay).
        let (wire, ends, mut inb) = frames(2);
        let mut replayed = wire[..ends[0]].to_vec();
        replayed.extend_from_slice(&wire[..ends[0]]);
        let (got, e) = refused(&mut inb, replayed);
        assert_eq!(got, b"frame 0\r\n");
        assert_eq!(frame_error(&e), Some(FrameError::Decrypt));
        // The first frame dropped.
        let (wire, ends, mut inb) = frames(2);
        let (got, _) = refused(&mut inb, wire[ends[0]..].to_vec());
        assert!(got.is_empty());
        // Another link's frames (another handshake's keys).
        let (wire, _, _) = frames(1);
        let (_, _, mut inb) = frames(1);
        let (got, _) = refused(&mut inb, wire);
        assert!(got.is_empty());
        // A frame shorter than a tag; plaintext injected as is.
        let (_, _, mut inb) = frames(1);
        let (_, e) = refused(&mut inb, vec![0, 3, b'a', b'b', b'c']);
        assert_eq!(frame_error(&e), Some(FrameError::Short));
        let (_, _, mut inb) = frames(1);
        let (got, _) = refused(&mut inb, b"ms injected 1 q\r\nx\r\n".to_vec());
        assert!(got.is_empty());
    }

    #[test]
    fn a_close_inside_a_frame_is_an_error_and_handovers_keep_the_bytes() {
        let (a, b) = pair();
        let (mut out, _) = a.split();
        let (_, mut inb) = b.split();
        let wire = sealed(&mut out, &[b"OK\r\n", b"ms a 1 q\r\nb\r\n"]);
        let cut = wire.len() - 3;
        let e = read_all(&mut inb, &mut drip(wire[..cut].to_vec(), 1000, true), 2).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);

        // "OK" read, the rest moved to another Inbound of the same keys.
        let (a, b) = pair();
        let (mut out, _) = a.split();
        let (_, mut inb) = b.split();
        let wire = sealed(&mut out, &[b"OK\r\n", b"ms a 1 q\r\nb\r\n", b"mn\r\n"]);
        let split_at = wire.len() - 8;
        let mut buf = [0u8; 2];
        let mut sock = drip(wire[..split_at].to_vec(), 1 << 20, false);
        assert_eq!(inb.read_from(&mut sock, &mut buf).unwrap(), 2);
        assert_eq!(&buf, b"OK");
        let (plain, raw) = inb.take_buffers();
        assert_eq!(plain, b"\r\n");
        let mut moved = inb;
        moved.push_raw(&raw);
        moved.push_plain(&plain);
        let mut rest = drip(wire[split_at..].to_vec(), 3, true);
        assert_eq!(
            read_all(&mut moved, &mut rest, 5).unwrap(),
            b"\r\nms a 1 q\r\nb\r\nmn\r\n"
        );
    }
}
