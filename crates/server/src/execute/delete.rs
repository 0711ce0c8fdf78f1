//! Deletes: text `delete`, binary DELETE (with an optional CAS), and md,
//! which can also mark an item stale (`I`, with a new TTL `T`) or keep it
//! with an empty value (`x`), each optionally only if the CAS matches
//! (`C`), as memcached's `process_mdelete_cmd`. The verdict is an
//! [`Outcome::Deleted`].

use osmium_protocol::request::{Delete, Reply};
use osmium_store::{Removal, RemoveResult};

use super::{answer, Done};
use crate::compose::outcome::{Outcome, Status};
use crate::compose::replies::Replies;
use crate::context::WorkerCtx;

pub(crate) fn delete(
    ctx: &WorkerCtx,
    d: &Delete<'_>,
    reply: &Reply<'_>,
    out: &mut Replies<'_>,
) -> Done {
    // memcached checks an md's flags before the lookup.
    if crate::compose::unwritable(reply) {
        ctx.changed_nothing();
        return answer(out, reply, Outcome::Status(Status::OpaqueTooLong));
    }
    ctx.hot_write(d.key, 0);
    let store = ctx.store();
    let stats = &ctx.stats;
    // memcached's rules of each protocol: md is not in the prefix stats,
    // and its CAS mismatch counts as a miss.
    let meta = matches!(reply, Reply::Meta(_));
    let prefix = &ctx.shared.prefix;
    if !meta && prefix.enabled() {
        prefix.record_delete(d.key);
    }
    let clock = store.clock();
    let removal = Removal {
        if_cas: d.if_cas,
        mark_stale: d.mark_stale,
        exptime: d.exptime.map(|e| clock.realtime(e)),
        new_cas: d.new_cas.unwrap_or(0),
        drop_value: d.drop_value,
        flags: d.flags,
    };
    let result = if d.if_cas.is_none() && !d.mark_stale && !d.drop_value {
        // A plain delete.
        if store.delete(d.key) {
            RemoveResult::Removed
        } else {
            RemoveResult::NotFound
        }
    } else {
        store.remove(ctx.head, d.key, &removal)
    };
    match result {
        // As memcached: marking stale is not a delete hit.
        RemoveResult::Removed | RemoveResult::Kept if !d.mark_stale => stats.delete_hits.incr(),
        RemoveResult::Exists if meta => stats.delete_misses.incr(),
        RemoveResult::NotFound => stats.delete_misses.incr(),
        _ => {}
    }
    if matches!(result, RemoveResult::NotFound | RemoveResult::Exists) {
        ctx.changed_nothing();
    }
    answer(out, reply, Outcome::Deleted { result, key: d.key })
}
