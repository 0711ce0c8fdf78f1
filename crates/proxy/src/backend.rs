//! A pool's servers at run time: their persistent pipelined connections
//! (requests written in order, replies matched to them in order;
//! `server_connections` for text and meta, as many for binary, since a
//! memcached connection keeps the protocol of its first byte), their
//! health (consecutive failures, ejection, the retry probe and the
//! replication catch-up check), and routing a key to a live server by the
//! pool's failover mode. With `tls.servers`, every connection is a TLS
//! session verifying the server's certificate: one that does not verify
//! fails its connection like a refused connect (a failure of the server,
//! towards its ejection). The stats port's server counters and
//! `server_ejects` are counted here; the queues are read from the
//! connections' pending requests when the port is asked.
//!
//! A server lives in a stable slot of the pool (`servers`, a slab) for as
//! long as it has connections: its connections' tokens and the replies
//! queued on them are tied to the slot, not to its place in `servers:`.
//! A reload (`reconfigure`) keeps the slot of every server it keeps,
//! gives new servers new slots, and leaves a removed server in its slot,
//! out of the ring, until every request queued on it is answered.
//!
//! Health of a server, with `auto_eject_hosts`:
//!
//! ```text
//!  Up ──(server_failure_limit failures)──▶ Ejected ──(server_retry_timeout)──▶ Probing
//!   ▲                                        ▲                                  │ stats
//!   │                                        └────────(probe fails)─────────────┤
//!   └──(no replication_catchup, or done)────────────────────────────────────────┤
//!                               CatchingUp ◀──(replication_catchup not done)────┘
//!                                  └──(100 ms)──▶ Probing
//! ```

mod moving;
mod reconfigure;

use std::collections::VecDeque;
use std::io;
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Interest, Registry, Token};
use osmium_net::nb;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use slab::Slab;

pub use moving::{MoveRoute, Parked};
pub use reconfigure::{Reconfigured, RingChange};

use crate::config::{Addr, Distribution, Failover, PoolConfig, ServerConfig};
use crate::counters::{now_usec, PoolStats, Queues, ServerStats};
use crate::reply::{self, Expect};
use crate::ring::Ring;
use crate::tls::{PeerLog, ServersContext};

/// How often a catching-up server is asked again.
pub const CATCHUP_RECHECK: Duration = Duration::from_millis(100);
/// The probe's own timeout when the pool has none.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// A server connection's token, from its pool's `token_base`: the
/// server's slot shifted by `CONN_BITS`, plus the connection's index.
pub const CONN_BITS: u32 = 24;
/// Bits of a server's slot in a token.
pub const SLOT_BITS: u32 = 16;
/// The tokens one pool's server connections may take.
pub const POOL_TOKEN_SPAN: usize = 1 << (CONN_BITS + SLOT_BITS);
/// Server slots of a pool (servers configured and removed ones draining).
pub const MAX_SLOTS: usize = 1 << SLOT_BITS;
/// The largest `server_connections` (text and binary connections of a
/// server fit its slot's tokens).
pub const MAX_SERVER_CONNECTIONS: u32 = 1 << (CONN_BITS - 2);
const _: () = assert!(usize::BITS >= 64, "tokens need a 64-bit usize");

/// Whether a pool's configuration fits the token layout.
pub fn check_limits(cfg: &PoolConfig) -> Result<(), String> {
    if cfg.servers.len() > MAX_SLOTS / 2 {
        return Err(format!(
            "pool '{}': {} servers, at most {} are served",
            cfg.name,
            cfg.servers.len(),
            MAX_SLOTS / 2
        ));
    }
    if cfg.server_connections > MAX_SERVER_CONNECTIONS {
        return Err(format!(
            "pool '{}': server_connections {} is more than {MAX_SERVER_CONNECTIONS}",
            cfg.name, cfg.server_connections
        ));
    }
    Ok(())
}

/// Where a reply goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// Part `part` of reply slot `seq` of client `key` (generation `id`).
    Client {
        /// The client connection's slot.
        key: usize,
        /// The client connection's generation (a slot is reused).
        id: u64,
        /// The reply slot, in the client's request order.
        seq: u64,
        /// Which part of a reply assembled from several servers (a multi-get).
        part: usize,
    },
    /// The health probe of the server (answered inside the pool).
    Probe,
}

/// A reply (or failure) for a client.
#[derive(Debug)]
pub struct Delivery {
    /// Where it goes.
    pub dest: Dest,
    /// The server's reply bytes, or why there are none.
    pub result: Result<Vec<u8>, String>,
}

#[derive(Debug)]
struct Pending {
    dest: Dest,
    expect: Expect,
    deadline: Option<Instant>,
    /// A plain read that goes to the server's replica if this connection
    /// fails: where its bytes are in the connection's `journal` (absolute
    /// offset, length).
    retry: Option<(u64, usize)>,
    /// Where the request's bytes end in the connection's output (bytes
    /// queued since it opened), and how many they are: the request is
    /// fully written once `written_bytes` reaches `end`.
    end: u64,
    len: usize,
}

/// How a server connection ended (nutcracker's `server_eof`,
/// `server_timedout`, `server_err`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The server closed the connection.
    Eof,
    /// A request went unanswered past `timeout`.
    TimedOut,
    /// A connect, read or write failed (or TLS did).
    Error,
}

/// A connection's socket and TLS session, its requests' bytes not yet
/// written and its replies' bytes not yet framed (`osmium_net::nb`).
type Link = nb::Conn<PeerLog>;

/// One connection to a server.
#[derive(Debug, Default)]
pub struct Conn {
    /// Open (connecting or connected).
    link: Option<Link>,
    connected: bool,
    pending: VecDeque<Pending>,
    /// In the pool's `dirty` list: written at the end of the turn.
    queued: bool,
    /// The bytes of the pending plain reads, in sending order, kept to be
    /// sent to the replica if the connection fails (`failover: replica`).
    journal: Vec<u8>,
    /// The absolute offset of `journal[0]`.
    journal_base: u64,
    /// How many pending requests have bytes in the journal.
    journaled: usize,
    /// Bytes queued for the server, and written to it.
    queued_bytes: u64,
    written_bytes: u64,
}

impl Conn {
    /// Keeps `wire` for a retry; its place.
    fn journal(&mut self, wire: &[u8]) -> (u64, usize) {
        let at = self.journal_base + self.journal.len() as u64;
        self.journal.extend_from_slice(wire);
        self.journaled += 1;
        (at, wire.len())
    }

    /// A journaled request was answered: its bytes, and all before them,
    /// are no longer needed.
    fn answered(&mut self, (at, len): (u64, usize)) {
        self.journaled -= 1;
        let done = (at - self.journal_base) as usize + len;
        if self.journaled == 0 || (done >= 4096 && 2 * done >= self.journal.len()) {
            self.journal.drain(..done);
            self.journal_base += done as u64;
        }
    }

    /// The bytes of a journaled request.
    fn journaled_wire(&self, (at, len): (u64, usize)) -> &[u8] {
        let from = (at - self.journal_base) as usize;
        &self.journal[from..from + len]
    }
}

/// A server's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Taking requests.
    Up,
    /// Out of the ring after `server_failure_limit` failures.
    Ejected {
        /// When it is probed (`server_retry_timeout` after the ejection).
        retry_at: Instant,
    },
    /// A `stats` probe is on its way: its answer brings the server back.
    Probing,
    /// It answered, but its `replication_catchup` is not `done`.
    CatchingUp {
        /// When it is probed again.
        next_probe: Instant,
    },
}

/// One server of a pool.
#[derive(Debug)]
pub struct Server {
    /// Its line of `servers:` (address, weight, name).
    pub cfg: ServerConfig,
    /// Its index in the pool's `servers:` (the ring's index); `None` once
    /// a reload removed it: it takes no new requests, and its connections
    /// close once every request queued on them is answered.
    pub pos: Option<usize>,
    /// The name its certificate is verified against (`tls.servers`).
    tls_name: Option<ServerName<'static>>,
    /// Text connection `j` is `conns[2 * j]`, binary connection `j` is
    /// `conns[2 * j + 1]`: an index (and its token) does not depend on
    /// `server_connections`, which a reload may change. Connections past
    /// `2 * server_connections` take no new requests and close once idle.
    pub conns: Vec<Conn>,
    next: usize,
    /// Failures since its last success (towards `server_failure_limit`).
    pub failures: u32,
    /// Up, ejected, probed, or catching up (see the module comment).
    pub health: Health,
    /// Its counters for the stats port.
    pub stats: ServerStats,
    /// A connection of the pool reached it once (a warm move from a ring
    /// of servers never reached has nothing to move).
    pub ever_connected: bool,
}

/// A pool: its configuration, placement and servers.
#[derive(Debug)]
pub struct Pool {
    /// The pool's configuration.
    pub cfg: PoolConfig,
    /// Where each key goes.
    pub ring: Ring,
    /// Every server with connections, by slot (see the module's comment).
    pub servers: Slab<Server>,
    /// The slot of each server of `cfg.servers` (ring index → slot).
    pub order: Vec<usize>,
    /// The first token of this pool's server connections (it takes
    /// `POOL_TOKEN_SPAN` tokens).
    token_base: usize,
    /// Connections (slot, index) given requests this turn, written by
    /// [`Pool::flush_queued`] so that a turn's requests for one
    /// connection leave in one write.
    dirty: Vec<(usize, usize)>,
    /// The pool's counters for the stats port.
    pub stats: PoolStats,
    /// Server connections opened (connects started), for the stats
    /// port's `total_connections`.
    pub conns_opened: u64,
    /// TLS to the servers (`tls.servers`).
    tls: Option<Arc<ClientConfig>>,
    /// A reload left removed servers or surplus connections to close
    /// once idle ([`Pool::reap`]).
    draining: bool,
    /// A warm move in progress (`moving`).
    moving: Option<moving::Moving>,
    /// Parked requests to send again (a move ended or was replaced).
    requeue: Vec<Parked>,
}

impl Server {
    fn new(
        cfg: ServerConfig,
        pos: usize,
        tls_name: Option<ServerName<'static>>,
        connections: u32,
    ) -> Server {
        Server {
            cfg,
            pos: Some(pos),
            tls_name,
            conns: (0..2 * connections).map(|_| Conn::default()).collect(),
            next: 0,
            failures: 0,
            health: Health::Up,
            stats: ServerStats::default(),
            ever_connected: false,
        }
    }

    /// Whether a request is queued on one of its connections (the health
    /// probe too).
    fn busy(&self) -> bool {
        self.conns.iter().any(|c| !c.pending.is_empty())
    }
}

/// A pool's TLS to its servers: the client configuration, and each
/// server's name (in `servers:` order; `None` for all without TLS).
fn split_tls(
    tls: Option<ServersContext>,
    servers: usize,
) -> (Option<Arc<ClientConfig>>, Vec<Option<ServerName<'static>>>) {
    match tls {
        Some(t) => (Some(t.config), t.names.into_iter().map(Some).collect()),
        None => (None, vec![None; servers]),
    }
}

fn strerror(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "Connection refused".into(),
        io::ErrorKind::ConnectionReset => "Connection reset by peer".into(),
        io::ErrorKind::TimedOut => "Connection timed out".into(),
        _ => {
            let s = e.to_string();
            s.split(" (os error").next().unwrap_or(&s).to_string()
        }
    }
}

impl Pool {
    /// The pool of `cfg`, its server connections' tokens from
    /// `token_base` (`POOL_TOKEN_SPAN` of them).
    pub fn new(cfg: PoolConfig, token_base: usize, tls: Option<ServersContext>) -> Pool {
        let ring = Ring::new(&cfg);
        let (tls, mut names) = split_tls(tls, cfg.servers.len());
        let mut servers = Slab::with_capacity(cfg.servers.len());
        let order = cfg
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                servers.insert(Server::new(
                    s.clone(),
                    i,
                    names[i].take(),
                    cfg.server_connections,
                ))
            })
            .collect();
        Pool {
            cfg,
            ring,
            servers,
            order,
            token_base,
            dirty: Vec::new(),
            stats: PoolStats::default(),
            conns_opened: 0,
            tls,
            draining: false,
            moving: None,
            requeue: Vec::new(),
        }
    }

    /// Server connections open now (connecting ones too).
    pub fn open_conns(&self) -> u64 {
        let open = self.servers.iter().flat_map(|(_, s)| &s.conns);
        open.filter(|c| c.link.is_some()).count() as u64
    }

    /// The slots of the configured servers that take requests now, in
    /// `servers:` order.
    pub fn live_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.order.iter().copied().filter(|&s| self.up(s))
    }

    /// Server `s`'s client requests not yet fully written and those
    /// awaiting their reply (the health probe is not counted).
    pub fn queues(&self, s: usize) -> Queues {
        let mut q = Queues::default();
        for conn in &self.servers[s].conns {
            for p in conn.pending.iter().filter(|p| p.dest != Dest::Probe) {
                if p.end > conn.written_bytes {
                    q.in_queue += 1;
                    q.in_queue_bytes += p.len as u64;
                } else {
                    q.out_queue += 1;
                    q.out_queue_bytes += p.len as u64;
                }
            }
        }
        q
    }

    fn token(&self, server: usize, conn: usize) -> Token {
        Token(self.token_base + (server << CONN_BITS) + conn)
    }

    /// The server (slot) and connection of a token of this pool.
    pub fn conn_of(&self, token: Token) -> Option<(usize, usize)> {
        let i = token.0.checked_sub(self.token_base)?;
        if i >= POOL_TOKEN_SPAN {
            return None;
        }
        let (s, c) = (i >> CONN_BITS, i & ((1 << CONN_BITS) - 1));
        let server = self.servers.get(s)?;
        (c < server.conns.len()).then_some((s, c))
    }

    /// Whether server (slot) `s` takes requests now: configured, and up
    /// (or the pool does not eject).
    fn up(&self, s: usize) -> bool {
        let server = &self.servers[s];
        server.pos.is_some() && (!self.cfg.auto_eject_hosts || server.health == Health::Up)
    }

    /// Whether server (slot) `s` takes requests now.
    pub fn is_up(&self, s: usize) -> bool {
        self.up(s)
    }

    /// The server (slot) a request for `key` goes to now; `None` when
    /// none is live.
    pub fn route(&self, key: &[u8]) -> Option<usize> {
        let pos = if self.cfg.distribution == Distribution::Random {
            self.ring.live_server_of(key)?
        } else if !self.cfg.auto_eject_hosts {
            self.ring.server_of(key)
        } else {
            match self.cfg.failover {
                Failover::Rehash => self.ring.live_server_of(key)?,
                Failover::Replica => {
                    let home = self.ring.server_of(key);
                    let n = self.order.len();
                    (0..n)
                        .map(|k| (home + k) % n)
                        .find(|&i| self.up(self.order[i]))?
                }
            }
        };
        self.order.get(pos).copied()
    }

    fn rebuild(&mut self) {
        let live: Vec<bool> = self.order.iter().map(|&s| self.up(s)).collect();
        self.ring.set_live(&live);
    }

    /// Opens every connection (`preconnect`).
    pub fn preconnect(&mut self, registry: &Registry, now: Instant, out: &mut Vec<Delivery>) {
        for i in 0..self.order.len() {
            let s = self.order[i];
            for c in 0..self.servers[s].conns.len() {
                self.ensure_connected(registry, s, c, now, out);
            }
        }
    }

    fn ensure_connected(
        &mut self,
        registry: &Registry,
        s: usize,
        c: usize,
        now: Instant,
        out: &mut Vec<Delivery>,
    ) -> bool {
        if self.servers[s].conns[c].link.is_some() {
            return true;
        }
        let token = self.token(s, c);
        self.conns_opened += 1;
        match self.open(s).and_then(|mut link| {
            let rw = Interest::READABLE | Interest::WRITABLE;
            registry.register(&mut link, token, rw)?;
            Ok(link)
        }) {
            Ok(link) => {
                let conn = &mut self.servers[s].conns[c];
                conn.link = Some(link);
                conn.connected = false;
                true
            }
            Err(e) => {
                tracing::debug!("connect to {} failed: {e}", self.servers[s].cfg.addr);
                let why = strerror(&e);
                self.fail_conn(registry, s, c, Closed::Error, &why, now, out);
                false
            }
        }
    }

    /// Starts a connection to server `s`: TLS over it with `tls.servers`.
    fn open(&self, s: usize) -> io::Result<Link> {
        let server = &self.servers[s];
        let addr = &server.cfg.addr;
        let sock = match addr {
            Addr::Tcp { host, port } => {
                let sa = (host.as_str(), *port)
                    .to_socket_addrs()?
                    .next()
                    .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
                nb::Socket::connect(sa)?
            }
            Addr::Unix(path) => nb::Socket::connect_unix(path)?,
        };
        let (Some(config), Some(name)) = (&self.tls, &server.tls_name) else {
            return Ok(Link::plain(sock));
        };
        let peer = PeerLog::server(format!("server {addr} of pool {}", self.cfg.name));
        let t = osmium_net::TlsStream::connect(sock, config.clone(), name.clone(), peer)?;
        Ok(Link::tls(t))
    }

    /// Queues `wire` for server `s` (written by [`Pool::flush_queued`]);
    /// its reply (or failure) comes back as a [`Delivery`] to `dest`.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        registry: &Registry,
        s: usize,
        wire: &[u8],
        expect: Expect,
        dest: Dest,
        now: Instant,
        out: &mut Vec<Delivery>,
    ) {
        let may_retry =
            dest != Dest::Probe && self.retries_reads() && crate::request::is_plain_read(wire);
        self.send_once(registry, s, wire, expect, dest, now, out, may_retry);
    }

    /// Whether a plain read that meets a failed connection goes to the
    /// server's replica (the next live server of the ring order) instead
    /// of failing: with `auto_eject_hosts` and `failover: replica`.
    fn retries_reads(&self) -> bool {
        self.cfg.auto_eject_hosts && self.cfg.failover == Failover::Replica && self.order.len() > 1
    }

    /// Sends a read that failed on server `failed` to its replica, once.
    #[allow(clippy::too_many_arguments)]
    fn retry_on_replica(
        &mut self,
        registry: &Registry,
        failed: usize,
        wire: &[u8],
        expect: Expect,
        dest: Dest,
        why: &str,
        now: Instant,
        out: &mut Vec<Delivery>,
    ) {
        // The next live server after it in `servers:` order (the first
        // live one for a server a reload removed).
        let n = self.order.len();
        let (from, skip) = match self.servers.get(failed).and_then(|s| s.pos) {
            Some(pos) => (pos, 1),
            None => (0, 0),
        };
        let next = (skip..n + skip)
            .map(|k| self.order[(from + k) % n])
            .find(|&s| s != failed && self.up(s));
        match next {
            Some(replica) => {
                tracing::debug!("read retried on server {replica}: {why}");
                self.send_once(registry, replica, wire, expect, dest, now, out, false);
            }
            None => out.push(Delivery {
                dest,
                result: Err(why.to_string()),
            }),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send_once(
        &mut self,
        registry: &Registry,
        s: usize,
        wire: &[u8],
        expect: Expect,
        dest: Dest,
        now: Instant,
        out: &mut Vec<Delivery>,
        may_retry: bool,
    ) {
        let c = if dest == Dest::Probe {
            0
        } else {
            // Text and binary connections alternate (see `Server::conns`).
            let per = self.cfg.server_connections as usize;
            let server = &mut self.servers[s];
            server.next = (server.next + 1) % per;
            2 * server.next + usize::from(expect == Expect::Binary)
        };
        if !self.ensure_connected(registry, s, c, now, out) {
            let why = "Connection refused";
            if may_retry {
                self.retry_on_replica(registry, s, wire, expect, dest, why, now, out);
            } else if dest != Dest::Probe {
                out.push(Delivery {
                    dest,
                    result: Err(why.into()),
                });
            }
            return;
        }
        let timeout = if dest == Dest::Probe {
            Some(self.cfg.timeout.unwrap_or(PROBE_TIMEOUT))
        } else {
            self.cfg.timeout
        };
        let server = &mut self.servers[s];
        if dest != Dest::Probe {
            server.stats.requests += 1;
            server.stats.request_bytes += wire.len() as u64;
        }
        let conn = &mut server.conns[c];
        if let Some(link) = conn.link.as_mut() {
            link.queue(wire);
        }
        conn.queued_bytes += wire.len() as u64;
        let retry = may_retry.then(|| conn.journal(wire));
        conn.pending.push_back(Pending {
            dest,
            expect,
            deadline: timeout.map(|t| now + t),
            retry,
            end: conn.queued_bytes,
            len: wire.len(),
        });
        if !conn.queued {
            conn.queued = true;
            self.dirty.push((s, c));
        }
    }

    /// Writes every connection given requests since the last call.
    pub fn flush_queued(&mut self, registry: &Registry, now: Instant, out: &mut Vec<Delivery>) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &(s, c) in &dirty {
            if let Some(conn) = self.servers.get_mut(s).and_then(|x| x.conns.get_mut(c)) {
                conn.queued = false;
                self.flush(registry, s, c, now, out);
            }
        }
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }

    fn flush(
        &mut self,
        registry: &Registry,
        s: usize,
        c: usize,
        now: Instant,
        out: &mut Vec<Delivery>,
    ) {
        let conn = &mut self.servers[s].conns[c];
        if !conn.connected {
            return;
        }
        let Some(link) = conn.link.as_mut() else {
            return;
        };
        // A socket that takes nothing is `ConnectionReset`.
        match link.flush() {
            Ok(written) => conn.written_bytes += written as u64,
            Err(e) => {
                let why = strerror(&e);
                self.fail_conn(registry, s, c, Closed::Error, &why, now, out);
            }
        }
    }

    /// A readiness event on connection `c` of server `s` (`to_end`: the
    /// server shut down its side, read to end of stream).
    #[allow(clippy::too_many_arguments)]
    pub fn ready(
        &mut self,
        registry: &Registry,
        s: usize,
        c: usize,
        to_end: bool,
        now: Instant,
        out: &mut Vec<Delivery>,
    ) {
        let conn = &mut self.servers[s].conns[c];
        let Some(link) = conn.link.as_mut() else {
            return;
        };
        if !conn.connected {
            match link.connected() {
                Ok(true) => {
                    conn.connected = true;
                    self.servers[s].stats.server_connections += 1;
                    self.servers[s].ever_connected = true;
                }
                Ok(false) => return,
                Err(e) => {
                    let why = strerror(&e);
                    self.fail_conn(registry, s, c, Closed::Error, &why, now, out);
                    return;
                }
            }
        }
        self.flush(registry, s, c, now, out);
        let server = &mut self.servers[s];
        let conn = &mut server.conns[c];
        let Some(link) = conn.link.as_mut() else {
            return;
        };
        let mut error = match link.fill(to_end) {
            Ok(true) => None,
            Ok(false) => Some((Closed::Eof, "Connection reset by peer".to_string())),
            Err(e) => Some((Closed::Error, strerror(&e))),
        };
        // Replies that arrived, in request order.
        let mut answered = false;
        let mut desync = false;
        let mut probe = None;
        while let Some(p) = conn.pending.front() {
            let Some(link) = conn.link.as_mut() else {
                break;
            };
            match link.next_reply_len(p.expect) {
                Ok(Some(len)) => {
                    let bytes = link.input()[..len].to_vec();
                    link.consume(len);
                    answered = true;
                    let p = conn.pending.pop_front().unwrap();
                    if let Some(place) = p.retry {
                        conn.answered(place);
                    }
                    if p.dest == Dest::Probe {
                        probe = Some(bytes);
                        continue;
                    }
                    server.stats.responses += 1;
                    server.stats.response_bytes += len as u64;
                    out.push(Delivery {
                        dest: p.dest,
                        result: Ok(bytes),
                    });
                }
                Ok(None) => break,
                Err(reply::Desync) => {
                    desync = true;
                    break;
                }
            }
        }
        if conn.pending.is_empty() && conn.link.as_ref().is_some_and(|l| !l.input().is_empty()) {
            desync = true;
        }
        if answered && self.servers[s].health == Health::Up {
            self.servers[s].failures = 0;
        }
        if let Some(stats) = probe {
            self.probe_answer(s, &stats, now);
        }
        if desync {
            error = Some((Closed::Error, "Protocol error".into()));
        }
        match error {
            Some((kind, why)) => self.fail_conn(registry, s, c, kind, &why, now, out),
            // A TLS session takes requests once its handshake is done,
            // which reading may just have finished.
            None => self.flush(registry, s, c, now, out),
        }
    }

    /// Closes connection `c` of server `s` (ended as `kind`): its requests
    /// fail with `why`, and the server has one more failure.
    #[allow(clippy::too_many_arguments)]
    pub fn fail_conn(
        &mut self,
        registry: &Registry,
        s: usize,
        c: usize,
        kind: Closed,
        why: &str,
        now: Instant,
        out: &mut Vec<Delivery>,
    ) {
        let server = &mut self.servers[s];
        let stats = &mut server.stats;
        match kind {
            Closed::Eof => stats.server_eof += 1,
            Closed::TimedOut => stats.server_timedout += 1,
            Closed::Error => stats.server_err += 1,
        }
        let conn = &mut server.conns[c];
        if conn.connected {
            stats.server_connections = stats.server_connections.saturating_sub(1);
        }
        if let Some(mut link) = conn.link.take() {
            let _ = registry.deregister(&mut link);
        }
        conn.connected = false;
        conn.written_bytes = conn.queued_bytes;
        // Plain reads go to the replica (after the health update below,
        // so that a server ejected now is not chosen again).
        let mut retries = Vec::new();
        let pending = std::mem::take(&mut conn.pending);
        for p in pending.into_iter().filter(|p| p.dest != Dest::Probe) {
            match p.retry {
                Some(place) => {
                    retries.push((conn.journaled_wire(place).to_vec(), p.expect, p.dest));
                }
                None => out.push(Delivery {
                    dest: p.dest,
                    result: Err(why.to_string()),
                }),
            }
        }
        conn.journal_base += conn.journal.len() as u64;
        conn.journal.clear();
        conn.journaled = 0;
        let server = &mut self.servers[s];
        let addr = server.cfg.addr.to_string();
        server.failures += 1;
        tracing::debug!("server {addr}: {why} (failure {})", server.failures);
        // A removed server is never ejected: it is no longer in the ring.
        if !self.cfg.auto_eject_hosts || server.pos.is_none() {
            for (wire, expect, dest) in retries {
                self.retry_on_replica(registry, s, &wire, expect, dest, why, now, out);
            }
            return;
        }
        let eject = match server.health {
            Health::Up => server.failures >= self.cfg.server_failure_limit,
            Health::Probing | Health::CatchingUp { .. } => true,
            Health::Ejected { .. } => false,
        };
        if eject {
            if server.health == Health::Up {
                // At the default level: an operator wants to know.
                tracing::warn!("ejecting server {addr} of pool {}: {why}", self.cfg.name);
            }
            server.health = Health::Ejected {
                retry_at: now + self.cfg.server_retry_timeout,
            };
            server.stats.server_ejected_at = now_usec();
            self.stats.server_ejects += 1;
            self.rebuild();
        }
        for (wire, expect, dest) in retries {
            self.retry_on_replica(registry, s, &wire, expect, dest, why, now, out);
        }
    }

    /// The answer to a probe of server `s`.
    fn probe_answer(&mut self, s: usize, stats: &[u8], now: Instant) {
        if self.servers[s].health != Health::Probing {
            return;
        }
        let catchup = reply::stat(stats, "replication_catchup");
        let behind =
            self.cfg.failover == Failover::Replica && catchup.is_some_and(|v| v != b"done");
        let server = &mut self.servers[s];
        if behind {
            server.health = Health::CatchingUp {
                next_probe: now + CATCHUP_RECHECK,
            };
        } else {
            tracing::warn!(
                "server {} of pool {} is back",
                server.cfg.addr,
                self.cfg.name
            );
            server.health = Health::Up;
            server.failures = 0;
            self.rebuild();
        }
    }

    /// Timers: requests past their deadline fail their connection
    /// (`Connection timed out`); ejected servers due for a retry, and
    /// catching-up servers due for a check, are probed.
    pub fn tick(&mut self, registry: &Registry, now: Instant, out: &mut Vec<Delivery>) {
        // By slot number (every key is below the slab's capacity): no list
        // of slots is made every turn.
        for s in 0..self.servers.capacity() {
            if !self.servers.contains(s) {
                continue;
            }
            for c in 0..self.servers[s].conns.len() {
                let late = self.servers[s].conns[c]
                    .pending
                    .front()
                    .and_then(|p| p.deadline)
                    .is_some_and(|d| d <= now);
                if late {
                    let why = "Connection timed out";
                    self.fail_conn(registry, s, c, Closed::TimedOut, why, now, out);
                }
            }
            let due = self.servers[s].pos.is_some()
                && match self.servers[s].health {
                    Health::Ejected { retry_at } => retry_at <= now,
                    Health::CatchingUp { next_probe } => next_probe <= now,
                    _ => false,
                };
            if due {
                self.servers[s].health = Health::Probing;
                self.send(
                    registry,
                    s,
                    b"stats\r\n",
                    Expect::Stats,
                    Dest::Probe,
                    now,
                    out,
                );
            }
        }
    }

    /// The earliest timer of the pool.
    pub fn next_timer(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut add = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        for (_, s) in &self.servers {
            match s.health {
                Health::Ejected { retry_at } => add(retry_at),
                Health::CatchingUp { next_probe } => add(next_probe),
                _ => {}
            }
            for c in &s.conns {
                if let Some(d) = c.pending.front().and_then(|p| p.deadline) {
                    add(d);
                }
            }
        }
        t
    }
}
