//! From a request line to a [`Request`]: memcached 1.6.45's
//! `process_request` (proto_parser.c), which finds the command by the
//! length and bytes of the line's first word, and the not-found branch of
//! `process_command_ascii` (proto_text.c), which looks the first *token*
//! up in `text_cmd_entries`.
//!
//! ```text
//! line      := word (' ' rest)? "\r\n" | ... "\n"     (at least 4 bytes)
//! word      := the bytes before the first space: its length picks the case
//!   2: mg ms md mn ma me     3: get gat set add cas    4: gets incr decr gats quit
//!   5: touch stats watch     6: delete append          7: replace prepend version
//! anything else: tokenize (noreply checked), then token 0 exactly one of
//!   shutdown slabs cache_memlimit flush_all lru_crawler verbosity lru
//!   extstore refresh_certs (and osmium's replica_hello
//!   replica_link replica_follow replica_synced replica_targets)
//! else: the last token starts with "HTTP/" (2+ tokens) → close; else ERROR
//! ```
//!
//! A line that starts with a space has an empty first word: it is never a
//! get or a set (`ERROR`), but its first token may still be `flush_all` or
//! another `text_cmd_entries` name.

use super::tokens::{content_end, noreply, tokenize, NO_FLAGS};
use super::{meta, parse, text_error, BAD_FORMAT, ERROR};
use crate::request::{Command, KeyBuffer, Reply, Request, StoreMode};

/// Parses one request line, `line` being everything up to and including
/// its `\n` (as [`frame`](super::frame) finds it; the last byte is taken
/// for the `\n` whatever it is). Meta keys sent in base64 are decoded into
/// `keys`. Never allocates, never panics.
pub fn parse_line<'a>(line: &'a [u8], keys: &'a mut KeyBuffer) -> Request<'a> {
    // "min command length is 2, plus the \r\n"
    if line.len() < 4 {
        return text_error(BAD_FORMAT, 0, false);
    }
    let end = content_end(line);
    let word_len = memchr::memchr(b' ', &line[..end]).unwrap_or(end);
    match &line[..word_len] {
        b"get" => parse::get(line, end, false),
        b"gets" => parse::get(line, end, true),
        b"set" => parse::store(line, word_len, end, StoreMode::Set),
        [b'm', which @ (b'g' | b's' | b'd' | b'n' | b'a' | b'e')] => {
            meta::parse(line, *which, keys)
        }
        b"gat" => parse::gat(line, end, false),
        b"gats" => parse::gat(line, end, true),
        b"add" => parse::store(line, word_len, end, StoreMode::Add),
        b"cas" => parse::store(line, word_len, end, StoreMode::Cas),
        b"replace" => parse::store(line, word_len, end, StoreMode::Replace),
        b"append" => parse::store(line, word_len, end, StoreMode::Append),
        b"prepend" => parse::store(line, word_len, end, StoreMode::Prepend),
        b"delete" => parse::delete(line),
        b"incr" => parse::arith(line, true),
        b"decr" => parse::arith(line, false),
        b"touch" => parse::touch(line),
        b"quit" => text(Command::Quit, false),
        b"version" => text(Command::Version, false),
        b"stats" => parse::stats(line),
        b"watch" => parse::watch(line),
        _ => unknown(line),
    }
}

#[inline]
fn text(command: Command<'_>, noreply: bool) -> Request<'_> {
    Request {
        command,
        reply: Reply::Text { noreply },
    }
}

/// `PROCESS_REQUEST_CMD_NOT_FOUND`: memcached tokenizes the line (checking
/// noreply), then matches token 0 against `text_cmd_entries` exactly.
fn unknown(line: &[u8]) -> Request<'_> {
    let t = tokenize(line, NO_FLAGS).unwrap_or(crate::request::Tokens::empty());
    let nr = noreply(&t);
    let request = match t.get(0) {
        b"shutdown" => Some(parse::shutdown(t)),
        b"cache_memlimit" => Some(parse::cache_memlimit(t)),
        b"flush_all" => Some(parse::flush_all(t, nr)),
        b"verbosity" => Some(parse::verbosity(t)),
        b"lru_crawler" => Some(Command::LruCrawler { tokens: t }),
        b"slabs" | b"lru" | b"extstore" | b"refresh_certs" => Some(Command::Admin { tokens: t }),
        // osmium's replication links (the server's `replication` module).
        b"replica_hello" | b"replica_link" | b"replica_follow" | b"replica_synced"
        | b"replica_copy" | b"replica_targets" => Some(Command::Admin { tokens: t }),
        _ => None,
    };
    if let Some(command) = request {
        return text(command, nr);
    }
    let n = t.count();
    if n > 1 && t.get(n - 1).starts_with(b"HTTP/") {
        return text(Command::Close, nr);
    }
    text_error(ERROR, 0, nr)
}
