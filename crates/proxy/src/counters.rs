//! The stats port's counters: per pool and per server, plain integers
//! counted on the event loop thread (by `proxy` and `backend`), no
//! allocation per request; `stats` renders them.

use std::time::{SystemTime, UNIX_EPOCH};

/// A pool's counters (nutcracker's pool stats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Client connections closed by the client (end of stream, `quit`).
    pub client_eof: u64,
    /// Client connections closed on an error (reset, framing error).
    pub client_err: u64,
    /// Client connections open now.
    pub client_connections: u64,
    /// Times a server of the pool was ejected.
    pub server_ejects: u64,
    /// Requests answered with an error because forwarding failed.
    pub forward_error: u64,
    /// Parts made by splitting a multi-key request over several servers.
    pub fragments: u64,
    /// osmium's: configuration reloads applied, and refused, since start
    /// (the proxy's counts, the same in every pool).
    pub reloads: u64,
    /// Configuration reloads refused.
    pub reload_failures: u64,
    /// osmium's, for warm moves: 1 while a move runs, keys and bytes
    /// copied to their new owner, reads served by a key's previous owner.
    pub migrating: u64,
    /// Keys copied to their new owner.
    pub moved_keys: u64,
    /// Bytes of those keys' values.
    pub moved_bytes: u64,
    /// Reads served by a key's previous owner.
    pub warm_reads: u64,
}

/// A server's counters (nutcracker's server stats, less the queues, which
/// are read from the connections when rendering: see [`Queues`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections the server closed (end of stream).
    pub server_eof: u64,
    /// Connections closed on an error (refused, reset, out of step).
    pub server_err: u64,
    /// Connections closed because a request timed out.
    pub server_timedout: u64,
    /// Connections established and open now.
    pub server_connections: u64,
    /// When the server was last ejected, in µs since the epoch (0: never).
    pub server_ejected_at: u64,
    /// Requests sent to the server.
    pub requests: u64,
    /// Bytes of those requests.
    pub request_bytes: u64,
    /// Replies received from the server.
    pub responses: u64,
    /// Bytes of those replies.
    pub response_bytes: u64,
}

/// A server's queues now: requests not yet fully written to it (`in`)
/// and written ones awaiting their reply (`out`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queues {
    /// Requests not yet fully written to the server.
    pub in_queue: u64,
    /// Bytes of those requests.
    pub in_queue_bytes: u64,
    /// Requests written, awaiting their reply.
    pub out_queue: u64,
    /// Bytes of those requests.
    pub out_queue_bytes: u64,
}

/// Microseconds since the epoch now.
pub fn now_usec() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Seconds since the epoch now.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
