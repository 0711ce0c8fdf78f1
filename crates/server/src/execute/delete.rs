//! Deletes: text `delete`, binary DELETE (with an optional CAS), and md,
//! which can also mark an item stale (`I`, with a new TTL `T`) or keep it
//! with an empty value (`x`), each optionally only if the CAS matches
//! (`C`), as memcached's `process_mdelete_cmd`.

use osmium_protocol::binary::status;
use osmium_protocol::request::{Delete, Reply};
use osmium_store::{Removal, RemoveResult};

use super::Done;
use crate::compose::output::Output;
use crate::compose::{binary, meta, text};
use crate::context::WorkerCtx;

pub fn delete(ctx: &WorkerCtx, d: &Delete<'_>, reply: &Reply<'_>, out: &mut Output) -> Done {
    let store = ctx.store();
    let stats = &ctx.stats;
    let prefix = &ctx.shared.prefix;
    match reply {
        Reply::Text { noreply } => {
            if prefix.enabled() {
                prefix.record_delete(d.key);
            }
            if store.delete(d.key) {
                stats.delete_hits.incr();
                text::line(out, *noreply, "DELETED");
            } else {
                stats.delete_misses.incr();
                text::line(out, *noreply, "NOT_FOUND");
            }
            Done::CONTINUE
        }
        Reply::Binary(r) => {
            if prefix.enabled() {
                prefix.record_delete(d.key);
            }
            let only_if = Removal {
                if_cas: d.if_cas,
                ..Removal::default()
            };
            match store.remove(ctx.head, d.key, &only_if) {
                RemoveResult::Removed | RemoveResult::Kept => {
                    stats.delete_hits.incr();
                    binary::ok(out, r, 0, &[]);
                    Done::CONTINUE
                }
                RemoveResult::Exists => {
                    binary::error(out, r, status::KEY_EXISTS);
                    Done::FLUSH
                }
                RemoveResult::NotFound => {
                    stats.delete_misses.incr();
                    binary::error(out, r, status::KEY_NOT_FOUND);
                    Done::FLUSH
                }
            }
        }
        Reply::Meta(m) => {
            let start = out.len();
            // The O and k flags are checked and written before the lookup.
            out.buf().extend_from_slice(b"HD");
            if !meta::opaque_and_key(out.buf(), m, d.key) {
                meta::error(out, start, meta::OPAQUE_TOO_LONG);
                return Done::CONTINUE;
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
            let code: &[u8; 2] = match store.remove(ctx.head, d.key, &removal) {
                RemoveResult::Removed | RemoveResult::Kept => {
                    // As memcached: marking stale is not a delete hit.
                    if !d.mark_stale {
                        stats.delete_hits.incr();
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
            let quiet = m.quiet && code == b"HD";
            out.buf()[start..start + 2].copy_from_slice(code);
            meta::finish(out, start, quiet);
            Done::CONTINUE
        }
    }
}
