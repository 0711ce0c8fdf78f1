//! Counters: text incr/decr, binary INCREMENT/DECREMENT (which create a
//! missing counter unless its expiry is 0xffffffff), and ma (memcached's
//! `process_marithmetic_cmd`: modes, delta, initial value, CAS check, new
//! CAS, TTL, vivify on a miss, the value returned with `v`).
//!
//! A stored value is read as a number by memcached's rules (see the
//! store's counter module); 64-bit increments wrap, decrements stop at 0.

use osmium_protocol::binary::status;
use osmium_protocol::request::{Arith, BinaryReply, MetaReply, Reply};
use osmium_store::{ArithResult, CounterResult, CounterUpdate, StoreStatus, Write};

use super::Done;
use crate::compose::meta::{self, flag_key, flag_number, flag_opaque, flag_ttl, OPAQUE_TOO_LONG};
use crate::compose::output::Output;
use crate::compose::{binary, text};
use crate::context::WorkerCtx;

const NON_NUMERIC: &str = "CLIENT_ERROR cannot increment or decrement non-numeric value";

fn count_hit(ctx: &WorkerCtx, incr: bool) {
    if incr {
        ctx.stats.incr_hits.incr();
    } else {
        ctx.stats.decr_hits.incr();
    }
}

fn count_miss(ctx: &WorkerCtx, incr: bool) {
    if incr {
        ctx.stats.incr_misses.incr();
    } else {
        ctx.stats.decr_misses.incr();
    }
}

pub fn arith(ctx: &WorkerCtx, a: &Arith<'_>, reply: &Reply<'_>, out: &mut Output) -> Done {
    match reply {
        Reply::Text { noreply } => {
            match ctx.store().arith(ctx.head, a.key, a.incr, a.delta) {
                ArithResult::Value(v) => {
                    count_hit(ctx, a.incr);
                    text::number(out, *noreply, v);
                }
                ArithResult::NotFound => {
                    count_miss(ctx, a.incr);
                    text::line(out, *noreply, "NOT_FOUND");
                }
                ArithResult::NonNumeric => text::line(out, *noreply, NON_NUMERIC),
                ArithResult::OutOfMemory => text::line(out, *noreply, "SERVER_ERROR out of memory"),
            }
            Done::CONTINUE
        }
        Reply::Binary(r) => binary_arith(ctx, a, r, out),
        Reply::Meta(m) => meta_arith(ctx, a, m, out),
    }
}

fn binary_arith(ctx: &WorkerCtx, a: &Arith<'_>, r: &BinaryReply, out: &mut Output) -> Done {
    let store = ctx.store();
    let only_if = CounterUpdate {
        if_cas: a.if_cas,
        ..CounterUpdate::default()
    };
    match store.counter(ctx.head, a.key, a.incr, a.delta, &only_if) {
        CounterResult::Done { value, cas, .. } => {
            count_hit(ctx, a.incr);
            binary::ok(out, r, cas, &value.to_be_bytes());
            return Done::CONTINUE;
        }
        CounterResult::NonNumeric => binary::error(out, r, status::NON_NUMERIC_VALUE),
        CounterResult::Exists => binary::error(out, r, status::KEY_EXISTS),
        CounterResult::NotStored => binary::error(out, r, status::ITEM_NOT_STORED),
        CounterResult::OutOfMemory => {
            binary::out_of_memory(out, r, b"Out of memory incrementing value")
        }
        CounterResult::NotFound => match a.create {
            Some((initial, exptime)) => {
                let mut digits = itoa::Buffer::new();
                let (result, cas) = store.store(
                    ctx.head,
                    &Write {
                        mode: osmium_store::StoreMode::Add,
                        key: a.key,
                        flags: 0,
                        exptime: store.clock().realtime(exptime),
                        value: digits.format(initial).as_bytes(),
                        ..Write::default()
                    },
                );
                match result {
                    StoreStatus::Stored => {
                        binary::ok(out, r, cas, &initial.to_be_bytes());
                        return Done::CONTINUE;
                    }
                    StoreStatus::OutOfMemory | StoreStatus::TooLarge => {
                        binary::out_of_memory(out, r, b"Out of memory allocating new item")
                    }
                    _ => binary::error(out, r, status::ITEM_NOT_STORED),
                }
            }
            None => {
                count_miss(ctx, a.incr);
                binary::error(out, r, status::KEY_NOT_FOUND);
            }
        },
    }
    Done::FLUSH
}

fn meta_arith(ctx: &WorkerCtx, a: &Arith<'_>, m: &MetaReply<'_>, out: &mut Output) -> Done {
    let store = ctx.store();
    let clock = store.clock();
    let ttl = a.exptime.map(|t| clock.realtime(t));
    let viv = a.create.map(|(_, n)| clock.realtime(n));
    // A created item ends with whichever of T and N came last.
    let mut created_exptime = 0;
    for tok in m.flags() {
        match tok[0] {
            b'T' => created_exptime = ttl.unwrap_or(0),
            b'N' => created_exptime = viv.unwrap_or(0),
            _ => {}
        }
    }
    let update = CounterUpdate {
        if_cas: a.if_cas,
        new_cas: a.new_cas.unwrap_or(0),
        exptime: ttl,
        create: a.create.map(|(initial, _)| (initial, created_exptime)),
    };
    let start = out.len();
    let value_wanted = m.flags().any(|t| t[0] == b'v');
    match store.counter(ctx.head, a.key, a.incr, a.delta, &update) {
        CounterResult::Done {
            value,
            cas,
            exptime,
            created,
        } => {
            if !created {
                count_hit(ctx, a.incr);
            }
            let mut digits = itoa::Buffer::new();
            let text = digits.format(value).as_bytes();
            let buf = out.buf();
            if value_wanted {
                buf.extend_from_slice(b"VA ");
                meta::number(buf, text.len());
            } else {
                buf.extend_from_slice(b"HD");
            }
            let now = clock.now();
            let mut shown_exptime = exptime;
            let mut bad_opaque = false;
            for tok in m.flags() {
                match tok[0] {
                    b'c' => flag_number(buf, b'c', cas),
                    b't' => flag_ttl(buf, shown_exptime, now),
                    b'T' => shown_exptime = ttl.unwrap_or(0),
                    b'N' if created => shown_exptime = viv.unwrap_or(0),
                    b'O' if !flag_opaque(buf, tok) => {
                        bad_opaque = true;
                        break;
                    }
                    b'k' => flag_key(buf, a.key, m.binary_key),
                    _ => {}
                }
            }
            if bad_opaque {
                meta::error(out, start, OPAQUE_TOO_LONG);
                return Done::CONTINUE;
            }
            let buf = out.buf();
            if value_wanted {
                buf.extend_from_slice(b"\r\n");
                buf.extend_from_slice(text);
            }
            meta::finish(out, start, m.quiet);
        }
        CounterResult::NonNumeric => text::line(out, false, NON_NUMERIC),
        CounterResult::OutOfMemory => text::line(out, false, "SERVER_ERROR out of memory"),
        other => {
            let code: &[u8] = match other {
                CounterResult::NotFound => {
                    count_miss(ctx, a.incr);
                    b"NF"
                }
                CounterResult::Exists => b"EX",
                _ => b"NS",
            };
            out.buf().extend_from_slice(code);
            if !meta::opaque_and_key(out.buf(), m, a.key) {
                meta::error(out, start, OPAQUE_TOO_LONG);
                return Done::CONTINUE;
            }
            out.buf().extend_from_slice(b"\r\n");
        }
    }
    Done::CONTINUE
}
