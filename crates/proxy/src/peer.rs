//! osmium-proxy as a replication peer of its pool's osmium servers.
//!
//! A pool with `replication_secret: FILE` (osmium's extension; the file
//! read and checked as the server's `--replication-secret`: mode 0600,
//! one trailing newline dropped, at least 128 random bits) lets the proxy
//! prove to its servers that it is one of their peers, by the servers'
//! own link handshake (`osmium_protocol::replication_link`, role `proxy`):
//! [`connect_peer`] connects (plain TCP, or TLS with the pool's
//! `tls.servers` settings), runs the Noise handshake with the secret
//! (bound to the TLS session under TLS; on plain TCP every byte after it
//! is a Noise frame), then sends `replica_link osmium-proxy-<pid>`. On
//! such a connection a server applies writes without replicating them
//! (its own replication link's treatment), and it takes the private
//! `replica_targets` command.
//!
//! What the proxy does with it here ([`on_reload`]): a reload that
//! changes the servers of a `failover: replica` pool changes the pool's
//! replication ring (each server replicates to the next one in
//! `servers:` order, the last to the first), so the proxy tells each
//! server whose successor changed its new target (`replica_targets
//! HOST:PORT`), from a thread of its own (`peer-ring`, one job after
//! another in reload order), never from the event loop:
//!
//! ```text
//!   [A, B, C] -> [A, B, C, D]      D: replica_targets A    (first: a new server's own target)
//!                                  C: replica_targets D    (D gets C's full copy)
//!   [A, B, C, D] -> [A, B, C]      C: replica_targets A    (A gets C's full copy; D left as it is)
//! ```
//!
//! A server told is one INFO line, a failure one WARN line naming what to
//! do by hand; the reload has applied either way. A pool without the
//! secret tells nobody: one WARN says the operator must.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

pub use osmium_protocol::replication_link::Secret;
use osmium_protocol::replication_link::{
    connect_handshake, read_line, NoiseStream, Role, EXPORTER_LABEL,
};
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use rustls_pki_types::ServerName;

use crate::config::{Addr, Failover, PoolConfig};
use crate::tls::ServersContext;

/// The YAML key, as its errors name it.
pub const SECRET_KEY: &str = "replication_secret:";
/// The longest reply line [`PeerConn::read_line`] takes.
const MAX_LINE: u64 = 64 * 1024;
/// How long a peer connection waits to connect, and for each answer.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries of one `replica_targets` that failed in a way that may pass (a
/// server not listening yet, a removed target's link still closing).
const TRIES: u32 = 8;
const RETRY: Duration = Duration::from_millis(500);

/// Reads pool `pool`'s `replication_secret:` file (None without one).
pub fn load_secret(pool: &PoolConfig) -> Result<Option<Arc<Secret>>, String> {
    match &pool.replication_secret {
        None => Ok(None),
        Some(path) => Secret::load(path, SECRET_KEY)
            .map(|s| Some(Arc::new(s)))
            .map_err(|e| format!("pool '{}': {e}", pool.name)),
    }
}

/// TLS to one server: the pool's `tls.servers` configuration and the
/// name the server's certificate must carry.
#[derive(Clone)]
pub struct PeerTls {
    /// The pool's `tls.servers` client configuration.
    pub config: Arc<ClientConfig>,
    /// The name the server's certificate must carry.
    pub name: ServerName<'static>,
}

/// A peer connection after its handshake: Noise frames on plain TCP, or
/// TLS carrying the link.
enum PeerStream {
    Noise(Box<NoiseStream<TcpStream>>),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl PeerStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            PeerStream::Noise(s) => s.get_ref(),
            PeerStream::Tls(s) => &s.sock,
        }
    }
}

impl Read for PeerStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            PeerStream::Noise(s) => s.read(buf),
            PeerStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for PeerStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            PeerStream::Noise(s) => s.write(buf),
            PeerStream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            PeerStream::Noise(s) => s.flush(),
            PeerStream::Tls(s) => s.flush(),
        }
    }
}

/// A blocking connection to a server that took the proxy as a peer:
/// commands sent on it are not replicated by that server.
pub struct PeerConn {
    stream: BufReader<PeerStream>,
    addr: String,
}

/// [`connect_peer_with`] over plain TCP.
pub fn connect_peer(addr: &str, secret: &Secret, timeout: Duration) -> io::Result<PeerConn> {
    connect_peer_with(addr, secret, timeout, None)
}

/// Connects to `addr` (`host:port`; TLS when `tls` is given), runs the
/// link handshake with `secret` in role `proxy` (both ends prove they
/// hold it), and introduces the connection as `replica_link
/// osmium-proxy-<pid>`. `timeout` bounds the connect and each read and
/// write after it ([`PeerConn::set_timeout`] changes it). A server that
/// fails the handshake, refuses the proxy's, has no secret or does not
/// take the link is `PermissionDenied`.
pub fn connect_peer_with(
    addr: &str,
    secret: &Secret,
    timeout: Duration,
    tls: Option<&PeerTls>,
) -> io::Result<PeerConn> {
    let why = |e: io::Error| io::Error::new(e.kind(), format!("{addr}: {e}"));
    let tcp = connect_tcp(addr, timeout).map_err(why)?;
    let _ = tcp.set_nodelay(true);
    tcp.set_read_timeout(Some(timeout)).map_err(why)?;
    tcp.set_write_timeout(Some(timeout)).map_err(why)?;
    let mut stream = match tls {
        None => {
            let mut tcp = tcp;
            let transport = connect_handshake(&mut tcp, secret, Role::ProxyPeer, None)
                .map_err(|e| why(e.into()))?;
            PeerStream::Noise(Box::new(NoiseStream::new(tcp, transport)))
        }
        Some(t) => {
            let mut conn = ClientConnection::new(t.config.clone(), t.name.clone())
                .map_err(|e| why(io::Error::other(e)))?;
            let mut tcp = tcp;
            while conn.is_handshaking() {
                conn.complete_io(&mut tcp).map_err(why)?;
            }
            let binding = conn
                .export_keying_material([0u8; 32], EXPORTER_LABEL, None)
                .map_err(|e| why(io::Error::other(e)))?;
            let mut s = StreamOwned::new(conn, tcp);
            connect_handshake(&mut s, secret, Role::ProxyPeer, Some(&binding))
                .map_err(|e| why(e.into()))?;
            PeerStream::Tls(Box::new(s))
        }
    };
    let hello = format!("replica_link osmium-proxy-{}\r\n", std::process::id());
    stream.write_all(hello.as_bytes()).map_err(why)?;
    stream.flush().map_err(why)?;
    let answer = read_line(&mut stream, 512).map_err(why)?;
    if answer != "OK" {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{addr}: it answered replica_link with {answer:?}: it does not take the proxy as a peer"),
        ));
    }
    Ok(PeerConn {
        stream: BufReader::new(stream),
        addr: addr.to_string(),
    })
}

/// The first of `addr`'s addresses that takes a connection.
fn connect_tcp(addr: &str, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl PeerConn {
    /// The address it was connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// How long a read or a write may wait (None: for ever).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        let tcp = self.stream.get_ref().tcp();
        tcp.set_read_timeout(timeout)?;
        tcp.set_write_timeout(timeout)
    }

    /// Sends `bytes` as they are (requests, values with their `\r\n`).
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let s = self.stream.get_mut();
        s.write_all(bytes)?;
        s.flush()
    }

    /// Sends `line` and `\r\n`.
    pub fn send_line(&mut self, line: &str) -> io::Result<()> {
        let mut b = Vec::with_capacity(line.len() + 2);
        b.extend_from_slice(line.as_bytes());
        b.extend_from_slice(b"\r\n");
        self.send(&b)
    }

    /// One reply line, without its `\r\n` (its bytes as they came).
    pub fn read_line_bytes(&mut self) -> io::Result<Vec<u8>> {
        let mut line = Vec::new();
        (&mut self.stream)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)?;
        match line.strip_suffix(b"\n") {
            Some(l) => {
                let l = l.strip_suffix(b"\r").unwrap_or(l);
                Ok(l.to_vec())
            }
            None if line.len() as u64 >= MAX_LINE => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "reply line too long",
            )),
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }

    /// One reply line, without its `\r\n`.
    pub fn read_line(&mut self) -> io::Result<String> {
        let line = self.read_line_bytes()?;
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    /// Exactly `buf.len()` bytes of reply (a value and its `\r\n`).
    pub fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.stream.read_exact(buf)
    }

    /// Sends `line` and reads the one-line answer.
    pub fn command(&mut self, line: &str) -> io::Result<String> {
        self.send_line(line)?;
        self.read_line()
    }
}

/// Each server's target in the replication ring of `servers` (in
/// order, each to the next, the last to the first); none for fewer than
/// two.
pub fn ring_targets(servers: &[String]) -> Vec<(String, String)> {
    if servers.len() < 2 {
        return Vec::new();
    }
    (0..servers.len())
        .map(|i| (servers[i].clone(), servers[(i + 1) % servers.len()].clone()))
        .collect()
}

/// Whom to tell what when the ring `old` becomes `new` (servers as
/// `host:port`): each server of `new` whose target changed, the servers
/// new to the ring first (a new server has its own target before its
/// predecessor replicates to it), then the others (a predecessor is
/// pointed past a removed server).
pub fn plan(old: &[String], new: &[String]) -> Vec<(String, String)> {
    let before: HashMap<String, String> = ring_targets(old).into_iter().collect();
    let (mut first, mut then) = (Vec::new(), Vec::new());
    for (server, target) in ring_targets(new) {
        match before.get(&server) {
            Some(t) if *t == target => {}
            Some(_) => then.push((server, target)),
            None if old.contains(&server) => then.push((server, target)),
            None => first.push((server, target)),
        }
    }
    first.extend(then);
    first
}

/// The `host:port` of each server of `pool`, in order; None when one is
/// a unix socket (no replication target).
fn addresses(pool: &PoolConfig) -> Option<Vec<String>> {
    pool.servers
        .iter()
        .map(|s| match &s.addr {
            Addr::Tcp { host, port } => Some(format!("{host}:{port}")),
            Addr::Unix(_) => None,
        })
        .collect()
}

/// One reload's telling of a pool's servers.
struct Job {
    pool: String,
    steps: Vec<(String, String)>,
    secret: Arc<Secret>,
    tls: HashMap<String, PeerTls>,
}

/// A reload changes pool `old` into `new` (same name; `secret` and `tls`
/// are `new`'s): tells the servers of a `failover: replica` pool whose
/// replication target changed (see the module's comment). Returns at
/// once; the telling runs on the `peer-ring` thread.
pub fn on_reload(
    old: &PoolConfig,
    new: &PoolConfig,
    secret: Option<&Arc<Secret>>,
    tls: Option<&ServersContext>,
) {
    if new.failover != Failover::Replica {
        return;
    }
    let (Some(before), Some(after)) = (addresses(old), addresses(new)) else {
        if old.servers != new.servers {
            tracing::warn!(
                "pool {}: its servers changed, but a unix socket server cannot be a \
                 replication target: no server told its new --replicate-to",
                new.name
            );
        }
        return;
    };
    let steps = plan(&before, &after);
    if steps.is_empty() {
        return;
    }
    let Some(secret) = secret else {
        let what: Vec<String> = steps.iter().map(|(s, t)| format!("{s} -> {t}")).collect();
        tracing::warn!(
            "pool {}: its servers changed; if they replicate in a ring (--replicate-to \
             the next server), each must now replicate to its new successor: {} \
             (docs/replication.md \"Changing the ring\"; with replication_secret: the \
             proxy tells them)",
            new.name,
            crate::log_list::short_list(&what)
        );
        return;
    };
    let mut by_addr = HashMap::new();
    if let Some(ctx) = tls {
        for (addr, name) in after.iter().zip(&ctx.names) {
            by_addr.insert(
                addr.clone(),
                PeerTls {
                    config: ctx.config.clone(),
                    name: name.clone(),
                },
            );
        }
    }
    queue(Job {
        pool: new.name.clone(),
        steps,
        secret: secret.clone(),
        tls: by_addr,
    });
}

/// Hands `job` to the `peer-ring` thread (started with the first job).
fn queue(job: Job) {
    static JOBS: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
    let jobs = JOBS.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("peer-ring".into())
            .spawn(move || {
                for job in rx {
                    job.run();
                }
            });
        match started {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::warn!("cannot start the thread that tells servers their targets: {e}");
                None
            }
        }
    });
    let sent = jobs.as_ref().is_some_and(|tx| tx.send(job).is_ok());
    if !sent {
        tracing::warn!(
            "no thread to tell the servers their replication targets: tell them by hand"
        );
    }
}

impl Job {
    fn run(&self) {
        for (server, target) in &self.steps {
            match self.tell(server, target) {
                Ok(()) => tracing::info!(
                    "pool {}: server {server} now replicates to {target} (replica_targets)",
                    self.pool
                ),
                Err(e) => tracing::warn!(
                    "pool {}: could not make server {server} replicate to {target}: {e}; \
                     set its --replicate-to by hand (docs/replication.md \"Changing the ring\")",
                    self.pool
                ),
            }
        }
    }

    /// `replica_targets <target>` on `server`, tried again while the
    /// failure may pass.
    fn tell(&self, server: &str, target: &str) -> Result<(), String> {
        let mut tries = 0;
        loop {
            tries += 1;
            let (err, again) = match self.ask(server, target) {
                Ok(answer) if answer == "OK" => return Ok(()),
                Ok(answer) => {
                    let again = answer.starts_with("SERVER_ERROR") && answer.contains("try again");
                    (format!("it answered {answer:?}"), again)
                }
                Err(e) => {
                    let again = e.kind() != io::ErrorKind::PermissionDenied;
                    (e.to_string(), again)
                }
            };
            if !again || tries >= TRIES {
                return Err(err);
            }
            std::thread::sleep(RETRY);
        }
    }

    fn ask(&self, server: &str, target: &str) -> io::Result<String> {
        let mut conn = connect_peer_with(server, &self.secret, PEER_TIMEOUT, self.tls.get(server))?;
        conn.command(&format!("replica_targets {target}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &str) -> Vec<String> {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn steps(old: &str, new: &str) -> Vec<String> {
        plan(&list(old), &list(new))
            .into_iter()
            .map(|(s, t)| format!("{s}>{t}"))
            .collect()
    }

    #[test]
    fn rings_wrap_and_need_two() {
        assert_eq!(
            ring_targets(&list("a,b,c")),
            [("a", "b"), ("b", "c"), ("c", "a")].map(|(s, t)| (s.to_string(), t.to_string()))
        );
        assert!(ring_targets(&list("a")).is_empty());
        assert!(ring_targets(&[]).is_empty());
    }

    #[test]
    fn plans_tell_new_servers_first_and_only_the_changed() {
        // D added after C: D's own target, then C.
        assert_eq!(steps("a,b,c", "a,b,c,d"), ["d>a", "c>d"]);
        // Removed: C pointed past D; D is not told.
        assert_eq!(steps("a,b,c,d", "a,b,c"), ["c>a"]);
        // Replaced in place.
        assert_eq!(steps("a,b,c", "a,x,c"), ["x>c", "a>x"]);
        // Two added together.
        assert_eq!(steps("a,b", "a,x,b,y"), ["x>b", "y>a", "a>x", "b>y"]);
        // Nothing changed, or no ring.
        assert!(steps("a,b,c", "a,b,c").is_empty());
        assert!(steps("a,b", "a").is_empty());
        // From one server: everyone.
        assert_eq!(steps("a", "a,b"), ["b>a", "a>b"]);
        // Reordered.
        assert_eq!(steps("a,b,c", "a,c,b"), ["a>c", "c>b", "b>a"]);
    }
}
