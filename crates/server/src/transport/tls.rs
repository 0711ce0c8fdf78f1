//! A TLS client connection: a rustls server session over a non-blocking
//! TCP socket, read and written as a plain stream by the worker (or, for
//! replication's follow link, the client session this server opened to
//! its target, handed to a worker once established).
//!
//! ```text
//!   socket ─read_tls─▶ records ─process_new_packets─▶ plaintext ─read─▶ session
//!   socket ◀─write_tls─ records ◀──────encrypt─────── queue ◀─send─ output
//! ```
//!
//! The session's output queue (buffer bytes and values in item memory,
//! see `compose::output`) is fed to rustls piece by piece
//! (`TlsStream::send`, in `tls_send`), at most `ssl_wbuf_size` bytes a call, so a large
//! value goes from item memory straight into records, copied once, by
//! the encryption. rustls takes plaintext until the records it holds reach
//! `SEND_LIMIT`; they are then written to the socket and feeding goes on
//! until the socket is full. What rustls did not take of the values is
//! then copied into the output's buffer, as for a plain socket that did
//! not take it.
//!
//! The worker's epoll is edge-triggered, so a read reports `WouldBlock`
//! only when rustls holds no plaintext and the socket none either; and
//! records rustls has not sent yet (handshake replies, encrypted output
//! the socket did not take) count as unsent output ([`TlsStream::flush_records`]),
//! so the connection waits for a writable event until they are out.
//! A handshake that fails or a record that does not decrypt is counted
//! (`ssl_handshake_errors` while handshaking, `ssl_proto_errors` after,
//! as memcached) and ends the connection; rustls's alert is sent first.

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::{ClientConnection, Connection, ServerConnection};

use crate::settings::tls::ListenerTls;
use crate::tls_context::{count_error, TlsContext};

/// Most TLS bytes rustls keeps unsent before a write waits for the socket.
const SEND_LIMIT: usize = 64 * 1024;

pub(crate) struct TlsStream {
    pub sock: TcpStream,
    pub(super) conn: Connection,
    pub(super) ctx: Arc<TlsContext>,
    /// Client certificates on this listener are verified against
    /// `ssl_ca_cert`.
    verifies_clients: bool,
    /// The handshake finished (counted once).
    established: bool,
}

impl TlsStream {
    /// A new connection on a `mode` listener, its handshake not begun.
    pub(crate) fn accept(
        sock: TcpStream,
        ctx: &Arc<TlsContext>,
        mode: ListenerTls,
    ) -> io::Result<Self> {
        let mut conn = ServerConnection::new(ctx.config(mode)).map_err(io::Error::other)?;
        conn.set_buffer_limit(Some(SEND_LIMIT));
        Ok(TlsStream {
            sock,
            conn: Connection::Server(conn),
            ctx: ctx.clone(),
            verifies_clients: ctx.verifies_clients(mode),
            established: false,
        })
    }

    /// A replication follow link this server opened (its handshake done,
    /// the target verified; plaintext already decrypted stays readable).
    pub(crate) fn established_client(
        sock: TcpStream,
        mut conn: ClientConnection,
        ctx: &Arc<TlsContext>,
    ) -> Self {
        conn.set_buffer_limit(Some(SEND_LIMIT));
        TlsStream {
            sock,
            conn: Connection::Client(conn),
            ctx: ctx.clone(),
            verifies_clients: false,
            established: true,
        }
    }

    /// The socket and the TLS session, for replication to go on with
    /// (`replica_follow`).
    pub(crate) fn into_parts(self) -> (TcpStream, Connection) {
        (self.sock, self.conn)
    }

    /// Whether the client presented a certificate that was verified
    /// against `ssl_ca_cert` (a proven client: a replication peer may be
    /// one).
    pub(crate) fn client_verified(&self) -> bool {
        self.established && self.verifies_clients && self.conn.peer_certificates().is_some()
    }

    /// What the established session shows a replication peer by: whether
    /// its client certificate is one `replication_peers` /
    /// `replication_ca` names, and (`binding`) the exporter value a link
    /// handshake inside it is bound to. None before the handshake ended.
    pub(crate) fn peer_standing(&self, binding: bool) -> Option<(bool, Option<[u8; 32]>)> {
        if !self.established {
            return None;
        }
        let named = self.client_verified() && self.ctx.names_client(&self.conn);
        let value = binding
            .then(|| crate::replication::stream::tls_binding(&self.conn).ok())
            .flatten();
        Some((named, value))
    }

    /// Sends the records rustls holds. Ok(true): none left; Ok(false):
    /// the socket is full.
    pub(crate) fn flush_records(&mut self) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Reads records from the socket and decrypts them. Ok(false): the
    /// peer closed its side.
    fn take_records(&mut self) -> io::Result<bool> {
        loop {
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => return Ok(false),
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let handshaking = self.conn.is_handshaking();
        if let Err(e) = self.conn.process_new_packets() {
            count_error(&self.ctx, handshaking);
            if self.ctx.verbose {
                tracing::info!("TLS error: {e}");
            }
            // rustls queued its alert.
            let _ = self.flush_records();
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        if !self.established && !self.conn.is_handshaking() {
            self.established = true;
            self.ctx.handshakes.fetch_add(1, Ordering::Relaxed);
            if self.ctx.session_cache()
                && self.conn.handshake_kind() != Some(rustls::HandshakeKind::Resumed)
            {
                self.ctx.new_sessions.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Handshake replies (and alerts) leave as soon as they are made.
        self.flush_records()?;
        Ok(true)
    }

    /// Writes plaintext outside a session's output queue (a log
    /// watcher's lines): what rustls took, its records sent as far as the
    /// socket takes them.
    pub(crate) fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.flush_records()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = io::Write::write(&mut self.conn.writer(), buf)?;
        self.flush_records()?;
        Ok(n)
    }

    /// Says goodbye (`close_notify`) if the socket takes it now.
    pub(crate) fn close(&mut self) {
        if self.established {
            self.conn.send_close_notify();
            let _ = self.flush_records();
        }
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Records a full socket kept back go first (a writable event may
        // have brought the connection here).
        self.flush_records()?;
        loop {
            match self.conn.reader().read(buf) {
                // Ok(0): the peer's close_notify.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if !self.take_records()? {
                return Ok(0);
            }
        }
    }
}
