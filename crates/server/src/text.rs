//! Executes parsed text-protocol commands against the store and writes the
//! replies: the glue between the protocol crate (parse/encode) and the
//! engine, with memcached's reply strings and stat accounting.

use crate::direct::Direct;
use std::sync::atomic::Ordering;

use osmium_protocol::encode;
use osmium_protocol::text::{Command, StoreRequest, KEY_MAX_LENGTH};
use osmium_store::{ArithResult, Lookup, StoreMode, StoreStatus, Write};

use crate::session::{store_mode, IncomingStore, Peer};
use crate::stats::StatsContext;
use crate::worker::WorkerCtx;

/// What the connection must do after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Continue,
    /// Send what is buffered, then close (quit).
    CloseAfterWrite,
    /// Close at once, dropping buffered output (memcached's conn_closing).
    CloseNow,
}

#[inline]
fn reply(out: &mut Vec<u8>, noreply: bool, msg: &str) {
    if !noreply {
        encode::line(out, msg.as_bytes());
    }
}

/// Before the data block is read: memcached refuses too-large values at the
/// header (and drops an existing key on a refused `set`). Returns true if
/// the request was refused and its data block must be swallowed.
pub fn refuse_store(ctx: &WorkerCtx, req: &StoreRequest<'_>, out: &mut Vec<u8>) -> bool {
    let store = &ctx.shared.store;
    if !store.too_large(req.key.len(), req.flags, req.value_len as usize) {
        return false;
    }
    let prefix = &ctx.shared.stats.prefix;
    if prefix.enabled() {
        prefix.record_set(req.key);
    }
    ctx.stats.store_too_large.incr();
    reply(out, req.noreply, "SERVER_ERROR object too large for cache");
    if store_mode(req.mode) == StoreMode::Set {
        store.delete(req.key);
    }
    true
}

/// Completes a storage command once its data block (with terminator) is in.
pub fn complete_store(ctx: &WorkerCtx, req: &StoreRequest<'_>, block: &[u8], out: &mut Vec<u8>) {
    ctx.stats.set_cmds.incr();
    let prefix = &ctx.shared.stats.prefix;
    if prefix.enabled() {
        prefix.record_set(req.key);
    }
    let vlen = req.value_len as usize;
    if &block[vlen..vlen + 2] != b"\r\n" {
        reply(out, req.noreply, "CLIENT_ERROR bad data chunk");
        return;
    }
    let store = &ctx.shared.store;
    let exptime = store.clock().expiry(req.exptime);
    let (status, _) = store.store(
        ctx.head,
        &Write {
            mode: store_mode(req.mode),
            key: req.key,
            flags: req.flags,
            exptime,
            value: &block[..vlen],
            cas: req.cas,
            ..Write::default()
        },
    );
    store_reply(ctx, status, store_mode(req.mode), req.noreply, out);
}

/// Whether `req`'s data block, of which `have` bytes are buffered, is
/// to be read into its item.
pub fn reads_into_item(req: &StoreRequest<'_>, have: usize) -> bool {
    let vlen = req.value_len as usize;
    vlen >= crate::session::INCOMING_MIN
        && have < vlen + 2
        && matches!(
            store_mode(req.mode),
            StoreMode::Set | StoreMode::Add | StoreMode::Replace | StoreMode::Cas
        )
}

/// Starts a storage command whose data block is read into its item (see
/// `reads_into_item`; `first` is the part of the value already buffered):
/// the item is reserved now, as memcached allocates its item before it
/// reads the data. None when the command was answered (out of memory) and
/// the rest of its data block must be swallowed.
pub fn begin_store(
    ctx: &WorkerCtx,
    req: &StoreRequest<'_>,
    first: &[u8],
    out: &mut Vec<u8>,
) -> Option<IncomingStore> {
    let prefix = &ctx.shared.stats.prefix;
    if prefix.enabled() {
        prefix.record_set(req.key);
    }
    let store = &ctx.shared.store;
    let w = Write {
        mode: store_mode(req.mode),
        key: req.key,
        flags: req.flags,
        exptime: store.clock().expiry(req.exptime),
        value: first,
        cas: req.cas,
        ..Write::default()
    };
    match store.begin_incoming(ctx.head, &w, req.value_len as usize) {
        Ok(item) => Some(IncomingStore {
            item,
            mode: store_mode(req.mode),
            quiet: req.noreply,
            opcode: 0,
            opaque: 0,
            meta_line: Vec::new(),
        }),
        Err(status) => {
            store_reply(ctx, status, store_mode(req.mode), req.noreply, out);
            None
        }
    }
}

/// Completes a storage command read into its item, once its data block
/// is in: `terminated` says whether `\r\n` followed it.
pub fn finish_store(ctx: &WorkerCtx, incoming: IncomingStore, terminated: bool, out: &mut Vec<u8>) {
    ctx.stats.set_cmds.incr();
    let store = &ctx.shared.store;
    if !terminated {
        store.abandon_incoming(incoming.item);
        reply(out, incoming.quiet, "CLIENT_ERROR bad data chunk");
        return;
    }
    let (status, _) = store.finish_incoming(ctx.head, incoming.item);
    store_reply(ctx, status, incoming.mode, incoming.quiet, out);
}

/// The reply to a storage command, and its stats.
fn store_reply(
    ctx: &WorkerCtx,
    status: StoreStatus,
    mode: StoreMode,
    noreply: bool,
    out: &mut Vec<u8>,
) {
    let is_cas = mode == StoreMode::Cas;
    let msg = match status {
        StoreStatus::Stored => {
            if is_cas {
                ctx.stats.cas_hits.incr();
            }
            "STORED"
        }
        StoreStatus::NotStored => "NOT_STORED",
        StoreStatus::Exists => {
            ctx.stats.cas_badval.incr();
            "EXISTS"
        }
        StoreStatus::NotFound => {
            ctx.stats.cas_misses.incr();
            "NOT_FOUND"
        }
        StoreStatus::TooLarge => {
            ctx.stats.store_too_large.incr();
            "SERVER_ERROR object too large for cache"
        }
        StoreStatus::OutOfMemory => {
            ctx.stats.store_no_memory.incr();
            "SERVER_ERROR out of memory storing object"
        }
    };
    reply(out, noreply, msg);
}

/// Executes every command except storage commands (handled by the
/// connection, which must first collect the data block).
pub fn execute(
    ctx: &WorkerCtx,
    cmd: Command<'_>,
    out: &mut Vec<u8>,
    peer: &Peer,
    fd: i32,
    direct: &mut Direct,
) -> After {
    let shared = &ctx.shared;
    let store = &shared.store;
    let stats = &ctx.stats;
    match cmd {
        Command::Get {
            keys,
            with_cas,
            touch,
        } => {
            let start = out.len();
            // A value may go to the socket directly (`Direct`) only if no
            // later key can make the whole reply an error: checked once,
            // at the first value long enough.
            let mut keys_ok = None;
            let all_keys = keys; // a copy: `keys` is iterated below
            let mut keys_valid = || {
                *keys_ok.get_or_insert_with(|| {
                    let mut all = all_keys;
                    all.all(|k| k.len() <= KEY_MAX_LENGTH)
                })
            };
            if touch.is_none() {
                // Plain get/gets: all keys through one get_many, which
                // overlaps their memory accesses.
                let mut too_long = false;
                store.get_many(keys, |key, r| {
                    if key.len() > KEY_MAX_LENGTH {
                        too_long = true;
                        return false;
                    }
                    let hit = match r {
                        Lookup::Hit(it) => {
                            let cas = with_cas.then(|| it.cas());
                            let value = it.value();
                            encode::value_header(out, it.key(), it.flags(), value.len(), cas);
                            if direct.takes(value.len(), it.lock_free()) && keys_valid() {
                                direct.put_value(out, value, b"\r\n", true, stats);
                            } else {
                                out.extend_from_slice(value);
                                out.extend_from_slice(b"\r\n");
                            }
                            true
                        }
                        Lookup::Expired => {
                            stats.get_expired.incr();
                            false
                        }
                        Lookup::Flushed => {
                            stats.get_flushed.incr();
                            false
                        }
                        Lookup::Miss => false,
                    };
                    if shared.stats.prefix.enabled() {
                        shared.stats.prefix.record_get(key, hit);
                    }
                    stats.get_cmds.incr();
                    if hit {
                        stats.get_hits.incr()
                    } else {
                        stats.get_misses.incr()
                    }
                    true
                });
                if too_long {
                    out.truncate(start);
                    encode::line(out, b"CLIENT_ERROR bad command line format");
                    return After::Continue;
                }
                out.extend_from_slice(b"END\r\n");
                return After::Continue;
            }
            // gat/gats: each key is touched (under its shard's lock).
            let exptime = touch.map(|e| store.clock().expiry(e));
            for key in keys {
                if key.len() > KEY_MAX_LENGTH {
                    out.truncate(start);
                    encode::line(out, b"CLIENT_ERROR bad command line format");
                    return After::Continue;
                }
                let r = store.get(key, exptime, |it| {
                    let cas = with_cas.then(|| it.cas());
                    let value = it.value();
                    encode::value_header(out, it.key(), it.flags(), value.len(), cas);
                    if direct.takes(value.len(), it.lock_free()) && keys_valid() {
                        direct.put_value(out, value, b"\r\n", true, stats);
                    } else {
                        out.extend_from_slice(value);
                        out.extend_from_slice(b"\r\n");
                    }
                });
                let hit = matches!(r, Lookup::Hit(()));
                if shared.stats.prefix.enabled() {
                    shared.stats.prefix.record_get(key, hit);
                }
                match r {
                    Lookup::Expired => stats.get_expired.incr(),
                    Lookup::Flushed => stats.get_flushed.incr(),
                    _ => {}
                }
                stats.touch_cmds.incr();
                if hit {
                    stats.touch_hits.incr()
                } else {
                    stats.touch_misses.incr()
                }
            }
            out.extend_from_slice(b"END\r\n");
        }
        Command::Store(_) => unreachable!("storage commands are completed by the connection"),
        Command::Delete { key, noreply } => {
            if shared.stats.prefix.enabled() {
                shared.stats.prefix.record_delete(key);
            }
            if store.delete(key) {
                stats.delete_hits.incr();
                reply(out, noreply, "DELETED");
            } else {
                stats.delete_misses.incr();
                reply(out, noreply, "NOT_FOUND");
            }
        }
        Command::Arith {
            key,
            incr,
            delta,
            noreply,
        } => match store.arith(ctx.head, key, incr, delta) {
            ArithResult::Value(v) => {
                if incr {
                    stats.incr_hits.incr()
                } else {
                    stats.decr_hits.incr()
                }
                if !noreply {
                    encode::number_line(out, v);
                }
            }
            ArithResult::NotFound => {
                if incr {
                    stats.incr_misses.incr()
                } else {
                    stats.decr_misses.incr()
                }
                reply(out, noreply, "NOT_FOUND");
            }
            ArithResult::NonNumeric => reply(
                out,
                noreply,
                "CLIENT_ERROR cannot increment or decrement non-numeric value",
            ),
            ArithResult::OutOfMemory => reply(out, noreply, "SERVER_ERROR out of memory"),
        },
        Command::Touch {
            key,
            exptime,
            noreply,
        } => {
            stats.touch_cmds.incr();
            let exptime = store.clock().expiry(exptime);
            match store.touch(key, exptime) {
                Lookup::Hit(()) => {
                    stats.touch_hits.incr();
                    reply(out, noreply, "TOUCHED");
                }
                other => {
                    match other {
                        Lookup::Expired => stats.get_expired.incr(),
                        Lookup::Flushed => stats.get_flushed.incr(),
                        _ => {}
                    }
                    stats.touch_misses.incr();
                    reply(out, noreply, "NOT_FOUND");
                }
            }
        }
        Command::FlushAll { delay, noreply } => {
            stats.flush_cmds.incr();
            if !shared.stats.settings.flush_enabled {
                reply(out, noreply, "CLIENT_ERROR flush_all not allowed");
            } else if let Some(delay) = delay {
                store.flush_all(delay);
                reply(out, noreply, "OK");
            } else {
                reply(out, noreply, "CLIENT_ERROR invalid exptime argument");
            }
        }
        Command::Version => {
            out.extend_from_slice(b"VERSION ");
            encode::line(out, crate::settings::VERSION.as_bytes());
        }
        Command::Verbosity { level, noreply } => {
            shared
                .stats
                .verbosity
                .store(level.min(2), Ordering::Relaxed);
            reply(out, noreply, "OK");
        }
        Command::Quit => return After::CloseAfterWrite,
        Command::Shutdown { valid, .. } => {
            if !shared.stats.settings.shutdown_enabled {
                encode::line(out, b"ERROR: shutdown not enabled");
            } else if !valid {
                encode::line(out, b"CLIENT_ERROR invalid shutdown mode");
            } else {
                // Replies already queued still go out, as with memcached.
                shared.request_shutdown();
                return After::CloseAfterWrite;
            }
        }
        Command::Stats {
            group,
            arg,
            ntokens,
        } => stats_command(&shared.stats, group, arg, ntokens, out, peer, fd),
        Command::CacheMemlimit { megabytes, noreply } => {
            let msg = if megabytes < 8 {
                "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m"
            } else if megabytes > 1_000_000_000 {
                "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes"
            } else if store.set_memory_limit(megabytes as usize * (1 << 20)) {
                "OK"
            } else {
                "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust"
            };
            reply(out, noreply, msg);
        }
        Command::Reply { msg, noreply } => reply(out, noreply, msg),
        Command::Close => return After::CloseNow,
    }
    After::Continue
}

fn stats_command(
    ctx: &StatsContext,
    group: Option<&[u8]>,
    arg: Option<&[u8]>,
    ntokens: usize,
    out: &mut Vec<u8>,
    peer: &Peer,
    fd: i32,
) {
    let Some(group) = group else {
        ctx.general(out);
        out.extend_from_slice(b"END\r\n");
        return;
    };
    match group {
        b"reset" => {
            ctx.reset();
            encode::line(out, b"RESET");
        }
        b"detail" => match arg {
            Some(b"on") => {
                ctx.prefix.set_enabled(true);
                encode::line(out, b"OK")
            }
            Some(b"off") => {
                ctx.prefix.set_enabled(false);
                encode::line(out, b"OK")
            }
            Some(b"dump") => ctx.prefix.dump(out),
            _ => encode::line(out, b"CLIENT_ERROR usage: stats detail on|off|dump"),
        },
        b"settings" => {
            ctx.settings(out);
            out.extend_from_slice(b"END\r\n");
        }
        b"cachedump" => {
            if ntokens < 5 {
                encode::line(out, b"CLIENT_ERROR bad command line");
            } else {
                encode::line(out, b"END");
            }
        }
        b"conns" => {
            peer.write_conn_stats(fd, ctx.settings.unix_socket.as_deref(), out);
            out.extend_from_slice(b"END\r\n");
        }
        b"items" => {
            ctx.items(out);
            out.extend_from_slice(b"END\r\n");
        }
        b"slabs" => {
            ctx.slabs(out);
            out.extend_from_slice(b"END\r\n");
        }
        b"sizes" => {
            encode::stat(out, "sizes_status", "disabled");
            out.extend_from_slice(b"END\r\n");
        }
        _ => encode::line(out, b"ERROR"),
    }
}
