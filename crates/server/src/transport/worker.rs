//! Worker threads: each runs its own mio event loop over the connections
//! the acceptor hands it (TCP or unix-domain streams) and over its own
//! clones of the UDP sockets (`udp`), and drives every connection's session
//! through read -> process -> write.
//!
//! All replies to the requests found in one read go out in one `write`.
//! A connection that has run `-R` requests in a row yields to the others
//! (memcached's `conn_yields`) and is resumed from the worker's ready queue.
//! A replication link's Noise stream reads the socket up to 64 KiB at a
//! time and hands the session the frames that fit its buffer: replies
//! wait (through yields too) while whole frames of that socket read are
//! still to run and less than one frame's plaintext is queued
//! (`Conn::reply_later`), so a socket read is answered by one write, as
//! on a plain socket.
//!
//! One turn of the event loop serves every connection `epoll_wait` returned
//! in three passes, so that the cache misses of one request's lookup overlap
//! the work of the others instead of stalling it (a lone lookup is two
//! dependent misses: the index bucket, then the item):
//!
//! 1. `Conn::prime`: read the socket once, peek at the keys of the requests
//!    that arrived (`osmium_protocol::peek`, no parsing) and prefetch their
//!    index buckets;
//! 2. prefetch the items the first few of those buckets point at;
//! 3. `Conn::drive`: run the requests, write the replies; each request
//!    prefetches the item of the one four further on (`session::Ahead`).
//!
//! A read that returned less than it had room for emptied the socket, so
//! `drive` does not read again (which would only return `EAGAIN`): epoll is
//! edge-triggered, and data arriving later raises a new event. Not once an
//! event has said the peer shut its side (EPOLLRDHUP): the FIN may have come
//! with the data just read, and no later event would report it. A readable
//! event forgets it (`Conn::drained`): `prime` reads only into an empty
//! input, so an event that came while requests were still buffered (or
//! while the connection was held for replication) would otherwise be lost,
//! and the data it announced never read.
//!
//! Sync replication holds a connection's replies, and its next requests,
//! until the targets acknowledged its writes (`repl_held`); the wait never
//! needs the connection's own unread input (the invariant is written down
//! in `replication`'s module comment): once released, the replies go out
//! before another request runs, and the socket is read again. The writes
//! a turn queued wake the links' senders once, when the turn is over
//! (`Replication::wake_senders`), so a batch carries the turn's writes;
//! an acknowledgement wakes only the workers holding replies it may
//! release (`replication::held`).
//!
//! When a turn is over and no connection is ready, the worker sleeps in
//! `epoll_wait`; with `-o idle_spin` (off by default) it first polls for a
//! short, adaptive while (`idle_spin`), so that a closed-loop client's next
//! request finds it running.
//!
//! A connection holds buffers only while it has input or output (see
//! `buffers`); after each drive the idle ones go back to the worker's pool.
//! With `-o idle_timeout` a connection that ran no request for that many
//! seconds is closed.
//!
//! At a binary upgrade's stop the worker hands its connections over to
//! the next image instead of closing them (`carry`); one the next image
//! carried comes with its session's state (`NewConn::carried`).

use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use osmium_protocol::replication_link::SEAL_PLAINTEXT;
use slab::Slab;

use super::flash_io::FlashIo;
use super::idle_spin::IdleSpin;
use super::noise::NoiseConn;
use super::stream::Stream;
use super::udp::{Progress, UdpEndpoint};
use crate::compose::output::Sink;
use crate::context::{Shared, WorkerCtx};
use crate::logger::{self, CloseReason};
use crate::replication::auth::PeerAuth;
use crate::replication::held::HeldWaits;
use crate::replication::stream::{LinkStream, NoiseHalves};
use crate::replication::{Wait, COPY_OPEN, PEER_FOLLOW, PEER_NONE};
use crate::session::{Flow, Protocol, Session};
use osmium_protocol::replication_link::Transport;
use osmium_upgrade::ConnRec;

mod carry;

const WAKE: Token = Token(usize::MAX);
/// The worker's flash reads finished (`flash_io`).
const FLASH: Token = Token(usize::MAX >> 1);

/// The token of this worker's UDP endpoint `i` (counted down from WAKE;
/// connection tokens are slab keys counted up from 0).
fn udp_token(i: usize) -> Token {
    Token(usize::MAX - 1 - i)
}

/// A connection handed to a worker: a client's, or (replication's
/// catch-up pull) a peer's (`replication::PEER_*`).
pub(crate) struct NewConn {
    pub stream: Stream,
    pub peer: u8,
    /// A connection a binary upgrade carried: its session's state.
    pub carried: Option<Box<ConnRec>>,
}

/// How long a worker holding sync-mode replies waits before it looks at
/// the links again without a wake-up.
const REPL_RECHECK: Duration = Duration::from_millis(20);

/// The acceptor's handle on a worker.
pub(crate) struct WorkerHandle {
    pub sender: Sender<NewConn>,
    pub waker: Arc<Waker>,
    /// Returns the connections it hands over at an upgrade's stop.
    pub thread: std::thread::JoinHandle<Vec<ConnRec>>,
}

struct Conn {
    stream: Stream,
    session: Session,
    fd: i32,
    /// Its peer, as accepted (the watchers' `conn_close` lines).
    kind: crate::conns::Kind,
    /// Numbers the worker's connections (a flash read finishing for a
    /// closed connection must not wake the one that reuses its key).
    id: u64,
    /// Flash reads the next request waits for.
    awaiting_flash: usize,
    last_active: u32,
    /// `prime` met the end of the stream or an error.
    hangup: bool,
    /// The last read returned less than it had room for, and no readable
    /// event came since (see the module comment).
    drained: bool,
    /// An event said the peer shut its side (EPOLLRDHUP) or failed.
    peer_closed: bool,
    /// What the connection is to replication (`replication::PEER_*`).
    peer: u8,
    /// What it showed of itself to replication (`replication::auth`).
    peer_auth: PeerAuth,
    /// Where a peer stands in sending a full copy (`replication::COPY_*`).
    copy: u8,
    /// Sync replication: its replies wait for these acknowledgements.
    repl_held: bool,
    repl_wait: Wait,
    /// The acknowledgements came: the held replies leave before the next
    /// request runs.
    repl_released: bool,
}

impl Conn {
    /// Writes queued output (and, for TLS, the records rustls holds).
    /// Ok(true) when all of it is out.
    fn flush(&mut self, ctx: &WorkerCtx) -> io::Result<bool> {
        self.stream.send(self.session.output(), &ctx.stats)
    }

    /// Whether the replies queued may wait for the requests the stream
    /// already holds (`Stream::holds_input`): less than one Noise frame's
    /// plaintext is queued. They then leave with those requests' replies.
    fn reply_later(&mut self) -> bool {
        self.stream.holds_input() && self.session.output().queued() < SEAL_PLAINTEXT
    }

    /// Reads once. Ok(Some(n)) bytes read, Ok(None) would block, Err on EOF,
    /// error, or no buffer to read into (`-o read_buf_mem_limit`).
    fn read_some(&mut self, ctx: &WorkerCtx) -> io::Result<Option<usize>> {
        loop {
            let space = match self.session.read_target(ctx) {
                Ok(space) => space,
                Err(_) => return Err(io::ErrorKind::OutOfMemory.into()),
            };
            let room = space.len();
            match self.stream.read(space) {
                Ok(0) => {
                    self.session.set_close_reason(CloseReason::Normal);
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Ok(n) => {
                    self.session.received(ctx, n);
                    self.drained = !self.peer_closed && self.stream.read_drained(n, room);
                    ctx.stats.bytes_read.add(n as u64);
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // A record rustls refused (`tls::TlsStream::read`).
                    let tls = matches!(self.stream, Stream::Tls(_));
                    if let Some(why) = e
                        .get_ref()
                        .filter(|_| tls && e.kind() == io::ErrorKind::InvalidData)
                    {
                        logger::tls_error(&ctx.shared.logger, ctx.head, self.fd, why);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// The first pass of a turn for a readable connection: reads once and
    /// starts fetching the index buckets of the requests that arrived.
    fn prime(&mut self, ctx: &WorkerCtx, first_hashes: &mut Vec<u64>) {
        if self.hangup {
            return;
        }
        if self.session.input_is_empty()
            && !self.session.reading_into_item()
            && self.read_some(ctx).is_err()
        {
            // EOF or an error: `drive` closes the connection.
            self.hangup = true;
            return;
        }
        self.session.peek_ahead(ctx.store(), first_hashes);
    }

    /// Runs the connection until it must wait for the socket, yields, or
    /// closes.
    fn drive(&mut self, ctx: &WorkerCtx) -> Flow {
        if self.awaiting_flash > 0 || self.repl_held {
            // Its next request runs once its flash reads are in (or its
            // replies wait for the replicas).
            return Flow::Wait;
        }
        if std::mem::take(&mut self.repl_released) && !self.session.holds_output() {
            // The replicas have the writes: their replies leave first, so
            // a connection holds at most one run's replies however much
            // its client pipelines.
            match self.flush(ctx) {
                Ok(true) => {}
                // The writable event resumes it.
                Ok(false) => return Flow::Wait,
                Err(_) => return Flow::Close,
            }
        }
        loop {
            if ctx.peers && ctx.peer.get() == PEER_NONE && !ctx.peer_auth.borrow().tls_checked() {
                // Once the TLS session is established: whether its client
                // certificate names a replication peer, and the value a
                // link handshake in it is bound to (`ctx.peer_auth` is
                // this connection's while it runs).
                if let Stream::Tls(tls) = &self.stream {
                    let binding = ctx.shared.replication.secret().is_some();
                    if let Some((named, value)) = tls.peer_standing(binding) {
                        ctx.peer_auth.borrow_mut().set_tls(named, value);
                    }
                }
            }
            // Run what is buffered (bounded by -R and the output limits),
            // send the replies in one write, then read more.
            let flow = self.session.process(ctx, &mut self.stream);
            if ctx.take_repl_wait(&mut self.repl_wait) && flow != Flow::Close {
                // Sync replication: the replies leave once the replicas
                // acknowledged the writes.
                self.repl_held = true;
                return if flow == Flow::Flash {
                    Flow::Flash
                } else {
                    Flow::Wait
                };
            }
            match flow {
                Flow::Close => return Flow::Close,
                Flow::Yield => {
                    // Let other connections run; if the socket is full, the
                    // writable event resumes this one instead.
                    if self.reply_later() {
                        return Flow::Yield;
                    }
                    return match self.flush(ctx) {
                        Ok(true) => Flow::Yield,
                        Ok(false) => Flow::Wait,
                        Err(_) => Flow::Close,
                    };
                }
                Flow::Flash => {
                    // Replies before the waiting request leave now.
                    return match self.flush(ctx) {
                        Ok(_) => Flow::Flash,
                        Err(_) => Flow::Close,
                    };
                }
                Flow::Wait => {}
            }
            if !self.session.holds_output() && !self.reply_later() {
                match self.flush(ctx) {
                    Ok(true) => {}
                    Ok(false) => return Flow::Wait,
                    Err(_) => return Flow::Close,
                }
            }
            if self.session.closing() || self.hangup {
                return Flow::Close;
            }
            if std::mem::take(&mut self.drained) || ctx.finishing.get() {
                return Flow::Wait;
            }
            let into_item = self.session.reading_into_item();
            match self.read_some(ctx) {
                // More than one small request may have come: their lookups
                // are started before the first runs.
                Ok(Some(n)) if n >= PEEK_FROM && !into_item => {
                    self.session.peek_own(ctx.store());
                }
                Ok(Some(_)) => {}
                Ok(None) => return Flow::Wait,
                Err(_) => return Flow::Close,
            }
        }
    }
}

/// Bytes a connection's own read must bring before its requests' keys
/// are peeked at (one small GET is less: its lookup follows at once).
const PEEK_FROM: usize = 128;

/// Ready connections from which a turn reads them all before running any.
const GATHER_FROM: usize = 3;

struct Worker {
    ctx: WorkerCtx,
    poll: Poll,
    conns: Slab<Conn>,
    incoming: Receiver<NewConn>,
    /// Connections whose replies wait for sync replication: (key, id).
    repl_waiting: Vec<(usize, u64)>,
    /// This worker's clones of the UDP sockets.
    udp: Vec<UdpEndpoint>,
    /// Tokens (slab keys or UDP tokens) to run again without an event.
    ready: VecDeque<usize>,
    /// This turn's tokens with an event.
    turn: Vec<usize>,
    /// The hashes of the first keys of each connection's waiting requests
    /// (`Conn::prime`), whose items pass 2 prefetches.
    first_hashes: Vec<u64>,
    idle_timeout: u32,
    /// From `-B`: auto negotiates per connection.
    initial_protocol: Protocol,
    /// Flash reads (with a flash tier, where io_uring works).
    flash: Option<FlashIo>,
    next_conn_id: u64,
    /// How long the worker polls before it sleeps (`-o idle_spin`).
    idle_spin: IdleSpin,
}

impl Worker {
    fn accept_new(&mut self) {
        while let Ok(NewConn {
            mut stream,
            peer,
            carried,
        }) = self.incoming.try_recv()
        {
            let shared = &self.ctx.shared;
            let now = shared.store.clock().now();
            let entry = self.conns.vacant_entry();
            let token = Token(entry.key());
            if self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                .is_err()
            {
                connection_gone(shared);
                continue;
            }
            let fd = stream.as_raw_fd();
            let kind = stream.kind();
            let activity = shared.conns.add_client(fd, kind, now);
            logger::conn_new(&shared.logger, self.ctx.head, kind, fd);
            if shared.verbose() > 1 {
                tracing::debug!("<{fd} new auto-negotiating client connection");
            }
            self.next_conn_id += 1;
            let mut session = Session::stream(fd, self.initial_protocol, Some(activity));
            if let Some(rec) = carried {
                if !session.restore(&rec, &self.ctx) {
                    session.close(&self.ctx);
                    let _ = self.poll.registry().deregister(&mut stream);
                    shared.conns.remove(fd);
                    connection_gone(shared);
                    continue;
                }
                // The replies it carried count against the worker's budget.
                self.ctx.output_changed(0, session.output().footprint());
            }
            entry.insert(Conn {
                session,
                stream,
                fd,
                kind,
                id: self.next_conn_id,
                awaiting_flash: 0,
                last_active: now,
                hangup: false,
                drained: false,
                peer_closed: false,
                peer,
                peer_auth: PeerAuth::default(),
                copy: 0,
                repl_held: false,
                repl_wait: Wait::default(),
                repl_released: false,
            });
            // Data may already be waiting.
            self.ready.push_back(token.0);
        }
    }

    fn close(&mut self, key: usize) {
        if let Some(mut conn) = self.conns.try_remove(key) {
            let shared = &self.ctx.shared;
            let reason = conn.session.close_reason();
            logger::conn_close(&shared.logger, self.ctx.head, conn.kind, reason, conn.fd);
            let queued = conn.session.output().footprint();
            self.ctx.output_changed(queued, 0);
            conn.session.close(&self.ctx);
            conn.stream.close();
            let _ = self.poll.registry().deregister(&mut conn.stream);
            let shared = &self.ctx.shared;
            if conn.stream.frame_failed() {
                let who = shared.conns.remote(conn.fd);
                shared.replication.auth_failed(&format!(
                    "{who}: a replication link frame failed to authenticate"
                ));
            }
            shared.conns.remove(conn.fd);
            if conn.copy & COPY_OPEN != 0 {
                // Its full copy will not end now.
                shared.replication.copy_ended();
            }
            if let Some(r) = &self.ctx.repl {
                if conn.peer >= PEER_FOLLOW {
                    r.follow_closed(conn.peer);
                }
            }
            if shared.verbose() > 1 {
                tracing::debug!("<{} connection closed.", conn.fd);
            }
            connection_gone(shared);
        }
    }

    /// The UDP endpoint index a token stands for.
    fn udp_index(&self, token: usize) -> Option<usize> {
        let i = (usize::MAX - 1).checked_sub(token)?;
        (i < self.udp.len()).then_some(i)
    }

    fn run_udp(&mut self, i: usize) {
        let endpoint = &mut self.udp[i];
        self.ctx.cfd.set(endpoint.fd());
        let progress =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| endpoint.drive(&self.ctx)))
                .unwrap_or_else(|_| {
                    tracing::warn!("UDP request handler panicked; dropping that request");
                    endpoint.reset();
                    Progress::MoreWork
                });
        if self.ctx.watch.take().is_some() {
            // Not reached: `watch` refuses datagrams.
            self.ctx.shared.logger.unreserve();
        }
        if self.ctx.peers {
            // Datagrams are never peers: nothing a datagram started is
            // kept.
            self.ctx.peer.set(PEER_NONE);
            self.ctx.peer_auth.take();
            self.ctx.noise_upgrade.take();
            self.ctx.handover.take();
        }
        if self.ctx.repl.is_some() {
            // Datagrams are answered at once.
            self.ctx.take_repl_wait(&mut Wait::default());
        }
        if progress == Progress::MoreWork {
            self.ready.push_back(udp_token(i).0);
        }
    }

    fn run_conn(&mut self, key: usize) {
        if let Some(i) = self.udp_index(key) {
            return self.run_udp(i);
        }
        let now = self.ctx.shared.store.clock().now();
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        conn.last_active = now;
        self.ctx.cfd.set(conn.fd);
        let before = conn.session.output().footprint();
        // A bug hit by one connection's input must not take down the other
        // connections of this worker: contain it and drop that connection.
        let ctx = &self.ctx;
        let repl = ctx.repl.is_some();
        if ctx.peers {
            ctx.peer.set(conn.peer);
            ctx.peer_auth.replace(std::mem::take(&mut conn.peer_auth));
            ctx.copy.set(conn.copy);
        }
        let flow = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conn.drive(ctx)))
            .unwrap_or_else(|_| {
                tracing::warn!("connection handler panicked; closing that connection");
                Flow::Close
            });
        if let Some(streams) = ctx.watch.take() {
            return self.hand_over_watcher(key, streams);
        }
        if let Some(transport) = ctx.noise_upgrade.take() {
            // replica_hello on plain TCP.
            conn.peer = ctx.peer.replace(PEER_NONE);
            conn.peer_auth = ctx.peer_auth.take();
            return self.upgrade_to_noise(key, transport);
        }
        if let Some(follow) = ctx.handover.take() {
            // replica_follow.
            ctx.peer.set(PEER_NONE);
            ctx.peer_auth.take();
            if flow != Flow::Close {
                return self.hand_over(key, follow);
            }
        }
        if ctx.peers {
            conn.peer = ctx.peer.replace(PEER_NONE);
            conn.peer_auth = ctx.peer_auth.take();
            conn.copy = ctx.copy.replace(0);
        }
        if repl && conn.repl_held {
            if !self.repl_waiting.iter().any(|&(k, _)| k == key) {
                self.repl_waiting.push((key, conn.id));
            }
            // Said before the worker's last check before it sleeps
            // (`repl_acknowledged`): the ack threads wake it for these.
            if let Some(held) = ctx.repl.as_ref().and_then(|r| r.held_waits()) {
                held.hold(ctx.head, &conn.repl_wait);
            }
        }
        if flow == Flow::Wait {
            // Before measuring: an idle connection's empty buffers go back
            // to the pool and stop counting against the worker's budget.
            conn.session.release_idle(ctx);
        }
        let after = conn.session.output().footprint();
        ctx.output_changed(before, after);
        match flow {
            Flow::Wait => {}
            Flow::Yield => self.ready.push_back(key),
            Flow::Close => self.close(key),
            Flow::Flash => {
                let started = match &mut self.flash {
                    Some(io) => io.start(
                        &self.ctx.shared.store,
                        key,
                        conn.id,
                        &mut self.ctx.flash_wanted.borrow_mut(),
                    ),
                    None => 0,
                };
                self.ctx.flash_wanted.borrow_mut().clear();
                conn.awaiting_flash = started;
                if started == 0 {
                    // Everything was in RAM buffers (or gone): run again.
                    self.ready.push_back(key);
                }
            }
        }
    }

    /// A `replica_follow` connection leaves the worker: replication serves
    /// it as a feed of this server's writes.
    fn hand_over(&mut self, key: usize, follow: u64) {
        let Some(mut conn) = self.conns.try_remove(key) else {
            return;
        };
        let queued = conn.session.output().footprint();
        self.ctx.output_changed(queued, 0);
        conn.session.close(&self.ctx);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        let shared = &self.ctx.shared;
        shared.conns.remove(conn.fd);
        connection_gone(shared);
        let std_tcp =
            |tcp: mio::net::TcpStream| std::net::TcpStream::from(std::os::fd::OwnedFd::from(tcp));
        // A TLS connection goes on through its session: the feed's writer
        // and reader share it (`replication::stream`).
        // A Noise link goes on with its keys and what it received.
        let stream = match conn.stream {
            Stream::Tls(tls) => {
                let (tcp, session) = tls.into_parts();
                LinkStream::Tls(std_tcp(tcp), Box::new(session))
            }
            Stream::Noise(noise) => {
                let (tcp, outbound, inbound) = noise.into_parts();
                let halves = NoiseHalves { outbound, inbound };
                LinkStream::Noise(std_tcp(tcp), Box::new(halves))
            }
            // A follower proved itself by a handshake (Noise) or a
            // certificate (TLS): nothing else is handed over.
            Stream::Tcp(_) | Stream::Unix(_) => return,
        };
        shared.replication.start_feed(stream, follow);
    }

    /// A `replica_hello` on plain TCP succeeded and its answer is out: the
    /// connection's bytes are Noise frames from now on. Anything else
    /// about it (bytes that came with the hello, an answer the socket did
    /// not take) closes it: nothing of a link runs in clear.
    fn upgrade_to_noise(&mut self, key: usize, transport: Transport) {
        let clean = self.conns.get_mut(key).is_some_and(|c| {
            c.session.take_close_after_write()
                && c.stream.is_plain_tcp()
                && c.session.input_is_empty()
                && c.session.output().queued() == 0
                && !c.hangup
        });
        if !clean {
            return self.close(key);
        }
        let Some(mut conn) = self.conns.try_remove(key) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        let Stream::Tcp(tcp) = conn.stream else {
            unreachable!("checked to be plain TCP");
        };
        let (outbound, inbound) = transport.split();
        conn.stream = Stream::Noise(Box::new(NoiseConn::new(tcp, outbound, inbound)));
        let entry = self.conns.vacant_entry();
        let token = Token(entry.key());
        if self
            .poll
            .registry()
            .register(
                &mut conn.stream,
                token,
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            conn.session.close(&self.ctx);
            self.ctx.shared.conns.remove(conn.fd);
            connection_gone(&self.ctx.shared);
            return;
        }
        entry.insert(conn);
        // Frames may already be waiting.
        self.ready.push_back(token.0);
    }

    /// A `watch` connection leaves the worker: the logger writes it the
    /// lines of `streams` (its place among the watchers is taken).
    fn hand_over_watcher(&mut self, key: usize, streams: u16) {
        let Some(mut conn) = self.conns.try_remove(key) else {
            self.ctx.shared.logger.unreserve();
            return;
        };
        let queued = conn.session.output().footprint();
        self.ctx.output_changed(queued, 0);
        conn.session.set_watching();
        conn.session.close(&self.ctx);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        // Still a connection (`stats conns`, `curr_connections`) until
        // the logger closes it.
        self.ctx
            .shared
            .logger
            .add_watcher(conn.stream, conn.fd, streams);
    }

    /// Sync replication: connections whose writes every reachable target
    /// acknowledged send their replies; what the others wait for is
    /// published for the ack threads (`replication::held`).
    fn repl_acknowledged(&mut self) {
        let Some(r) = &self.ctx.repl else {
            return;
        };
        // What `run_conn` published is seen by the ack threads, or their
        // acknowledgements are seen here.
        HeldWaits::fence();
        let conns = &mut self.conns;
        let ready = &mut self.ready;
        let mut lowest = Wait::default();
        self.repl_waiting.retain(|&(key, id)| {
            let Some(c) = conns.get_mut(key).filter(|c| c.id == id) else {
                return false;
            };
            if !c.repl_held {
                return false;
            }
            if r.acknowledged(&c.repl_wait) {
                c.repl_held = false;
                c.repl_released = true;
                c.repl_wait = Wait::default();
                ready.push_back(key);
                return false;
            }
            for (l, &seq) in lowest.iter_mut().zip(&c.repl_wait) {
                if seq > 0 && (*l == 0 || seq < *l) {
                    *l = seq;
                }
            }
            true
        });
        if let Some(held) = r.held_waits() {
            held.set(self.ctx.head, &lowest);
        }
    }

    /// Flash reads finished: their connections run again once all of
    /// theirs are in.
    fn flash_done(&mut self) {
        let Some(io) = &mut self.flash else {
            return;
        };
        let conns = &mut self.conns;
        let ready = &mut self.ready;
        io.complete(&self.ctx.shared.store, |key, id| {
            if let Some(c) = conns.get_mut(key).filter(|c| c.id == id) {
                c.awaiting_flash = c.awaiting_flash.saturating_sub(1);
                if c.awaiting_flash == 0 {
                    ready.push_back(key);
                }
            }
        });
    }

    fn close_idle(&mut self) {
        let now = self.ctx.shared.store.clock().now();
        // As memcached: TCP clients only.
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.stream.is_tcp())
            .filter(|(_, c)| now.saturating_sub(c.last_active) > self.idle_timeout)
            .map(|(k, _)| k)
            .collect();
        for k in idle {
            if let Some(conn) = self.conns.get_mut(k) {
                conn.session.set_close_reason(CloseReason::IdleTimeout);
                self.ctx.stats.idle_kicks.incr();
            }
            self.close(k);
        }
    }

    /// Serves until a stop; the connections it hands over at an
    /// upgrade's (`carry`), none otherwise.
    fn run(mut self) -> Vec<ConnRec> {
        self.serve();
        let carry = self
            .ctx
            .shared
            .carry_conns
            .load(std::sync::atomic::Ordering::SeqCst);
        if carry {
            // Requests waiting for flash reads are finished first: their
            // connections are then carried as any other.
            self.finish_flash_reads();
        }
        if let Some(io) = &mut self.flash {
            // No buffer the kernel may still write into is freed.
            io.drain(&self.ctx.shared.store);
        }
        if !carry {
            return Vec::new();
        }
        // Those the acceptor dealt that this worker has not taken yet.
        self.accept_new();
        self.carry_conns()
    }

    fn serve(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut last_idle_check = 0;
        loop {
            if let Some(r) = &self.ctx.repl {
                // The turn's writes go to the senders at once (a push
                // does not wake them: `replication::queue`).
                if self.ctx.take_repl_queued() {
                    r.wake_senders();
                }
            }
            if !self.repl_waiting.is_empty() {
                // The last check before sleeping: acknowledgements that
                // came before the held connections were published woke
                // nobody.
                self.repl_acknowledged();
            }
            let timeout = if !self.ready.is_empty() {
                Some(Duration::ZERO)
            } else if !self.repl_waiting.is_empty() {
                Some(REPL_RECHECK)
            } else if self.idle_timeout > 0 {
                Some(Duration::from_secs(1))
            } else {
                None
            };
            if let Err(e) = self.idle_spin.wait(&mut self.poll, &mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::warn!("worker poll failed: {e}");
                return;
            }
            if self.ctx.shared.stop_requested().is_some() {
                return;
            }
            // With few connections ready, each is read when it runs, so the
            // first one's reply does not wait for the others' reads; the
            // reads are gathered first (and their buckets prefetched) only
            // when enough are ready for the prefetch to pay.
            let gather = events.iter().count() >= GATHER_FROM;
            for ev in events.iter() {
                let key = ev.token().0;
                if ev.token() == WAKE {
                    self.accept_new();
                    continue;
                }
                if ev.token() == FLASH {
                    self.flash_done();
                    continue;
                }
                self.turn.push(key);
                if self.udp_index(key).is_some() {
                    continue;
                }
                if let Some(conn) = self.conns.get_mut(key) {
                    if ev.is_read_closed() || ev.is_error() {
                        conn.peer_closed = true;
                    }
                    if ev.is_readable() {
                        // New data may have come: `drive` reads again
                        // (`prime` reads only into an empty input).
                        conn.drained = false;
                        if gather {
                            conn.prime(&self.ctx, &mut self.first_hashes);
                        }
                    }
                }
            }
            if !self.repl_waiting.is_empty() {
                self.repl_acknowledged();
            }
            for hash in self.first_hashes.drain(..) {
                self.ctx.shared.store.prefetch_item(hash);
            }
            let mut turn = std::mem::take(&mut self.turn);
            for key in turn.drain(..) {
                self.run_conn(key);
            }
            self.turn = turn;
            // Connections that yielded (or are new) get another turn.
            for _ in 0..self.ready.len() {
                if let Some(key) = self.ready.pop_front() {
                    self.run_conn(key);
                }
            }
            if let Some(io) = &mut self.flash {
                io.submit();
            }
            if self.idle_timeout > 0 {
                let now = self.ctx.shared.store.clock().now();
                if now != last_idle_check {
                    last_idle_check = now;
                    self.close_idle();
                }
            }
        }
    }
}

fn connection_gone(shared: &Shared) {
    shared
        .global
        .curr_connections
        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
}

/// Starts worker `index`, serving the given UDP sockets besides the
/// connections it is sent.
pub(crate) fn spawn(
    index: usize,
    shared: Arc<Shared>,
    udp_sockets: Vec<std::net::UdpSocket>,
) -> io::Result<WorkerHandle> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    let mut udp_sockets_mio = Vec::with_capacity(udp_sockets.len());
    for (i, socket) in udp_sockets.into_iter().enumerate() {
        socket.set_nonblocking(true)?;
        let mut socket = UdpSocket::from_std(socket);
        poll.registry().register(
            &mut socket,
            udp_token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        shared.conns.add_server_socket(
            socket.as_raw_fd(),
            crate::conns::Kind::Udp {
                local: socket.local_addr().ok(),
            },
        );
        if shared.verbose() > 1 {
            tracing::debug!("<{} server listening (udp)", socket.as_raw_fd());
        }
        udp_sockets_mio.push(socket);
    }
    let (sender, incoming) = std::sync::mpsc::channel();
    let cpu = shared.settings.thread_affinity.map(|first| first + index);
    // The worker is built on its own thread: its sessions' outputs hold
    // that thread's epoch pin while they gather values (not `Send`).
    let thread = std::thread::Builder::new()
        .name(format!("osmium-worker-{index}"))
        .spawn(move || {
            if let Some(cpu) = cpu {
                super::affinity::pin_to_cpu(cpu);
            }
            let udp: Vec<UdpEndpoint> = udp_sockets_mio.into_iter().map(UdpEndpoint::new).collect();
            let settings = &shared.settings;
            let flash = shared.store.flash().and_then(|_| {
                FlashIo::new(poll.registry(), FLASH, shared.latency[index].clone())
                    .map_err(|e| {
                        if index == 0 {
                            tracing::warn!(
                                "[extstore] io_uring unavailable ({e}): flash reads block their worker"
                            );
                        }
                    })
                    .ok()
            });
            let ctx = WorkerCtx::new(shared.clone(), index);
            ctx.flash_async.set(flash.is_some());
            let worker = Worker {
                flash,
                next_conn_id: 0,
                idle_spin: IdleSpin::new(Duration::from_micros(settings.idle_spin_us.into())),
                idle_timeout: settings.idle_timeout,
                initial_protocol: match settings.binding_protocol {
                    "ascii" => Protocol::Text,
                    "binary" => Protocol::Binary,
                    _ => Protocol::Negotiating,
                },
                ctx,
                poll,
                conns: Slab::with_capacity(64),
                incoming,
                repl_waiting: Vec::new(),
                // Datagrams may have arrived before the first poll.
                ready: (0..udp.len()).map(|i| udp_token(i).0).collect(),
                turn: Vec::with_capacity(1024),
                first_hashes: Vec::with_capacity(4096),
                udp,
            };
            worker.run()
        })?;
    Ok(WorkerHandle {
        sender,
        waker,
        thread,
    })
}
