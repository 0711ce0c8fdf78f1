//! Counters: text incr/decr, binary INCREMENT/DECREMENT (which create a
//! missing counter unless its expiry is 0xffffffff), and ma (memcached's
//! `process_marithmetic_cmd`: modes, delta, initial value, CAS check, new
//! CAS, TTL, vivify on a miss, the value returned with `v`).
//!
//! A stored value is read as a number by memcached's rules (see the
//! store's counter module); 64-bit increments wrap, decrements stop at 0.

use osmium_protocol::request::{Arith, MetaReply, Reply};
use osmium_store::{ArithResult, CounterResult, CounterUpdate, StoreStatus, Write};

use super::{answer, Done};
use crate::compose::outcome::{Counted, Counter, Outcome};
use crate::compose::replies::Replies;
use crate::context::WorkerCtx;

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

/// The store's verdict as an outcome.
fn counted(r: CounterResult) -> Counted {
    match r {
        CounterResult::Done {
            value,
            cas,
            exptime,
            created,
        } => Counted::Value {
            value,
            cas,
            exptime,
            created,
        },
        CounterResult::NotFound => Counted::NotFound,
        CounterResult::NonNumeric => Counted::NonNumeric,
        CounterResult::Exists => Counted::Exists,
        CounterResult::NotStored => Counted::NotStored,
        CounterResult::OutOfMemory => Counted::OutOfMemory,
    }
}

/// Runs the counter command as memcached runs it for the request's
/// protocol (`process_arithmetic_command`, `process_bin_update`,
/// `process_marithmetic_cmd` differ in what they do, not only in what they
/// say), and has its outcome said.
pub(crate) fn arith(
    ctx: &WorkerCtx,
    a: &Arith<'_>,
    reply: &Reply<'_>,
    out: &mut Replies<'_>,
) -> Done {
    ctx.hot_write(a.key, 0);
    let mut counter = Counter {
        result: Counted::NotFound,
        key: a.key,
        ttl: None,
        vivify: None,
        now: 0,
    };
    counter.result = match reply {
        Reply::Text { .. } => text_arith(ctx, a),
        Reply::Binary(_) => binary_arith(ctx, a),
        Reply::Meta(m) => meta_arith(ctx, a, m, &mut counter),
    };
    if !matches!(counter.result, Counted::Value { .. }) {
        ctx.changed_nothing();
    }
    answer(out, reply, Outcome::Counter(counter))
}

fn text_arith(ctx: &WorkerCtx, a: &Arith<'_>) -> Counted {
    match ctx.store().arith(ctx.head, a.key, a.incr, a.delta) {
        ArithResult::Value(value) => {
            count_hit(ctx, a.incr);
            Counted::Value {
                value,
                cas: 0,
                exptime: 0,
                created: false,
            }
        }
        ArithResult::NotFound => {
            count_miss(ctx, a.incr);
            Counted::NotFound
        }
        ArithResult::NonNumeric => Counted::NonNumeric,
        ArithResult::OutOfMemory => Counted::OutOfMemory,
    }
}

/// Binary INCREMENT/DECREMENT: a missing counter is created by an add
/// unless the expiry says not to.
fn binary_arith(ctx: &WorkerCtx, a: &Arith<'_>) -> Counted {
    let store = ctx.store();
    let only_if = CounterUpdate {
        if_cas: a.if_cas,
        ..CounterUpdate::default()
    };
    match store.counter(ctx.head, a.key, a.incr, a.delta, &only_if) {
        CounterResult::NotFound => {}
        done @ CounterResult::Done { .. } => {
            count_hit(ctx, a.incr);
            return counted(done);
        }
        other => return counted(other),
    }
    let Some((initial, exptime)) = a.create else {
        count_miss(ctx, a.incr);
        return Counted::NotFound;
    };
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
        StoreStatus::Stored => Counted::Value {
            value: initial,
            cas,
            exptime: 0,
            created: true,
        },
        StoreStatus::OutOfMemory | StoreStatus::TooLarge => Counted::CreateOutOfMemory,
        _ => Counted::NotStored,
    }
}

/// ma: the TTL, vivify expiry and clock its reply's flags show go into
/// `c`.
fn meta_arith(ctx: &WorkerCtx, a: &Arith<'_>, m: &MetaReply<'_>, c: &mut Counter<'_>) -> Counted {
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
    let result = store.counter(ctx.head, a.key, a.incr, a.delta, &update);
    match result {
        CounterResult::Done { created: false, .. } => count_hit(ctx, a.incr),
        CounterResult::NotFound => count_miss(ctx, a.incr),
        _ => {}
    }
    c.ttl = ttl;
    c.vivify = viv;
    c.now = clock.now();
    counted(result)
}
