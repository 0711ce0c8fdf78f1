//! Retrieval: text get/gets/gat/gats (any number of keys) and binary
//! GET/GETK/GAT/GATK (one key, quiet forms), and touch (text `touch`,
//! binary TOUCH).
//!
//! A plain multi-key get goes through `Store::get_many`, which overlaps
//! the keys' memory accesses; gat touches each key under its shard's
//! lock. A key over 250 bytes anywhere in a text get makes the whole reply
//! `CLIENT_ERROR bad command line format` (memcached releases the replies
//! built so far), so a large value is written straight from item memory
//! only once every key of the command is known to be short enough.

use osmium_protocol::request::{BinaryReply, Keys, Reply, KEY_MAX_LENGTH};
use osmium_store::Lookup;

use super::Done;
use crate::compose::outcome::Outcome;
use crate::compose::replies::Replies;
use crate::compose::text;
use crate::context::WorkerCtx;

pub(crate) fn get(
    ctx: &WorkerCtx,
    keys: Keys<'_>,
    touch: Option<i64>,
    with_cas: bool,
    reply: &Reply<'_>,
    out: &mut Replies<'_>,
) -> Done {
    match reply {
        Reply::Binary(r) => {
            let key = {
                let mut k = keys;
                k.next().unwrap_or_default()
            };
            binary_get(ctx, key, touch, true, r, out)
        }
        Reply::Text { noreply } => text_get(ctx, keys, touch, with_cas, *noreply, out),
        Reply::Meta(_) => text_get(ctx, keys, touch, with_cas, false, out),
    }
}

/// A touch of `key` (touch, gat, binary TOUCH and GAT) made by `lookup`:
/// gated against full copies coming in (`WorkerCtx::write_gate`) and, on
/// a hit (a miss changed nothing), queued for replication.
#[inline]
fn touched(ctx: &WorkerCtx, key: &[u8], lookup: impl FnOnce() -> Lookup<()>) -> Lookup<()> {
    if ctx.repl.is_none() {
        return lookup();
    }
    let gate = ctx.write_gate(key);
    let found = lookup();
    if matches!(found, Lookup::Hit(())) {
        ctx.replicate_key(key);
        gate.wrote();
    }
    found
}

/// Counts a retrieval's outcome as memcached does.
#[inline]
fn count(ctx: &WorkerCtx, key: &[u8], touched: bool, lookup: Lookup<()>) {
    let stats = &ctx.stats;
    let hit = matches!(lookup, Lookup::Hit(()));
    match lookup {
        Lookup::Expired => stats.get_expired.incr(),
        Lookup::Flushed => stats.get_flushed.incr(),
        _ => {}
    }
    if touched {
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
    let prefix = &ctx.shared.prefix;
    if prefix.enabled() {
        prefix.record_get(key, hit);
    }
}

fn text_get(
    ctx: &WorkerCtx,
    keys: Keys<'_>,
    touch: Option<i64>,
    with_cas: bool,
    noreply: bool,
    out: &mut Replies<'_>,
) -> Done {
    let start = out.mark();
    // A value may leave straight from item memory only once no key of the
    // command can still turn the reply into an error: checked once, at the
    // first value long enough, counting the keys on the way (the last
    // key's value carries the END).
    let mut checked: Option<Option<usize>> = None;
    let all_keys = keys;
    let direct = move |index: usize| {
        let keys_ok = *checked.get_or_insert_with(|| {
            let mut all = all_keys;
            let mut count = 0;
            all.all(|k| {
                count += 1;
                k.len() <= KEY_MAX_LENGTH
            })
            .then_some(count)
        });
        match keys_ok {
            None => text::Direct::No,
            Some(count) if index + 1 == count => text::Direct::ValueAndEnd,
            Some(_) => text::Direct::Value,
        }
    };
    let ended = match text_keys(ctx, keys, touch, with_cas, out, direct) {
        Ok(ended) => ended,
        Err(failed_key) => {
            // noreply hid the error line when the first key failed.
            let too_long = Outcome::GetKeyTooLong {
                reply_start: start,
                error_hidden: failed_key == 0 && noreply,
            };
            out.say(&Reply::Text { noreply }, &too_long);
            return Done::CONTINUE;
        }
    };
    if !ended {
        out.text_end();
    }
    Done::FLUSH
}

/// Serves the keys of a text get; true if the last value carried the
/// reply's END (`direct`, asked with a key's index, allows large values to
/// leave from item memory), else the caller ends the reply. At a key over
/// 250 bytes, stops with its position among the keys. Also serves a huge
/// get line's keys as they arrive (see the session's streaming gets).
pub(crate) fn text_keys(
    ctx: &WorkerCtx,
    keys: Keys<'_>,
    touch: Option<i64>,
    with_cas: bool,
    out: &mut Replies<'_>,
    mut direct: impl FnMut(usize) -> text::Direct,
) -> Result<bool, usize> {
    super::watch::get_keys(ctx, keys);
    let store = ctx.store();
    let mut too_long = None;
    let mut position = 0;
    let mut ended = false;
    // Positions of the keys whose packed values did not decode (never
    // expected: no allocation otherwise).
    let mut dropped_at: Vec<usize> = Vec::new();
    match touch {
        None => {
            store.get_many(keys, |key, r| {
                if key.len() > KEY_MAX_LENGTH {
                    too_long = Some(position);
                    return false;
                }
                let index = position;
                position += 1;
                let mut bytes = 0;
                let outcome = match r {
                    Lookup::Hit(it) => match out.text_value(&it, with_cas, || direct(index)) {
                        text::Sent::Dropped => {
                            // Answered as a miss; dropped below (the
                            // lookups hold a pin: no lock now).
                            dropped_at.push(index);
                            Lookup::Miss
                        }
                        sent => {
                            ended = sent == text::Sent::ValueAndEnd;
                            bytes = it.value_len();
                            Lookup::Hit(())
                        }
                    },
                    Lookup::Miss => Lookup::Miss,
                    Lookup::Expired => Lookup::Expired,
                    Lookup::Flushed => Lookup::Flushed,
                };
                count(ctx, key, false, outcome);
                ctx.hot_read(key, bytes);
                true
            });
        }
        Some(exptime) => {
            let exptime = store.clock().realtime(exptime);
            for (i, key) in keys.enumerate() {
                if key.len() > KEY_MAX_LENGTH {
                    too_long = Some(i);
                    break;
                }
                let mut bytes = 0;
                let mut dropped = false;
                let mut r = touched(ctx, key, || {
                    store.get(key, Some(exptime), |it| {
                        match out.text_value(&it, with_cas, || direct(i)) {
                            text::Sent::Dropped => dropped = true,
                            sent => {
                                ended = sent == text::Sent::ValueAndEnd;
                                bytes = it.value_len();
                            }
                        }
                    })
                });
                if dropped {
                    store.drop_corrupt(key);
                    r = Lookup::Miss;
                }
                count(ctx, key, true, r);
                ctx.hot_read(key, bytes);
            }
        }
    }
    if !dropped_at.is_empty() {
        for (i, key) in keys.enumerate() {
            if dropped_at.contains(&i) {
                store.drop_corrupt(key);
            }
        }
    }
    match too_long {
        Some(i) => Err(i),
        None => Ok(ended),
    }
}

/// Binary GET/GETK/GAT/GATK (and quiet forms); `with_value` false for
/// TOUCH.
fn binary_get(
    ctx: &WorkerCtx,
    key: &[u8],
    touch: Option<i64>,
    with_value: bool,
    r: &BinaryReply,
    out: &mut Replies<'_>,
) -> Done {
    let store = ctx.store();
    let exptime = touch.map(|e| store.clock().realtime(e));
    let mut bytes = 0;
    let mut dropped = false;
    let mut get = || {
        store.get(key, exptime, |it| {
            if !out.binary_hit(r, &it, with_value) {
                dropped = true;
            } else if with_value {
                bytes = it.value_len();
            }
        })
    };
    let mut found = match touch {
        Some(_) => touched(ctx, key, get),
        None => get(),
    };
    if dropped {
        store.drop_corrupt(key);
        found = Lookup::Miss;
    }
    let hit = matches!(found, Lookup::Hit(()));
    count(ctx, key, touch.is_some(), found);
    if with_value {
        ctx.hot_read(key, bytes);
    } else {
        // TOUCH changes the item.
        ctx.hot_write(key, 0);
    }
    if hit {
        return Done::CONTINUE;
    }
    let reply = Reply::Binary(*r);
    Done::flush_if(out.say(&reply, &Outcome::GetMiss { key }))
}

/// text touch, binary TOUCH.
pub(crate) fn touch(
    ctx: &WorkerCtx,
    key: &[u8],
    exptime: i64,
    reply: &Reply<'_>,
    out: &mut Replies<'_>,
) -> Done {
    match reply {
        Reply::Binary(r) => {
            let r = BinaryReply {
                with_key: false,
                ..*r
            };
            binary_get(ctx, key, Some(exptime), false, &r, out)
        }
        Reply::Text { noreply } => {
            let store = ctx.store();
            let exptime = store.clock().realtime(exptime);
            let r = touched(ctx, key, || store.get(key, Some(exptime), |_| ()));
            ctx.hot_write(key, 0);
            let hit = matches!(r, Lookup::Hit(()));
            let stats = &ctx.stats;
            stats.touch_cmds.incr();
            match r {
                Lookup::Expired => stats.get_expired.incr(),
                Lookup::Flushed => stats.get_flushed.incr(),
                _ => {}
            }
            if hit {
                stats.touch_hits.incr();
                super::text_line(out, *noreply, "TOUCHED");
            } else {
                stats.touch_misses.incr();
                super::text_line(out, *noreply, "NOT_FOUND");
            }
            Done::CONTINUE
        }
        Reply::Meta(_) => {
            // No meta command parses to a touch.
            super::text_line(out, false, "ERROR");
            Done::CONTINUE
        }
    }
}
