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

use std::collections::VecDeque;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use mio::{Registry, Token};

use crate::config::{Distribution, Failover, PoolConfig};
use crate::counters::{now_usec, PoolStats, Queues, ServerStats};
use crate::inbuf::InBuf;
use crate::reply::{self, Expect};
use crate::ring::Ring;
use crate::stream::Stream;
use crate::tls::{ServersContext, TlsStream};

/// How often a catching-up server is asked again.
pub const CATCHUP_RECHECK: Duration = Duration::from_millis(100);
/// The probe's own timeout when the pool has none.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Where a reply goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// Part `part` of reply slot `seq` of client `key` (generation `id`).
    Client {
        key: usize,
        id: u64,
        seq: u64,
        part: usize,
    },
    /// The health probe of the server (answered inside the pool).
    Probe,
}

/// A reply (or failure) for a client.
#[derive(Debug)]
pub struct Delivery {
    pub dest: Dest,
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
    Eof,
    TimedOut,
    Error,
}

/// One connection to a server.
#[derive(Debug, Default)]
pub struct Conn {
    stream: Option<Stream>,
    connected: bool,
    out: Vec<u8>,
    inbuf: InBuf,
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
    Up,
    Ejected { retry_at: Instant },
    Probing,
    CatchingUp { next_probe: Instant },
}

/// One server of a pool.
#[derive(Debug)]
pub struct Server {
    pub conns: Vec<Conn>,
    next: usize,
    pub failures: u32,
    pub health: Health,
    pub stats: ServerStats,
}

/// A pool: its configuration, placement and servers.
#[derive(Debug)]
pub struct Pool {
    pub cfg: PoolConfig,
    pub ring: Ring,
    pub servers: Vec<Server>,
    /// The first token of this pool's server connections.
    token_base: usize,
    /// Connections given requests this turn, written by
    /// [`Pool::flush_queued`] so that a turn's requests for one
    /// connection leave in one write.
    dirty: Vec<(usize, usize)>,
    pub stats: PoolStats,
    /// Server connections opened (connects started), for the stats
    /// port's `total_connections`.
    pub conns_opened: u64,
    /// TLS to the servers (`tls.servers`).
    tls: Option<ServersContext>,
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
    pub fn new(cfg: PoolConfig, token_base: usize, tls: Option<ServersContext>) -> Pool {
        let ring = Ring::new(&cfg);
        let servers = cfg
            .servers
            .iter()
            .map(|_| Server {
                conns: (0..2 * cfg.server_connections)
                    .map(|_| Conn::default())
                    .collect(),
                next: 0,
                failures: 0,
                health: Health::Up,
                stats: ServerStats::default(),
            })
            .collect();
        Pool {
            cfg,
            ring,
            servers,
            token_base,
            dirty: Vec::new(),
            stats: PoolStats::default(),
            conns_opened: 0,
            tls,
        }
    }

    /// Server connections open now (connecting ones too).
    pub fn open_conns(&self) -> u64 {
        let open = self.servers.iter().flat_map(|s| &s.conns);
        open.filter(|c| c.stream.is_some()).count() as u64
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

    /// How many tokens the pool's server connections take.
    pub fn token_count(&self) -> usize {
        self.servers.len() * self.per_server()
    }

    fn per_server(&self) -> usize {
        2 * self.cfg.server_connections as usize
    }

    fn token(&self, server: usize, conn: usize) -> Token {
        Token(self.token_base + server * self.per_server() + conn)
    }

    /// The server and connection of a token of this pool.
    pub fn conn_of(&self, token: Token) -> Option<(usize, usize)> {
        let i = token.0.checked_sub(self.token_base)?;
        (i < self.token_count()).then(|| (i / self.per_server(), i % self.per_server()))
    }

    fn up(&self, i: usize) -> bool {
        !self.cfg.auto_eject_hosts || self.servers[i].health == Health::Up
    }

    /// Whether server `i` takes requests now.
    pub fn is_up(&self, i: usize) -> bool {
        self.up(i)
    }

    /// The server a request for `key` goes to now; `None` when none is live.
    pub fn route(&self, key: &[u8]) -> Option<usize> {
        if self.cfg.distribution == Distribution::Random {
            return self.ring.live_server_of(key);
        }
        if !self.cfg.auto_eject_hosts {
            return Some(self.ring.server_of(key));
        }
        match self.cfg.failover {
            Failover::Rehash => self.ring.live_server_of(key),
            Failover::Replica => {
                let home = self.ring.server_of(key);
                let n = self.servers.len();
                (0..n).map(|k| (home + k) % n).find(|&i| self.up(i))
            }
        }
    }

    fn rebuild(&mut self) {
        let live: Vec<bool> = (0..self.servers.len()).map(|i| self.up(i)).collect();
        self.ring.set_live(&live);
    }

    /// Opens every connection (`preconnect`).
    pub fn preconnect(&mut self, registry: &Registry, now: Instant, out: &mut Vec<Delivery>) {
        for s in 0..self.servers.len() {
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
        if self.servers[s].conns[c].stream.is_some() {
            return true;
        }
        let token = self.token(s, c);
        self.conns_opened += 1;
        match self.open(s).and_then(|mut st| {
            st.register(registry, token)?;
            Ok(st)
        }) {
            Ok(st) => {
                let conn = &mut self.servers[s].conns[c];
                conn.stream = Some(st);
                conn.connected = false;
                true
            }
            Err(e) => {
                tracing::debug!("connect to {} failed: {e}", self.cfg.servers[s].addr);
                let why = strerror(&e);
                self.fail_conn(registry, s, c, Closed::Error, &why, now, out);
                false
            }
        }
    }

    /// Starts a connection to server `s`: TLS over it with `tls.servers`.
    fn open(&self, s: usize) -> io::Result<Stream> {
        let addr = &self.cfg.servers[s].addr;
        let sock = Stream::connect(addr)?;
        let Some(tls) = &self.tls else {
            return Ok(sock);
        };
        let peer = format!("server {addr} of pool {}", self.cfg.name);
        let name = tls.names[s].clone();
        let t = TlsStream::connect(sock, tls.config.clone(), name, peer)?;
        Ok(Stream::Tls(Box::new(t)))
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
        self.cfg.auto_eject_hosts
            && self.cfg.failover == Failover::Replica
            && self.servers.len() > 1
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
        let n = self.servers.len();
        match (1..n).map(|k| (failed + k) % n).find(|&i| self.up(i)) {
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
            // Text connections first, then as many binary ones.
            let per = self.cfg.server_connections as usize;
            let server = &mut self.servers[s];
            server.next = (server.next + 1) % per;
            server.next + if expect == Expect::Binary { per } else { 0 }
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
        conn.out.extend_from_slice(wire);
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
            self.servers[s].conns[c].queued = false;
            self.flush(registry, s, c, now, out);
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
        if !conn.connected || conn.out.is_empty() {
            return;
        }
        let Some(stream) = conn.stream.as_mut() else {
            return;
        };
        let mut written = 0;
        let mut error = None;
        while written < conn.out.len() {
            match stream.write(&conn.out[written..]) {
                Ok(0) => {
                    error = Some("Connection reset by peer".to_string());
                    break;
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    error = Some(strerror(&e));
                    break;
                }
            }
        }
        conn.out.drain(..written);
        conn.written_bytes += written as u64;
        if let Some(why) = error {
            self.fail_conn(registry, s, c, Closed::Error, &why, now, out);
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
        let Some(stream) = conn.stream.as_mut() else {
            return;
        };
        if !conn.connected {
            match stream.connected() {
                Ok(true) => {
                    conn.connected = true;
                    self.servers[s].stats.server_connections += 1;
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
        let Some(stream) = conn.stream.as_mut() else {
            return;
        };
        let mut error = match conn.inbuf.fill(stream, to_end) {
            Ok(true) => None,
            Ok(false) => Some((Closed::Eof, "Connection reset by peer".to_string())),
            Err(e) => Some((Closed::Error, strerror(&e))),
        };
        // Replies that arrived, in request order.
        let mut at = 0;
        let mut desync = false;
        let mut probe = None;
        while let Some(p) = conn.pending.front() {
            match reply::reply_len(&conn.inbuf.bytes()[at..], p.expect) {
                Ok(Some(len)) => {
                    let p = conn.pending.pop_front().unwrap();
                    let bytes = conn.inbuf.bytes()[at..at + len].to_vec();
                    at += len;
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
        conn.inbuf.consume(at);
        if conn.pending.is_empty() && !conn.inbuf.is_empty() {
            desync = true;
        }
        if at > 0 && self.servers[s].health == Health::Up {
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
        if let Some(mut st) = conn.stream.take() {
            st.deregister(registry);
        }
        conn.connected = false;
        conn.out.clear();
        conn.written_bytes = conn.queued_bytes;
        conn.inbuf.clear();
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
        let addr = self.cfg.servers[s].addr.to_string();
        let server = &mut self.servers[s];
        server.failures += 1;
        tracing::debug!("server {addr}: {why} (failure {})", server.failures);
        if !self.cfg.auto_eject_hosts {
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
                self.cfg.servers[s].addr,
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
        for s in 0..self.servers.len() {
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
            let due = match self.servers[s].health {
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
        for s in &self.servers {
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
