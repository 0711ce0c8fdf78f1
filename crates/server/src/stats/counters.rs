//! The request counters behind `stats`.
//!
//! Each worker thread owns a [`ThreadStats`]; only that thread writes it
//! (plain load + store on relaxed atomics, no read-modify-write), and the
//! `stats` command sums all of them. [`GlobalStats`] holds the counters the
//! acceptor and the workers share (connections).

use std::sync::atomic::{AtomicU64, Ordering};

/// A counter written by one thread and read by any.
#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub(crate) fn incr(&self) {
        self.add(1)
    }
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        )
    }
    #[inline]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    pub(crate) fn reset(&self) {
        self.0.store(0, Ordering::Relaxed)
    }
}

macro_rules! thread_counters {
    ($($name:ident),* $(,)?) => {
        /// Per-worker request counters.
        #[derive(Default)]
        pub(crate) struct ThreadStats { $(pub(crate) $name: Counter,)* }

        /// A sum of every worker's counters.
        #[derive(Default, Clone, Copy)]
        pub(crate) struct Totals { $(pub(crate) $name: u64,)* }

        impl ThreadStats {
            pub(crate) fn add_to(&self, t: &mut Totals) { $(t.$name += self.$name.get();)* }
            pub(crate) fn reset(&self) { $(self.$name.reset();)* }
        }
    };
}

thread_counters!(
    get_cmds,
    get_hits,
    get_misses,
    get_expired,
    get_flushed,
    touch_cmds,
    touch_hits,
    touch_misses,
    set_cmds,
    flush_cmds,
    delete_hits,
    delete_misses,
    incr_hits,
    incr_misses,
    decr_hits,
    decr_misses,
    cas_hits,
    cas_misses,
    cas_badval,
    store_too_large,
    store_no_memory,
    bytes_read,
    bytes_written,
    conn_yields,
    meta_cmds,
    auth_cmds,
    auth_errors,
    // Connections closed by `-o idle_timeout`.
    idle_kicks,
);

/// Process-wide counters shared by the acceptor and the workers.
#[derive(Default)]
pub(crate) struct GlobalStats {
    /// Open client connections (what `-c` limits).
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// Most client connections open at once.
    pub connection_structures: AtomicU64,
    /// Listening sockets plus per-worker UDP sockets: memcached counts
    /// them as connections too.
    pub server_conns: AtomicU64,
}

impl GlobalStats {
    /// Records the server's own sockets (once, at start).
    pub(crate) fn set_server_conns(&self, n: u64) {
        self.server_conns.store(n, Ordering::Relaxed);
        self.total_connections.fetch_add(n, Ordering::Relaxed);
    }
}
