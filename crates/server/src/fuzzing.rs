//! What the fuzz targets reach inside the server, and nothing else uses:
//! the TLS layer of a listener (`fuzz/fuzz_targets/tls_records.rs`), the
//! rustls configurations `-Z` and `-o ssl_*` make and the connection a
//! worker reads records through, with the counters they keep. Thin
//! wrappers over the server's own types (`tls_context::TlsContext`,
//! `transport::tls::TlsStream`), so that those stay private.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::embedded::Config;
use crate::settings::tls::ListenerTls;
use crate::tls_context::TlsContext;
use crate::transport::tls::TlsStream;

/// The TLS configurations and counters a server with `-Z` builds at start.
pub struct TlsServer {
    context: Arc<TlsContext>,
}

/// The kind of TLS listener a connection came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsListener {
    /// `-Z`: client certificates as `ssl_verify_mode` says.
    Default,
    /// `btls:`: client certificates never asked for.
    NoPeer,
    /// `mtls:`: a client certificate, verified, required.
    Peer,
}

impl TlsServer {
    /// Builds what `config`'s `-Z` and `-o ssl_*` options make (the
    /// certificates read as the server reads them at start). Err: the
    /// server's message, or `-Z` not given.
    pub fn new(config: &Config) -> Result<TlsServer, String> {
        let settings = &config.0;
        if !settings.tls.enabled {
            return Err("no -Z: no TLS".into());
        }
        let context = TlsContext::new(&settings.tls, settings.verbose > 0)?;
        Ok(TlsServer {
            context: Arc::new(context),
        })
    }

    /// The failures counted so far: `ssl_handshake_errors` plus
    /// `ssl_proto_errors` (`stats`).
    pub fn errors(&self) -> u64 {
        let c = &self.context;
        c.handshake_errors.load(Ordering::Relaxed) + c.proto_errors.load(Ordering::Relaxed)
    }

    /// The server's side of a connection accepted on a `listener` kind of
    /// listener, over `socket` (non-blocking), its handshake not begun.
    pub fn accept(
        &self,
        socket: std::net::TcpStream,
        listener: TlsListener,
    ) -> io::Result<TlsConnection> {
        let mode = match listener {
            TlsListener::Default => ListenerTls::Default,
            TlsListener::NoPeer => ListenerTls::NoPeer,
            TlsListener::Peer => ListenerTls::Peer,
        };
        let socket = mio::net::TcpStream::from_std(socket);
        TlsStream::accept(socket, &self.context, mode).map(TlsConnection)
    }
}

/// A server connection's TLS layer, as a worker reads through it.
pub struct TlsConnection(TlsStream);

impl io::Read for TlsConnection {
    /// As a worker reads after a readable event: records until there is
    /// plaintext (Ok(n)), the socket is empty (`WouldBlock`) or the
    /// client's side ended (Ok(0)); a TLS failure is `InvalidData`,
    /// counted once in [`TlsServer::errors`].
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl TlsConnection {
    /// Says goodbye (`close_notify`) if the handshake ended and the socket
    /// takes it now, as a worker does when it closes a connection.
    pub fn close(&mut self) {
        self.0.close();
    }
}
