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

use osmium_protocol::request::{MetaGet, MetaReply, Reply};
use osmium_store::{memcached_item_total, Fetch, Lookup, Placeholder};

use super::Done;
use crate::compose;
use crate::compose::outcome::{ItemDebug, MetaHit, Outcome};
use crate::compose::replies::Replies;
use crate::context::WorkerCtx;

pub(crate) fn meta_get(
    ctx: &WorkerCtx,
    m: &MetaGet<'_>,
    reply: &Reply<'_>,
    out: &mut Replies<'_>,
) -> Done {
    let req_reply = reply;
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
    // An `O` longer than memcached returns makes the reply an error
    // (the composer's); the fetch still happens, nothing else does.
    let writable = !compose::unwritable(req_reply);
    let mut sent_bytes = 0;
    let r = store.fetch(ctx.head, m.key, &fetch, |it, created| {
        // The expiry as the flags before the first T or N see it.
        let exptime = if created {
            vivify_exptime.unwrap_or(0)
        } else {
            it.exptime()
        };
        // With C, the value is sent only if the CAS unique differs.
        let send_value = m.value && m.if_cas.is_none_or(|c| c != it.cas());
        // N creating the item wins the token; R when the TTL left (as
        // the T before it set it) is below its argument; a stale item
        // whose token nobody holds.
        let won = created
            || (!it.token_sent()
                && (it.stale()
                    || (m.recache.is_some() && recache_due(reply, exptime, ttl, recache))));
        let hit = MetaHit {
            item: &it,
            send_value,
            exptime,
            ttl_exptime: ttl.unwrap_or(0),
            created,
            vivify_exptime: vivify_exptime.unwrap_or(0),
            now,
            won,
        };
        out.say(req_reply, &Outcome::MetaHit(&hit));
        if writable {
            if won {
                it.mark_token_sent();
            }
            if send_value {
                sent_bytes = it.value_len();
            }
        }
    });
    let r = if out.take_corrupt() {
        // Its packed value did not decode: a miss, and the item goes.
        store.drop_corrupt(m.key);
        sent_bytes = 0;
        Lookup::Miss
    } else {
        r
    };
    if !writable && matches!(r, Lookup::Hit(())) {
        return Done::CONTINUE;
    }
    ctx.hot_read(m.key, sent_bytes);
    match r {
        Lookup::Hit(()) => {
            if m.ttl.is_some() {
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
            out.say(req_reply, &Outcome::MetaMiss { key: m.key });
        }
    }
    Done::CONTINUE
}

/// Whether `R` wins the recache token: the expiry its position in the
/// flags sees (the item's `exptime`, or a `T` before it) is set and
/// below `recache`.
fn recache_due(reply: &MetaReply<'_>, mut exptime: u32, ttl: Option<u32>, recache: u32) -> bool {
    for tok in reply.flags() {
        match tok[0] {
            b'T' => exptime = ttl.unwrap_or(0),
            b'R' if exptime != 0 && exptime < recache => return true,
            _ => {}
        }
    }
    false
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
pub(crate) fn meta_debug(
    ctx: &WorkerCtx,
    key: &[u8],
    reply: &Reply<'_>,
    out: &mut Replies<'_>,
) -> Done {
    let store = ctx.store();
    let use_cas = store.config().use_cas;
    let now = store.clock().now();
    let fetch = Fetch {
        record_hit: false,
        new_exptime: None,
        create: None,
    };
    let r = store.fetch(ctx.head, key, &fetch, |it, _| {
        let key_len = it.key().len();
        let debug = ItemDebug {
            key: it.key(),
            binary_key: it.binary_key(),
            exp: if it.exptime() == 0 {
                -1
            } else {
                it.exptime().wrapping_sub(now) as i32
            },
            last_access: now.wrapping_sub(it.atime()),
            cas: it.cas(),
            fetched: it.fetched(),
            class: item_class(key_len, it.flags(), it.value_len(), use_cas),
            size: memcached_item_total(key_len, it.flags(), it.value_len(), use_cas),
        };
        out.say(reply, &Outcome::MetaDebug(Some(&debug)));
    });
    if !matches!(r, Lookup::Hit(())) {
        out.say(reply, &Outcome::MetaDebug(None));
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
