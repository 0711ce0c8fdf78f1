//! The load generator's connection: a non-blocking TCP socket, plain or
//! with a rustls client session over it (`load --tls`); and a blocking
//! one for preloads and control requests (`osmium_net::Client`).
//!
//! The handshake is done blocking before the socket turns non-blocking.
//! The generator's poll is edge-triggered and takes a short read to mean
//! the socket is empty, so a TLS read fills the caller's buffer and
//! returns short only once the socket said `WouldBlock` (or closed).
//! Records the socket did not take wait in rustls; [`Sock::flush_tls`]
//! sends them (the generator calls it on every event). The TLS session
//! over the non-blocking socket is `osmium_net::TlsStream`.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::{ClientConfig, ClientConnection};

pub(crate) enum Sock {
    Plain(TcpStream),
    /// The session and its record loop are `osmium_net`'s.
    Tls(Box<osmium_net::TlsStream<TcpStream>>),
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

/// How long a blocking connection's connect, read or write may take.
const BLOCKING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// A blocking client of `addr`, through TLS when `tls` (handshake done).
pub(crate) fn connect_blocking(
    addr: SocketAddr,
    tls: Option<&Arc<ClientConfig>>,
) -> Result<osmium_net::Client, String> {
    match tls {
        Some(config) => osmium_net::Client::connect_tls(
            addr,
            config.clone(),
            super::certs::server_name(),
            BLOCKING_TIMEOUT,
        )
        .map_err(|e| format!("TLS with {addr}: {e}")),
        None => osmium_net::Client::connect(&addr.to_string(), BLOCKING_TIMEOUT)
            .map_err(|e| format!("connecting to {addr}: {e}")),
    }
}

impl Sock {
    /// Connects (blocking, the TLS handshake included), then turns the
    /// socket non-blocking.
    pub(crate) fn connect(
        addr: SocketAddr,
        tls: Option<&Arc<ClientConfig>>,
    ) -> Result<Sock, String> {
        let (tcp, tls) = connect_std(addr, tls)?;
        tcp.set_nonblocking(true).map_err(|e| e.to_string())?;
        let tcp = TcpStream::from_std(tcp);
        Ok(match tls {
            Some(conn) => Sock::Tls(Box::new(osmium_net::TlsStream::established(
                tcp,
                (*conn).into(),
                (),
            ))),
            None => Sock::Plain(tcp),
        })
    }

    /// The TCP socket (to register with the poll).
    pub(crate) fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Sock::Plain(s) => s,
            Sock::Tls(s) => &mut s.sock,
        }
    }

    /// Sends the TLS records waiting in rustls. Ok(false): the socket is
    /// full (a writable event comes when it has room).
    pub(crate) fn flush_tls(&mut self) -> io::Result<bool> {
        match self {
            Sock::Plain(_) => Ok(true),
            Sock::Tls(s) => s.send_records(),
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.read(buf),
            Sock::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.write(buf),
            Sock::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.flush_tls()? {
            Ok(())
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
}
