//! The key dumps operators' tools use: `lru_crawler metadump` (one line of
//! metadata per item), `lru_crawler mgdump` (one `mg <key>` per item) and
//! `stats cachedump` (memcdump's source); their formats are written by
//! `compose::dump`.
//!
//! A crawler dump streams: the session asks [`Dump::step`] for the next
//! segment's items only once the connection's output has drained, so a
//! dump of millions of items never sits in memory whole. Expired and
//! flushed items are skipped, as memcached's crawler skips them.
//! `stats cachedump` is bounded like memcached's (2 MB) and lists the whole
//! cache as class 1, the one class `stats items` reports; binary keys are
//! left out as memcached leaves them out. Every dump lists the items on
//! the flash tier too, after those in RAM.
//!
//! osmium's extension: a crawler dump takes an optional key filter after
//! its classes (`lru_crawler mgdump hash keyhash=fnv1a_64 ranges=0-99,...`,
//! parsed by `osmium_placement::filter`), and lists only the keys whose
//! placement hash falls in the ranges. The hash is computed per item on the
//! copy the store hands out after its lock is released, so a filtered dump
//! holds no lock longer than an unfiltered one. memcached answers such a
//! line `ERROR`.

use osmium_placement::filter::DumpFilter;
use osmium_protocol::ascii::prefix_matches;
use osmium_protocol::request::Tokens;
use osmium_store::{DumpCursor, DumpEntry};

use super::meta_get::item_class;
use super::{ConnView, Next};
use crate::compose::dump as format;
use crate::compose::outcome::Status;
use crate::compose::output::Output;
use crate::context::WorkerCtx;

/// memcached's largest slab class id plus one.
const MAX_CLASSES: u32 = 64;

/// Which dump, of which classes and keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DumpKind {
    /// `mgdump` (else `metadump`).
    pub mg: bool,
    /// Bit i set: items of slab class i (all bits: every item).
    pub classes: u64,
    /// Only the keys this filter keeps (none: every key).
    pub filter: Option<Box<DumpFilter>>,
}

/// A crawler dump in progress on a connection.
pub(crate) struct Dump {
    kind: DumpKind,
    cursor: DumpCursor,
}

impl Dump {
    pub(crate) fn new(kind: DumpKind) -> Dump {
        Dump {
            kind,
            cursor: DumpCursor::default(),
        }
    }

    /// Appends the next items' lines; true when the dump is over (its
    /// closing line written).
    pub(crate) fn step(&mut self, ctx: &WorkerCtx, out: &mut Output) -> bool {
        let store = ctx.store();
        let use_cas = store.config().use_cas;
        let started = store.clock().process_started();
        let kind = &self.kind;
        let filter = kind.filter.as_deref();
        let more = store.dump_step(&mut self.cursor, |e: &DumpEntry<'_>| {
            let cls = item_class(e.key.len(), e.flags, e.value_len, use_cas);
            if kind.classes & (1u64 << cls.min(63)) == 0 {
                return;
            }
            if filter.is_some_and(|f| !f.matches(e.key)) {
                return;
            }
            format::crawler_item(out, kind.mg, e, cls, started);
        });
        if more {
            return false;
        }
        format::crawler_end(out, kind.mg);
        true
    }
}

/// The classes of a crawler argument: `all`, `hash` (both every item) or
/// ids separated by commas; None for a bad id (memcached's BADCLASS).
fn classes(arg: &[u8]) -> Option<u64> {
    if arg == b"all" || arg == b"hash" {
        return Some(u64::MAX);
    }
    let mut set = 0u64;
    for id in arg.split(|&b| b == b',').filter(|p| !p.is_empty()) {
        let id: u32 = std::str::from_utf8(id).ok()?.parse().ok()?;
        if !(1..MAX_CLASSES).contains(&id) {
            return None;
        }
        set |= 1 << id;
    }
    (set != 0).then_some(set)
}

/// `lru_crawler <crawl|metadump|mgdump|tocrawl|sleep|enable|disable> ...`:
/// its answer (sent whatever noreply says) and what the connection does
/// next. `metadump` and `mgdump` take a key filter after the classes.
pub(crate) fn lru_crawler(ctx: &WorkerCtx, conn: ConnView, t: Tokens<'_>) -> (Status, Next) {
    let settings = &ctx.shared.settings;
    let n = t.count();
    let sub = t.get(1);
    let answer = |s: Status| (s, Next::Continue);
    let dump = prefix_matches(sub, b"metadump") || prefix_matches(sub, b"mgdump");
    if (n == 3 && (prefix_matches(sub, b"crawl") || dump)) || (n > 3 && dump) {
        if !settings.lru_crawler {
            return answer(Status::CrawlerDisabled);
        }
        let crawl = prefix_matches(sub, b"crawl");
        let mg = !crawl && !prefix_matches(sub, b"metadump");
        if !crawl && !settings.dump_enabled {
            return answer(if mg {
                Status::KeyDumpNotAllowed
            } else {
                Status::MetadumpNotAllowed
            });
        }
        if !crawl && conn.output_queued {
            return answer(if mg {
                Status::PipelinedMgdump
            } else {
                Status::PipelinedMetadump
            });
        }
        let Some(classes) = classes(t.get(2)) else {
            return answer(Status::BadClass);
        };
        let filter = if n > 3 {
            match DumpFilter::parse((3..n).map(|i| t.get(i))) {
                Ok(f) => Some(Box::new(f)),
                Err(_) => return answer(Status::BadDumpFilter),
            }
        } else {
            None
        };
        if crawl {
            // The maintenance thread reclaims expired items all the time;
            // a crawl request runs one pass over the fully expired
            // segments now.
            ctx.store().reclaim_expired_segments();
            return answer(Status::Ok);
        }
        // memcached's crawler answers OK, then streams the items.
        let kind = DumpKind {
            mg,
            classes,
            filter,
        };
        return (Status::Ok, Next::StartDump(kind));
    }
    if n == 3 && (prefix_matches(sub, b"tocrawl") || prefix_matches(sub, b"sleep")) {
        let value = osmium_protocol::ascii::numbers::tokto_u32(t.get(2));
        return answer(match value {
            None => Status::BadFormat,
            Some(v) if prefix_matches(sub, b"sleep") && v > 1_000_000 => Status::SleepTooLong,
            Some(_) => Status::Ok,
        });
    }
    if n == 2 && (prefix_matches(sub, b"enable") || prefix_matches(sub, b"disable")) {
        return answer(Status::Ok);
    }
    answer(Status::Error)
}

/// `stats cachedump <class> <limit>`: the items are written (by
/// `compose::dump`), or the refusal returned.
pub(crate) fn cachedump(ctx: &WorkerCtx, t: &Tokens<'_>, out: &mut Output) -> Result<(), Status> {
    if !ctx.shared.settings.dump_enabled {
        return Err(Status::CachedumpNotAllowed);
    }
    if t.count() < 4 {
        return Err(Status::BadCommandLine);
    }
    let number = osmium_protocol::ascii::numbers::tokto_u32;
    let (Some(id), Some(limit)) = (number(t.get(2)), number(t.get(3))) else {
        return Err(Status::BadFormat);
    };
    if id >= MAX_CLASSES {
        return Err(Status::IllegalSlabId);
    }
    let store = ctx.store();
    let started = store.clock().process_started();
    if id == 1 {
        let start = out.len();
        let mut shown = 0u32;
        let mut cursor = DumpCursor::default();
        let mut full = false;
        while !full
            && store.dump_step(&mut cursor, |e: &DumpEntry<'_>| {
                if full || e.binary_key || (limit != 0 && shown >= limit) {
                    return;
                }
                // memcached copies the key as a C string.
                let key = e.key.split(|&b| b == 0).next().unwrap_or_default();
                let exp = if e.exptime == 0 {
                    0
                } else {
                    i64::from(e.exptime) + started
                };
                if !format::cachedump_item(out, start, key, e.value_len, exp) {
                    full = true;
                    return;
                }
                shown += 1;
                // No need to read the rest (flash pages among it).
                full = limit != 0 && shown >= limit;
            })
        {}
    }
    format::cachedump_end(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crawler_class_lists() {
        assert_eq!(classes(b"all"), Some(u64::MAX));
        assert_eq!(classes(b"1,3"), Some(0b1010));
        assert_eq!(classes(b"0"), None);
        assert_eq!(classes(b"64"), None);
        assert_eq!(classes(b"x"), None);
    }
}
