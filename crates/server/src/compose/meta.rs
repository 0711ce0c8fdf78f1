//! Reply encoders of the meta commands: a status code (`HD`, `VA <size>`,
//! `EN`, `NF`, `NS`, `EX`, `MN`, `ME`) followed by return flags in the
//! order their flags appear in the request, as memcached writes them:
//!
//! ```text
//!   VA 5 c99 f0 Oabc kfoo\r\n<value>\r\n      (mg foo v c f Oabc k)
//!   HD kZm9v b\r\n                            (a base64 key comes back encoded, then " b")
//! ```
//!
//! `q` hides only the nominal reply; errors are always sent. [`outcome`]
//! says a request's [`Outcome`] so; what meta has no words of its own for
//! (errors, `stats`, `version`) is said as the text protocol says it.

use osmium_protocol::base64::base64_encode;
use osmium_protocol::request::MetaReply;
use osmium_store::{RemoveResult, StoreStatus};

use crate::compose::outcome::{Counted, Counter, ItemDebug, MetaHit, Outcome, Status, Stored};
use crate::compose::output::Output;
use crate::compose::text;

/// Longest `O` token memcached returns, the `O` included
/// (`MFLAG_MAX_OPAQUE_LENGTH`, compared with the whole token's length).
pub(crate) const MAX_OPAQUE_TOKEN: usize = 32;

/// memcached's error for a longer one.
pub(crate) const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";

#[inline]
pub(crate) fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
}

/// ` <c><number>`: one returned flag.
#[inline]
pub(crate) fn flag_number(out: &mut Vec<u8>, c: u8, n: impl itoa::Integer) {
    out.push(b' ');
    out.push(c);
    number(out, n);
}

/// ` k<key>`, base64 encoded and followed by ` b` for binary keys.
pub(crate) fn flag_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    if binary {
        base64_encode(key, out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

/// ` t<seconds left>`, or ` t-1` for an item that never expires.
pub(crate) fn flag_ttl(out: &mut Vec<u8>, exptime: u32, now: u32) {
    if exptime == 0 {
        out.extend_from_slice(b" t-1");
    } else {
        flag_number(out, b't', exptime.wrapping_sub(now));
    }
}

/// ` O<opaque>`; false (nothing written) when it is longer than memcached
/// returns.
#[inline]
pub(crate) fn flag_opaque(out: &mut Vec<u8>, token: &[u8]) -> bool {
    if token.len() > MAX_OPAQUE_TOKEN {
        return false;
    }
    out.push(b' ');
    out.extend_from_slice(token);
    true
}

/// The `O` and `k` flags of a reply that has no item to describe (a miss,
/// `NF`, `NS`, `EX`): false when an opaque is too long.
pub(crate) fn opaque_and_key(out: &mut Vec<u8>, reply: &MetaReply<'_>, key: &[u8]) -> bool {
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
pub(crate) fn error(out: &mut Output, start: usize, msg: &str) {
    out.truncate(start);
    let buf = out.buf();
    buf.extend_from_slice(msg.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// Ends the status line; with `q`, drops the nominal reply written from
/// `start` instead.
pub(crate) fn finish(out: &mut Output, start: usize, quiet: bool) {
    if quiet {
        out.truncate(start);
    } else {
        out.buf().extend_from_slice(b"\r\n");
    }
}

/// Whether a reply to `m` cannot be written: memcached refuses a request
/// whose `O` token is longer than it returns, some before running it.
pub(crate) fn unwritable(m: &MetaReply<'_>) -> bool {
    m.flags()
        .any(|t| t[0] == b'O' && t.len() > MAX_OPAQUE_TOKEN)
}

/// Says `o` as the meta protocol does.
#[inline]
pub(crate) fn outcome(out: &mut Output, m: &MetaReply<'_>, o: &Outcome<'_>) {
    match *o {
        Outcome::Stored(s) => stored(out, m, &s),
        Outcome::Deleted { result, key } => deleted(out, m, result, key),
        Outcome::Counter(c) => counter(out, m, &c),
        Outcome::MetaHit(h) => hit(out, m, h),
        Outcome::MetaMiss { key } => miss(out, m, key),
        Outcome::MetaDebug(d) => debug(out, d),
        // Errors ignore `q`.
        _ => text::outcome(out, false, o),
    }
}

/// An ms's reply: its status and return flags.
fn stored(out: &mut Output, m: &MetaReply<'_>, s: &Stored<'_>) {
    let code: &[u8] = match s.status {
        StoreStatus::Stored => b"HD",
        StoreStatus::Exists => b"EX",
        StoreStatus::NotFound => b"NF",
        StoreStatus::NotStored => b"NS",
        StoreStatus::TooLarge => {
            return text::line(out, false, text::status_line(Status::TooLarge))
        }
        StoreStatus::OutOfMemory => {
            return text::line(out, false, text::status_line(Status::NoMemory))
        }
    };
    let start = out.len();
    let ok = s.status == StoreStatus::Stored;
    let buf = out.buf();
    buf.extend_from_slice(code);
    for tok in m.flags() {
        match tok[0] {
            b'O' => {
                flag_opaque(buf, tok);
            }
            b'k' => flag_key(buf, s.key, s.binary_key),
            b'c' => flag_number(buf, b'c', if ok { s.cas } else { 0 }),
            b's' => flag_number(buf, b's', s.size),
            _ => {}
        }
    }
    finish(out, start, ok && m.quiet);
}

/// An md's reply: `HD`, `EX` or `NF` with the `O` and `k` flags.
fn deleted(out: &mut Output, m: &MetaReply<'_>, result: RemoveResult, key: &[u8]) {
    let code: &[u8] = match result {
        RemoveResult::Removed | RemoveResult::Kept => b"HD",
        RemoveResult::Exists => b"EX",
        RemoveResult::NotFound => b"NF",
    };
    let start = out.len();
    out.buf().extend_from_slice(code);
    if !opaque_and_key(out.buf(), m, key) {
        return error(out, start, OPAQUE_TOO_LONG);
    }
    finish(out, start, m.quiet && code == b"HD");
}

/// An ma's reply: `HD` (or `VA <len>` with `v`) and its flags, then the
/// value; `NF`, `EX`, `NS` with the `O` and `k` flags (never hidden by
/// `q`).
fn counter(out: &mut Output, m: &MetaReply<'_>, c: &Counter<'_>) {
    let start = out.len();
    let (value, cas, exptime, created) = match c.result {
        Counted::Value {
            value,
            cas,
            exptime,
            created,
        } => (value, cas, exptime, created),
        Counted::NonNumeric => {
            return text::line(out, false, text::status_line(Status::NonNumeric))
        }
        Counted::OutOfMemory | Counted::CreateOutOfMemory => {
            return text::line(out, false, text::status_line(Status::CounterNoMemory))
        }
        other => {
            let code: &[u8] = match other {
                Counted::NotFound => b"NF",
                Counted::Exists => b"EX",
                _ => b"NS",
            };
            out.buf().extend_from_slice(code);
            if !opaque_and_key(out.buf(), m, c.key) {
                return error(out, start, OPAQUE_TOO_LONG);
            }
            out.buf().extend_from_slice(b"\r\n");
            return;
        }
    };
    let value_wanted = m.flags().any(|t| t[0] == b'v');
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(value).as_bytes();
    let buf = out.buf();
    if value_wanted {
        buf.extend_from_slice(b"VA ");
        number(buf, digits.len());
    } else {
        buf.extend_from_slice(b"HD");
    }
    let mut shown_exptime = exptime;
    for tok in m.flags() {
        match tok[0] {
            b'c' => flag_number(buf, b'c', cas),
            b't' => flag_ttl(buf, shown_exptime, c.now),
            b'T' => shown_exptime = c.ttl.unwrap_or(0),
            b'N' if created => shown_exptime = c.vivify.unwrap_or(0),
            b'O' if !flag_opaque(buf, tok) => return error(out, start, OPAQUE_TOO_LONG),
            b'k' => flag_key(buf, c.key, m.binary_key),
            _ => {}
        }
    }
    if value_wanted {
        buf.extend_from_slice(b"\r\n");
        buf.extend_from_slice(digits);
    }
    finish(out, start, m.quiet);
}

/// An mg's hit: `VA <size>` or `HD`, the return flags in request order
/// (a `t` shows the expiry as the `T` and `N` before it left it), then
/// `Z` (a token was already sent), `X` (stale), `W` (won), and the value,
/// which may be queued from item memory as it ends the reply. An `O`
/// longer than memcached returns replaces the reply with its error.
fn hit(out: &mut Output, m: &MetaReply<'_>, h: &MetaHit<'_>) {
    let it = h.item;
    let start = out.len();
    let buf = out.buf();
    if h.send_value {
        buf.extend_from_slice(b"VA ");
        number(buf, it.value_len());
    } else {
        buf.extend_from_slice(b"HD");
    }
    let mut exptime = h.exptime;
    for tok in m.flags() {
        match tok[0] {
            b'T' => exptime = h.ttl_exptime,
            b'N' if h.created => exptime = h.vivify_exptime,
            b's' => flag_number(buf, b's', it.value_len()),
            b't' => flag_ttl(buf, exptime, h.now),
            b'c' => flag_number(buf, b'c', it.cas()),
            b'f' => flag_number(buf, b'f', it.flags()),
            b'l' => flag_number(buf, b'l', h.now.wrapping_sub(it.atime())),
            b'h' => buf.extend_from_slice(if it.fetched() { b" h1" } else { b" h0" }),
            b'O' if !flag_opaque(buf, tok) => return error(out, start, OPAQUE_TOO_LONG),
            b'k' => flag_key(buf, it.key(), it.binary_key()),
            _ => {}
        }
    }
    // Z before W, so a winner never also sees Z.
    if it.token_sent() {
        buf.extend_from_slice(b" Z");
    }
    if it.stale() {
        buf.extend_from_slice(b" X");
    }
    if h.won {
        buf.extend_from_slice(b" W");
    }
    buf.extend_from_slice(b"\r\n");
    if h.send_value {
        let value = it.value();
        match value.as_raw() {
            Some(raw) => out.put_value(raw, b"\r\n", it.lock_free()),
            None => {
                if !text::decoded_value(out, value, start) {
                    out.note_corrupt();
                }
            }
        }
    }
}

/// An mg's miss: `EN` with the `O` and `k` flags, hidden by `q`.
fn miss(out: &mut Output, m: &MetaReply<'_>, key: &[u8]) {
    let start = out.len();
    out.buf().extend_from_slice(b"EN");
    if !opaque_and_key(out.buf(), m, key) {
        return error(out, start, OPAQUE_TOO_LONG);
    }
    finish(out, start, m.quiet);
}

/// An me's line, or `EN` (flags and `q` play no part).
fn debug(out: &mut Output, d: Option<&ItemDebug<'_>>) {
    let buf = out.buf();
    let Some(d) = d else {
        buf.extend_from_slice(b"EN\r\n");
        return;
    };
    buf.extend_from_slice(b"ME ");
    if d.binary_key {
        base64_encode(d.key, buf);
    } else {
        buf.extend_from_slice(d.key);
    }
    buf.extend_from_slice(b" exp=");
    number(buf, d.exp);
    buf.extend_from_slice(b" la=");
    number(buf, d.last_access);
    buf.extend_from_slice(b" cas=");
    number(buf, d.cas);
    buf.extend_from_slice(if d.fetched {
        b" fetch=yes cls="
    } else {
        b" fetch=no cls="
    });
    number(buf, d.class);
    buf.extend_from_slice(b" size=");
    number(buf, d.size);
    buf.extend_from_slice(b"\r\n");
}
