//! Executes meta commands (`mg ms md ma me`; `mn` is answered by the
//! session) against the store and writes their replies, byte for byte as
//! memcached 1.6's proto_text.c does: return flags in request order,
//! `q` hiding only the nominal reply, errors always sent, and the stat
//! counters memcached bumps for each outcome.
//!
//! Where protocol.txt (1.6.45) goes beyond 1.6.18 this follows
//! protocol.txt: `E` sets an explicit CAS (mg N, ms, md I/x, ma), md `x`
//! empties the value, ms `N` vivifies in append/prepend mode, ms `s`
//! returns the stored size, mg `C` with `v` sends the value only when the
//! CAS differs, opaques may be 32 bytes, ma `q` hides `HD` even after `N`
//! created the item, and `me exp=` is the seconds left.

use crate::direct::Direct;
use osmium_protocol::meta::{
    base64_encode, parse_meta, MetaParse, MetaRequest, MAX_OPAQUE_LENGTH, OPAQUE_TOO_LONG,
};
use osmium_protocol::text::Tokens;
use osmium_store::{
    memcached_item_total, CounterResult, CounterUpdate, Fetch, Lookup, Placeholder, Removal,
    RemoveResult, StoreMode, StoreStatus, Write,
};

use crate::session::IncomingStore;
use crate::worker::WorkerCtx;

#[inline]
fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
}

/// ` <c><number>`: one returned flag.
#[inline]
fn flag_number(out: &mut Vec<u8>, c: u8, n: impl itoa::Integer) {
    out.push(b' ');
    out.push(c);
    number(out, n);
}

/// ` k<key>`, base64 encoded and followed by ` b` for binary keys.
fn flag_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    if binary {
        base64_encode(key, out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

/// ` t<seconds left>`, or ` t-1` for an item that never expires.
fn flag_ttl(out: &mut Vec<u8>, exptime: u32, now: u32) {
    if exptime == 0 {
        out.extend_from_slice(b" t-1");
    } else {
        flag_number(out, b't', exptime.wrapping_sub(now));
    }
}

/// The `O` and `k` flags of a reply that has no item to describe.
fn opaque_and_key(out: &mut Vec<u8>, req: &MetaRequest<'_>) -> bool {
    for tok in req.flag_tokens() {
        match tok[0] {
            b'O' => {
                if tok.len() > MAX_OPAQUE_LENGTH {
                    return false;
                }
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            b'k' => flag_key(out, req.key(), req.key_binary),
            _ => {}
        }
    }
    true
}

/// Replaces whatever this command wrote with an error line.
fn error(out: &mut Vec<u8>, start: usize, msg: &str) {
    out.truncate(start);
    out.extend_from_slice(msg.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// mg, md, ma, me. (ms is split in two: `refuse_set` at the request line,
/// `complete_set` once the data block is in.)
pub fn execute(ctx: &WorkerCtx, req: &MetaRequest<'_>, out: &mut Vec<u8>, direct: &mut Direct) {
    use osmium_protocol::meta::MetaCommand;
    match req.command {
        MetaCommand::Get => meta_get(ctx, req, out, direct),
        MetaCommand::Delete => meta_delete(ctx, req, out),
        MetaCommand::Arith => meta_arith(ctx, req, out),
        MetaCommand::Debug => meta_debug(ctx, req, out),
        MetaCommand::Set => unreachable!("ms is completed by the session"),
    }
}

fn meta_get(ctx: &WorkerCtx, req: &MetaRequest<'_>, out: &mut Vec<u8>, direct: &mut Direct) {
    let store = &ctx.shared.store;
    let stats = &ctx.stats;
    let clock = store.clock();
    let f = &req.flags;
    let now = clock.now();
    let ttl = f.ttl.map(|t| clock.expiry(t));
    let recache = f.recache.map(|t| clock.expiry(t)).unwrap_or(0);
    // A created item's expiry is the last of N and T in request order.
    let vivify_exptime = f.vivify.map(|n| clock.expiry(n));
    let mut created_exptime = vivify_exptime;
    if vivify_exptime.is_some() {
        for tok in req.flag_tokens() {
            match tok[0] {
                b'N' => created_exptime = vivify_exptime,
                b'T' => created_exptime = Some(ttl.unwrap_or(0)),
                _ => {}
            }
        }
    }
    let vivify = created_exptime.map(|exptime| Placeholder {
        exptime,
        cas: f.new_cas.unwrap_or(0),
        binary_key: req.key_binary,
    });
    let start = out.len();
    let mut ttl_set = false;
    let mut bad_opaque = false;
    let touch = f.ttl.is_some().then(|| ttl.unwrap_or(0));
    let r = store.fetch(
        ctx.head,
        req.key(),
        &Fetch {
            record_hit: !f.no_update,
            new_exptime: touch,
            create: vivify,
        },
        |it, created| {
            // The expiry as the flags before each token see it.
            let mut exptime = if created {
                vivify_exptime.unwrap_or(0)
            } else {
                it.exptime()
            };
            // protocol.txt: with C, the value is sent only if the CAS differs.
            let send_value = f.value && f.compare_cas.is_none_or(|c| c != it.cas());
            if send_value {
                out.extend_from_slice(b"VA ");
                number(out, it.value_len());
            } else {
                out.extend_from_slice(b"HD");
            }
            let mut won = false;
            for tok in req.flag_tokens() {
                match tok[0] {
                    b'T' => {
                        ttl_set = true;
                        exptime = ttl.unwrap_or(0);
                    }
                    b'N' if created => {
                        exptime = vivify_exptime.unwrap_or(0);
                        won = true;
                    }
                    b'R' if !it.token_sent() && !created && exptime != 0 && exptime < recache => {
                        won = true;
                    }
                    b's' => flag_number(out, b's', it.value_len()),
                    b't' => flag_ttl(out, exptime, now),
                    b'c' => flag_number(out, b'c', it.cas()),
                    b'f' => flag_number(out, b'f', it.flags()),
                    b'l' => flag_number(out, b'l', now.wrapping_sub(it.atime())),
                    b'h' => out.extend_from_slice(if it.fetched() { b" h1" } else { b" h0" }),
                    b'O' => {
                        if tok.len() > MAX_OPAQUE_LENGTH {
                            bad_opaque = true;
                            return;
                        }
                        out.push(b' ');
                        out.extend_from_slice(tok);
                    }
                    b'k' => flag_key(out, it.key(), it.binary_key()),
                    _ => {}
                }
            }
            // Z before W, so a winner never also sees Z.
            if it.token_sent() {
                out.extend_from_slice(b" Z");
            }
            if it.stale() {
                out.extend_from_slice(b" X");
                if !it.token_sent() {
                    won = true;
                }
            }
            if won {
                out.extend_from_slice(b" W");
                it.mark_token_sent();
            }
            out.extend_from_slice(b"\r\n");
            if send_value {
                // The value is the reply's last part: nothing after this
                // point truncates it, so it may go to the socket directly.
                direct.put_value(out, it.value(), b"\r\n", it.lock_free(), &ctx.stats);
            }
        },
    );
    if bad_opaque {
        error(out, start, OPAQUE_TOO_LONG);
        return;
    }
    match r {
        Lookup::Hit(()) => {
            if ttl_set {
                stats.touch_cmds.incr();
                stats.touch_hits.incr();
            } else {
                stats.get_cmds.incr();
                stats.get_hits.incr();
            }
        }
        miss => {
            match miss {
                Lookup::Expired => stats.get_expired.incr(),
                Lookup::Flushed => stats.get_flushed.incr(),
                _ => {}
            }
            stats.get_misses.incr();
            stats.get_cmds.incr();
            out.extend_from_slice(b"EN");
            if !opaque_and_key(out, req) {
                error(out, start, OPAQUE_TOO_LONG);
                return;
            }
            if f.no_reply {
                out.truncate(start);
            } else {
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// ms, at the request line: memcached refuses a value that can never fit
/// before reading it (and drops the key's current value). True when the
/// data block must be swallowed.
pub fn refuse_set(ctx: &WorkerCtx, req: &MetaRequest<'_>, out: &mut Vec<u8>) -> bool {
    let store = &ctx.shared.store;
    if !store.too_large(req.key().len(), req.flags.client_flags, req.data_len) {
        return false;
    }
    ctx.stats.store_too_large.incr();
    out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
    store.delete(req.key());
    true
}

/// ms, once its data block (with terminator) is buffered.
pub fn complete_set(ctx: &WorkerCtx, req: &MetaRequest<'_>, block: &[u8], out: &mut Vec<u8>) {
    let store = &ctx.shared.store;
    let stats = &ctx.stats;
    let f = &req.flags;
    stats.set_cmds.incr();
    let vlen = req.data_len;
    if &block[vlen..vlen + 2] != b"\r\n" {
        out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        return;
    }
    let mode = set_mode(req);
    let clock = store.clock();
    let appending = matches!(mode, StoreMode::Append | StoreMode::Prepend);
    let w = Write {
        mode,
        key: req.key(),
        flags: f.client_flags,
        exptime: clock.expiry(f.ttl.unwrap_or(0)),
        value: &block[..vlen],
        cas: f.compare_cas.unwrap_or(0),
        stale_if_older: f.set_stale && mode == StoreMode::Cas,
        new_cas: f.new_cas.unwrap_or(0),
        binary_key: req.key_binary,
        create_exptime: if appending {
            f.vivify.map(|n| clock.expiry(n))
        } else {
            None
        },
    };
    let (status, cas, size) = store.store_sized(ctx.head, &w);
    set_reply(ctx, req, mode, status, cas, size, out);
}

/// The store mode of an ms.
fn set_mode(req: &MetaRequest<'_>) -> StoreMode {
    let f = &req.flags;
    let mode = match f.mode {
        b'E' => StoreMode::Add,
        b'A' => StoreMode::Append,
        b'P' => StoreMode::Prepend,
        b'R' => StoreMode::Replace,
        _ => StoreMode::Set,
    };
    if f.compare_cas.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace) {
        StoreMode::Cas
    } else {
        mode
    }
}

/// Whether an ms's data block, of which `have` bytes are buffered, is to
/// be read straight into its item (see `session::IncomingStore`): large,
/// not all here, and none of what needs the old item or special item
/// bits (append/prepend, I, E, b).
pub fn reads_into_item(req: &MetaRequest<'_>, have: usize) -> bool {
    let f = &req.flags;
    req.data_len >= crate::session::INCOMING_MIN
        && have < req.data_len + 2
        && matches!(
            set_mode(req),
            StoreMode::Set | StoreMode::Add | StoreMode::Replace | StoreMode::Cas
        )
        && !f.set_stale
        && f.new_cas.is_none()
        && !req.key_binary
}

/// Starts an ms whose data block is read into its item (`line` is its
/// request line, kept for the reply; `first` the part of the value
/// already buffered). None when it was answered (out of memory) and the
/// rest of its data block must be swallowed.
pub fn begin_set(
    ctx: &WorkerCtx,
    req: &MetaRequest<'_>,
    line: &[u8],
    first: &[u8],
    out: &mut Vec<u8>,
) -> Option<IncomingStore> {
    let store = &ctx.shared.store;
    let f = &req.flags;
    let mode = set_mode(req);
    let w = Write {
        mode,
        key: req.key(),
        flags: f.client_flags,
        exptime: store.clock().expiry(f.ttl.unwrap_or(0)),
        value: first,
        cas: f.compare_cas.unwrap_or(0),
        ..Write::default()
    };
    match store.begin_incoming(ctx.head, &w, req.data_len) {
        Ok(item) => Some(IncomingStore {
            item,
            mode,
            quiet: f.no_reply,
            opcode: 0,
            opaque: 0,
            meta_line: line.to_vec(),
        }),
        Err(status) => {
            set_reply(ctx, req, mode, status, 0, 0, out);
            None
        }
    }
}

/// Completes an ms read into its item, once its data block is in:
/// `terminated` says whether `\r\n` followed it.
pub fn finish_set(ctx: &WorkerCtx, incoming: IncomingStore, terminated: bool, out: &mut Vec<u8>) {
    let store = &ctx.shared.store;
    ctx.stats.set_cmds.incr();
    if !terminated {
        store.abandon_incoming(incoming.item);
        out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        return;
    }
    let (status, cas) = store.finish_incoming(ctx.head, incoming.item);
    // The line parsed as this request when it arrived.
    if let MetaParse::Request(req) = parse_meta(Tokens::new(&incoming.meta_line)) {
        set_reply(ctx, &req, incoming.mode, status, cas, req.data_len, out);
    }
}

/// An ms's reply (status and its return flags) and stats.
fn set_reply(
    ctx: &WorkerCtx,
    req: &MetaRequest<'_>,
    mode: StoreMode,
    status: StoreStatus,
    cas: u64,
    size: usize,
    out: &mut Vec<u8>,
) {
    let stats = &ctx.stats;
    let f = &req.flags;
    let is_cas = mode == StoreMode::Cas;
    let code: &[u8] = match status {
        StoreStatus::Stored => {
            if is_cas {
                stats.cas_hits.incr();
            }
            if f.no_reply {
                return;
            }
            b"HD"
        }
        StoreStatus::Exists => {
            if is_cas {
                stats.cas_badval.incr();
            }
            b"EX"
        }
        StoreStatus::NotFound => {
            stats.cas_misses.incr();
            b"NF"
        }
        StoreStatus::NotStored => b"NS",
        StoreStatus::TooLarge => {
            stats.store_too_large.incr();
            out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
            return;
        }
        StoreStatus::OutOfMemory => {
            stats.store_no_memory.incr();
            out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n");
            return;
        }
    };
    out.extend_from_slice(code);
    let stored = status == StoreStatus::Stored;
    for tok in req.flag_tokens() {
        match tok[0] {
            b'O' => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            b'k' => flag_key(out, req.key(), req.key_binary),
            b'c' => flag_number(out, b'c', if stored { cas } else { 0 }),
            b's' if stored => flag_number(out, b's', size),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

fn meta_delete(ctx: &WorkerCtx, req: &MetaRequest<'_>, out: &mut Vec<u8>) {
    let store = &ctx.shared.store;
    let stats = &ctx.stats;
    let f = &req.flags;
    let d = Removal {
        if_cas: f.compare_cas,
        mark_stale: f.set_stale,
        exptime: f.ttl.map(|t| store.clock().expiry(t)),
        new_cas: f.new_cas.unwrap_or(0),
        drop_value: f.remove_value,
        flags: f.client_flags,
    };
    let code: &[u8] = match store.remove(ctx.head, req.key(), &d) {
        RemoveResult::Removed | RemoveResult::Kept => {
            if f.no_reply {
                return;
            }
            b"HD"
        }
        RemoveResult::Exists => {
            stats.delete_misses.incr();
            b"EX"
        }
        RemoveResult::NotFound => {
            stats.delete_misses.incr();
            b"NF"
        }
    };
    out.extend_from_slice(code);
    // Opaque lengths were checked at parse time.
    opaque_and_key(out, req);
    out.extend_from_slice(b"\r\n");
    // As memcached: only a real removal is a delete hit.
    if code == b"HD" && !f.set_stale && !f.remove_value {
        stats.delete_hits.incr();
    }
}

fn meta_arith(ctx: &WorkerCtx, req: &MetaRequest<'_>, out: &mut Vec<u8>) {
    let store = &ctx.shared.store;
    let stats = &ctx.stats;
    let clock = store.clock();
    let f = &req.flags;
    let incr = !matches!(f.mode, b'D' | b'-');
    let ttl = f.ttl.map(|t| clock.expiry(t));
    let viv = f.vivify.map(|n| clock.expiry(n));
    // A created item ends with whichever of T and N came last.
    let mut created_exptime = 0;
    for tok in req.flag_tokens() {
        match tok[0] {
            b'T' => created_exptime = ttl.unwrap_or(0),
            b'N' => created_exptime = viv.unwrap_or(0),
            _ => {}
        }
    }
    let m = CounterUpdate {
        if_cas: f.compare_cas.unwrap_or(0),
        new_cas: f.new_cas.unwrap_or(0),
        exptime: ttl,
        create: viv.map(|_| (f.initial, created_exptime)),
    };
    let start = out.len();
    let key = req.key();
    match store.counter(ctx.head, key, incr, f.delta, &m) {
        CounterResult::Done {
            value,
            cas,
            exptime,
            created,
        } => {
            if !created {
                if incr {
                    stats.incr_hits.incr();
                } else {
                    stats.decr_hits.incr();
                }
            }
            let mut digits = itoa::Buffer::new();
            let text = digits.format(value).as_bytes();
            if f.value {
                out.extend_from_slice(b"VA ");
                number(out, text.len());
            } else {
                out.extend_from_slice(b"HD");
            }
            let now = clock.now();
            let mut shown_exptime = exptime;
            for tok in req.flag_tokens() {
                match tok[0] {
                    b'c' => flag_number(out, b'c', cas),
                    b't' => flag_ttl(out, shown_exptime, now),
                    b'T' => shown_exptime = ttl.unwrap_or(0),
                    b'N' if created => shown_exptime = viv.unwrap_or(0),
                    b'O' => {
                        if tok.len() > MAX_OPAQUE_LENGTH {
                            error(out, start, OPAQUE_TOO_LONG);
                            return;
                        }
                        out.push(b' ');
                        out.extend_from_slice(tok);
                    }
                    b'k' => flag_key(out, key, req.key_binary),
                    _ => {}
                }
            }
            if f.value {
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(text);
            }
            out.extend_from_slice(b"\r\n");
            // protocol.txt: q hides HD (1.6.18 still sends it after N created
            // the item).
            if f.no_reply {
                out.truncate(start);
            }
        }
        CounterResult::NonNumeric => out
            .extend_from_slice(b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"),
        CounterResult::OutOfMemory => out.extend_from_slice(b"SERVER_ERROR out of memory\r\n"),
        other => {
            let code: &[u8] = match other {
                CounterResult::NotFound => {
                    if incr {
                        stats.incr_misses.incr();
                    } else {
                        stats.decr_misses.incr();
                    }
                    b"NF"
                }
                CounterResult::Exists => b"EX",
                _ => b"NS",
            };
            out.extend_from_slice(code);
            if !opaque_and_key(out, req) {
                error(out, start, OPAQUE_TOO_LONG);
                return;
            }
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// memcached's slab class for an item of `ntotal` bytes with default
/// slab settings (-n 48, -f 1.25, 512 KiB chunks), for `me`'s `cls=`.
fn slab_class(ntotal: usize) -> u32 {
    const SLAB_CHUNK_MAX: f64 = 524288.0;
    let mut size = 96.0f64;
    let mut id = 1u32;
    loop {
        if size >= SLAB_CHUNK_MAX / 1.25 {
            // The last class holds chunks of the maximum size.
            return id;
        }
        let s = (size as usize).next_multiple_of(8);
        if ntotal <= s {
            return id;
        }
        size = s as f64 * 1.25;
        id += 1;
    }
}

fn meta_debug(ctx: &WorkerCtx, req: &MetaRequest<'_>, out: &mut Vec<u8>) {
    let store = &ctx.shared.store;
    let use_cas = store.config().use_cas;
    let now = store.clock().now();
    ctx.stats.meta_cmds.incr();
    let r = store.fetch(ctx.head, req.key(), &Fetch::default(), |it, _| {
        out.extend_from_slice(b"ME ");
        if it.binary_key() {
            base64_encode(it.key(), out);
        } else {
            out.extend_from_slice(it.key());
        }
        let exp: i32 = if it.exptime() == 0 {
            -1
        } else {
            // protocol.txt: the expiration time, as seconds left (1.6.18
            // prints the negated value).
            it.exptime().wrapping_sub(now) as i32
        };
        let key_len = it.key().len();
        let ntotal = memcached_item_total(key_len, it.flags(), it.value_len(), use_cas);
        let cls = if ntotal > 524288 {
            // A chunked item: its header lives in a small class.
            let header = 48 + key_len + 1 + if it.flags() == 0 { 0 } else { 4 } + 48;
            slab_class(header + if use_cas { 8 } else { 0 })
        } else {
            slab_class(ntotal)
        };
        out.extend_from_slice(b" exp=");
        number(out, exp);
        out.extend_from_slice(b" la=");
        number(out, now.wrapping_sub(it.atime()));
        out.extend_from_slice(b" cas=");
        number(out, it.cas());
        out.extend_from_slice(if it.fetched() {
            b" fetch=yes cls="
        } else {
            b" fetch=no cls="
        });
        number(out, cls);
        out.extend_from_slice(b" size=");
        number(out, ntotal);
        out.extend_from_slice(b"\r\n");
    });
    if !matches!(r, Lookup::Hit(())) {
        out.extend_from_slice(b"EN\r\n");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slab_classes_match_memcached_defaults() {
        // memcached 1.6 -vv: class 1 is 96 bytes, 2 is 120, 3 is 152.
        assert_eq!(super::slab_class(64), 1);
        assert_eq!(super::slab_class(96), 1);
        assert_eq!(super::slab_class(97), 2);
        assert_eq!(super::slab_class(120), 2);
        assert_eq!(super::slab_class(121), 3);
    }
}
