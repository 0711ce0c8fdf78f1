//! The meta protocol (`mg ms md ma mn me`, protocol.txt "Meta Commands"):
//! turning a meta request line into a [`MetaRequest`], with memcached
//! 1.6's validation order and error strings (proto_text.c
//! `process_m*_command` and `_meta_flag_preparse`). The base64 codec
//! memcached uses for binary keys (the `b` flag) lives in [`crate::base64`]
//! and is re-exported here.
//!
//! ```text
//! <cm> <key> [<datalen>] <flag>*\r\n     cm: mg ms md ma mn me
//! flag: one character, optionally followed by a token: v, T30, Oabc, MS
//! ```
//!
//! Flags are validated once here (duplicates, unknown characters, numeric
//! tokens); the server then walks [`MetaRequest::flag_tokens`] in request
//! order, because the order of the returned flags follows the request.
//! Where memcached 1.6.18 and protocol.txt (1.6.45) disagree, protocol.txt
//! wins: `E` (explicit new CAS), `x` (md: drop the value) and `N` with
//! `ms` in append/prepend mode are accepted here although 1.6.18 refuses
//! or ignores them.

pub use crate::base64::{base64_decode, base64_encode};
use crate::numbers::{safe_strtol, safe_strtoul, safe_strtoull};
use crate::text::{Tokens, KEY_MAX_LENGTH};

/// memcached's MFLAG_MAX_OPT_LENGTH: more tokens than this is an error.
pub const MAX_OPT_TOKENS: usize = 20;
/// Longest `O...` token: protocol.txt allows opaques of up to 32 bytes
/// (1.6.18 counts the `O` too and stops at 31).
pub const MAX_OPAQUE_LENGTH: usize = 33;

pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
pub const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";

/// Which meta command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaCommand {
    Get,
    Set,
    Delete,
    Arith,
    Debug,
}

/// The request's flags, decoded. Exptimes are raw client values; the
/// server converts them with memcached's `realtime()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaFlags {
    /// `q`: suppress the nominal reply.
    pub no_reply: bool,
    /// `u`: don't bump (no hit marking, no access-time update).
    pub no_update: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `I`: invalidate / allow a stale CAS.
    pub set_stale: bool,
    /// `x` (md): remove the value, keep the item.
    pub remove_value: bool,
    /// `N<ttl>`: vivify on miss.
    pub vivify: Option<i32>,
    /// `T<ttl>`: new TTL.
    pub ttl: Option<i32>,
    /// `R<ttl>`: recache win threshold.
    pub recache: Option<i32>,
    /// `C<cas>`: compare CAS.
    pub compare_cas: Option<u64>,
    /// `E<cas>`: explicit new CAS.
    pub new_cas: Option<u64>,
    /// `F<flags>`: client flags (ms).
    pub client_flags: u32,
    /// `M<c>`: mode character (ms, ma); 0 when absent.
    pub mode: u8,
    /// `D<n>`: delta (ma), default 1.
    pub delta: u64,
    /// `J<n>`: initial value (ma), default 0.
    pub initial: u64,
}

/// A validated meta request.
pub struct MetaRequest<'a> {
    pub command: MetaCommand,
    /// The key as sent (base64 text when `key_binary`).
    pub raw_key: &'a [u8],
    key_buf: [u8; KEY_MAX_LENGTH],
    key_len: usize,
    /// `b`: the key was base64 and has been decoded.
    pub key_binary: bool,
    pub flags: MetaFlags,
    /// ms: the data block length (without `\r\n`).
    pub data_len: usize,
    tokens: Tokens<'a>,
}

impl<'a> MetaRequest<'a> {
    /// The key to look up (decoded when `b` was given).
    pub fn key(&self) -> &[u8] {
        if self.key_binary {
            &self.key_buf[..self.key_len]
        } else {
            self.raw_key
        }
    }

    /// The tokens after the key, in request order (memcached walks these
    /// to build the reply; for ms the first one is the data length).
    pub fn flag_tokens(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        let n = self.tokens.count() - 1;
        (2..n).map(move |i| self.tokens.get(i))
    }
}

/// What a meta request line asks for.
// The request is large (it carries the decoded key) but lives on the stack
// for one command: boxing it would allocate per request.
#[allow(clippy::large_enum_variant)]
pub enum MetaParse<'a> {
    Request(MetaRequest<'a>),
    /// `mn`.
    Noop,
    /// An error line to send. `swallow` is the number of bytes (data block
    /// and its `\r\n`) to discard after it, for ms errors found once the
    /// data length is known.
    Error {
        msg: &'static str,
        swallow: Option<usize>,
    },
}

fn error(msg: &'static str) -> MetaParse<'static> {
    MetaParse::Error { msg, swallow: None }
}

/// Parses a request line whose command token is two bytes starting with
/// `m` (the caller has checked that memcached's dispatch applies).
pub fn parse_meta(t: Tokens<'_>) -> MetaParse<'_> {
    let ntokens = t.count();
    let command = match t.get(0)[1] {
        b'g' => MetaCommand::Get,
        b's' => MetaCommand::Set,
        b'd' => MetaCommand::Delete,
        b'a' => MetaCommand::Arith,
        b'e' => MetaCommand::Debug,
        b'n' => return MetaParse::Noop,
        _ => return error("ERROR"),
    };
    if command == MetaCommand::Debug {
        return parse_debug(t);
    }
    if ntokens < 3 {
        return error("ERROR");
    }
    let raw_key = t.get(1);
    if raw_key.len() > KEY_MAX_LENGTH {
        return error(BAD_FORMAT);
    }
    let mut data_len = 0;
    let mut swallow = None;
    let first_flag = if command == MetaCommand::Set {
        if ntokens == 3 {
            return error(BAD_FORMAT);
        }
        if ntokens > MAX_OPT_TOKENS {
            return error("CLIENT_ERROR options flags too long");
        }
        match safe_strtol(t.get(2)) {
            Some(v) if (0..=i32::MAX - 2).contains(&v) => data_len = v as usize,
            _ => return error(BAD_FORMAT),
        }
        swallow = Some(data_len + 2);
        3
    } else {
        if ntokens > MAX_OPT_TOKENS {
            return error(if command == MetaCommand::Get {
                "CLIENT_ERROR options flags are too long"
            } else {
                "CLIENT_ERROR options flags too long"
            });
        }
        2
    };
    let mut req = MetaRequest {
        command,
        raw_key,
        key_buf: [0; KEY_MAX_LENGTH],
        key_len: 0,
        key_binary: false,
        flags: MetaFlags {
            delta: 1,
            ..MetaFlags::default()
        },
        data_len,
        tokens: t,
    };
    if let Err(msg) = preparse(&mut req, first_flag) {
        let msg = match command {
            MetaCommand::Delete | MetaCommand::Arith => "CLIENT_ERROR invalid or duplicate flag",
            _ => msg,
        };
        return MetaParse::Error { msg, swallow };
    }
    match command {
        MetaCommand::Set => {
            let opaque_too_long = req
                .flag_tokens()
                .any(|f| f[0] == b'O' && f.len() > MAX_OPAQUE_LENGTH);
            if !matches!(req.flags.mode, 0 | b'E' | b'A' | b'P' | b'R' | b'S') {
                return MetaParse::Error {
                    msg: "CLIENT_ERROR invalid mode for ms M token",
                    swallow,
                };
            }
            if opaque_too_long {
                return MetaParse::Error {
                    msg: OPAQUE_TOO_LONG,
                    swallow,
                };
            }
        }
        MetaCommand::Delete
            if req
                .flag_tokens()
                .any(|f| f[0] == b'O' && f.len() > MAX_OPAQUE_LENGTH) =>
        {
            return error(OPAQUE_TOO_LONG);
        }
        MetaCommand::Arith if !matches!(req.flags.mode, 0 | b'I' | b'+' | b'D' | b'-') => {
            return error("CLIENT_ERROR invalid mode for ma M token");
        }
        _ => {}
    }
    MetaParse::Request(req)
}

/// `me <key> [b]`.
fn parse_debug(t: Tokens<'_>) -> MetaParse<'_> {
    let ntokens = t.count();
    let raw_key = t.get(1);
    if ntokens < 3 || raw_key.len() > KEY_MAX_LENGTH {
        return error(BAD_FORMAT);
    }
    let mut req = MetaRequest {
        command: MetaCommand::Debug,
        raw_key,
        key_buf: [0; KEY_MAX_LENGTH],
        key_len: 0,
        key_binary: false,
        flags: MetaFlags::default(),
        data_len: 0,
        tokens: t,
    };
    if ntokens >= 4 && req.tokens.get(2) == b"b" {
        match base64_decode(raw_key, &mut req.key_buf) {
            Some(n) => {
                req.key_len = n;
                req.key_binary = true;
            }
            None => return error(BAD_FORMAT),
        }
    }
    MetaParse::Request(req)
}

/// memcached's `_meta_flag_preparse`: one pass over the flags, stopping at
/// a duplicate or unknown flag; other errors are remembered (the last one
/// wins) and reported after the pass.
fn preparse(req: &mut MetaRequest<'_>, start: usize) -> Result<(), &'static str> {
    let mut seen = [false; 128];
    let mut err: Option<&'static str> = None;
    let bad_token = "CLIENT_ERROR bad token in command line format";
    let n = req.tokens.count() - 1;
    for i in start..n {
        let tok = req.tokens.get(i);
        let o = tok[0];
        if o >= 127 || seen[o as usize] {
            return Err("CLIENT_ERROR duplicate flag");
        }
        seen[o as usize] = true;
        let arg = &tok[1..];
        let f = &mut req.flags;
        match o {
            b'b' => {
                match base64_decode(req.raw_key, &mut req.key_buf) {
                    Some(len) => req.key_len = len,
                    None => {
                        req.key_len = 0;
                        err = Some("CLIENT_ERROR error decoding key");
                    }
                }
                req.key_binary = true;
            }
            b'N' | b'T' | b'R' => match safe_strtol(arg) {
                Some(v) => match o {
                    b'N' => f.vivify = Some(v),
                    b'T' => f.ttl = Some(v),
                    _ => f.recache = Some(v),
                },
                None => err = Some(bad_token),
            },
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'l' | b'h' => {}
            b'v' => f.value = true,
            b'u' => f.no_update = true,
            b'q' => f.no_reply = true,
            b'I' => f.set_stale = true,
            // protocol.txt gives x to md only; elsewhere it stays invalid.
            b'x' if req.command == MetaCommand::Delete => f.remove_value = true,
            b'F' => match safe_strtoul(arg) {
                Some(v) => f.client_flags = v,
                None => err = Some(err.unwrap_or(BAD_FORMAT)),
            },
            b'C' | b'E' => match safe_strtoull(arg) {
                Some(v) if o == b'C' => f.compare_cas = Some(v),
                Some(v) => f.new_cas = Some(v),
                None => err = Some(bad_token),
            },
            b'M' => {
                if tok.len() != 2 {
                    err = Some("CLIENT_ERROR incorrect length for M token");
                } else {
                    f.mode = tok[1];
                }
            }
            b'J' => match safe_strtoull(arg) {
                Some(v) => f.initial = v,
                None => err = Some("CLIENT_ERROR invalid numeric initial value"),
            },
            b'D' => match safe_strtoull(arg) {
                Some(v) => f.delta = v,
                None => err = Some("CLIENT_ERROR invalid numeric delta value"),
            },
            _ => return Err("CLIENT_ERROR invalid flag"),
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> MetaParse<'_> {
        parse_meta(Tokens::new(line.as_bytes()))
    }

    fn err(line: &str) -> (&'static str, Option<usize>) {
        match parse(line) {
            MetaParse::Error { msg, swallow } => (msg, swallow),
            _ => panic!("{line}: expected an error"),
        }
    }

    #[test]
    fn errors_in_memcached_order() {
        assert_eq!(err("mg").0, "ERROR");
        assert_eq!(err("mz foo").0, "ERROR");
        assert_eq!(err("mg foo zz").0, "CLIENT_ERROR invalid flag");
        assert_eq!(err("mg foo v v").0, "CLIENT_ERROR duplicate flag");
        assert_eq!(
            err("md foo v v").0,
            "CLIENT_ERROR invalid or duplicate flag"
        );
        assert_eq!(err("ms foo").0, BAD_FORMAT);
        assert_eq!(err("ms foo -1").0, BAD_FORMAT);
        assert_eq!(
            err("ms foo 5 MX"),
            ("CLIENT_ERROR invalid mode for ms M token", Some(7))
        );
        assert_eq!(
            err("ms foo 5 Tx").0,
            "CLIENT_ERROR bad token in command line format"
        );
        assert_eq!(
            err("ma foo MX").0,
            "CLIENT_ERROR invalid mode for ma M token"
        );
        assert_eq!(err("ma foo Dx").0, "CLIENT_ERROR invalid or duplicate flag");
        assert_eq!(err("mg foo b").0, "CLIENT_ERROR error decoding key");
        let long = format!("mg {}", "k".repeat(251));
        assert_eq!(err(&long).0, BAD_FORMAT);
        let many = format!(
            "mg foo {}",
            "O1 ".repeat(0)
                + &('a'..='s')
                    .map(|c| c.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
        );
        assert_eq!(err(&many).0, "CLIENT_ERROR options flags are too long");
    }

    #[test]
    fn flags_decoded() {
        let MetaParse::Request(r) = parse("ms Zm9v 3 b T30 F7 C9 MA q I") else {
            panic!()
        };
        assert_eq!(r.key(), b"foo");
        assert!(r.key_binary);
        assert_eq!(r.data_len, 3);
        let f = r.flags;
        assert_eq!(
            (f.ttl, f.client_flags, f.compare_cas, f.mode),
            (Some(30), 7, Some(9), b'A')
        );
        assert!(f.no_reply && f.set_stale);
        let toks: Vec<&[u8]> = r.flag_tokens().collect();
        assert_eq!(toks[0], b"3");
        assert!(matches!(parse("mn"), MetaParse::Noop));
    }
}
