//! Storage commands (text set/add/replace/append/prepend/cas, ms, binary
//! SET/ADD/REPLACE/APPEND/PREPEND and quiet forms), in two steps as
//! memcached runs them:
//!
//! 1. [`admit`], when the command line (or binary header) arrives: a value
//!    that can never fit is refused at once, its data block is swallowed,
//!    and a refused set drops the key's current value (memcached would
//!    rather lose it than serve stale data);
//! 2. [`complete`], once the value (and its `\r\n`) is in: the store's
//!    verdict becomes an [`Outcome::Stored`], which the request's composer
//!    says (`STORED`, `HD c123`, a binary status...).
//!
//! A large value that has not arrived with its command is instead read
//! straight into its item ([`begin_incoming`], [`finish_incoming`]): the
//! item is reserved when the command arrives, as memcached allocates its
//! item before reading the data, so running out of memory is answered
//! then.

use osmium_protocol::binary::opcode;
use osmium_protocol::request::{BinaryReply, Reply, Store, StoreMode};
use osmium_store::{Incoming, StoreStatus, Write};

use super::{answer, watch, Done};
use crate::compose::outcome::{Outcome, Status, Stored};
use crate::compose::replies::Replies;
use crate::context::WorkerCtx;

/// Data blocks of at least this many bytes that have not all arrived with
/// their command are read straight into their item.
pub(crate) const INCOMING_MIN: usize = 64 * 1024;

/// Bytes that end a value in this protocol (`\r\n` in the text
/// protocols).
#[inline]
pub(crate) fn terminator_len(reply: &Reply<'_>) -> usize {
    match reply {
        Reply::Binary(_) => 0,
        _ => 2,
    }
}

fn store_mode(mode: StoreMode) -> osmium_store::StoreMode {
    match mode {
        StoreMode::Set => osmium_store::StoreMode::Set,
        StoreMode::Add => osmium_store::StoreMode::Add,
        StoreMode::Replace => osmium_store::StoreMode::Replace,
        StoreMode::Append => osmium_store::StoreMode::Append,
        StoreMode::Prepend => osmium_store::StoreMode::Prepend,
        StoreMode::Cas => osmium_store::StoreMode::Cas,
    }
}

/// The store's write for `s` with this value.
fn write<'a>(ctx: &WorkerCtx, s: &Store<'a>, value: &'a [u8]) -> Write<'a> {
    let clock = ctx.store().clock();
    Write {
        mode: store_mode(s.mode),
        key: s.key,
        flags: s.flags,
        exptime: clock.realtime(s.exptime),
        value,
        cas: s.cas,
        stale_if_older: s.stale_if_older,
        new_cas: s.new_cas.unwrap_or(0),
        binary_key: s.binary_key,
        create_exptime: s.create_exptime.map(|e| clock.realtime(e)),
    }
}

/// Whether the command drops the key's value when its own cannot be
/// stored: a set (the opcode SET even with a CAS), and every ms.
fn drops_on_refusal(s: &Store<'_>, reply: &Reply<'_>) -> bool {
    match reply {
        Reply::Text { .. } => s.mode == StoreMode::Set,
        Reply::Meta(_) => true,
        Reply::Binary(r) => matches!(r.opcode, opcode::SET | opcode::SETQ),
    }
}

/// Whether `admit` accepted the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    Accept,
    /// Answered; swallow this many bytes of data block.
    Refused {
        discard: usize,
    },
}

/// Step 1, at the command: refuses a value too large for any item.
pub(crate) fn admit(
    ctx: &WorkerCtx,
    s: &Store<'_>,
    reply: &Reply<'_>,
    out: &mut Replies<'_>,
) -> Admit {
    let store = ctx.store();
    let discard = s.value_len + terminator_len(reply);
    if store.too_large(s.key.len(), s.flags, s.value_len) {
        let prefix = &ctx.shared.prefix;
        if prefix.enabled() {
            prefix.record_set(s.key);
        }
        ctx.stats.store_too_large.incr();
        let _ = answer(out, reply, Outcome::Status(Status::TooLarge));
        if drops_on_refusal(s, reply) {
            let gate = ctx.store_gate(s.key);
            if !gate.skips() {
                store.delete(s.key);
                ctx.replicate_key(s.key);
                gate.wrote();
            }
        }
        return Admit::Refused { discard };
    }
    // memcached checks a meta opaque once the item is allocated.
    if crate::compose::unwritable(reply) {
        let _ = answer(out, reply, Outcome::Status(Status::OpaqueTooLong));
        return Admit::Refused { discard };
    }
    Admit::Accept
}

/// Step 2: stores the value; `block` is the value and its terminator.
pub(crate) fn complete(
    ctx: &WorkerCtx,
    s: &Store<'_>,
    reply: &Reply<'_>,
    block: &[u8],
    out: &mut Replies<'_>,
) -> Done {
    ctx.stats.set_cmds.incr();
    let prefix = &ctx.shared.prefix;
    if prefix.enabled() {
        prefix.record_set(s.key);
    }
    let vlen = s.value_len;
    if terminator_len(reply) == 2 && block.get(vlen..vlen + 2) != Some(b"\r\n") {
        return answer(out, reply, Outcome::Status(Status::BadChunk));
    }
    ctx.hot_write(s.key, vlen);
    // Held until the write is applied and queued (see `WorkerCtx::write_gate`).
    let gate = ctx.store_gate(s.key);
    if gate.skips() {
        // A full copy's item for a key written since: not applied.
        return skipped_copy_item(ctx, s.mode, s.key, s.binary_key, reply, vlen, out);
    }
    let w = write(ctx, s, &block[..vlen]);
    watch::storing(ctx, s.key);
    let (status, cas, size) = ctx.store().store_sized(ctx.head, &w);
    watch::stored(
        ctx,
        watch::Stored {
            key: s.key,
            mode: s.mode,
            status,
            exptime: w.exptime,
            flags: s.flags,
            size: if size > 0 { size } else { vlen },
        },
    );
    if changed(status) {
        ctx.replicate_key(s.key);
        gate.wrote();
    }
    drop(gate);
    store_reply(
        ctx,
        s.mode,
        s.key,
        s.binary_key,
        reply,
        status,
        cas,
        size,
        out,
    )
}

/// Whether a store that ended with `status` changed its key (a refused
/// set drops the old value; a failed add, replace, append, prepend or cas
/// changed nothing): only then is it replicated and recorded against
/// copies coming in (see `replicate` in `execute`).
fn changed(status: StoreStatus) -> bool {
    !matches!(
        status,
        StoreStatus::NotStored | StoreStatus::Exists | StoreStatus::NotFound
    )
}

/// A full copy's `ms` for a key written since it began
/// (`replication::fresh_writes`): not applied, answered as stored (a
/// copy's `ms` is quiet: nothing).
fn skipped_copy_item(
    ctx: &WorkerCtx,
    mode: StoreMode,
    key: &[u8],
    binary_key: bool,
    reply: &Reply<'_>,
    size: usize,
    out: &mut Replies<'_>,
) -> Done {
    let stored = StoreStatus::Stored;
    store_reply(ctx, mode, key, binary_key, reply, stored, 0, size, out)
}

/// A storage command's outcome, counted in its stats, and said.
#[allow(clippy::too_many_arguments)]
#[inline]
fn store_reply(
    ctx: &WorkerCtx,
    mode: StoreMode,
    key: &[u8],
    binary_key: bool,
    reply: &Reply<'_>,
    status: StoreStatus,
    cas: u64,
    size: usize,
    out: &mut Replies<'_>,
) -> Done {
    let stats = &ctx.stats;
    let is_cas = mode == StoreMode::Cas;
    match status {
        StoreStatus::Stored if is_cas => stats.cas_hits.incr(),
        StoreStatus::Exists if is_cas => stats.cas_badval.incr(),
        StoreStatus::NotFound => stats.cas_misses.incr(),
        StoreStatus::TooLarge => stats.store_too_large.incr(),
        StoreStatus::OutOfMemory => stats.store_no_memory.incr(),
        _ => {}
    }
    let stored = Stored {
        status,
        mode,
        key,
        binary_key,
        cas,
        size,
    };
    answer(out, reply, Outcome::Stored(stored))
}

/// A storage command whose value is being read into its item.
pub(crate) struct IncomingStore {
    pub item: Incoming,
    mode: StoreMode,
    /// Its expiry and client flags (for the watchers' `item_store`).
    exptime: u32,
    flags: u32,
    reply: IncomingReply,
}

/// What the reply of an incoming store needs once the value is in.
enum IncomingReply {
    Text {
        noreply: bool,
    },
    /// The ms request line, parsed again for its return flags.
    Meta {
        line: Vec<u8>,
    },
    Binary(BinaryReply),
}

/// Whether `s`'s value, of which `have` bytes are buffered, is to be read
/// straight into its item: large, not all here, none of what needs the
/// old item first (append/prepend, stale CAS, explicit CAS, binary keys),
/// and not for a store that packs values as they are written (`-o
/// compression=all` packs the whole value before it reserves its item).
pub(crate) fn reads_into_item(ctx: &WorkerCtx, s: &Store<'_>, have: usize, term: usize) -> bool {
    s.value_len >= INCOMING_MIN
        && !ctx.store().packs_on_write()
        && have < s.value_len + term
        && matches!(
            s.mode,
            StoreMode::Set | StoreMode::Add | StoreMode::Replace | StoreMode::Cas
        )
        && !s.stale_if_older
        && s.new_cas.is_none()
        && !s.binary_key
        && s.create_exptime.is_none()
}

/// Starts a storage command read into its item (`first`: the part of the
/// value already buffered; `line`: an ms's request line, kept for its
/// reply). None when it was answered (out of memory) and the rest of its
/// data block must be swallowed.
pub(crate) fn begin_incoming(
    ctx: &WorkerCtx,
    s: &Store<'_>,
    reply: &Reply<'_>,
    first: &[u8],
    out: &mut Replies<'_>,
) -> Option<IncomingStore> {
    let prefix = &ctx.shared.prefix;
    if prefix.enabled() {
        prefix.record_set(s.key);
    }
    // Checked again when the value is in (`finish_incoming`); held here
    // for what a refusal does (a set drops the key's value).
    let gate = ctx.store_gate(s.key);
    if gate.skips() {
        let _ = skipped_copy_item(ctx, s.mode, s.key, s.binary_key, reply, s.value_len, out);
        return None;
    }
    let w = write(ctx, s, first);
    watch::storing(ctx, s.key);
    match ctx.store().begin_incoming(ctx.head, &w, s.value_len) {
        Ok(item) => Some(IncomingStore {
            item,
            mode: s.mode,
            exptime: w.exptime,
            flags: s.flags,
            reply: match reply {
                Reply::Text { noreply } => IncomingReply::Text { noreply: *noreply },
                Reply::Meta(m) => IncomingReply::Meta {
                    line: m.tokens.line().to_vec(),
                },
                Reply::Binary(r) => IncomingReply::Binary(*r),
            },
        }),
        Err(status) => {
            if changed(status) {
                ctx.replicate_key(s.key);
                gate.wrote();
            }
            let _ = store_reply(ctx, s.mode, s.key, s.binary_key, reply, status, 0, 0, out);
            None
        }
    }
}

/// Completes a storage command read into its item, once its value is in:
/// `terminated` says whether `\r\n` followed it (always true in binary).
pub(crate) fn finish_incoming(
    ctx: &WorkerCtx,
    incoming: IncomingStore,
    terminated: bool,
    out: &mut Replies<'_>,
) -> Done {
    ctx.stats.set_cmds.incr();
    let store = ctx.store();
    let IncomingStore {
        item,
        mode,
        reply,
        exptime,
        flags,
    } = incoming;
    // The request's reply as it arrived (an ms line parsed again: its
    // flags, key and whether the key is binary).
    let mut keys = osmium_protocol::request::KeyBuffer::new();
    let (reply, key, binary_key): (Reply<'_>, &[u8], bool) = match &reply {
        IncomingReply::Text { noreply } => (Reply::Text { noreply: *noreply }, &[], false),
        IncomingReply::Binary(r) => (Reply::Binary(*r), &[], false),
        IncomingReply::Meta { line } => {
            let req = osmium_protocol::ascii::parse_line(line, &mut keys);
            match req.command {
                osmium_protocol::request::Command::Store(s) => (req.reply, s.key, s.binary_key),
                _ => (req.reply, &[], false),
            }
        }
    };
    if !terminated {
        store.abandon_incoming(item);
        return answer(out, &reply, Outcome::Status(Status::BadChunk));
    }
    let size = item.value_len();
    ctx.hot_write(item.key(), size);
    // The key, for replication, before the item is handed over.
    let mut repl_key = [0u8; 256];
    let logged = ctx.shared.logger.watching(crate::logger::MUTATIONS);
    let repl_key_len = if ctx.repl.is_some() || logged {
        let k = item.key();
        let n = k.len().min(repl_key.len());
        repl_key[..n].copy_from_slice(&k[..n]);
        n
    } else {
        0
    };
    let gate = ctx.store_gate(&repl_key[..repl_key_len]);
    if gate.skips() {
        store.abandon_incoming(item);
        return skipped_copy_item(ctx, mode, key, binary_key, &reply, size, out);
    }
    let (status, cas) = store.finish_incoming(ctx.head, item);
    if repl_key_len > 0 && changed(status) {
        ctx.replicate_key(&repl_key[..repl_key_len]);
        gate.wrote();
    }
    drop(gate);
    if logged {
        watch::stored(
            ctx,
            watch::Stored {
                key: &repl_key[..repl_key_len],
                mode,
                status,
                exptime,
                flags,
                size,
            },
        );
    }
    store_reply(ctx, mode, key, binary_key, &reply, status, cas, size, out)
}
