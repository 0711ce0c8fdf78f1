//! Counters and the `stats` replies.
//!
//! Each worker thread owns a [`ThreadStats`]; only that thread writes it
//! (plain load + store on relaxed atomics, no read-modify-write), and the
//! `stats` command sums all of them. Engine-wide figures (items, bytes,
//! evictions) come from the store. Stat names and their order follow
//! memcached 1.6.18 exactly, so tools that parse `stats` keep working;
//! counters that describe memcached internals osmium does not have (slab
//! rebalancing, LRU juggling, response objects) are reported as 0.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use osmium_protocol::encode::stat;
use osmium_store::Store;

use crate::settings::{Settings, VERSION};

/// A counter written by one thread and read by any.
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn incr(&self) {
        self.add(1)
    }
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        )
    }
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed)
    }
}

macro_rules! thread_counters {
    ($($name:ident),* $(,)?) => {
        /// Per-worker request counters.
        #[derive(Default)]
        pub struct ThreadStats { $(pub $name: Counter,)* }

        /// A sum of every worker's counters.
        #[derive(Default, Clone, Copy)]
        pub struct Totals { $(pub $name: u64,)* }

        impl ThreadStats {
            fn add_to(&self, t: &mut Totals) { $(t.$name += self.$name.get();)* }
            pub fn reset(&self) { $(self.$name.reset();)* }
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
);

/// Process-wide counters shared by the acceptor and the workers.
#[derive(Default)]
pub struct GlobalStats {
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
    pub fn set_server_conns(&self, n: u64) {
        self.server_conns.store(n, Ordering::Relaxed);
        self.total_connections.fetch_add(n, Ordering::Relaxed);
    }
}

/// Everything `stats` needs.
pub struct StatsContext {
    pub settings: Settings,
    pub store: Arc<Store>,
    pub threads: Vec<Arc<ThreadStats>>,
    pub global: Arc<GlobalStats>,
    pub verbosity: std::sync::atomic::AtomicU32,
    pub accepting: std::sync::atomic::AtomicBool,
    pub prefix: crate::prefix_stats::PrefixStats,
}

fn rusage() -> (String, String) {
    // SAFETY: getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let f = |tv: libc::timeval| format!("{}.{:06}", tv.tv_sec, tv.tv_usec);
    (f(ru.ru_utime), f(ru.ru_stime))
}

impl StatsContext {
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in &self.threads {
            s.add_to(&mut t);
        }
        t
    }

    pub fn reset(&self) {
        for s in &self.threads {
            s.reset();
        }
        self.global.total_connections.store(0, Ordering::Relaxed);
        self.global.rejected_connections.store(0, Ordering::Relaxed);
        self.store.reset_stats();
        self.prefix.clear();
    }

    /// `stats` (no group): memcached's general stats, in its order.
    pub fn general(&self, out: &mut Vec<u8>) {
        let t = self.totals();
        let e = self.store.stats();
        let g = &self.global;
        let clock = self.store.clock();
        let (ru_user, ru_sys) = rusage();
        let uptime = clock.now().saturating_sub(62);
        stat(out, "pid", std::process::id());
        stat(out, "uptime", uptime);
        stat(out, "time", clock.unix_now());
        stat(out, "version", VERSION);
        stat(out, "libevent", "osmium-mio");
        stat(out, "pointer_size", 64);
        stat(out, "rusage_user", ru_user);
        stat(out, "rusage_system", ru_sys);
        stat(out, "max_connections", self.settings.max_connections);
        let server_conns = g.server_conns.load(Ordering::Relaxed);
        // memcached reports its connection count less one.
        stat(
            out,
            "curr_connections",
            (g.curr_connections.load(Ordering::Relaxed) + server_conns).saturating_sub(1),
        );
        stat(
            out,
            "total_connections",
            g.total_connections.load(Ordering::Relaxed),
        );
        stat(
            out,
            "rejected_connections",
            g.rejected_connections.load(Ordering::Relaxed),
        );
        stat(
            out,
            "connection_structures",
            g.connection_structures.load(Ordering::Relaxed) + server_conns,
        );
        stat(out, "response_obj_oom", 0);
        stat(out, "response_obj_count", 0);
        stat(out, "response_obj_bytes", 0);
        stat(out, "read_buf_count", 0);
        stat(out, "read_buf_bytes", 0);
        stat(out, "read_buf_bytes_free", 0);
        stat(out, "read_buf_oom", 0);
        stat(out, "reserved_fds", 20);
        stat(out, "cmd_get", t.get_cmds);
        stat(out, "cmd_set", t.set_cmds);
        stat(out, "cmd_flush", t.flush_cmds);
        stat(out, "cmd_touch", t.touch_cmds);
        stat(out, "cmd_meta", t.meta_cmds);
        stat(out, "get_hits", t.get_hits);
        stat(out, "get_misses", t.get_misses);
        stat(out, "get_expired", t.get_expired);
        stat(out, "get_flushed", t.get_flushed);
        stat(out, "delete_misses", t.delete_misses);
        stat(out, "delete_hits", t.delete_hits);
        stat(out, "incr_misses", t.incr_misses);
        stat(out, "incr_hits", t.incr_hits);
        stat(out, "decr_misses", t.decr_misses);
        stat(out, "decr_hits", t.decr_hits);
        stat(out, "cas_misses", t.cas_misses);
        stat(out, "cas_hits", t.cas_hits);
        stat(out, "cas_badval", t.cas_badval);
        stat(out, "touch_hits", t.touch_hits);
        stat(out, "touch_misses", t.touch_misses);
        stat(out, "store_too_large", t.store_too_large);
        stat(out, "store_no_memory", t.store_no_memory);
        stat(out, "auth_cmds", t.auth_cmds);
        stat(out, "auth_errors", t.auth_errors);
        stat(out, "bytes_read", t.bytes_read);
        stat(out, "bytes_written", t.bytes_written);
        stat(out, "limit_maxbytes", e.limit_maxbytes);
        stat(
            out,
            "accepting_conns",
            u8::from(self.accepting.load(Ordering::Relaxed)),
        );
        stat(out, "listen_disabled_num", 0);
        stat(out, "time_in_listen_disabled_us", 0);
        stat(out, "threads", self.settings.threads);
        stat(out, "conn_yields", t.conn_yields);
        stat(out, "hash_power_level", hash_power(e.index_bytes));
        stat(out, "hash_bytes", e.index_bytes);
        stat(out, "hash_is_expanding", 0);
        for name in [
            "slab_reassign_rescues",
            "slab_reassign_chunk_rescues",
            "slab_reassign_evictions_nomem",
            "slab_reassign_inline_reclaim",
            "slab_reassign_busy_items",
            "slab_reassign_busy_deletes",
            "slab_reassign_running",
            "slabs_moved",
            "lru_crawler_running",
        ] {
            stat(out, name, 0);
        }
        stat(out, "lru_crawler_starts", 0);
        stat(out, "lru_maintainer_juggles", 0);
        for name in [
            "malloc_fails",
            "log_worker_dropped",
            "log_worker_written",
            "log_watcher_skipped",
            "log_watcher_sent",
            "log_watchers",
            "unexpected_napi_ids",
            "round_robin_fallback",
        ] {
            stat(out, name, 0);
        }
        stat(out, "bytes", e.bytes);
        stat(out, "curr_items", e.curr_items);
        stat(out, "total_items", e.total_items);
        stat(out, "slab_global_page_pool", 0);
        stat(out, "expired_unfetched", e.expired_unfetched);
        stat(out, "evicted_unfetched", e.evicted_unfetched);
        stat(out, "evicted_active", 0);
        stat(out, "evictions", e.evictions);
        stat(out, "reclaimed", e.reclaimed);
        for name in [
            "crawler_reclaimed",
            "crawler_items_checked",
            "lrutail_reflocked",
            "moves_to_cold",
            "moves_to_warm",
            "moves_within_lru",
            "direct_reclaims",
            "lru_bumps_dropped",
        ] {
            stat(out, name, 0);
        }
    }

    /// `stats settings`, in memcached's order.
    pub fn settings(&self, out: &mut Vec<u8>) {
        let s = &self.settings;
        let yn = |b: bool| if b { "yes" } else { "no" };
        let e = self.store.stats();
        stat(out, "maxbytes", e.limit_maxbytes);
        stat(out, "maxconns", s.max_connections);
        stat(out, "tcpport", s.port);
        stat(out, "udpport", s.udp_port);
        let inter = s
            .listen
            .iter()
            .map(|l| l.host.as_str())
            .collect::<Vec<_>>()
            .join(",");
        stat(out, "inter", inter);
        stat(out, "verbosity", self.verbosity.load(Ordering::Relaxed));
        stat(out, "oldest", 0);
        stat(out, "evictions", if s.evictions { "on" } else { "off" });
        stat(
            out,
            "domain_socket",
            s.unix_socket.as_deref().unwrap_or("NULL"),
        );
        stat(out, "umask", format!("{:o}", s.unix_mask));
        stat(out, "shutdown_command", yn(s.shutdown_enabled));
        stat(out, "growth_factor", "1.25");
        stat(out, "chunk_size", 48);
        stat(out, "num_threads", s.threads);
        stat(out, "num_threads_per_udp", s.threads_per_udp);
        stat(out, "stat_key_prefix", char::from(self.prefix.delimiter()));
        stat(out, "detail_enabled", yn(self.prefix.enabled()));
        stat(out, "reqs_per_event", s.reqs_per_event);
        stat(out, "cas_enabled", yn(s.use_cas));
        stat(out, "tcp_backlog", s.backlog);
        stat(out, "binding_protocol", s.binding_protocol);
        stat(out, "auth_enabled_sasl", yn(s.sasl));
        // memcached prints the authfile's path here when -Y is on.
        stat(
            out,
            "auth_enabled_ascii",
            s.auth_file.as_deref().unwrap_or("no"),
        );
        stat(out, "item_size_max", s.item_size_max);
        stat(out, "maxconns_fast", yn(s.maxconns_fast));
        stat(out, "hashpower_init", s.hashpower_init);
        stat(out, "slab_reassign", "no");
        stat(out, "slab_automove", 0);
        stat(out, "slab_automove_ratio", "0.80");
        stat(out, "slab_automove_window", 30);
        stat(out, "slab_chunk_max", e.segment_size);
        stat(out, "lru_crawler", yn(s.lru_crawler));
        stat(out, "lru_crawler_sleep", 100);
        stat(out, "lru_crawler_tocrawl", 0);
        stat(out, "tail_repair_time", 0);
        stat(out, "flush_enabled", yn(s.flush_enabled));
        stat(out, "dump_enabled", "yes");
        stat(out, "hash_algorithm", "xxh3");
        stat(out, "lru_maintainer_thread", "no");
        stat(out, "lru_segmented", "no");
        stat(out, "hot_lru_pct", 20);
        stat(out, "warm_lru_pct", 40);
        stat(out, "hot_max_factor", "0.20");
        stat(out, "warm_max_factor", "2.00");
        stat(out, "temp_lru", "no");
        stat(out, "temporary_ttl", 61);
        stat(out, "idle_timeout", s.idle_timeout);
        stat(out, "watcher_logbuf_size", 262144);
        stat(out, "worker_logbuf_size", 65536);
        stat(out, "read_buf_mem_limit", 0);
        stat(out, "track_sizes", "no");
        stat(out, "inline_ascii_response", "no");
        stat(out, "ext_item_size", 512);
        stat(out, "ext_item_age", 4294967295u32);
        stat(out, "ext_low_ttl", 0);
        stat(out, "ext_recache_rate", 2000);
        stat(out, "ext_wbuf_size", 4194304);
        stat(out, "ext_compact_under", 0);
        stat(out, "ext_drop_under", 0);
        stat(out, "ext_max_sleep", 1000000);
        stat(out, "ext_max_frag", "0.80");
        stat(out, "slab_automove_freeratio", "0.010");
        stat(out, "ext_drop_unread", "no");
        stat(out, "ssl_enabled", "no");
        stat(out, "ssl_chain_cert", "(null)");
        stat(out, "ssl_key", "(null)");
        stat(out, "ssl_verify_mode", 0);
        stat(out, "ssl_keyformat", 1);
        stat(out, "ssl_ciphers", "NULL");
        stat(out, "ssl_ca_cert", "NULL");
        stat(out, "ssl_wbuf_size", 16384);
        stat(out, "ssl_session_cache", "no");
        stat(out, "ssl_kernel_tls", "no");
        stat(out, "ssl_min_version", "tlsv1.2");
        stat(out, "num_napi_ids", "(null)");
        stat(out, "memory_file", "(null)");
    }

    /// `stats items`: osmium has one item class; reported as class 1 when
    /// it holds items, as memcached reports only non-empty classes.
    pub fn items(&self, out: &mut Vec<u8>) {
        let e = self.store.stats();
        if e.curr_items == 0 {
            return;
        }
        let n = |out: &mut Vec<u8>, name: &str, v: u64| stat(out, &format!("items:1:{name}"), v);
        n(out, "number", e.curr_items);
        for name in [
            "number_hot",
            "number_warm",
            "number_cold",
            "age_hot",
            "age_warm",
            "age",
        ] {
            n(out, name, 0);
        }
        n(out, "mem_requested", e.bytes);
        n(out, "evicted", e.evictions);
        for name in [
            "evicted_nonzero",
            "evicted_time",
            "outofmemory",
            "tailrepairs",
        ] {
            n(out, name, 0);
        }
        n(out, "reclaimed", e.reclaimed);
        n(out, "expired_unfetched", e.expired_unfetched);
        n(out, "evicted_unfetched", e.evicted_unfetched);
        for name in [
            "evicted_active",
            "crawler_reclaimed",
            "crawler_items_checked",
            "lrutail_reflocked",
            "moves_to_cold",
            "moves_to_warm",
            "moves_within_lru",
            "direct_reclaims",
            "hits_to_hot",
            "hits_to_warm",
            "hits_to_cold",
            "hits_to_temp",
        ] {
            n(out, name, 0);
        }
    }

    /// `stats slabs`: the segment arena reported as one slab class.
    pub fn slabs(&self, out: &mut Vec<u8>) {
        let e = self.store.stats();
        let t = self.totals();
        if e.segments_allocated > 0 {
            let n = |out: &mut Vec<u8>, name: &str, v: u64| stat(out, &format!("1:{name}"), v);
            n(out, "chunk_size", e.segment_size);
            n(out, "chunks_per_page", 1);
            n(out, "total_pages", e.segments_allocated);
            n(out, "total_chunks", e.segments_allocated);
            n(out, "used_chunks", e.segments_allocated);
            n(out, "free_chunks", 0);
            n(out, "free_chunks_end", 0);
            n(out, "get_hits", t.get_hits);
            n(out, "cmd_set", t.set_cmds);
            n(out, "delete_hits", t.delete_hits);
            n(out, "incr_hits", t.incr_hits);
            n(out, "decr_hits", t.decr_hits);
            n(out, "cas_hits", t.cas_hits);
            n(out, "cas_badval", t.cas_badval);
            n(out, "touch_hits", t.touch_hits);
        }
        stat(out, "active_slabs", u64::from(e.segments_allocated > 0));
        stat(out, "total_malloced", e.segments_allocated * e.segment_size);
    }
}

fn hash_power(index_bytes: u64) -> u32 {
    let slots = (index_bytes / 8).max(1);
    63 - slots.leading_zeros()
}
