//! The UDP transport (`-U`): one [`UdpEndpoint`] per UDP socket per worker
//! (each worker polls its own clone of the socket, as memcached gives every
//! worker thread the UDP descriptor), turning datagrams into session input
//! and session output into reply datagrams, the way memcached 1.6.45 does.
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
//! once after `quit` or `mn` (a *flush point*; a get is not one), and
//! otherwise when the datagram is used up or after `-R` commands. So
//! replies up to the last flush point are sent even when a later command
//! waits for its data block or closes the "connection" (a line too long,
//! an HTTP request, `shutdown`), which drops the rest; a get with a
//! too-long key drops the replies since the last flush point. `quit` drops the rest of its datagram and, like
//! memcached's never-cleared `close_after_write`, makes every later flush
//! point or `-R` yield on this endpoint end its datagram too.
//!
//! A datagram endpoint's output copies every value into its buffer (it
//! never queues values in item memory), and the replies are framed from
//! that buffer as above: the session's [`Sink`] here has nothing to send.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use mio::net::UdpSocket;
use osmium_protocol::binary::REQUEST_MAGIC;

use crate::compose::output::{Output, Sink};
use crate::compose::udp_marks::{mark_binary_replies, ResponseMark};
use crate::context::WorkerCtx;
use crate::session::{Flow, Protocol, Session};
use crate::stats::counters::ThreadStats;

/// Bytes of the frame header.
pub(crate) const UDP_HEADER_SIZE: usize = 8;
/// Largest reply datagram, header included.
pub(crate) const UDP_MAX_PAYLOAD_SIZE: usize = 1400;
/// Reply bytes per datagram.
pub(crate) const UDP_DATA_SIZE: usize = UDP_MAX_PAYLOAD_SIZE - UDP_HEADER_SIZE;
/// memcached's receive buffer: the most one read takes from the socket.
pub(crate) const UDP_READ_BUFFER_SIZE: usize = 65536;
/// memcached asks for this send buffer (the kernel caps it).
pub(crate) const UDP_SEND_BUFFER_SIZE: usize = 256 << 20;

/// What `drive` left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
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

/// The session's sink on a datagram endpoint: its output never references
/// values (`Output::datagram`), so there is never a queue to take; the
/// replies are framed once the batch is done.
struct Framed;

impl Sink for Framed {
    fn send(&mut self, out: &mut Output, _stats: &ThreadStats) -> io::Result<bool> {
        out.sent_queue(0);
        Ok(false)
    }
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
pub(crate) struct UdpEndpoint {
    socket: UdpSocket,
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
    pub(crate) fn new(socket: UdpSocket) -> UdpEndpoint {
        let session = Session::datagram(socket.as_raw_fd());
        UdpEndpoint {
            socket,
            session,
            datagram: vec![0; UDP_READ_BUFFER_SIZE],
            frame: Vec::with_capacity(UDP_MAX_PAYLOAD_SIZE),
            request_id: 0,
            reply_to: None,
            transmit: None,
            input_pending: false,
        }
    }

    /// Sends what is pending, then reads and answers datagrams until the
    /// socket has none (or `-R` datagrams were handled this turn).
    pub(crate) fn drive(&mut self, ctx: &WorkerCtx) -> Progress {
        let mut handled = 0;
        loop {
            if self.transmit.is_some() && !self.send_replies(ctx) {
                return Progress::Idle; // waits for writable
            }
            if self.input_pending {
                self.run_batch(ctx);
                continue;
            }
            if handled >= ctx.shared.settings.reqs_per_event {
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
    /// The socket's descriptor.
    pub(crate) fn fd(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.socket)
    }

    pub(crate) fn reset(&mut self) {
        self.discard();
    }

    /// The session waits for the rest of a data block (or of a binary
    /// request's body), which memcached reads straight from the socket.
    fn awaiting_data_block(&self) -> bool {
        self.session.awaiting_block() > 0
    }

    fn on_datagram(&mut self, ctx: &WorkerCtx, len: usize, from: SocketAddr) {
        let awaiting = self.session.awaiting_block();
        if awaiting > 0 {
            // memcached read()s the rest of a data block from the socket:
            // the next datagram, raw, truncated to what the block needs.
            if len == 0 {
                // read() == 0 is end of stream: memcached's conn_closing.
                self.discard();
                return;
            }
            let take = len.min(awaiting).min(UDP_READ_BUFFER_SIZE);
            ctx.stats.bytes_read.add(take as u64);
            self.session.append_input(&self.datagram[..take]);
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
        self.session.protocol = if payload[0] == REQUEST_MAGIC {
            Protocol::Binary
        } else {
            Protocol::Text
        };
        self.session.set_datagram(payload);
        self.run_batch(ctx);
    }

    /// Executes the buffered requests and decides what happens to the
    /// replies and to the rest of the datagram.
    fn run_batch(&mut self, ctx: &WorkerCtx) {
        self.input_pending = false;
        let mut flow = self.session.process(ctx, &mut Framed);
        if ctx.shared.stop_requested().is_some() {
            // `shutdown` closes the "connection" as memcached does.
            flow = Flow::Close;
        }
        match flow {
            // A line too long, an HTTP request, shutdown: memcached's
            // conn_closing drops the replies not yet flushed and the rest of
            // the datagram.
            Flow::Close => {
                self.drop_unflushed();
                self.session.drop_input();
                self.start_transmit(Send::All);
            }
            // A datagram session reads flash itself (never `Flash`).
            Flow::Yield | Flow::Flash => {
                self.start_transmit(Send::All);
                if self.stop_at_flush() {
                    self.drop_input();
                } else {
                    self.input_pending = true;
                }
            }
            Flow::Wait if self.session.take_close_after_write() => {
                // quit: send what came before it, drop what follows.
                if let Some(d) = self.session.datagram.as_mut() {
                    d.stop_at_flush = true;
                }
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
        self.session.drop_input();
    }

    fn stop_at_flush(&self) -> bool {
        self.session
            .datagram
            .as_ref()
            .is_some_and(|d| d.stop_at_flush)
    }

    /// How many responses lead up to the last flush point.
    fn flushed_responses(&mut self) -> usize {
        let marks = &self.session.output().marks;
        marks.iter().rposition(|m| m.flush).map_or(0, |i| i + 1)
    }

    /// Forgets the responses after the last flush point.
    fn drop_unflushed(&mut self) {
        let keep = self.flushed_responses();
        let out = self.session.output();
        if let Some(start) = out.marks.get(keep).map(|m| m.start) {
            out.truncate(start);
            out.marks.truncate(keep);
        } else if keep == 0 {
            out.clear();
        }
    }

    /// Forgets held replies, unsent datagrams and any partial request.
    fn discard(&mut self) {
        self.session.reset();
        self.transmit = None;
        self.input_pending = false;
    }

    /// Queues the replies for sending: all of them, or only those up to
    /// the last flush point (the rest are held).
    fn start_transmit(&mut self, which: Send) {
        let mut limit = match which {
            Send::All => self.session.output().marks.len(),
            Send::Flushed => self.flushed_responses(),
        };
        let binary = self.session.protocol == Protocol::Binary;
        let out = self.session.output();
        if binary && out.marks.is_empty() {
            // Binary requests that recorded no marks: split the replies on
            // their headers; with no flush marks, send all or hold all.
            let mut marks = std::mem::take(&mut out.marks);
            mark_binary_replies(&mut marks, out.composed());
            out.marks = marks;
            limit = match which {
                Send::All => out.marks.len(),
                Send::Flushed => 0,
            };
        }
        if !out.is_empty() && !matches!(out.marks.first(), Some(m) if m.start == 0) {
            // Output no command claimed: one response.
            out.marks.insert(0, ResponseMark::default());
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
        let output = self.session.output();
        let out = output.composed();
        let marks = &output.marks;
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
                    if ctx.shared.verbose() > 0 {
                        tracing::info!("Failed to write, and not due to blocking: {e}");
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
        let output = self.session.output();
        let cut = output.marks.get(tx.limit).map_or(output.len(), |m| m.start);
        output.marks.drain(..tx.limit);
        if cut == output.len() {
            output.clear();
        } else {
            output.drain_front(cut);
        }
        true
    }
}
