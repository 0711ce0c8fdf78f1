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

/// Whether a get's large value may leave straight from item memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Direct {
    /// No: a later key of the command could still turn the reply into an
    /// error (or the caller streams its keys).
    No,
    /// Yes, with the value's `\r\n`.
    Value,
    /// Yes, and this is the command's last key: the reply's `END\r\n` goes
    /// in the same write, so a large GET is one system call and one
    /// segment, as memcached sends it.
    ValueAndEnd,
}

/// A hit of get/gets/gat/gats. The value leaves straight from item memory
/// when it is large and `direct` allows it; true if the reply's `END` was
/// written with it.
#[inline]
pub fn value(
    out: &mut Output,
    it: &ItemView<'_>,
    with_cas: bool,
    direct: impl FnOnce() -> Direct,
    stats: &ThreadStats,
) -> bool {
    let value = it.value();
    let cas = with_cas.then(|| it.cas());
    encode::value_header(out.buf(), it.key(), it.flags(), value.len(), cas);
    if out.direct_takes(value.len(), it.lock_free()) {
        match direct() {
            Direct::Value => {
                out.put_value(value, b"\r\n", true, stats);
                return false;
            }
            Direct::ValueAndEnd => {
                out.put_value(value, b"\r\nEND\r\n", true, stats);
                return true;
            }
            Direct::No => {}
        }
    }
    let buf = out.buf();
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
    false
}

/// The end of a retrieval reply.
#[inline]
pub fn end(out: &mut Output) {
    out.buf().extend_from_slice(b"END\r\n");
}
