//! The load generator's connections: a non-blocking one
//! (`osmium_net::nb::Conn`), plain TCP or a rustls client session over it
//! (`load --tls`), and a blocking one for preloads and control requests
//! (`osmium_net::Client`).
//!
//! The handshake is done blocking before the socket turns non-blocking;
//! records the socket did not take wait in rustls and go out with the
//! connection's next flush (the generator flushes on every event).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::{ClientConfig, ClientConnection};

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

/// A connection of the generator to `addr` (blocking connect, the TLS
/// handshake included), then non-blocking.
pub(crate) fn connect_nb(
    addr: SocketAddr,
    tls: Option<&Arc<ClientConfig>>,
) -> Result<osmium_net::nb::Conn, String> {
    let (tcp, tls) = connect_std(addr, tls)?;
    let socket = osmium_net::nb::Socket::from_std_tcp(tcp).map_err(|e| e.to_string())?;
    Ok(match tls {
        Some(conn) => osmium_net::nb::Conn::tls(osmium_net::TlsStream::established(
            socket,
            (*conn).into(),
            (),
        )),
        None => osmium_net::nb::Conn::plain(socket),
    })
}
