//! A TLS session over a non-blocking proxy stream: a rustls server
//! session for a client of a TLS listener ([`TlsStream`]); a server
//! connection's client session is inside its `osmium_net::nb::Conn`. The
//! session and its record loop are `osmium_net`'s
//! (`osmium_net::TlsStream`, read and written by the event loop as a
//! plain stream); the proxy's part is [`PeerLog`]: a handshake or record
//! that fails ends the connection with an `InvalidData` error saying why,
//! logged as a warning for a server connection, at info for a client.

use std::io;

use crate::stream::Stream;

/// A TLS session over a proxy client's stream.
pub type TlsStream = osmium_net::TlsStream<Stream, PeerLog>;

/// Who is at the other end of a TLS stream, for the log.
#[derive(Debug)]
pub struct PeerLog {
    /// The peer, as the log names it.
    pub peer: String,
    /// A server connection (its failures are warnings).
    pub to_server: bool,
}

impl PeerLog {
    /// A client of a TLS listener.
    pub fn client(peer: String) -> PeerLog {
        PeerLog {
            peer,
            to_server: false,
        }
    }

    /// A connection to a server.
    pub fn server(peer: String) -> PeerLog {
        PeerLog {
            peer,
            to_server: true,
        }
    }
}

impl osmium_net::TlsEvents for PeerLog {
    fn failed(&mut self, handshaking: bool, e: rustls::Error) -> io::Error {
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
        io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"))
    }
}
