//! Worker threads: each runs its own mio event loop over the connections
//! the acceptor hands it, and drives every connection through
//! read -> parse -> execute -> write (the "network" stage of seed 001).
//!
//! Per connection there is one read buffer and one write buffer, reused for
//! its lifetime: requests are parsed in place from the read buffer and all
//! replies of a batch of pipelined requests are written with one `write`.
//! A connection that has run `-R` requests in a row yields to the others
//! (memcached's `conn_yields`) and is resumed from the worker's ready queue.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use osmium_store::Store;

use crate::session::{Flow, Protocol, Session};
use crate::stats::{StatsContext, ThreadStats};

const WAKE: Token = Token(usize::MAX);

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
}

/// The acceptor's handle on a worker.
pub struct WorkerHandle {
    pub sender: Sender<TcpStream>,
    pub waker: Arc<Waker>,
    pub thread: std::thread::JoinHandle<()>,
}

struct Conn {
    stream: TcpStream,
    session: Session,
    last_active: u32,
}

impl Conn {
    fn new(stream: TcpStream, now: u32, protocol: Protocol) -> Conn {
        let fd = stream.as_raw_fd();
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        Conn {
            stream,
            session: Session::new(fd, peer, protocol),
            last_active: now,
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
    fn read_some(&mut self, stats: &ThreadStats) -> io::Result<Option<usize>> {
        loop {
            match self.stream.read(self.session.read_space()) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.session.input_received(n);
                    stats.bytes_read.add(n as u64);
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
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
            if self.session.close_after_write {
                return Flow::Close;
            }
            match self.read_some(&ctx.stats) {
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
    incoming: Receiver<TcpStream>,
    ready: VecDeque<usize>,
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

    fn run_conn(&mut self, key: usize) {
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
            for ev in events.iter() {
                if ev.token() == WAKE {
                    self.accept_new();
                } else {
                    self.run_conn(ev.token().0);
                }
            }
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

/// Starts worker `index`.
pub fn spawn(
    index: usize,
    shared: Arc<Shared>,
    stats: Arc<ThreadStats>,
) -> io::Result<WorkerHandle> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    let (sender, incoming) = std::sync::mpsc::channel();
    let settings = &shared.stats.settings;
    let worker = Worker {
        ctx: WorkerCtx {
            head: index,
            reqs_per_event: settings.reqs_per_event,
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
        ready: VecDeque::new(),
    };
    let thread = std::thread::Builder::new()
        .name(format!("osmium-worker-{index}"))
        .spawn(move || worker.run())?;
    Ok(WorkerHandle {
        sender,
        waker,
        thread,
    })
}
