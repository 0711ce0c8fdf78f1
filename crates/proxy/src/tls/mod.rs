//! TLS for a pool: on its listener (clients) and to its servers, both
//! optional, set by the pool's `tls:` mapping (`config`), built into
//! rustls configurations over the aws-lc-rs provider at start (`context`),
//! and spoken over the event loop's non-blocking streams (`stream`); the
//! loaders and the session are `osmium_net`'s.

/// A pool's `tls:` mapping (osmium-pool-config's `tls`).
pub use osmium_pool_config::tls as config;
pub mod context;
pub mod stream;

pub use config::{ListenTls, MinVersion, ServersTls, TlsConfig, VerifyClients};
pub use context::{build, check, PoolTls, ServersContext};
pub use stream::{PeerLog, TlsStream};
