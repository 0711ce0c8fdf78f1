//! Reply encoders of the classic text protocol: status lines (suppressed
//! by noreply, as memcached's `out_string`), numbers, and a hit's
//! `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n` block; and
//! [`outcome`], which says any request's [`Outcome`] in memcached's text
//! (the meta composer uses it too for what meta has no words of its own
//! for, such as errors).

use osmium_protocol::ascii::{GET_KEY_TOO_LONG, GET_KEY_TOO_LONG_NOREPLY};
use osmium_protocol::encode;
use osmium_store::{ItemView, RemoveResult, StoreStatus};

use crate::compose::outcome::{Counted, Outcome, Status};
use crate::compose::output::Output;
use crate::compose::stat_rows::StatRows;
use crate::settings::VERSION;

/// memcached's line for each fixed answer.
pub(crate) fn status_line(s: Status) -> &'static str {
    match s {
        Status::Ok => "OK",
        Status::Error => "ERROR",
        Status::Reset => "RESET",
        Status::NotFound => "NOT_FOUND",
        Status::TooLarge => "SERVER_ERROR object too large for cache",
        Status::NoMemory => "SERVER_ERROR out of memory storing object",
        Status::BadChunk => "CLIENT_ERROR bad data chunk",
        Status::OpaqueTooLong => "CLIENT_ERROR opaque token too long",
        Status::NonNumeric => "CLIENT_ERROR cannot increment or decrement non-numeric value",
        Status::CounterNoMemory => "SERVER_ERROR out of memory",
        Status::FlushNotAllowed => "CLIENT_ERROR flush_all not allowed",
        Status::InvalidExptime => "CLIENT_ERROR invalid exptime argument",
        Status::ShutdownDisabled => "SERVER_ERROR: shutdown not enabled",
        Status::InvalidShutdownMode => "CLIENT_ERROR invalid shutdown mode",
        Status::MemlimitTooSmall => "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m",
        Status::MemlimitNotBytes => "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes",
        Status::MemlimitFailed => "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust",
        Status::SlabReassignDisabled => "CLIENT_ERROR slab reassignment disabled",
        Status::HotWarmPercents => "ERROR hot and warm pcts must not exceed 80",
        Status::AgeFactors => "ERROR hot/warm age factors must be greater than 0",
        Status::WatchNotAllowed => "CLIENT_ERROR watch commands not allowed",
        Status::BadFormat => "CLIENT_ERROR bad command line format",
        Status::BadCommandLine => "CLIENT_ERROR bad command line",
        Status::AutomoveWindow => "CLIENT_ERROR automove window too low or too high",
        Status::TlsNotEnabled => "Error TLS not enabled",
        Status::DetailNotAllowed => "CLIENT_ERROR stats detail not allowed",
        Status::DetailUsage => "CLIENT_ERROR usage: stats detail on|off|dump",
        Status::CrawlerDisabled => "CLIENT_ERROR lru crawler disabled",
        Status::KeyDumpNotAllowed => "ERROR key dump not allowed",
        Status::MetadumpNotAllowed => "ERROR metadump not allowed",
        Status::PipelinedMgdump => "ERROR cannot pipeline other commands before mgdump",
        Status::PipelinedMetadump => "ERROR cannot pipeline other commands before metadump",
        Status::BadClass => "BADCLASS invalid class id",
        Status::BadDumpFilter => "CLIENT_ERROR bad dump filter",
        Status::SleepTooLong => "CLIENT_ERROR sleep must be one second or less",
        Status::CachedumpNotAllowed => "CLIENT_ERROR stats cachedump not allowed",
        Status::IllegalSlabId => "CLIENT_ERROR Illegal slab id",
    }
}

/// A storage verdict's line.
#[inline]
fn stored_line(status: StoreStatus) -> &'static str {
    match status {
        StoreStatus::Stored => "STORED",
        StoreStatus::NotStored => "NOT_STORED",
        StoreStatus::Exists => "EXISTS",
        StoreStatus::NotFound => "NOT_FOUND",
        StoreStatus::TooLarge => status_line(Status::TooLarge),
        StoreStatus::OutOfMemory => status_line(Status::NoMemory),
    }
}

/// Says `o` in the text protocol (`noreply` silences all but what
/// memcached sends regardless).
#[inline]
pub(crate) fn outcome(out: &mut Output, noreply: bool, o: &Outcome<'_>) {
    match *o {
        // SASL answers in binary only; mg and me only in meta.
        Outcome::Auth(_)
        | Outcome::GetMiss { .. }
        | Outcome::MetaHit(_)
        | Outcome::MetaMiss { .. }
        | Outcome::MetaDebug(_) => {}
        Outcome::Status(s) => line(out, noreply, status_line(s)),
        Outcome::Loud(s) => line(out, false, status_line(s)),
        Outcome::Message(m) => line(out, noreply, m),
        Outcome::LoudMessage(m) => line(out, false, m),
        Outcome::Stored(s) => {
            if noreply {
                out.unsent_verdict = Some(stored_line(s.status));
            }
            line(out, noreply, stored_line(s.status))
        }
        Outcome::Deleted { result, .. } => {
            let msg = match result {
                RemoveResult::Removed | RemoveResult::Kept => "DELETED",
                RemoveResult::Exists => "EXISTS",
                RemoveResult::NotFound => "NOT_FOUND",
            };
            line(out, noreply, msg);
        }
        Outcome::Counter(c) => match c.result {
            Counted::Value { value, .. } => number(out, noreply, value),
            Counted::NotFound | Counted::Exists | Counted::NotStored => {
                line(out, noreply, "NOT_FOUND")
            }
            Counted::NonNumeric => line(out, noreply, status_line(Status::NonNumeric)),
            Counted::OutOfMemory | Counted::CreateOutOfMemory => {
                line(out, noreply, status_line(Status::CounterNoMemory))
            }
        },
        Outcome::Version => {
            let buf = out.buf();
            buf.extend_from_slice(b"VERSION ");
            buf.extend_from_slice(VERSION.as_bytes());
            buf.extend_from_slice(b"\r\n");
        }
        Outcome::Verbosity => line(out, noreply, "OK"),
        Outcome::Noop => out.buf().extend_from_slice(b"MN\r\n"),
        Outcome::Quit => {}
        Outcome::Stats(rows) => {
            stat_rows(out.buf(), rows);
            end(out);
        }
        Outcome::PrefixDump(report) => out.buf().extend_from_slice(report),
        Outcome::GetKeyTooLong {
            reply_start,
            error_hidden,
        } => {
            // memcached releases every reply it has not written, then
            // re-sends the error line it built, `\r\n` included, through
            // `out_string`, which adds another.
            if out.is_datagram() {
                out.truncate(reply_start);
            } else {
                out.release_uncommitted();
            }
            out.buf().extend_from_slice(if error_hidden {
                GET_KEY_TOO_LONG_NOREPLY
            } else {
                GET_KEY_TOO_LONG
            });
        }
    }
}

/// Stats rows as memcached's `STAT <name> <value>\r\n` lines.
pub(crate) fn stat_rows(buf: &mut Vec<u8>, rows: &StatRows) {
    for (name, value) in rows.iter() {
        buf.extend_from_slice(b"STAT ");
        buf.extend_from_slice(name);
        buf.push(b' ');
        buf.extend_from_slice(value);
        buf.extend_from_slice(b"\r\n");
    }
}

/// A status or error line, unless noreply.
#[inline]
pub(crate) fn line(out: &mut Output, noreply: bool, msg: &str) {
    if !noreply {
        encode::line(out.buf(), msg.as_bytes());
    }
}

/// A decimal number line (incr/decr), unless noreply.
#[inline]
pub(crate) fn number(out: &mut Output, noreply: bool, n: u64) {
    if !noreply {
        encode::number_line(out.buf(), n);
    }
}

/// Whether a get's large value may leave straight from item memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Direct {
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

/// What the encoder of a get hit sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The value; the caller ends the reply.
    Value,
    /// The value and the reply's `END`.
    ValueAndEnd,
    /// Nothing: the value is packed and did not decode (the caller answers
    /// a miss and has the store drop the item).
    Dropped,
}

/// A hit of get/gets/gat/gats. The value leaves straight from item memory
/// when it is large and `direct` allows it. A packed value is decoded into
/// the buffer; one that does not decode leaves no reply. A raw value's
/// answer is a constant of the path it took, so a caller's test of it
/// folds away.
#[inline]
pub(crate) fn value(
    out: &mut Output,
    it: &ItemView<'_>,
    with_cas: bool,
    direct: impl FnOnce() -> Direct,
) -> Sent {
    let value = it.value();
    let cas = with_cas.then(|| it.cas());
    let Some(value) = value.as_raw() else {
        return packed_value(out, it, value, cas);
    };
    encode::value_header(out.buf(), it.key(), it.flags(), value.len(), cas);
    if out.direct_takes(value.len(), it.lock_free()) {
        match direct() {
            Direct::Value => {
                out.put_value(value, b"\r\n", true);
                return Sent::Value;
            }
            Direct::ValueAndEnd => {
                out.put_value(value, b"\r\nEND\r\n", true);
                return Sent::ValueAndEnd;
            }
            Direct::No => {}
        }
    }
    let buf = out.buf();
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
    Sent::Value
}

/// A hit whose value is packed: its `VALUE` line, then the value decoded
/// into the buffer (never referenced). Kept out of line: raw values' path
/// stays as it was.
#[cold]
#[inline(never)]
fn packed_value(
    out: &mut Output,
    it: &ItemView<'_>,
    value: osmium_store::ValueRef<'_>,
    cas: Option<u64>,
) -> Sent {
    let start = out.len();
    encode::value_header(out.buf(), it.key(), it.flags(), value.len(), cas);
    if decoded_value(out, value, start) {
        Sent::Value
    } else {
        Sent::Dropped
    }
}

/// A packed value of a hit whose reply was written from `start`: decoded
/// into the buffer, with its `\r\n` (true); or, when it does not decode,
/// the reply taken back from `start` (false).
#[cold]
#[inline(never)]
pub(crate) fn decoded_value(
    out: &mut Output,
    value: osmium_store::ValueRef<'_>,
    start: usize,
) -> bool {
    if value.append_to(out.buf()).is_err() {
        out.truncate(start);
        return false;
    }
    out.buf().extend_from_slice(b"\r\n");
    true
}

/// The end of a retrieval reply.
#[inline]
pub(crate) fn end(out: &mut Output) {
    out.buf().extend_from_slice(b"END\r\n");
}
