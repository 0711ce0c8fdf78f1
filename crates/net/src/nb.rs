//! [`Conn`]: a non-blocking memcached-protocol client connection, for an
//! event loop that pipelines requests and matches replies in order (the
//! proxy's server connections, the benchmark's load generator).
//!
//! ```text
//!  queue ─▶ out[sent..] ─flush─▶ link ─fill─▶ InBuf ─next_reply─▶ (len, outcome) ─consume
//!                                 │
//!        Socket (TCP, unix), or a TlsStream over one
//! ```
//!
//! The caller registers the connection with its `mio` poll (it is a
//! [`mio::event::Source`], its socket's readiness; edge-triggered, so
//! [`Conn::fill`] reads until the socket is drained). Requests are queued
//! whole ([`Conn::queue`], or encoded into [`Conn::out`]) and written by
//! [`Conn::flush`] as far as the socket takes them; the rest waits for a
//! writable event ([`Conn::wants_write`]). Replies are framed at the front
//! of the input by `osmium_protocol::client::reply` and consumed once
//! handled. Both buffers are kept and reused: no allocation per request
//! once they have grown to the connection's traffic.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::Path;

use mio::net::{TcpStream, UnixStream};
use mio::{event, Interest, Registry, Token};
use osmium_protocol::client::reply::{frame_reply, reply_len, Desync, Expect, Outcome};

use crate::inbuf::InBuf;
use crate::session::{TlsEvents, TlsStream};

/// Bytes already written at the front of the output that are dropped
/// (moved out) before more is queued behind them.
const COMPACT_AT: usize = 64 * 1024;

/// A connected (or connecting) non-blocking stream socket.
#[derive(Debug)]
pub enum Socket {
    /// TCP, without Nagle.
    Tcp(TcpStream),
    /// A unix-domain stream.
    Unix(UnixStream),
}

impl Socket {
    /// Starts connecting to `addr` (done when [`Socket::connected`] says
    /// so, after a writable event).
    pub fn connect(addr: SocketAddr) -> io::Result<Socket> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true).ok();
        Ok(Socket::Tcp(s))
    }

    /// Connects to the unix socket at `path`.
    pub fn connect_unix(path: &Path) -> io::Result<Socket> {
        Ok(Socket::Unix(UnixStream::connect(path)?))
    }

    /// A TCP connection made elsewhere (blocking), turned non-blocking.
    pub fn from_std_tcp(s: std::net::TcpStream) -> io::Result<Socket> {
        s.set_nonblocking(true)?;
        s.set_nodelay(true).ok();
        Ok(Socket::Tcp(TcpStream::from_std(s)))
    }

    /// A connect's outcome: `Ok(true)` connected, `Ok(false)` not yet.
    pub fn connected(&self) -> io::Result<bool> {
        let (err, peer) = match self {
            Socket::Tcp(s) => (s.take_error()?, s.peer_addr().map(|_| ())),
            Socket::Unix(s) => (s.take_error()?, s.peer_addr().map(|_| ())),
        };
        if let Some(e) = err {
            return Err(e);
        }
        match peer {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl event::Source for Socket {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.register(r, t, i),
            Socket::Unix(s) => s.register(r, t, i),
        }
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.reregister(r, t, i),
            Socket::Unix(s) => s.reregister(r, t, i),
        }
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.deregister(r),
            Socket::Unix(s) => s.deregister(r),
        }
    }
}

/// What a connection's bytes go through: the socket, or a TLS session
/// over it.
#[derive(Debug)]
enum Link<E> {
    Plain(Socket),
    Tls(Box<TlsStream<Socket, E>>),
}

/// A non-blocking client connection (see the module comment). `E` is what
/// its TLS session does on a failed handshake or record.
#[derive(Debug)]
pub struct Conn<E = ()> {
    link: Link<E>,
    /// Requests queued; `out[..sent]` were written.
    out: Vec<u8>,
    sent: usize,
    input: InBuf,
}

impl<E: TlsEvents> Conn<E> {
    /// A connection over a plain socket.
    pub fn plain(socket: Socket) -> Self {
        Self::over(Link::Plain(socket))
    }

    /// A connection through a TLS session (its handshake done or going
    /// on: requests wait until the session takes them).
    pub fn tls(session: TlsStream<Socket, E>) -> Self {
        Self::over(Link::Tls(Box::new(session)))
    }

    fn over(link: Link<E>) -> Self {
        Conn {
            link,
            out: Vec::new(),
            sent: 0,
            input: InBuf::default(),
        }
    }

    /// The socket under the connection.
    pub fn socket(&self) -> &Socket {
        match &self.link {
            Link::Plain(s) => s,
            Link::Tls(t) => &t.sock,
        }
    }

    /// Whether its bytes go through TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.link, Link::Tls(_))
    }

    /// A connect's outcome: `Ok(true)` connected (a TLS session's
    /// handshake goes on after this), `Ok(false)` not yet.
    pub fn connected(&self) -> io::Result<bool> {
        self.socket().connected()
    }

    /// Queues `request` after the requests queued before it.
    pub fn queue(&mut self, request: &[u8]) {
        self.out().extend_from_slice(request);
    }

    /// The output, to encode requests onto its end (the written bytes at
    /// its front are dropped first when there are many).
    pub fn out(&mut self) -> &mut Vec<u8> {
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        } else if self.sent >= COMPACT_AT {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        &mut self.out
    }

    /// Bytes queued and not yet written to the socket (or to the TLS
    /// session).
    pub fn unsent(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Whether output waits for the socket: queued bytes, or TLS records
    /// it has not taken yet.
    pub fn wants_write(&self) -> bool {
        self.unsent() > 0
            || match &self.link {
                Link::Tls(t) => t.unsent(),
                Link::Plain(_) => false,
            }
    }

    /// Writes what is queued as far as the socket takes it (TLS records
    /// held back go first); the bytes written by this call. A socket that
    /// takes nothing is `ConnectionReset`.
    pub fn flush(&mut self) -> io::Result<usize> {
        if let Link::Tls(t) = &mut self.link {
            if !t.send_records()? {
                return Ok(0);
            }
        }
        let from = self.sent;
        while self.sent < self.out.len() {
            let wrote = match &mut self.link {
                Link::Plain(s) => s.write(&self.out[self.sent..]),
                Link::Tls(t) => t.write(&self.out[self.sent..]),
            };
            match wrote {
                Ok(0) => return Err(io::ErrorKind::ConnectionReset.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let wrote = self.sent - from;
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
        Ok(wrote)
    }

    /// Reads what the socket has into the input (see [`InBuf::fill`]: a
    /// short read means drained, unless `to_end`). `Ok(false)` at the end
    /// of the stream.
    pub fn fill(&mut self, to_end: bool) -> io::Result<bool> {
        match &mut self.link {
            Link::Plain(s) => self.input.fill(s, to_end),
            Link::Tls(t) => self.input.fill(&mut **t, to_end),
        }
    }

    /// The bytes read and not consumed yet.
    pub fn input(&self) -> &[u8] {
        self.input.bytes()
    }

    /// The length of the whole reply of shape `expect` at the front of the
    /// input; `Ok(None)` while incomplete; `Err` when it cannot be framed
    /// (the connection is out of step).
    pub fn next_reply_len(&self, expect: Expect) -> Result<Option<usize>, Desync> {
        reply_len(self.input.bytes(), expect)
    }

    /// [`Conn::next_reply_len`], and what the reply says.
    pub fn next_reply(&self, expect: Expect) -> Result<Option<(usize, Outcome)>, Desync> {
        frame_reply(self.input.bytes(), expect)
    }

    /// Drops the first `n` bytes of the input (a reply handled).
    pub fn consume(&mut self, n: usize) {
        self.input.consume(n);
    }

    /// Drops every byte queued or read (the connection is done with).
    pub fn clear(&mut self) {
        self.out.clear();
        self.sent = 0;
        self.input.clear();
    }

    /// Ends a TLS session with `close_notify`, if the socket takes it now
    /// (nothing for a plain socket).
    pub fn close(&mut self) {
        if let Link::Tls(t) = &mut self.link {
            t.close();
        }
    }
}

impl<E> event::Source for Conn<E> {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        self.socket_mut().register(r, t, i)
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        self.socket_mut().reregister(r, t, i)
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        self.socket_mut().deregister(r)
    }
}

impl<E> Conn<E> {
    fn socket_mut(&mut self) -> &mut Socket {
        match &mut self.link {
            Link::Plain(s) => s,
            Link::Tls(t) => &mut t.sock,
        }
    }
}

#[cfg(test)]
mod tests;
