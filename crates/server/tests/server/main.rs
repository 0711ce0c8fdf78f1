//! osmium-server's integration tests, one test binary (the release profile
//! links the dependency tree once, not once per file): each module is one
//! suite, run against the real `osmium` binary over loopback sockets.
//! `common` starts servers and holds `against_both!`; `binary_wire`,
//! `restart_support` and `replication_support` are shared by several suites.

mod authentication;
mod binary_protocol;
mod binary_wire;
mod cold_packing;
mod common;
mod crash_recovery;
mod daemon;
mod dump_filter;
mod dumps;
mod flash;
mod front_door;
mod hotkeys;
mod large_values;
mod memfile_space;
mod memory_bounds;
mod metrics;
mod packed_values;
mod port_retry;
mod replication;
mod replication_catchup;
mod replication_flow;
mod replication_handshake;
mod replication_ring;
mod replication_support;
mod replication_tls;
mod restart;
mod restart_support;
mod rust_memcache_client;
mod service;
mod start_errors;
mod text_protocol;
mod tls_garbage;
mod udp_unix;
mod upgrade;
mod upgrade_flash;
mod upgrade_kill;
mod upgrade_load;
