//! osmium-proxy's integration tests, one test binary (the release profile
//! links the dependency tree once, not once per file): each module is one
//! suite, run against the real `osmium-proxy` binary over loopback sockets;
//! `common` starts backends, proxies and nutcracker.

mod common;
mod logging;
mod migrate;
mod move_model;
mod nutcracker_conf;
mod peer;
mod placement;
mod port_retry;
mod reload;
mod serving;
mod stats;
mod tls;
mod upgrade;
mod warm_moves;
