//! The binary protocol (protocol-binary.txt): executes the binary requests
//! buffered in a session against the store and appends memcached 1.6.18's
//! response packets, stat accounting included (proto_bin.c is the model;
//! the pure framing and validation are in `osmium_protocol::binary`).
//!
//! A request is dispatched once its header, extras and key are buffered.
//! Storage commands then wait for their value (a value over the item size
//! limit is refused at once and swallowed as it arrives), unknown opcodes
//! have the rest of their body skipped (by the packet framing, where 1.6.18
//! skips body_len bytes more), VERBOSITY sets the level (1.6.18 does not
//! implement it), and STAT leaves any body past its key to be
//! read as the next request, exactly as memcached does. GET and SET copy
//! between the connection's buffers and item memory without allocating.

use crate::direct::Direct;
use std::sync::atomic::Ordering;

use osmium_protocol::binary::{
    self as wire, opcode, status, Decoded, Request, RequestHeader, Scan, ARITH_DO_NOT_CREATE,
    HEADER_LEN,
};
use osmium_store::{
    CounterResult, CounterUpdate, Lookup, Removal, RemoveResult, StoreMode, StoreStatus, Write,
};

use crate::auth::{self, SaslOutcome};
use crate::session::{store_mode, Flow, IncomingStore, Session, INCOMING_MIN};
use crate::worker::WorkerCtx;

/// What the connection does after one request.
enum Next {
    /// Consume this many bytes and go on.
    Consume(usize),
    /// Consume `consumed` bytes, then discard `swallow` more as they come.
    Swallow { consumed: usize, swallow: usize },
    /// The value is not all here: wait until this many bytes are buffered.
    Wait(usize),
    /// Consume, send what is queued, then close.
    Close(usize),
    /// Consume; the rest of the value is read into this item.
    Incoming(usize, IncomingStore),
}

/// One request's outcome: what to consume, and whether memcached would
/// write its queued replies right away (a NOOP, most errors); only replies
/// written that way survive a later bad magic byte.
struct Step {
    next: Next,
    flushes: bool,
}

impl Step {
    fn go(consumed: usize) -> Step {
        Step {
            next: Next::Consume(consumed),
            flushes: false,
        }
    }
    fn flush(consumed: usize) -> Step {
        Step {
            next: Next::Consume(consumed),
            flushes: true,
        }
    }
    fn swallow(consumed: usize, swallow: usize) -> Step {
        Step {
            next: Next::Swallow { consumed, swallow },
            // memcached writes an error at once only when nothing is swallowed.
            flushes: swallow == 0,
        }
    }
    fn close(consumed: usize) -> Step {
        Step {
            next: Next::Close(consumed),
            flushes: true,
        }
    }
    fn wait(total: usize) -> Step {
        Step {
            next: Next::Wait(total),
            flushes: false,
        }
    }
}

/// Parses and executes buffered binary requests, up to `-R` of them.
pub fn process(session: &mut Session, ctx: &WorkerCtx) -> Flow {
    // Replies memcached would already have written: a bad magic byte drops
    // the connection and everything queued after this point.
    let mut committed = session.wbuf.len();
    let mut direct = Direct::new(session.fd, session.udp, session.wpos);
    let mut done = 0;
    loop {
        if !session.swallow_input() {
            return Flow::Wait;
        }
        if let Some(incoming) = &session.incoming {
            // A value read into its item: wait until it is all there.
            if !incoming.item.is_filled() {
                return Flow::Wait;
            }
            if session.must_yield(ctx, done) {
                return Flow::Yield;
            }
            done += 1;
            if let Some(incoming) = session.incoming.take() {
                if finish_store(ctx, incoming, &mut session.wbuf) {
                    committed = session.wbuf.len();
                }
            }
            continue;
        }
        let avail = session.rend - session.rstart;
        if avail == 0 || avail < session.need {
            return Flow::Wait;
        }
        if session.must_yield(ctx, done) {
            return Flow::Yield;
        }
        let input = &session.rbuf[session.rstart..session.rend];
        let header = match wire::scan_request(input) {
            Scan::Incomplete { need } => {
                session.need = need;
                return Flow::Wait;
            }
            Scan::BadMagic(magic) => {
                if ctx.shared.stats.verbosity.load(Ordering::Relaxed) > 0 {
                    eprintln!("Invalid magic:  {magic:x}");
                }
                if session.udp {
                    // conn_closing: UDP drops the replies since the last flush.
                    return Flow::Close;
                }
                session.wbuf.truncate(committed);
                session.close_after_write = true;
                return Flow::Wait;
            }
            Scan::Ready(h) => h,
        };
        session.need = 0;
        done += 1;
        session.ahead.step(&ctx.shared.store);
        let reply_start = session.wbuf.len();
        let step = execute(
            ctx,
            &header,
            input,
            &mut session.wbuf,
            &mut direct,
            session.udp,
            &mut session.authenticated,
            &mut session.sasl,
        );
        if std::mem::take(&mut direct.wrote) {
            // Everything before this reply has left, and the rest of the
            // reply (its value was last) must follow whatever comes next.
            committed = session.wbuf.len();
        }
        if step.flushes {
            committed = session.wbuf.len();
        }
        if session.udp && !matches!(step.next, Next::Wait(_)) {
            // One memcached response per request (a quiet miss is an empty
            // one), sent at once when the request flushes.
            session.responses.push(crate::session::ResponseMark {
                start: reply_start,
                suppressed: false,
                flush: step.flushes,
            });
        }
        let stop = session.udp && session.udp_stop_at_flush && step.flushes;
        match step.next {
            Next::Consume(n) => session.rstart += n,
            Next::Swallow { consumed, swallow } => {
                session.rstart += consumed;
                session.swallow = swallow;
            }
            Next::Wait(total) => {
                session.need = total;
                return Flow::Wait;
            }
            Next::Close(n) => {
                session.rstart += n;
                session.close_after_write = true;
                return Flow::Wait;
            }
            Next::Incoming(n, incoming) => {
                session.rstart += n;
                session.incoming = Some(incoming);
            }
        }
        if stop {
            // After a quit memcached's UDP connection ends its datagram at
            // every flush.
            return Flow::Wait;
        }
    }
}

/// Executes one request whose header, extras and key are in `input`.
#[allow(clippy::too_many_arguments)]
fn execute(
    ctx: &WorkerCtx,
    h: &RequestHeader,
    input: &[u8],
    out: &mut Vec<u8>,
    direct: &mut Direct,
    udp: bool,
    authenticated: &mut bool,
    sasl: &mut auth::SaslState,
) -> Step {
    let prefix = h.prefix_len();
    let key_start = HEADER_LEN + usize::from(h.extras_len);
    let extras = &input[HEADER_LEN..key_start];
    let key = &input[key_start..prefix];
    let (op, opaque) = (h.opcode, h.opaque);
    let decoded = wire::decode(h, extras, key);
    if decoded == Decoded::BadBodyLength {
        wire::put_error(out, op, status::UNKNOWN_COMMAND, opaque);
        return Step::close(prefix);
    }
    let sasl_enabled = ctx.shared.auth.sasl_enabled();
    if sasl_enabled && !*authenticated && !wire::allowed_unauthenticated(op) {
        wire::put_error(out, op, status::AUTH_ERROR, opaque);
        return Step::close(prefix);
    }
    let request = match decoded {
        Decoded::Request(r) => r,
        Decoded::UnknownCommand
            if op == opcode::VERBOSITY && extras.len() == 4 && key.is_empty() =>
        {
            // protocol-binary.txt's VERBOSITY (1.6.18 answers it as unknown):
            // set the level, answer with an empty success.
            let level = u32::from_be_bytes([extras[0], extras[1], extras[2], extras[3]]);
            ctx.shared
                .stats
                .verbosity
                .store(level.min(2), Ordering::Relaxed);
            wire::put_response(out, op, opaque, 0, b"");
            return Step::swallow(
                prefix,
                (HEADER_LEN + h.body_len as usize).saturating_sub(prefix),
            );
        }
        Decoded::UnknownCommand => {
            // The packet framing puts the next request right after the
            // body (1.6.18 swallows body_len more bytes past extras and key,
            // eating into the next packet; protocol-binary.txt wins).
            wire::put_error(out, op, status::UNKNOWN_COMMAND, opaque);
            return Step::swallow(
                prefix,
                (HEADER_LEN + h.body_len as usize).saturating_sub(prefix),
            );
        }
        Decoded::InvalidArguments | Decoded::BadBodyLength => {
            if ctx.shared.stats.verbosity.load(Ordering::Relaxed) > 0 {
                eprintln!("Protocol error (opcode {op:02x}), close connection");
            }
            wire::put_error(out, op, status::INVALID_ARGUMENTS, opaque);
            return Step::close(prefix);
        }
    };
    let shared = &ctx.shared;
    let store = &shared.store;
    let stats = &ctx.stats;
    let prefix_stats = &shared.stats.prefix;
    let use_cas = shared.stats.settings.use_cas;
    match request {
        Request::Get {
            key,
            quiet,
            with_key,
        } => get_or_touch(
            ctx, h, key, None, quiet, with_key, true, out, direct, prefix,
        ),
        Request::Touch { key, exptime } => get_or_touch(
            ctx,
            h,
            key,
            Some(exptime),
            false,
            false,
            false,
            out,
            direct,
            prefix,
        ),
        Request::GetAndTouch {
            key,
            exptime,
            quiet,
            with_key,
        } => get_or_touch(
            ctx,
            h,
            key,
            Some(exptime),
            quiet,
            with_key,
            true,
            out,
            direct,
            prefix,
        ),
        Request::Store {
            mode,
            key,
            flags,
            exptime,
            value_len,
            quiet,
        } => {
            let mode = store_mode(mode);
            let vlen = value_len as usize;
            if store.too_large(key.len(), flags, vlen) {
                if prefix_stats.enabled() {
                    prefix_stats.record_set(key);
                }
                wire::put_error(out, op, status::VALUE_TOO_LARGE, opaque);
                if mode == StoreMode::Set {
                    // memcached drops the old value rather than keep stale data.
                    store.delete(key);
                }
                return Step::swallow(prefix, vlen);
            }
            let total = prefix + vlen;
            // With -C there is no CAS to compare: memcached stores as usual.
            let cas_in = if use_cas { h.cas } else { 0 };
            let mode = if cas_in != 0 { StoreMode::Cas } else { mode };
            if input.len() < total {
                if vlen < INCOMING_MIN || udp {
                    return Step::wait(total);
                }
                // A large value: the rest of it is read into its item.
                if prefix_stats.enabled() {
                    prefix_stats.record_set(key);
                }
                let w = Write {
                    mode,
                    key,
                    flags,
                    exptime: store.clock().realtime(i64::from(exptime)),
                    value: &input[prefix..],
                    cas: cas_in,
                    ..Write::default()
                };
                return match store.begin_incoming(ctx.head, &w, vlen) {
                    Ok(item) => Step {
                        next: Next::Incoming(
                            input.len(),
                            IncomingStore {
                                item,
                                mode,
                                quiet,
                                opcode: op,
                                opaque,
                                meta_line: Vec::new(),
                            },
                        ),
                        flushes: false,
                    },
                    Err(result) => {
                        store_reply(ctx, op, opaque, quiet, mode, result, 0, out);
                        Step::swallow(input.len(), total - input.len())
                    }
                };
            }
            if prefix_stats.enabled() {
                prefix_stats.record_set(key);
            }
            stats.set_cmds.incr();
            let (result, cas) = store.store(
                ctx.head,
                &Write {
                    mode,
                    key,
                    flags,
                    exptime: store.clock().realtime(i64::from(exptime)),
                    value: &input[prefix..total],
                    cas: cas_in,
                    ..Write::default()
                },
            );
            if store_reply(ctx, op, opaque, quiet, mode, result, cas, out) {
                Step::flush(total)
            } else {
                Step::go(total)
            }
        }
        Request::Concat {
            mode,
            key,
            value_len,
            quiet,
        } => {
            let mode = store_mode(mode);
            let vlen = value_len as usize;
            if store.too_large(key.len(), 0, vlen) {
                if prefix_stats.enabled() {
                    prefix_stats.record_set(key);
                }
                wire::put_error(out, op, status::VALUE_TOO_LARGE, opaque);
                return Step::swallow(prefix, vlen);
            }
            let total = prefix + vlen;
            if input.len() < total {
                return Step::wait(total);
            }
            if prefix_stats.enabled() {
                prefix_stats.record_set(key);
            }
            stats.set_cmds.incr();
            let (result, cas) = store.store(
                ctx.head,
                &Write {
                    mode,
                    key,
                    flags: 0,
                    exptime: 0,
                    value: &input[prefix..total],
                    cas: if use_cas { h.cas } else { 0 },
                    ..Write::default()
                },
            );
            let code = match result {
                StoreStatus::Stored => {
                    if !quiet {
                        wire::put_response(out, op, opaque, cas, &[]);
                    }
                    return Step::go(total);
                }
                StoreStatus::Exists => status::KEY_EXISTS,
                StoreStatus::NotFound => status::KEY_NOT_FOUND,
                // Missing key, combined value too large, no memory.
                _ => status::ITEM_NOT_STORED,
            };
            wire::put_error(out, op, code, opaque);
            Step::flush(total)
        }
        Request::Delete { key, quiet } => {
            if prefix_stats.enabled() {
                prefix_stats.record_delete(key);
            }
            let only_if = Removal {
                if_cas: (h.cas != 0).then_some(h.cas),
                ..Removal::default()
            };
            match store.remove(ctx.head, key, &only_if) {
                RemoveResult::Removed | RemoveResult::Kept => {
                    stats.delete_hits.incr();
                    if !quiet {
                        wire::put_response(out, op, opaque, 0, &[]);
                    }
                    Step::go(prefix)
                }
                RemoveResult::Exists => {
                    wire::put_error(out, op, status::KEY_EXISTS, opaque);
                    Step::flush(prefix)
                }
                RemoveResult::NotFound => {
                    stats.delete_misses.incr();
                    wire::put_error(out, op, status::KEY_NOT_FOUND, opaque);
                    Step::flush(prefix)
                }
            }
        }
        Request::Arith {
            incr,
            key,
            delta,
            initial,
            exptime,
            quiet,
        } => {
            let only_if = CounterUpdate {
                if_cas: h.cas,
                ..CounterUpdate::default()
            };
            match store.counter(ctx.head, key, incr, delta, &only_if) {
                CounterResult::Done { value, cas, .. } => {
                    if incr {
                        stats.incr_hits.incr();
                    } else {
                        stats.decr_hits.incr();
                    }
                    if !quiet {
                        wire::put_response(out, op, opaque, cas, &value.to_be_bytes());
                    }
                    return Step::go(prefix);
                }
                CounterResult::NonNumeric => {
                    wire::put_error(out, op, status::NON_NUMERIC_VALUE, opaque)
                }
                CounterResult::Exists => wire::put_error(out, op, status::KEY_EXISTS, opaque),
                CounterResult::NotStored => {
                    wire::put_error(out, op, status::ITEM_NOT_STORED, opaque)
                }
                CounterResult::OutOfMemory => {
                    put_out_of_memory(out, op, opaque, b"Out of memory incrementing value")
                }
                CounterResult::NotFound if exptime != ARITH_DO_NOT_CREATE => {
                    let mut digits = itoa::Buffer::new();
                    let (result, cas) = store.store(
                        ctx.head,
                        &Write {
                            mode: StoreMode::Add,
                            key,
                            flags: 0,
                            exptime: store.clock().realtime(i64::from(exptime)),
                            value: digits.format(initial).as_bytes(),
                            ..Write::default()
                        },
                    );
                    match result {
                        StoreStatus::Stored => {
                            if !quiet {
                                wire::put_response(out, op, opaque, cas, &initial.to_be_bytes());
                            }
                            return Step::go(prefix);
                        }
                        StoreStatus::OutOfMemory | StoreStatus::TooLarge => {
                            put_out_of_memory(out, op, opaque, b"Out of memory allocating new item")
                        }
                        _ => wire::put_error(out, op, status::ITEM_NOT_STORED, opaque),
                    }
                }
                CounterResult::NotFound => {
                    if incr {
                        stats.incr_misses.incr();
                    } else {
                        stats.decr_misses.incr();
                    }
                    wire::put_error(out, op, status::KEY_NOT_FOUND, opaque);
                }
            }
            Step::flush(prefix)
        }
        Request::Quit { quiet } => {
            if !quiet {
                wire::put_response(out, op, opaque, 0, &[]);
            }
            Step::close(prefix)
        }
        Request::Flush { delay, quiet } => {
            if !shared.stats.settings.flush_enabled {
                // memcached answers a refused flush with "auth failure".
                wire::put_error(out, op, status::AUTH_ERROR, opaque);
                return Step::flush(prefix);
            }
            store.flush_all_after(i64::from(delay));
            stats.flush_cmds.incr();
            if !quiet {
                wire::put_response(out, op, opaque, 0, &[]);
            }
            Step::go(prefix)
        }
        Request::Noop => {
            wire::put_response(out, op, opaque, 0, &[]);
            Step::flush(prefix)
        }
        Request::Version => {
            wire::put_response(out, op, opaque, 0, crate::settings::VERSION.as_bytes());
            Step::go(prefix)
        }
        Request::Stat { group } => {
            if stat_reply(ctx, group, opaque, out) {
                Step::go(prefix)
            } else {
                Step::flush(prefix)
            }
        }
        Request::SaslListMechs => {
            if !sasl_enabled {
                wire::put_error(out, op, status::UNKNOWN_COMMAND, opaque);
                return Step::flush(prefix);
            }
            wire::put_response(out, op, opaque, 0, auth::SASL_MECHANISMS);
            Step::go(prefix)
        }
        Request::Sasl {
            step,
            mechanism,
            value_len,
        } => {
            let vlen = value_len as usize;
            if !sasl_enabled {
                wire::put_error(out, op, status::UNKNOWN_COMMAND, opaque);
                return Step::swallow(prefix, vlen);
            }
            if mechanism.len() > wire::SASL_MECHANISM_MAX_LENGTH {
                wire::put_error(out, op, status::INVALID_ARGUMENTS, opaque);
                return Step::swallow(prefix, vlen);
            }
            if store.too_large(mechanism.len(), 0, vlen) {
                // memcached reads the data into an item, which must fit.
                wire::put_error(out, op, status::OUT_OF_MEMORY, opaque);
                return Step::swallow(prefix, vlen);
            }
            let total = prefix + vlen;
            if input.len() < total {
                return Step::wait(total);
            }
            let data = &input[prefix..total];
            match auth::sasl_exchange(&shared.auth, sasl, authenticated, step, mechanism, data) {
                SaslOutcome::Authenticated => {
                    stats.auth_cmds.incr();
                    wire::put_response(out, op, opaque, 0, b"Authenticated");
                    Step::go(total)
                }
                SaslOutcome::Continue => {
                    wire::put_response_with_status(out, op, status::AUTH_CONTINUE, opaque, 0, &[]);
                    Step::flush(total)
                }
                SaslOutcome::Failed => {
                    stats.auth_cmds.incr();
                    stats.auth_errors.incr();
                    wire::put_error(out, op, status::AUTH_ERROR, opaque);
                    Step::flush(total)
                }
            }
        }
    }
}

/// memcached's `out_of_memory` in binary: status "out of memory" with the
/// text error minus its `SERVER_ERROR ` prefix.
/// The reply to SET/ADD/REPLACE (and quiet forms, and CAS through a SET),
/// and its stats; true if memcached writes it at once (an error).
#[allow(clippy::too_many_arguments)]
fn store_reply(
    ctx: &WorkerCtx,
    op: u8,
    opaque: u32,
    quiet: bool,
    mode: StoreMode,
    result: StoreStatus,
    cas: u64,
    out: &mut Vec<u8>,
) -> bool {
    let stats = &ctx.stats;
    let code = match result {
        StoreStatus::Stored => {
            if mode == StoreMode::Cas {
                stats.cas_hits.incr();
            }
            if !quiet {
                wire::put_response(out, op, opaque, cas, &[]);
            }
            return false;
        }
        StoreStatus::Exists => {
            stats.cas_badval.incr();
            status::KEY_EXISTS
        }
        StoreStatus::NotFound => {
            stats.cas_misses.incr();
            status::KEY_NOT_FOUND
        }
        StoreStatus::NotStored => match mode {
            StoreMode::Add => status::KEY_EXISTS,
            StoreMode::Replace => status::KEY_NOT_FOUND,
            _ => status::ITEM_NOT_STORED,
        },
        StoreStatus::TooLarge => status::VALUE_TOO_LARGE,
        StoreStatus::OutOfMemory => {
            // memcached fails the allocation before reading the value.
            put_out_of_memory(out, op, opaque, b"Out of memory allocating item");
            return true;
        }
    };
    wire::put_error(out, op, code, opaque);
    true
}

/// Publishes a value read into its item (see `IncomingStore`) and
/// replies; true if the reply is written at once (an error).
fn finish_store(ctx: &WorkerCtx, incoming: IncomingStore, out: &mut Vec<u8>) -> bool {
    ctx.stats.set_cmds.incr();
    let (result, cas) = ctx.shared.store.finish_incoming(ctx.head, incoming.item);
    store_reply(
        ctx,
        incoming.opcode,
        incoming.opaque,
        incoming.quiet,
        incoming.mode,
        result,
        cas,
        out,
    )
}

fn put_out_of_memory(out: &mut Vec<u8>, op: u8, opaque: u32, msg: &[u8]) {
    wire::put_response_with_status(out, op, status::OUT_OF_MEMORY, opaque, 0, msg);
}

/// GET/GETQ/GETK/GETKQ (`exptime` None), TOUCH and GAT/GATQ/GATK/GATKQ.
#[allow(clippy::too_many_arguments)]
fn get_or_touch(
    ctx: &WorkerCtx,
    h: &RequestHeader,
    key: &[u8],
    exptime: Option<u32>,
    quiet: bool,
    with_key: bool,
    with_value: bool,
    out: &mut Vec<u8>,
    direct: &mut Direct,
    consumed: usize,
) -> Step {
    let store = &ctx.shared.store;
    let stats = &ctx.stats;
    let (op, opaque) = (h.opcode, h.opaque);
    let touch = exptime.map(|e| store.clock().realtime(i64::from(e)));
    let found = store.get(key, touch, |it| {
        let value: &[u8] = if with_value { it.value() } else { &[] };
        let key = with_key.then_some(key);
        if direct.takes(value.len(), it.lock_free()) {
            wire::put_hit_head(out, op, opaque, it.cas(), it.flags(), key, value.len());
            direct.put_value(out, value, &[], true, stats);
        } else {
            wire::put_hit(out, op, opaque, it.cas(), it.flags(), key, value);
        }
    });
    let hit = matches!(found, Lookup::Hit(()));
    let prefix_stats = &ctx.shared.stats.prefix;
    if prefix_stats.enabled() {
        prefix_stats.record_get(key, hit);
    }
    match found {
        Lookup::Expired => stats.get_expired.incr(),
        Lookup::Flushed => stats.get_flushed.incr(),
        _ => {}
    }
    if touch.is_some() {
        stats.touch_cmds.incr();
        if hit {
            stats.touch_hits.incr();
        } else {
            stats.touch_misses.incr();
        }
    } else {
        stats.get_cmds.incr();
        if hit {
            stats.get_hits.incr();
        } else {
            stats.get_misses.incr();
        }
    }
    if hit || quiet {
        return Step::go(consumed);
    }
    if with_key {
        wire::put_keyed_miss(out, op, opaque, key);
        Step::go(consumed)
    } else {
        wire::put_error(out, op, status::KEY_NOT_FOUND, opaque);
        Step::flush(consumed)
    }
}

/// STAT: the text protocol's stats, one packet per `STAT name value` line,
/// then an empty packet. Groups as memcached's `process_bin_stat`: "reset",
/// "settings" and "detail ..." match as prefixes, other groups exactly.
/// False if the group is unknown (answered "not found").
fn stat_reply(ctx: &WorkerCtx, group: &[u8], opaque: u32, out: &mut Vec<u8>) -> bool {
    let sc = &ctx.shared.stats;
    let mut text = Vec::new();
    if group.is_empty() {
        sc.general(&mut text);
    } else if group.starts_with(b"reset") {
        sc.reset();
    } else if group.starts_with(b"settings") {
        sc.settings(&mut text);
    } else if let Some(detail) = group.strip_prefix(b"detail") {
        if detail.starts_with(b" dump") {
            let mut dump = Vec::new();
            sc.prefix.dump(&mut dump);
            wire::put_stat(out, opaque, b"detailed", &dump);
        } else if detail.starts_with(b" on") {
            sc.prefix.set_enabled(true);
        } else if detail.starts_with(b" off") {
            sc.prefix.set_enabled(false);
        } else {
            wire::put_error(out, opcode::STAT, status::KEY_NOT_FOUND, opaque);
            return false;
        }
    } else {
        match group {
            b"items" => sc.items(&mut text),
            b"slabs" => sc.slabs(&mut text),
            b"sizes" => text.extend_from_slice(b"STAT sizes_status disabled\r\n"),
            _ => {
                wire::put_error(out, opcode::STAT, status::KEY_NOT_FOUND, opaque);
                return false;
            }
        }
    }
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(stat) = line.strip_prefix(b"STAT ") else {
            continue;
        };
        let space = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
        let value = stat.get(space + 1..).unwrap_or(&[]);
        wire::put_stat(out, opaque, &stat[..space], value);
    }
    wire::put_stat(out, opaque, &[], &[]);
    true
}
