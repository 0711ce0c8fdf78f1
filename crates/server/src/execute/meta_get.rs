//! mg and me, as memcached's `process_mget_cmd` and
//! `process_meta_command`.
//!
//! mg's return flags are written in request order while the flags that
//! change the item (`T` a new TTL, `N` an item created on a miss) take
//! effect in that order too, so a `t` before `T` shows the old TTL and one
//! after it the new. The reply is built *before* the hit is recorded, so
//! `h` and `l` report the item's previous state. A recache token is won
//! (`W`) by `N` creating the item, by `R` when the TTL left is below its
//! argument, or by a stale item whose token nobody holds; `Z` says a token
//! was already sent, `X` that the item is stale.

use osmium_protocol::base64::base64_encode;
use osmium_protocol::request::{MetaGet, Reply};
use osmium_store::{memcached_item_total, Fetch, Lookup, Placeholder};

use super::Done;
use crate::compose::meta::{self, flag_key, flag_number, flag_opaque, flag_ttl, OPAQUE_TOO_LONG};
use crate::compose::output::Output;
use crate::context::WorkerCtx;

pub(crate) fn meta_get(
    ctx: &WorkerCtx,
    m: &MetaGet<'_>,
    reply: &Reply<'_>,
    out: &mut Output,
) -> Done {
    let Reply::Meta(reply) = reply else {
        return Done::CONTINUE;
    };
    let store = ctx.store();
    let stats = &ctx.stats;
    let clock = store.clock();
    let now = clock.now();
    let ttl = m.ttl.map(|t| clock.realtime(t));
    let recache = m.recache.map(|t| clock.realtime(t)).unwrap_or(0);
    let vivify_exptime = m.vivify.map(|n| clock.realtime(n));
    // A created item's expiry is the last of N and T in request order.
    let mut created_exptime = vivify_exptime;
    if vivify_exptime.is_some() {
        for tok in reply.flags() {
            match tok[0] {
                b'N' => created_exptime = vivify_exptime,
                b'T' => created_exptime = Some(ttl.unwrap_or(0)),
                _ => {}
            }
        }
    }
    let fetch = Fetch {
        record_hit: m.record_hit,
        new_exptime: ttl,
        create: created_exptime.map(|exptime| Placeholder {
            exptime,
            cas: m.new_cas.unwrap_or(0),
            binary_key: m.binary_key,
        }),
    };
    let start = out.len();
    let mut ttl_set = false;
    let mut bad_opaque = false;
    let mut sent_bytes = 0;
    let r = store.fetch(ctx.head, m.key, &fetch, |it, created| {
        let buf = out.buf();
        // The expiry as the flags before each token see it.
        let mut exptime = if created {
            vivify_exptime.unwrap_or(0)
        } else {
            it.exptime()
        };
        // With C, the value is sent only if the CAS unique differs.
        let send_value = m.value && m.if_cas.is_none_or(|c| c != it.cas());
        if send_value {
            buf.extend_from_slice(b"VA ");
            meta::number(buf, it.value_len());
        } else {
            buf.extend_from_slice(b"HD");
        }
        let mut won = false;
        for tok in reply.flags() {
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
                b's' => flag_number(buf, b's', it.value_len()),
                b't' => flag_ttl(buf, exptime, now),
                b'c' => flag_number(buf, b'c', it.cas()),
                b'f' => flag_number(buf, b'f', it.flags()),
                b'l' => flag_number(buf, b'l', now.wrapping_sub(it.atime())),
                b'h' => buf.extend_from_slice(if it.fetched() { b" h1" } else { b" h0" }),
                b'O' if !flag_opaque(buf, tok) => {
                    bad_opaque = true;
                    return;
                }
                b'k' => flag_key(buf, it.key(), it.binary_key()),
                _ => {}
            }
        }
        // Z before W, so a winner never also sees Z.
        if it.token_sent() {
            buf.extend_from_slice(b" Z");
        }
        if it.stale() {
            buf.extend_from_slice(b" X");
            if !it.token_sent() {
                won = true;
            }
        }
        if won {
            buf.extend_from_slice(b" W");
            it.mark_token_sent();
        }
        buf.extend_from_slice(b"\r\n");
        if send_value {
            // The value ends the reply: nothing after this point truncates
            // it, so it may be queued from item memory (sent right after
            // this request).
            sent_bytes = it.value_len();
            out.put_value(it.value(), b"\r\n", it.lock_free(), &ctx.stats);
        }
    });
    if bad_opaque {
        meta::error(out, start, OPAQUE_TOO_LONG);
        return Done::CONTINUE;
    }
    ctx.hot_read(m.key, sent_bytes);
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
            // Neither touched nor created: nothing changed.
            ctx.changed_nothing();
            match miss {
                Lookup::Expired => stats.get_expired.incr(),
                Lookup::Flushed => stats.get_flushed.incr(),
                _ => {}
            }
            stats.get_misses.incr();
            stats.get_cmds.incr();
            out.buf().extend_from_slice(b"EN");
            if !meta::opaque_and_key(out.buf(), reply, m.key) {
                meta::error(out, start, OPAQUE_TOO_LONG);
                return Done::CONTINUE;
            }
            meta::finish(out, start, reply.quiet);
        }
    }
    Done::CONTINUE
}

/// memcached's slab class for an item of `ntotal` bytes with default
/// slab settings (-n 48, -f 1.25, 512 KiB chunks), for `me`'s `cls=` and
/// the dumps.
pub(crate) fn slab_class(ntotal: usize) -> u32 {
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

/// The slab class memcached would keep an item in (a chunked item's
/// header lives in a small class).
pub(crate) fn item_class(key_len: usize, flags: u32, value_len: usize, use_cas: bool) -> u32 {
    let ntotal = memcached_item_total(key_len, flags, value_len, use_cas);
    if ntotal > 524288 {
        let header = 48 + key_len + 1 + if flags == 0 { 0 } else { 4 } + 48;
        slab_class(header + if use_cas { 8 } else { 0 })
    } else {
        slab_class(ntotal)
    }
}

/// me: an item's metadata, or EN.
pub(crate) fn meta_debug(ctx: &WorkerCtx, key: &[u8], _binary_key: bool, out: &mut Output) -> Done {
    let store = ctx.store();
    let use_cas = store.config().use_cas;
    let now = store.clock().now();
    let fetch = Fetch {
        record_hit: false,
        new_exptime: None,
        create: None,
    };
    let r = store.fetch(ctx.head, key, &fetch, |it, _| {
        let buf = out.buf();
        buf.extend_from_slice(b"ME ");
        if it.binary_key() {
            base64_encode(it.key(), buf);
        } else {
            buf.extend_from_slice(it.key());
        }
        let exp: i32 = if it.exptime() == 0 {
            -1
        } else {
            it.exptime().wrapping_sub(now) as i32
        };
        let key_len = it.key().len();
        let ntotal = memcached_item_total(key_len, it.flags(), it.value_len(), use_cas);
        let cls = item_class(key_len, it.flags(), it.value_len(), use_cas);
        buf.extend_from_slice(b" exp=");
        meta::number(buf, exp);
        buf.extend_from_slice(b" la=");
        meta::number(buf, now.wrapping_sub(it.atime()));
        buf.extend_from_slice(b" cas=");
        meta::number(buf, it.cas());
        buf.extend_from_slice(if it.fetched() {
            b" fetch=yes cls="
        } else {
            b" fetch=no cls="
        });
        meta::number(buf, cls);
        buf.extend_from_slice(b" size=");
        meta::number(buf, ntotal);
        buf.extend_from_slice(b"\r\n");
    });
    if !matches!(r, Lookup::Hit(())) {
        out.buf().extend_from_slice(b"EN\r\n");
    }
    ctx.stats.meta_cmds.incr();
    Done::CONTINUE
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
