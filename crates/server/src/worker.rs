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

use osmium_protocol::text::{parse_command, scan_line, Command, LineScan};
use osmium_store::Store;

use crate::stats::{StatsContext, ThreadStats};
use crate::text::{self, After};

const WAKE: Token = Token(usize::MAX);
const READ_CHUNK: usize = 16 * 1024;
/// Stop parsing more requests while this much output waits to be sent.
const WRITE_HIGH_WATER: usize = 4 << 20;

/// State shared by all threads.
pub struct Shared {
    pub store: Arc<Store>,
    pub stats: Arc<StatsContext>,
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
    fd: i32,
    peer: String,
    /// Read buffer: bytes `rstart..rend` are received but not yet consumed.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Output waiting to be written, from `wpos`.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Bytes of a refused data block still to discard.
    swallow: usize,
    /// Don't re-parse until this many bytes are buffered (a data block).
    need: usize,
    close_after_write: bool,
    last_active: u32,
}

/// Why a connection's handler returned.
enum Flow {
    /// Waiting for the socket (readable or writable).
    Wait,
    /// Yielded after -R requests; more input is buffered.
    Yield,
    Close,
}

impl Conn {
    fn new(stream: TcpStream, now: u32) -> Conn {
        let fd = stream.as_raw_fd();
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        Conn {
            stream,
            fd,
            peer,
            rbuf: vec![0; READ_CHUNK],
            rstart: 0,
            rend: 0,
            wbuf: Vec::with_capacity(READ_CHUNK),
            wpos: 0,
            swallow: 0,
            need: 0,
            close_after_write: false,
            last_active: now,
        }
    }

    /// Writes buffered output. Ok(true) when all of it is out.
    fn flush(&mut self, stats: &ThreadStats) -> io::Result<bool> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wpos += n;
                    stats.bytes_written.add(n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        if self.wbuf.capacity() > 4 << 20 {
            self.wbuf.shrink_to(READ_CHUNK);
        }
        Ok(true)
    }

    /// Makes room for at least `READ_CHUNK` (or `need`) more bytes.
    fn make_room(&mut self) {
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
            if self.rbuf.len() > 1 << 20 && self.need == 0 {
                self.rbuf = vec![0; READ_CHUNK];
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
                self.rbuf.resize(want.next_power_of_two(), 0);
            }
        }
    }

    /// Reads once. Ok(Some(n)) bytes read, Ok(None) would block, Err on EOF
    /// or error.
    fn read_some(&mut self, stats: &ThreadStats) -> io::Result<Option<usize>> {
        self.make_room();
        loop {
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.rend += n;
                    stats.bytes_read.add(n as u64);
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Parses and executes buffered requests, up to `-R` of them.
    fn process(&mut self, ctx: &WorkerCtx) -> Flow {
        if self.close_after_write {
            // quit was seen: nothing after it is executed.
            return Flow::Wait;
        }
        let mut done = 0;
        loop {
            if self.swallow > 0 {
                let n = self.swallow.min(self.rend - self.rstart);
                self.swallow -= n;
                self.rstart += n;
                if self.swallow > 0 {
                    return Flow::Wait;
                }
            }
            let avail = self.rend - self.rstart;
            if avail == 0 || avail < self.need {
                return Flow::Wait;
            }
            if done >= ctx.reqs_per_event {
                ctx.stats.conn_yields.incr();
                return Flow::Yield;
            }
            if self.wbuf.len() - self.wpos > WRITE_HIGH_WATER {
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
            let cmd = parse_command(line);
            done += 1;
            if let Command::Store(req) = cmd {
                if text::refuse_store(ctx, &req, &mut self.wbuf) {
                    self.rstart += consumed;
                    self.swallow = req.value_len as usize + 2;
                    self.need = 0;
                    continue;
                }
                let total = consumed + req.value_len as usize + 2;
                if buf.len() < total {
                    self.need = total;
                    return Flow::Wait;
                }
                self.need = 0;
                text::complete_store(ctx, &req, &buf[consumed..total], &mut self.wbuf);
                self.rstart += total;
                continue;
            }
            let after = text::execute(ctx, cmd, &mut self.wbuf, &self.peer, self.fd);
            self.rstart += consumed;
            match after {
                After::Continue => {}
                After::CloseAfterWrite => {
                    self.close_after_write = true;
                    return Flow::Wait;
                }
                After::CloseNow => return Flow::Close,
            }
        }
    }

    /// Runs the connection until it must wait for the socket, yields, or
    /// closes.
    fn drive(&mut self, ctx: &WorkerCtx) -> Flow {
        loop {
            // Parse what is buffered (bounded by -R and the write high-water
            // mark), send the replies in one write, then read more.
            match self.process(ctx) {
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
            if self.close_after_write {
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
            let conn = Conn::new(stream, now);
            if self.ctx.shared.stats.verbosity.load(Ordering::Relaxed) > 1 {
                eprintln!("<{} new auto-negotiating client connection", conn.fd);
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
                eprintln!("<{} connection closed.", conn.fd);
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
