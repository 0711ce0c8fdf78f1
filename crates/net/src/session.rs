//! [`TlsStream`]: a rustls session, server or client side, over a
//! non-blocking stream `S`, read and written by an event loop as a plain
//! stream.
//!
//! ```text
//!   socket ─read_tls─▶ records ─process_new_packets─▶ plaintext ─read─▶ user
//!   socket ◀─write_tls─ records ◀──────encrypt─────── plaintext ◀─write─ user
//! ```
//!
//! Readiness is edge-triggered, so [`TlsStream::read`] fills the caller's
//! buffer and returns less than asked only when rustls holds no more
//! plaintext and the socket had no more bytes (or ended); with nothing at
//! all it is `WouldBlock`. [`TlsStream::read_some`] returns what one
//! read of records brought, for a reader that reads until `WouldBlock`
//! itself. Records not yet sent (handshake messages,
//! output the socket did not take) go out at the next read or write, or
//! [`TlsStream::send_records`], and count as unsent output
//! ([`TlsStream::unsent`]) until then. A handshake or record that fails
//! ends the session: rustls's alert is sent, and the error the user's
//! [`TlsEvents::failed`] makes of it is returned.

use std::io::{self, Read, Write};
use std::sync::Arc;

use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};
use rustls_pki_types::ServerName;

use crate::records::{self, Taken};

/// Most TLS bytes rustls keeps unsent before a write waits for the socket.
pub const SEND_LIMIT: usize = 64 * 1024;

/// What a stream's user does when its session finishes a handshake or
/// fails one (or a record): count it, log it.
pub trait TlsEvents {
    /// The handshake (`handshaking`) or a record failed with `error`; the
    /// I/O error the read returns (its kind should be `InvalidData`).
    fn failed(&mut self, handshaking: bool, error: rustls::Error) -> io::Error;

    /// The handshake finished (called once; not for a session that was
    /// handed over established).
    fn established(&mut self, _conn: &Connection) {}
}

/// No counting, no log: the error is rustls's, as `InvalidData`.
impl TlsEvents for () {
    fn failed(&mut self, _handshaking: bool, error: rustls::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }
}

/// A TLS session over a non-blocking stream.
pub struct TlsStream<S, E = ()> {
    /// The stream under it.
    pub sock: S,
    conn: Connection,
    /// What the user does on a handshake's end or failure.
    pub events: E,
    /// The handshake finished.
    established: bool,
    /// The socket reached its end.
    eof: bool,
}

impl<S: std::fmt::Debug, E> std::fmt::Debug for TlsStream<S, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsStream")
            .field("sock", &self.sock)
            .field("established", &self.established)
            .finish()
    }
}

impl<S: Read + Write, E: TlsEvents> TlsStream<S, E> {
    /// A client of a TLS listener, its handshake not begun.
    pub fn accept(sock: S, config: Arc<ServerConfig>, events: E) -> io::Result<Self> {
        let conn = ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(Self::over(sock, conn.into(), events, false))
    }

    /// A connection to a server whose certificate must be valid for
    /// `name`; the handshake begins with the first write or read.
    pub fn connect(
        sock: S,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        events: E,
    ) -> io::Result<Self> {
        let conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
        Ok(Self::over(sock, conn.into(), events, false))
    }

    /// A session whose handshake was done elsewhere (blocking, before the
    /// socket turned non-blocking); plaintext already decrypted stays
    /// readable.
    pub fn established(sock: S, conn: Connection, events: E) -> Self {
        Self::over(sock, conn, events, true)
    }

    /// A session over `sock`, its handshake `established` or not.
    pub fn over(sock: S, mut conn: Connection, events: E, established: bool) -> Self {
        conn.set_buffer_limit(Some(SEND_LIMIT));
        TlsStream {
            sock,
            conn,
            events,
            established,
            eof: false,
        }
    }

    /// The rustls session.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The rustls session, to feed plaintext to its writer directly.
    pub fn conn_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// The stream and the session, to go on with elsewhere.
    pub fn into_parts(self) -> (S, Connection) {
        (self.sock, self.conn)
    }

    /// Whether the handshake finished.
    pub fn is_established(&self) -> bool {
        self.established
    }

    /// Whether records wait to be sent.
    pub fn unsent(&self) -> bool {
        self.conn.wants_write()
    }

    /// Sends the records rustls holds. Ok(true): none left; Ok(false): the
    /// socket is full.
    pub fn send_records(&mut self) -> io::Result<bool> {
        records::send_records(&mut self.conn, &mut self.sock)
    }

    /// Says goodbye (`close_notify`) if the socket takes it now.
    pub fn close(&mut self) {
        if self.established {
            self.conn.send_close_notify();
            let _ = self.send_records();
        }
    }

    /// Reads records from the socket into rustls and decrypts them.
    /// Ok(false): nothing came (the socket is drained, or ended: `eof`).
    fn take_records(&mut self) -> io::Result<bool> {
        match records::take_records(&mut self.conn, &mut self.sock)? {
            Taken::Records => {}
            Taken::Nothing => return Ok(false),
            Taken::End => {
                self.eof = true;
                return Ok(false);
            }
            Taken::Failed { handshaking, error } => {
                let e = self.events.failed(handshaking, error);
                // rustls queued its alert.
                let _ = self.send_records();
                return Err(e);
            }
        }
        if !self.established && !self.conn.is_handshaking() {
            self.established = true;
            self.events.established(&self.conn);
        }
        // Handshake messages leave as soon as they are made.
        self.send_records()?;
        Ok(true)
    }
}

impl<S: Read + Write, E: TlsEvents> TlsStream<S, E> {
    /// Plaintext as soon as there is some: what rustls holds, else what
    /// one read of records from the socket brought. `WouldBlock` when the
    /// socket had nothing; Ok(0) at its end or the peer's close_notify.
    /// For a reader that reads until `WouldBlock` anyway (the server's
    /// worker): no read of the socket that only finds it empty, as
    /// [`Read::read`] makes to fill the buffer.
    pub fn read_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Records a full socket kept back go first.
        self.send_records()?;
        loop {
            match self.conn.reader().read(buf) {
                // Ok(0): the peer's close_notify.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if !self.take_records()? {
                if self.eof {
                    return Ok(0);
                }
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
    }
}

impl<S: Read + Write, E: TlsEvents> Read for TlsStream<S, E> {
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

impl<S: Read + Write, E: TlsEvents> Write for TlsStream<S, E> {
    /// Plaintext in, its records sent as far as the socket takes them
    /// (the rest waits: `unsent`). `WouldBlock` while older records wait
    /// for the socket or rustls takes nothing (its handshake goes on).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.send_records()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.conn.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.send_records()?;
        Ok(n)
    }

    /// Sends what rustls holds as far as the socket takes it.
    fn flush(&mut self) -> io::Result<()> {
        self.send_records().map(|_| ())
    }
}
