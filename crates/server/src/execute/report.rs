//! The `stats` replies: memcached's general stats, `stats settings`,
//! `stats items` and `stats slabs`, with its names in its order, so tools
//! that parse them keep working. Counters of memcached internals osmium
//! does not have (slab rebalancing, LRU juggling) are reported as 0;
//! engine-wide figures come from the store, request counters from every
//! worker's `ThreadStats`, buffer figures from the workers' pools. Also
//! osmium's own `stats upgrade` (the binary upgrades and why the last one
//! failed).

use std::sync::atomic::Ordering;

use crate::compose::stat_rows::{stat, StatRows};

use crate::context::Shared;
use crate::settings::{OSMIUM_VERSION, VERSION};

fn rusage() -> (String, String) {
    // SAFETY: rusage is plain data (zeroed is valid) and getrusage fills
    // the struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let f = |tv: libc::timeval| format!("{}.{:06}", tv.tv_sec, tv.tv_usec);
    (f(ru.ru_utime), f(ru.ru_stime))
}

/// `stats reset`.
pub(crate) fn reset(sh: &Shared) {
    for s in &sh.threads {
        s.reset();
    }
    sh.global.total_connections.store(0, Ordering::Relaxed);
    sh.global.rejected_connections.store(0, Ordering::Relaxed);
    if let Some(tls) = &sh.tls {
        for c in [&tls.handshake_errors, &tls.proto_errors, &tls.new_sessions] {
            c.store(0, Ordering::Relaxed);
        }
    }
    sh.store.reset_stats();
    sh.prefix.clear();
}

/// `stats upgrade` (osmium's own): the binary upgrades `stats` counts, the
/// first start (unix seconds), and once an upgrade failed in this image
/// the time and reason of the last failure (`stats::upgrades`).
pub(crate) fn upgrade(out: &mut StatRows) {
    let history = crate::stats::upgrades::history();
    stat(out, "upgrades", history.upgrades);
    stat(out, "upgrade_failures", history.failures);
    stat(out, "first_start", history.first_start);
    if let Some((at, why)) = crate::stats::upgrades::last_failure() {
        stat(out, "last_failure_time", at);
        stat(out, "last_failure", why);
    }
}

/// `stats` (no group): memcached's general stats, in its order.
pub(crate) fn general(sh: &Shared, out: &mut StatRows) {
    let t = sh.totals();
    let e = sh.store.stats();
    let g = &sh.global;
    let clock = sh.store.clock();
    let (ru_user, ru_sys) = rusage();
    let uptime = clock.now().saturating_sub(62);
    stat(out, "pid", std::process::id());
    stat(out, "uptime", uptime);
    stat(out, "time", clock.unix_now());
    stat(out, "version", VERSION);
    stat(out, "osmium_version", OSMIUM_VERSION);
    // Binary upgrades (SIGUSR2) this process went through, done and
    // failed, since its first start.
    let history = crate::stats::upgrades::history();
    stat(out, "upgrades", history.upgrades);
    stat(out, "upgrade_failures", history.failures);
    stat(out, "libevent", "osmium-mio");
    stat(out, "pointer_size", 64);
    stat(out, "rusage_user", ru_user);
    stat(out, "rusage_system", ru_sys);
    stat(out, "max_connections", sh.settings.max_connections);
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
    // Memory held by replies not yet sent (memcached: its response
    // objects').
    let held: usize = sh
        .output_held
        .iter()
        .map(|h| h.load(Ordering::Relaxed))
        .sum();
    stat(out, "response_obj_bytes", held);
    let mut pools = crate::buffers::PoolStats::default();
    for p in &sh.pools {
        let p = p.get();
        pools.count += p.count;
        pools.bytes += p.bytes;
        pools.bytes_free += p.bytes_free;
        pools.oom += p.oom;
    }
    stat(out, "read_buf_count", pools.count);
    stat(out, "read_buf_bytes", pools.bytes);
    stat(out, "read_buf_bytes_free", pools.bytes_free);
    stat(out, "read_buf_oom", pools.oom);
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
    if sh.settings.idle_timeout > 0 {
        stat(out, "idle_kicks", t.idle_kicks);
    }
    stat(out, "bytes_read", t.bytes_read);
    stat(out, "bytes_written", t.bytes_written);
    stat(out, "limit_maxbytes", e.limit_maxbytes);
    stat(
        out,
        "accepting_conns",
        u8::from(sh.accepting.load(Ordering::Relaxed)),
    );
    stat(out, "listen_disabled_num", 0);
    stat(out, "time_in_listen_disabled_us", 0);
    stat(out, "threads", sh.settings.threads);
    stat(out, "conn_yields", t.conn_yields);
    stat(out, "hash_power_level", hash_power(e.index_bytes));
    stat(out, "hash_bytes", e.index_bytes);
    stat(out, "hash_is_expanding", 0);
    for name in [
        "slab_reassign_rescues",
        "slab_reassign_chunk_rescues",
        "slab_reassign_inline_reclaim",
        "slab_reassign_busy_items",
        "slab_reassign_busy_deletes",
        "slab_reassign_busy_nomem",
    ] {
        stat(out, name, 0);
    }
    stat(out, "slab_reassign_last_busy_status", "none");
    for name in [
        "slab_reassign_running",
        "slabs_moved",
        "lru_crawler_running",
    ] {
        stat(out, name, 0);
    }
    stat(out, "lru_crawler_starts", 0);
    stat(out, "lru_maintainer_juggles", 0);
    stat(out, "malloc_fails", 0);
    let log = &sh.logger.stats;
    stat(
        out,
        "log_worker_dropped",
        log.worker_dropped.load(Ordering::Relaxed),
    );
    stat(
        out,
        "log_worker_written",
        log.worker_written.load(Ordering::Relaxed),
    );
    stat(
        out,
        "log_watcher_skipped",
        log.watcher_skipped.load(Ordering::Relaxed),
    );
    stat(
        out,
        "log_watcher_sent",
        log.watcher_sent.load(Ordering::Relaxed),
    );
    stat(out, "log_watchers", sh.logger.watcher_count());
    if let Some(tls) = &sh.tls {
        if tls.session_cache() {
            stat(
                out,
                "ssl_new_sessions",
                tls.new_sessions.load(Ordering::Relaxed),
            );
        }
        stat(
            out,
            "ssl_handshake_errors",
            tls.handshake_errors.load(Ordering::Relaxed),
        );
        stat(
            out,
            "ssl_proto_errors",
            tls.proto_errors.load(Ordering::Relaxed),
        );
        stat(out, "time_since_server_cert_refresh", tls.since_refresh());
    }
    stat(out, "unexpected_napi_ids", 0);
    stat(out, "round_robin_fallback", 0);
    stat(out, "bytes", e.bytes);
    stat(out, "curr_items", e.curr_items);
    stat(out, "total_items", e.total_items);
    stat(out, "slab_global_page_pool", 0);
    stat(out, "expired_unfetched", e.expired_unfetched);
    stat(out, "evicted_unfetched", e.evicted_unfetched);
    stat(out, "evicted_active", e.evicted_active);
    stat(out, "evictions", e.evictions);
    stat(out, "reclaimed", e.reclaimed);
    // osmium's segments: live and dead bytes, compaction, and evictions
    // of live items apart from reclaims of dead ones.
    stat(out, "live_bytes", e.live_bytes);
    stat(out, "dead_bytes", e.dead_bytes);
    stat(out, "segments_free", e.segments_free);
    stat(out, "segments_compacted", e.segments_compacted);
    stat(out, "compact_items_moved", e.compact_items_moved);
    stat(out, "compact_bytes_copied", e.compact_bytes_copied);
    stat(out, "compact_writer_runs", e.compact_writer_runs);
    stat(out, "compact_aborted", e.compact_aborted);
    stat(out, "segments_evicted", e.segments_evicted);
    stat(out, "evicted_live_bytes", e.evicted_live_bytes);
    stat(out, "reclaimed_dead_bytes", e.reclaimed_dead_bytes);
    // Packed values (`-o compression`) that did not decode: dropped, and
    // answered as misses.
    stat(out, "compress_errors", e.compress_errors);
    // The pack pass (`-o compression=cold`), and the packed items linked
    // now (their values' client bytes and the bytes they take).
    stat(out, "pack_segments", e.pack_segments);
    stat(out, "pack_segments_not_worth", e.pack_segments_not_worth);
    stat(out, "pack_items", e.pack_items);
    stat(out, "pack_rejected", e.pack_rejected);
    stat(out, "pack_skipped", e.pack_skipped);
    stat(out, "pack_cpu_us", e.pack_cpu_us);
    stat(out, "pack_kept_raw", e.pack_kept_raw);
    stat(out, "pack_kept_packed", e.pack_kept_packed);
    stat(out, "pack_promoted", e.pack_promoted);
    stat(out, "packed_items", e.packed_items);
    stat(out, "packed_raw_bytes", e.packed_raw_bytes);
    stat(out, "packed_bytes", e.packed_bytes);
    // Compression dictionaries (`-o compress_dicts`): held now, their
    // bytes, trainings run and their CPU, items packed with one.
    stat(out, "pack_dicts", e.pack_dicts);
    stat(out, "pack_dict_bytes", e.pack_dict_bytes);
    stat(out, "pack_dict_trainings", e.pack_dict_trainings);
    stat(out, "pack_dict_train_us", e.pack_dict_train_us);
    stat(out, "packed_dict_items", e.packed_dict_items);
    if let Some(f) = sh.store.flash() {
        flash_stats(f, out);
    }
    stat(out, "crawler_reclaimed", e.crawler_reclaimed);
    stat(out, "crawler_items_checked", e.crawler_items_checked);
    stat(out, "lrutail_reflocked", 0);
    stat(out, "moves_to_cold", 0);
    stat(out, "moves_to_warm", e.moves_to_warm);
    stat(out, "moves_within_lru", e.moves_within_lru);
    stat(out, "direct_reclaims", direct_reclaims(&e));
    stat(out, "lru_bumps_dropped", 0);
    // osmium's replication (`--replicate-to`).
    sh.replication.stats(out);
}

/// The flash tier's figures, under memcached's `extstore_*` names where
/// the meaning is the same, and osmium's own after them.
fn flash_stats(f: &osmium_store::flash::Flash, out: &mut StatRows) {
    let st = &f.stats;
    let (pages, free, used) = f.pages();
    let written = st.bytes_written.load(Ordering::Relaxed);
    let stored = st.bytes_stored.load(Ordering::Relaxed);
    stat(
        out,
        "get_extstore",
        st.get_hits.load(Ordering::Relaxed) + st.get_misses.load(Ordering::Relaxed),
    );
    // A flash read is never given up, nor short of buffers.
    stat(out, "get_aborted_extstore", 0);
    stat(out, "get_oom_extstore", 0);
    stat(
        out,
        "recache_from_extstore",
        st.recaches.load(Ordering::Relaxed),
    );
    stat(
        out,
        "miss_from_extstore",
        st.get_misses.load(Ordering::Relaxed),
    );
    stat(
        out,
        "badcrc_from_extstore",
        st.badcrc.load(Ordering::Relaxed),
    );
    let (live, dead) = f.live_dead_bytes();
    let page_size = f.config().page_size;
    // memcached's: the share of its slab pages held by items too small
    // for flash; osmium does not count RAM by item size (not measured).
    stat(out, "extstore_memory_pressure", "0.00");
    stat(
        out,
        "extstore_compact_lost",
        st.compact_lost.load(Ordering::Relaxed),
    );
    stat(
        out,
        "extstore_compact_rescues",
        st.compact_rescues.load(Ordering::Relaxed),
    );
    // memcached splits its rescues by why the item was kept (in its cold
    // LRU, or too young to drop); osmium keeps what was read.
    stat(out, "extstore_compact_resc_cold", 0);
    stat(out, "extstore_compact_resc_old", 0);
    stat(out, "extstore_compact_skipped", 0);
    stat(
        out,
        "extstore_page_allocs",
        st.page_allocs.load(Ordering::Relaxed),
    );
    // The oldest page taken back when pages run out: memcached's page
    // eviction (and osmium's reclaim, under its older name below).
    stat(
        out,
        "extstore_page_evictions",
        st.page_reclaims.load(Ordering::Relaxed),
    );
    stat(
        out,
        "extstore_page_reclaims",
        st.page_reclaims.load(Ordering::Relaxed),
    );
    stat(out, "extstore_pages_free", free);
    stat(out, "extstore_pages_used", used);
    stat(
        out,
        "extstore_objects_evicted",
        st.objects_evicted.load(Ordering::Relaxed),
    );
    stat(
        out,
        "extstore_objects_read",
        st.objects_read.load(Ordering::Relaxed),
    );
    stat(
        out,
        "extstore_objects_written",
        st.objects_written.load(Ordering::Relaxed),
    );
    stat(out, "extstore_objects_used", f.index.len());
    stat(
        out,
        "extstore_bytes_evicted",
        st.bytes_evicted.load(Ordering::Relaxed),
    );
    stat(out, "extstore_bytes_written", written);
    stat(
        out,
        "extstore_bytes_read",
        st.bytes_read.load(Ordering::Relaxed),
    );
    stat(out, "extstore_bytes_used", live);
    // memcached's: bytes of the used pages not live (open pages included).
    stat(
        out,
        "extstore_bytes_fragmented",
        (used * page_size).saturating_sub(live),
    );
    stat(out, "extstore_limit_maxbytes", pages * page_size);
    // Reads are issued by the workers (io_uring) as they come: no queue.
    stat(out, "extstore_io_queue", 0);
    // osmium's own: RAM the tier's index takes, bytes given to the tier,
    // flash bytes written per byte given, waits for the disk, errors.
    stat(out, "extstore_index_bytes", f.index.memory());
    stat(out, "extstore_live_bytes", live);
    stat(out, "extstore_dead_bytes", dead);
    stat(
        out,
        "extstore_pages_compacted",
        st.pages_compacted.load(Ordering::Relaxed),
    );
    stat(
        out,
        "extstore_compact_kept",
        st.compact_kept.load(Ordering::Relaxed),
    );
    stat(out, "extstore_bytes_stored", stored);
    let amplification = if stored == 0 {
        0.0
    } else {
        written as f64 / stored as f64
    };
    stat(
        out,
        "extstore_write_amplification",
        format!("{amplification:.2}"),
    );
    stat(
        out,
        "extstore_write_waits",
        st.write_waits.load(Ordering::Relaxed),
    );
    stat(
        out,
        "extstore_io_errors",
        st.io_errors.load(Ordering::Relaxed),
    );
    // Packing on the way to flash (`-o compression`, see the store's
    // `flash::stage`): items given to the tier packed, their client's
    // bytes and their frames' bytes; raw items staged to be packed, tries
    // that did not pack, values not tried, the flusher's CPU packing.
    let pack_rows = [
        ("extstore_packed_items", &st.packed_items),
        ("extstore_packed_raw_bytes", &st.packed_raw_bytes),
        ("extstore_packed_bytes", &st.packed_bytes),
        ("extstore_pack_staged", &st.staged),
        ("extstore_pack_rejected", &st.pack_rejected),
        ("extstore_pack_skipped", &st.pack_skipped),
        ("extstore_pack_cpu_us", &st.pack_cpu_micros),
    ];
    for (name, n) in pack_rows {
        stat(out, name, n.load(Ordering::Relaxed));
    }
    stat(out, "extstore_staged_bytes", f.staged_bytes());
    stat(out, "extstore_failed", u8::from(!f.is_on()));
    stat(
        out,
        "extstore_direct_io",
        if f.direct_io() { "yes" } else { "no" },
    );
}

/// `stats extstore`: each flash page's version, live bytes and bucket,
/// as memcached lists its pages (osmium has one bucket, 0); nothing
/// without a flash tier.
pub(crate) fn extstore(sh: &Shared, out: &mut StatRows) {
    let Some(f) = sh.store.flash() else {
        return;
    };
    for (p, (version, bytes)) in f.page_data().into_iter().enumerate() {
        stat(out, &format!("{p}:version"), version);
        stat(out, &format!("{p}:bytes"), bytes);
        stat(out, &format!("{p}:bucket"), 0);
        stat(out, &format!("{p}:free_bucket"), 0);
    }
}

/// `stats settings`, in memcached's order.
pub(crate) fn settings(sh: &Shared, out: &mut StatRows) {
    let s = &sh.settings;
    let yn = |b: bool| if b { "yes" } else { "no" };
    let e = sh.store.stats();
    stat(out, "maxbytes", e.limit_maxbytes);
    stat(out, "maxconns", s.max_connections);
    stat(out, "tcpport", s.port);
    stat(out, "udpport", s.udp_port);
    // The -l values as given (memcached's `settings.inter`: ports and TLS
    // prefixes kept); without -l, osmium's default address.
    let inter = match &s.inter {
        Some(inter) => inter.clone(),
        None => s
            .listen
            .iter()
            .map(|l| l.host.as_str())
            .collect::<Vec<_>>()
            .join(","),
    };
    stat(out, "inter", inter);
    stat(out, "verbosity", sh.verbosity.load(Ordering::Relaxed));
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
    stat(out, "stat_key_prefix", char::from(sh.prefix.delimiter()));
    stat(out, "detail_enabled", yn(sh.prefix.enabled()));
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
    stat(out, "dump_enabled", yn(s.dump_enabled));
    stat(out, "hash_algorithm", "xxh3");
    // osmium's own, only with replication on (memcached's list otherwise);
    // the targets and the mode as a reload left them.
    let r = &sh.replication;
    if r.is_on() {
        stat(out, "replicate_to", r.target_addrs().join(","));
        stat(
            out,
            "replication",
            if r.is_sync() { "sync" } else { "async" },
        );
        stat(out, "replica_follow_seconds", s.replica_follow_seconds);
    }
    // Whether a secret is set, never the secret.
    if !s.replicate_to.is_empty() || s.replication_secret.is_some() {
        stat(
            out,
            "replication_secret",
            yn(s.replication_secret.is_some()),
        );
    }
    // Under -Z: the certificates that name the replication peers, when set.
    if !s.tls.replication_peers.is_empty() {
        let names: Vec<String> = s
            .tls
            .replication_peers
            .iter()
            .map(|n| {
                if n.contains(':') {
                    format!("[{n}]")
                } else {
                    n.clone()
                }
            })
            .collect();
        stat(out, "replication_peers", names.join(":"));
    }
    if let Some(ca) = &s.tls.replication_ca {
        stat(out, "replication_ca", ca);
    }
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
    stat(out, "read_buf_mem_limit", s.read_buf_mem_limit);
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
    let t = &s.tls;
    stat(out, "ssl_enabled", yn(t.enabled));
    // memcached prints a missing path with glibc's "(null)" and a missing
    // cipher list or CA as "NULL".
    stat(
        out,
        "ssl_chain_cert",
        t.chain_cert.as_deref().unwrap_or("(null)"),
    );
    stat(out, "ssl_key", t.key.as_deref().unwrap_or("(null)"));
    stat(out, "ssl_verify_mode", t.verify_mode.openssl_flags());
    stat(out, "ssl_keyformat", t.keyformat);
    stat(out, "ssl_ciphers", t.ciphers.as_deref().unwrap_or("NULL"));
    stat(out, "ssl_ca_cert", t.ca_cert.as_deref().unwrap_or("NULL"));
    stat(out, "ssl_wbuf_size", t.wbuf_size);
    stat(out, "ssl_session_cache", yn(t.session_cache));
    stat(out, "ssl_kernel_tls", yn(t.kernel_tls));
    stat(
        out,
        "ssl_min_version",
        crate::settings::tls::version_text(t.min_version),
    );
    stat(out, "num_napi_ids", "(null)");
    stat(
        out,
        "memory_file",
        s.memory_file.as_deref().unwrap_or("(null)"),
    );
    stat(out, "client_flags_size", 4);
    if let Some(f) = &s.flash {
        stat(out, "ext_item_size", f.item_size_min);
        stat(out, "ext_recache_rate", f.recache_rate);
        stat(out, "ext_wbuf_size", f.wbuf_size);
        stat(out, "ext_compact_under", f.free_pages_min);
        stat(
            out,
            "ext_max_frag",
            format!("{:.2}", f64::from(f.max_frag_percent) / 100.0),
        );
        stat(out, "ext_drop_unread", yn(f.drop_unread));
    }
    // osmium's own: how dead space is cleaned.
    let policy = match s.clean.policy {
        osmium_store::CleanPolicy::Greedy => "greedy",
        osmium_store::CleanPolicy::CostBenefit => "cost_benefit",
    };
    stat(out, "compact_policy", policy);
    stat(out, "compact_threshold", s.clean.threshold_percent);
    stat(out, "compact_reserve", s.clean.reserve_percent);
    stat(out, "compact_background", yn(s.clean.background));
    stat(out, "compression", s.compression.name());
    stat(
        out,
        "compress_dicts",
        if s.compress_dicts { "on" } else { "off" },
    );
    // What holds item memory: memfd (kept by a binary upgrade), anonymous
    // (`-o item_memory=anonymous`, or where no memfd can be made) or file
    // (`-e`).
    stat(out, "item_memory", sh.store.item_memory());
    stat(out, "idle_spin", s.idle_spin_us);
    // Where `/metrics` listens (`--metrics-addr`).
    stat(
        out,
        "metrics_addr",
        s.metrics_addr.as_deref().unwrap_or("NULL"),
    );
    stat(out, "hotkeys_top", s.hotkeys.top);
    // `adaptive` (the default) or `1/N`.
    stat(out, "hotkeys_sample", s.hotkeys.sample);
}

/// `stats items`: osmium has one item class; reported as class 1 when
/// it holds items, as memcached reports only non-empty classes.
///
/// S3-FIFO's queues stand where memcached shows its LRUs: *small* (new
/// items, evicted first unless hit) is `cold`, *main* (items kept because
/// they were hit) is `warm`, and items on the flash tier count in `cold`
/// too (memcached keeps their headers in its cold LRU); osmium has no
/// staging queue like memcached's `hot`, so `number_hot` and `age_hot` are
/// 0. `age` is the age of the oldest item of either queue or the flash
/// tier, `age_warm` of main's (the oldest last access among the items of
/// each queue's oldest segments; on flash, of each page's items when the
/// evictor moved them there). The moves are the evictor's keeps: from small to main
/// (`moves_to_warm`) and within main (`moves_within_lru`). Not measured:
/// `hits_to_*` (a GET would have to read its segment's queue),
/// `moves_to_cold` (items enter small directly), and `tailrepairs`,
/// `lrutail_reflocked` (osmium counts no references on items).
pub(crate) fn items(sh: &Shared, out: &mut StatRows) {
    let e = sh.store.stats();
    if e.curr_items == 0 {
        return;
    }
    let q = sh.store.queues();
    let now = sh.store.clock().now();
    let age = |oldest: Option<u32>| oldest.map_or(0, |t| u64::from(now.saturating_sub(t)));
    let t = sh.totals();
    let n = |out: &mut StatRows, name: &str, v: u64| stat(out, &format!("items:1:{name}"), v);
    n(out, "number", e.curr_items);
    n(out, "number_hot", 0);
    n(out, "number_warm", q.main_items);
    n(out, "number_cold", q.small_items + e.flash_items);
    n(out, "age_hot", 0);
    n(out, "age_warm", age(q.main_oldest));
    let oldest = age(q.small_oldest)
        .max(age(q.main_oldest))
        .max(age(q.flash_oldest));
    n(out, "age", oldest);
    n(out, "mem_requested", e.bytes);
    n(out, "evicted", e.evictions);
    n(out, "evicted_nonzero", e.evicted_nonzero);
    n(out, "evicted_time", u64::from(e.evicted_time));
    n(out, "outofmemory", t.store_no_memory);
    n(out, "tailrepairs", 0);
    n(out, "reclaimed", e.reclaimed);
    n(out, "expired_unfetched", e.expired_unfetched);
    n(out, "evicted_unfetched", e.evicted_unfetched);
    n(out, "evicted_active", e.evicted_active);
    n(out, "crawler_reclaimed", e.crawler_reclaimed);
    n(out, "crawler_items_checked", e.crawler_items_checked);
    n(out, "lrutail_reflocked", 0);
    n(out, "moves_to_cold", 0);
    n(out, "moves_to_warm", e.moves_to_warm);
    n(out, "moves_within_lru", e.moves_within_lru);
    n(out, "direct_reclaims", direct_reclaims(&e));
    for name in [
        "hits_to_hot",
        "hits_to_warm",
        "hits_to_cold",
        "hits_to_temp",
    ] {
        n(out, name, 0);
    }
}

/// memcached's `direct_reclaims` (a worker freeing memory itself): the
/// segments writers evicted or compacted when they found none free.
fn direct_reclaims(e: &osmium_store::StoreStats) -> u64 {
    e.segments_evicted + e.compact_writer_runs
}

/// `stats sizes`: off, as memcached's without `-o track_sizes`.
pub(crate) fn sizes(out: &mut StatRows) {
    stat(out, "sizes_status", "disabled");
}

/// `stats slabs`: the segment arena reported as one slab class whose pages
/// are the segments and whose chunks are bytes (items are packed byte by
/// byte): `free_chunks` is the room left in the segments with memory, so
/// `used_chunks == total_chunks` (memcached-tool's `Full? yes`) only when
/// none is left, as memcached's class with no free chunk.
pub(crate) fn slabs(sh: &Shared, out: &mut StatRows) {
    let e = sh.store.stats();
    let t = sh.totals();
    if e.segments_allocated > 0 {
        let n = |out: &mut StatRows, name: &str, v: u64| stat(out, &format!("1:{name}"), v);
        let total = e.segments_allocated * e.segment_size;
        let free = e.segments_room_bytes.min(total);
        n(out, "chunk_size", 1);
        n(out, "chunks_per_page", e.segment_size);
        n(out, "total_pages", e.segments_allocated);
        n(out, "total_chunks", total);
        n(out, "used_chunks", total - free);
        n(out, "free_chunks", free);
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

fn hash_power(index_bytes: u64) -> u32 {
    let slots = (index_bytes / 8).max(1);
    63 - slots.leading_zeros()
}
