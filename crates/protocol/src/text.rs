//! The classic memcached text protocol: finding request lines, splitting them
//! into tokens and turning them into [`Command`]s, with memcached 1.6's exact
//! validation order and error strings (proto_text.c).
//!
//! Request framing:
//!
//! ```text
//! <command line>\r\n            -- or just \n; a lone \r before \n is stripped
//! [<data block of vlen bytes>\r\n]   -- storage commands only
//! ```
//!
//! The parser is pure: it never allocates and never touches a socket. The
//! server asks [`scan_line`] for the next line, [`parse_command`] for its
//! meaning, and for storage commands waits until the data block is buffered.

use crate::numbers::{safe_strtol, safe_strtoul, safe_strtoull};

/// Longest key memcached accepts.
pub const KEY_MAX_LENGTH: usize = 250;
/// memcached tokenizes at most this many tokens (including its terminal one).
pub const MAX_TOKENS: usize = 24;
/// Without a newline in this many buffered bytes a request line is junk.
pub const LINE_LIMIT: usize = 2048;

/// What the read buffer holds at its front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineScan {
    /// A complete line: `line_len` bytes of content (without `\r\n`), and the
    /// whole line including its terminator is `consumed` bytes.
    Line { line_len: usize, consumed: usize },
    /// No newline yet; wait for more bytes.
    Incomplete,
    /// No newline within [`LINE_LIMIT`] bytes and not a multi-get: memcached
    /// closes such a connection.
    TooLong,
}

/// Finds the first request line in `buf`, as memcached's
/// `try_read_command_ascii` does.
pub fn scan_line(buf: &[u8]) -> LineScan {
    match memchr::memchr(b'\n', buf) {
        Some(nl) => {
            let mut line_len = nl;
            if line_len > 1 && buf[line_len - 1] == b'\r' {
                line_len -= 1;
            }
            LineScan::Line {
                line_len,
                consumed: nl + 1,
            }
        }
        None if buf.len() > LINE_LIMIT => {
            let lead = buf.iter().take_while(|&&b| b == b' ').count();
            let rest = &buf[lead..];
            if lead > 100 || !(rest.starts_with(b"get ") || rest.starts_with(b"gets ")) {
                LineScan::TooLong
            } else {
                LineScan::Incomplete
            }
        }
        None => LineScan::Incomplete,
    }
}

/// A request line split on spaces the way memcached's `tokenize_command`
/// does: at most `MAX_TOKENS - 1` tokens, the last one possibly holding the
/// unsplit remainder. `count()` mirrors memcached's `ntokens` (which counts
/// a terminal empty token too).
pub struct Tokens<'a> {
    toks: [&'a [u8]; MAX_TOKENS],
    n: usize,
}

impl<'a> Tokens<'a> {
    pub fn new(line: &'a [u8]) -> Self {
        // memcached works on a C string: a NUL byte ends the line.
        let line = match memchr::memchr(0, line) {
            Some(p) => &line[..p],
            None => line,
        };
        let mut toks: [&'a [u8]; MAX_TOKENS] = [&[]; MAX_TOKENS];
        let mut n = 0;
        let mut start = 0;
        let mut i = 0;
        while i < line.len() {
            if line[i] == b' ' {
                if start != i {
                    toks[n] = &line[start..i];
                    n += 1;
                    if n == MAX_TOKENS - 1 {
                        // The unsplit remainder rides in the terminal token.
                        toks[n] = &line[i + 1..];
                        return Tokens { toks, n };
                    }
                }
                start = i + 1;
            }
            i += 1;
        }
        if start < line.len() {
            toks[n] = &line[start..];
            n += 1;
        }
        Tokens { toks, n }
    }

    /// memcached's `ntokens`: real tokens plus the terminal token.
    #[inline]
    pub fn count(&self) -> usize {
        self.n + 1
    }

    /// Token `i` (empty past the end).
    #[inline]
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < MAX_TOKENS {
            self.toks[i]
        } else {
            &[]
        }
    }

    /// memcached's `set_noreply_maybe`: is the last real token `noreply`?
    #[inline]
    fn noreply(&self) -> bool {
        self.n >= 1 && self.toks[self.n - 1] == b"noreply"
    }
}

/// Which storage command a [`StoreRequest`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreMode {
    #[default]
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// The header line of a storage command; its data block follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreRequest<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i32,
    /// Length of the data block, without its `\r\n`.
    pub value_len: u32,
    pub cas: u64,
    pub noreply: bool,
}

/// The keys of a retrieval command, split lazily on spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

/// A parsed request line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// get/gets/gat/gats (and the ancient bget).
    Get {
        keys: Keys<'a>,
        with_cas: bool,
        /// `Some(exptime)` for gat/gats.
        touch: Option<i32>,
    },
    Store(StoreRequest<'a>),
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Arith {
        key: &'a [u8],
        incr: bool,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i32,
        noreply: bool,
    },
    /// `delay` is None when the argument is not a number (memcached checks
    /// -F before it complains about that).
    FlushAll {
        delay: Option<i32>,
        noreply: bool,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    /// `shutdown [graceful]`; `valid` is false for any other argument (the
    /// server checks -A first, as memcached does).
    Shutdown {
        graceful: bool,
        valid: bool,
    },
    /// `stats [group [arg]]`; the group is interpreted by the server.
    Stats {
        group: Option<&'a [u8]>,
        arg: Option<&'a [u8]>,
        /// memcached's ntokens, for its argument checks.
        ntokens: usize,
    },
    CacheMemlimit {
        megabytes: u32,
        noreply: bool,
    },
    /// `cache_memlimit` with a non-numeric argument (memcached says ERROR).
    /// A fixed reply: an error or status line (without `\r\n`); suppressed
    /// when `noreply` is set, as memcached's `out_string` does.
    Reply {
        msg: &'static str,
        noreply: bool,
    },
    /// memcached closes the connection without a reply (an HTTP request).
    Close,
}

const ERROR: Command<'static> = Command::Reply {
    msg: "ERROR",
    noreply: false,
};

fn reply(msg: &'static str, noreply: bool) -> Command<'static> {
    Command::Reply { msg, noreply }
}

pub const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";

/// Parses one request line (without its terminator).
pub fn parse_command(line: &[u8]) -> Command<'_> {
    parse_tokens(Tokens::new(line), line)
}

/// True when memcached would dispatch this line to a meta command: a
/// two-byte command token starting with `m` (see [`crate::meta`]).
#[inline]
pub fn is_meta(t: &Tokens<'_>) -> bool {
    let cmd = t.get(0);
    cmd.len() == 2 && cmd[0] == b'm'
}

/// Parses a tokenized request line (`line` is the whole line, for
/// multi-key gets).
pub fn parse_tokens<'a>(t: Tokens<'a>, line: &'a [u8]) -> Command<'a> {
    let ntokens = t.count();
    let cmd = t.get(0);
    if ntokens < 2 || cmd.len() < 2 {
        return ERROR;
    }
    match cmd {
        b"get" | b"gets" | b"gat" | b"gats" | b"bget" => parse_get(&t, line),
        _ if cmd[0] == b'g' => {
            // memcached checks the token count before the name.
            ERROR
        }
        b"set" => parse_store(&t, StoreMode::Set),
        b"add" => parse_store(&t, StoreMode::Add),
        b"replace" => parse_store(&t, StoreMode::Replace),
        b"append" => parse_store(&t, StoreMode::Append),
        b"prepend" => parse_store(&t, StoreMode::Prepend),
        b"cas" => parse_store(&t, StoreMode::Cas),
        b"delete" => parse_delete(&t),
        b"incr" | b"decr" => parse_arith(&t, cmd == b"incr"),
        b"touch" => parse_touch(&t),
        b"flush_all" => parse_flush_all(&t),
        b"version" => Command::Version,
        b"quit" => Command::Quit,
        b"shutdown" => parse_shutdown(&t),
        b"verbosity" => parse_verbosity(&t),
        b"stats" => Command::Stats {
            group: (ntokens > 2).then(|| t.get(1)),
            arg: (ntokens > 3).then(|| t.get(2)),
            ntokens,
        },
        b"cache_memlimit" => parse_memlimit(&t),
        _ => {
            if t.get(ntokens - 2).starts_with(b"HTTP/") {
                Command::Close
            } else {
                ERROR
            }
        }
    }
}

fn parse_get<'a>(t: &Tokens<'a>, line: &'a [u8]) -> Command<'a> {
    if t.count() < 3 {
        return ERROR;
    }
    let cmd = t.get(0);
    let touch = cmd == b"gat" || cmd == b"gats";
    let with_cas = cmd == b"gets" || cmd == b"gats";
    let (touch_exptime, first_key) = if touch {
        match safe_strtol(t.get(1)) {
            Some(e) => (Some(e), t.get(2)),
            None => return reply("CLIENT_ERROR invalid exptime argument", false),
        }
    } else {
        (None, t.get(1))
    };
    // Keys run from the first key token to the end of the (NUL-cut) line.
    let line = match memchr::memchr(0, line) {
        Some(p) => &line[..p],
        None => line,
    };
    let rest = if first_key.is_empty() {
        &[][..]
    } else {
        let offset = first_key.as_ptr() as usize - line.as_ptr() as usize;
        &line[offset..]
    };
    Command::Get {
        keys: Keys { rest },
        with_cas,
        touch: touch_exptime,
    }
}

fn parse_store<'a>(t: &Tokens<'a>, mode: StoreMode) -> Command<'a> {
    let ntokens = t.count();
    let handle_cas = mode == StoreMode::Cas;
    let (a, b) = if handle_cas { (7, 8) } else { (6, 7) };
    if ntokens != a && ntokens != b {
        return ERROR;
    }
    let noreply = t.noreply();
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return reply(BAD_FORMAT, noreply);
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (
        safe_strtoul(t.get(2)),
        safe_strtol(t.get(3)),
        safe_strtol(t.get(4)),
    ) else {
        return reply(BAD_FORMAT, noreply);
    };
    let mut cas = 0;
    if handle_cas {
        match safe_strtoull(t.get(5)) {
            Some(c) => cas = c,
            None => return reply(BAD_FORMAT, noreply),
        }
    }
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return reply(BAD_FORMAT, noreply);
    }
    Command::Store(StoreRequest {
        mode,
        key,
        flags,
        exptime,
        value_len: vlen as u32,
        cas,
        noreply,
    })
}

fn parse_delete<'a>(t: &Tokens<'a>) -> Command<'a> {
    let ntokens = t.count();
    if !(3..=5).contains(&ntokens) {
        return ERROR;
    }
    let mut noreply = false;
    if ntokens > 3 {
        let hold_is_zero = t.get(2) == b"0";
        noreply = t.noreply();
        let valid = (ntokens == 4 && (hold_is_zero || noreply))
            || (ntokens == 5 && hold_is_zero && noreply);
        if !valid {
            return reply(
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
                noreply,
            );
        }
    }
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return reply(BAD_FORMAT, noreply);
    }
    Command::Delete { key, noreply }
}

fn parse_arith<'a>(t: &Tokens<'a>, incr: bool) -> Command<'a> {
    let ntokens = t.count();
    if ntokens != 4 && ntokens != 5 {
        return ERROR;
    }
    let noreply = t.noreply();
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return reply(BAD_FORMAT, noreply);
    }
    match safe_strtoull(t.get(2)) {
        Some(delta) => Command::Arith {
            key,
            incr,
            delta,
            noreply,
        },
        None => reply("CLIENT_ERROR invalid numeric delta argument", noreply),
    }
}

fn parse_touch<'a>(t: &Tokens<'a>) -> Command<'a> {
    let ntokens = t.count();
    if ntokens != 4 && ntokens != 5 {
        return ERROR;
    }
    let noreply = t.noreply();
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return reply(BAD_FORMAT, noreply);
    }
    match safe_strtol(t.get(2)) {
        Some(exptime) => Command::Touch {
            key,
            exptime,
            noreply,
        },
        None => reply("CLIENT_ERROR invalid exptime argument", noreply),
    }
}

fn parse_flush_all<'a>(t: &Tokens<'a>) -> Command<'a> {
    let ntokens = t.count();
    if !(2..=4).contains(&ntokens) {
        return ERROR;
    }
    let noreply = t.noreply();
    let delay = if ntokens != if noreply { 3 } else { 2 } {
        safe_strtol(t.get(1))
    } else {
        Some(0)
    };
    Command::FlushAll { delay, noreply }
}

fn parse_shutdown<'a>(t: &Tokens<'a>) -> Command<'a> {
    let (graceful, valid) = match t.count() {
        2 => (false, true),
        3 if t.get(1) == b"graceful" => (true, true),
        _ => (false, false),
    };
    Command::Shutdown { graceful, valid }
}

fn parse_verbosity<'a>(t: &Tokens<'a>) -> Command<'a> {
    let ntokens = t.count();
    if ntokens != 3 && ntokens != 4 {
        return ERROR;
    }
    let noreply = t.noreply();
    match safe_strtoul(t.get(1)) {
        Some(level) => Command::Verbosity { level, noreply },
        None => reply(BAD_FORMAT, noreply),
    }
}

fn parse_memlimit<'a>(t: &Tokens<'a>) -> Command<'a> {
    let ntokens = t.count();
    if ntokens != 3 && ntokens != 4 {
        return ERROR;
    }
    let noreply = t.noreply();
    match safe_strtoul(t.get(1)) {
        Some(megabytes) => Command::CacheMemlimit { megabytes, noreply },
        None => reply("ERROR", noreply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(c: Command<'_>) -> Vec<Vec<u8>> {
        match c {
            Command::Get { keys, .. } => keys.map(|k| k.to_vec()).collect(),
            other => panic!("not a get: {other:?}"),
        }
    }

    #[test]
    fn lines() {
        assert_eq!(
            scan_line(b"get a\r\nxx"),
            LineScan::Line {
                line_len: 5,
                consumed: 7
            }
        );
        assert_eq!(
            scan_line(b"get a\n"),
            LineScan::Line {
                line_len: 5,
                consumed: 6
            }
        );
        // a lone "\r\n" keeps its \r (memcached strips it only after 1+ bytes)
        assert_eq!(
            scan_line(b"\r\n"),
            LineScan::Line {
                line_len: 1,
                consumed: 2
            }
        );
        assert_eq!(scan_line(b"get a"), LineScan::Incomplete);
        assert_eq!(scan_line(&[b'x'; 3000]), LineScan::TooLong);
        let mut big = b"get ".to_vec();
        big.extend(std::iter::repeat_n(b'k', 3000));
        assert_eq!(scan_line(&big), LineScan::Incomplete);
    }

    #[test]
    fn tokenizer_counts_like_memcached() {
        assert_eq!(Tokens::new(b"").count(), 1);
        assert_eq!(Tokens::new(b"get  a   b ").count(), 4);
        let many: Vec<u8> = (0..40).flat_map(|_| b"x ".iter().copied()).collect();
        assert_eq!(Tokens::new(&many).count(), MAX_TOKENS);
        assert_eq!(Tokens::new(b"get a\0 b").count(), 3);
    }

    #[test]
    fn gets_split_keys() {
        assert_eq!(
            keys(parse_command(b"get a  bb c")),
            vec![b"a".to_vec(), b"bb".to_vec(), b"c".to_vec()]
        );
        let line: Vec<u8> = b"get"
            .iter()
            .copied()
            .chain((0..100).flat_map(|i| format!(" k{i}").into_bytes()))
            .collect();
        assert_eq!(keys(parse_command(&line)).len(), 100);
        assert_eq!(parse_command(b"get"), ERROR);
        assert!(matches!(
            parse_command(b"gat 10"),
            Command::Get {
                touch: Some(10),
                ..
            }
        ));
        assert_eq!(keys(parse_command(b"gat 10")).len(), 0);
    }

    #[test]
    fn storage() {
        match parse_command(b"set k 5 -1 3 noreply") {
            Command::Store(s) => {
                assert_eq!(
                    (s.mode, s.key, s.flags, s.exptime, s.value_len, s.noreply),
                    (StoreMode::Set, &b"k"[..], 5, -1, 3, true)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_command(b"set k 0 0"), ERROR);
        assert_eq!(parse_command(b"set k 0 0 -1"), reply(BAD_FORMAT, false));
        assert_eq!(
            parse_command(b"set k x 0 1 noreply"),
            reply(BAD_FORMAT, true)
        );
        assert!(matches!(
            parse_command(b"cas k 0 0 1 99"),
            Command::Store(StoreRequest { cas: 99, .. })
        ));
        let long = [b"set ".to_vec(), vec![b'a'; 251], b" 0 0 1".to_vec()].concat();
        assert_eq!(parse_command(&long), reply(BAD_FORMAT, false));
    }

    #[test]
    fn misc_commands() {
        assert_eq!(
            parse_command(b"delete k 0"),
            Command::Delete {
                key: b"k",
                noreply: false
            }
        );
        assert!(matches!(
            parse_command(b"delete k 1"),
            Command::Reply { .. }
        ));
        assert_eq!(
            parse_command(b"flush_all noreply"),
            Command::FlushAll {
                delay: Some(0),
                noreply: true
            }
        );
        assert_eq!(
            parse_command(b"flush_all 10"),
            Command::FlushAll {
                delay: Some(10),
                noreply: false
            }
        );
        assert_eq!(parse_command(b"GET k"), ERROR);
        assert_eq!(parse_command(b"x"), ERROR);
        assert_eq!(parse_command(b"GET / HTTP/1.1"), Command::Close);
        assert_eq!(
            parse_command(b"incr k abc"),
            reply("CLIENT_ERROR invalid numeric delta argument", false)
        );
        assert_eq!(parse_command(b"verbosity noreply"), reply(BAD_FORMAT, true));
    }
}
