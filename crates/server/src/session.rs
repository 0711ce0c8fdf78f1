//! One client's protocol session, independent of the transport: the read
//! buffer it parses requests from, the write buffer its replies go to, and
//! the per-connection protocol state (which protocol was negotiated, a data
//! block still to collect or swallow, SASL authentication).
//!
//! TCP and unix-socket connections (`worker`) feed a session from a stream;
//! UDP feeds one request datagram at a time. `process` runs the buffered
//! requests (bounded by `-R` and the write high-water mark) and appends
//! every reply to `wbuf`, so a batch of pipelined requests is answered with
//! one write.
//!
//! The protocol is chosen per session from its first byte (memcached's
//! `-B auto`): 0x80 is a binary request magic, anything else is text.
//!
//! Over UDP memcached sends every response (one per text command, one per
//! key of a multi-key get) as its own series of datagrams, so a UDP session
//! also records where each text response starts in `wbuf` (`responses`);
//! `udp` turns that into datagrams.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use osmium_protocol::meta::{parse_meta, MetaCommand, MetaParse};
use osmium_protocol::text::{is_meta, parse_tokens, scan_line, Command, Keys, LineScan, Tokens};

use crate::direct::Direct;
use crate::meta;
use crate::text::{self, After};
use crate::worker::WorkerCtx;

pub const READ_CHUNK: usize = 16 * 1024;
/// A session keeps a read buffer up to this size; a larger one goes back to
/// the worker's `BufferPool` once its data block is consumed.
const KEEP_READ_BUFFER: usize = 1 << 20;
/// Stop parsing more requests while this much output waits to be sent.
pub const WRITE_HIGH_WATER: usize = 4 << 20;
/// First byte of every binary-protocol request.
pub const BINARY_REQUEST_MAGIC: u8 = 0x80;

/// Which wire protocol a session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Decided by the first byte received (`-B auto`).
    Negotiating,
    Text,
    Binary,
}

/// Who a session talks to, as `stats conns` shows it (memcached's
/// `conn_to_str`). Addresses are kept as values and formatted only when
/// asked, so a UDP session can update them per datagram for free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Tcp {
        remote: Option<SocketAddr>,
        local: Option<SocketAddr>,
    },
    Udp {
        remote: Option<SocketAddr>,
        local: Option<SocketAddr>,
    },
    /// A unix-domain client: memcached has no address to print for it and
    /// shows the socket path as the listen address.
    Unix,
}

impl Peer {
    /// Appends this connection's `stats conns` lines.
    pub fn write_conn_stats(&self, fd: i32, socket_path: Option<&str>, out: &mut Vec<u8>) {
        use osmium_protocol::encode::stat;
        let addr = |proto: &str, a: Option<SocketAddr>| match a {
            Some(SocketAddr::V4(a)) => format!("{proto}:{}:{}", a.ip(), a.port()),
            Some(SocketAddr::V6(a)) => format!("{proto}6:[{}]:{}", a.ip(), a.port()),
            None => "?:<AF 0>".to_string(),
        };
        let (remote, local) = match *self {
            Peer::Tcp { remote, local } => (addr("tcp", remote), addr("tcp", local)),
            Peer::Udp { remote, local } => {
                stat(out, &format!("{fd}:UDP"), "UDP");
                (addr("udp", remote), addr("udp", local))
            }
            Peer::Unix => (
                "?:<AF 0>".to_string(),
                format!("unix:{}", socket_path.unwrap_or_default()),
            ),
        };
        stat(out, &format!("{fd}:addr"), remote);
        stat(out, &format!("{fd}:listen_addr"), local);
        stat(out, &format!("{fd}:state"), "conn_parse_cmd");
        stat(out, &format!("{fd}:secs_since_last_cmd"), 0);
    }
}

/// Where one response starts in `wbuf` (UDP only; see the module comment).
/// The binary protocol may record one per request too (never suppressed:
/// memcached sends a quiet miss as an empty response); without marks, UDP
/// splits binary replies on their headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResponseMark {
    pub start: usize,
    /// noreply: memcached never sends it, not even as an empty datagram.
    pub suppressed: bool,
    /// memcached sends the responses up to this one at once (conn_mwrite
    /// right after the command), before running the next command.
    pub flush: bool,
}

/// How a text command's output divides into memcached responses.
pub enum ReplyShape<'a> {
    /// One response, suppressed when the command wrote nothing (noreply).
    Single,
    /// One response that memcached sends at once (meta `mn`).
    Flush,
    /// One response even if empty, sent at once (`quit`).
    Empty,
    /// get/gets/gat/gats: one response per key, END on the last, sent at
    /// once.
    PerKey(Keys<'a>),
}

/// Why processing stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Waiting for more input (or for output to drain).
    Wait,
    /// Yielded after -R requests (or at the write high-water mark); more
    /// input is buffered.
    Yield,
    /// Close now, dropping buffered output.
    Close,
}

pub struct Session {
    pub fd: i32,
    pub peer: Peer,
    /// The hashes of the keys of the requests waiting in `rbuf` (filled by
    /// the worker's `Conn::prime`), for prefetching items ahead.
    pub ahead: Ahead,
    /// Read buffer: bytes `rstart..rend` are received but not yet consumed.
    /// `READ_CHUNK` bytes, grown for data blocks up to `KEEP_READ_BUFFER`;
    /// while a larger data block is collected, a buffer from the worker's
    /// `BufferPool`.
    pub rbuf: Vec<u8>,
    /// The session's own read buffer, kept while `rbuf` is a pool's.
    small: Vec<u8>,
    /// A large data block being read straight into its item (see
    /// `IncomingStore`; `text::reads_into_item`, `meta::reads_into_item`,
    /// binary's `execute`): the worker reads into the item until it is
    /// filled, then a text block's `\r\n` comes through `rbuf`. Given up
    /// (`Store::abandon_incoming`) if the connection closes first.
    pub incoming: Option<IncomingStore>,
    pub rstart: usize,
    pub rend: usize,
    /// Output waiting to be written, from `wpos`.
    pub wbuf: Vec<u8>,
    pub wpos: usize,
    /// Bytes of a refused data block still to discard.
    pub swallow: usize,
    /// Don't re-parse until this many bytes are buffered (a data block).
    pub need: usize,
    /// Send what is buffered, then close (quit).
    pub close_after_write: bool,
    pub protocol: Protocol,
    /// SASL (`-S`) or text (`-Y`) authentication has succeeded.
    pub authenticated: bool,
    /// Where this connection's SASL exchange stands.
    pub sasl: crate::auth::SaslState,
    /// A UDP request: replies that memcached refuses over UDP differ.
    pub udp: bool,
    /// UDP: where each text response starts in `wbuf`.
    pub responses: Vec<ResponseMark>,
    /// UDP: stop after the next command memcached flushes at once. After a
    /// `quit`, memcached's UDP connection keeps `close_after_write` set, so
    /// every later flush ends its datagram.
    pub udp_stop_at_flush: bool,
}

/// Read buffers larger than `READ_CHUNK`, shared by one worker's sessions:
/// a session collecting a large data block (a big SET) takes one and gives
/// it back once the block is consumed, so that a client storing large
/// values does not make the server allocate, zero and fault in a fresh
/// buffer for each, and an idle connection holds no large buffer.
pub struct BufferPool {
    buffers: std::cell::RefCell<Vec<Vec<u8>>>,
}

/// Large buffers a pool keeps (more are freed).
const POOL_BUFFERS: usize = 4;

impl BufferPool {
    pub fn new() -> BufferPool {
        BufferPool {
            buffers: std::cell::RefCell::new(Vec::with_capacity(POOL_BUFFERS)),
        }
    }

    /// The smallest pooled buffer of at least `len` bytes, else the
    /// largest one (to grow), else None.
    fn take(&self, len: usize) -> Option<Vec<u8>> {
        let mut buffers = self.buffers.borrow_mut();
        let fits = (0..buffers.len())
            .filter(|&i| buffers[i].len() >= len)
            .min_by_key(|&i| buffers[i].len());
        let i = fits.or_else(|| (0..buffers.len()).max_by_key(|&i| buffers[i].len()))?;
        Some(buffers.swap_remove(i))
    }

    /// Keeps `buffer` for later, or frees it (or a smaller one) when the
    /// pool is full.
    fn give(&self, buffer: Vec<u8>) {
        let mut buffers = self.buffers.borrow_mut();
        if buffers.len() < POOL_BUFFERS {
            buffers.push(buffer);
        } else if let Some(i) = (0..buffers.len()).min_by_key(|&i| buffers[i].len()) {
            if buffers[i].len() < buffer.len() {
                buffers[i] = buffer;
            }
        }
    }
}

/// The store's mode for a storage command the protocol crate parsed.
pub fn store_mode(mode: osmium_protocol::StoreMode) -> osmium_store::StoreMode {
    use osmium_protocol::StoreMode as Parsed;
    use osmium_store::StoreMode;
    match mode {
        Parsed::Set => StoreMode::Set,
        Parsed::Add => StoreMode::Add,
        Parsed::Replace => StoreMode::Replace,
        Parsed::Append => StoreMode::Append,
        Parsed::Prepend => StoreMode::Prepend,
        Parsed::Cas => StoreMode::Cas,
    }
}

/// A storage command's data blocks of at least this many bytes, when they
/// have not all arrived with the command, are read straight into the new
/// item (as memcached reads into its item), not into the read buffer.
pub const INCOMING_MIN: usize = 64 * 1024;

/// A storage command (text set/add/replace/cas, binary SET/ADD/REPLACE
/// and their quiet forms) whose data block is being read into its item,
/// with what its reply needs.
pub struct IncomingStore {
    pub item: osmium_store::Incoming,
    pub mode: osmium_store::StoreMode,
    /// noreply (text), a quiet opcode (binary).
    pub quiet: bool,
    /// Binary: the request's opcode and opaque (0 in text).
    pub opcode: u8,
    pub opaque: u32,
    /// Meta (ms): its request line, for the reply's flags (empty for the
    /// text storage commands and binary).
    pub meta_line: Vec<u8>,
}

/// Requests whose keys' hashes `Ahead` holds: a 16-deep pipeline.
pub const AHEAD_CAPACITY: usize = 16;
/// How many requests ahead of the one executing an item is prefetched.
pub const AHEAD_DISTANCE: usize = 4;

/// The hashes of the keys of the requests waiting in a session's read
/// buffer, in order, as `osmium_protocol::peek` found them when the socket
/// was read; their index buckets are already being fetched. Executing
/// request i prefetches the item of request i + `AHEAD_DISTANCE` (which by
/// then has its bucket in cache), so a pipeline's lookups overlap instead
/// of each waiting for its item. A hint only: when the peek and the parse
/// disagree (a data block that looked like a command), a prefetch is
/// wasted, nothing else. The first `AHEAD_DISTANCE` items are prefetched
/// by the worker before any request runs.
#[derive(Default)]
pub struct Ahead {
    hashes: [u64; AHEAD_CAPACITY],
    len: u8,
    pos: u8,
}

impl Ahead {
    #[inline]
    pub fn clear(&mut self) {
        self.len = 0;
        self.pos = 0;
    }

    /// Adds the next request's hash; false when full.
    #[inline]
    pub fn push(&mut self, hash: u64) -> bool {
        let Some(slot) = self.hashes.get_mut(self.len as usize) else {
            return false;
        };
        *slot = hash;
        self.len += 1;
        true
    }

    /// Called as each request runs: prefetches the item of the request
    /// `AHEAD_DISTANCE` further on.
    #[inline]
    pub fn step(&mut self, store: &osmium_store::Store) {
        let i = self.pos as usize + AHEAD_DISTANCE;
        if i < self.len as usize {
            store.prefetch_item(self.hashes[i]);
        }
        self.pos = self.pos.saturating_add(1);
    }
}

impl Session {
    pub fn new(fd: i32, peer: Peer, protocol: Protocol) -> Session {
        Session {
            fd,
            peer,
            ahead: Ahead::default(),
            rbuf: vec![0; READ_CHUNK],
            small: Vec::new(),
            incoming: None,
            rstart: 0,
            rend: 0,
            wbuf: Vec::with_capacity(READ_CHUNK),
            wpos: 0,
            swallow: 0,
            need: 0,
            close_after_write: false,
            protocol,
            authenticated: false,
            sasl: crate::auth::SaslState::Idle,
            udp: false,
            responses: Vec::new(),
            udp_stop_at_flush: false,
        }
    }

    /// UDP: records the responses a text command wrote from `start`.
    #[inline]
    fn mark_replies(&mut self, start: usize, shape: ReplyShape<'_>) {
        if self.udp {
            crate::udp::mark_replies(&mut self.responses, &mut self.wbuf, start, shape);
        }
    }

    /// Received bytes not yet consumed.
    #[inline]
    pub fn input(&self) -> &[u8] {
        &self.rbuf[self.rstart..self.rend]
    }

    /// Output not yet written.
    #[inline]
    pub fn pending_output(&self) -> &[u8] {
        &self.wbuf[self.wpos..]
    }

    /// Records that `n` bytes of output were written.
    #[inline]
    pub fn output_written(&mut self, n: usize) {
        self.wpos += n;
        if self.wpos == self.wbuf.len() {
            self.wbuf.clear();
            self.wpos = 0;
            if self.wbuf.capacity() > 4 << 20 {
                self.wbuf.shrink_to(READ_CHUNK);
            }
        }
    }

    /// Makes room for at least `READ_CHUNK` (or `need`) more bytes and
    /// returns the free tail of the read buffer; report what was read into
    /// it with `input_received`.
    pub fn read_space(&mut self, pool: &BufferPool) -> &mut [u8] {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
            if self.rbuf.len() > KEEP_READ_BUFFER && self.need == 0 {
                // Done with a large buffer: back to the pool.
                let small = match std::mem::take(&mut self.small) {
                    s if s.is_empty() => vec![0; READ_CHUNK],
                    s => s,
                };
                pool.give(std::mem::replace(&mut self.rbuf, small));
            }
        }
        let want = (self.need.max(self.rend - self.rstart) + READ_CHUNK).max(READ_CHUNK);
        if self.rbuf.len() - self.rstart < want || self.rbuf.len() - self.rend < READ_CHUNK / 4 {
            if self.rstart > 0 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            if self.rbuf.len() < want {
                let size = want.next_power_of_two();
                let mut large = pool.take(size).unwrap_or_default();
                if large.len() < size {
                    large.resize(size, 0);
                }
                large[..self.rend].copy_from_slice(&self.rbuf[..self.rend]);
                let old = std::mem::replace(&mut self.rbuf, large);
                if self.small.is_empty() && old.len() <= KEEP_READ_BUFFER {
                    self.small = old;
                } else {
                    pool.give(old);
                }
            }
        }
        &mut self.rbuf[self.rend..]
    }

    #[inline]
    pub fn input_received(&mut self, n: usize) {
        self.rend += n;
    }

    /// Replaces the input with one datagram's payload (UDP).
    pub fn set_input(&mut self, payload: &[u8]) {
        self.rstart = 0;
        self.rend = 0;
        self.swallow = 0;
        self.need = 0;
        if self.rbuf.len() < payload.len() {
            self.rbuf.resize(payload.len(), 0);
        }
        self.rbuf[..payload.len()].copy_from_slice(payload);
        self.rend = payload.len();
    }

    /// Parses and executes buffered requests, up to `-R` of them.
    pub fn process(&mut self, ctx: &WorkerCtx) -> Flow {
        if self.close_after_write {
            // quit was seen: nothing after it is executed.
            return Flow::Wait;
        }
        if self.protocol == Protocol::Negotiating {
            let Some(&first) = self.input().first() else {
                return Flow::Wait;
            };
            self.protocol = if first == BINARY_REQUEST_MAGIC {
                Protocol::Binary
            } else {
                Protocol::Text
            };
            if ctx.shared.stats.verbosity.load(Ordering::Relaxed) > 1 {
                let name = match self.protocol {
                    Protocol::Binary => "binary",
                    _ => "ascii",
                };
                eprintln!("{}: Client using the {name} protocol", self.fd);
            }
        }
        match self.protocol {
            Protocol::Binary => crate::binary::process(self, ctx),
            _ => self.process_text(ctx),
        }
    }

    /// Discards swallowed bytes; true when nothing is left to swallow.
    #[inline]
    pub fn swallow_input(&mut self) -> bool {
        if self.swallow > 0 {
            let n = self.swallow.min(self.rend - self.rstart);
            self.swallow -= n;
            self.rstart += n;
        }
        self.swallow == 0
    }

    /// True when the next request must wait: -R reached (counts a yield)
    /// or too much output is queued.
    #[inline]
    pub fn must_yield(&self, ctx: &WorkerCtx, done: usize) -> bool {
        if done >= ctx.reqs_per_event {
            ctx.stats.conn_yields.incr();
            return true;
        }
        self.wbuf.len() - self.wpos > WRITE_HIGH_WATER
    }

    fn process_text(&mut self, ctx: &WorkerCtx) -> Flow {
        // -Y: only the login `set` is understood until it succeeds.
        if !self.authenticated && ctx.shared.auth.ascii.is_some() {
            if let Some(flow) = crate::auth::text_login(self, ctx) {
                return flow;
            }
        }
        let mut done = 0;
        let mut direct = Direct::new(self.fd, self.udp, self.wpos);
        loop {
            if !self.swallow_input() {
                return Flow::Wait;
            }
            if let Some(incoming) = &self.incoming {
                // A data block read into its item: wait for the rest of it
                // (the worker reads into the item), then for its \r\n.
                if !incoming.item.is_filled() {
                    return Flow::Wait;
                }
                if self.rend - self.rstart < 2 {
                    self.need = 2;
                    return Flow::Wait;
                }
                if self.must_yield(ctx, done) {
                    return Flow::Yield;
                }
                self.need = 0;
                done += 1;
                let terminated = &self.rbuf[self.rstart..self.rstart + 2] == b"\r\n";
                self.rstart += 2;
                if let Some(incoming) = self.incoming.take() {
                    if incoming.meta_line.is_empty() {
                        text::finish_store(ctx, incoming, terminated, &mut self.wbuf);
                    } else {
                        meta::finish_set(ctx, incoming, terminated, &mut self.wbuf);
                    }
                }
                continue;
            }
            let avail = self.rend - self.rstart;
            if avail == 0 || avail < self.need {
                return Flow::Wait;
            }
            if self.must_yield(ctx, done) {
                return Flow::Yield;
            }
            let buf = &self.rbuf[self.rstart..self.rend];
            let (line_len, consumed) = match scan_line(buf) {
                LineScan::Line { line_len, consumed } => (line_len, consumed),
                LineScan::Incomplete => return Flow::Wait,
                LineScan::TooLong => return Flow::Close,
            };
            let line = &buf[..line_len];
            if ctx.shared.stats.verbosity.load(Ordering::Relaxed) > 1 {
                eprintln!("<{} {}", self.fd, String::from_utf8_lossy(line));
            }
            let tokens = Tokens::new(line);
            done += 1;
            self.ahead.step(&ctx.shared.store);
            let reply_start = self.wbuf.len();
            if is_meta(&tokens) {
                let mut shape = ReplyShape::Single;
                match parse_meta(tokens) {
                    MetaParse::Noop => {
                        self.wbuf.extend_from_slice(b"MN\r\n");
                        self.rstart += consumed;
                        shape = ReplyShape::Flush;
                    }
                    MetaParse::Error { msg, swallow } => {
                        self.wbuf.extend_from_slice(msg.as_bytes());
                        self.wbuf.extend_from_slice(b"\r\n");
                        self.rstart += consumed;
                        if let Some(n) = swallow {
                            self.swallow = n;
                            self.need = 0;
                        }
                    }
                    MetaParse::Request(req) if req.command == MetaCommand::Set => {
                        if meta::refuse_set(ctx, &req, &mut self.wbuf) {
                            self.rstart += consumed;
                            self.swallow = req.data_len + 2;
                            self.need = 0;
                            self.mark_replies(reply_start, shape);
                            continue;
                        }
                        let total = consumed + req.data_len + 2;
                        if !self.udp && meta::reads_into_item(&req, buf.len() - consumed) {
                            // The rest of the value goes straight into the item.
                            let have = (buf.len() - consumed).min(req.data_len);
                            let first = &buf[consumed..consumed + have];
                            self.incoming = meta::begin_set(ctx, &req, line, first, &mut self.wbuf);
                            if self.incoming.is_none() {
                                self.swallow = req.data_len + 2 - have;
                            }
                            self.need = 0;
                            self.rstart += consumed + have;
                            continue;
                        }
                        if buf.len() < total {
                            self.need = total;
                            return Flow::Wait;
                        }
                        self.need = 0;
                        meta::complete_set(ctx, &req, &buf[consumed..total], &mut self.wbuf);
                        self.rstart += total;
                    }
                    MetaParse::Request(req) => {
                        meta::execute(ctx, &req, &mut self.wbuf, &mut direct);
                        self.rstart += consumed;
                    }
                }
                let flushed = self.udp
                    && crate::udp::mark_replies(
                        &mut self.responses,
                        &mut self.wbuf,
                        reply_start,
                        shape,
                    );
                if flushed && self.udp_stop_at_flush {
                    return Flow::Wait;
                }
                continue;
            }
            let cmd = parse_tokens(tokens, line);
            if let Command::Store(req) = cmd {
                if text::refuse_store(ctx, &req, &mut self.wbuf) {
                    self.rstart += consumed;
                    self.swallow = req.value_len as usize + 2;
                    self.need = 0;
                    self.mark_replies(reply_start, ReplyShape::Single);
                    continue;
                }
                let total = consumed + req.value_len as usize + 2;
                if !self.udp && text::reads_into_item(&req, buf.len() - consumed) {
                    // The rest of the value goes straight into the item.
                    let have = (buf.len() - consumed).min(req.value_len as usize);
                    let first = &buf[consumed..consumed + have];
                    self.incoming = text::begin_store(ctx, &req, first, &mut self.wbuf);
                    if self.incoming.is_none() {
                        self.swallow = req.value_len as usize + 2 - have;
                    }
                    self.need = 0;
                    self.rstart += consumed + have;
                    continue;
                }
                if buf.len() < total {
                    self.need = total;
                    return Flow::Wait;
                }
                self.need = 0;
                text::complete_store(ctx, &req, &buf[consumed..total], &mut self.wbuf);
                self.rstart += total;
                self.mark_replies(reply_start, ReplyShape::Single);
                continue;
            }
            let shape = match cmd {
                Command::Get { keys, .. } => ReplyShape::PerKey(keys),
                Command::Quit => ReplyShape::Empty,
                _ => ReplyShape::Single,
            };
            let after = text::execute(ctx, cmd, &mut self.wbuf, &self.peer, self.fd, &mut direct);
            let flushed = self.udp
                && crate::udp::mark_replies(
                    &mut self.responses,
                    &mut self.wbuf,
                    reply_start,
                    shape,
                );
            self.rstart += consumed;
            match after {
                After::Continue => {}
                After::CloseAfterWrite => {
                    self.close_after_write = true;
                    return Flow::Wait;
                }
                After::CloseNow => return Flow::Close,
            }
            if flushed && self.udp_stop_at_flush {
                return Flow::Wait;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session::new(-1, Peer::Unix, Protocol::Text)
    }

    /// Feeds `data` through `read_space` as a socket would, in reads of at
    /// most `chunk` bytes.
    fn receive(s: &mut Session, pool: &BufferPool, data: &[u8], chunk: usize) {
        let mut at = 0;
        while at < data.len() {
            let space = s.read_space(pool);
            let n = space.len().min(chunk).min(data.len() - at);
            space[..n].copy_from_slice(&data[at..at + n]);
            s.input_received(n);
            at += n;
        }
    }

    #[test]
    fn a_large_data_block_borrows_a_pool_buffer_and_gives_it_back() {
        let pool = BufferPool::new();
        let mut s = session();
        for round in 0..3u8 {
            // A header, then a 3 MiB block the session must hold whole.
            let block: Vec<u8> = (0..3 << 20).map(|i: u32| (i as u8) ^ round).collect();
            receive(&mut s, &pool, b"set k 0 0 3145728\r\n", 1 << 20);
            s.rstart += 19;
            s.need = block.len();
            receive(&mut s, &pool, &block, 100_000);
            assert!(s.input() == &block[..]);
            assert!(s.rbuf.len() > KEEP_READ_BUFFER);
            // Consumed: the next read gives the large buffer back.
            s.rstart = s.rend;
            s.need = 0;
            let _ = s.read_space(&pool);
            assert_eq!(s.rbuf.len(), READ_CHUNK);
            assert_eq!(pool.buffers.borrow().len(), 1, "round {round}");
        }
    }

    #[test]
    fn a_pool_keeps_its_largest_buffers() {
        let pool = BufferPool::new();
        for len in [5usize, 1, 9, 3, 7, 2] {
            pool.give(vec![0; len]);
        }
        let mut lens: Vec<usize> = pool.buffers.borrow().iter().map(Vec::len).collect();
        lens.sort();
        assert_eq!(lens, [3, 5, 7, 9]);
        assert_eq!(pool.take(4).map(|b| b.len()), Some(5));
        assert_eq!(pool.take(100).map(|b| b.len()), Some(9));
        assert_eq!(pool.buffers.borrow().len(), 2);
    }
}
