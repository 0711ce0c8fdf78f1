//! TLS for a pool: on its listener (clients) and to its servers, both
//! optional, set by the pool's `tls:` mapping (`config`), built into
//! rustls configurations over the aws-lc-rs provider at start (`context`),
//! and spoken over the event loop's non-blocking streams (`stream`).

pub mod config;
pub mod context;
pub mod stream;

pub use config::{ListenTls, MinVersion, ServersTls, TlsConfig, VerifyClients};
pub use context::{build, check, PoolTls, ServersContext};
pub use stream::TlsStream;
