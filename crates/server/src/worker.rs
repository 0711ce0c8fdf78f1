//! Worker threads: each runs its own mio event loop over the connections
//! the acceptor hands it (TCP or unix-domain streams) and over its own
//! clones of the UDP sockets (`udp`), and drives every connection through
//! read -> parse -> execute -> write (the "network" stage of seed 001).
//!
//! Per connection there is one read buffer and one write buffer, reused for
//! its lifetime: requests are parsed in place from the read buffer and all
//! replies of a batch of pipelined requests are written with one `write`.
//! A connection that has run `-R` requests in a row yields to the others
//! (memcached's `conn_yields`) and is resumed from the worker's ready queue.
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
//! 3. `Conn::drive`: parse and execute the requests, write the replies;
//!    each request run prefetches the item of the one four further on
//!    (`Ahead::step`), so a pipeline's item misses overlap too.
//!
//! A read that returned less than it had room for emptied the socket, so
//! `drive` does not read again (which would only return `EAGAIN`): epoll is
//! edge-triggered, and data arriving later raises a new event. Not once an
//! event has said the peer shut its side (EPOLLRDHUP): the FIN may have come
//! with the data just read, and no later event would report it.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use mio::event::Source;
use mio::net::{TcpStream, UdpSocket, UnixStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use slab::Slab;

use osmium_store::Store;

use crate::session::{BufferPool, Flow, Peer, Protocol, Session, AHEAD_DISTANCE};
use crate::stats::{StatsContext, ThreadStats};
use crate::udp::{Progress, UdpEndpoint};

const WAKE: Token = Token(usize::MAX);

/// The token of this worker's UDP endpoint `i` (counted down from WAKE;
/// connection tokens are slab keys counted up from 0).
fn udp_token(i: usize) -> Token {
    Token(usize::MAX - 1 - i)
}

/// An accepted stream connection.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn peer(&self) -> Peer {
        match self {
            Stream::Tcp(s) => Peer::Tcp {
                remote: s.peer_addr().ok(),
                local: s.local_addr().ok(),
            },
            Stream::Unix(_) => Peer::Unix,
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}

/// State shared by all threads.
pub struct Shared {
    pub store: Arc<Store>,
    pub stats: Arc<StatsContext>,
    /// -S and -Y.
    pub auth: crate::auth::AuthConfig,
    pub shutdown: AtomicBool,
    pub acceptor_waker: std::sync::OnceLock<Arc<Waker>>,
}

impl Shared {
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        if let Some(w) = self.acceptor_waker.get() {
            let _ = w.wake();
        }
    }
}

/// What a worker's handlers see.
pub struct WorkerCtx {
    pub shared: Arc<Shared>,
    pub stats: Arc<ThreadStats>,
    /// This worker's write head in the store.
    pub head: usize,
    pub reqs_per_event: usize,
    /// Large read buffers for this worker's sessions.
    pub buffers: BufferPool,
}

/// The acceptor's handle on a worker.
pub struct WorkerHandle {
    pub sender: Sender<Stream>,
    pub waker: Arc<Waker>,
    pub thread: std::thread::JoinHandle<()>,
}

struct Conn {
    stream: Stream,
    session: Session,
    last_active: u32,
    /// `prime` met the end of the stream or an error.
    hangup: bool,
    /// The last read returned less than it had room for: the socket was
    /// empty then, and (epoll being edge-triggered) more data will raise a
    /// new event, so reading again now would only cost an `EAGAIN`. TCP
    /// only: a unix stream read may stop short at a sender boundary. Never
    /// after the peer closed: its FIN may have come with the last data, and
    /// then no new event would ever report the end of the stream.
    drained: bool,
    /// An event said the peer shut its side (EPOLLRDHUP) or failed.
    peer_closed: bool,
}

impl Conn {
    fn new(stream: Stream, now: u32, protocol: Protocol) -> Conn {
        let fd = stream.as_raw_fd();
        let peer = stream.peer();
        Conn {
            stream,
            session: Session::new(fd, peer, protocol),
            last_active: now,
            hangup: false,
            drained: false,
            peer_closed: false,
        }
    }

    /// Writes buffered output. Ok(true) when all of it is out.
    fn flush(&mut self, stats: &ThreadStats) -> io::Result<bool> {
        while !self.session.pending_output().is_empty() {
            match self.stream.write(self.session.pending_output()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.session.output_written(n);
                    stats.bytes_written.add(n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Reads once. Ok(Some(n)) bytes read, Ok(None) would block, Err on EOF
    /// or error.
    fn read_some(&mut self, ctx: &WorkerCtx) -> io::Result<Option<usize>> {
        let stats = &ctx.stats;
        loop {
            // A large data block goes straight into its item until filled.
            let into_item = self
                .session
                .incoming
                .as_ref()
                .is_some_and(|i| !i.item.is_filled());
            let read = if into_item {
                let store = &ctx.shared.store;
                let item = &mut self.session.incoming.as_mut().expect("incoming").item;
                let space = store.incoming_space(item);
                let room = space.len();
                self.stream.read(space).map(|n| {
                    store.incoming_filled(item, n);
                    (n, room)
                })
            } else {
                let space = self.session.read_space(&ctx.buffers);
                let room = space.len();
                let r = self.stream.read(space);
                if let Ok(n) = r {
                    self.session.input_received(n);
                }
                r.map(|n| (n, room))
            };
            match read {
                Ok((0, _)) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok((n, room)) => {
                    self.drained =
                        n < room && !self.peer_closed && matches!(self.stream, Stream::Tcp(_));
                    stats.bytes_read.add(n as u64);
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The first pass of an event-loop turn for a readable connection:
    /// reads once, and for the keys of the first requests that have arrived
    /// (up to `AHEAD_CAPACITY`), starts fetching their index buckets and
    /// keeps their hashes in the session's `Ahead`. The requests run later,
    /// in `drive`, by which time the other connections of the turn have
    /// been read and the buckets have arrived.
    fn prime(&mut self, ctx: &WorkerCtx, first_hashes: &mut Vec<u64>) {
        self.session.ahead.clear();
        if self.hangup {
            return;
        }
        if self.session.input().is_empty() && self.read_some(ctx).is_err() {
            // EOF or an error: `drive` closes the connection.
            self.hangup = true;
            return;
        }
        let store = &ctx.shared.store;
        let session = &mut self.session;
        let input = &session.rbuf[session.rstart..session.rend];
        for (i, key) in osmium_protocol::peek::keys(input).enumerate() {
            let hash = store.prefetch_bucket(key);
            if i < AHEAD_DISTANCE {
                first_hashes.push(hash);
            }
            if !session.ahead.push(hash) {
                break;
            }
        }
    }

    /// Runs the connection until it must wait for the socket, yields, or
    /// closes.
    fn drive(&mut self, ctx: &WorkerCtx) -> Flow {
        loop {
            // Parse what is buffered (bounded by -R and the write high-water
            // mark), send the replies in one write, then read more.
            match self.session.process(ctx) {
                Flow::Close => return Flow::Close,
                Flow::Yield => {
                    // Let other connections run; if the socket is full, the
                    // writable event resumes this one instead.
                    return match self.flush(&ctx.stats) {
                        Ok(true) => Flow::Yield,
                        Ok(false) => Flow::Wait,
                        Err(_) => Flow::Close,
                    };
                }
                Flow::Wait => {}
            }
            match self.flush(&ctx.stats) {
                Ok(true) => {}
                Ok(false) => return Flow::Wait,
                Err(_) => return Flow::Close,
            }
            if self.session.close_after_write || self.hangup {
                return Flow::Close;
            }
            if std::mem::take(&mut self.drained) {
                return Flow::Wait;
            }
            match self.read_some(ctx) {
                Ok(Some(_)) => {}
                Ok(None) => return Flow::Wait,
                Err(_) => return Flow::Close,
            }
        }
    }
}

struct Worker {
    ctx: WorkerCtx,
    poll: Poll,
    conns: Slab<Conn>,
    incoming: Receiver<Stream>,
    /// This worker's clones of the UDP sockets.
    udp: Vec<UdpEndpoint>,
    /// Tokens (slab keys or UDP tokens) to run again without an event.
    ready: VecDeque<usize>,
    /// This turn's tokens with an event.
    turn: Vec<usize>,
    /// The hashes of the first `AHEAD_DISTANCE` keys of each connection's
    /// waiting requests (`Conn::prime`), whose items pass 2 prefetches.
    first_hashes: Vec<u64>,
    idle_timeout: u32,
    /// From `-B`: auto negotiates per connection.
    initial_protocol: Protocol,
}

impl Worker {
    fn accept_new(&mut self) {
        while let Ok(mut stream) = self.incoming.try_recv() {
            let now = self.ctx.shared.store.clock().now();
            let entry = self.conns.vacant_entry();
            let token = Token(entry.key());
            if self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                .is_err()
            {
                self.connection_gone();
                continue;
            }
            let conn = Conn::new(stream, now, self.initial_protocol);
            if self.ctx.shared.stats.verbosity.load(Ordering::Relaxed) > 1 {
                eprintln!(
                    "<{} new auto-negotiating client connection",
                    conn.session.fd
                );
            }
            entry.insert(conn);
            // Data may already be waiting.
            self.ready.push_back(token.0);
        }
    }

    fn close(&mut self, key: usize) {
        if let Some(mut conn) = self.conns.try_remove(key) {
            if let Some(incoming) = conn.session.incoming.take() {
                self.ctx.shared.store.abandon_incoming(incoming.item);
            }
            let _ = self.poll.registry().deregister(&mut conn.stream);
            if self.ctx.shared.stats.verbosity.load(Ordering::Relaxed) > 1 {
                eprintln!("<{} connection closed.", conn.session.fd);
            }
            self.connection_gone();
        }
    }

    fn connection_gone(&self) {
        self.ctx
            .shared
            .stats
            .global
            .curr_connections
            .fetch_sub(1, Ordering::Relaxed);
    }

    /// The UDP endpoint index a token stands for.
    fn udp_index(&self, token: usize) -> Option<usize> {
        let i = (usize::MAX - 1).checked_sub(token)?;
        (i < self.udp.len()).then_some(i)
    }

    fn run_udp(&mut self, i: usize) {
        let endpoint = &mut self.udp[i];
        let progress =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| endpoint.drive(&self.ctx)))
                .unwrap_or_else(|_| {
                    eprintln!("UDP request handler panicked; dropping that request");
                    endpoint.reset();
                    Progress::MoreWork
                });
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
        // A bug hit by one connection's input must not take down the other
        // connections of this worker: contain it and drop that connection.
        let flow = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conn.drive(&self.ctx)))
            .unwrap_or_else(|_| {
                eprintln!("connection handler panicked; closing that connection");
                Flow::Close
            });
        match flow {
            Flow::Wait => {}
            Flow::Yield => self.ready.push_back(key),
            Flow::Close => self.close(key),
        }
    }

    fn close_idle(&mut self) {
        let now = self.ctx.shared.store.clock().now();
        let idle: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| now.saturating_sub(c.last_active) > self.idle_timeout)
            .map(|(k, _)| k)
            .collect();
        for k in idle {
            self.close(k);
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut last_idle_check = 0;
        loop {
            let timeout = if !self.ready.is_empty() {
                Some(Duration::ZERO)
            } else if self.idle_timeout > 0 {
                Some(Duration::from_secs(1))
            } else {
                None
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("worker poll failed: {e}");
                return;
            }
            if self.ctx.shared.shutdown.load(Ordering::Relaxed) {
                return;
            }
            // Read every ready connection and start fetching the index
            // bucket of its first request's key; then start fetching the
            // items those buckets point at; then run the connections. The
            // memory accesses of one connection's lookup overlap the reads
            // of the others instead of stalling its own request.
            for ev in events.iter() {
                let key = ev.token().0;
                if ev.token() == WAKE {
                    self.accept_new();
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
                        conn.prime(&self.ctx, &mut self.first_hashes);
                    }
                }
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

/// Starts worker `index`, serving the given UDP sockets besides the
/// connections it is sent.
pub fn spawn(
    index: usize,
    shared: Arc<Shared>,
    stats: Arc<ThreadStats>,
    udp_sockets: Vec<std::net::UdpSocket>,
) -> io::Result<WorkerHandle> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    let mut udp = Vec::with_capacity(udp_sockets.len());
    for (i, socket) in udp_sockets.into_iter().enumerate() {
        socket.set_nonblocking(true)?;
        let mut endpoint = UdpEndpoint::new(UdpSocket::from_std(socket));
        poll.registry().register(
            endpoint.socket(),
            udp_token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        if shared.stats.verbosity.load(Ordering::Relaxed) > 1 {
            eprintln!("<{} server listening (udp)", endpoint.fd());
        }
        udp.push(endpoint);
    }
    let (sender, incoming) = std::sync::mpsc::channel();
    let settings = &shared.stats.settings;
    let worker = Worker {
        ctx: WorkerCtx {
            head: index,
            reqs_per_event: settings.reqs_per_event,
            buffers: BufferPool::new(),
            stats,
            shared: shared.clone(),
        },
        idle_timeout: settings.idle_timeout,
        initial_protocol: match settings.binding_protocol {
            "ascii" => Protocol::Text,
            "binary" => Protocol::Binary,
            _ => Protocol::Negotiating,
        },
        poll,
        conns: Slab::with_capacity(64),
        incoming,
        // Datagrams may have arrived before the first poll.
        ready: (0..udp.len()).map(|i| udp_token(i).0).collect(),
        turn: Vec::with_capacity(1024),
        first_hashes: Vec::with_capacity(4096),
        udp,
    };
    let cpu = settings.thread_affinity.map(|first| first + index);
    let thread = std::thread::Builder::new()
        .name(format!("osmium-worker-{index}"))
        .spawn(move || {
            if let Some(cpu) = cpu {
                pin_to_cpu(cpu);
            }
            worker.run()
        })?;
    Ok(WorkerHandle {
        sender,
        waker,
        thread,
    })
}

/// Pins the calling thread to the `n`th CPU (mod their count) of those
/// this process may run on (`-o thread_affinity`); a failure is reported
/// and the thread runs unpinned.
fn pin_to_cpu(n: usize) {
    // SAFETY: cpu_set_t is plain data; zeroed is an empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a cpu_set_t of the size given; pid 0 is
    // the calling thread.
    let got =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) };
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i is below CPU_SETSIZE, inside the set.
        .filter(|&i| got == 0 && unsafe { libc::CPU_ISSET(i, &allowed) })
        .collect();
    if cpus.is_empty() {
        eprintln!("thread_affinity: cannot read this process's CPUs; not pinning");
        return;
    }
    let cpu = cpus[n % cpus.len()];
    // SAFETY: as above, plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu is below CPU_SETSIZE; then a valid set of the size given.
    let r = unsafe {
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        eprintln!(
            "thread_affinity: pinning to CPU {cpu}: {}",
            io::Error::last_os_error()
        );
    }
}
