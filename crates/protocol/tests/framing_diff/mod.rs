//! The request-smuggling check shared by the `request_framing_diff` proptest
//! and the fuzz target of the same name (which includes this file by path):
//! one byte stream read by the server's parser (`ascii::frame` and
//! `parse_line`, with a storage command's data block as the server's
//! session takes it) and by osmium-proxy's framer (`client::frame::frame`),
//! request by request, and the two verdicts compared.
//!
//! What must agree, for every request of the stream:
//!
//! 1. **Where it ends.** Both see the same number of bytes as one whole
//!    request (line, data block and its `\r\n` included, or a refused
//!    storage command's swallowed block), or both wait for more. Nothing a
//!    client sends is ever split into requests differently by the proxy
//!    than by the server.
//! 2. **Whether it is answered.** The client gets a reply from both or from
//!    neither (`noreply` as memcached reads it: the last token, the 23rd
//!    when the line has more; a refused line's error is hidden by it
//!    exactly where memcached hides it). A meta `q` is `q` on both sides.
//! 3. **What it is**, when both accept it: the same command (by class:
//!    get, store, delete, arithmetic, touch, mg, me, version, flush_all) and
//!    the same keys (base64 keys decoded), in order.
//! 4. **The second hop.** Every request the proxy forwards (one key, a
//!    multi-get rebuilt from its keys, a broadcast) is, read by the
//!    server's parser, exactly one whole request of its own length, with
//!    nothing hidden (`noreply` and `q` stripped), and, if accepted, the
//!    same command and keys. A forwarded `ms` passes memcached's tokenizer,
//!    so a memcached behind the proxy swallows its data block whatever it
//!    answers.
//!
//! Where they may differ, and only there:
//!
//! * Either may refuse (answer an error line for) a request the other
//!   accepts, as long as 1 and 2 hold: the proxy answers locally what a
//!   server would refuse, or forwards it and the server refuses it.
//! * The proxy answers `mn` and `verbosity` itself, and refuses what it
//!   cannot route (`stats` closes the connection after an error line;
//!   `shutdown`, `slabs`, `lru_crawler`, `watch`, `cache_memlimit` and the
//!   other administrative commands are `ERROR`).
//! * A meta request the server refuses is answered with an error line even
//!   with `q`; the proxy may forward it with its `q` stripped (`q` hides
//!   only nominal codes, never an error).
//! * A get line without its `\n`: the server waits for any length (it
//!   streams the keys), the proxy closes the connection past `LINE_MAX`.
//! * After a request that ends the connection on either side (`quit`,
//!   memcached's close of an HTTP line or of 2048 bytes without `\n`,
//!   `stats` on the proxy) nothing more is compared.

// Each includer uses a different part of this file.
#![allow(dead_code)]

use osmium_protocol::ascii::{self, tokens::tokenize, Frame};
use osmium_protocol::client::frame::{frame, Action, Quiet, LINE_MAX};
use osmium_protocol::request::{Command, KeyBuffer, Reply};

/// What a request does, by class (both sides name it so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Get,
    Store,
    Delete,
    Arith,
    Touch,
    MetaGet,
    MetaDebug,
    Version,
    FlushAll,
    /// Answered or refused by the proxy itself whatever the server makes
    /// of it (mn, verbosity, stats, the administrative commands).
    ProxyLocal,
}

/// Whether the client sees a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shown {
    Yes,
    No,
    /// Meta `q`: nominal replies hidden, others shown.
    Quiet,
}

/// One side's reading of the front of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Not a whole request yet.
    Need,
    /// The connection is closed without a reply.
    Close,
    /// A whole request of `len` bytes.
    Request {
        len: usize,
        /// None: refused with an error line (or a line the proxy answers
        /// with an error itself).
        what: Option<(Class, Vec<Vec<u8>>)>,
        shown: Shown,
        /// The connection ends after it.
        ends: bool,
    },
}

fn request(len: usize, what: Option<(Class, Vec<Vec<u8>>)>, shown: Shown, ends: bool) -> Step {
    Step::Request {
        len,
        what,
        shown,
        ends,
    }
}

/// The server's reading: `ascii::frame`, `parse_line`, and the data block
/// (or the swallowed block of a refused storage command) after the line.
pub(crate) fn server(buf: &[u8]) -> Step {
    let n = match ascii::frame(buf) {
        Frame::Line(n) => n,
        Frame::Incomplete => return Step::Need,
        Frame::Close => return Step::Close,
    };
    let mut key_buffer = KeyBuffer::new();
    let req = ascii::parse_line(&buf[..n], &mut key_buffer);
    let shown = match req.reply {
        Reply::Text { noreply: true } => Shown::No,
        Reply::Meta(m) if m.quiet => Shown::Quiet,
        _ => Shown::Yes,
    };
    let one = |k: &[u8]| vec![k.to_vec()];
    let (class, keys, extra) = match req.command {
        Command::Error { discard, .. } => {
            let total = n + discard;
            if buf.len() < total {
                return Step::Need;
            }
            return request(total, None, shown, false);
        }
        Command::Close => return request(n, None, Shown::No, true),
        Command::Quit => return request(n, None, Shown::No, true),
        Command::Store(st) => (Class::Store, one(st.key), st.value_len + 2),
        // noreply hides nothing of a get.
        Command::Get { keys, .. } => {
            let keys = keys.map(<[u8]>::to_vec).collect();
            return request(n, Some((Class::Get, keys)), Shown::Yes, false);
        }
        Command::Touch { key, .. } => (Class::Touch, one(key), 0),
        Command::Delete(d) => (Class::Delete, one(d.key), 0),
        Command::Arith(a) => (Class::Arith, one(a.key), 0),
        Command::MetaGet(m) => (Class::MetaGet, one(m.key), 0),
        Command::MetaDebug { key, .. } => (Class::MetaDebug, one(key), 0),
        Command::Version => (Class::Version, vec![], 0),
        Command::FlushAll { .. } => (Class::FlushAll, vec![], 0),
        _ => (Class::ProxyLocal, vec![], 0),
    };
    let total = n + extra;
    if buf.len() < total {
        return Step::Need;
    }
    if class == Class::Store && !buf[..total].ends_with(b"\r\n") {
        // "CLIENT_ERROR bad data chunk": hidden by noreply, not by q.
        let shown = if shown == Shown::No {
            Shown::No
        } else {
            Shown::Yes
        };
        return request(total, None, shown, false);
    }
    request(total, Some((class, keys)), shown, false)
}

/// The class of a forwarded wire, by its command word.
fn class_of(wire: &[u8]) -> Class {
    let word = wire
        .split(|&b| b == b' ' || b == b'\r')
        .next()
        .unwrap_or(b"");
    match word {
        b"get" | b"gets" | b"gat" | b"gats" => Class::Get,
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" | b"ms" => Class::Store,
        b"delete" | b"md" => Class::Delete,
        b"incr" | b"decr" | b"ma" => Class::Arith,
        b"touch" => Class::Touch,
        b"mg" => Class::MetaGet,
        b"me" => Class::MetaDebug,
        b"version\r\n" | b"version" => Class::Version,
        b"flush_all" => Class::FlushAll,
        _ => panic!(
            "forwarded an unknown command: {:?}",
            String::from_utf8_lossy(wire)
        ),
    }
}

fn shown_of(quiet: Quiet) -> Shown {
    match quiet {
        Quiet::No => Shown::Yes,
        Quiet::All => Shown::No,
        Quiet::Meta(_) => Shown::Quiet,
        Quiet::Binary { .. } => unreachable!("a text request"),
    }
}

/// The proxy's reading, and the wires it would send servers.
pub(crate) fn proxy(buf: &[u8]) -> (Step, Vec<Vec<u8>>) {
    let Some(f) = frame(buf, false) else {
        return (Step::Need, vec![]);
    };
    let len = f.len;
    match f.action {
        Action::Forward {
            key, wire, quiet, ..
        } => {
            let class = class_of(&wire);
            let keys = if class == Class::Version {
                vec![]
            } else {
                vec![key.to_vec()]
            };
            let what = Some((class, keys));
            (
                request(len, what, shown_of(quiet), false),
                vec![wire.to_vec()],
            )
        }
        Action::MultiGet { prefix, keys } => {
            let mut wire = prefix;
            for k in &keys {
                wire.push(b' ');
                wire.extend_from_slice(k);
            }
            wire.extend_from_slice(b"\r\n");
            let keys = keys.iter().map(|k| k.to_vec()).collect();
            (
                request(len, Some((Class::Get, keys)), Shown::Yes, false),
                vec![wire],
            )
        }
        Action::Broadcast { wire, quiet, .. } => {
            let what = Some((class_of(&wire), vec![]));
            (request(len, what, shown_of(quiet), false), vec![wire])
        }
        Action::Local(reply) => {
            let shown = if reply.is_empty() {
                Shown::No
            } else {
                Shown::Yes
            };
            let what =
                (reply == b"MN\r\n" || reply == b"OK\r\n").then(|| (Class::ProxyLocal, vec![]));
            (request(len, what, shown, false), vec![])
        }
        Action::Quit(reply) => {
            let shown = if reply.is_empty() {
                Shown::No
            } else {
                Shown::Yes
            };
            (request(len, None, shown, true), vec![])
        }
        Action::Fatal => (Step::Close, vec![]),
    }
}

/// A forwarded wire, read by the server: one whole request, nothing
/// hidden, the same command and keys if accepted (rule 4).
fn check_wire(wire: &[u8], what: &Option<(Class, Vec<Vec<u8>>)>) -> Result<(), String> {
    let show = String::from_utf8_lossy(wire);
    let Step::Request {
        len,
        what: theirs,
        shown,
        ends,
    } = server(wire)
    else {
        return Err(format!(
            "forwarded {show:?} is not one whole request to a server"
        ));
    };
    if len != wire.len() || ends {
        return Err(format!(
            "forwarded {show:?} frames as {len} bytes at a server"
        ));
    }
    if shown != Shown::Yes {
        return Err(format!("forwarded {show:?} hides its reply at a server"));
    }
    if theirs.is_some() && theirs != *what {
        return Err(format!(
            "forwarded {show:?} is {theirs:?} at a server, {what:?} here"
        ));
    }
    if wire.starts_with(b"ms ") {
        let line_end = wire.iter().position(|&b| b == b'\n').unwrap_or(0);
        let line = &wire[..=line_end];
        if tokenize(line, 3).is_none() {
            return Err(format!("forwarded {show:?} fails memcached's tokenizer"));
        }
    }
    Ok(())
}

/// Whether the two readings of one request agree (rules 1 to 3).
fn agree(server: &Step, proxy: &Step, buf_len: usize) -> bool {
    use Step::*;
    match (server, proxy) {
        (Need, Need) | (Close, Close) => true,
        // The server streams a get line of any length; the proxy stops at
        // LINE_MAX.
        (Need, Close) => buf_len > LINE_MAX,
        (
            Request {
                len: a,
                what: sw,
                shown: ss,
                ends: se,
            },
            Request {
                len: b,
                what: pw,
                shown: ps,
                ends: pe,
            },
        ) => {
            if a != b {
                return false;
            }
            // A connection that ends on one side ends the comparison.
            if *se || *pe {
                return true;
            }
            let shown_ok = ss == ps || (sw.is_none() && *ss == Shown::Yes && *ps == Shown::Quiet);
            let what_ok = match (sw, pw) {
                (Some((sc, sk)), Some((pc, pk))) => {
                    *sc == Class::ProxyLocal || *pc == Class::ProxyLocal || (sc == pc && sk == pk)
                }
                _ => true,
            };
            shown_ok && what_ok
        }
        _ => false,
    }
}

/// Reads `buf` request by request with both parsers; Ok: the lengths of
/// the requests both read whole (the last may be followed by a part
/// request or a closed connection). Err: the first disagreement.
pub(crate) fn compare(buf: &[u8]) -> Result<Vec<usize>, String> {
    let mut at = 0;
    let mut lens = Vec::new();
    loop {
        let rest = &buf[at..];
        let s = server(rest);
        let (p, wires) = proxy(rest);
        if !agree(&s, &p, rest.len()) {
            let end = rest.len().min(120);
            return Err(format!(
                "at byte {at} of {:?}: server {s:?}, proxy {p:?}",
                String::from_utf8_lossy(&rest[..end])
            ));
        }
        if let Step::Request { what, .. } = &p {
            for wire in &wires {
                check_wire(wire, what)?;
            }
        }
        match (s, p) {
            (Step::Request { len, ends, .. }, Step::Request { ends: pe, .. }) => {
                lens.push(len);
                at += len;
                if ends || pe || at == buf.len() {
                    return Ok(lens);
                }
            }
            _ => return Ok(lens),
        }
    }
}

/// The whole property on one stream and one cut: both parsers agree on
/// the stream and on its first `cut` bytes, and the prefix reads as the
/// whole stream's first requests (a request cut short waits).
pub(crate) fn check(buf: &[u8], cut: usize) -> Result<(), String> {
    let whole = compare(buf)?;
    let part = compare(&buf[..cut.min(buf.len())])?;
    let mut sum = 0;
    for (i, len) in part.iter().enumerate() {
        sum += len;
        if whole.get(i) != Some(len) || sum > cut {
            return Err(format!(
                "prefix of {cut} reads {part:?}, the whole {whole:?}"
            ));
        }
    }
    Ok(())
}
