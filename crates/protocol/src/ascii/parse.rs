//! The classic text commands: the tokenizing memcached 1.6.45 does for
//! each in `process_request` (proto_parser.c `_process_request_*`) and the
//! argument checks of its `process_*` function, in memcached's order.
//!
//! ```text
//! get|gets <key>+                      min 2 tokens, noreply checked
//! gat|gats <exptime> <key>+            min 3 tokens
//! set|add|replace|append|prepend <key> <flags> <exptime> <bytes> ...
//! cas <key> <flags> <exptime> <bytes> <cas unique> ...
//!                                      min 5 tokens, <bytes> then noreply
//! delete <key> ...                     min 2 tokens, noreply checked
//! incr|decr <key> <delta> ...          min 3 tokens, noreply checked
//! touch <key> <exptime> ...            min 3 tokens, noreply checked
//! stats [...]  watch [...]  version ...  quit ...
//! flush_all [delay]  verbosity <level>  cache_memlimit <mb>  shutdown [graceful]
//! ```
//!
//! Too few tokens, or a bad `<bytes>`, is `process_request`'s
//! `PROCESS_REQUEST_BAD_FORMAT`: "CLIENT_ERROR bad command line format",
//! shown even with noreply (memcached has not looked for it yet) and with
//! nothing swallowed. Tokens beyond those a command reads are ignored
//! (`delete k 0` deletes k, `set k 0 0 1 x y` stores). Numbers are mcmc's
//! strict `tokto*` (see [`super::numbers`]) except a storage command's
//! flags and exptime, which memcached reads with `safe_strtoul`/`safe_strtol`
//! from the raw line.

use super::numbers::{safe_strtol, safe_strtoul, tokto_i32, tokto_u32, tokto_u64};
use super::tokens::{noreply, tokenize, NO_FLAGS, TOKENIZER_MAXLEN};
use super::{
    text_error, BAD_FORMAT, INVALID_DELTA, INVALID_EXPTIME, MEMLIMIT_NOT_BYTES, MEMLIMIT_TOO_SMALL,
};
use crate::request::{
    exptime_to_positive, Arith, Command, Delete, Keys, Reply, Request, ShutdownMode, Store,
    StoreMode, Tokens, KEY_MAX_LENGTH,
};

/// Tokens for a command without meta flags (this tokenizing never fails).
#[inline]
fn plain(line: &[u8]) -> Tokens<'_> {
    tokenize(line, NO_FLAGS).unwrap_or(Tokens::empty())
}

/// `mcmc_token_get_u32(idx)`: None past the last token too.
#[inline]
fn token_u32(t: &Tokens<'_>, idx: usize) -> Option<u32> {
    (idx < t.count()).then(|| tokto_u32(t.get(idx))).flatten()
}

#[inline]
fn token_u64(t: &Tokens<'_>, idx: usize) -> Option<u64> {
    (idx < t.count()).then(|| tokto_u64(t.get(idx))).flatten()
}

#[inline]
fn token_i32(t: &Tokens<'_>, idx: usize) -> Option<i32> {
    (idx < t.count()).then(|| tokto_i32(t.get(idx))).flatten()
}

#[inline]
fn request(command: Command<'_>, noreply: bool) -> Request<'_> {
    Request {
        command,
        reply: Reply::Text { noreply },
    }
}

/// `get`/`gets`: keys from token 1 to the end of the line (its terminator
/// excluded), split on spaces as memcached's `process_get_command` walks
/// the raw line.
///
/// One difference is left: memcached takes the first key's length from
/// the tokenizer, which stops at 65534 bytes. A first key that starts
/// after more than 65 000 spaces and straddles that point is cut there by
/// memcached (the cut-off part looked up first, the rest as a second key);
/// here it is one key.
#[inline]
pub(super) fn get(line: &[u8], end: usize, with_cas: bool) -> Request<'_> {
    // The common "get <key>\r\n": one token after the command.
    let first = if with_cas { 5 } else { 4 };
    if first < end && line.len() <= TOKENIZER_MAXLEN && line[first] != b' ' {
        let key = &line[first..end];
        if memchr::memchr(b' ', key).is_none() {
            let command = Command::Get {
                keys: Keys::list(key),
                touch: None,
                with_cas,
            };
            return request(command, key == b"noreply");
        }
    }
    let t = plain(line);
    if t.count() < 2 {
        return text_error(BAD_FORMAT, 0, false);
    }
    let command = Command::Get {
        keys: Keys::list(t.rest_from(1, end)),
        touch: None,
        with_cas,
    };
    request(command, noreply(&t))
}

/// `gat`/`gats <exptime> <key>+`: no noreply; a bad exptime is answered
/// before any key is looked at.
pub(super) fn gat(line: &[u8], end: usize, with_cas: bool) -> Request<'_> {
    let t = plain(line);
    if t.count() < 3 {
        return text_error(BAD_FORMAT, 0, false);
    }
    let Some(exptime) = token_i32(&t, 1) else {
        return text_error(INVALID_EXPTIME, 0, false);
    };
    let command = Command::Get {
        keys: Keys::list(t.rest_from(2, end)),
        touch: Some(exptime_to_positive(exptime)),
        with_cas,
    };
    request(command, false)
}

/// set/add/replace/append/prepend/cas: `_process_request_storage`, then
/// `process_update_cmd_start`'s checks. Once `<bytes>` is known, an error
/// swallows the data block.
#[inline]
pub(super) fn store(line: &[u8], word_len: usize, end: usize, mode: StoreMode) -> Request<'_> {
    if mode != StoreMode::Cas {
        if let Some(request) = store_fast(line, word_len + 1, end, mode) {
            return request;
        }
    }
    store_tokens(line, mode)
}

/// The general path of [`store`].
pub(super) fn store_tokens(line: &[u8], mode: StoreMode) -> Request<'_> {
    let t = plain(line);
    if t.count() < 5 {
        return text_error(BAD_FORMAT, 0, false);
    }
    let value_len = match tokto_i32(t.get(4)) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v as usize,
        _ => return text_error(BAD_FORMAT, 0, false),
    };
    let nr = noreply(&t);
    let discard = value_len + 2;
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return text_error(BAD_FORMAT, discard, nr);
    }
    let whole = line.len();
    let (Some(flags), Some(exptime)) = (
        safe_strtoul(t.rest_from(2, whole)),
        safe_strtol(t.rest_from(3, whole)),
    ) else {
        return text_error(BAD_FORMAT, discard, nr);
    };
    let mut cas = 0;
    if mode == StoreMode::Cas {
        match token_u64(&t, 5) {
            Some(c) => cas = c,
            None => return text_error(BAD_FORMAT, discard, nr),
        }
    }
    let command = Command::Store(Store {
        mode,
        key,
        flags,
        exptime: exptime_to_positive(exptime),
        value_len,
        cas,
        new_cas: None,
        stale_if_older: false,
        binary_key: false,
        create_exptime: None,
    });
    request(command, nr)
}

/// Digits from `at` up to the next space or `end`: their value (None on a
/// 64-bit overflow or no digits) and where they stop.
#[inline]
fn digits(line: &[u8], mut at: usize, end: usize) -> Option<(u64, usize)> {
    let start = at;
    let mut v: u64 = 0;
    while at < end {
        let d = line[at].wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
        at += 1;
    }
    (at > start).then_some((v, at))
}

/// The common header, `<cmd> <key> <flags> <exptime> <bytes>` with single
/// spaces, plain decimal flags and length, an exptime of digits with an
/// optional `-`, and a key of at most 250 bytes: where memcached's C and
/// mcmc parsers read plain decimals alike. Anything else (None) takes the
/// general path, which also produces every error.
#[inline]
pub(super) fn store_fast(
    line: &[u8],
    key_start: usize,
    end: usize,
    mode: StoreMode,
) -> Option<Request<'_>> {
    let key_len = memchr::memchr(b' ', line.get(key_start..end)?)?;
    if key_len == 0 || key_len > KEY_MAX_LENGTH {
        return None;
    }
    let key = &line[key_start..key_start + key_len];
    let (flags, at) = digits(line, key_start + key_len + 1, end)?;
    if line.get(at) != Some(&b' ') {
        return None;
    }
    let negative = line.get(at + 1) == Some(&b'-');
    let (magnitude, at) = digits(line, at + 1 + usize::from(negative), end)?;
    if line.get(at) != Some(&b' ') {
        return None;
    }
    let len_start = at + 1;
    let (len, at) = digits(line, len_start, end)?;
    // mcmc reads at most 11 bytes of length; a longer one is an error.
    if at != end || at - len_start > 11 || len > (i32::MAX - 2) as u64 {
        return None;
    }
    // strtol's range, then the int32_t it is stored into.
    let exptime = if negative {
        i64::try_from(magnitude).ok()?.wrapping_neg()
    } else {
        i64::try_from(magnitude).ok()?
    };
    let command = Command::Store(Store {
        mode,
        key,
        flags: flags as u32,
        exptime: exptime_to_positive(exptime as i32),
        value_len: len as usize,
        cas: 0,
        new_cas: None,
        stale_if_older: false,
        binary_key: false,
        create_exptime: None,
    });
    Some(request(command, false))
}

/// `delete <key>`: any further tokens are ignored (1.6.45 dropped the old
/// `delete <key> 0` check).
pub(super) fn delete(line: &[u8]) -> Request<'_> {
    let t = plain(line);
    if t.count() < 2 {
        return text_error(BAD_FORMAT, 0, false);
    }
    let nr = noreply(&t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return text_error(BAD_FORMAT, 0, nr);
    }
    request(
        Command::Delete(Delete {
            key,
            ..Delete::default()
        }),
        nr,
    )
}

/// `incr|decr <key> <delta>`.
pub(super) fn arith(line: &[u8], incr: bool) -> Request<'_> {
    let t = plain(line);
    if t.count() < 3 {
        return text_error(BAD_FORMAT, 0, false);
    }
    let nr = noreply(&t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return text_error(BAD_FORMAT, 0, nr);
    }
    let Some(delta) = token_u64(&t, 2) else {
        return text_error(INVALID_DELTA, 0, nr);
    };
    let command = Command::Arith(Arith {
        key,
        incr,
        delta,
        create: None,
        if_cas: 0,
        new_cas: None,
        exptime: None,
        binary_key: false,
    });
    request(command, nr)
}

/// `touch <key> <exptime>`.
pub(super) fn touch(line: &[u8]) -> Request<'_> {
    let t = plain(line);
    if t.count() < 3 {
        return text_error(BAD_FORMAT, 0, false);
    }
    let nr = noreply(&t);
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return text_error(BAD_FORMAT, 0, nr);
    }
    let Some(exptime) = token_i32(&t, 2) else {
        return text_error(INVALID_EXPTIME, 0, nr);
    };
    let command = Command::Touch {
        key,
        exptime: exptime_to_positive(exptime),
    };
    request(command, nr)
}

/// `stats [...]`: tokenized without a noreply check; the executor reads
/// the subcommand.
pub(super) fn stats(line: &[u8]) -> Request<'_> {
    let t = plain(line);
    let group = (t.count() >= 2).then(|| t.get(1));
    request(Command::Stats { group, tokens: t }, false)
}

/// `watch [...]`: tokenized without a noreply check.
pub(super) fn watch(line: &[u8]) -> Request<'_> {
    request(
        Command::Admin {
            tokens: plain(line),
        },
        false,
    )
}

/// `shutdown [graceful]` (`process_shutdown_command`, after its -A check).
/// The mode is compared as memcached's `mc_prcmp` does: any prefix of
/// `graceful` is graceful.
pub(super) fn shutdown(t: Tokens<'_>) -> Command<'_> {
    let mode = match t.count() {
        1 => ShutdownMode::Immediate,
        2 if super::prefix_matches(t.get(1), b"graceful") => ShutdownMode::Graceful,
        _ => ShutdownMode::Invalid,
    };
    Command::Shutdown { mode }
}

/// `flush_all [delay]`: the delay is read unless the line is exactly
/// `flush_all` or `flush_all noreply`; a bad one is reported by the
/// executor after its -F check.
pub(super) fn flush_all(t: Tokens<'_>, noreply: bool) -> Command<'_> {
    let bare = if noreply { 2 } else { 1 };
    let delay = if t.count() != bare {
        token_i32(&t, 1).map(i64::from)
    } else {
        Some(0)
    };
    Command::FlushAll { delay }
}

/// `verbosity <level>`.
pub(super) fn verbosity(t: Tokens<'_>) -> Command<'_> {
    match token_u32(&t, 1) {
        Some(level) => Command::Verbosity { level },
        None => Command::Error {
            message: BAD_FORMAT,
            discard: 0,
        },
    }
}

/// `cache_memlimit <megabytes>`: the number and its range are checked here
/// (they need no server state); the executor only adjusts the limit.
pub(super) fn cache_memlimit(t: Tokens<'_>) -> Command<'_> {
    let message = match token_u32(&t, 1) {
        None => super::ERROR,
        Some(mb) if mb < 8 => MEMLIMIT_TOO_SMALL,
        Some(mb) if mb > 1_000_000_000 => MEMLIMIT_NOT_BYTES,
        Some(megabytes) => return Command::CacheMemlimit { megabytes },
    };
    Command::Error {
        message,
        discard: 0,
    }
}
