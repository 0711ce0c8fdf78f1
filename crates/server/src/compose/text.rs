//! Reply encoders of the classic text protocol: status lines (suppressed
//! by noreply, as memcached's `out_string`), numbers, and a hit's
//! `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n` block.

use osmium_protocol::encode;
use osmium_store::ItemView;

use crate::compose::output::Output;
use crate::stats::counters::ThreadStats;

/// A status or error line, unless noreply.
#[inline]
pub fn line(out: &mut Output, noreply: bool, msg: &str) {
    if !noreply {
        encode::line(out.buf(), msg.as_bytes());
    }
}

/// A decimal number line (incr/decr), unless noreply.
#[inline]
pub fn number(out: &mut Output, noreply: bool, n: u64) {
    if !noreply {
        encode::number_line(out.buf(), n);
    }
}

/// A hit of get/gets/gat/gats. The value leaves straight from item memory
/// when it is large and `direct_ok` (no later part of the reply can still
/// turn it into an error).
#[inline]
pub fn value(
    out: &mut Output,
    it: &ItemView<'_>,
    with_cas: bool,
    direct_ok: impl FnOnce() -> bool,
    stats: &ThreadStats,
) {
    let value = it.value();
    let cas = with_cas.then(|| it.cas());
    encode::value_header(out.buf(), it.key(), it.flags(), value.len(), cas);
    if out.direct_takes(value.len(), it.lock_free()) && direct_ok() {
        out.put_value(value, b"\r\n", true, stats);
    } else {
        let buf = out.buf();
        buf.extend_from_slice(value);
        buf.extend_from_slice(b"\r\n");
    }
}

/// The end of a retrieval reply.
#[inline]
pub fn end(out: &mut Output) {
    out.buf().extend_from_slice(b"END\r\n");
}
