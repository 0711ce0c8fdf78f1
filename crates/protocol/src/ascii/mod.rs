//! memcached's text protocols ("ascii": the classic commands and the meta
//! commands) as memcached 1.6.45 parses them, producing the
//! protocol-neutral [`Request`].
//!
//! ```text
//!  read buffer ──frame──▶ line (with its \n) ──parse_line──▶ Request { command, reply }
//!       │                                                       │
//!       └─ no \n, a long get line ──partial_get──▶ keys as they come
//! ```
//!
//! * [`frame`]: `try_read_command_ascii`, the 2048-byte rule (`frame.rs`);
//! * [`parse_line`]: `process_request` and everything memcached does with
//!   the line before it touches the cache or server state: dispatch
//!   (`dispatch.rs`), mcmc's tokenizer (`tokens.rs`), its numbers and
//!   util.c's (`numbers.rs`), the classic commands (`parse.rs`), the
//!   meta commands (`meta.rs`);
//! * [`partial_get`]: the start of a get line too long to buffer
//!   (`stream.rs`).
//!
//! `noreply` is memcached's `_process_request_noreply`: the last token (the
//! 23rd when the line has more) is `noreply`. memcached checks it for get,
//! gets, delete, incr, decr, touch, for the storage commands once their
//! `<bytes>` is valid, and for every line not found by its first word
//! (flush_all, verbosity, cache_memlimit, shutdown, lru_crawler, slabs, lru,
//! extstore, refresh_certs, unknown commands); never for gat, gats, stats,
//! watch, version, quit or the meta commands.
//!
//! Errors found while parsing are [`Command::Error`]
//! with memcached's exact line. With `Reply::Text { noreply: true }` the
//! line is not sent (memcached's `out_string`); with `Reply::Meta` it is
//! always sent. Either way `discard` bytes (a refused storage command's
//! data block and its `\r\n`) are swallowed afterwards.
//!
//! # What the server still checks, in memcached's order
//!
//! The parser stops where memcached first needs the cache or a server
//! setting. From there on:
//!
//! * **get/gets/gat/gats** (`Get`): keys are checked one by one as they are
//!   looked up. A key over 250 bytes stops the command: memcached drops
//!   every reply not yet written on the connection (earlier keys' values,
//!   and earlier pipelined commands' replies) and sends [`GET_KEY_TOO_LONG`]
//!   (the error line and an empty line), or [`GET_KEY_TOO_LONG_NOREPLY`] when
//!   it is the first key and `noreply` is set. Otherwise `noreply` hides
//!   nothing (values and `END` are sent).
//! * **set/add/replace/append/prepend/cas** (`Store`, text): allocating the
//!   item: "SERVER_ERROR object too large for cache" (too big for any slab
//!   class) or "SERVER_ERROR out of memory storing object", after which a
//!   set unlinks the key's old item; the data block is swallowed
//!   (`value_len + 2`). Then the data block must end in `\r\n` ("CLIENT_ERROR
//!   bad data chunk"). `noreply` hides all of these.
//! * **ms** (`Store`, meta): the same allocation errors (the old item is
//!   unlinked whatever the mode), then an `O` token over 32 bytes:
//!   [`meta::OPAQUE_TOO_LONG`] (see [`meta::opaque_too_long`]); both swallow
//!   the data block. A bad data chunk is shown even with `q`. `q` hides only
//!   `HD`.
//! * **mg** (`MetaGet`): the lookup ("SERVER_ERROR refcount overflow during
//!   fetch"), vivifying, then the reply walks the tokens in request order:
//!   `T` and `N` take effect as they are met, and an `O` token over 32 bytes
//!   aborts with [`meta::OPAQUE_TOO_LONG`] (after the effects of tokens
//!   before it; on a hit without the LRU bump or the hit counted, on a miss
//!   after the miss is counted). `q` hides only `EN` (a hit's `HD` is sent).
//!   `h` and `l` report the item as it was before this request's bump.
//! * **md** (`Delete`): nothing left to check; `q` hides only `HD` (`NF` and
//!   `EX` are sent). With `drop_value`, the new empty item gets `flags` and
//!   `exptime.unwrap_or(0)`.
//! * **ma** (`Arith`): "CLIENT_ERROR cannot increment or decrement
//!   non-numeric value", "SERVER_ERROR out of memory"; then the reply walks
//!   the tokens: `T` (and, on a created item, `N`) set the expiry in token
//!   order, and an `O` over 32 bytes answers [`meta::OPAQUE_TOO_LONG`]
//!   *after* the arithmetic has been applied. `q` hides only `HD`.
//! * **me** (`MetaDebug`): a miss is `EN`.
//! * **mn** (`Noop`): `MN`, and memcached writes out everything queued at
//!   once.
//! * **flush_all** (`FlushAll`): count the command, then -F off: "CLIENT_ERROR
//!   flush_all not allowed"; then `delay: None`: "CLIENT_ERROR invalid exptime
//!   argument"; then flush (delay > 0: from `realtime(delay) - 1`, else now)
//!   and "OK".
//! * **shutdown** (`Shutdown`): -A off: "SERVER_ERROR: shutdown not
//!   enabled"; then `Invalid`: "CLIENT_ERROR invalid shutdown mode".
//! * **verbosity** (`Verbosity`): the level is capped at 2; "OK".
//! * **cache_memlimit** (`CacheMemlimit`, 8 to 1e9 megabytes): "OK" or
//!   "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust".
//! * **stats** (`Stats`, never noreply): no group: general stats. Else the
//!   group is matched with [`prefix_matches`] (memcached compares
//!   `strncmp(token, name, token_len)`: `stats r` is `reset`) against, in
//!   order: reset ("RESET"), detail (dump disabled: "CLIENT_ERROR stats
//!   detail not allowed"; then token 2, or token 0 with fewer than 3 tokens,
//!   against on/off/dump, else "CLIENT_ERROR usage: stats detail
//!   on|off|dump"), settings, cachedump (dump disabled: "CLIENT_ERROR stats
//!   cachedump not allowed"; under 4 tokens: "CLIENT_ERROR bad command
//!   line"; tokens 2 and 3 not mcmc u32s: "CLIENT_ERROR bad command line
//!   format"; class id 64 or more: "CLIENT_ERROR Illegal slab id"), conns,
//!   extstore; then memcached's `get_stats` names, exactly: items, slabs,
//!   sizes; else "ERROR".
//! * **lru_crawler** (`LruCrawler`) and **slabs, lru, extstore,
//!   refresh_certs, watch** (`Admin`): subcommands by token count and
//!   [`prefix_matches`], as in proto_text.c. `watch` is never noreply.
//!
//! `Reply::Text { noreply: true }` hides every line these send through
//! memcached's `out_string` (errors included).

mod dispatch;
mod frame;
pub mod meta;
pub mod numbers;
mod parse;
mod stream;
pub mod tokens;

#[cfg(test)]
mod tests;

pub use dispatch::parse_line;
pub use frame::{frame, Frame, LINE_LIMIT};
pub use stream::{partial_get, PartialGet};

use crate::request::{Command, Reply, Request};

/// A malformed command line (too few tokens, a key over 250 bytes, ...).
pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
/// A line that is no command memcached knows.
pub const ERROR: &str = "ERROR";
/// An exptime argument that is not a 32-bit number.
pub const INVALID_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument";
/// incr/decr with a delta that is not a 64-bit unsigned number.
pub const INVALID_DELTA: &str = "CLIENT_ERROR invalid numeric delta argument";
/// `cache_memlimit` below 8 megabytes.
pub const MEMLIMIT_TOO_SMALL: &str = "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m";
/// `cache_memlimit` above 1,000,000,000 (taken for a byte count).
pub const MEMLIMIT_NOT_BYTES: &str = "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes";

/// What memcached sends for a get whose key is over 250 bytes: its
/// `process_get_command_err` re-sends the error line it had built, `\r\n`
/// included, through `out_string`, which adds another `\r\n`.
pub const GET_KEY_TOO_LONG: &[u8] = b"CLIENT_ERROR bad command line format\r\n\r\n";
/// The same when the key is the first one and `noreply` is set: the error
/// was hidden, so the re-sent line is empty.
pub const GET_KEY_TOO_LONG_NOREPLY: &[u8] = b"\r\n";

/// `strncmp(token, name, token.len()) == 0`, as memcached matches
/// subcommands (`stats`, `lru_crawler`, `slabs`, `shutdown graceful`, ...):
/// a token matches any name it is a prefix of, and the comparison stops
/// at a NUL in both.
pub fn prefix_matches(token: &[u8], name: &[u8]) -> bool {
    for (i, &a) in token.iter().enumerate() {
        let b = name.get(i).copied().unwrap_or(0);
        if a != b {
            return false;
        }
        if a == 0 {
            return true;
        }
    }
    true
}

/// A text-protocol error line.
#[inline]
fn text_error(message: &'static str, discard: usize, noreply: bool) -> Request<'static> {
    Request {
        command: Command::Error { message, discard },
        reply: Reply::Text { noreply },
    }
}
