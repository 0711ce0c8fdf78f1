//! nutcracker's stats port: the description `-D` prints of the counters
//! (`counters`), the JSON document rendered when the port
//! is asked (byte for byte nutcracker 0.5.0's layout), and the port's
//! listener and connections (each gets one document, written without
//! blocking, then is closed; a connection may send the admin command
//! `reload <token>` right after connecting, see `admin`; wrong tokens are
//! slowed, refused and logged by `admin_guard`).
//!
//! Unlike nutcracker, which publishes figures aggregated every
//! `--stats-interval` ms, the figures are the current ones at the moment
//! a connection is accepted.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use slab::Slab;

use crate::backend::Pool;

/// The `service` nutcracker reports, kept so that tools checking it work.
pub const SERVICE: &str = "nutcracker";

/// The `version` reported: osmium-proxy's own.
pub const VERSION: &str = concat!("osmium-proxy-", env!("CARGO_PKG_VERSION"));

/// Stats connections served at once; more are closed unanswered.
const MAX_CONNS: usize = 1024;

/// The pool stats, in nutcracker's order, with their descriptions.
pub const POOL_STATS: [(&str, &str); 6] = [
    ("client_eof", "# eof on client connections"),
    ("client_err", "# errors on client connections"),
    ("client_connections", "# active client connections"),
    ("server_ejects", "# times backend server was ejected"),
    (
        "forward_error",
        "# requests answered with an error because forwarding failed",
    ),
    (
        "fragments",
        "# fragments created from a multi-vector request (parts of a multi-key get split over several servers)",
    ),
];

/// osmium's pool stats, after nutcracker's in each pool's object.
pub const OSMIUM_POOL_STATS: [(&str, &str); 6] = [
    ("reloads", "# configuration reloads applied since start"),
    (
        "reload_failures",
        "# configuration reloads refused (the file did not load; the running one kept serving)",
    ),
    (
        "migrating",
        "1 while keys move to their new owners after a reload",
    ),
    ("moved_keys", "# keys copied to their new owner by moves"),
    ("moved_bytes", "# bytes copied to their new owner by moves"),
    (
        "warm_reads",
        "# reads served by a key's previous owner during a move",
    ),
];

/// The server stats, in nutcracker's order, with their descriptions.
pub const SERVER_STATS: [(&str, &str); 13] = [
    ("server_eof", "# eof on server connections"),
    ("server_err", "# errors on server connections"),
    ("server_timedout", "# timeouts on server connections"),
    ("server_connections", "# active server connections"),
    (
        "server_ejected_at",
        "timestamp when server was ejected in usec since epoch",
    ),
    ("requests", "# requests"),
    ("request_bytes", "total request bytes"),
    ("responses", "# responses"),
    ("response_bytes", "total response bytes"),
    (
        "in_queue",
        "# requests in incoming queue (not yet fully written to the server)",
    ),
    ("in_queue_bytes", "current request bytes in incoming queue"),
    (
        "out_queue",
        "# requests in outgoing queue (written, awaiting the reply)",
    ),
    ("out_queue_bytes", "current request bytes in outgoing queue"),
];

/// What `-D` prints: nutcracker's description, adapted.
pub fn describe() -> String {
    let mut s = format!(
        "This is {VERSION}\n\
         stats port: one JSON document per connection, figures current when asked\n\
         (\"service\":\"{SERVICE}\", \"version\":\"{VERSION}\")\n\npool stats:\n"
    );
    for (name, desc) in POOL_STATS {
        s.push_str(&format!("  {name:<20}\"{desc}\"\n"));
    }
    s.push_str("\nosmium pool stats (after nutcracker's):\n");
    for (name, desc) in OSMIUM_POOL_STATS {
        s.push_str(&format!("  {name:<20}\"{desc}\"\n"));
    }
    s.push_str("\nserver stats:\n");
    for (name, desc) in SERVER_STATS {
        s.push_str(&format!("  {name:<20}\"{desc}\"\n"));
    }
    s
}

/// The host's name (`source`), as nutcracker's `gethostname`.
pub fn hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// The document's first fields.
#[derive(Clone, Debug)]
pub struct Header<'a> {
    /// The host name (nutcracker's `source`).
    pub source: &'a str,
    /// Seconds since the proxy started.
    pub uptime: u64,
    /// Unix time now, in seconds.
    pub timestamp: u64,
    /// Listeners, clients and server connections ever opened.
    pub total_connections: u64,
    /// Listeners, clients and server connections open now.
    pub curr_connections: u64,
}

/// nutcracker's buffer-building steps (`nc_stats.c`), so that the bytes
/// are its bytes: `"key":value, ` pairs, `"name": {` nestings closed by
/// rewriting the last two bytes, and `}` plus a newline at the end.
struct Doc {
    buf: Vec<u8>,
}

impl Doc {
    fn key(&mut self, key: &str) {
        self.buf.push(b'"');
        for c in key.chars() {
            match c {
                '"' => self.buf.extend_from_slice(b"\\\""),
                '\\' => self.buf.extend_from_slice(b"\\\\"),
                c if (c as u32) < 0x20 => {
                    self.buf
                        .extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes());
                }
                c => {
                    let mut b = [0u8; 4];
                    self.buf.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                }
            }
        }
        self.buf.push(b'"');
    }

    fn string(&mut self, key: &str, value: &str) {
        self.key(key);
        self.buf.push(b':');
        self.key(value);
        self.buf.extend_from_slice(b", ");
    }

    fn num(&mut self, key: &str, value: u64) {
        self.key(key);
        self.buf.push(b':');
        self.buf.extend_from_slice(value.to_string().as_bytes());
        self.buf.extend_from_slice(b", ");
    }

    fn begin(&mut self, key: &str) {
        self.key(key);
        self.buf.extend_from_slice(b": {");
    }

    fn end(&mut self) {
        let n = self.buf.len();
        if n >= 2 && self.buf[n - 2] == b',' {
            self.buf[n - 2] = b'}';
            self.buf[n - 1] = b',';
        } else if n >= 2 && self.buf[n - 2] == b'}' {
            self.buf[n - 1] = b'}';
            self.buf.push(b',');
        } else {
            self.buf.extend_from_slice(b"},");
        }
    }

    /// The closing `}` over the last `,` (after the last pool's `},`), and
    /// a newline.
    fn finish(mut self) -> Vec<u8> {
        if self.buf.ends_with(b", ") {
            self.buf.truncate(self.buf.len() - 2);
        } else if self.buf.ends_with(b",") {
            self.buf.pop();
        }
        self.buf.extend_from_slice(b"}\n");
        self.buf
    }
}

/// nutcracker's order of names: shorter first, then by bytes.
fn by_name<'a, T>(items: impl Iterator<Item = (&'a str, T)>) -> Vec<(&'a str, T)> {
    let mut v: Vec<(&str, T)> = items.collect();
    v.sort_by(|a, b| {
        a.0.len()
            .cmp(&b.0.len())
            .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
    });
    v
}

/// The JSON document for `pools` (pools and their servers in nutcracker's
/// order: by name, shorter names first; osmium's pool stats after
/// nutcracker's).
pub fn render(head: &Header<'_>, pools: &[&Pool]) -> Vec<u8> {
    let mut d = Doc {
        buf: Vec::with_capacity(512 + pools.len() * 1024),
    };
    d.buf.push(b'{');
    d.string("service", SERVICE);
    d.string("source", head.source);
    d.string("version", VERSION);
    d.num("uptime", head.uptime);
    d.num("timestamp", head.timestamp);
    d.num("total_connections", head.total_connections);
    d.num("curr_connections", head.curr_connections);
    for (name, pool) in by_name(pools.iter().map(|p| (p.cfg.name.as_str(), *p))) {
        d.begin(name);
        let st = &pool.stats;
        let values = [
            st.client_eof,
            st.client_err,
            st.client_connections,
            st.server_ejects,
            st.forward_error,
            st.fragments,
        ];
        for ((key, _), v) in POOL_STATS.iter().zip(values) {
            d.num(key, v);
        }
        let values = [
            st.reloads,
            st.reload_failures,
            st.migrating,
            st.moved_keys,
            st.moved_bytes,
            st.warm_reads,
        ];
        for ((key, _), v) in OSMIUM_POOL_STATS.iter().zip(values) {
            d.num(key, v);
        }
        let servers = pool
            .order
            .iter()
            .map(|&s| (pool.servers[s].cfg.name.as_str(), s));
        for (name, s) in by_name(servers) {
            d.begin(name);
            let st = &pool.servers[s].stats;
            let q = pool.queues(s);
            let values = [
                st.server_eof,
                st.server_err,
                st.server_timedout,
                st.server_connections,
                st.server_ejected_at,
                st.requests,
                st.request_bytes,
                st.responses,
                st.response_bytes,
                q.in_queue,
                q.in_queue_bytes,
                q.out_queue,
                q.out_queue_bytes,
            ];
            for ((key, _), v) in SERVER_STATS.iter().zip(values) {
                d.num(key, v);
            }
            d.end();
        }
        d.end();
    }
    d.finish()
}

/// How long a stats connection stays open after its document, for a
/// command line (`reload <token>`): an admin tool sends it as soon as it
/// has connected. A reader that sends nothing sees the end of the
/// document this much later.
pub const COMMAND_WAIT: Duration = Duration::from_millis(100);

/// One stats connection: its document (then an answer) and how much of
/// it is written, and the command line it is sending.
#[derive(Debug)]
struct StatsConn {
    stream: TcpStream,
    out: Vec<u8>,
    at: usize,
    line: Vec<u8>,
    /// When it closes if no command line has come (set once the document
    /// is written).
    until: Option<Instant>,
    /// A command line came: no more is read.
    answering: bool,
    /// Its answer is in `out`: closed once written.
    answered: bool,
    /// An answer held until then (a wrong token, `admin_guard`).
    hold: Option<(Instant, String)>,
}

/// What a connection is doing after an event.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Waiting: more to write, or a command line to read.
    Wait,
    /// Done: closed.
    Close,
    /// It sent `reload` with this token.
    Reload(Vec<u8>),
}

impl StatsConn {
    /// Writes what the socket takes; `Ok(true)` when all is written.
    fn write(&mut self) -> io::Result<bool> {
        while self.at < self.out.len() {
            match self.stream.write(&self.out[self.at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Reads what the reader sent (so that the close does not reset the
    /// connection); `true` at its end.
    fn drain(&mut self) -> bool {
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match self.stream.read(&mut sink) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return e.kind() != io::ErrorKind::WouldBlock,
            }
        }
        false
    }

    /// Moves the connection on: writes, then reads a command line.
    fn step(&mut self, now: Instant) -> Step {
        match self.write() {
            Ok(true) => {}
            Ok(false) => return Step::Wait,
            Err(_) => return Step::Close,
        }
        if self.answering {
            if self.answered {
                self.drain();
                return Step::Close;
            }
            return Step::Wait;
        }
        let until = *self.until.get_or_insert(now + COMMAND_WAIT);
        let mut buf = [0u8; 512];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Step::Close,
                Ok(n) => {
                    self.line.extend_from_slice(&buf[..n]);
                    if let Some(end) = memchr::memchr(b'\n', &self.line) {
                        let step = match crate::admin::parse(&self.line[..=end]) {
                            crate::admin::Command::Reload(token) => Step::Reload(token.to_vec()),
                            crate::admin::Command::Other => {
                                self.drain();
                                Step::Close
                            }
                        };
                        self.line.clear();
                        return step;
                    }
                    if self.line.len() > crate::admin::MAX_LINE {
                        self.drain();
                        return Step::Close;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Close,
            }
        }
        if now >= until {
            Step::Close
        } else {
            Step::Wait
        }
    }
}

/// The stats port: its listener (token `base`) and connections (tokens
/// from `base + 1`). A connection gets the document at once; a line
/// `reload <token>` sent on it is answered `OK reloaded` or `ERROR
/// <why>` (see `admin`), after the document, before the close.
#[derive(Debug)]
pub struct StatsPort {
    listener: TcpListener,
    conns: Slab<StatsConn>,
    base: usize,
    /// Who may reload.
    pub admin: crate::admin::Admin,
    /// Connections whose authorised `reload` waits for the proxy
    /// ([`StatsPort::take_reloads`], [`StatsPort::answer`]).
    reloads: Vec<usize>,
    /// The bound on guessing the token.
    guard: crate::admin_guard::Guard,
}

impl StatsPort {
    /// Binds `addr:port` (address reuse on, as nutcracker).
    pub fn bind(addr: &str, port: u16) -> io::Result<StatsPort> {
        Ok(StatsPort::on(crate::stream::tcp_listener(addr, port, 128)?))
    }

    /// The port on a listener already bound (an upgrade carried it).
    pub fn on(listener: TcpListener) -> StatsPort {
        StatsPort {
            listener,
            conns: Slab::new(),
            base: 0,
            admin: crate::admin::Admin::default(),
            reloads: Vec::new(),
            guard: crate::admin_guard::Guard::new(Instant::now()),
        }
    }

    /// The listener, taken off the event loop, for an upgrade to hand
    /// over; the port's connections are closed.
    pub fn into_listener(mut self, registry: &Registry) -> TcpListener {
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.close(registry, key);
        }
        let _ = registry.deregister(&mut self.listener);
        self.listener
    }

    /// Registers the listener as `base`; connections take the tokens
    /// after it, up to `base + 1 + MAX_CONNS`.
    pub fn register(&mut self, registry: &Registry, base: usize) -> io::Result<()> {
        self.base = base;
        registry.register(&mut self.listener, Token(base), Interest::READABLE)
    }

    /// The tokens the port uses.
    pub const fn token_span() -> usize {
        MAX_CONNS + 1
    }

    /// The port's bound address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// A readiness event on one of the port's tokens: accepts waiting
    /// readers (each gets `doc()`), or moves a connection on.
    pub fn ready(&mut self, registry: &Registry, token: usize, mut doc: impl FnMut() -> Vec<u8>) {
        let now = Instant::now();
        if token == self.base {
            self.accept(registry, &mut doc, now);
            return;
        }
        self.step(registry, token - self.base - 1, now);
    }

    fn step(&mut self, registry: &Registry, key: usize, now: Instant) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        match c.step(now) {
            Step::Wait => {}
            Step::Close => self.close(registry, key),
            Step::Reload(token) => {
                let c = &mut self.conns[key];
                c.answering = true;
                let peer_addr = c.stream.peer_addr().ok();
                let ip = peer_addr.map(|a| a.ip());
                let peer = peer_addr.map_or_else(|| "?".to_string(), |a| a.to_string());
                if self.admin.token.is_none() {
                    let why = self.admin.check(&token).unwrap_err();
                    self.guard.count(&peer, ip, why, now);
                    self.answer(registry, key, &format!("ERROR {why}"));
                    return;
                }
                // A peer without an address (none here: TCP) counts as one.
                let from = ip.unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
                if self.guard.admit(from, now) == crate::admin_guard::Admit::Refused {
                    let why = "too many failed reload tries; try again later";
                    self.guard.count(&peer, ip, why, now);
                    self.answer(registry, key, &format!("ERROR {why}"));
                    return;
                }
                match self.admin.check(&token) {
                    Ok(()) => {
                        self.guard.succeeded(from);
                        self.reloads.push(key);
                    }
                    Err(why) => {
                        let delay = self.guard.failed(from, now);
                        self.guard.count(&peer, ip, why, now);
                        self.conns[key].hold = Some((now + delay, format!("ERROR {why}")));
                    }
                }
            }
        }
    }

    /// Closes connections whose wait for a command line is over, and
    /// writes the held answers that are due.
    pub fn tick(&mut self, registry: &Registry, now: Instant) {
        let late: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.answering && c.until.is_some_and(|t| t <= now))
            .map(|(k, _)| k)
            .collect();
        for key in late {
            self.step(registry, key, now);
        }
        let due: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.hold.as_ref().is_some_and(|(t, _)| *t <= now))
            .map(|(k, _)| k)
            .collect();
        for key in due {
            if let Some((_, line)) = self.conns[key].hold.take() {
                self.answer(registry, key, &line);
            }
        }
        self.guard.tick(now);
    }

    /// The port's next timer: a held answer due, the guard's log
    /// interval ending. (A connection's wait for its command line is over
    /// at the loop's next turn after it, 100 to 200 ms after its document,
    /// as before held answers.)
    pub fn next_timer(&self) -> Option<Instant> {
        let held = self
            .conns
            .iter()
            .filter_map(|(_, c)| c.hold.as_ref().map(|(t, _)| *t));
        held.chain(self.guard.next_timer()).min()
    }

    /// The connections whose authorised `reload` the proxy is to run,
    /// then [`StatsPort::answer`].
    pub fn take_reloads(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.reloads)
    }

    /// Writes `line` (and `\r\n`) as the answer of connection `key`'s
    /// command; it closes once the answer is written.
    pub fn answer(&mut self, registry: &Registry, key: usize, line: &str) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        c.out.extend_from_slice(line.as_bytes());
        c.out.extend_from_slice(b"\r\n");
        c.answered = true;
        self.step(registry, key, Instant::now());
    }

    fn close(&mut self, registry: &Registry, key: usize) {
        let mut c = self.conns.remove(key);
        let _ = registry.deregister(&mut c.stream);
    }

    fn accept(&mut self, registry: &Registry, doc: &mut impl FnMut() -> Vec<u8>, now: Instant) {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("stats accept: {e}");
                    return;
                }
            };
            if self.conns.len() >= MAX_CONNS {
                tracing::warn!("stats: {MAX_CONNS} readers already, one closed unanswered");
                continue;
            }
            let mut c = StatsConn {
                stream,
                out: doc(),
                at: 0,
                line: Vec::new(),
                until: None,
                answering: false,
                answered: false,
                hold: None,
            };
            let entry = self.conns.vacant_entry();
            let key = entry.key();
            let token = Token(self.base + 1 + key);
            if registry
                .register(
                    &mut c.stream,
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_ok()
            {
                entry.insert(c);
                self.step(registry, key, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_closes_as_nutcracker_does() {
        let mut d = Doc { buf: vec![b'{'] };
        d.string("service", "nutcracker");
        d.num("uptime", 5);
        d.begin("alpha");
        d.num("client_eof", 0);
        d.begin("two");
        d.num("server_eof", 1);
        d.end();
        d.begin("127.0.0.1:11299");
        d.num("server_eof", 2);
        d.end();
        d.end();
        d.begin("beta");
        d.num("client_eof", 3);
        d.end();
        let out = String::from_utf8(d.finish()).unwrap();
        assert_eq!(
            out,
            "{\"service\":\"nutcracker\", \"uptime\":5, \"alpha\": {\"client_eof\":0, \
             \"two\": {\"server_eof\":1},\"127.0.0.1:11299\": {\"server_eof\":2}},\
             \"beta\": {\"client_eof\":3}}\n"
        );
    }

    #[test]
    fn names_are_escaped() {
        let mut d = Doc { buf: vec![b'{'] };
        d.num("a\"b\\c\u{1}", 1);
        assert_eq!(
            String::from_utf8(d.finish()).unwrap(),
            "{\"a\\\"b\\\\c\\u0001\":1}\n"
        );
    }

    #[test]
    fn names_sort_shorter_first() {
        let v = by_name(["zz", "aaa", "mm", "b"].into_iter().map(|n| (n, ())));
        let names: Vec<&str> = v.into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["b", "mm", "zz", "aaa"]);
    }

    #[test]
    fn describe_lists_every_stat() {
        let d = describe();
        for (name, _) in POOL_STATS.iter().chain(SERVER_STATS.iter()) {
            assert!(d.contains(name), "{name}");
        }
    }
}
