//! The event loop: one mio `Poll` on one thread serves every pool's
//! listener, clients and server connections. A client's bytes are framed
//! into requests (`request`), each request gets a reply slot (`client`)
//! and goes to the server(s) its keys route to (`backend`); replies coming
//! back fill the slots, which leave in request order. Timers (request
//! timeouts, ejected servers' retries, catch-up checks) run every turn.
//! The stats port (`stats`) is served by the same loop, from its own
//! token range; the client-side counters (connections, `forward_error`,
//! `fragments`) are counted here. A client of a TLS pool is a TLS session
//! from its accept (`tls`).
//!
//! Pools live in stable slots (a slab): a pool's listener token is its
//! slot, its server connections' tokens start at `SERVER_BASE +
//! slot * POOL_TOKEN_SPAN`, and a client names its pool by slot. A reload
//! (`reload`: SIGHUP, or `reload <token>` on the stats port) changes
//! pools in place, adds new ones in new slots, and leaves a removed pool
//! in its slot, listener closed, until its clients have their replies
//! and are closed.
//!
//! SIGUSR2 upgrades the binary in place (`upgrade`, `crate::upgrade`):
//! while the new binary's check runs the loop serves on; once it passed,
//! the loop quiesces (no accept, no client read, no request framed) until
//! the requests already sent are answered, then `run` returns
//! [`Ran::Upgrade`] for the listeners and clients to be handed over.

mod reload;
mod upgrade;

pub use self::upgrade::Ran;

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry, Token};
use slab::Slab;

use self::upgrade::Upgrading;
use crate::backend::{Delivery, Dest, MoveRoute, Parked, Pool, POOL_TOKEN_SPAN};
use crate::client::{error_reply, Client, Merge};
use crate::config::Config;
use crate::request::{self, Action, Style};
use crate::stats::{self, Header, StatsPort};
use crate::stream::{Listener, Stream};
use crate::tls::{PeerLog, TlsStream};
use crate::upgrade::carried::{take_pool, take_stats, Carried};
use crate::upgrade::History;

/// Tokens below this are listeners (one per pool, the pool's slot).
const STATS_BASE: usize = 1 << 19;
/// Tokens from `STATS_BASE` are the stats port's listener and readers;
/// from here, server connections (`POOL_TOKEN_SPAN` per pool slot).
const SERVER_BASE: usize = 1 << 20;
const _: () = assert!(STATS_BASE + StatsPort::token_span() <= SERVER_BASE);
/// Tokens from here are clients (slab key + base).
const CLIENT_BASE: usize = 1 << 62;
/// Pool slots (listener tokens, and server tokens below `CLIENT_BASE`).
const MAX_POOLS: usize = STATS_BASE;
const _: () = assert!(SERVER_BASE + MAX_POOLS * POOL_TOKEN_SPAN <= CLIENT_BASE);
/// The token of the waker the migrations wake the loop with.
const WAKE: Token = Token(usize::MAX);
/// A client whose unsent replies reach this is not read until they drain.
const OUT_HIGH_WATER: usize = 4 << 20;
/// The longest the loop sleeps, so the stop flag is seen.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// A pool and its listener.
struct Served {
    pool: Pool,
    /// `None` once a reload removed the pool.
    listener: Option<Listener>,
    /// The listener's TLS (`tls.listen`).
    listen_tls: Option<Arc<rustls::ServerConfig>>,
}

impl Served {
    fn removed(&self) -> bool {
        self.listener.is_none()
    }
}

/// The first token of the server connections of pool slot `slot`.
fn token_base(slot: usize) -> usize {
    SERVER_BASE + slot * POOL_TOKEN_SPAN
}

/// A running proxy: bound listeners, ready to [`Proxy::run`].
pub struct Proxy {
    poll: Poll,
    /// By slot (see the module's comment).
    pools: Slab<Served>,
    clients: Slab<Client>,
    next_id: u64,
    stats_port: StatsPort,
    /// The host's name, the stats' `source`.
    source: String,
    started: Instant,
    /// Listeners bound and clients accepted (server connections are
    /// counted by their pools), for `total_connections`.
    opened: u64,
    /// The file a reload reads (`-c`), and the flag SIGHUP sets.
    conf: Option<(PathBuf, Arc<AtomicBool>)>,
    /// Reloads applied and refused since start.
    reloads: u64,
    reload_failures: u64,
    /// Woken by a warm move's migration (a key copied, the move done),
    /// and by an upgrade's check when it ended.
    waker: Arc<mio::Waker>,
    /// The flag SIGUSR2 sets (`upgrade`).
    usr2: Option<Arc<AtomicBool>>,
    /// Where an upgrade is.
    upgrading: Upgrading,
    /// The upgrades this process went through.
    history: History,
    /// Clients an upgrade carried, served at the loop's first turn.
    resume: Vec<usize>,
}

impl Proxy {
    /// Builds every pool's TLS (its files read), then binds the stats port
    /// on `stats_addr:stats_port`, then every pool's listener (an error
    /// names what could not be loaded or bound).
    pub fn bind(config: Config, stats_addr: &str, stats_port: u16) -> io::Result<Proxy> {
        Proxy::bind_carried(config, stats_addr, stats_port, &mut Carried::default())
    }

    /// [`Proxy::bind`], taking the listeners an upgrade carried where
    /// they match (`upgrade::carried`) instead of binding.
    pub fn bind_carried(
        config: Config,
        stats_addr: &str,
        stats_port: u16,
        carried: &mut Carried,
    ) -> io::Result<Proxy> {
        let mut tls = Vec::with_capacity(config.pools.len());
        for pool in &config.pools {
            tls.push(
                crate::tls::build(pool)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            );
        }
        for pool in &config.pools {
            crate::backend::check_limits(pool)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            // Read again by each reload that needs it.
            crate::peer::load_secret(pool)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        }
        let poll = Poll::new()?;
        let mut stats_port = match take_stats(carried, stats_addr, stats_port) {
            Some(l) => StatsPort::on(l),
            None => StatsPort::bind(stats_addr, stats_port).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot listen for stats on {stats_addr}:{stats_port}: {e}"),
                )
            })?,
        };
        stats_port.register(poll.registry(), STATS_BASE)?;
        if config.pools.len() >= MAX_POOLS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "too many pools",
            ));
        }
        let mut pools = Slab::new();
        for ((i, cfg), tls) in config.pools.into_iter().enumerate().zip(tls) {
            let bound = match take_pool(carried, &cfg.listen.addr) {
                Some(l) => Ok(l),
                None => Listener::bind(&cfg.listen, cfg.backlog),
            };
            let mut l = bound.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "pool '{}': cannot listen on {}: {e}",
                        cfg.name, cfg.listen.pname
                    ),
                )
            })?;
            l.register(poll.registry(), Token(i))?;
            pools.insert(Served {
                pool: Pool::new(cfg, token_base(i), tls.servers),
                listener: Some(l),
                listen_tls: tls.listen,
            });
        }
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
        Ok(Proxy {
            poll,
            opened: pools.len() as u64,
            pools,
            clients: Slab::new(),
            next_id: 1,
            stats_port,
            source: stats::hostname(),
            started: Instant::now(),
            conf: None,
            reloads: 0,
            reload_failures: 0,
            waker,
            usr2: None,
            upgrading: Upgrading::Idle,
            history: History::fresh(),
            resume: Vec::new(),
        })
    }

    /// Reloads read `path` (the `-c` file) when `hup` is set (by SIGHUP)
    /// or the stats port is asked.
    pub fn reload_from(&mut self, path: PathBuf, hup: Arc<AtomicBool>) {
        self.conf = Some((path, hup));
    }

    /// Who may reload from the stats port (`--admin-token-file`).
    pub fn set_admin_token(&mut self, token: Option<crate::admin::Token>) {
        self.stats_port.admin.token = token;
    }

    /// The TCP address pool `i` (in the order of the file at start)
    /// listens on.
    pub fn local_addr(&self, i: usize) -> Option<std::net::SocketAddr> {
        self.pools.get(i)?.listener.as_ref()?.local_addr()
    }

    /// The address the stats port listens on.
    pub fn stats_addr(&self) -> Option<std::net::SocketAddr> {
        self.stats_port.local_addr()
    }

    /// A readiness event on one of the stats port's tokens.
    fn stats_ready(&mut self, token: usize) {
        let Proxy {
            poll,
            pools,
            clients,
            stats_port,
            source,
            started,
            opened,
            ..
        } = self;
        stats_port.ready(poll.registry(), token, || {
            stats_doc(source, *started, *opened, clients, pools)
        });
    }

    /// Serves until `stop` is set ([`Ran::Stopped`]), or until an upgrade
    /// quiesced the proxy ([`Ran::Upgrade`]).
    pub fn run(&mut self, stop: Arc<AtomicBool>) -> io::Result<Ran> {
        let mut events = Events::with_capacity(1024);
        let mut deliveries = Vec::new();
        let mut touched = Vec::new();
        let mut settling = Vec::new();
        let mut released = Vec::new();
        let now = Instant::now();
        for (_, s) in &mut self.pools {
            if s.pool.cfg.preconnect {
                s.pool
                    .preconnect(self.poll.registry(), now, &mut deliveries);
            }
        }
        deliveries.clear();
        // Clients an upgrade carried: their buffered input first.
        touched.append(&mut self.resume);
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let quiescing = self.upgrading.quiescing();
            let hup = !quiescing
                && self
                    .conf
                    .as_ref()
                    .is_some_and(|(_, hup)| hup.swap(false, Ordering::Relaxed));
            self.upgrade_asked();
            if hup {
                let _ = self.reload("SIGHUP", now, &mut deliveries, &mut touched);
            }
            let sleep = self
                .pools
                .iter()
                .filter_map(|(_, s)| s.pool.next_timer())
                .chain(self.stats_port.next_timer())
                .min()
                .map_or(MAX_SLEEP, |t| {
                    t.saturating_duration_since(now).min(MAX_SLEEP)
                });
            match self.poll.poll(&mut events, Some(sleep)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            for ev in events.iter() {
                let t = ev.token().0;
                if ev.token() == WAKE {
                    continue;
                }
                // Quiescing, new connections wait in the backlogs, for
                // the image that serves next.
                if t < STATS_BASE {
                    if !quiescing {
                        self.accept(t);
                    }
                } else if t < SERVER_BASE {
                    if !(quiescing && t == STATS_BASE) {
                        self.stats_ready(t);
                    }
                } else if t < CLIENT_BASE {
                    let registry = self.poll.registry();
                    let slot = (t - SERVER_BASE) / POOL_TOKEN_SPAN;
                    if let Some(pool) = self.pools.get_mut(slot).map(|s| &mut s.pool) {
                        if let Some((s, c)) = pool.conn_of(Token(t)) {
                            let to_end = ev.is_read_closed() || ev.is_error();
                            pool.ready(registry, s, c, to_end, now, &mut deliveries);
                        }
                    }
                } else {
                    let key = t - CLIENT_BASE;
                    let to_end = ev.is_read_closed() || ev.is_error();
                    self.client_ready(key, to_end, now, &mut deliveries);
                    touched.push(key);
                }
            }
            for key in self.stats_port.take_reloads() {
                let reloaded = if quiescing {
                    Err("an upgrade runs; try again once it is done".to_string())
                } else {
                    self.reload("the stats port", now, &mut deliveries, &mut touched)
                };
                let answer = match reloaded {
                    Ok(()) => "OK reloaded".to_string(),
                    Err(why) => format!("ERROR {why}"),
                };
                self.stats_port.answer(self.poll.registry(), key, &answer);
            }
            let registry = self.poll.registry();
            self.stats_port.tick(registry, now);
            for (_, s) in &mut self.pools {
                s.pool.tick(registry, now, &mut deliveries);
                s.pool
                    .move_tick(registry, &self.waker, now, &mut deliveries, &mut released);
                s.pool.reap(registry);
            }
            for (key, id) in released.drain(..) {
                if let Some(c) = self.clients.get_mut(key).filter(|c| c.id == id) {
                    c.parked = c.parked.saturating_sub(1);
                    touched.push(key);
                }
            }
            self.deliver(&mut deliveries, &mut touched);
            // Settling may send more requests (a client held back), and
            // writing the turn's requests may fail some at once: repeat
            // until no client has anything new.
            loop {
                touched.sort_unstable();
                touched.dedup();
                std::mem::swap(&mut touched, &mut settling);
                for &key in &settling {
                    self.settle(key, now, &mut deliveries);
                }
                settling.clear();
                let registry = self.poll.registry();
                for (_, s) in &mut self.pools {
                    s.pool.flush_queued(registry, now, &mut deliveries);
                }
                self.deliver(&mut deliveries, &mut touched);
                if touched.is_empty() {
                    break;
                }
            }
            self.forget_removed_pools();
            if let Some(checked) = self.upgrade_step(Instant::now()) {
                return Ok(Ran::Upgrade(checked));
            }
        }
        for (_, s) in &self.pools {
            if let Some(Listener::Unix(_, path)) = &s.listener {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(Ran::Stopped)
    }

    fn accept(&mut self, pool: usize) {
        loop {
            let Some(served) = self.pools.get_mut(pool) else {
                return;
            };
            let Some(listener) = &served.listener else {
                return;
            };
            match listener.accept() {
                Ok(stream) => {
                    let stream = match &served.listen_tls {
                        None => stream,
                        Some(config) => {
                            let peer = format!(
                                "client {} of pool {}",
                                stream.peer(),
                                served.pool.cfg.name
                            );
                            match TlsStream::accept(stream, config.clone(), PeerLog::client(peer)) {
                                Ok(t) => Stream::Tls(Box::new(t)),
                                Err(e) => {
                                    tracing::warn!("accept: {e}");
                                    served.pool.stats.client_err += 1;
                                    continue;
                                }
                            }
                        }
                    };
                    let id = self.next_id;
                    self.next_id += 1;
                    let entry = self.clients.vacant_entry();
                    let key = entry.key();
                    let mut client = Client::new(stream, pool, id);
                    self.opened += 1;
                    if client
                        .stream
                        .register(self.poll.registry(), Token(CLIENT_BASE + key))
                        .is_ok()
                    {
                        entry.insert(client);
                        self.pools[pool].pool.stats.client_connections += 1;
                    } else {
                        self.pools[pool].pool.stats.client_err += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    return;
                }
            }
        }
    }

    fn deliver(&mut self, deliveries: &mut Vec<Delivery>, touched: &mut Vec<usize>) {
        for d in deliveries.drain(..) {
            match d.dest {
                Dest::Client { key, id, seq, part } => {
                    if let Some(c) = self.clients.get_mut(key).filter(|c| c.id == id) {
                        if c.deliver(seq, part, d.result) {
                            self.pools[c.pool].pool.stats.forward_error += 1;
                        }
                        touched.push(key);
                    }
                }
                Dest::Probe => {}
            }
        }
    }

    /// A readiness event on client `key`: reads and serves its requests.
    /// `to_end`: the client shut down its side (read to end of stream).
    fn client_ready(&mut self, key: usize, to_end: bool, now: Instant, out: &mut Vec<Delivery>) {
        let Some(c) = self.clients.get_mut(key) else {
            return;
        };
        // Quiescing, what a client sends waits in its socket for the
        // image that serves next (which reads it at its registration).
        if !c.closing && !self.upgrading.quiescing() {
            match c.read(to_end) {
                Ok(true) => {}
                Ok(false) => {
                    c.closing = true;
                    c.eof = true;
                }
                Err(_) => c.closing = true,
            }
        }
        self.serve(key, now, out);
    }

    /// Frames and dispatches the client's buffered requests.
    fn serve(&mut self, key: usize, now: Instant, out: &mut Vec<Delivery>) {
        if self.upgrading.quiescing() {
            // No request framed: the unframed bytes are handed over.
            return;
        }
        let registry = self.poll.registry();
        let Some(c) = self.clients.get_mut(key) else {
            return;
        };
        let pool = &mut self.pools[c.pool].pool;
        // Framed requests borrow the read buffer: it is set aside while
        // they are dispatched.
        let mut inbuf = std::mem::take(&mut c.inbuf);
        let mut at = 0;
        while c.backlog() < OUT_HIGH_WATER && !c.quit && c.parked == 0 {
            let buf = &inbuf.bytes()[at..];
            if buf.is_empty() {
                break;
            }
            let binary = *c.binary.get_or_insert(buf[0] == request::BIN_REQ);
            let Some(f) = request::frame(buf, binary) else {
                break;
            };
            at += f.len;
            dispatch(pool, registry, c, key, f.action, f.style, now, out);
        }
        if c.quit {
            at = inbuf.len();
        }
        inbuf.consume(at);
        c.inbuf = inbuf;
    }

    /// Writes a client's finished replies; closes it when it is done.
    fn settle(&mut self, key: usize, now: Instant, out: &mut Vec<Delivery>) {
        let Some(c) = self.clients.get_mut(key) else {
            return;
        };
        let gone = c.flush().is_err();
        // A client held back by its own unread replies continues here.
        if !gone && !c.inbuf.is_empty() && c.backlog() < OUT_HIGH_WATER && !c.quit && c.parked == 0
        {
            self.serve(key, now, out);
            let c = self.clients.get_mut(key).unwrap();
            if c.flush().is_err() {
                self.close(key);
                return;
            }
        }
        let c = self.clients.get_mut(key).unwrap();
        if gone || (c.closing && c.drained()) {
            self.close(key);
        }
    }

    fn close(&mut self, key: usize) {
        let mut c = self.clients.remove(key);
        c.stream.close();
        c.stream.deregister(self.poll.registry());
        let stats = &mut self.pools[c.pool].pool.stats;
        stats.client_connections = stats.client_connections.saturating_sub(1);
        if c.eof {
            stats.client_eof += 1;
        } else {
            stats.client_err += 1;
        }
    }
}

/// Sends one request on its way (or answers it).
#[allow(clippy::too_many_arguments)]
fn dispatch(
    pool: &mut Pool,
    registry: &Registry,
    c: &mut Client,
    key: usize,
    action: Action<'_>,
    style: Style,
    now: Instant,
    out: &mut Vec<Delivery>,
) {
    let id = c.id;
    // Answered at once: no live server (nutcracker's forward_error).
    let no_server = |pool: &mut Pool| {
        pool.stats.forward_error += 1;
        error_reply(style, "no server is available")
    };
    match action {
        Action::Local(bytes) => c.push_ready(bytes),
        Action::Quit(bytes) => {
            c.push_ready(bytes);
            c.quit = true;
            c.closing = true;
            c.eof = true;
        }
        Action::Fatal => {
            c.push_ready(Vec::new());
            c.quit = true;
            c.closing = true;
        }
        Action::Forward {
            key: k,
            wire,
            expect,
            quiet,
        } => {
            let route = if pool.is_moving() {
                pool.move_route(&k, crate::moves::classify(&wire))
            } else {
                MoveRoute::Usual
            };
            let to = match route {
                MoveRoute::Usual => pool.route(&k),
                MoveRoute::Slot(s) => Some(s),
                MoveRoute::Park => {
                    let seq = c.push_waiting(style, Merge::Single(quiet), 1);
                    let dest = Dest::Client {
                        key,
                        id,
                        seq,
                        part: 0,
                    };
                    c.parked += 1;
                    pool.park(Parked {
                        key: k.to_vec(),
                        wire: wire.to_vec(),
                        expect,
                        dest,
                    });
                    return;
                }
            };
            match to {
                None => c.push_ready(no_server(pool)),
                Some(s) => {
                    let seq = c.push_waiting(style, Merge::Single(quiet), 1);
                    let dest = Dest::Client {
                        key,
                        id,
                        seq,
                        part: 0,
                    };
                    pool.send(registry, s, &wire, expect, dest, now, out);
                }
            }
        }
        Action::MultiGet { prefix, keys } => {
            // The servers in first-key order, each with its keys.
            let mut per: Vec<(usize, Vec<u8>)> = Vec::new();
            let mut slots = Vec::with_capacity(keys.len());
            let moving = pool.is_moving();
            for k in keys {
                // During a move each key routes by the rules; a `gat` of
                // an uncopied key touches it on its old owner, which the
                // copy then carries (a multi-key get is never parked).
                let route = if moving {
                    pool.move_route(k, crate::moves::Kind::Read)
                } else {
                    MoveRoute::Usual
                };
                let to = match route {
                    MoveRoute::Slot(s) => Some(s),
                    _ => pool.route(k),
                };
                let Some(s) = to else {
                    c.push_ready(no_server(pool));
                    return;
                };
                let part = match per.iter().position(|(x, _)| *x == s) {
                    Some(p) => p,
                    None => {
                        per.push((s, prefix.clone()));
                        per.len() - 1
                    }
                };
                per[part].1.push(b' ');
                per[part].1.extend_from_slice(k);
                slots.push((k.to_vec(), part));
            }
            if per.len() > 1 {
                pool.stats.fragments += per.len() as u64;
            }
            let seq = c.push_waiting(style, Merge::MultiGet(slots), per.len());
            for (part, (s, mut wire)) in per.into_iter().enumerate() {
                wire.extend_from_slice(b"\r\n");
                let dest = Dest::Client { key, id, seq, part };
                pool.send(
                    registry,
                    s,
                    &wire,
                    crate::reply::Expect::Values,
                    dest,
                    now,
                    out,
                );
            }
        }
        Action::Broadcast {
            wire,
            expect,
            quiet,
        } => {
            let live: Vec<usize> = pool.live_slots().collect();
            if live.is_empty() {
                c.push_ready(no_server(pool));
                return;
            }
            let seq = c.push_waiting(style, Merge::Broadcast(quiet), live.len());
            for (part, s) in live.into_iter().enumerate() {
                let dest = Dest::Client { key, id, seq, part };
                pool.send(registry, s, &wire, expect, dest, now, out);
            }
        }
    }
}

/// The stats port's document for the proxy's state now.
fn stats_doc(
    source: &str,
    started: Instant,
    opened: u64,
    clients: &Slab<Client>,
    pools: &Slab<Served>,
) -> Vec<u8> {
    let servers_opened: u64 = pools.iter().map(|(_, s)| s.pool.conns_opened).sum();
    let servers_open: u64 = pools.iter().map(|(_, s)| s.pool.open_conns()).sum();
    let listeners = pools.iter().filter(|(_, s)| !s.removed()).count();
    let head = Header {
        source,
        uptime: started.elapsed().as_secs(),
        timestamp: crate::counters::now_secs(),
        total_connections: opened + servers_opened,
        curr_connections: (listeners + clients.len()) as u64 + servers_open,
    };
    let shown: Vec<&Pool> = pools
        .iter()
        .filter(|(_, s)| !s.removed())
        .map(|(_, s)| &s.pool)
        .collect();
    stats::render(&head, &shown)
}
