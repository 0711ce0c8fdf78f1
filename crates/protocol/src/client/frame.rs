//! Request framing: the next complete request in a buffer a client sent,
//! text, meta or binary: its length, its key, its data block, whether it
//! asked not to be answered, and what an intermediary (osmium-proxy) does
//! with it ([`Action`]): forward to the server of one key, split a
//! multi-key get over servers, send to every server, or answer at once.
//!
//! Forwarded requests never carry `noreply`, meta `q` or a binary quiet
//! opcode: they are stripped, and the reply the client asked not to see is
//! dropped by whoever forwards ([`Quiet`]), so every forwarded request gets
//! exactly one reply and replies stay matched to requests. A command
//! refused here has its data block swallowed, never forwarded.
//!
//! [`BinaryHead`] (re-exported from `binary_head`) and [`KEYED_COMMANDS`] are
//! shared with the server's prefetch peek ([`super::peek`]).

use std::borrow::Cow;
use std::ops::Deref;

use super::reply::Expect;
use crate::ascii::numbers::{tokto_i32, tokto_u32, tokto_u64};
use crate::ascii::tokens::{noreply, tokenize, NO_FLAGS};
use crate::ascii::Frame as LineFrame;
use crate::binary::{HEADER_LEN, REQUEST_MAGIC, RESPONSE_MAGIC};
use crate::request::Tokens as McTokens;

/// memcached's longest key.
pub const KEY_MAX: usize = crate::request::KEY_MAX_LENGTH;
/// Text and meta commands whose second token is a key.
pub const KEYED_COMMANDS: [&[u8]; 16] = [
    b"get", b"gets", b"set", b"add", b"replace", b"append", b"prepend", b"cas", b"delete", b"incr",
    b"decr", b"touch", b"mg", b"ms", b"md", b"ma",
];

/// The longest request line accepted (a multi-get of many keys).
pub const LINE_MAX: usize = 1 << 20;

/// Which replies the client asked not to see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiet {
    /// Every reply is shown.
    No,
    /// Text `noreply`: nothing is shown.
    All,
    /// Meta `q`: replies starting with one of these codes are dropped.
    Meta(&'static [&'static [u8]]),
    /// A binary quiet opcode: a reply with this status is dropped; shown
    /// replies get the client's opcode back.
    Binary {
        /// The loud opcode that the reply goes back as.
        opcode: u8,
        /// The status the quiet opcode does not show.
        hidden_status: u16,
    },
}

/// How a client connection speaks, for replies made here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// The text protocol (text and meta commands).
    Text,
    /// The binary protocol.
    Binary {
        /// The request's opcode, echoed.
        opcode: u8,
        /// The request's opaque, echoed.
        opaque: u32,
    },
}

/// What to do with one request. Borrowed bytes are the client's read
/// buffer: a request forwarded as it came is not copied.
#[derive(Debug)]
pub enum Action<'a> {
    /// Send `wire` to the server of `key`.
    Forward {
        /// The key that places the request.
        key: Cow<'a, [u8]>,
        /// The request's bytes.
        wire: Cow<'a, [u8]>,
        /// The shape of the server's reply.
        expect: Expect,
        /// Which replies the client does not see.
        quiet: Quiet,
    },
    /// A text get of several keys: `prefix` is `get`, `gets`, `gat <t>` or
    /// `gats <t>`.
    MultiGet {
        /// The command and its arguments before the keys.
        prefix: Vec<u8>,
        /// The keys, in request order.
        keys: Vec<&'a [u8]>,
    },
    /// Send `wire` to every server; one reply.
    Broadcast {
        /// The request's bytes.
        wire: Vec<u8>,
        /// The shape of each server's reply.
        expect: Expect,
        /// Which replies the client does not see.
        quiet: Quiet,
    },
    /// Answer with these bytes (nothing when empty).
    Local(Vec<u8>),
    /// Close once earlier replies are out, after these bytes.
    Quit(Vec<u8>),
    /// The stream cannot be framed: close it.
    Fatal,
}

/// One framed request.
#[derive(Debug)]
pub struct Framed<'a> {
    /// Bytes of the read buffer it took.
    pub len: usize,
    /// What to do with it.
    pub action: Action<'a>,
    /// How replies made for it are framed.
    pub style: Style,
}

/// The next request in `buf`, if complete.
pub fn frame(buf: &[u8], binary: bool) -> Option<Framed<'_>> {
    if binary {
        frame_binary(buf)
    } else {
        frame_text(buf)
    }
}

fn text(len: usize, action: Action<'_>) -> Option<Framed<'_>> {
    Some(Framed {
        len,
        action,
        style: Style::Text,
    })
}

fn local(len: usize, reply: &str) -> Option<Framed<'static>> {
    text(len, Action::Local(reply.as_bytes().to_vec()))
}

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format\r\n";

fn parse_u64(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 20 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// How many tokens of a line are kept without allocating.
const INLINE: usize = 8;

/// A command line's space-separated tokens (a slice of them, through
/// `Deref`); the first [`INLINE`] are kept without allocating.
struct Tokens<'a> {
    inline: [&'a [u8]; INLINE],
    n: usize,
    spill: Vec<&'a [u8]>,
}

impl<'a> Tokens<'a> {
    fn split(line: &'a [u8]) -> Tokens<'a> {
        let mut t = Tokens {
            inline: [&[]; INLINE],
            n: 0,
            spill: Vec::new(),
        };
        for tok in line.split(|&b| b == b' ').filter(|t| !t.is_empty()) {
            if t.n < INLINE {
                t.inline[t.n] = tok;
                t.n += 1;
            } else {
                if t.spill.is_empty() {
                    t.spill.extend_from_slice(&t.inline);
                }
                t.spill.push(tok);
            }
        }
        t
    }
}

impl<'a> Deref for Tokens<'a> {
    type Target = [&'a [u8]];
    fn deref(&self) -> &[&'a [u8]] {
        if self.spill.is_empty() {
            &self.inline[..self.n]
        } else {
            &self.spill
        }
    }
}

/// Whether a command line (`raw`, with its line end) is its tokens joined
/// by single spaces and ended by `\r\n`: forwarded unchanged, it is what
/// [`join`] would make.
fn canonical(raw: &[u8], tokens: &[&[u8]]) -> bool {
    raw.ends_with(b"\r\n") && raw.len() == tokens.iter().map(|t| t.len() + 1).sum::<usize>() + 1
}

/// The forwarded request: `buf[..total]` as it came when its line is
/// canonical and nothing is stripped, else `kept` joined and `data`.
fn wire<'a>(buf: &'a [u8], total: usize, same: bool, kept: &[&[u8]], data: &[u8]) -> Cow<'a, [u8]> {
    if same {
        return Cow::Borrowed(&buf[..total]);
    }
    let mut w = join(kept);
    w.extend_from_slice(data);
    Cow::Owned(w)
}

fn join(tokens: &[&[u8]]) -> Vec<u8> {
    let mut line = Vec::with_capacity(tokens.iter().map(|t| t.len() + 1).sum::<usize>() + 2);
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            line.push(b' ');
        }
        line.extend_from_slice(t);
    }
    line.extend_from_slice(b"\r\n");
    line
}

fn quiet_if(noreply: bool) -> Quiet {
    if noreply {
        Quiet::All
    } else {
        Quiet::No
    }
}

/// memcached's `noreply`: the last of the line's first 23 tokens (`raw` is
/// the line with its terminator).
fn mc_noreply(raw: &[u8]) -> bool {
    tokenize(raw, NO_FLAGS).is_some_and(|t| noreply(&t))
}

/// A reply made here, sent unless the request asked for none (memcached
/// hides these errors with `noreply`).
fn refuse(len: usize, reply: &str, hidden: bool) -> Option<Framed<'static>> {
    if hidden {
        text(len, Action::Local(Vec::new()))
    } else {
        local(len, reply)
    }
}

const INVALID_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument\r\n";

/// A text or meta request, read as memcached 1.6.45 reads it: the line
/// ends at its `\n` (2048 bytes without one close the connection unless it
/// is a get, as `try_read_command_ascii` decides), the command is the line's
/// first word (a line starting with a space is none, only `flush_all` and
/// `verbosity` are found by their first token), numbers are mcmc's, and
/// `noreply` is the last of the first 23 tokens and hides the errors
/// memcached hides with it.
fn frame_text(buf: &[u8]) -> Option<Framed<'_>> {
    let line_len = match crate::ascii::frame(buf) {
        LineFrame::Line(n) => n,
        LineFrame::Incomplete if buf.len() <= LINE_MAX => return None,
        LineFrame::Incomplete | LineFrame::Close => return text(buf.len(), Action::Fatal),
    };
    let raw = &buf[..line_len];
    let line = &buf[..line_len - 1];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let tokens = Tokens::split(line);
    let canon = canonical(raw, &tokens);
    let Some(&cmd) = tokens.first() else {
        return local(line_len, "ERROR\r\n");
    };
    let found = line.first() != Some(&b' ');
    let key_ok = |k: &[u8]| k.len() <= KEY_MAX;
    match (found, cmd) {
        (true, b"get" | b"gets" | b"gat" | b"gats") => {
            let first = if cmd.starts_with(b"gat") { 2 } else { 1 };
            if tokens.len() <= first {
                return local(line_len, BAD_FORMAT);
            }
            if first == 2 && tokto_i32(tokens[1]).is_none() {
                return local(line_len, INVALID_EXPTIME);
            }
            let keys = &tokens[first..];
            if !keys.iter().all(|k| key_ok(k)) {
                return local(line_len, BAD_FORMAT);
            }
            if keys.len() == 1 {
                return text(
                    line_len,
                    Action::Forward {
                        key: Cow::Borrowed(keys[0]),
                        wire: wire(buf, line_len, canon, &tokens, &[]),
                        expect: Expect::Values,
                        quiet: Quiet::No,
                    },
                );
            }
            let mut prefix = join(&tokens[..first]);
            prefix.truncate(prefix.len() - 2);
            text(
                line_len,
                Action::MultiGet {
                    prefix,
                    keys: keys.to_vec(),
                },
            )
        }
        (true, b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas") => {
            // Too few tokens or a bad length: refused, shown, and the
            // block (if any) is read as commands, as memcached does.
            if tokens.len() < 5 {
                return local(line_len, BAD_FORMAT);
            }
            let Some(bytes) = tokto_i32(tokens[4]).filter(|b| (0..=i32::MAX - 2).contains(b))
            else {
                return local(line_len, BAD_FORMAT);
            };
            let total = line_len + bytes as usize + 2;
            if buf.len() < total {
                return None;
            }
            let data = &buf[line_len..total];
            let noreply = mc_noreply(raw);
            let want = if cmd == b"cas" { 6 } else { 5 };
            let valid = key_ok(tokens[1])
                && parse_u64(tokens[2]).is_some_and(|f| f <= u32::MAX as u64)
                && parse_i64(tokens[3]).is_some()
                && (want == 5 || tokens.get(5).is_some_and(|c| tokto_u64(c).is_some()));
            if !valid {
                // Refused at the command line: the data block is swallowed.
                return refuse(total, BAD_FORMAT, noreply);
            }
            if !data.ends_with(b"\r\n") {
                return refuse(total, "CLIENT_ERROR bad data chunk\r\n", noreply);
            }
            // Forwarded with the tokens the command reads, no more.
            let kept = &tokens[..want];
            let wire = wire(buf, total, canon && tokens.len() == want, kept, data);
            forward(total, tokens[1], wire, Expect::Line, quiet_if(noreply))
        }
        (true, b"delete" | b"incr" | b"decr" | b"touch") => {
            let want = if cmd == b"delete" { 2 } else { 3 };
            if tokens.len() < want {
                return local(line_len, BAD_FORMAT);
            }
            let noreply = mc_noreply(raw);
            if !key_ok(tokens[1]) {
                return refuse(line_len, BAD_FORMAT, noreply);
            }
            if want == 3 {
                let (ok, error) = if cmd == b"touch" {
                    (tokto_i32(tokens[2]).is_some(), INVALID_EXPTIME)
                } else {
                    let delta = "CLIENT_ERROR invalid numeric delta argument\r\n";
                    (tokto_u64(tokens[2]).is_some(), delta)
                };
                if !ok {
                    return refuse(line_len, error, noreply);
                }
            }
            let wire = if want == 2 && tokens[1] == b"noreply" {
                // `delete noreply` deletes the key `noreply`, quietly; the
                // argument memcached ignores keeps it from being quiet at
                // the server.
                Cow::Borrowed(&b"delete noreply 0\r\n"[..])
            } else {
                wire(
                    buf,
                    line_len,
                    canon && tokens.len() == want,
                    &tokens[..want],
                    &[],
                )
            };
            forward(line_len, tokens[1], wire, Expect::Line, quiet_if(noreply))
        }
        (true, b"mg" | b"ms" | b"md" | b"ma" | b"me") => frame_meta(buf, line_len, canon, &tokens),
        (true, b"mn") => local(line_len, "MN\r\n"),
        // As nutcracker: a server answers (placed like an empty key), so
        // clients that check the version see the servers'.
        (true, b"version") => forward(
            line_len,
            b"",
            Cow::Borrowed(b"version\r\n"),
            Expect::Line,
            Quiet::No,
        ),
        (true, b"quit") => text(line_len, Action::Quit(Vec::new())),
        // Refused, and the connection closed after the error, as nutcracker
        // closes it: a client reading STAT lines until END does not wait
        // for ever. The proxy's own figures are on its stats port.
        (true, b"stats") => text(
            line_len,
            Action::Quit(
                b"SERVER_ERROR stats are not served by osmium-proxy: ask the servers\r\n".to_vec(),
            ),
        ),
        // Found by its first word: never quiet.
        (true, b"watch") => local(line_len, "ERROR\r\n"),
        (_, b"flush_all") => {
            let noreply = mc_noreply(raw);
            // memcached reads a delay unless the line is `flush_all
            // [noreply]`; the server is sent that delay, never `noreply`.
            let bare = if noreply { 2 } else { 1 };
            let mut wire = b"flush_all".to_vec();
            if tokens.len() != bare {
                if tokto_i32(tokens[1]).is_none() {
                    return refuse(line_len, INVALID_EXPTIME, noreply);
                }
                wire.push(b' ');
                wire.extend_from_slice(tokens[1]);
            }
            wire.extend_from_slice(b"\r\n");
            text(
                line_len,
                Action::Broadcast {
                    wire,
                    expect: Expect::Line,
                    quiet: quiet_if(noreply),
                },
            )
        }
        (_, b"verbosity") => {
            let valid = tokens.get(1).is_some_and(|t| tokto_u32(t).is_some());
            refuse(
                line_len,
                if valid { "OK\r\n" } else { BAD_FORMAT },
                mc_noreply(raw),
            )
        }
        // Not found by its first word: memcached closes at an HTTP request
        // line, and hides the ERROR of a line ending in noreply.
        _ => {
            let t = tokenize(raw, NO_FLAGS).unwrap_or(McTokens::empty());
            let n = t.count();
            if n > 1 && t.get(n - 1).starts_with(b"HTTP/") {
                return text(line_len, Action::Quit(Vec::new()));
            }
            refuse(line_len, "ERROR\r\n", noreply(&t))
        }
    }
}

fn parse_i64(t: &[u8]) -> Option<i64> {
    std::str::from_utf8(t).ok()?.parse().ok()
}

fn forward<'a>(
    len: usize,
    key: &'a [u8],
    wire: Cow<'a, [u8]>,
    expect: Expect,
    quiet: Quiet,
) -> Option<Framed<'a>> {
    text(
        len,
        Action::Forward {
            key: Cow::Borrowed(key),
            wire,
            expect,
            quiet,
        },
    )
}

/// `mg`, `ms`, `md`, `ma`, `me`, as memcached's tokenizer reads them: a
/// flag token starting with neither a letter-ish byte nor a digit refuses
/// the line (an `ms` data block is then swallowed when its length is a
/// number, as osmium's server does; memcached would read it as commands).
/// The key is the second token, base64 with a `b` flag (a token starting
/// with `b`; for `me`, token 2 being `b` with 4 tokens or more): the
/// decoded key is what is hashed. A `q` flag (a token starting with `q`)
/// is stripped; `me` knows no `q`.
fn frame_meta<'a>(
    buf: &'a [u8],
    line_len: usize,
    canon: bool,
    tokens: &[&'a [u8]],
) -> Option<Framed<'a>> {
    let cmd = tokens[0];
    let raw = &buf[..line_len];
    let ms = cmd == b"ms";
    let flags_from = if ms { 3 } else { 2 };
    let tokenized = tokenize(raw, flags_from);
    let data_len = |t: &[u8]| {
        tokto_i32(t)
            .filter(|v| (0..=i32::MAX - 2).contains(v))
            .map(|v| v as usize)
    };
    let mut total = line_len;
    let mut data: &[u8] = &[];
    if ms {
        if tokenized.is_none() {
            if let Some(n) = tokens.get(2).and_then(|t| data_len(t)) {
                total = line_len + n + 2;
                if buf.len() < total {
                    return None;
                }
            }
            return local(total, BAD_FORMAT);
        }
        let Some(n) = tokens.get(2).and_then(|t| data_len(t)) else {
            return local(line_len, BAD_FORMAT);
        };
        total = line_len + n + 2;
        if buf.len() < total {
            return None;
        }
        data = &buf[line_len..total];
        if !data.ends_with(b"\r\n") {
            return local(total, "CLIENT_ERROR bad data chunk\r\n");
        }
    } else if tokenized.is_none() || tokens.len() < 2 {
        return local(line_len, BAD_FORMAT);
    }
    if tokens[1].len() > KEY_MAX {
        return local(total, BAD_FORMAT);
    }
    let flags = tokens.get(flags_from..).unwrap_or(&[]);
    let starts = |f: &[u8], b: u8| f.first() == Some(&b);
    let me = cmd == b"me";
    // Two `q` flags are refused by the server: forwarded as they came.
    let quiet = !me && flags.iter().filter(|f| starts(f, b'q')).count() == 1;
    let binary = if me {
        tokens.len() >= 4 && tokens[2] == b"b"
    } else {
        flags.iter().any(|f| starts(f, b'b'))
    };
    let mut key = Cow::Borrowed(tokens[1]);
    if binary {
        let mut out = vec![0; key.len()];
        match crate::base64::base64_decode(&key, &mut out) {
            Some(n) => {
                out.truncate(n);
                key = Cow::Owned(out);
            }
            None => return local(total, "CLIENT_ERROR error decoding key\r\n"),
        }
    }
    let wire = if canon && !quiet {
        Cow::Borrowed(&buf[..total])
    } else {
        let mut kept: Vec<&[u8]> = tokens[..flags_from.min(tokens.len())].to_vec();
        kept.extend(
            flags
                .iter()
                .copied()
                .filter(|t| !(quiet && starts(t, b'q'))),
        );
        let mut wire = join(&kept);
        wire.extend_from_slice(data);
        Cow::Owned(wire)
    };
    let hidden: &'static [&'static [u8]] = match cmd {
        b"mg" => &[b"EN"],
        b"ms" | b"md" => &[b"HD"],
        b"ma" => &[b"HD", b"VA"],
        _ => &[],
    };
    let expect = if cmd == b"mg" || cmd == b"ma" {
        Expect::MetaValue
    } else {
        Expect::Line
    };
    let quiet = if quiet {
        Quiet::Meta(hidden)
    } else {
        Quiet::No
    };
    text(
        total,
        Action::Forward {
            key,
            wire,
            expect,
            quiet,
        },
    )
}

/// Whether a forwarded request only reads (`get`, `gets`, an `mg` that
/// neither touches nor vivifies, binary GET and GETK): one that can be
/// sent again, to another server, without changing what any server holds.
pub fn is_plain_read(wire: &[u8]) -> bool {
    if wire.first() == Some(&BIN_REQ) {
        return wire.len() >= BIN_HEADER && matches!(wire[1], 0x00 | 0x0c);
    }
    if wire.starts_with(b"get ") || wire.starts_with(b"gets ") {
        return true;
    }
    let Some(rest) = wire.strip_prefix(b"mg ") else {
        return false;
    };
    let line = &rest[..memchr::memchr(b'\n', rest).unwrap_or(rest.len())];
    !line
        .split(|&b| b == b' ' || b == b'\r')
        .skip(1)
        .any(|flag| matches!(flag.first(), Some(b'T' | b'N')))
}

pub use super::binary_head::BinaryHead;

/// Binary request magic, response magic and header size.
pub const BIN_REQ: u8 = REQUEST_MAGIC;
/// The first byte of a binary response.
pub const BIN_RES: u8 = RESPONSE_MAGIC;
/// The length of a binary header.
pub const BIN_HEADER: usize = HEADER_LEN;

/// A binary response header (and body) made here.
pub fn binary_reply(opcode: u8, opaque: u32, status: u16, body: &[u8]) -> Vec<u8> {
    let mut r = vec![0u8; BIN_HEADER];
    r[0] = BIN_RES;
    r[1] = opcode;
    r[6..8].copy_from_slice(&status.to_be_bytes());
    r[8..12].copy_from_slice(&(body.len() as u32).to_be_bytes());
    r[12..16].copy_from_slice(&opaque.to_be_bytes());
    r.extend_from_slice(body);
    r
}

/// Binary status codes.
pub const ST_KEY_ENOENT: u16 = 0x0001;
/// Unknown command.
pub const ST_UNKNOWN: u16 = 0x0081;
/// Not supported (STAT and VERBOSITY, which osmium-proxy answers itself).
pub const ST_NOT_SUPPORTED: u16 = 0x0083;
/// Internal error: a failure of the proxy's own, with its text.
pub const ST_INTERNAL: u16 = 0x0084;

/// The loud opcode of a quiet one, and which status the quiet one hides.
fn unquiet(opcode: u8) -> Option<(u8, u16)> {
    Some(match opcode {
        0x09 => (0x00, ST_KEY_ENOENT), // GETQ
        0x0d => (0x0c, ST_KEY_ENOENT), // GETKQ
        0x1e => (0x1d, ST_KEY_ENOENT), // GATQ
        0x24 => (0x23, ST_KEY_ENOENT), // GATKQ
        0x11 => (0x01, 0),             // SETQ
        0x12 => (0x02, 0),             // ADDQ
        0x13 => (0x03, 0),             // REPLACEQ
        0x14 => (0x04, 0),             // DELETEQ
        0x15 => (0x05, 0),             // INCRQ
        0x16 => (0x06, 0),             // DECRQ
        0x19 => (0x0e, 0),             // APPENDQ
        0x1a => (0x0f, 0),             // PREPENDQ
        0x18 => (0x08, 0),             // FLUSHQ
        _ => return None,
    })
}

fn frame_binary(buf: &[u8]) -> Option<Framed<'_>> {
    let head = BinaryHead::parse(buf)?;
    let (opcode, opaque) = (head.opcode, head.opaque);
    let style = Style::Binary { opcode, opaque };
    if head.magic != BIN_REQ {
        return Some(Framed {
            len: buf.len(),
            action: Action::Fatal,
            style,
        });
    }
    let len = head.packet_len();
    if buf.len() < len {
        return None;
    }
    let done = |action| Some(Framed { len, action, style });
    if head.key_len + head.extras > head.body {
        return done(Action::Fatal);
    }
    let (loud, quiet) = match unquiet(opcode) {
        Some((loud, hidden_status)) => (
            loud,
            Quiet::Binary {
                opcode,
                hidden_status,
            },
        ),
        None => (opcode, Quiet::No),
    };
    let wire = if loud == opcode {
        Cow::Borrowed(&buf[..len])
    } else {
        let mut w = buf[..len].to_vec();
        w[1] = loud;
        Cow::Owned(w)
    };
    match loud {
        0x00..=0x06 | 0x0c | 0x0e | 0x0f | 0x1c | 0x1d | 0x23 => {
            let key = Cow::Borrowed(&buf[head.key_range()]);
            if key.len() > KEY_MAX {
                return done(Action::Local(binary_reply(
                    opcode,
                    opaque,
                    0x0004,
                    b"Invalid arguments",
                )));
            }
            done(Action::Forward {
                key,
                wire,
                expect: Expect::Binary,
                quiet,
            })
        }
        0x08 => done(Action::Broadcast {
            wire: wire.into_owned(),
            expect: Expect::Binary,
            quiet,
        }),
        0x0a => done(Action::Local(binary_reply(opcode, opaque, 0, b""))),
        0x0b => done(Action::Forward {
            key: Cow::Borrowed(b""),
            wire,
            expect: Expect::Binary,
            quiet,
        }),
        0x07 => done(Action::Quit(binary_reply(opcode, opaque, 0, b""))),
        0x17 => done(Action::Quit(Vec::new())),
        0x10 | 0x1b => done(Action::Local(binary_reply(
            opcode,
            opaque,
            ST_NOT_SUPPORTED,
            b"Not supported by osmium-proxy",
        ))),
        _ => done(Action::Local(binary_reply(
            opcode,
            opaque,
            ST_UNKNOWN,
            b"Unknown command",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noreply_and_q_are_stripped() {
        let f = frame(b"set k 1 2 3 noreply\r\nabc\r\nget", false).unwrap();
        assert_eq!(f.len, 26);
        let Action::Forward { wire, quiet, .. } = f.action else {
            panic!()
        };
        assert_eq!(&*wire, b"set k 1 2 3\r\nabc\r\n");
        assert_eq!(quiet, Quiet::All);
        let f = frame(b"mg q q v k\r\n", false).unwrap();
        let Action::Forward { wire, .. } = f.action else {
            panic!()
        };
        assert_eq!(&*wire, b"mg q v k\r\n", "the key q stays");
    }

    #[test]
    fn a_canonical_request_is_forwarded_as_it_came() {
        for (req, want, borrowed) in [
            (&b"get k\r\n"[..], &b"get k\r\n"[..], true),
            (b"get  k \r\n", b"get k\r\n", false),
            (b"get k\n", b"get k\r\n", false),
            (b"set k 0 0 1\r\nv\r\n", b"set k 0 0 1\r\nv\r\n", true),
            (
                b"set k 0 0 1 noreply\r\nv\r\n",
                b"set k 0 0 1\r\nv\r\n",
                false,
            ),
            (b"delete k\r\n", b"delete k\r\n", true),
            (b"mg k v t\r\n", b"mg k v t\r\n", true),
            (b"mg k q v\r\n", b"mg k v\r\n", false),
            (b"ms k 1 T0\r\nv\r\n", b"ms k 1 T0\r\nv\r\n", true),
            (
                b"mg k v t f h l c s O1 N30\r\n",
                b"mg k v t f h l c s O1 N30\r\n",
                true,
            ),
        ] {
            let f = frame(req, false).unwrap();
            assert_eq!(f.len, req.len());
            let Action::Forward { wire, key, .. } = f.action else {
                panic!()
            };
            assert_eq!(&*wire, want, "{}", String::from_utf8_lossy(req));
            assert_eq!(matches!(wire, Cow::Borrowed(_)), borrowed);
            assert_eq!(&*key, b"k");
        }
    }

    #[test]
    fn refused_storage_swallows_its_block() {
        let long = "x".repeat(251);
        let req = format!("set {long} 0 0 3\r\nget\r\nmn\r\n");
        let f = frame(req.as_bytes(), false).unwrap();
        assert_eq!(f.len, req.len() - 4, "the block `get\\r\\n` is swallowed");
        assert!(matches!(f.action, Action::Local(_)));
        assert!(
            frame(b"set k 0 0 10\r\nabc", false).is_none(),
            "waits for the block"
        );
    }

    /// What is forwarded never carries what would make a server hide its
    /// reply, nor tokens the command does not read.
    #[test]
    fn forwarded_as_memcached_reads_it() {
        for (req, want, quiet) in [
            (
                &b"set k 0 0 1 x y\r\nv\r\n"[..],
                &b"set k 0 0 1\r\nv\r\n"[..],
                Quiet::No,
            ),
            (b"delete noreply\r\n", b"delete noreply 0\r\n", Quiet::All),
            (b"incr k 1 noreply\r\n", b"incr k 1\r\n", Quiet::All),
            (b"mg k qx v\r\n", b"mg k v\r\n", Quiet::Meta(&[b"EN"])),
        ] {
            let f = frame(req, false).unwrap();
            assert_eq!(f.len, req.len());
            let Action::Forward { wire, quiet: q, .. } = f.action else {
                panic!()
            };
            assert_eq!(&*wire, want, "{}", String::from_utf8_lossy(req));
            assert_eq!(q, quiet);
        }
        let f = frame(b"flush_all noreply\r\n", false).unwrap();
        let Action::Broadcast { wire, quiet, .. } = f.action else {
            panic!()
        };
        assert_eq!((&wire[..], quiet), (&b"flush_all\r\n"[..], Quiet::All));
        let f = frame(b"verbosity 1 noreply\r\n", false).unwrap();
        assert!(matches!(f.action, Action::Local(ref r) if r.is_empty()));
    }

    #[test]
    fn multi_get_keeps_its_keys() {
        let f = frame(b"gat 10 a b c\r\n", false).unwrap();
        let Action::MultiGet { prefix, keys } = f.action else {
            panic!()
        };
        assert_eq!(prefix, b"gat 10");
        assert_eq!(keys.len(), 3);
    }

    #[test]
    fn plain_reads_are_the_ones_that_change_nothing() {
        for read in [
            &b"get a\r\n"[..],
            b"gets a b\r\n",
            b"mg a v f t\r\n",
            b"mg a\r\n",
        ] {
            assert!(is_plain_read(read), "{}", String::from_utf8_lossy(read));
        }
        for write in [
            &b"gat 10 a\r\n"[..],
            b"mg a v T30\r\n",
            b"mg a N30 v\r\n",
            b"ms a 1\r\nx\r\n",
            b"set a 0 0 1\r\nx\r\n",
            b"getx\r\n",
        ] {
            assert!(!is_plain_read(write), "{}", String::from_utf8_lossy(write));
        }
        let mut bin = [0u8; 24];
        bin[0] = BIN_REQ;
        assert!(is_plain_read(&bin));
        bin[1] = 0x0c;
        assert!(is_plain_read(&bin));
        bin[1] = 0x01;
        assert!(!is_plain_read(&bin));
    }
}
