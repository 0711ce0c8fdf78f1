//! Reply encoders of the binary protocol (protocol-binary.txt): response
//! packets echoing the request's opcode and opaque, memcached's error
//! texts, and a hit's packet built straight from item memory; [`outcome`]
//! says a request's [`Outcome`] as memcached's binary protocol does.
//!
//! ```text
//!   81 <op> <keylen> <extlen=4> 00 <status=0> <bodylen> <opaque> <cas>
//!   <flags: 4 bytes> [<key>] <value>
//! ```

use osmium_protocol::binary::{self as wire, status};
use osmium_protocol::request::{BinaryReply, StoreMode};
use osmium_store::{ItemView, RemoveResult, StoreStatus, ValueRef};

use crate::compose::outcome::{Auth, Counted, Outcome, Status, Stored};
use crate::compose::output::Output;
use crate::compose::stat_rows::StatRows;
use crate::settings::VERSION;

/// A success with an optional body (no extras, no key), unless quiet.
#[inline]
pub(crate) fn ok(out: &mut Output, r: &BinaryReply, cas: u64, body: &[u8]) {
    if !r.quiet {
        wire::put_response(out.buf(), r.opcode, r.opaque, cas, body);
    }
}

/// A success sent even by a quiet opcode (NOOP, STAT packets...).
#[inline]
pub(crate) fn always(out: &mut Output, r: &BinaryReply, cas: u64, body: &[u8]) {
    wire::put_response(out.buf(), r.opcode, r.opaque, cas, body);
}

/// An error status with memcached's text for it.
#[inline]
pub(crate) fn error(out: &mut Output, r: &BinaryReply, code: u16) {
    wire::put_error(out.buf(), r.opcode, code, r.opaque);
}

/// Status "out of memory" with memcached's text for the situation.
#[inline]
pub(crate) fn out_of_memory(out: &mut Output, r: &BinaryReply, msg: &[u8]) {
    wire::put_response_with_status(out.buf(), r.opcode, status::OUT_OF_MEMORY, r.opaque, 0, msg);
}

/// A status with an empty body (SASL "continue").
#[inline]
pub(crate) fn status_only(out: &mut Output, r: &BinaryReply, code: u16) {
    wire::put_response_with_status(out.buf(), r.opcode, code, r.opaque, 0, &[]);
}

/// A GET/GAT hit (the key too for GETK/GATK; `with_value` false for
/// TOUCH, which answers the flags only). A large value leaves straight
/// from item memory; a packed one is decoded into the buffer, and one that
/// does not decode leaves no reply (false: the caller answers a miss).
#[inline]
pub(crate) fn hit(out: &mut Output, r: &BinaryReply, it: &ItemView<'_>, with_value: bool) -> bool {
    let value = if with_value {
        it.value()
    } else {
        ValueRef::Raw(&[])
    };
    let key = r.with_key.then(|| it.key());
    let Some(value) = value.as_raw() else {
        return packed_hit(out, r, it, key, value);
    };
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
        out.put_value(value, &[], true);
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
    true
}

/// A hit whose value is packed: decoded into the buffer after the head
/// (true); one that does not decode leaves no reply (false). Kept out of
/// line (see `text::packed_value`).
#[cold]
#[inline(never)]
fn packed_hit(
    out: &mut Output,
    r: &BinaryReply,
    it: &ItemView<'_>,
    key: Option<&[u8]>,
    value: ValueRef<'_>,
) -> bool {
    let start = out.len();
    wire::put_hit_head(
        out.buf(),
        r.opcode,
        r.opaque,
        it.cas(),
        it.flags(),
        key,
        value.len(),
    );
    if value.append_to(out.buf()).is_err() {
        out.truncate(start);
        return false;
    }
    true
}

/// A GET/GAT miss: nothing for a quiet opcode, the key for GETK/GATK,
/// else "Not found". True when memcached writes it at once (the error).
#[inline]
pub(crate) fn miss(out: &mut Output, r: &BinaryReply, key: &[u8]) -> bool {
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

/// STAT's reply: each row as a packet (its name the key, its value the
/// body), then an empty packet.
pub(crate) fn stats(out: &mut Output, opaque: u32, rows: &StatRows) {
    let buf = out.buf();
    for (name, value) in rows.iter() {
        wire::put_stat(buf, opaque, name, value);
    }
    wire::put_stat(buf, opaque, &[], &[]);
}

/// Says `o` as memcached's binary protocol does; true when memcached sends
/// it at once (an error status).
#[inline]
pub(crate) fn outcome(out: &mut Output, r: &BinaryReply, o: &Outcome<'_>) -> bool {
    match *o {
        Outcome::Stored(s) => return stored(out, r, &s),
        Outcome::Deleted { result, .. } => match result {
            RemoveResult::Removed | RemoveResult::Kept => ok(out, r, 0, &[]),
            RemoveResult::Exists => error(out, r, status::KEY_EXISTS),
            RemoveResult::NotFound => error(out, r, status::KEY_NOT_FOUND),
        },
        Outcome::Counter(c) => match c.result {
            Counted::Value { value, cas, .. } => ok(out, r, cas, &value.to_be_bytes()),
            Counted::NonNumeric => error(out, r, status::NON_NUMERIC_VALUE),
            Counted::Exists => error(out, r, status::KEY_EXISTS),
            Counted::NotStored => error(out, r, status::ITEM_NOT_STORED),
            Counted::NotFound => error(out, r, status::KEY_NOT_FOUND),
            Counted::OutOfMemory => out_of_memory(out, r, b"Out of memory incrementing value"),
            Counted::CreateOutOfMemory => {
                out_of_memory(out, r, b"Out of memory allocating new item")
            }
        },
        Outcome::Status(s) | Outcome::Loud(s) => match s {
            Status::Ok => ok(out, r, 0, &[]),
            // memcached answers a refused flush with "auth failure".
            Status::FlushNotAllowed => error(out, r, status::AUTH_ERROR),
            Status::TooLarge => error(out, r, status::VALUE_TOO_LARGE),
            Status::NotFound => error(out, r, status::KEY_NOT_FOUND),
            _ => error(out, r, status::UNKNOWN_COMMAND),
        },
        // A binary get has one key, checked when parsed.
        Outcome::Message(_) | Outcome::LoudMessage(_) | Outcome::GetKeyTooLong { .. } => {
            error(out, r, status::UNKNOWN_COMMAND)
        }
        Outcome::Version => always(out, r, 0, VERSION.as_bytes()),
        Outcome::Verbosity | Outcome::Noop => always(out, r, 0, &[]),
        Outcome::Quit => ok(out, r, 0, &[]),
        Outcome::Stats(rows) => stats(out, r.opaque, rows),
        Outcome::PrefixDump(report) => {
            wire::put_stat(out.buf(), r.opaque, b"detailed", report);
            stats(out, r.opaque, &StatRows::new());
        }
        Outcome::GetMiss { key } => return miss(out, r, key),
        // Only meta requests (mg, me) have these.
        Outcome::MetaHit(_) | Outcome::MetaMiss { .. } | Outcome::MetaDebug(_) => {}
        Outcome::Auth(a) => match a {
            Auth::Mechanisms => always(out, r, 0, crate::auth::SASL_MECHANISMS),
            Auth::Authenticated => always(out, r, 0, b"Authenticated"),
            Auth::Continue => status_only(out, r, status::AUTH_CONTINUE),
            Auth::Failed => error(out, r, status::AUTH_ERROR),
            Auth::Disabled => error(out, r, status::UNKNOWN_COMMAND),
            Auth::MechanismTooLong => error(out, r, status::INVALID_ARGUMENTS),
            Auth::TooLarge => error(out, r, status::OUT_OF_MEMORY),
        },
    }
    sent_at_once(o)
}

/// Whether memcached writes this reply at once: every status but success.
fn sent_at_once(o: &Outcome<'_>) -> bool {
    match *o {
        Outcome::Deleted { result, .. } => {
            !matches!(result, RemoveResult::Removed | RemoveResult::Kept)
        }
        Outcome::Counter(c) => !matches!(c.result, Counted::Value { .. }),
        Outcome::Status(s) | Outcome::Loud(s) => s != Status::Ok,
        Outcome::Message(_) | Outcome::LoudMessage(_) | Outcome::GetKeyTooLong { .. } => true,
        Outcome::Auth(a) => !matches!(a, Auth::Mechanisms | Auth::Authenticated),
        _ => false,
    }
}

/// A storage command's reply (SET/ADD/REPLACE, APPEND/PREPEND); true for
/// an error.
#[inline]
fn stored(out: &mut Output, r: &BinaryReply, s: &Stored<'_>) -> bool {
    let concat = matches!(s.mode, StoreMode::Append | StoreMode::Prepend);
    let code = match s.status {
        StoreStatus::Stored => {
            ok(out, r, s.cas, &[]);
            return false;
        }
        StoreStatus::Exists => status::KEY_EXISTS,
        StoreStatus::NotFound => status::KEY_NOT_FOUND,
        _ if concat => status::ITEM_NOT_STORED,
        StoreStatus::NotStored => match s.mode {
            StoreMode::Add => status::KEY_EXISTS,
            StoreMode::Replace => status::KEY_NOT_FOUND,
            _ => status::ITEM_NOT_STORED,
        },
        StoreStatus::TooLarge => status::VALUE_TOO_LARGE,
        StoreStatus::OutOfMemory => {
            // memcached fails the allocation before reading the value.
            out_of_memory(out, r, b"Out of memory allocating item");
            return true;
        }
    };
    error(out, r, code);
    true
}
