//! A replication connection as the links' threads use it: Noise frames
//! over TCP, or TLS over TCP (`-Z`), opened here (`Replication::connect`)
//! or taken from a worker (`replica_follow`), and its two halves once a
//! link runs.
//!
//! ```text
//!   connect:  TCP ─▶ [-Z: TLS handshake (this server's certificate as the client's,
//!             the target's verified against ssl_ca_cert for the host given, and
//!             named by replication_peers when set)]
//!             ─▶ [secret: replica_hello (osmium_protocol::replication_link); on plain
//!             TCP the stream becomes Noise frames]
//!   LinkStream (one thread: the handshake, replica_link / replica_follow and their answers)
//!      └─split─▶ LinkWriter (the sender thread)  ─┐  TLS: one session under a lock,
//!                LinkReader (the ack thread)     ─┘  encrypt / decrypt inside it, the
//!                                                    socket's send / recv outside;
//!                                                    Noise: one direction each, no lock
//! ```
//!
//! The record loop is `osmium_net::records`'s. Only the writer sends on the socket, so records leave in the order
//! they were made; what the reader's side of a TLS session must send (a
//! key update's answer) leaves with the writer's next write.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};

use osmium_net::records::{self, Taken};
use osmium_protocol::replication_link::{Inbound, Outbound, Transport, EXPORTER_LABEL};
use rustls::{ClientConfig, ClientConnection, Connection};
use rustls_pki_types::ServerName;

/// Bytes read from the socket at a time by a TLS reader.
const READ_CHUNK: usize = 16 << 10;
/// Encrypted bytes `LinkWriter::write_later` lets wait before it sends.
const SEND_AT: usize = 64 << 10;

/// One replication connection, used by one thread until `split`.
pub(crate) enum LinkStream {
    /// TCP before its handshake.
    Plain(TcpStream),
    Tls(TcpStream, Box<Connection>),
    /// TCP after its handshake: Noise frames.
    Noise(TcpStream, Box<NoiseHalves>),
}

/// A Noise link's two directions.
pub(crate) struct NoiseHalves {
    pub outbound: Outbound,
    pub inbound: Inbound,
}

impl NoiseHalves {
    pub(crate) fn new(transport: Transport) -> NoiseHalves {
        let (outbound, inbound) = transport.split();
        NoiseHalves { outbound, inbound }
    }
}

/// The TLS exporter value a link handshake in `conn` is bound to.
pub(crate) fn tls_binding(conn: &Connection) -> io::Result<[u8; 32]> {
    conn.export_keying_material([0u8; 32], EXPORTER_LABEL, None)
        .map_err(invalid)
}

/// The name a target's certificate must hold: the host of `HOST:PORT` as
/// given (an IP address is checked against the certificate's IP address
/// entries, a name against its DNS names).
pub(crate) fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = match addr.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or(rest, |(h, _)| h),
        None => addr.rsplit_once(':').map_or(addr, |(h, _)| h),
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ServerName::IpAddress(ip.into()));
    }
    ServerName::try_from(host.to_string()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{host} is not a host name a certificate can hold"),
        )
    })
}

/// TLS on a connected socket (its timeouts set): the handshake, which
/// verifies the target before a byte of data is sent. Err: the socket's
/// error, or InvalidData holding rustls's (`tls_error`).
pub(crate) fn tls_client(
    mut sock: TcpStream,
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
) -> io::Result<LinkStream> {
    let mut conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    Ok(LinkStream::Tls(sock, Box::new(Connection::Client(conn))))
}

/// The TLS error inside an I/O error, if it is one.
pub(crate) fn tls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

fn invalid(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl LinkStream {
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            LinkStream::Plain(s) | LinkStream::Tls(s, _) | LinkStream::Noise(s, _) => s,
        }
    }

    /// The stream after a link handshake: Noise frames on plain TCP; TLS
    /// goes on carrying the link (no second encryption).
    pub(crate) fn after_handshake(self, transport: Transport) -> LinkStream {
        match self {
            LinkStream::Plain(s) => LinkStream::Noise(s, Box::new(NoiseHalves::new(transport))),
            other => other,
        }
    }

    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, LinkStream::Tls(..))
    }

    /// The writer and the reader of a running link (the reader's socket is
    /// a clone of the writer's).
    pub(crate) fn split(self) -> io::Result<(LinkWriter, LinkReader)> {
        let (sock, tls, noise) = match self {
            LinkStream::Plain(s) => (s, None, None),
            LinkStream::Tls(s, conn) => (s, Some(Arc::new(Mutex::new(*conn))), None),
            LinkStream::Noise(s, halves) => (s, None, Some(*halves)),
        };
        let (outbound, inbound) = match noise {
            Some(h) => (Some(h.outbound), Some(h.inbound)),
            None => (None, None),
        };
        let reader = LinkReader {
            sock: sock.try_clone()?,
            tls: tls.clone(),
            noise: inbound,
            raw: Vec::new(),
            pos: 0,
        };
        let writer = LinkWriter {
            sock,
            tls,
            noise: outbound,
            records: Vec::new(),
        };
        Ok((writer, reader))
    }
}

/// Sends every record the session holds (the socket is blocking: one
/// that would block is past its write timeout).
fn send_records<W: Write>(conn: &mut Connection, sock: &mut W) -> io::Result<()> {
    if records::send_records(conn, sock)? {
        Ok(())
    } else {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

impl Read for LinkStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (sock, conn) = match self {
            LinkStream::Plain(s) => return s.read(buf),
            LinkStream::Noise(s, h) => return h.inbound.read_from(s, buf),
            LinkStream::Tls(s, c) => (s, c),
        };
        loop {
            match conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            send_records(conn, sock)?;
            match records::take_records(conn, sock)? {
                // The end (the peer closed): the reader says how, next turn.
                Taken::Records | Taken::End => {}
                // Past the read timeout.
                Taken::Nothing => return Err(io::ErrorKind::WouldBlock.into()),
                Taken::Failed { error, .. } => return Err(invalid(error)),
            }
        }
    }
}

impl Write for LinkStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            LinkStream::Plain(s) => s.write(buf),
            LinkStream::Noise(s, h) => {
                h.outbound.seal(buf)?;
                h.outbound.flush_to(s)?;
                Ok(buf.len())
            }
            LinkStream::Tls(sock, conn) => {
                let n = conn.writer().write(buf)?;
                send_records(conn, sock)?;
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            LinkStream::Plain(s) => s.flush(),
            LinkStream::Noise(s, h) => h.outbound.flush_to(s).map(|_| ()),
            LinkStream::Tls(sock, conn) => send_records(conn, sock),
        }
    }
}

fn lock(tls: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    tls.lock().unwrap_or_else(|e| e.into_inner())
}

/// The sending half of a running link.
pub(crate) struct LinkWriter {
    sock: TcpStream,
    tls: Option<Arc<Mutex<Connection>>>,
    noise: Option<Outbound>,
    /// Records made under the lock, sent after it (`write_later`: once
    /// `SEND_AT` bytes wait).
    records: Vec<u8>,
}

impl LinkWriter {
    /// Encrypts `buf` (Noise frames, or TLS records) behind what already
    /// waits, and sends only once `SEND_AT` bytes wait: the sender's
    /// batch leaves in one socket write however many frames it takes.
    /// Any `write` or `flush` sends everything that waits.
    pub(crate) fn write_later(&mut self, mut buf: &[u8]) -> io::Result<()> {
        if let Some(noise) = &mut self.noise {
            noise.seal(buf)?;
            if noise.pending() >= SEND_AT {
                noise.flush_to(&mut self.sock)?;
            }
            return Ok(());
        }
        let Some(tls) = &self.tls else {
            return self.sock.write_all(buf);
        };
        {
            let mut conn = lock(tls);
            while !buf.is_empty() {
                let n = conn.writer().write(buf)?;
                send_records(&mut conn, &mut self.records)?;
                if n == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                buf = &buf[n..];
            }
        }
        if self.records.len() >= SEND_AT {
            let sent = self.sock.write_all(&self.records);
            self.records.clear();
            sent?;
        }
        Ok(())
    }

    /// Ends the connection (a TLS `close_notify` first, if the socket takes
    /// it); the reader's blocked read returns.
    pub(crate) fn shutdown(&mut self) {
        if let Some(tls) = &self.tls {
            lock(tls).send_close_notify();
            let _ = self.flush();
        }
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

impl Write for LinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(noise) = &mut self.noise {
            noise.seal(buf)?;
            noise.flush_to(&mut self.sock)?;
            return Ok(buf.len());
        }
        let Some(tls) = &self.tls else {
            return self.sock.write(buf);
        };
        let n = {
            let mut conn = lock(tls);
            let n = conn.writer().write(buf)?;
            send_records(&mut conn, &mut self.records)?;
            n
        };
        let sent = self.sock.write_all(&self.records);
        self.records.clear();
        sent.map(|()| n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(noise) = &mut self.noise {
            return noise.flush_to(&mut self.sock).map(|_| ());
        }
        let Some(tls) = &self.tls else {
            return self.sock.flush();
        };
        {
            send_records(&mut lock(tls), &mut self.records)?;
        }
        let sent = self.sock.write_all(&self.records);
        self.records.clear();
        sent
    }
}

/// The receiving half of a running link. Its socket's read timeout
/// surfaces as `WouldBlock` / `TimedOut`, as a plain socket's.
pub(crate) struct LinkReader {
    sock: TcpStream,
    tls: Option<Arc<Mutex<Connection>>>,
    noise: Option<Inbound>,
    /// Bytes from the socket not yet given to the session: `raw[pos..]`.
    raw: Vec<u8>,
    pos: usize,
}

impl LinkReader {
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.sock
    }
}

impl Read for LinkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(noise) = &mut self.noise {
            return noise.read_from(&mut self.sock, buf);
        }
        let Some(tls) = &self.tls else {
            return self.sock.read(buf);
        };
        loop {
            {
                let mut conn = lock(tls);
                match conn.reader().read(buf) {
                    // Ok(0): the peer's close_notify.
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                // The plaintext is read before more records go in, so the
                // session's buffer never fills.
                if self.pos < self.raw.len() {
                    let mut rest = &self.raw[self.pos..];
                    let n = conn.read_tls(&mut rest)?;
                    if n == 0 {
                        return Err(io::ErrorKind::InvalidData.into());
                    }
                    self.pos += n;
                    conn.process_new_packets().map_err(invalid)?;
                    continue;
                }
            }
            self.raw.resize(READ_CHUNK, 0);
            self.pos = 0;
            let n = match self.sock.read(&mut self.raw) {
                Ok(n) => n,
                Err(e) => {
                    self.raw.clear();
                    return Err(e);
                }
            };
            self.raw.truncate(n);
            if n == 0 {
                // The end of the stream: the session's reader says whether
                // it was a clean close.
                let mut conn = lock(tls);
                conn.read_tls(&mut io::empty())?;
                return match conn.reader().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                    r => r,
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_checked_is_the_host_as_given() {
        let ip = |s: &str| match server_name(s).unwrap() {
            ServerName::IpAddress(a) => IpAddr::from(a).to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(ip("127.0.0.1:11211"), "127.0.0.1");
        assert_eq!(ip("[::1]:11211"), "::1");
        match server_name("cache-2.example.net:11211").unwrap() {
            ServerName::DnsName(d) => assert_eq!(d.as_ref(), "cache-2.example.net"),
            other => panic!("{other:?}"),
        }
        assert!(server_name("bad_name!:1").is_err());
    }
}
