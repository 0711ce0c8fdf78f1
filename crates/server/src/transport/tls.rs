//! A TLS client connection: a rustls server session over a non-blocking
//! TCP socket (`osmium_net::TlsStream`, which owns the record loop), read
//! and written as a plain stream by the worker (or, for replication's
//! follow link, the client session this server opened to its target,
//! handed to a worker once established). What is the server's own here:
//! the counters and log of [`Counted`], and what a session shows of its
//! peer.
//!
//! The session's output queue (buffer bytes and values in item memory,
//! see `compose::output`) is fed to rustls piece by piece
//! (`TlsStream::send`, in `tls_send`), at most `ssl_wbuf_size` bytes a
//! call, so a large value goes from item memory straight into records,
//! copied once, by the encryption. rustls takes plaintext until the
//! records it holds reach `osmium_net::session::SEND_LIMIT`; they are then
//! written to the socket and feeding goes on until the socket is full.
//! What rustls did not take of the values is then copied into the
//! output's buffer, as for a plain socket that did not take it.
//!
//! The worker's epoll is edge-triggered, so a read reports `WouldBlock`
//! only when rustls holds no plaintext and the socket none either; and
//! records rustls has not sent yet (handshake replies, encrypted output
//! the socket did not take) count as unsent output (`send_records`), so
//! the connection waits for a writable event until they are out.
//! A handshake that fails or a record that does not decrypt is counted
//! (`ssl_handshake_errors` while handshaking, `ssl_proto_errors` after,
//! as memcached) and ends the connection; rustls's alert is sent first.

use std::io::{self, Read, Write};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::{ClientConnection, Connection, ServerConnection};

use crate::settings::tls::ListenerTls;
use crate::tls_context::{count_error, TlsContext};

/// The server's part in a TLS session: `stats`'s counters and `-v`'s log.
pub(crate) struct Counted {
    pub(crate) ctx: Arc<TlsContext>,
}

impl osmium_net::TlsEvents for Counted {
    fn failed(&mut self, handshaking: bool, error: rustls::Error) -> io::Error {
        count_error(&self.ctx, handshaking);
        if self.ctx.verbose {
            tracing::info!("TLS error: {error}");
        }
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    fn established(&mut self, conn: &Connection) {
        self.ctx.handshakes.fetch_add(1, Ordering::Relaxed);
        if self.ctx.session_cache() && conn.handshake_kind() != Some(rustls::HandshakeKind::Resumed)
        {
            self.ctx.new_sessions.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A TLS connection of a worker.
pub(crate) struct TlsStream {
    inner: osmium_net::TlsStream<TcpStream, Counted>,
    /// Client certificates on this listener are verified against
    /// `ssl_ca_cert`.
    verifies_clients: bool,
}

/// The session's stream (`sock`), its record loop (`send_records`) and
/// its reads.
impl Deref for TlsStream {
    type Target = osmium_net::TlsStream<TcpStream, Counted>;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl DerefMut for TlsStream {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

/// The worker reads until `WouldBlock`: each read returns what one read
/// of records brought (`read_some`), with no extra read of an empty
/// socket to fill the buffer.
impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_some(buf)
    }
}

impl TlsStream {
    /// A new connection on a `mode` listener, its handshake not begun.
    pub(crate) fn accept(
        sock: TcpStream,
        ctx: &Arc<TlsContext>,
        mode: ListenerTls,
    ) -> io::Result<Self> {
        let conn = ServerConnection::new(ctx.config(mode)).map_err(io::Error::other)?;
        let events = Counted { ctx: ctx.clone() };
        Ok(TlsStream {
            inner: osmium_net::TlsStream::over(sock, conn.into(), events, false),
            verifies_clients: ctx.verifies_clients(mode),
        })
    }

    /// A replication follow link this server opened (its handshake done,
    /// the target verified; plaintext already decrypted stays readable).
    pub(crate) fn established_client(
        sock: TcpStream,
        conn: ClientConnection,
        ctx: &Arc<TlsContext>,
    ) -> Self {
        let events = Counted { ctx: ctx.clone() };
        TlsStream {
            inner: osmium_net::TlsStream::established(sock, conn.into(), events),
            verifies_clients: false,
        }
    }

    /// The socket and the TLS session, for replication to go on with
    /// (`replica_follow`).
    pub(crate) fn into_parts(self) -> (TcpStream, Connection) {
        self.inner.into_parts()
    }

    /// Whether the client presented a certificate that was verified
    /// against `ssl_ca_cert` (a proven client: a replication peer may be
    /// one).
    pub(crate) fn client_verified(&self) -> bool {
        self.is_established() && self.verifies_clients && self.conn().peer_certificates().is_some()
    }

    /// What the established session shows a replication peer by: whether
    /// its client certificate is one `replication_peers` /
    /// `replication_ca` names, and (`binding`) the exporter value a link
    /// handshake inside it is bound to. None before the handshake ended.
    pub(crate) fn peer_standing(&self, binding: bool) -> Option<(bool, Option<[u8; 32]>)> {
        if !self.is_established() {
            return None;
        }
        let named = self.client_verified() && self.events.ctx.names_client(self.conn());
        let value = binding
            .then(|| crate::replication::stream::tls_binding(self.conn()).ok())
            .flatten();
        Some((named, value))
    }

    /// Writes plaintext outside a session's output queue (a log
    /// watcher's lines): what rustls took, its records sent as far as the
    /// socket takes them.
    pub(crate) fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
}
