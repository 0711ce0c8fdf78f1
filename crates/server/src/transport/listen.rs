//! Listening sockets and the acceptor: TCP on every `-l` address (unless
//! `-p 0`), UDP on the same addresses with `-U` (each worker gets its own
//! clone of every UDP socket, or one worker per socket with several `-l`,
//! as memcached), or with `-s` a unix-domain socket instead of both. The
//! acceptor (the main thread) accepts, enforces `-c` (refusing with
//! `ERROR Too many open connections`), and deals connections to the
//! workers round-robin. A TLS listener (`-Z`, `btls:`, `mtls:`) wraps
//! each accepted socket in a TLS session whose handshake its worker runs.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::event::Source;
use mio::net::{TcpListener, UnixListener};
use mio::{Interest, Registry, Token};

use super::carried::{take_tcp, take_udp, take_unix, Carried};
use super::stream::Stream;
use super::tls::TlsStream;
use super::worker::WorkerHandle;
use crate::conns::Kind;
use crate::settings::tls::ListenerTls;
use crate::settings::Settings;
use crate::stats::counters::GlobalStats;
use crate::tls_context::TlsContext;

/// A listening socket of the acceptor.
pub(crate) enum Listener {
    Tcp(TcpListener),
    /// TCP whose connections speak TLS (how, per the listener's kind).
    Tls(TcpListener, ListenerTls, Arc<TlsContext>),
    Unix(UnixListener),
}

impl Listener {
    pub(crate) fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            Listener::Tls(l, mode, ctx) => {
                let (s, _) = l.accept()?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tls(Box::new(TlsStream::accept(s, ctx, *mode)?)))
            }
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }

    /// Where a TCP (or TLS) listener is bound; None for a unix one.
    pub(crate) fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _, _) => l.local_addr().ok(),
            Listener::Unix(_) => None,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Listener::Tls(l, _, _) => l
                .local_addr()
                .map(|a| format!("{a} (TLS)"))
                .unwrap_or_default(),
            Listener::Unix(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                .unwrap_or_default(),
        }
    }
}

impl Source for Listener {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _, _) => l.register(r, t, i),
            Listener::Unix(l) => l.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _, _) => l.reregister(r, t, i),
            Listener::Unix(l) => l.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _, _) => l.deregister(r),
            Listener::Unix(l) => l.deregister(r),
        }
    }
}

/// A listening socket that could not be opened, said in memcached's
/// words (`main` prints it as it is): what failed to listen (the `-l`
/// values, or the port without `-l`) and the system's reason.
#[derive(Debug)]
pub(crate) struct ListenFailed(pub String);

impl std::fmt::Display for ListenFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ListenFailed {}

/// memcached's `failed to listen on ...` line (`vperror`: the message,
/// then the system's reason as `perror` words it).
fn listen_failed(settings: &Settings, transport: &str, port: u16, e: &io::Error) -> io::Error {
    let what = match &settings.inter {
        Some(inter) => format!("one of interface(s) {inter}"),
        None => format!("{transport} port {port}"),
    };
    let message = match e.get_ref().and_then(|r| r.downcast_ref::<Unresolved>()) {
        // memcached says why getaddrinfo() failed first, then reports
        // errno, which it left 0.
        Some(Unresolved(why)) => {
            format!("getaddrinfo(): {why}\nfailed to listen on {what}: Success")
        }
        None => format!("failed to listen on {what}: {}", strerror(e)),
    };
    io::Error::new(e.kind(), ListenFailed(message))
}

/// An I/O error in `perror`'s words (Rust adds ` (os error N)`).
pub(crate) fn strerror(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) if e.raw_os_error().is_some() => text[..at].to_string(),
        _ => text,
    }
}

/// An address that did not resolve: getaddrinfo()'s reason.
#[derive(Debug)]
struct Unresolved(String);

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unresolved {}

fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let unresolved = |why: String| io::Error::other(Unresolved(why));
    let addrs: Vec<SocketAddr> = match (host, port).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => {
            let text = e.to_string();
            let why = text
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(&text);
            return Err(unresolved(why.to_string()));
        }
    };
    if addrs.is_empty() {
        return Err(unresolved("Name or service not known".into()));
    }
    Ok(addrs)
}

/// TCP listeners on every `-l` address (none with `-p 0` or `-s`), TLS
/// ones where the address asks for it; one an upgrade carried for the
/// address is taken instead of binding.
pub(crate) fn bind_tcp(
    settings: &Settings,
    tls: Option<&Arc<TlsContext>>,
    carried: &mut Carried,
) -> io::Result<Vec<Listener>> {
    let mut listeners = Vec::new();
    if settings.port == 0 || settings.unix_socket.is_some() {
        return Ok(listeners);
    }
    let fail = |e: io::Error| listen_failed(settings, "TCP", settings.port, &e);
    for l in &settings.listen {
        for addr in resolve(&l.host, l.port).map_err(fail)? {
            let sock = match take_tcp(carried, addr) {
                Some(sock) => sock,
                None => {
                    let domain = socket2::Domain::for_address(addr);
                    let sock =
                        socket2::Socket::new(domain, socket2::Type::STREAM, None).map_err(fail)?;
                    sock.set_reuse_address(true).map_err(fail)?;
                    if addr.is_ipv6() {
                        sock.set_only_v6(true).map_err(fail)?;
                    }
                    sock.bind(&addr.into()).map_err(fail)?;
                    sock
                }
            };
            // Again on a carried socket: the backlog as this command line says.
            sock.listen(settings.backlog).map_err(fail)?;
            sock.set_nonblocking(true).map_err(fail)?;
            let listener = TcpListener::from_std(sock.into());
            listeners.push(match (l.tls, tls) {
                (ListenerTls::Off, _) | (_, None) => Listener::Tcp(listener),
                (mode, Some(ctx)) => Listener::Tls(listener, mode, ctx.clone()),
            });
        }
    }
    Ok(listeners)
}

/// UDP sockets for `-U`, on the same addresses as TCP (a `-l host:port`
/// port applies to both, as in memcached); one an upgrade carried for the
/// address is taken instead of binding.
pub(crate) fn bind_udp(
    settings: &Settings,
    carried: &mut Carried,
) -> io::Result<Vec<std::net::UdpSocket>> {
    let mut sockets = Vec::new();
    if settings.udp_port == 0 || settings.unix_socket.is_some() {
        return Ok(sockets);
    }
    let fail = |e: io::Error| listen_failed(settings, "UDP", settings.udp_port, &e);
    for l in &settings.listen {
        let port = if l.explicit_port {
            l.port
        } else {
            settings.udp_port
        };
        for addr in resolve(&l.host, port).map_err(fail)? {
            if let Some(sock) = take_udp(carried, addr) {
                sock.set_nonblocking(true).map_err(fail)?;
                sockets.push(sock.into());
                continue;
            }
            let domain = socket2::Domain::for_address(addr);
            let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, None).map_err(fail)?;
            sock.set_reuse_address(true).map_err(fail)?;
            if addr.is_ipv6() {
                sock.set_only_v6(true).map_err(fail)?;
            }
            // memcached asks for the largest send buffer it can get.
            let _ = sock.set_send_buffer_size(super::udp::UDP_SEND_BUFFER_SIZE);
            sock.bind(&addr.into()).map_err(fail)?;
            sock.set_nonblocking(true).map_err(fail)?;
            sockets.push(sock.into());
        }
    }
    Ok(sockets)
}

/// The `-s` listener, made as memcached's `server_socket_unix` does: a
/// stale socket file at the path is removed (any other kind of file makes
/// bind fail), and the file is created with the `-a` permission bits.
/// memcached leaves the file behind when it exits, and so does osmium.
/// A listener an upgrade carried for the path is taken as it is (its
/// file left alone).
pub(crate) fn bind_unix(
    settings: &Settings,
    carried: &mut Carried,
) -> io::Result<Option<Listener>> {
    use std::os::unix::fs::FileTypeExt;
    let Some(path) = &settings.unix_socket else {
        return Ok(None);
    };
    let fail = |e: io::Error| {
        let message = format!("failed to listen on UNIX socket: {path}: {}", strerror(&e));
        io::Error::new(e.kind(), ListenFailed(message))
    };
    if let Some(sock) = take_unix(carried, std::path::Path::new(path)) {
        sock.listen(settings.backlog).map_err(fail)?;
        sock.set_nonblocking(true).map_err(fail)?;
        let std_listener: std::os::unix::net::UnixListener = sock.into();
        return Ok(Some(Listener::Unix(UnixListener::from_std(std_listener))));
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    let sock =
        socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).map_err(fail)?;
    let addr = socket2::SockAddr::unix(path).map_err(fail)?;
    // SAFETY: umask only swaps the process's file-creation mask; no other
    // thread exists yet to create files meanwhile.
    let old_mask = unsafe { libc::umask(!(settings.unix_mask & 0o777) as libc::mode_t) };
    let bound = sock.bind(&addr);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old_mask) };
    bound.map_err(fail)?;
    sock.listen(settings.backlog).map_err(fail)?;
    sock.set_nonblocking(true).map_err(fail)?;
    let std_listener: std::os::unix::net::UnixListener = sock.into();
    Ok(Some(Listener::Unix(UnixListener::from_std(std_listener))))
}

/// Which UDP sockets each worker serves: every worker gets a clone of
/// every socket, or with several `-l` interfaces each socket goes to one
/// worker in turn (memcached's num_threads_per_udp).
pub(crate) fn deal_udp_sockets(
    sockets: Vec<std::net::UdpSocket>,
    settings: &Settings,
) -> io::Result<Vec<Vec<std::net::UdpSocket>>> {
    let mut per_worker: Vec<Vec<std::net::UdpSocket>> =
        (0..settings.threads).map(|_| Vec::new()).collect();
    let mut next = 0;
    for socket in sockets {
        for _ in 1..settings.threads_per_udp {
            per_worker[next % settings.threads].push(socket.try_clone()?);
            next += 1;
        }
        per_worker[next % settings.threads].push(socket);
        next += 1;
    }
    Ok(per_worker)
}

impl Listener {
    /// What `stats conns` shows of it.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _, _) => Kind::ListenTcp {
                local: l.local_addr().ok(),
            },
            Listener::Unix(_) => Kind::ListenUnix,
        }
    }

    pub(crate) fn fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Listener::Tcp(l) | Listener::Tls(l, _, _) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }
}

/// Hands an accepted connection to the next worker, or refuses it (`-c`)
/// as memcached's maxconns_fast does.
pub(crate) fn dispatch(
    mut stream: Stream,
    settings: &Settings,
    global: &GlobalStats,
    workers: &[WorkerHandle],
    next: &mut usize,
) {
    let curr = global.curr_connections.load(Ordering::Relaxed) as usize;
    if curr >= settings.max_connections {
        // memcached's maxconns_fast refusal.
        stream.refuse(b"ERROR Too many open connections\r\n");
        global.rejected_connections.fetch_add(1, Ordering::Relaxed);
        return;
    }
    global.curr_connections.fetch_add(1, Ordering::Relaxed);
    global.total_connections.fetch_add(1, Ordering::Relaxed);
    global
        .connection_structures
        .fetch_max(curr as u64 + 1, Ordering::Relaxed);
    let w = &workers[*next % workers.len()];
    *next = next.wrapping_add(1);
    if w.sender
        .send(super::worker::NewConn {
            stream,
            peer: 0,
            carried: None,
        })
        .is_ok()
    {
        let _ = w.waker.wake();
    } else {
        global.curr_connections.fetch_sub(1, Ordering::Relaxed);
    }
}
