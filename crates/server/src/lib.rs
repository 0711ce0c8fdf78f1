//! osmium-server: a memcached-compatible cache server, as a library. The
//! `osmium` binary (`src/main.rs`) is its [`cli`]; a program, a test
//! above all, can run servers inside itself ([`Server::start`]); the fuzz
//! targets reach the TLS layer through [`fuzzing`]. Everything else is
//! private to the crate.
//!
//! ```text
//!   transport ──▶ session ──▶ parse ──▶ execute ──▶ compose
//!   (TCP, unix,   (framing,   (osmium-   (one       (text, meta,
//!    UDP)          buffers)    protocol)  executor)  binary replies)
//!                                           │
//!                                           ▼
//!                                     osmium-store
//! ```
//!
//! A start (`launch`) checks what must be refused before anything opens
//! (`-c` above the open-file limit, root without `-u`, authentication
//! files, TLS certificates, the replication secret, the metrics token),
//! then `server` binds, builds the store and starts the threads, and its
//! acceptor runs until a signal, `shutdown` or [`RunningServer::stop`]
//! stops it. See `docs/ARCHITECTURE.md` for where each stage lives.

mod auth;
mod buffers;
pub mod cli;
mod compose;
mod conns;
mod context;
mod daemon;
mod embedded;
mod execute;
pub mod fuzzing;
mod hotkeys;
mod launch;
mod log;
mod logger;
mod metrics;
mod process;
mod reload;
mod replication;
mod server;
mod service;
mod session;
mod settings;
mod stats;
mod tls_context;
mod transport;
mod upgrade;

pub use embedded::{Config, RunningServer, Server};
