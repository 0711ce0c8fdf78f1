//! A client's stream socket, TCP, TLS over TCP or unix-domain, behind one
//! type the worker reads, writes and polls; and a replication link's
//! Noise frames over TCP (`noise`), which a plain connection becomes after
//! its `replica_hello`.
//!
//! Each takes a session's output queue (`compose::output`: buffer bytes
//! and values in item memory) as its [`Sink`]: a plain socket (TCP, unix)
//! sends the buffer alone with `write`, and values with the buffer around
//! them in one `writev` per gathered batch ([`send_plain`]); TLS feeds the
//! same pieces to rustls (`tls`). Either way only what the connection did
//! not take of the values is copied into the buffer.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::AsRawFd;

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use super::noise::NoiseConn;
use super::tls::TlsStream;
use crate::compose::output::{Output, Sink, GATHER_PIECES};
use crate::conns::Kind;
use crate::stats::counters::ThreadStats;

/// An accepted stream connection.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Unix(UnixStream),
    /// A replication link's frames (`transport::noise`).
    Noise(Box<NoiseConn>),
}

impl Stream {
    /// What `stats conns` shows of it.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Stream::Tcp(s) => Kind::Tcp {
                remote: s.peer_addr().ok(),
                local: s.local_addr().ok(),
            },
            Stream::Tls(s) => Kind::Tcp {
                remote: s.sock.peer_addr().ok(),
                local: s.sock.local_addr().ok(),
            },
            Stream::Noise(s) => Kind::Tcp {
                remote: s.sock.peer_addr().ok(),
                local: s.sock.local_addr().ok(),
            },
            Stream::Unix(_) => Kind::Unix,
        }
    }

    /// Whether a read of `n` bytes into `room` emptied the socket: a
    /// plain TCP read that returned less than it had room for; a Noise
    /// link whose socket read was short with nothing left to open (a
    /// unix stream's read may stop short at a sender's boundary; TLS
    /// returns a record's plaintext at a time).
    pub(crate) fn read_drained(&self, n: usize, room: usize) -> bool {
        match self {
            Stream::Tcp(_) => n < room,
            Stream::Noise(s) => s.drained(),
            Stream::Tls(_) | Stream::Unix(_) => false,
        }
    }

    /// Whether requests already received wait to be read without a
    /// socket read: a Noise link's whole frames that one socket read
    /// brought (the other streams leave unread bytes in the socket).
    pub(crate) fn holds_input(&self) -> bool {
        match self {
            Stream::Noise(s) => s.holds_input(),
            Stream::Tcp(_) | Stream::Tls(_) | Stream::Unix(_) => false,
        }
    }

    /// Whether the idle timeout applies (memcached: TCP clients only).
    pub(crate) fn is_tcp(&self) -> bool {
        matches!(self, Stream::Tcp(_) | Stream::Tls(_) | Stream::Noise(_))
    }

    /// Whether it is plain TCP (a `replica_hello` there turns it into
    /// Noise frames).
    pub(crate) fn is_plain_tcp(&self) -> bool {
        matches!(self, Stream::Tcp(_))
    }

    /// Writes a refusal line to a connection that is not served (a TLS
    /// one, which has not shaken hands, gets nothing).
    pub(crate) fn refuse(&mut self, line: &[u8]) {
        let _ = match self {
            Stream::Tcp(s) => s.write(line),
            Stream::Tls(_) | Stream::Noise(_) => Ok(0),
            Stream::Unix(s) => s.write(line),
        };
    }

    /// Ends the connection's session politely (TLS `close_notify`).
    pub(crate) fn close(&mut self) {
        match self {
            Stream::Tls(s) => s.close(),
            Stream::Noise(s) => s.close(),
            Stream::Tcp(_) | Stream::Unix(_) => {}
        }
    }

    /// A frame of a Noise link failed to open (the link is closed).
    pub(crate) fn frame_failed(&self) -> bool {
        matches!(self, Stream::Noise(s) if s.failed)
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.sock.as_raw_fd(),
            Stream::Noise(s) => s.sock.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Noise(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Sink for Stream {
    /// Sends the queue; for TLS, the records rustls holds too. Ok(true)
    /// when nothing is left.
    #[inline]
    fn send(&mut self, out: &mut Output, stats: &ThreadStats) -> io::Result<bool> {
        match self {
            Stream::Tcp(s) => send_plain(s, out, stats),
            Stream::Tls(s) => s.send(out, stats),
            Stream::Noise(s) => s.send(out, stats),
            Stream::Unix(s) => send_plain(s, out, stats),
        }
    }
}

/// A plain stream socket takes an output's queue: the buffer alone with
/// `write`s while the socket takes them; values, with the buffer around
/// them, in one `writev` per gathered batch (`Output::pieces`), until the
/// socket takes less than offered or what is to leave now
/// (`Output::sendable`) left. Ok(true) when all of that left.
pub(crate) fn send_plain<W: Write>(
    sock: &mut W,
    out: &mut Output,
    stats: &ThreadStats,
) -> io::Result<bool> {
    if !out.has_refs() {
        while out.queued() > 0 {
            match sock.write(out.pending()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    out.sent(n);
                    stats.bytes_written.add(n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        return Ok(true);
    }
    if out.ref_count() <= FEW_VALUES {
        writev_queue::<W, { 2 * FEW_VALUES + 1 }>(sock, out, stats)
    } else {
        writev_queue::<W, GATHER_PIECES>(sock, out, stats)
    }
}

/// Most values whose queue is written from a small array of slices (a
/// GET or two; a deep pipeline's batch takes the large one).
const FEW_VALUES: usize = 3;

/// `send_plain` of a queue with values, `N` slices a `writev`.
fn writev_queue<W: Write, const N: usize>(
    sock: &mut W,
    out: &mut Output,
    stats: &ThreadStats,
) -> io::Result<bool> {
    let total = out.sendable();
    let mut done = 0;
    let mut failed = None;
    let mut iov = [IoSlice::new(&[]); N];
    while done < total {
        let (count, bytes) = out.pieces(done, total - done, &mut iov);
        match sock.write_vectored(&iov[..count]) {
            Ok(n) => {
                done += n;
                if n < bytes {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The socket is full: what it did not take is kept.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    stats.bytes_written.add(done as u64);
    let all = done == total;
    out.sent_queue(done);
    match failed {
        Some(e) => Err(e),
        None => Ok(all),
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Tls(s) => s.sock.register(r, t, i),
            Stream::Noise(s) => s.sock.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Tls(s) => s.sock.reregister(r, t, i),
            Stream::Noise(s) => s.sock.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Tls(s) => s.sock.deregister(r),
            Stream::Noise(s) => s.sock.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}
