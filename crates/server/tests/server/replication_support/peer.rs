//! A peer's side of the link handshake, as another server or
//! osmium-proxy runs it (`osmium_protocol::replication_link`, the code
//! both use): on plain TCP the client then speaks Noise frames, over TLS
//! the handshake is bound to the session and TLS carries the rest.

use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use osmium_protocol::replication_link::{
    connect_handshake, HandshakeError, NoiseStream, Role, Secret, EXPORTER_LABEL,
};

use super::{tls, Client, Wire};

/// The secret of `content` (a strong one).
pub(crate) fn secret(content: &[u8]) -> Secret {
    Secret::new(content).expect("a strong test secret")
}

/// A connection to `port` that ran the handshake in `role` with
/// `content`: a client over Noise frames, or the handshake's error.
pub(crate) fn hello(port: u16, role: Role, content: &[u8]) -> Result<Client, HandshakeError> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    let t = connect_handshake(&mut s, &secret(content), role, None)?;
    Ok(Client::new(Wire::Noise(Arc::new(Mutex::new(
        NoiseStream::new(s, t),
    )))))
}

/// The handshake inside a TLS connection `config` made to `port`, bound
/// to its session (`bind`: else to no session, as a relay from another
/// connection would be).
pub(crate) fn hello_tls(
    port: u16,
    config: Arc<rustls::ClientConfig>,
    role: Role,
    content: &[u8],
    bind: bool,
) -> Result<Client, HandshakeError> {
    let mut conn = tls::handshake(port, config).expect("TLS handshake");
    let binding = conn
        .conn
        .export_keying_material([0u8; 32], EXPORTER_LABEL, None)
        .unwrap();
    let binding = bind.then_some(&binding[..]);
    connect_handshake(&mut conn, &secret(content), role, binding)?;
    Ok(Client::new(Wire::Tls(Arc::new(Mutex::new(conn)))))
}
