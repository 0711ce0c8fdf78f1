//! The key dumps operators' tools use: `lru_crawler metadump` (one line of
//! metadata per item), `lru_crawler mgdump` (one `mg <key>` per item) and
//! `stats cachedump` (memcdump's source), in memcached's formats:
//!
//! ```text
//!   OK                    (a crawler dump starts so)
//!   key=<uri-encoded key> exp=<unix time|-1> la=<unix time> cas=<n> fetch=<yes|no> cls=<id> size=<bytes> flags=<n>\n
//!   mg <key>\r\n          mg <base64 key> b\r\n
//!   ITEM <key> [<bytes> b; <unix exptime|0> s]\r\n
//! ```
//!
//! A crawler dump streams: the session asks [`Dump::step`] for the next
//! segment's items only once the connection's output has drained, so a
//! dump of millions of items never sits in memory whole. Expired and
//! flushed items are skipped, as memcached's crawler skips them.
//! `stats cachedump` is bounded like memcached's (2 MB) and lists the whole
//! cache as class 1, the one class `stats items` reports; binary keys are
//! left out as memcached leaves them out.

use osmium_protocol::ascii::prefix_matches;
use osmium_protocol::base64::base64_encode;
use osmium_protocol::encode;
use osmium_protocol::request::Tokens;
use osmium_store::{DumpCursor, DumpEntry};

use super::meta_get::item_class;
use super::{ConnView, Done, Next};
use crate::compose::meta::number;
use crate::compose::output::Output;
use crate::compose::text;
use crate::context::WorkerCtx;

/// memcached's largest slab class id plus one.
const MAX_CLASSES: u32 = 64;
/// memcached's limit on a cachedump reply.
const CACHEDUMP_LIMIT: usize = 2 << 20;

/// Which dump, of which classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpKind {
    /// `mgdump` (else `metadump`).
    pub mg: bool,
    /// Bit i set: items of slab class i (all bits: every item).
    pub classes: u64,
}

/// A crawler dump in progress on a connection.
pub struct Dump {
    kind: DumpKind,
    cursor: DumpCursor,
}

impl Dump {
    pub fn new(kind: DumpKind) -> Dump {
        Dump {
            kind,
            cursor: DumpCursor::default(),
        }
    }

    /// Appends the next items' lines; true when the dump is over (its
    /// closing line written).
    pub fn step(&mut self, ctx: &WorkerCtx, out: &mut Output) -> bool {
        let store = ctx.store();
        let use_cas = store.config().use_cas;
        let started = store.clock().process_started();
        let kind = self.kind;
        let buf = out.buf();
        let more = store.dump_step(&mut self.cursor, |e: &DumpEntry<'_>| {
            let cls = item_class(e.key.len(), e.flags, e.value_len, use_cas);
            if kind.classes & (1u64 << cls.min(63)) == 0 {
                return;
            }
            if kind.mg {
                buf.extend_from_slice(b"mg ");
                if e.binary_key {
                    base64_encode(e.key, buf);
                    buf.extend_from_slice(b" b\r\n");
                } else {
                    buf.extend_from_slice(e.key);
                    buf.extend_from_slice(b"\r\n");
                }
                return;
            }
            buf.extend_from_slice(b"key=");
            uri_encode(e.key, buf);
            buf.extend_from_slice(b" exp=");
            if e.exptime == 0 {
                buf.extend_from_slice(b"-1");
            } else {
                number(buf, i64::from(e.exptime) + started);
            }
            buf.extend_from_slice(b" la=");
            number(buf, i64::from(e.atime) + started);
            buf.extend_from_slice(b" cas=");
            number(buf, e.cas);
            buf.extend_from_slice(if e.fetched {
                b" fetch=yes cls="
            } else {
                b" fetch=no cls="
            });
            number(buf, cls);
            buf.extend_from_slice(b" size=");
            number(buf, e.total_size);
            buf.extend_from_slice(b" flags=");
            number(buf, e.flags);
            buf.extend_from_slice(b" \n");
        });
        if more {
            return false;
        }
        buf.extend_from_slice(if kind.mg { b"EN\r\n" } else { b"END\r\n" });
        true
    }
}

/// memcached's `uriencode`: alphanumerics and `-._~` as they are, every
/// other byte as `%XX`.
fn uri_encode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
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

/// `lru_crawler <crawl|metadump|mgdump|tocrawl|sleep|enable|disable> ...`.
pub fn lru_crawler(ctx: &WorkerCtx, conn: ConnView, t: Tokens<'_>, out: &mut Output) -> Done {
    let settings = &ctx.shared.settings;
    let n = t.count();
    let sub = t.get(1);
    let line = |out: &mut Output, msg: &str| text::line(out, false, msg);
    if n == 3
        && (prefix_matches(sub, b"crawl")
            || prefix_matches(sub, b"metadump")
            || prefix_matches(sub, b"mgdump"))
    {
        if !settings.lru_crawler {
            line(out, "CLIENT_ERROR lru crawler disabled");
            return Done::CONTINUE;
        }
        let crawl = prefix_matches(sub, b"crawl");
        let mg = !crawl && !prefix_matches(sub, b"metadump");
        if !crawl && !settings.dump_enabled {
            line(
                out,
                if mg {
                    "ERROR key dump not allowed"
                } else {
                    "ERROR metadump not allowed"
                },
            );
            return Done::CONTINUE;
        }
        if !crawl && conn.output_queued {
            line(
                out,
                if mg {
                    "ERROR cannot pipeline other commands before mgdump"
                } else {
                    "ERROR cannot pipeline other commands before metadump"
                },
            );
            return Done::CONTINUE;
        }
        let Some(classes) = classes(t.get(2)) else {
            line(out, "BADCLASS invalid class id");
            return Done::CONTINUE;
        };
        if crawl {
            // The maintenance thread reclaims expired items all the time;
            // a crawl request runs one pass over the fully expired
            // segments now.
            ctx.store().reclaim_expired_segments();
            line(out, "OK");
            return Done::CONTINUE;
        }
        // memcached's crawler answers OK, then streams the items.
        line(out, "OK");
        return Done::then(Next::StartDump(DumpKind { mg, classes }));
    }
    if n == 3 && (prefix_matches(sub, b"tocrawl") || prefix_matches(sub, b"sleep")) {
        let value = osmium_protocol::ascii::numbers::tokto_u32(t.get(2));
        match value {
            None => line(out, "CLIENT_ERROR bad command line format"),
            Some(v) if prefix_matches(sub, b"sleep") && v > 1_000_000 => {
                line(out, "CLIENT_ERROR sleep must be one second or less")
            }
            Some(_) => line(out, "OK"),
        }
        return Done::CONTINUE;
    }
    if n == 2 && (prefix_matches(sub, b"enable") || prefix_matches(sub, b"disable")) {
        line(out, "OK");
        return Done::CONTINUE;
    }
    line(out, "ERROR");
    Done::CONTINUE
}

/// `stats cachedump <class> <limit>`.
pub fn cachedump(ctx: &WorkerCtx, t: &Tokens<'_>, out: &mut Output) {
    let buf = out.buf();
    if !ctx.shared.settings.dump_enabled {
        encode::line(buf, b"CLIENT_ERROR stats cachedump not allowed");
        return;
    }
    if t.count() < 4 {
        encode::line(buf, b"CLIENT_ERROR bad command line");
        return;
    }
    let number = osmium_protocol::ascii::numbers::tokto_u32;
    let (Some(id), Some(limit)) = (number(t.get(2)), number(t.get(3))) else {
        encode::line(buf, b"CLIENT_ERROR bad command line format");
        return;
    };
    if id >= MAX_CLASSES {
        encode::line(buf, b"CLIENT_ERROR Illegal slab id");
        return;
    }
    let store = ctx.store();
    let started = store.clock().process_started();
    if id == 1 {
        let start = buf.len();
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
                let mut line = Vec::with_capacity(key.len() + 40);
                line.extend_from_slice(b"ITEM ");
                line.extend_from_slice(key);
                line.extend_from_slice(b" [");
                number_into(&mut line, e.value_len as u64);
                line.extend_from_slice(b" b; ");
                let exp = if e.exptime == 0 {
                    0
                } else {
                    i64::from(e.exptime) + started
                };
                number_into(&mut line, exp as u64);
                line.extend_from_slice(b" s]\r\n");
                if buf.len() - start + line.len() + 6 > CACHEDUMP_LIMIT {
                    full = true;
                    return;
                }
                buf.extend_from_slice(&line);
                shown += 1;
            })
        {}
    }
    buf.extend_from_slice(b"END\r\n");
}

fn number_into(out: &mut Vec<u8>, n: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_uri_encoded_as_memcached_does() {
        let mut out = Vec::new();
        uri_encode(b"a-b.c_d~e f/g%\x00", &mut out);
        assert_eq!(out, b"a-b.c_d~e%20f%2Fg%25%00");
    }

    #[test]
    fn crawler_class_lists() {
        assert_eq!(classes(b"all"), Some(u64::MAX));
        assert_eq!(classes(b"1,3"), Some(0b1010));
        assert_eq!(classes(b"0"), None);
        assert_eq!(classes(b"64"), None);
        assert_eq!(classes(b"x"), None);
    }
}
