//! `watch`, and the executor's lines for the log watchers (`logger`): what
//! memcached 1.6.45 logs for each command, in its formats.
//!
//! memcached logs an `item_get` wherever it looks a key up (`do_item_get`):
//! every key of a get, and the item a store, delete, incr/decr, touch, mg,
//! ma or md finds before it acts; then an `item_store` for every storage
//! command (ms included) and a `deleted` for a text delete or md that
//! removed an item. Here the lookup a watched command makes is one more read of
//! the item, made only while some watcher asks for fetchers or deletions,
//! that changes nothing (no hit is recorded); every other request pays one
//! relaxed load of the watched-streams mask ([`before`], [`stored`]).

use osmium_protocol::request::{Command, Keys, Reply, Request, StoreMode, Tokens, KEY_MAX_LENGTH};
use osmium_store::{Fetch, Lookup, StoreStatus};

use super::meta_get::item_class;
use super::{Done, Next};
use crate::compose::outcome::{Outcome, Status};
use crate::compose::replies::Replies;
use crate::context::{Shared, WorkerCtx};
use crate::logger::{self, uri_encode, DELETIONS, EVICTIONS, FETCHERS, MUTATIONS, SYSEVENTS};
use osmium_store::events::{self, Event};
use std::sync::Arc;

use super::ConnView;

/// `watch [streams...]`: memcached's checks and answers in its order; on
/// success the worker hands the connection to the logger once this
/// request is done (`WorkerCtx::watch`), which sends the `OK`.
pub(crate) fn command(
    ctx: &WorkerCtx,
    conn: ConnView,
    t: Tokens<'_>,
    out: &mut Replies<'_>,
) -> Done {
    let reply = Reply::Text { noreply: false };
    if !ctx.shared.settings.watch_enabled {
        return super::answer(out, &reply, Outcome::Status(Status::WatchNotAllowed));
    }
    if conn.output_queued {
        super::text_line(
            out,
            false,
            "ERROR cannot pipeline other commands before watch",
        );
        return Done::CONTINUE;
    }
    let Some(flags) = logger::parse_streams((1..t.count()).map(|i| t.get(i))) else {
        super::text_line(out, false, "ERROR");
        return Done::CONTINUE;
    };
    if out.is_datagram() {
        // memcached answers nothing over UDP, and adds no watcher.
        return Done::CONTINUE;
    }
    if !ctx.shared.logger.reserve() {
        super::text_line(out, false, "WATCHER_TOO_MANY log watcher limit reached");
        return Done::CONTINUE;
    }
    ctx.watch.set(Some(flags));
    Done::then(Next::CloseNow)
}

/// Lines a request logs before it runs: the `item_get` of each key it
/// looks up (a delete's `deleted` follows in [`after`]). The check is
/// inline; the work is not.
#[inline(always)]
pub(crate) fn before(ctx: &WorkerCtx, req: &Request<'_>) -> Option<Found> {
    if let (Command::Get { .. }, Reply::Text { .. } | Reply::Meta(_)) = (&req.command, &req.reply) {
        // Its keys are logged by `text_keys`: a text get checks the mask
        // once.
        return None;
    }
    if ctx.shared.logger.watching(FETCHERS | DELETIONS) {
        looked_up(ctx, req)
    } else {
        None
    }
}

/// The `item_get` lines of a get's keys (up to a key too long, where
/// memcached stops).
#[inline(always)]
pub(crate) fn get_keys(ctx: &WorkerCtx, keys: Keys<'_>) {
    if ctx.shared.logger.watching(FETCHERS) {
        log_keys(ctx, keys);
    }
}

#[inline(never)]
fn log_keys(ctx: &WorkerCtx, keys: Keys<'_>) {
    for key in keys {
        if key.len() > KEY_MAX_LENGTH {
            return;
        }
        item_get(ctx, key);
    }
}

/// What the lookup before a delete found, for its `deleted` line.
pub(crate) struct Found {
    clsid: u32,
    size: usize,
    md: bool,
}

#[inline(never)]
fn looked_up(ctx: &WorkerCtx, req: &Request<'_>) -> Option<Found> {
    let key = match &req.command {
        // A text get's keys are logged by `text_keys` (which also serves
        // a huge get line's keys as they arrive).
        Command::Get { keys, .. } if matches!(req.reply, Reply::Binary(_)) => {
            get_keys(ctx, *keys);
            return None;
        }
        Command::Touch { key, .. } => key,
        Command::MetaGet(m) => m.key,
        Command::Arith(a) => a.key,
        Command::Delete(d) => {
            let found = item_get(ctx, d.key);
            return found.map(|(clsid, size)| Found {
                clsid,
                size,
                md: matches!(req.reply, Reply::Meta(_)),
            });
        }
        _ => return None,
    };
    item_get(ctx, key);
    None
}

/// A delete that found an item: its `deleted` line if it is gone now.
#[inline]
pub(crate) fn after(ctx: &WorkerCtx, req: &Request<'_>, found: Option<Found>) {
    let (Some(f), Command::Delete(d)) = (found, &req.command) else {
        return;
    };
    if matches!(req.reply, Reply::Binary(_)) {
        // memcached logs no `deleted` for a binary DELETE.
        return;
    }
    let logger = &ctx.shared.logger;
    if !logger.watching(DELETIONS) || peek(ctx, d.key).is_some() {
        return;
    }
    logger.log(ctx.head, DELETIONS, |b| {
        b.extend_from_slice(b"type=deleted key=");
        uri_encode(d.key, b);
        let cmd = if f.md { "md" } else { "delete" };
        let _ = std::io::Write::write_fmt(
            b,
            format_args!(" cmd={cmd} clsid={} size={}", f.clsid, f.size),
        );
    });
}

/// The item `key` names, seen without touching it: (slab class, value
/// length).
fn peek(ctx: &WorkerCtx, key: &[u8]) -> Option<(u32, usize)> {
    let store = ctx.store();
    let use_cas = store.config().use_cas;
    let fetch = Fetch {
        record_hit: false,
        new_exptime: None,
        create: None,
    };
    match store.fetch(ctx.head, key, &fetch, |it, _| {
        (
            item_class(key.len(), it.flags(), it.value_len(), use_cas),
            it.value_len(),
        )
    }) {
        Lookup::Hit(found) => Some(found),
        _ => None,
    }
}

/// memcached's `item_get` line for `key` as it is now.
fn item_get(ctx: &WorkerCtx, key: &[u8]) -> Option<(u32, usize)> {
    let logger = &ctx.shared.logger;
    let found = peek(ctx, key);
    if logger.watching(FETCHERS) {
        logger.log(ctx.head, FETCHERS, |b| {
            b.extend_from_slice(b"type=item_get key=");
            uri_encode(key, b);
            let (status, (clsid, size)) = match found {
                Some(f) => ("found", f),
                None => ("not_found", (0, 0)),
            };
            let _ = std::io::Write::write_fmt(
                b,
                format_args!(
                    " status={status} clsid={clsid} cfd={} size={size}",
                    cfd(ctx)
                ),
            );
        });
    }
    found
}

/// Has the store report what the watchers ask for: its evictions
/// (`evictions`: memcached's `eviction` lines) and flash tier writes
/// (`sysevents`: `type=flash_write`, one line per write buffer).
pub(crate) fn report_store_events(shared: &Arc<Shared>) {
    let weak = Arc::downgrade(shared);
    let use_cas = shared.store.config().use_cas;
    shared.store.set_event_hook(Arc::new(move |e: &Event<'_>| {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let logger = &shared.logger;
        match e {
            Event::Evicted(ev) => logger.log_other(EVICTIONS, |b| {
                b.extend_from_slice(b"type=eviction key=");
                uri_encode(ev.key, b);
                let clsid = item_class(ev.key.len(), ev.flags, ev.value_len, use_cas);
                let _ = std::io::Write::write_fmt(
                    b,
                    format_args!(
                        " fetch={} ttl={} la={} clsid={clsid} size={}",
                        if ev.fetched { "yes" } else { "no" },
                        ev.ttl,
                        ev.last_access,
                        ev.value_len
                    ),
                );
            }),
            Event::FlashWritten(w) => logger.log_other(SYSEVENTS, |b| {
                let _ = std::io::Write::write_fmt(
                    b,
                    format_args!(
                        "type=flash_write page={} offset={} bytes={} status={}",
                        w.page,
                        w.offset,
                        w.bytes,
                        if w.failed { "failed" } else { "ok" }
                    ),
                );
            }),
        }
    }));
    let store = shared.store.clone();
    shared.logger.on_mask_change(move |mask| {
        let mut kinds = 0;
        if mask & EVICTIONS != 0 {
            kinds |= events::EVICTIONS;
        }
        if mask & SYSEVENTS != 0 {
            kinds |= events::FLASH_WRITES;
        }
        store.report_events(kinds);
    });
}

/// The descriptor of the connection being run.
fn cfd(ctx: &WorkerCtx) -> i32 {
    ctx.cfd.get()
}

/// A storage command is about to store `key`: its `item_get`.
#[inline(always)]
pub(crate) fn storing(ctx: &WorkerCtx, key: &[u8]) {
    if ctx.shared.logger.watching(FETCHERS) {
        item_get(ctx, key);
    }
}

/// A storage command's `item_store` line.
#[inline(always)]
pub(crate) fn stored(ctx: &WorkerCtx, s: Stored<'_>) {
    if ctx.shared.logger.watching(MUTATIONS) {
        item_store(ctx, s);
    }
}

/// What [`stored`] says.
pub(crate) struct Stored<'a> {
    pub key: &'a [u8],
    pub mode: StoreMode,
    pub status: StoreStatus,
    /// Relative expiry (0: none).
    pub exptime: u32,
    pub flags: u32,
    pub size: usize,
}

#[inline(never)]
fn item_store(ctx: &WorkerCtx, s: Stored<'_>) {
    let store = ctx.store();
    let now = store.clock().now();
    let ttl = if s.exptime == 0 {
        0
    } else {
        s.exptime.wrapping_sub(now)
    };
    let clsid = item_class(s.key.len(), s.flags, s.size, store.config().use_cas);
    let status = match s.status {
        StoreStatus::Stored => "stored",
        StoreStatus::Exists => "exists",
        StoreStatus::NotFound => "not_found",
        StoreStatus::TooLarge => "too_large",
        StoreStatus::OutOfMemory => "no_memory",
        _ => "not_stored",
    };
    let cmd = match s.mode {
        StoreMode::Set => "set",
        StoreMode::Add => "add",
        StoreMode::Replace => "replace",
        StoreMode::Append => "append",
        StoreMode::Prepend => "prepend",
        StoreMode::Cas => "cas",
    };
    ctx.shared.logger.log(ctx.head, MUTATIONS, |b| {
        b.extend_from_slice(b"type=item_store key=");
        uri_encode(s.key, b);
        let _ = std::io::Write::write_fmt(
            b,
            format_args!(
                " status={status} cmd={cmd} ttl={ttl} clsid={clsid} cfd={} size={}",
                cfd(ctx),
                s.size
            ),
        );
    });
}
