//! osmium-proxy: a drop-in for twemproxy (nutcracker) in front of
//! memcached pools. It reads nutcracker's YAML (`config`: the
//! osmium-pool-config crate, re-exported), places keys
//! exactly as nutcracker 0.5.0 or libmemcached do (`hash`, `ring`: the
//! osmium-placement crate, re-exported under these paths), and
//! serves text, meta and binary clients over persistent pipelined server
//! connections (`proxy`, `client`, `request`, `reply`, `backend`,
//! `stream`; a server connection is osmium-net's non-blocking client,
//! `osmium_net::nb::Conn`). When a server fails, its keys go to its replica
//! (the next server of the pool) until it is back and caught up, or are
//! re-spread over the live servers as nutcracker does (`failover:
//! rehash`). nutcracker's stats port is served by the same event loop
//! (`stats`). A pool may speak TLS to its clients and to its servers
//! (`tls`). The configuration is reloaded while serving, on SIGHUP or an
//! authorised `reload` on the stats port (`proxy::reload`, `admin`; guessing
//! the token is slowed and refused by `admin_guard`); a
//! reload that changes a pool's placement moves the keys that changed
//! owner warm, served without a miss while a migration copies them
//! (`moves`); a reload that changes a replicated pool's ring tells its servers their
//! new replication targets, over connections that prove the proxy a
//! replication peer (`peer`). SIGUSR2 upgrades the binary in place, its
//! listeners and clients kept (`upgrade`, over the crate osmium-upgrade).

/// A connection's read buffer (osmium-net's, shared with the server
/// connections' `osmium_net::nb::Conn`).
pub use osmium_net::inbuf;

pub mod admin;
pub mod admin_guard;
pub mod backend;
pub mod client;
pub mod counters;
pub mod log_list;
pub mod moves;
pub mod peer;
pub mod proxy;
pub mod reply;
pub mod request;
pub mod stats;
pub mod stream;
pub mod tls;
pub mod upgrade;

pub use osmium_placement::{hash, ring};
/// nutcracker's YAML configuration (the osmium-pool-config crate).
pub use osmium_pool_config as config;

pub use config::Config;
pub use proxy::Proxy;
