//! The executor: runs a protocol-neutral [`Request`] against the store,
//! counts its stats, and decides its [`Outcome`], which the composer of the
//! protocol it came in says in memcached's bytes (`compose::write`).
//! Execute never writes reply bytes itself.
//!
//! ```text
//!   session ──Request──▶ execute ──▶ store (the cache)
//!                           │
//!                           └──Outcome──▶ Replies::say ──▶ compose::{text, meta, binary} ──▶ Output
//! ```
//!
//! Execute sees the output only as `compose::replies::Replies`. The text
//! and binary get hits go through its value encoders (`text_value`,
//! `binary_hit`), which stream values from item memory; the key dumps
//! (`dump`) write their own formats as the socket drains.
//! `reply_rule_tests` holds the rule.
//!
//! Every command of every protocol passes through [`execute`] (and, for a
//! storage command, `store::admit` before its value arrives and
//! `store::complete` after): it is the one place where every request is
//! seen with its result, where counters and prefix stats are kept, and
//! where writes could be observed or forwarded. Statistics follow
//! memcached's rules whatever the protocol: a gat counts as a touch, mg
//! with `T` too, md as a delete, ma as an incr or decr.

mod admin;
mod arith;
mod delete;
mod dump;
mod get;
mod meta_get;
mod replica;
#[cfg(test)]
mod reply_rule_tests;
pub(crate) mod report;
pub(crate) mod sasl;
mod stats;
pub(crate) mod store;
mod tuning;
mod watch;

use osmium_protocol::request::{Command, Reply, Request};

use crate::compose::outcome::Outcome;
use crate::compose::replies::Replies;
use crate::context::WorkerCtx;
use crate::replication::fresh_writes::WriteGate;

pub(crate) use crate::compose::error_line;

pub(crate) use dump::{Dump, DumpKind};
pub(crate) use get::text_keys;
pub(crate) use sasl::{admit_sasl, AuthState};
pub(crate) use watch::report_store_events;

/// What the connection does after a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    Continue,
    /// Send what is queued, then close (quit, a binary protocol error).
    CloseAfterWrite,
    /// Close at once, dropping queued output (an HTTP request line).
    CloseNow,
    /// Close at once: the connection asked the server to stop
    /// (`shutdown`; memcached's `reason=shutdown`).
    Shutdown,
    /// Stream a dump (`lru_crawler metadump`/`mgdump`) before the next
    /// request.
    StartDump(DumpKind),
    /// Nothing was done: keys of the request are on flash. Their reads
    /// are in `WorkerCtx::flash_wanted`; run the request again once they
    /// arrived.
    AwaitFlash,
}

/// A request's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Done {
    pub next: Next,
    /// memcached writes the queued replies at once after this request
    /// (binary NOOP and most binary errors, text gets and `mn`): what
    /// decides which replies survive a later close, and UDP's flushes.
    pub flush: bool,
}

impl Done {
    pub(crate) const CONTINUE: Done = Done {
        next: Next::Continue,
        flush: false,
    };
    pub(crate) const FLUSH: Done = Done {
        next: Next::Continue,
        flush: true,
    };

    #[inline]
    pub(crate) fn flush_if(flush: bool) -> Done {
        Done {
            next: Next::Continue,
            flush,
        }
    }

    #[inline]
    pub(crate) fn then(next: Next) -> Done {
        Done { next, flush: true }
    }
}

/// What a request needs to know of its connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnView {
    /// Its descriptor (`stats conns` shows the asker parsing).
    pub fd: i32,
    /// Whether replies already queued are waiting (memcached refuses to
    /// start a dump behind them).
    pub output_queued: bool,
    /// Whether a GET may wait for flash reads done by the worker instead
    /// of reading them itself (a stream connection of a worker that
    /// reads asynchronously).
    pub flash_async: bool,
}

/// Runs one request whose value (if it has one) is complete: storage
/// commands and SASL authentication go through `store::complete` and
/// `execute_sasl` instead.
pub(crate) fn execute(
    ctx: &WorkerCtx,
    conn: ConnView,
    req: &Request<'_>,
    out: &mut Replies<'_>,
) -> Done {
    if conn.flash_async && ctx.flash_async.get() && flash_wanted(ctx, &req.command) {
        return Done {
            next: Next::AwaitFlash,
            flush: false,
        };
    }
    let gate = match ctx.repl {
        Some(_) => write_gate(ctx, &req.command),
        None => WriteGate::Open,
    };
    if gate.skips() {
        return skipped_copy_item(req, out);
    }
    ctx.write_missed.set(false);
    let found = watch::before(ctx, req);
    let done = run(ctx, conn, req, out);
    if found.is_some() {
        watch::after(ctx, req, found);
    }
    if ctx.repl.is_some() && !ctx.write_missed.get() {
        replicate(ctx, &req.command);
        gate.wrote();
        if matches!(req.command, Command::FlushAll { .. }) {
            gate.record_every_key();
        }
    }
    done
}

/// Runs one request (see [`execute`]).
#[inline]
fn run(ctx: &WorkerCtx, conn: ConnView, req: &Request<'_>, out: &mut Replies<'_>) -> Done {
    let reply = &req.reply;
    match req.command {
        Command::Get {
            keys,
            touch,
            with_cas,
        } => get::get(ctx, keys, touch, with_cas, reply, out),
        Command::Touch { key, exptime } => get::touch(ctx, key, exptime, reply, out),
        Command::MetaGet(ref m) => meta_get::meta_get(ctx, m, reply, out),
        Command::MetaDebug { key, .. } => meta_get::meta_debug(ctx, key, reply, out),
        Command::Delete(ref d) => delete::delete(ctx, d, reply, out),
        Command::Arith(ref a) => arith::arith(ctx, a, reply, out),
        Command::Stats { group, tokens } => stats::stats(ctx, conn, group, tokens, reply, out),
        Command::LruCrawler { tokens } => {
            let (status, next) = dump::lru_crawler(ctx, conn, tokens);
            let _ = out.say(reply, &Outcome::Loud(status));
            match next {
                Next::Continue => Done::CONTINUE,
                next => Done::then(next),
            }
        }
        Command::SaslListMechs => sasl::list_mechs(ctx, reply, out),
        Command::Store(_) | Command::SaslAuth { .. } => {
            // Completed by the session once their value is in.
            Done::CONTINUE
        }
        _ => admin::admin(ctx, conn, req, out),
    }
}

pub(crate) use sasl::execute_sasl;

/// After a request that changed its key ran (`WorkerCtx::write_missed`
/// unset: not a miss, not a failed condition): the key goes to
/// replication (its state is read when sent, so whatever order workers
/// queue a key in, the last state sent is the latest). A write that
/// changed nothing is not queued: its key's state here may be the
/// incomplete one of a server still catching up, which an `md` would
/// carry to the target. Storage commands are queued by `store`, touches
/// and gat by `get`.
fn replicate(ctx: &WorkerCtx, command: &Command<'_>) {
    match command {
        Command::MetaGet(m) if m.ttl.is_some() || m.vivify.is_some() => ctx.replicate_key(m.key),
        Command::Delete(d) => ctx.replicate_key(d.key),
        Command::Arith(a) => ctx.replicate_key(a.key),
        Command::FlushAll { delay: Some(delay) } if ctx.shared.settings.flush_enabled => {
            ctx.replicate_flush(*delay)
        }
        _ => {}
    }
}

/// What a request that may write holds while it runs, while a full copy
/// comes in (`replication::fresh_writes`): the same keys as `replicate`.
/// Storage commands are gated by `store`, touches and gat by `get`.
#[inline]
fn write_gate<'c>(ctx: &'c WorkerCtx, command: &Command<'_>) -> WriteGate<'c> {
    match command {
        Command::MetaGet(m) if m.ttl.is_some() || m.vivify.is_some() => ctx.write_gate(m.key),
        Command::Delete(d) => ctx.store_gate(d.key),
        Command::Arith(a) => ctx.write_gate(a.key),
        Command::FlushAll { delay: Some(_) } if ctx.shared.settings.flush_enabled => {
            ctx.flush_gate()
        }
        _ => WriteGate::Open,
    }
}

/// An `md` of a copy coming in, for a key written since: not applied,
/// answered as if it had been (a copy's `md` is quiet: nothing).
fn skipped_copy_item(req: &Request<'_>, out: &mut Replies<'_>) -> Done {
    match req.command {
        Command::Delete(ref d) => answer(
            out,
            &req.reply,
            Outcome::Deleted {
                result: osmium_store::RemoveResult::Removed,
                key: d.key,
            },
        ),
        _ => Done::CONTINUE,
    }
}

/// Whether a GET-family request (get, gets, binary GET, mg that changes
/// nothing) has keys on flash not read yet: their reads go to
/// `ctx.flash_wanted`. Other commands read flash themselves.
fn flash_wanted(ctx: &WorkerCtx, command: &Command<'_>) -> bool {
    let store = ctx.store();
    let mut wanted = ctx.flash_wanted.borrow_mut();
    let before = wanted.len();
    match command {
        Command::Get {
            keys, touch: None, ..
        } => {
            for key in *keys {
                if let Some(r) = store.flash_wanted(key) {
                    wanted.push(r);
                }
            }
        }
        Command::MetaGet(m) if m.ttl.is_none() && m.vivify.is_none() && m.recache.is_none() => {
            if let Some(r) = store.flash_wanted(m.key) {
                wanted.push(r);
            }
        }
        _ => {}
    }
    wanted.len() > before
}

/// A text line decided by the executor (touch's verdict, `watch`'s and
/// replication's answers), said by the text composer; noreply silences it.
#[inline]
fn text_line(out: &mut Replies<'_>, noreply: bool, msg: &str) {
    out.say(&Reply::Text { noreply }, &Outcome::Message(msg));
}

/// Has the request's composer say `o`: memcached sends a binary error at
/// once.
#[inline]
fn answer(out: &mut Replies<'_>, reply: &Reply<'_>, o: Outcome<'_>) -> Done {
    Done::flush_if(out.say(reply, &o))
}
