//! osmium's network layer, shared by the server (its listeners and
//! replication links), the proxy and the benchmark client:
//!
//! * [`records`]: the rustls record loop, once: records out to a socket
//!   until it is full, records in from a socket and decrypted;
//! * [`session`]: [`TlsStream`], a rustls session (server or client side)
//!   over any non-blocking stream, read and written as a plain stream,
//!   what it reports on a failed handshake or record left to its user
//!   ([`TlsEvents`]);
//! * [`load`]: certificates, keys and CA roots read from files, the TLS
//!   versions, and the client-certificate verifiers memcached's `-Z`
//!   options name (`ssl_verify_mode`, `ssl_ca_cert`);
//! * [`ciphers`]: an OpenSSL cipher list (`ssl_ciphers`) as a rustls
//!   provider;
//! * [`reload`]: a configuration swapped whole when certificates are
//!   loaded again, and how long ago that was;
//! * [`client`]: a blocking memcached-protocol client (TCP, unix, TLS)
//!   whose replies `osmium_protocol::client` frames and parses;
//! * [`nb`]: its non-blocking counterpart for a `mio` event loop
//!   ([`nb::Conn`]: requests queued and flushed, replies framed in order
//!   off the input), the proxy's server connections and the benchmark's
//!   load generator;
//! * [`inbuf`]: a connection's read buffer, read into in place.

pub mod ciphers;
pub mod client;
pub mod inbuf;
pub mod load;
pub mod nb;
pub mod records;
pub mod reload;
pub mod session;

pub use client::Client;
pub use inbuf::InBuf;
pub use session::{TlsEvents, TlsStream};
