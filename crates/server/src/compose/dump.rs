//! The key dumps' formats, memcached's own rather than any protocol's
//! replies: `lru_crawler metadump` (one line of metadata per item),
//! `lru_crawler mgdump` (one `mg <key>` per item) and `stats cachedump`:
//!
//! ```text
//!   key=<uri-encoded key> exp=<unix time|-1> la=<unix time> cas=<n> fetch=<yes|no> cls=<id> size=<bytes> flags=<n>\n
//!   mg <key>\r\n          mg <base64 key> b\r\n
//!   ITEM <key> [<bytes> b; <unix exptime|0> s]\r\n
//! ```
//!
//! The executor walks the items (`execute::dump`) and has each written
//! here.

use osmium_protocol::base64::base64_encode;
use osmium_store::DumpEntry;

use crate::compose::meta::number;
use crate::compose::output::Output;

/// memcached's limit on a cachedump reply.
const CACHEDUMP_LIMIT: usize = 2 << 20;

/// One item of a crawler dump: an `mg` line (`mg`), else a metadump line;
/// `cls` is its slab class, `started` the clock's start in Unix time.
pub(crate) fn crawler_item(out: &mut Output, mg: bool, e: &DumpEntry<'_>, cls: u32, started: i64) {
    let buf = out.buf();
    if mg {
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
}

/// A crawler dump's closing line.
pub(crate) fn crawler_end(out: &mut Output, mg: bool) {
    out.buf()
        .extend_from_slice(if mg { b"EN\r\n" } else { b"END\r\n" });
}

/// One `stats cachedump` line (`exp`: the expiry in Unix time, 0 for
/// never) for a reply begun at `start`; false, and nothing written, when
/// it would take the reply past memcached's limit.
pub(crate) fn cachedump_item(
    out: &mut Output,
    start: usize,
    key: &[u8],
    value_len: usize,
    exp: i64,
) -> bool {
    let at = out.len();
    let line = out.buf();
    line.extend_from_slice(b"ITEM ");
    line.extend_from_slice(key);
    line.extend_from_slice(b" [");
    number(line, value_len as u64);
    line.extend_from_slice(b" b; ");
    number(line, exp as u64);
    line.extend_from_slice(b" s]\r\n");
    // Room is kept for the closing line.
    if out.len() - start + CACHEDUMP_END.len() + 1 > CACHEDUMP_LIMIT {
        out.truncate(at);
        return false;
    }
    true
}

/// The end of a `stats cachedump` reply.
pub(crate) fn cachedump_end(out: &mut Output) {
    out.buf().extend_from_slice(CACHEDUMP_END);
}

const CACHEDUMP_END: &[u8] = b"END\r\n";

pub(crate) use osmium_protocol::encode::uri_encode;
