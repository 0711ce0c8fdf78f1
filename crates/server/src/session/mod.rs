//! Session framing: one client's byte stream turned into requests, and the
//! state that lives between them. A session does not know where its bytes
//! come from: the transports (TCP, unix sockets, UDP datagrams) feed it
//! through [`Session::read_target`] / [`Session::received`] (or
//! [`Session::set_datagram`]) and send [`Session::output`]; while it runs
//! requests, it hands the output's queue of values in item memory to the
//! transport's [`Sink`] whenever they must leave (see `Output`).
//!
//! ```text
//!   transport ──bytes──▶ ReadBuffer ──frames──▶ parse ──Request──▶ execute ──▶ Output ──bytes──▶ transport
//!                         (text lines + data blocks, binary packets)
//! ```
//!
//! The protocol is chosen per session from its first byte (memcached's
//! `-B auto`): 0x80 is a binary request magic, anything else is text
//! (`text`, `binary`; `-Y` connections first go through `login`).
//!
//! Between requests a session may be: swallowing the data block of a
//! refused storage command; waiting for a data block to be buffered;
//! reading a large data block straight into its item (`incoming`);
//! streaming a huge multi-get's keys as they arrive (`text`); streaming a
//! dump as the socket drains (`dump`); or done (`quit`: nothing after it is
//! run). Buffers are lent by the worker's pool while the session has input
//! or output, and given back when it is idle (see `buffers`). Between two
//! requests a stream session can be written down for a binary upgrade and
//! put back in the next image (`carried`).

mod binary;
mod carried;
mod login;
mod text;
mod verbose;

use std::sync::Arc;

use osmium_protocol::binary::REQUEST_MAGIC;
use osmium_protocol::request::KeyBuffer;

use crate::buffers::{NoBuffer, ReadBuffer};
use crate::compose::output::{Output, Sink, WRITE_HIGH_WATER};
use crate::conns::{Activity, State};
use crate::context::{WorkerCtx, WORKER_OUTPUT_BUDGET};
use crate::execute::store::IncomingStore;
use crate::execute::{AuthState, ConnView, Dump};
use crate::logger::CloseReason;
use crate::stats::counters::ThreadStats;

/// Which wire protocol a session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Decided by the first byte received (`-B auto`).
    Negotiating,
    Text,
    Binary,
}

/// Why processing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Waiting for more input (or for output to drain).
    Wait,
    /// Stopped after `-R` requests (or at the output limits) with more to
    /// do: run again after the other connections.
    Yield,
    /// Close now, dropping queued output.
    Close,
    /// The next request waits for flash reads (`WorkerCtx::flash_wanted`):
    /// send what is queued, read them, then run it (again).
    Flash,
}

/// Requests whose keys' hashes `Ahead` holds: a 16-deep pipeline.
pub(crate) const AHEAD_CAPACITY: usize = 16;
/// How many requests ahead of the one executing an item is prefetched.
pub(crate) const AHEAD_DISTANCE: usize = 4;

/// The hashes of the keys of the requests waiting in a session's input,
/// in order, as `osmium_protocol::peek` found them when the socket was
/// read; their index buckets are already being fetched. Running request i
/// prefetches the item of request i + `AHEAD_DISTANCE`, so a pipeline's
/// lookups overlap instead of each waiting for its item. A hint only: when
/// the peek and the parse disagree, a prefetch is wasted, nothing else.
#[derive(Default)]
pub(crate) struct Ahead {
    hashes: [u64; AHEAD_CAPACITY],
    len: u8,
    pos: u8,
}

impl Ahead {
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.pos = 0;
    }

    /// Adds the next request's hash; false when full.
    #[inline]
    pub(crate) fn push(&mut self, hash: u64) -> bool {
        let Some(slot) = self.hashes.get_mut(self.len as usize) else {
            return false;
        };
        *slot = hash;
        self.len += 1;
        true
    }

    /// Called as each request runs.
    #[inline]
    fn step(&mut self, store: &osmium_store::Store) {
        let i = self.pos as usize + AHEAD_DISTANCE;
        if i < self.len as usize {
            store.prefetch_item(self.hashes[i]);
        }
        self.pos = self.pos.saturating_add(1);
    }
}

/// Sends the values queued in `out` with what precedes them (what the
/// connection does not take is copied and the pin goes). A failed write
/// is met again, and reported, by the transport's next flush.
#[inline]
fn send_values<S: Sink>(out: &mut Output, sink: &mut S, stats: &ThreadStats) {
    if out.has_refs() {
        let _ = sink.send(out, stats);
    }
}

/// Before a request: a plain GET may gather values (see `Output`);
/// anything else first sends the values queued, so it runs unpinned (it
/// may take locks or wait for readers).
#[inline]
fn gather_for<S: Sink>(out: &mut Output, plain_get: bool, sink: &mut S, stats: &ThreadStats) {
    if !plain_get {
        send_values(out, sink, stats);
    }
    out.gather_values(plain_get);
}

/// A datagram endpoint's session state (see `transport::udp`).
#[derive(Debug, Default)]
pub(crate) struct DatagramState {
    /// After a `quit`, memcached's UDP connection keeps
    /// `close_after_write`, so every later flush ends its datagram.
    pub stop_at_flush: bool,
}

pub(crate) struct Session {
    /// The socket's descriptor (logs, `stats conns`).
    pub fd: i32,
    pub protocol: Protocol,
    input: ReadBuffer,
    output: Output,
    /// Bytes of a refused data block still to discard.
    swallow: usize,
    /// Don't parse again until this many bytes of input are buffered.
    need: usize,
    /// A large data block being read straight into its item.
    incoming: Option<IncomingStore>,
    /// `-vv`: log the incoming store's reply when it is composed.
    log_incoming: bool,
    /// A huge get line whose keys are served as they arrive.
    streaming: Option<text::StreamingGet>,
    /// A crawler dump being streamed.
    dump: Option<Dump>,
    /// quit (or a fatal binary error): send what is queued, then close.
    close_after_write: bool,
    /// Why the connection closes, when it does (the watchers'
    /// `conn_close`): `error` unless something names another reason.
    close_reason: CloseReason,
    pub auth: AuthState,
    login: login::Login,
    pub ahead: Ahead,
    keys: KeyBuffer,
    /// Set for a datagram endpoint's session.
    pub datagram: Option<DatagramState>,
    /// What `stats conns` shows of this client.
    activity: Option<Arc<Activity>>,
}

impl Session {
    /// A stream connection's session.
    pub(crate) fn stream(fd: i32, protocol: Protocol, activity: Option<Arc<Activity>>) -> Session {
        Session {
            fd,
            protocol,
            input: ReadBuffer::default(),
            output: Output::stream(),
            swallow: 0,
            need: 0,
            incoming: None,
            log_incoming: false,
            streaming: None,
            dump: None,
            close_after_write: false,
            close_reason: CloseReason::Error,
            auth: AuthState::default(),
            login: login::Login::default(),
            ahead: Ahead::default(),
            keys: KeyBuffer::new(),
            datagram: None,
            activity,
        }
    }

    /// A datagram endpoint's session.
    pub(crate) fn datagram(fd: i32) -> Session {
        Session {
            output: Output::datagram(),
            datagram: Some(DatagramState::default()),
            ..Session::stream(fd, Protocol::Text, None)
        }
    }

    /// Received bytes not yet consumed.
    #[inline]
    pub(crate) fn input(&self) -> &[u8] {
        self.input.input()
    }

    /// Whether the replies queued so far are to wait: memcached writes
    /// nothing while it reads a data block (a storage command's value, a
    /// binary request's extras, key or value) or swallows a refused one; it
    /// writes when it next waits for a new request.
    pub(crate) fn holds_output(&self) -> bool {
        let header_cut = self.protocol == Protocol::Binary
            && self.input.len() < osmium_protocol::binary::HEADER_LEN;
        self.swallow > 0 || self.incoming.is_some() || (self.need > 0 && !header_cut)
    }

    /// Whether no input is waiting.
    #[inline]
    pub(crate) fn input_is_empty(&self) -> bool {
        self.input.is_empty()
    }

    /// The output, for the transport to send.
    #[inline]
    pub(crate) fn output(&mut self) -> &mut Output {
        &mut self.output
    }

    /// Whether nothing more runs on this session (quit).
    #[inline]
    pub(crate) fn closing(&self) -> bool {
        self.close_after_write
    }

    /// Why the connection closes (see `CloseReason`).
    #[inline]
    pub(crate) fn close_reason(&self) -> CloseReason {
        self.close_reason
    }

    /// Names why the connection closes: the peer closed its end
    /// (`Normal`), the idle timeout, ...
    #[inline]
    pub(crate) fn set_close_reason(&mut self, reason: CloseReason) {
        self.close_reason = reason;
    }

    /// Whether a read now would fill a large data block's item rather than
    /// the read buffer.
    #[inline]
    pub(crate) fn reading_into_item(&self) -> bool {
        self.incoming.as_ref().is_some_and(|i| !i.item.is_filled())
    }

    /// Where the next read goes: the rest of a large data block's item, or
    /// the read buffer (made room in, lent by the pool if needed).
    pub(crate) fn read_target<'s>(
        &'s mut self,
        ctx: &'s WorkerCtx,
    ) -> Result<&'s mut [u8], NoBuffer> {
        if let Some(incoming) = self.incoming.as_mut().filter(|i| !i.item.is_filled()) {
            return Ok(ctx.store().incoming_space(&mut incoming.item));
        }
        self.input.space(&ctx.pool, self.need)
    }

    /// Records that `n` bytes were read into `read_target`.
    #[inline]
    pub(crate) fn received(&mut self, ctx: &WorkerCtx, n: usize) {
        if let Some(incoming) = self.incoming.as_mut().filter(|i| !i.item.is_filled()) {
            ctx.store().incoming_filled(&mut incoming.item, n);
            return;
        }
        self.input.received(n);
    }

    /// Starts fetching the index buckets of the keys of the requests
    /// waiting in the input (see `Ahead`); the hashes of the first
    /// `AHEAD_DISTANCE` go to `first_hashes` too, for their items to be
    /// prefetched once every connection of the turn has been read.
    pub(crate) fn peek_ahead(&mut self, store: &osmium_store::Store, first_hashes: &mut Vec<u64>) {
        self.ahead.clear();
        for (i, key) in osmium_protocol::peek::keys(self.input.input()).enumerate() {
            let hash = store.prefetch_bucket(key);
            if i < AHEAD_DISTANCE {
                first_hashes.push(hash);
            }
            if !self.ahead.push(hash) {
                break;
            }
        }
    }

    /// As `peek_ahead` for a connection read on its own (its turn does
    /// not gather reads): the buckets of the requests waiting are fetched,
    /// then the items of the first `AHEAD_DISTANCE`, so a pipeline's first
    /// lookups overlap too (a replication link's frame of writes, a
    /// client's pipelined GETs).
    pub(crate) fn peek_own(&mut self, store: &osmium_store::Store) {
        self.ahead.clear();
        for key in osmium_protocol::peek::keys(self.input.input()) {
            let hash = store.prefetch_bucket(key);
            if !self.ahead.push(hash) {
                break;
            }
        }
        let first = usize::from(self.ahead.len).min(AHEAD_DISTANCE);
        for &hash in &self.ahead.hashes[..first] {
            store.prefetch_item(hash);
        }
    }

    /// The connection became a log watcher (`stats conns`).
    pub(crate) fn set_watching(&self) {
        if let Some(a) = &self.activity {
            a.set_state(State::Watching);
        }
    }

    /// Gives the session's buffers back to the pool where they are empty
    /// (the transport calls this once it has sent what it could).
    #[inline]
    pub(crate) fn release_idle(&mut self, ctx: &WorkerCtx) {
        self.input.release_if_empty(&ctx.pool);
        self.output.release_if_empty(&ctx.pool);
        if let Some(a) = &self.activity {
            let state = if self.output.queued() > 0 {
                State::Writing
            } else if self.incoming.is_some() || self.need > 0 {
                State::ReadingValue
            } else {
                State::Waiting
            };
            a.set_state(state);
        }
    }

    /// The connection closed: abandons a half-read item and gives every
    /// buffer back.
    pub(crate) fn close(&mut self, ctx: &WorkerCtx) {
        if let Some(incoming) = self.incoming.take() {
            ctx.store().abandon_incoming(incoming.item);
        }
        self.input.release(&ctx.pool);
        self.output.release(&ctx.pool);
    }

    /// Runs the buffered requests, up to `-R` of them; values queued in
    /// the output leave through `sink` before it returns.
    pub(crate) fn process<S: Sink>(&mut self, ctx: &WorkerCtx, sink: &mut S) -> Flow {
        if self.close_after_write {
            // quit was seen: nothing after it runs.
            return Flow::Wait;
        }
        if self.protocol == Protocol::Negotiating {
            let Some(&first) = self.input().first() else {
                return Flow::Wait;
            };
            self.protocol = if first == REQUEST_MAGIC {
                Protocol::Binary
            } else {
                Protocol::Text
            };
            if ctx.shared.verbose() > 1 {
                let name = match self.protocol {
                    Protocol::Binary => "binary",
                    _ => "ascii",
                };
                tracing::debug!("{}: Client using the {name} protocol", self.fd);
            }
        }
        if self.output.acquire(&ctx.pool).is_err() {
            return Flow::Close;
        }
        if let Some(a) = &self.activity {
            a.last_cmd.store(
                ctx.store().clock().now(),
                std::sync::atomic::Ordering::Relaxed,
            );
            a.set_state(State::Parsing);
        }
        self.output.wrote_directly = false;
        ctx.lap_start();
        let flow = match self.protocol {
            Protocol::Binary => binary::process(self, ctx, sink),
            _ if !self.auth.authenticated && ctx.shared.auth.ascii.is_some() => {
                match login::process(self, ctx) {
                    Some(flow) => flow,
                    None => text::process(self, ctx, sink),
                }
            }
            _ => text::process(self, ctx, sink),
        };
        // Values gathered by the last GETs leave now (see `Output`): the
        // thread's pin must not outlive this run.
        self.output.gather_values(false);
        match flow {
            Flow::Close => self.output.discard_refs(),
            _ => send_values(&mut self.output, sink, &ctx.stats),
        }
        debug_assert!(!self.output.has_refs(), "values referenced past a run");
        flow
    }

    /// After a request: the values it queued leave now if they are due
    /// (see `Output::due`); while gathering, only whole batches.
    #[inline]
    fn send_due<S: Sink>(&mut self, sink: &mut S, stats: &ThreadStats) {
        if self.output.due() {
            self.output.send_due_batches();
            let _ = sink.send(&mut self.output, stats);
        }
    }

    /// Discards swallowed bytes; true when nothing is left to swallow.
    #[inline]
    fn swallow_input(&mut self) -> bool {
        if self.swallow > 0 {
            let n = self.swallow.min(self.input.len());
            self.swallow -= n;
            self.input.consume(n);
        }
        self.swallow == 0
    }

    /// True when the next request must wait: `-R` reached (counts a
    /// yield), one request run while an upgrade's quiesce finishes the
    /// requests waiting for flash (`WorkerCtx::finishing`), this
    /// connection's output is large or met a full socket
    /// (`Output::socket_full`), or the worker's queued
    /// output is over its budget and this connection already has output
    /// waiting (a client that does not read holds its replies in server
    /// memory: it gets one reply at a time until the others drain).
    #[inline]
    fn must_yield(&self, ctx: &WorkerCtx, done: usize) -> bool {
        if done >= ctx.shared.settings.reqs_per_event {
            ctx.stats.conn_yields.incr();
            return true;
        }
        if done > 0 && ctx.finishing.get() {
            return true;
        }
        let queued = self.output.queued();
        queued > WRITE_HIGH_WATER
            || (queued > 0 && self.output.socket_full())
            || (queued > 0 && ctx.output_held() + self.output.footprint() > WORKER_OUTPUT_BUDGET)
    }

    fn conn_view(&self) -> ConnView {
        ConnView {
            fd: self.fd,
            output_queued: self.output.queued() > 0,
            flash_async: self.datagram.is_none(),
        }
    }

    // ---- datagram endpoints (see `transport::udp`) ----

    /// Replaces the input with one datagram's payload.
    pub(crate) fn set_datagram(&mut self, payload: &[u8]) {
        self.input.set(payload);
        self.swallow = 0;
        self.need = 0;
        self.close_after_write = false;
    }

    /// Appends bytes that complete a data block (memcached reads the rest
    /// of a block straight from the socket, whatever datagram it is).
    pub(crate) fn append_input(&mut self, bytes: &[u8]) {
        self.input.append(bytes);
    }

    /// Drops the rest of the input.
    pub(crate) fn drop_input(&mut self) {
        self.input.clear();
    }

    /// Bytes the session still waits for to complete a data block (or a
    /// binary request's body) or to swallow; 0 when it waits for nothing.
    /// A binary header cut short is not such a block: memcached drops it.
    pub(crate) fn awaiting_block(&self) -> usize {
        let header_cut = self.protocol == Protocol::Binary
            && self.input.len() < osmium_protocol::binary::HEADER_LEN;
        if self.swallow > 0 {
            self.swallow
        } else if self.need > 0 && !header_cut {
            self.need.saturating_sub(self.input.len())
        } else {
            0
        }
    }

    /// Whether the last batch ended at a `quit` (datagram endpoints keep
    /// the flag to end later datagrams early).
    pub(crate) fn take_close_after_write(&mut self) -> bool {
        std::mem::take(&mut self.close_after_write)
    }

    /// Forgets everything in flight (a datagram endpoint starting over).
    pub(crate) fn reset(&mut self) {
        self.input.clear();
        self.swallow = 0;
        self.need = 0;
        self.output.clear();
    }
}
