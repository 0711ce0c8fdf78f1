//! The meta commands as memcached 1.6.45 parses them: the tokenizing in
//! `process_request` (`_process_request_meta`, `_process_request_mset`),
//! `_meta_flag_preparse` (proto_parser.c), and each command's checks up to
//! the point where it touches the cache (`process_mget_cmd`,
//! `process_mset_cmd_start`, `process_mdelete_cmd`,
//! `process_marithmetic_cmd`; `process_meta_command` for `me`).
//!
//! ```text
//! mg <key> <flag>*           md <key> <flag>*        ma <key> <flag>*
//! ms <key> <datalen> <flag>* me <key> [b ...]        mn ...
//! flag := one byte, then its argument if any: v  T30  Oabc  MS  b
//! ```
//!
//! Order of checks (the first failure answers; errors are never hidden by
//! `q`):
//!
//! 1. tokenizing: a flag token not starting with a letter-ish byte (65 to
//!    122) or a digit leaves memcached with no tokens, and fewer than 2
//!    tokens (3 for ms) is "CLIENT_ERROR bad command line format"; so is an
//!    ms `<datalen>` that is not an mcmc 32-bit number in 0..=INT_MAX-2.
//!    `mn` is not tokenized at all.
//! 2. from here on, an ms error swallows `datalen + 2` bytes;
//! 3. `_meta_flag_preparse`: a key over 250 bytes ("CLIENT_ERROR bad
//!    command line format"), more than 20 tokens ("CLIENT_ERROR options
//!    flags are too long"), then one pass over the flags: a flag byte of
//!    127 or more, or seen before, stops at once ("CLIENT_ERROR duplicate
//!    flag"), and so does an unknown one ("CLIENT_ERROR invalid flag");
//!    bad arguments are remembered and reported after the pass, the last
//!    message winning ("CLIENT_ERROR bad token in command line format" for
//!    N T R C E, "CLIENT_ERROR invalid numeric initial value" for J,
//!    "CLIENT_ERROR invalid numeric delta value" for D, "CLIENT_ERROR error
//!    decoding key" for b; F leaves the message as it was, by default "bad
//!    command line format"). `ma` answers every preparse failure with
//!    "CLIENT_ERROR invalid or duplicate flag".
//! 4. the mode: ms `M` takes E A P R S ("CLIENT_ERROR invalid mode for ms
//!    M token"), ma `M` takes I + D - ("CLIENT_ERROR invalid mode for ma M
//!    token"). The mode is the byte after `M`, whatever follows it (`MSxyz`
//!    is S; `M` alone reads the separator after it and is invalid; `M`
//!    then NUL is no mode at all).
//! 5. `md` only: an `O` token longer than 32 bytes, `O` included
//!    ("CLIENT_ERROR opaque token too long"), before the lookup. mg, ms and
//!    ma make the same check later; see [`opaque_too_long`].
//!
//! Every flag memcached knows is accepted by every meta command (`x` by mg,
//! `D` by ms, ...), and ignored where it means nothing.

use super::numbers::{flag_arg, tokto_i32, tokto_u32, tokto_u64};
use super::tokens::{tokenize, NO_FLAGS};
use super::BAD_FORMAT;
use crate::base64::base64_decode;
use crate::request::{
    exptime_to_positive, Arith, Command, Delete, KeyBuffer, MetaGet, MetaReply, Reply, Request,
    Store, StoreMode, Tokens, KEY_MAX_LENGTH,
};

/// memcached's `MFLAG_MAX_OPT_LENGTH`: more tokens than this is an error.
pub const MAX_OPT_TOKENS: usize = 20;
/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`: longest `O` token, `O` included.
pub const MAX_OPAQUE_LENGTH: usize = 32;

/// More than [`MAX_OPT_TOKENS`] tokens.
pub const OPTIONS_TOO_LONG: &str = "CLIENT_ERROR options flags are too long";
/// A flag given twice, or a flag byte that is not ASCII.
pub const DUPLICATE_FLAG: &str = "CLIENT_ERROR duplicate flag";
/// A flag byte the command does not know.
pub const INVALID_FLAG: &str = "CLIENT_ERROR invalid flag";
/// `N`, `T`, `R`, `C` or `E` whose argument is not a number.
pub const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format";
/// `b` on a key that is not valid base64.
pub const ERROR_DECODING_KEY: &str = "CLIENT_ERROR error decoding key";
/// ma `J` whose argument is not a number.
pub const INVALID_INITIAL: &str = "CLIENT_ERROR invalid numeric initial value";
/// ma `D` whose argument is not a number.
pub const INVALID_DELTA_VALUE: &str = "CLIENT_ERROR invalid numeric delta value";
/// ma's answer to any error in its flags.
pub const INVALID_OR_DUPLICATE: &str = "CLIENT_ERROR invalid or duplicate flag";
/// ms `M` with a mode byte it does not know.
pub const INVALID_MS_MODE: &str = "CLIENT_ERROR invalid mode for ms M token";
/// ma `M` with a mode byte it does not know.
pub const INVALID_MA_MODE: &str = "CLIENT_ERROR invalid mode for ma M token";
/// An `O` token over [`MAX_OPAQUE_LENGTH`] bytes.
pub const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";

/// True when one of the request's `O` tokens is longer than
/// [`MAX_OPAQUE_LENGTH`]: memcached then answers [`OPAQUE_TOO_LONG`]
/// instead of the reply. The parser checks this for md (memcached does,
/// before the lookup); for mg, ms and ma memcached finds it later, so the
/// server must check it where memcached does (see the `ascii` module).
pub fn opaque_too_long(reply: &MetaReply<'_>) -> bool {
    (2..reply.tokens.count()).any(|i| {
        let t = reply.tokens.get(i);
        t.first() == Some(&b'O') && t.len() > MAX_OPAQUE_LENGTH
    })
}

/// What `_meta_flag_preparse` found (`struct _meta_flags`), expiry
/// arguments already mapped by `EXPTIME_TO_POSITIVE_TIME`.
#[derive(Default)]
struct Flags<'a> {
    key: &'a [u8],
    key_binary: bool,
    no_update: bool,
    value: bool,
    set_stale: bool,
    no_reply: bool,
    remove_val: bool,
    vivify: Option<i64>,
    ttl: Option<i64>,
    recache: Option<i64>,
    cas: Option<u64>,
    new_cas: Option<u64>,
    mode: u8,
    client_flags: u32,
    delta: u64,
    initial: u64,
}

/// An mcmc 32-bit flag argument as an expiry argument.
#[inline]
fn exptime_arg(token: &[u8]) -> Option<i64> {
    flag_arg(token).and_then(tokto_i32).map(exptime_to_positive)
}

/// `_meta_flag_preparse(pr, start, ...)`.
fn preparse<'a>(
    t: &Tokens<'a>,
    start: usize,
    keys: &'a mut KeyBuffer,
) -> Result<Flags<'a>, &'static str> {
    let raw_key = t.get(1);
    if raw_key.len() > KEY_MAX_LENGTH {
        return Err(BAD_FORMAT);
    }
    if t.count() > MAX_OPT_TOKENS {
        return Err(OPTIONS_TOO_LONG);
    }
    let mut f = Flags {
        key: raw_key,
        delta: 1,
        ..Flags::default()
    };
    let mut keys = Some(keys);
    let mut seen: u128 = 0;
    let mut error: Option<&'static str> = None;
    let mut failed = false;
    let mut fail = |message: Option<&'static str>| {
        failed = true;
        if message.is_some() {
            error = message;
        }
    };
    for i in start..t.count() {
        let token = t.get(i);
        let o = token.first().copied().unwrap_or(0);
        if o >= 127 || seen & (1u128 << o) != 0 {
            return Err(DUPLICATE_FLAG);
        }
        seen |= 1u128 << o;
        match o {
            b'b' => {
                // `seen` lets this run once: the buffer is always there.
                if let Some(buf) = keys.take() {
                    let n = base64_decode(raw_key, &mut buf.0[..raw_key.len()]);
                    if n.is_none() {
                        fail(Some(ERROR_DECODING_KEY));
                    }
                    let buf: &'a KeyBuffer = buf;
                    f.key = &buf.0[..n.unwrap_or(0)];
                }
                f.key_binary = true;
            }
            b'N' => match exptime_arg(token) {
                Some(e) => f.vivify = Some(e),
                None => fail(Some(BAD_TOKEN)),
            },
            b'T' => match exptime_arg(token) {
                Some(e) => f.ttl = Some(e),
                None => fail(Some(BAD_TOKEN)),
            },
            b'R' => match exptime_arg(token) {
                Some(e) => f.recache = Some(e),
                None => fail(Some(BAD_TOKEN)),
            },
            b'l' | b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'h' => {}
            b'v' => f.value = true,
            b'u' => f.no_update = true,
            b'q' => f.no_reply = true,
            b'x' => f.remove_val = true,
            b'I' => f.set_stale = true,
            b'F' => match flag_arg(token).and_then(tokto_u32) {
                Some(v) => f.client_flags = v,
                None => fail(None),
            },
            b'C' => match flag_arg(token).and_then(tokto_u64) {
                Some(v) => f.cas = Some(v),
                None => fail(Some(BAD_TOKEN)),
            },
            b'E' => match flag_arg(token).and_then(tokto_u64) {
                Some(v) => f.new_cas = Some(v),
                None => fail(Some(BAD_TOKEN)),
            },
            // The byte after the M, whatever it is (the line goes on at
            // least to its `\n`).
            b'M' => f.mode = t.rest_from(i, t.line().len()).get(1).copied().unwrap_or(0),
            b'J' => match flag_arg(token).and_then(tokto_u64) {
                Some(v) => f.initial = v,
                None => fail(Some(INVALID_INITIAL)),
            },
            b'D' => match flag_arg(token).and_then(tokto_u64) {
                Some(v) => f.delta = v,
                None => fail(Some(INVALID_DELTA_VALUE)),
            },
            _ => return Err(INVALID_FLAG),
        }
    }
    if failed {
        Err(error.unwrap_or(BAD_FORMAT))
    } else {
        Ok(f)
    }
}

#[inline]
fn meta_reply(tokens: Tokens<'_>, first_flag: usize, quiet: bool, binary_key: bool) -> Reply<'_> {
    Reply::Meta(MetaReply {
        tokens,
        first_flag,
        quiet,
        binary_key,
    })
}

/// An error answering a meta command (shown whatever `q` says).
#[inline]
fn error<'a>(
    message: &'static str,
    discard: usize,
    tokens: Tokens<'a>,
    first_flag: usize,
) -> Request<'a> {
    Request {
        command: Command::Error { message, discard },
        reply: meta_reply(tokens, first_flag, false, false),
    }
}

/// A meta command line: `which` is the second byte of its two-byte command
/// (g s d n a e).
pub(super) fn parse<'a>(line: &'a [u8], which: u8, keys: &'a mut KeyBuffer) -> Request<'a> {
    if which == b'n' {
        return Request {
            command: Command::Noop,
            reply: meta_reply(Tokens::empty(), 2, false, false),
        };
    }
    if which == b's' {
        return mset(line, keys);
    }
    let t = match tokenize(line, 2) {
        Some(t) if t.count() >= 2 => t,
        Some(t) => return error(BAD_FORMAT, 0, t, 2),
        None => return error(BAD_FORMAT, 0, Tokens::empty(), 2),
    };
    match which {
        b'g' => mget(t, keys),
        b'd' => mdelete(t, keys),
        b'a' => marith(t, keys),
        _ => mdebug(t, keys),
    }
}

fn mget<'a>(t: Tokens<'a>, keys: &'a mut KeyBuffer) -> Request<'a> {
    let f = match preparse(&t, 2, keys) {
        Ok(f) => f,
        Err(message) => return error(message, 0, t, 2),
    };
    Request {
        command: Command::MetaGet(MetaGet {
            key: f.key,
            value: f.value,
            record_hit: !f.no_update,
            ttl: f.ttl,
            vivify: f.vivify,
            recache: f.recache,
            if_cas: f.cas,
            new_cas: f.new_cas,
            binary_key: f.key_binary,
        }),
        reply: meta_reply(t, 2, f.no_reply, f.key_binary),
    }
}

fn mdelete<'a>(t: Tokens<'a>, keys: &'a mut KeyBuffer) -> Request<'a> {
    let f = match preparse(&t, 2, keys) {
        Ok(f) => f,
        Err(message) => return error(message, 0, t, 2),
    };
    let reply = MetaReply {
        tokens: t,
        first_flag: 2,
        quiet: f.no_reply,
        binary_key: f.key_binary,
    };
    if opaque_too_long(&reply) {
        return error(OPAQUE_TOO_LONG, 0, t, 2);
    }
    Request {
        command: Command::Delete(Delete {
            key: f.key,
            if_cas: f.cas,
            mark_stale: f.set_stale,
            exptime: f.ttl,
            drop_value: f.remove_val,
            flags: f.client_flags,
            new_cas: f.new_cas,
            binary_key: f.key_binary,
        }),
        reply: Reply::Meta(reply),
    }
}

fn marith<'a>(t: Tokens<'a>, keys: &'a mut KeyBuffer) -> Request<'a> {
    let Ok(f) = preparse(&t, 2, keys) else {
        return error(INVALID_OR_DUPLICATE, 0, t, 2);
    };
    let incr = match f.mode {
        0 | b'I' | b'+' => true,
        b'D' | b'-' => false,
        _ => return error(INVALID_MA_MODE, 0, t, 2),
    };
    Request {
        command: Command::Arith(Arith {
            key: f.key,
            incr,
            delta: f.delta,
            create: f.vivify.map(|exptime| (f.initial, exptime)),
            if_cas: f.cas.unwrap_or(0),
            new_cas: f.new_cas,
            exptime: f.ttl,
            binary_key: f.key_binary,
        }),
        reply: meta_reply(t, 2, f.no_reply, f.key_binary),
    }
}

/// `me <key> [b]`: memcached decodes the key only when token 2 is `b` *and*
/// there are at least 4 tokens (its check still counts the old
/// tokenizer's terminal token): `me <key> b` looks up the key as sent.
fn mdebug<'a>(t: Tokens<'a>, keys: &'a mut KeyBuffer) -> Request<'a> {
    let raw = t.get(1);
    if raw.len() > KEY_MAX_LENGTH {
        return error(BAD_FORMAT, 0, t, 2);
    }
    let (key, binary_key) = if t.count() >= 4 && t.get(2) == b"b" {
        match base64_decode(raw, &mut keys.0[..raw.len()]) {
            Some(n) => {
                let keys: &'a KeyBuffer = keys;
                (&keys.0[..n], true)
            }
            None => return error(BAD_FORMAT, 0, t, 2),
        }
    } else {
        (raw, false)
    };
    Request {
        command: Command::MetaDebug { key, binary_key },
        reply: meta_reply(t, 2, false, binary_key),
    }
}

/// `ms <key> <datalen> <flag>*`: `_process_request_mset`, then
/// `process_mset_cmd_start` up to its item allocation.
fn mset<'a>(line: &'a [u8], keys: &'a mut KeyBuffer) -> Request<'a> {
    let t = match tokenize(line, 3) {
        Some(t) if t.count() >= 3 => t,
        Some(t) => return error(BAD_FORMAT, 0, t, 3),
        None => {
            // memcached's tokenizer refused a flag token (one starting with
            // neither a letter nor a digit): memcached answers without
            // swallowing the data block, and then runs it as commands. osmium
            // never runs a client's data as commands: when the length token
            // is a number, the block is discarded (a deliberate difference).
            let discard = tokenize(line, NO_FLAGS)
                .filter(|t| t.count() >= 3)
                .and_then(|t| tokto_i32(t.get(2)))
                .filter(|v| (0..=i32::MAX - 2).contains(v))
                .map_or(0, |v| v as usize + 2);
            return error(BAD_FORMAT, discard, Tokens::empty(), 3);
        }
    };
    let value_len = match tokto_i32(t.get(2)) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        _ => return error(BAD_FORMAT, 0, t, 3),
    };
    let discard = value_len + 2;
    let f = match preparse(&t, 3, keys) {
        Ok(f) => f,
        Err(message) => return error(message, discard, t, 3),
    };
    let (mut mode, vivify) = match f.mode {
        0 | b'S' => (StoreMode::Set, None),
        b'E' => (StoreMode::Add, None),
        b'A' => (StoreMode::Append, f.vivify),
        b'P' => (StoreMode::Prepend, f.vivify),
        b'R' => (StoreMode::Replace, None),
        _ => return error(INVALID_MS_MODE, discard, t, 3),
    };
    if f.cas.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace) {
        mode = StoreMode::Cas;
    }
    Request {
        command: Command::Store(Store {
            mode,
            key: f.key,
            flags: f.client_flags,
            exptime: vivify.or(f.ttl).unwrap_or(0),
            value_len,
            cas: f.cas.unwrap_or(0),
            new_cas: f.new_cas,
            stale_if_older: f.set_stale && mode == StoreMode::Cas,
            binary_key: f.key_binary,
            create_exptime: vivify,
        }),
        reply: meta_reply(t, 3, f.no_reply, f.key_binary),
    }
}
