//! A TLS session over a non-blocking stream: a rustls server session for a
//! client of a TLS listener, a client session for a server connection.
//! The event loop reads and writes it as a plain stream.
//!
//! ```text
//!   socket ─read_tls─▶ records ─process_new_packets─▶ plaintext ─read─▶ proxy
//!   socket ◀─write_tls─ records ◀──────encrypt─────── plaintext ◀─write─ proxy
//! ```
//!
//! Readiness is edge-triggered and a connection's read stops at a short
//! read, so [`TlsStream::read`] returns less than asked only when rustls
//! holds no more plaintext and the socket has no more bytes (or ended).
//! Records not yet sent (handshake messages, output the socket did not
//! take) go out at the next read or write, or [`TlsStream::send_records`]:
//! the connection's writable events bring it there. A handshake or record
//! that fails ends the connection (rustls's alert sent first) with an
//! `InvalidData` error saying why; a server connection's failure is logged
//! as a warning, a client's at info.

use std::io::{self, Read, Write};
use std::sync::Arc;

use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};
use rustls_pki_types::ServerName;

use crate::stream::Stream;

/// Most TLS bytes rustls keeps unsent before a write waits for the socket.
const SEND_LIMIT: usize = 64 * 1024;

/// A TLS session (client or server side) over a non-blocking stream.
pub struct TlsStream {
    /// The plain stream under it.
    pub sock: Stream,
    conn: Connection,
    /// The socket reached its end.
    eof: bool,
    /// Who is at the other end, for the log.
    peer: String,
    /// A server connection (its failures are warnings).
    to_server: bool,
}

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("sock", &self.sock)
            .field("peer", &self.peer)
            .field("handshaking", &self.conn.is_handshaking())
            .finish()
    }
}

impl TlsStream {
    /// A client of a TLS listener, its handshake not begun.
    pub fn accept(sock: Stream, config: Arc<ServerConfig>, peer: String) -> io::Result<Self> {
        let conn = ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(Self::new(sock, conn.into(), peer, false))
    }

    /// A connection to a server whose certificate must be valid for
    /// `name`; the handshake begins with the first write or read.
    pub fn connect(
        sock: Stream,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        peer: String,
    ) -> io::Result<Self> {
        let conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
        Ok(Self::new(sock, conn.into(), peer, true))
    }

    fn new(sock: Stream, mut conn: Connection, peer: String, to_server: bool) -> Self {
        conn.set_buffer_limit(Some(SEND_LIMIT));
        TlsStream {
            sock,
            conn,
            eof: false,
            peer,
            to_server,
        }
    }

    /// Whether records wait to be sent.
    pub fn unsent(&self) -> bool {
        self.conn.wants_write()
    }

    /// Sends the records rustls holds. Ok(true): none left; Ok(false): the
    /// socket is full.
    pub fn send_records(&mut self) -> io::Result<bool> {
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

    /// Says goodbye (`close_notify`) if the socket takes it now.
    pub fn close(&mut self) {
        if !self.conn.is_handshaking() {
            self.conn.send_close_notify();
            let _ = self.send_records();
        }
    }

    /// Reads records from the socket into rustls and decrypts them.
    /// Ok(false): nothing came (the socket is drained, or ended: `eof`).
    fn take_records(&mut self) -> io::Result<bool> {
        loop {
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let handshaking = self.conn.is_handshaking();
        if let Err(e) = self.conn.process_new_packets() {
            let what = if handshaking {
                "TLS handshake failed"
            } else {
                "TLS record failed"
            };
            if self.to_server {
                tracing::warn!("{}: {what}: {e}", self.peer);
            } else {
                tracing::info!("{}: {what}: {e}", self.peer);
            }
            // rustls queued its alert.
            let _ = self.send_records();
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what}: {e}"),
            ));
        }
        // Handshake messages leave as soon as they are made.
        self.send_records()?;
        Ok(true)
    }
}

impl Read for TlsStream {
    /// Plaintext: as much as `buf` takes, or all there is until the socket
    /// would block. Ok(0) at the end of the stream (close_notify, or the
    /// socket's end).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Records a full socket kept back go first (a writable event may
        // have brought the connection here).
        self.send_records()?;
        let mut got = 0;
        loop {
            match self.conn.reader().read(&mut buf[got..]) {
                Ok(n) => {
                    got += n;
                    // Ok(0): close_notify, or `buf` is full.
                    if n == 0 || got == buf.len() {
                        return Ok(got);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket ended without close_notify: an end all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(got),
                Err(e) => return Err(e),
            }
            if self.eof {
                return Ok(got);
            }
            if !self.take_records()? {
                if self.eof || got > 0 {
                    return Ok(got);
                }
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.send_records()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.conn.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // What the socket does not take now waits in rustls (`unsent`).
        self.send_records()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_records().map(|_| ())
    }
}
