//! The UDP transport (`-U`): one [`UdpEndpoint`] per UDP socket per worker
//! (each worker polls its own clone of the socket, as memcached gives every
//! worker thread the UDP descriptor), turning datagrams into session input
//! and session output into reply datagrams, the way memcached 1.6.18 does.
//!
//! Every datagram, request or reply, starts with an 8-byte frame header of
//! four big-endian u16 fields:
//!
//! ```text
//!  byte 0       2          4          6          8
//!       +-------+----------+----------+----------+------------------------+
//!       | reqid | sequence | datagram | reserved | payload: text or binary|
//!       |       | number   | count    | (0)      | protocol bytes         |
//!       +-------+----------+----------+----------+------------------------+
//! ```
//!
//! Requests:
//! * a datagram of 8 bytes or less is ignored (not even counted in
//!   `bytes_read`);
//! * one whose datagram count is not exactly 1 is dropped without a reply
//!   (memcached accepts only single-datagram requests); sequence number and
//!   reserved field are not looked at;
//! * the payload's first byte picks the protocol (0x80: binary), whatever
//!   `-B` says;
//! * a text line cut off by the end of the datagram is dropped, but a
//!   storage command whose data block is cut off continues with the *next
//!   datagram read from the socket, whole and raw* (header included, from
//!   any sender, only as many bytes as the block still needs), and so does
//!   swallowing a refused value: memcached reads the rest of a data block
//!   straight from the socket. Replies wait until the block is complete.
//!
//! Replies: each memcached response (one per command, one per key of a
//! multi-key get, END riding on the last) is sent as its own datagrams of
//! at most 1400 bytes, header included, numbered 0..n-1 with the count n in
//! every header and the request id echoed. A noreply response is not sent;
//! an empty one (`quit`, or a get whose first key missed) goes out as a bare
//! header with count 0 when it is first in line, and is dropped silently
//! right after another response, as memcached's `_transmit_post` does.
//!
//! When replies go out matters where memcached drops some: it sends at
//! once after a get, `quit` or `mn` (a *flush point*), and otherwise when
//! the datagram is used up or after `-R` commands. So replies up to the
//! last flush point are sent even when a later command waits for its data
//! block or closes the "connection" (a line too long, an HTTP request),
//! which drops the rest; a get with a too-long key drops the replies since
//! the last flush point. `quit` drops the rest of its datagram and, like
//! memcached's never-cleared `close_after_write`, makes every later flush
//! point or `-R` yield on this endpoint end its datagram too.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use mio::net::UdpSocket;
use osmium_protocol::text::Keys;

use crate::session::{
    Flow, Peer, Protocol, ReplyShape, ResponseMark, Session, BINARY_REQUEST_MAGIC,
};
use crate::worker::WorkerCtx;

/// Bytes of the frame header.
pub const UDP_HEADER_SIZE: usize = 8;
/// Largest reply datagram, header included.
pub const UDP_MAX_PAYLOAD_SIZE: usize = 1400;
/// Reply bytes per datagram.
pub const UDP_DATA_SIZE: usize = UDP_MAX_PAYLOAD_SIZE - UDP_HEADER_SIZE;
/// memcached's receive buffer: the most one read takes from the socket.
pub const UDP_READ_BUFFER_SIZE: usize = 65536;
/// memcached asks for this send buffer (the kernel caps it).
pub const UDP_SEND_BUFFER_SIZE: usize = 256 << 20;
/// Length of a binary protocol header (for splitting binary replies).
const BINARY_HEADER_SIZE: usize = 24;

/// What `drive` left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Nothing more until the socket is readable (or writable) again.
    Idle,
    /// Its share of this turn is used up; run it again soon.
    MoreWork,
}

/// Which of the replies to send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    All,
    /// Those up to the last flush point; the others wait.
    Flushed,
}

/// Where sending a batch of replies stands.
#[derive(Debug, Clone, Copy, Default)]
struct Transmit {
    /// Send the responses before this index into the session's marks.
    limit: usize,
    /// Index into the session's response marks.
    response: usize,
    /// Bytes of that response already sent.
    sent: usize,
    sequence: u16,
    total: u16,
    /// The response's first datagram has gone out.
    started: bool,
}

/// One worker's handle on one UDP socket, with memcached's per-thread UDP
/// "connection" state.
pub struct UdpEndpoint {
    socket: UdpSocket,
    local: Option<SocketAddr>,
    session: Session,
    /// Receive buffer (one datagram).
    datagram: Vec<u8>,
    /// Send buffer (one datagram).
    frame: Vec<u8>,
    /// Header and sender of the request the held replies answer.
    request_id: u16,
    reply_to: Option<SocketAddr>,
    /// Replies still to send (the socket's buffer was full).
    transmit: Option<Transmit>,
    /// The current datagram has commands left after a `-R` yield.
    input_pending: bool,
}

impl UdpEndpoint {
    pub fn new(socket: UdpSocket) -> UdpEndpoint {
        let local = socket.local_addr().ok();
        let mut session = Session::new(
            socket.as_raw_fd(),
            Peer::Udp {
                remote: None,
                local,
            },
            Protocol::Text,
        );
        session.udp = true;
        UdpEndpoint {
            socket,
            local,
            session,
            datagram: vec![0; UDP_READ_BUFFER_SIZE],
            frame: Vec::with_capacity(UDP_MAX_PAYLOAD_SIZE),
            request_id: 0,
            reply_to: None,
            transmit: None,
            input_pending: false,
        }
    }

    pub fn socket(&mut self) -> &mut UdpSocket {
        &mut self.socket
    }

    pub fn fd(&self) -> i32 {
        self.session.fd
    }

    /// Sends what is pending, then reads and answers datagrams until the
    /// socket has none (or `-R` datagrams were handled this turn).
    pub fn drive(&mut self, ctx: &WorkerCtx) -> Progress {
        let mut handled = 0;
        loop {
            if self.transmit.is_some() && !self.send_replies(ctx) {
                return Progress::Idle; // waits for writable
            }
            if self.input_pending {
                self.run_batch(ctx);
                continue;
            }
            if handled >= ctx.reqs_per_event {
                return Progress::MoreWork;
            }
            match self.socket.recv_from(&mut self.datagram) {
                Ok((len, from)) => {
                    handled += 1;
                    self.on_datagram(ctx, len, from);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Progress::Idle,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => handled += 1, // a queued ICMP error and the like
            }
        }
    }

    /// Drops everything in flight after a handler panic.
    pub fn reset(&mut self) {
        self.discard();
    }

    /// The session waits for the rest of a data block (or of a binary
    /// request's body), which memcached reads straight from the socket. A
    /// binary header cut short is not that: memcached drops it.
    fn awaiting_data_block(&self) -> bool {
        let s = &self.session;
        let header_cut = s.protocol == Protocol::Binary && s.input().len() < BINARY_HEADER_SIZE;
        s.swallow > 0 || (s.need > 0 && !header_cut)
    }

    fn on_datagram(&mut self, ctx: &WorkerCtx, len: usize, from: SocketAddr) {
        if self.awaiting_data_block() {
            // memcached read()s the rest of a data block from the socket:
            // the next datagram, raw, truncated to what the block needs.
            if len == 0 {
                // read() == 0 is end of stream: memcached's conn_closing.
                self.discard();
                return;
            }
            let want = if self.session.swallow > 0 {
                self.session.swallow.min(UDP_READ_BUFFER_SIZE)
            } else {
                self.session.need.saturating_sub(self.session.input().len())
            };
            let take = len.min(want);
            ctx.stats.bytes_read.add(take as u64);
            let space = self.session.read_space(&ctx.buffers);
            space[..take].copy_from_slice(&self.datagram[..take]);
            self.session.input_received(take);
            self.run_batch(ctx);
            return;
        }
        if len <= UDP_HEADER_SIZE {
            return;
        }
        ctx.stats.bytes_read.add(len as u64);
        let header = &self.datagram[..UDP_HEADER_SIZE];
        self.request_id = u16::from_be_bytes([header[0], header[1]]);
        self.reply_to = Some(from);
        if header[4..6] != [0, 1] {
            return; // a request spanning several datagrams
        }
        let payload = &self.datagram[UDP_HEADER_SIZE..len];
        self.session.protocol = if payload[0] == BINARY_REQUEST_MAGIC {
            Protocol::Binary
        } else {
            Protocol::Text
        };
        self.session.set_input(payload);
        self.session.close_after_write = false;
        self.session.peer = Peer::Udp {
            remote: Some(from),
            local: self.local,
        };
        self.run_batch(ctx);
    }

    /// Executes the buffered requests and decides what happens to the
    /// replies and to the rest of the datagram.
    fn run_batch(&mut self, ctx: &WorkerCtx) {
        self.input_pending = false;
        let mut flow = self.session.process(ctx);
        if ctx.shared.shutdown.load(Ordering::Relaxed) {
            // `shutdown` closes the "connection" as memcached does.
            flow = Flow::Close;
        }
        match flow {
            // A line too long, an HTTP request, shutdown: memcached's
            // conn_closing drops the replies not yet flushed and the rest of
            // the datagram.
            Flow::Close => {
                self.drop_unflushed();
                self.session.set_input(&[]);
                self.start_transmit(Send::All);
            }
            Flow::Yield => {
                self.start_transmit(Send::All);
                if self.session.udp_stop_at_flush {
                    self.drop_input();
                } else {
                    self.input_pending = true;
                }
            }
            Flow::Wait if self.session.close_after_write => {
                // quit: send what came before it, drop what follows.
                self.session.close_after_write = false;
                self.session.udp_stop_at_flush = true;
                self.drop_input();
                self.start_transmit(Send::All);
            }
            Flow::Wait if self.awaiting_data_block() => {
                // Hold the replies since the last flush point until the
                // data block is complete.
                self.start_transmit(Send::Flushed);
            }
            Flow::Wait => {
                // Done, or a line cut off by the end of the datagram.
                self.drop_input();
                self.start_transmit(Send::All);
            }
        }
    }

    fn drop_input(&mut self) {
        self.session.rstart = self.session.rend;
    }

    /// How many responses lead up to the last flush point.
    fn flushed_responses(&self) -> usize {
        let marks = &self.session.responses;
        marks.iter().rposition(|m| m.flush).map_or(0, |i| i + 1)
    }

    /// Forgets the responses after the last flush point.
    fn drop_unflushed(&mut self) {
        let keep = self.flushed_responses();
        let s = &mut self.session;
        if let Some(m) = s.responses.get(keep) {
            s.wbuf.truncate(m.start);
            s.responses.truncate(keep);
        } else if keep == 0 {
            s.wbuf.clear();
        }
    }

    /// Forgets held replies, unsent datagrams and any partial request.
    fn discard(&mut self) {
        let s = &mut self.session;
        s.set_input(&[]);
        s.wbuf.clear();
        s.wpos = 0;
        s.responses.clear();
        self.transmit = None;
        self.input_pending = false;
    }

    /// Queues the replies for sending: all of them, or only those up to
    /// the last flush point (the rest are held).
    fn start_transmit(&mut self, which: Send) {
        let mut limit = match which {
            Send::All => self.session.responses.len(),
            Send::Flushed => self.flushed_responses(),
        };
        let s = &mut self.session;
        if s.protocol == Protocol::Binary && s.responses.is_empty() {
            // Binary requests that recorded no marks: split the replies on
            // their headers; with no flush marks, send all or hold all.
            mark_binary_replies(&mut s.responses, &s.wbuf);
            limit = match which {
                Send::All => s.responses.len(),
                Send::Flushed => 0,
            };
        }
        if !s.wbuf.is_empty() && !matches!(s.responses.first(), Some(m) if m.start == 0) {
            // Output no command claimed: one response.
            s.responses.insert(0, ResponseMark::default());
            if which == Send::All || limit > 0 {
                limit += 1;
            }
        }
        if limit > 0 {
            self.transmit = Some(Transmit {
                limit,
                ..Transmit::default()
            });
        }
    }

    /// Sends the queued responses, each as its own datagrams. False when
    /// the socket's buffer is full (resume on writable).
    fn send_replies(&mut self, ctx: &WorkerCtx) -> bool {
        let Some(mut tx) = self.transmit else {
            return true;
        };
        let Some(to) = self.reply_to else {
            self.discard();
            return true;
        };
        let out = &self.session.wbuf;
        let marks = &self.session.responses;
        let end_of = |i: usize| marks.get(i + 1).map_or(out.len(), |m| m.start);
        let is_empty = |i: usize| marks[i].suppressed || end_of(i) == marks[i].start;
        while tx.response < tx.limit {
            let start = marks[tx.response].start;
            let end = end_of(tx.response);
            if !tx.started {
                if marks[tx.response].suppressed {
                    tx.response += 1;
                    continue;
                }
                let datagrams = (end - start).div_ceil(UDP_DATA_SIZE);
                tx.total = datagrams.min(usize::from(u16::MAX)) as u16;
                tx.sequence = 0;
                tx.sent = 0;
                tx.started = true;
            }
            let from = start + tx.sent;
            let chunk = &out[from..end.min(from + UDP_DATA_SIZE)];
            self.frame.clear();
            self.frame.extend_from_slice(&self.request_id.to_be_bytes());
            self.frame.extend_from_slice(&tx.sequence.to_be_bytes());
            self.frame.extend_from_slice(&tx.total.to_be_bytes());
            self.frame.extend_from_slice(&[0, 0]);
            self.frame.extend_from_slice(chunk);
            match self.socket.send_to(&self.frame, to) {
                Ok(n) => ctx.stats.bytes_written.add(n as u64),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.transmit = Some(tx);
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // memcached gives up on the reply.
                    if ctx.shared.stats.verbosity.load(Ordering::Relaxed) > 0 {
                        eprintln!("Failed to write, and not due to blocking: {e}");
                    }
                    tx.response = tx.limit;
                    break;
                }
            }
            tx.sent += chunk.len();
            tx.sequence = tx.sequence.wrapping_add(1);
            if start + tx.sent == end {
                tx.started = false;
                tx.response += 1;
                // Finishing a response also finishes the noreply and empty
                // ones right behind it, unsent (memcached's _transmit_post).
                while tx.response < tx.limit && is_empty(tx.response) {
                    tx.response += 1;
                }
            }
        }
        self.transmit = None;
        // Forget what was sent; held responses move to the front.
        let s = &mut self.session;
        let cut = s.responses.get(tx.limit).map_or(s.wbuf.len(), |m| m.start);
        if cut == s.wbuf.len() {
            s.wbuf.clear();
            s.wpos = 0;
            if s.wbuf.capacity() > 4 << 20 {
                s.wbuf.shrink_to(crate::session::READ_CHUNK);
            }
        } else {
            s.wbuf.drain(..cut);
        }
        s.responses.drain(..tx.limit);
        for m in &mut s.responses {
            m.start -= cut;
        }
        true
    }
}

/// Records the responses a text command wrote to `wbuf` from `start`.
/// True when memcached would send them at once (a flush point).
pub fn mark_replies(
    responses: &mut Vec<ResponseMark>,
    wbuf: &mut Vec<u8>,
    start: usize,
    shape: ReplyShape<'_>,
) -> bool {
    let (suppressed, flush) = match shape {
        ReplyShape::PerKey(keys) => return mark_get_replies(responses, wbuf, start, keys),
        ReplyShape::Single => (wbuf.len() == start, false),
        ReplyShape::Flush => (wbuf.len() == start, true),
        ReplyShape::Empty => (false, true),
    };
    responses.push(ResponseMark {
        start,
        suppressed,
        flush,
    });
    flush
}

/// memcached starts a response per key of a get: a hit holds its VALUE
/// block, a miss is empty, and END goes on the last one; then it flushes.
/// The blocks are matched to the keys in order. A get that fails (a key
/// too long) drops every response since the last flush point, as
/// memcached's `conn_release_items` does, and is not a flush point.
fn mark_get_replies(
    responses: &mut Vec<ResponseMark>,
    wbuf: &mut Vec<u8>,
    start: usize,
    keys: Keys<'_>,
) -> bool {
    let before = responses.len();
    let mut pos = start;
    for key in keys {
        responses.push(ResponseMark {
            start: pos,
            suppressed: false,
            flush: false,
        });
        match value_block_len(&wbuf[pos..], key) {
            Some(len) => pos += len,
            None if wbuf[pos..].starts_with(b"VALUE ") || wbuf[pos..] == *b"END\r\n" => {} // a miss
            None => {
                // An error reply instead of VALUE blocks.
                responses.truncate(before);
                let keep = responses.iter().rposition(|m| m.flush).map_or(0, |i| i + 1);
                let cut = responses.get(keep).map_or(start, |m| m.start);
                wbuf.drain(cut..start);
                responses.truncate(keep);
                responses.push(ResponseMark {
                    start: cut,
                    suppressed: false,
                    flush: false,
                });
                return false;
            }
        }
    }
    if responses.len() == before {
        responses.push(ResponseMark::default());
        responses[before].start = start;
    }
    if let Some(last) = responses.last_mut() {
        last.flush = true;
    }
    true
}

/// Length of `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n` at the
/// start of `out`, if it is the block of `key`.
fn value_block_len(out: &[u8], key: &[u8]) -> Option<usize> {
    let rest = out
        .strip_prefix(b"VALUE ")?
        .strip_prefix(key)?
        .strip_prefix(b" ")?;
    let line_end = memchr_crlf(rest)?;
    let mut fields = rest[..line_end].split(|&b| b == b' ');
    let _flags = fields.next()?;
    let bytes: usize = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let header = b"VALUE ".len() + key.len() + 1 + line_end + 2;
    let total = header.checked_add(bytes)?.checked_add(2)?;
    (total <= out.len()).then_some(total)
}

fn memchr_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// Binary replies are self-delimiting: one response per 24-byte header
/// plus its body.
fn mark_binary_replies(responses: &mut Vec<ResponseMark>, wbuf: &[u8]) {
    responses.clear();
    let mut pos = 0;
    while pos < wbuf.len() {
        responses.push(ResponseMark {
            start: pos,
            ..ResponseMark::default()
        });
        let Some(header) = wbuf.get(pos..pos + BINARY_HEADER_SIZE) else {
            break;
        };
        let body = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        pos = pos.saturating_add(BINARY_HEADER_SIZE + body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osmium_protocol::text::{parse_command, Command};

    fn get_marks(line: &[u8], out: &[u8]) -> Vec<(usize, bool)> {
        let Command::Get { keys, .. } = parse_command(line) else {
            panic!("not a get");
        };
        let mut marks = Vec::new();
        let mut out = out.to_vec();
        assert!(mark_replies(
            &mut marks,
            &mut out,
            0,
            ReplyShape::PerKey(keys)
        ));
        assert!(marks.last().unwrap().flush);
        marks.iter().map(|m| (m.start, m.suppressed)).collect()
    }

    #[test]
    fn get_responses_are_per_key() {
        let a = b"VALUE a 0 1\r\nx\r\n";
        let mut out = a.to_vec();
        out.extend_from_slice(b"END\r\n");
        assert_eq!(get_marks(b"get a", &out), [(0, false)]);
        assert_eq!(get_marks(b"get nx a", &out), [(0, false), (0, false)]);
        assert_eq!(get_marks(b"get a nx", &out), [(0, false), (a.len(), false)]);
        let mut two = a.to_vec();
        two.extend_from_slice(b"VALUE bb 5 2 77\r\nyy\r\nEND\r\n");
        assert_eq!(
            get_marks(b"gets a bb", &two),
            [(0, false), (a.len(), false)]
        );
        assert_eq!(get_marks(b"get nx", b"END\r\n"), [(0, false)]);
        // A value whose data looks like another VALUE line.
        let tricky = b"VALUE a 0 13\r\nVALUE b 0 1\r\n\r\nEND\r\n";
        assert_eq!(get_marks(b"get a b", tricky), [(0, false), (29, false)]);
    }

    #[test]
    fn failed_get_drops_replies_since_last_flush() {
        let mut out = b"VALUE a 0 1\r\nx\r\nEND\r\nSTORED\r\n".to_vec();
        let mut marks = vec![
            ResponseMark {
                start: 0,
                suppressed: false,
                flush: true,
            },
            ResponseMark {
                start: 21,
                suppressed: false,
                flush: false,
            },
        ];
        out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
        let Command::Get { keys, .. } = parse_command(b"get a") else {
            panic!()
        };
        assert!(!mark_replies(
            &mut marks,
            &mut out,
            29,
            ReplyShape::PerKey(keys)
        ));
        assert_eq!(
            out,
            b"VALUE a 0 1\r\nx\r\nEND\r\nCLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(marks.len(), 2);
        assert_eq!((marks[1].start, marks[1].flush), (21, false));
    }

    #[test]
    fn single_replies_mark_noreply_as_suppressed() {
        let mut marks = Vec::new();
        let mut out = b"STORED\r\n".to_vec();
        assert!(!mark_replies(&mut marks, &mut out, 0, ReplyShape::Single));
        assert!(!mark_replies(&mut marks, &mut out, 8, ReplyShape::Single));
        assert!(mark_replies(&mut marks, &mut out, 8, ReplyShape::Empty));
        let got: Vec<(usize, bool, bool)> = marks
            .iter()
            .map(|m| (m.start, m.suppressed, m.flush))
            .collect();
        assert_eq!(got, [(0, false, false), (8, true, false), (8, false, true)]);
    }

    #[test]
    fn binary_replies_split_on_headers() {
        let mut out = vec![0x81u8; 24];
        out[8..12].copy_from_slice(&5u32.to_be_bytes());
        out.extend_from_slice(b"hello");
        let mut second = vec![0x81u8; 24];
        second[8..12].copy_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&second);
        out.extend_from_slice(&[0x81, 0]); // truncated: still one response
        let mut marks = Vec::new();
        mark_binary_replies(&mut marks, &out);
        let starts: Vec<usize> = marks.iter().map(|m| m.start).collect();
        assert_eq!(starts, [0, 29, 53]);
    }
}
