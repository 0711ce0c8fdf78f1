//! The load generator's connection: a non-blocking TCP socket, plain or
//! with a rustls client session over it (`load --tls`); and a blocking
//! one for preloads and control requests.
//!
//! The handshake is done blocking before the socket turns non-blocking.
//! The generator's poll is edge-triggered and takes a short read to mean
//! the socket is empty, so a TLS read fills the caller's buffer and
//! returns short only once the socket said `WouldBlock` (or closed).
//! Records the socket did not take wait in rustls; [`Sock::flush_tls`]
//! sends them (the generator calls it on every event).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::{ClientConfig, ClientConnection};

pub(crate) struct Sock {
    pub tcp: TcpStream,
    tls: Option<Box<ClientConnection>>,
}

/// A blocking TCP connection, with the TLS handshake done when `tls`.
fn connect_std(
    addr: SocketAddr,
    tls: Option<&Arc<ClientConfig>>,
) -> Result<(std::net::TcpStream, Option<Box<ClientConnection>>), String> {
    let mut tcp =
        std::net::TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let Some(config) = tls else {
        return Ok((tcp, None));
    };
    let mut conn = ClientConnection::new(config.clone(), super::certs::server_name())
        .map_err(|e| format!("TLS client: {e}"))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)
            .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
    }
    Ok((tcp, Some(Box::new(conn))))
}

/// A blocking stream to `addr`, through TLS when `tls` (handshake done).
pub(crate) fn connect_blocking(
    addr: SocketAddr,
    tls: Option<&Arc<ClientConfig>>,
) -> Result<Box<dyn ReadWrite + Send>, String> {
    let (tcp, conn) = connect_std(addr, tls)?;
    Ok(match conn {
        Some(conn) => Box::new(rustls::StreamOwned::new(*conn, tcp)),
        None => Box::new(tcp),
    })
}

/// A byte stream both ways.
pub(crate) trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

impl Sock {
    /// Connects (blocking, the TLS handshake included), then turns the
    /// socket non-blocking.
    pub(crate) fn connect(
        addr: SocketAddr,
        tls: Option<&Arc<ClientConfig>>,
    ) -> Result<Sock, String> {
        let (tcp, tls) = connect_std(addr, tls)?;
        tcp.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(Sock {
            tcp: TcpStream::from_std(tcp),
            tls,
        })
    }

    /// Sends the TLS records waiting in rustls. Ok(false): the socket is
    /// full (a writable event comes when it has room).
    pub(crate) fn flush_tls(&mut self) -> io::Result<bool> {
        let Some(conn) = &mut self.tls else {
            return Ok(true);
        };
        while conn.wants_write() {
            match conn.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(conn) = &mut self.tls else {
            return self.tcp.read(buf);
        };
        let mut filled = 0;
        loop {
            match conn.reader().read(&mut buf[filled..]) {
                // The server's close_notify.
                Ok(0) => return Ok(filled),
                Ok(n) => {
                    filled += n;
                    if filled == buf.len() {
                        return Ok(filled);
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            match conn.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(filled),
                Ok(_) => {
                    conn.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return if filled > 0 { Ok(filled) } else { Err(e) };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.tls.is_none() {
            return self.tcp.write(buf);
        }
        if !self.flush_tls()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = match &mut self.tls {
            Some(conn) => conn.writer().write(buf)?,
            None => 0,
        };
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // What the socket does not take now goes on a later event.
        self.flush_tls()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.flush_tls()? {
            Ok(())
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
}
