//! A client's stream socket, TCP, TLS over TCP or unix-domain, behind one
//! type the worker reads, writes and polls.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use super::tls::TlsStream;
use crate::conns::Kind;

/// An accepted stream connection.
pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Unix(UnixStream),
}

impl Stream {
    /// What `stats conns` shows of it.
    pub fn kind(&self) -> Kind {
        match self {
            Stream::Tcp(s) => Kind::Tcp {
                remote: s.peer_addr().ok(),
                local: s.local_addr().ok(),
            },
            Stream::Tls(s) => Kind::Tcp {
                remote: s.sock.peer_addr().ok(),
                local: s.sock.local_addr().ok(),
            },
            Stream::Unix(_) => Kind::Unix,
        }
    }

    /// A read that returned less than it had room for emptied the socket
    /// (a unix stream's read may stop short at a sender's boundary; TLS
    /// returns a record's plaintext at a time).
    pub fn short_read_means_empty(&self) -> bool {
        matches!(self, Stream::Tcp(_))
    }

    /// Whether the idle timeout applies (memcached: TCP clients only).
    pub fn is_tcp(&self) -> bool {
        matches!(self, Stream::Tcp(_) | Stream::Tls(_))
    }

    /// Sends what the transport itself still holds (TLS records). Ok(true)
    /// when nothing is left.
    pub fn flush_transport(&mut self) -> io::Result<bool> {
        match self {
            Stream::Tls(s) => s.flush_records(),
            _ => Ok(true),
        }
    }

    /// Whether a direct `writev` of values from item memory may bypass
    /// `write` (not through TLS, which must encrypt them).
    pub fn takes_direct_writes(&self) -> bool {
        !matches!(self, Stream::Tls(_))
    }

    /// Whether a TLS client presented a certificate verified against
    /// `ssl_ca_cert`.
    pub fn client_verified(&self) -> bool {
        matches!(self, Stream::Tls(s) if s.client_verified())
    }

    /// Ends the connection's session politely (TLS `close_notify`).
    pub fn close(&mut self) {
        if let Stream::Tls(s) = self {
            s.close();
        }
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.sock.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Tls(s) => s.sock.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Tls(s) => s.sock.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Tls(s) => s.sock.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}
