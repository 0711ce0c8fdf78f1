//! The sockets of the proxy's clients: a TCP or unix stream, plain or TLS
//! (`tls::TlsStream` over a plain one), and a TCP or unix listener (a
//! pool's `listen:`). Server connections are `osmium_net::nb::Conn`s
//! (`backend`).

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;

use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};

use crate::config::{Addr, Listen};
use crate::tls::TlsStream;

/// A connected stream.
#[derive(Debug)]
pub enum Stream {
    /// Plain TCP.
    Tcp(TcpStream),
    /// A unix socket.
    Unix(UnixStream),
    /// TLS over a plain stream.
    Tls(Box<TlsStream>),
}

impl Stream {
    /// Registers the stream for reads and writes under `t` (TCP: without
    /// Nagle).
    pub fn register(&mut self, r: &Registry, t: Token) -> io::Result<()> {
        let i = Interest::READABLE | Interest::WRITABLE;
        match self {
            Stream::Tcp(s) => {
                s.set_nodelay(true).ok();
                s.register(r, t, i)
            }
            Stream::Unix(s) => s.register(r, t, i),
            Stream::Tls(s) => s.sock.register(r, t),
        }
    }

    /// Takes the stream off the event loop.
    pub fn deregister(&mut self, r: &Registry) {
        let _ = match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
            Stream::Tls(s) => {
                s.sock.deregister(r);
                Ok(())
            }
        };
    }

    /// Whether output written is still held back (TLS records the socket
    /// has not taken yet).
    pub fn unsent(&self) -> bool {
        match self {
            Stream::Tls(s) => s.unsent(),
            _ => false,
        }
    }

    /// Ends a TLS session with `close_notify` (best effort; nothing for a
    /// plain stream).
    pub fn close(&mut self) {
        if let Stream::Tls(s) = self {
            s.close();
        }
    }

    /// The peer, for the log.
    pub fn peer(&self) -> String {
        match self {
            Stream::Tcp(s) => s.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string()),
            Stream::Unix(_) => "unix socket".into(),
            Stream::Tls(s) => s.sock.peer(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    /// Sends what a TLS stream holds back, as far as the socket takes it.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

/// A pool's listening socket.
#[derive(Debug)]
pub enum Listener {
    /// A TCP listener.
    Tcp(TcpListener),
    /// A unix socket listener and its path.
    Unix(UnixListener, std::path::PathBuf),
}

impl Listener {
    /// Binds `listen` with `backlog`.
    pub fn bind(listen: &Listen, backlog: u32) -> io::Result<Listener> {
        match &listen.addr {
            Addr::Tcp { host, port } => Ok(Listener::Tcp(tcp_listener(host, *port, backlog)?)),
            Addr::Unix(path) => {
                if std::fs::symlink_metadata(path)
                    .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
                {
                    std::fs::remove_file(path)?;
                }
                let l = UnixListener::bind(path)?;
                if let Some(perm) = listen.perm {
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(perm))?;
                }
                Ok(Listener::Unix(l, path.clone()))
            }
        }
    }

    /// Registers the listener for accepts under `t`.
    pub fn register(&mut self, r: &Registry, t: Token) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.register(r, t, Interest::READABLE),
            Listener::Unix(l, _) => l.register(r, t, Interest::READABLE),
        }
    }

    /// Takes the listener off the event loop.
    pub fn deregister(&mut self, r: &Registry) {
        let _ = match self {
            Listener::Tcp(l) => l.deregister(r),
            Listener::Unix(l, _) => l.deregister(r),
        };
    }

    /// Stops listening; a unix socket's file is removed when `unlink`
    /// (not when a new listener was bound at the same path).
    pub fn close(mut self, r: &Registry, unlink: bool) {
        self.deregister(r);
        if let (Listener::Unix(_, path), true) = (&self, unlink) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The next waiting client.
    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l, _) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }

    /// The bound TCP address (tests bind port 0 elsewhere; this reports).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }
}

/// A non-blocking TCP listener on `host:port` (address reuse on, as
/// nutcracker's) with `backlog`.
pub fn tcp_listener(host: &str, port: u16, backlog: u32) -> io::Result<TcpListener> {
    let sa = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(sa),
        socket2::Type::STREAM,
        None,
    )?;
    sock.set_reuse_address(true)?;
    sock.bind(&sa.into())?;
    sock.listen(backlog.min(i32::MAX as u32) as i32)?;
    sock.set_nonblocking(true)?;
    let std: std::net::TcpListener = sock.into();
    Ok(TcpListener::from_std(std))
}
