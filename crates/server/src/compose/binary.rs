//! Reply encoders of the binary protocol (protocol-binary.txt): response
//! packets echoing the request's opcode and opaque, memcached's error
//! texts, and a hit's packet built straight from item memory.
//!
//! ```text
//!   81 <op> <keylen> <extlen=4> 00 <status=0> <bodylen> <opaque> <cas>
//!   <flags: 4 bytes> [<key>] <value>
//! ```

use osmium_protocol::binary::{self as wire, status};
use osmium_protocol::request::BinaryReply;
use osmium_store::ItemView;

use crate::compose::output::Output;
use crate::stats::counters::ThreadStats;

/// A success with an optional body (no extras, no key), unless quiet.
#[inline]
pub fn ok(out: &mut Output, r: &BinaryReply, cas: u64, body: &[u8]) {
    if !r.quiet {
        wire::put_response(out.buf(), r.opcode, r.opaque, cas, body);
    }
}

/// A success sent even by a quiet opcode (NOOP, STAT packets...).
#[inline]
pub fn always(out: &mut Output, r: &BinaryReply, cas: u64, body: &[u8]) {
    wire::put_response(out.buf(), r.opcode, r.opaque, cas, body);
}

/// An error status with memcached's text for it.
#[inline]
pub fn error(out: &mut Output, r: &BinaryReply, code: u16) {
    wire::put_error(out.buf(), r.opcode, code, r.opaque);
}

/// Status "out of memory" with memcached's text for the situation.
#[inline]
pub fn out_of_memory(out: &mut Output, r: &BinaryReply, msg: &[u8]) {
    wire::put_response_with_status(out.buf(), r.opcode, status::OUT_OF_MEMORY, r.opaque, 0, msg);
}

/// A status with an empty body (SASL "continue").
#[inline]
pub fn status_only(out: &mut Output, r: &BinaryReply, code: u16) {
    wire::put_response_with_status(out.buf(), r.opcode, code, r.opaque, 0, &[]);
}

/// A GET/GAT hit (the key too for GETK/GATK; `with_value` false for
/// TOUCH, which answers the flags only). A large value leaves straight
/// from item memory.
#[inline]
pub fn hit(
    out: &mut Output,
    r: &BinaryReply,
    it: &ItemView<'_>,
    with_value: bool,
    stats: &ThreadStats,
) {
    let value: &[u8] = if with_value { it.value() } else { &[] };
    let key = r.with_key.then(|| it.key());
    if out.direct_takes(value.len(), it.lock_free()) {
        wire::put_hit_head(
            out.buf(),
            r.opcode,
            r.opaque,
            it.cas(),
            it.flags(),
            key,
            value.len(),
        );
        out.put_value(value, &[], true, stats);
    } else {
        wire::put_hit(
            out.buf(),
            r.opcode,
            r.opaque,
            it.cas(),
            it.flags(),
            key,
            value,
        );
    }
}

/// A GET/GAT miss: nothing for a quiet opcode, the key for GETK/GATK,
/// else "Not found". True when memcached writes it at once (the error).
#[inline]
pub fn miss(out: &mut Output, r: &BinaryReply, key: &[u8]) -> bool {
    if r.quiet {
        false
    } else if r.with_key {
        wire::put_keyed_miss(out.buf(), r.opcode, r.opaque, key);
        false
    } else {
        error(out, r, status::KEY_NOT_FOUND);
        true
    }
}

/// STAT's reply: each `STAT name value\r\n` line of `text` as a packet,
/// then an empty packet.
pub fn stats(out: &mut Output, opaque: u32, text: &[u8]) {
    let buf = out.buf();
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(stat) = line.strip_prefix(b"STAT ") else {
            continue;
        };
        let space = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
        let value = stat.get(space + 1..).unwrap_or(&[]);
        wire::put_stat(buf, opaque, &stat[..space], value);
    }
    wire::put_stat(buf, opaque, &[], &[]);
}
