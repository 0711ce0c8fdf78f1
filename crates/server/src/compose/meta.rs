//! Reply encoders of the meta commands: a status code (`HD`, `VA <size>`,
//! `EN`, `NF`, `NS`, `EX`, `MN`, `ME`) followed by return flags in the
//! order their flags appear in the request, as memcached writes them:
//!
//! ```text
//!   VA 5 c99 f0 Oabc kfoo\r\n<value>\r\n      (mg foo v c f Oabc k)
//!   HD kZm9v b\r\n                            (a base64 key comes back encoded, then " b")
//! ```
//!
//! `q` hides only the nominal reply; errors are always sent.

use osmium_protocol::base64::base64_encode;
use osmium_protocol::request::MetaReply;

use crate::compose::output::Output;

/// Longest `O` token memcached returns, the `O` included
/// (`MFLAG_MAX_OPAQUE_LENGTH`, compared with the whole token's length).
pub const MAX_OPAQUE_TOKEN: usize = 32;

/// memcached's error for a longer one.
pub const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";

#[inline]
pub fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
}

/// ` <c><number>`: one returned flag.
#[inline]
pub fn flag_number(out: &mut Vec<u8>, c: u8, n: impl itoa::Integer) {
    out.push(b' ');
    out.push(c);
    number(out, n);
}

/// ` k<key>`, base64 encoded and followed by ` b` for binary keys.
pub fn flag_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    if binary {
        base64_encode(key, out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

/// ` t<seconds left>`, or ` t-1` for an item that never expires.
pub fn flag_ttl(out: &mut Vec<u8>, exptime: u32, now: u32) {
    if exptime == 0 {
        out.extend_from_slice(b" t-1");
    } else {
        flag_number(out, b't', exptime.wrapping_sub(now));
    }
}

/// ` O<opaque>`; false (nothing written) when it is longer than memcached
/// returns.
#[inline]
pub fn flag_opaque(out: &mut Vec<u8>, token: &[u8]) -> bool {
    if token.len() > MAX_OPAQUE_TOKEN {
        return false;
    }
    out.push(b' ');
    out.extend_from_slice(token);
    true
}

/// The `O` and `k` flags of a reply that has no item to describe (a miss,
/// `NF`, `NS`, `EX`): false when an opaque is too long.
pub fn opaque_and_key(out: &mut Vec<u8>, reply: &MetaReply<'_>, key: &[u8]) -> bool {
    for tok in reply.flags() {
        match tok[0] {
            b'O' if !flag_opaque(out, tok) => return false,
            b'k' => flag_key(out, key, reply.binary_key),
            _ => {}
        }
    }
    true
}

/// Replaces whatever this command wrote from `start` with an error line
/// (errors ignore `q`).
pub fn error(out: &mut Output, start: usize, msg: &str) {
    out.truncate(start);
    let buf = out.buf();
    buf.extend_from_slice(msg.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// Ends the status line; with `q`, drops the nominal reply written from
/// `start` instead.
pub fn finish(out: &mut Output, start: usize, quiet: bool) {
    if quiet {
        out.truncate(start);
    } else {
        out.buf().extend_from_slice(b"\r\n");
    }
}
