//! The event loop: one mio `Poll` on one thread serves every pool's
//! listener, clients and server connections. A client's bytes are framed
//! into requests (`request`), each request gets a reply slot (`client`)
//! and goes to the server(s) its keys route to (`backend`); replies coming
//! back fill the slots, which leave in request order. Timers (request
//! timeouts, ejected servers' retries, catch-up checks) run every turn.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry, Token};
use slab::Slab;

use crate::backend::{Delivery, Dest, Pool};
use crate::client::{error_reply, Client, Merge};
use crate::config::Config;
use crate::request::{self, Action, Style};
use crate::stream::Listener;

/// Tokens below this are listeners (one per pool).
const SERVER_BASE: usize = 1 << 20;
/// Tokens from here are clients (slab key + base).
const CLIENT_BASE: usize = 1 << 40;
/// A client whose unsent replies reach this is not read until they drain.
const OUT_HIGH_WATER: usize = 4 << 20;
/// The longest the loop sleeps, so the stop flag is seen.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// A running proxy: bound listeners, ready to [`Proxy::run`].
pub struct Proxy {
    poll: Poll,
    pools: Vec<Pool>,
    listeners: Vec<Listener>,
    clients: Slab<Client>,
    next_id: u64,
}

impl Proxy {
    /// Binds every pool's listener (an error names the pool).
    pub fn bind(config: Config) -> io::Result<Proxy> {
        let poll = Poll::new()?;
        let mut pools = Vec::new();
        let mut listeners = Vec::new();
        let mut base = SERVER_BASE;
        for (i, cfg) in config.pools.into_iter().enumerate() {
            let mut l = Listener::bind(&cfg.listen, cfg.backlog).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "pool '{}': cannot listen on {}: {e}",
                        cfg.name, cfg.listen.pname
                    ),
                )
            })?;
            l.register(poll.registry(), Token(i))?;
            listeners.push(l);
            let pool = Pool::new(cfg, base);
            base += pool.token_count();
            pools.push(pool);
        }
        Ok(Proxy {
            poll,
            pools,
            listeners,
            clients: Slab::new(),
            next_id: 1,
        })
    }

    /// The TCP address pool `i` listens on.
    pub fn local_addr(&self, i: usize) -> Option<std::net::SocketAddr> {
        self.listeners[i].local_addr()
    }

    /// Serves until `stop` is set.
    pub fn run(mut self, stop: Arc<AtomicBool>) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut deliveries = Vec::new();
        let mut touched = Vec::new();
        let mut settling = Vec::new();
        let now = Instant::now();
        for pool in &mut self.pools {
            if pool.cfg.preconnect {
                pool.preconnect(self.poll.registry(), now, &mut deliveries);
            }
        }
        deliveries.clear();
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let sleep = self
                .pools
                .iter()
                .filter_map(Pool::next_timer)
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
                if t < SERVER_BASE {
                    self.accept(t);
                } else if t < CLIENT_BASE {
                    let registry = self.poll.registry();
                    for pool in &mut self.pools {
                        if let Some((s, c)) = pool.conn_of(Token(t)) {
                            let to_end = ev.is_read_closed() || ev.is_error();
                            pool.ready(registry, s, c, to_end, now, &mut deliveries);
                            break;
                        }
                    }
                } else {
                    let key = t - CLIENT_BASE;
                    let to_end = ev.is_read_closed() || ev.is_error();
                    self.client_ready(key, to_end, now, &mut deliveries);
                    touched.push(key);
                }
            }
            let registry = self.poll.registry();
            for pool in &mut self.pools {
                pool.tick(registry, now, &mut deliveries);
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
                for pool in &mut self.pools {
                    pool.flush_queued(registry, now, &mut deliveries);
                }
                self.deliver(&mut deliveries, &mut touched);
                if touched.is_empty() {
                    break;
                }
            }
        }
        for l in &self.listeners {
            if let Listener::Unix(_, path) = l {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(())
    }

    fn accept(&mut self, pool: usize) {
        loop {
            match self.listeners[pool].accept() {
                Ok(stream) => {
                    let id = self.next_id;
                    self.next_id += 1;
                    let entry = self.clients.vacant_entry();
                    let key = entry.key();
                    let mut client = Client::new(stream, pool, id);
                    if client
                        .stream
                        .register(self.poll.registry(), Token(CLIENT_BASE + key))
                        .is_ok()
                    {
                        entry.insert(client);
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
                        c.deliver(seq, part, d.result);
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
        if !c.closing {
            match c.read(to_end) {
                Ok(true) => {}
                Ok(false) | Err(_) => c.closing = true,
            }
        }
        self.serve(key, now, out);
    }

    /// Frames and dispatches the client's buffered requests.
    fn serve(&mut self, key: usize, now: Instant, out: &mut Vec<Delivery>) {
        let registry = self.poll.registry();
        let Some(c) = self.clients.get_mut(key) else {
            return;
        };
        let pool = &mut self.pools[c.pool];
        // Framed requests borrow the read buffer: it is set aside while
        // they are dispatched.
        let mut inbuf = std::mem::take(&mut c.inbuf);
        let mut at = 0;
        while c.backlog() < OUT_HIGH_WATER && !c.quit {
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
        if !gone && !c.inbuf.is_empty() && c.backlog() < OUT_HIGH_WATER && !c.quit {
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
        c.stream.deregister(self.poll.registry());
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
    let no_server = || error_reply(style, "no server is available");
    match action {
        Action::Local(bytes) => c.push_ready(bytes),
        Action::Quit(bytes) => {
            c.push_ready(bytes);
            c.quit = true;
            c.closing = true;
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
        } => match pool.route(&k) {
            None => c.push_ready(no_server()),
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
        },
        Action::MultiGet { prefix, keys } => {
            // The servers in first-key order, each with its keys.
            let mut per: Vec<(usize, Vec<u8>)> = Vec::new();
            let mut slots = Vec::with_capacity(keys.len());
            for k in keys {
                let Some(s) = pool.route(k) else {
                    c.push_ready(no_server());
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
            let live: Vec<usize> = (0..pool.servers.len()).filter(|&s| pool.is_up(s)).collect();
            if live.is_empty() {
                c.push_ready(no_server());
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
