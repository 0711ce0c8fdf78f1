//! The protocol-neutral request: what the text, meta and binary parsers all
//! produce, and what the server's executor runs.
//!
//! A [`Request`] is a cache [`Command`] (what to do, in cache terms: keys,
//! modes, expiry arguments, CAS conditions) and a [`Reply`] (how the answer
//! is framed: which protocol the request came in, and what that protocol's
//! reply needs: noreply, the meta return flags in request order, the binary
//! opcode and opaque). The executor runs the command against the store and
//! counts its stats the same way whichever protocol it came in; only the
//! reply encoders look at `reply`.
//!
//! ```text
//!   "set k 5 0 3\r\nabc\r\n"          ─┐
//!   "ms k 3 F5 T0 c\r\nabc\r\n"        ├─▶ Request { command: Store(..), reply: .. } ─▶ execute ─▶ compose
//!   [0x80 SET extras key value]       ─┘
//! ```
//!
//! Everything borrows from the bytes the request was parsed from (and, for
//! a meta key sent in base64, from the caller's [`KeyBuffer`]): building a
//! request allocates nothing.
//!
//! **Expiry arguments** are kept as memcached's `realtime()` argument, an
//! `i64` that is never negative: 0 means never, up to 30 days is relative,
//! above is a unix time. The text and meta parsers map a negative exptime
//! as memcached's `EXPTIME_TO_POSITIVE_TIME` does (to 30 days + 1 s, a unix
//! time long past: already expired); the binary protocol's are unsigned.

/// Longest key memcached accepts.
pub const KEY_MAX_LENGTH: usize = 250;

/// memcached's `REALTIME_MAXDELTA`: exptimes above this are unix times.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// memcached's `EXPTIME_TO_POSITIVE_TIME`: a negative client exptime becomes
/// a unix time in the past (the item is expired at once).
#[inline]
pub fn exptime_to_positive(exptime: i32) -> i64 {
    if exptime < 0 {
        REALTIME_MAXDELTA + 1
    } else {
        i64::from(exptime)
    }
}

/// Room for a key decoded from base64 (the meta `b` flag). A parse that
/// decodes a key writes it here and the request borrows it, so a request
/// never owns a key buffer of its own.
pub struct KeyBuffer(pub [u8; KEY_MAX_LENGTH]);

impl KeyBuffer {
    /// An all-zero buffer.
    pub const fn new() -> KeyBuffer {
        KeyBuffer([0; KEY_MAX_LENGTH])
    }
}

impl Default for KeyBuffer {
    fn default() -> Self {
        KeyBuffer::new()
    }
}

/// One parsed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// What the request asks the cache to do.
    pub command: Command<'a>,
    /// How its reply is framed.
    pub reply: Reply<'a>,
}

/// How a request's reply is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// The classic text protocol. `noreply` suppresses the reply, errors
    /// included (memcached's `out_string`), except where memcached sends
    /// them anyway.
    Text {
        /// The request ended with `noreply`.
        noreply: bool,
    },
    /// A meta command (mg ms md ma me mn).
    Meta(MetaReply<'a>),
    /// The binary protocol.
    Binary(BinaryReply),
}

impl Reply<'_> {
    /// The reply of a text command without noreply.
    pub const TEXT: Reply<'static> = Reply::Text { noreply: false };
}

/// What a meta reply needs from its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaReply<'a> {
    /// The request's tokens: return flags (`O`, `k`, `c`, `t`, ...) are
    /// written in the order their flags appear from token `first_flag` on.
    pub tokens: Tokens<'a>,
    /// The index of the first flag token (after the command and key).
    pub first_flag: usize,
    /// `q`: hide the nominal reply, never an error. In memcached 1.6.45
    /// that is: mg a miss's `EN` (a hit's `HD` is still sent); ms, md and
    /// ma their `HD` (md's `NF`, ma's `NF` and `EX`, ms's `NS`, `EX`, `NF`
    /// are sent).
    pub quiet: bool,
    /// `b`: the key was sent in base64; `k` returns it encoded, followed by
    /// ` b`.
    pub binary_key: bool,
}

impl<'a> MetaReply<'a> {
    /// The flag tokens, in request order (each at least one byte long).
    pub fn flags(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        (self.first_flag..self.tokens.count()).map(move |i| self.tokens.get(i))
    }
}

/// What a binary reply needs from its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryReply {
    /// The request's opcode, echoed in the response.
    pub opcode: u8,
    /// Echoed in every response packet.
    pub opaque: u32,
    /// A quiet opcode: no reply on success (GETQ: not on a miss either).
    pub quiet: bool,
    /// GETK/GATK (and quiet forms): the key comes back with the value, and
    /// with a miss.
    pub with_key: bool,
}

/// The tokens of a request line, as memcached's tokenizer finds them:
/// offsets of up to [`MAX_TOKENS`] tokens separated by spaces. Tokens are
/// never empty.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Tokens<'a> {
    line: &'a [u8],
    /// Start of token i; `starts[count]` is the end cap (where the last
    /// token ends, spaces after it excluded).
    starts: [u16; MAX_TOKENS + 1],
    count: u8,
}

/// memcached's tokenizer keeps this many tokens (`MCMC_PARSER_MAX_TOKENS
/// - 1`); anything after the last one is ignored.
pub const MAX_TOKENS: usize = 23;

impl<'a> Tokens<'a> {
    /// Tokens from offsets (see the text parser): `starts[..=count]`, each
    /// token running from its start to the next start with trailing spaces
    /// removed. The caller guarantees the offsets are in order and inside
    /// `line`.
    pub fn from_offsets(line: &'a [u8], starts: [u16; MAX_TOKENS + 1], count: usize) -> Self {
        debug_assert!(count <= MAX_TOKENS);
        Tokens {
            line,
            starts,
            count: count as u8,
        }
    }

    /// No tokens.
    pub fn empty() -> Tokens<'static> {
        Tokens {
            line: &[],
            starts: [0; MAX_TOKENS + 1],
            count: 0,
        }
    }

    /// How many tokens there are (memcached's `ntokens`).
    #[inline]
    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// Token `i`, or an empty slice past the end.
    #[inline]
    pub fn get(&self, i: usize) -> &'a [u8] {
        if i >= self.count() {
            return &[];
        }
        let start = usize::from(self.starts[i]);
        let mut end = usize::from(self.starts[i + 1]);
        while end > start && self.line[end - 1] == b' ' {
            end -= 1;
        }
        &self.line[start..end]
    }

    /// The bytes from the start of token `i` to `end` (the line without its
    /// terminator), for commands that read past the tokenizer (a get's keys).
    #[inline]
    pub fn rest_from(&self, i: usize, end: usize) -> &'a [u8] {
        if i >= self.count() {
            return &[];
        }
        &self.line[usize::from(self.starts[i])..end.min(self.line.len())]
    }

    /// The line the tokens point into.
    #[inline]
    pub fn line(&self) -> &'a [u8] {
        self.line
    }
}

impl std::fmt::Debug for Tokens<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries((0..self.count()).map(|i| String::from_utf8_lossy(self.get(i))))
            .finish()
    }
}

/// The keys of a retrieval: the rest of a text `get` line split on spaces
/// (a key is any bytes but a space, NUL included), or exactly one key (the
/// binary protocol's keys may contain spaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys<'a> {
    rest: &'a [u8],
    one: bool,
}

impl<'a> Keys<'a> {
    /// The keys of `list`, separated by one or more spaces.
    pub fn list(list: &'a [u8]) -> Keys<'a> {
        Keys {
            rest: list,
            one: false,
        }
    }

    /// Exactly `key`.
    pub fn one(key: &'a [u8]) -> Keys<'a> {
        Keys {
            rest: key,
            one: true,
        }
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];
    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.one {
            self.one = false;
            let key = std::mem::take(&mut self.rest);
            // An empty list stays empty.
            return Some(key).filter(|k| !k.is_empty());
        }
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

/// Which storage command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreMode {
    /// Store whatever the key holds.
    #[default]
    Set,
    /// Store only if the key holds nothing.
    Add,
    /// Store only if the key holds an item.
    Replace,
    /// Add the data after the item's value.
    Append,
    /// Add the data before the item's value.
    Prepend,
    /// Store only if the item's CAS unique is `Store::cas`.
    Cas,
}

/// What a request asks the cache to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// Return the values of keys: text get/gets/gat/gats (any number of
    /// keys), binary GET/GETK/GAT/GATK and their quiet forms (one key).
    /// With `touch`, each hit's expiry is set first (gat). Text keys are
    /// not length-checked by the parser: memcached checks each as it
    /// looks it up (see the `ascii` module).
    Get {
        /// The keys, in request order.
        keys: Keys<'a>,
        /// gat/gats, binary GAT: the new expiry argument.
        touch: Option<i64>,
        /// gets/gats: the text reply carries CAS uniques (binary replies
        /// always do).
        with_cas: bool,
    },
    /// Set a key's expiry: text touch, binary TOUCH (whose hit answers the
    /// client flags).
    Touch {
        /// The key.
        key: &'a [u8],
        /// The new expiry argument.
        exptime: i64,
    },
    /// mg.
    MetaGet(MetaGet<'a>),
    /// me: an item's metadata as text.
    MetaDebug {
        /// The key.
        key: &'a [u8],
        /// `b`: the key was sent in base64.
        binary_key: bool,
    },
    /// A storage command; its value (`value_len` bytes, then `\r\n` in the
    /// text protocols) follows the request.
    Store(Store<'a>),
    /// text delete, binary DELETE, md.
    Delete(Delete<'a>),
    /// text incr/decr, binary INCREMENT/DECREMENT, ma.
    Arith(Arith<'a>),
    /// flush_all / FLUSH: invalidate every item, now (`delay` 0 or
    /// negative) or from `realtime(delay) - 1` on. The delay is the raw
    /// client number, not mapped like an exptime. None: the argument is
    /// not a number (answered only after the -F check, as memcached does).
    FlushAll {
        /// The client's delay argument, if it is a number.
        delay: Option<i64>,
    },
    /// Reply with the version.
    Version,
    /// Answer and keep the connection (mn, binary NOOP).
    Noop,
    /// Close the connection after the replies already queued (binary QUIT
    /// answers first unless quiet).
    Quit,
    /// `verbosity <level>`: set the server's verbosity.
    Verbosity {
        /// The new level.
        level: u32,
    },
    /// `shutdown [graceful]`; an invalid mode is answered only after the
    /// -A check, as memcached does.
    Shutdown {
        /// Now, graceful, or not a mode.
        mode: ShutdownMode,
    },
    /// `stats [group [args]]` (text) or STAT with a group (binary): the
    /// executor interprets the tokens; `group` is token 1 (text) or the
    /// whole binary key.
    Stats {
        /// The group, if any.
        group: Option<&'a [u8]>,
        /// The whole line's tokens (none for binary STAT).
        tokens: Tokens<'a>,
    },
    /// `cache_memlimit <megabytes>`: 8 to 1_000_000_000 (the text parser
    /// answers other values itself, as memcached does before it touches
    /// the limit).
    CacheMemlimit {
        /// The new limit, in megabytes.
        megabytes: u32,
    },
    /// `lru_crawler <subcommand> [arg]` (metadump, mgdump, crawl, ...).
    LruCrawler {
        /// The whole line's tokens.
        tokens: Tokens<'a>,
    },
    /// Other administrative text commands the executor answers by name
    /// (`slabs`, `lru`, `extstore`, `watch`, `refresh_certs`): their
    /// tokens.
    Admin {
        /// The whole line's tokens.
        tokens: Tokens<'a>,
    },
    /// Binary SASL LIST MECHS.
    SaslListMechs,
    /// Binary SASL AUTH (`step` false) or STEP: the mechanism is the key,
    /// the client's data (`value_len` bytes) follows.
    SaslAuth {
        /// SASL STEP (true) or SASL AUTH (false).
        step: bool,
        /// The mechanism name.
        mechanism: &'a [u8],
        /// Bytes of the client's data that follow.
        value_len: usize,
    },
    /// An error found while parsing, answered with this line (text and
    /// meta: without `\r\n`); then `discard` bytes of data block (and its
    /// terminator) that belonged to the refused command are swallowed.
    Error {
        /// The error line.
        message: &'static str,
        /// Bytes to swallow after the line.
        discard: usize,
    },
    /// Close the connection at once, without a reply (memcached's answer
    /// to an HTTP request line).
    Close,
}

/// `shutdown`'s argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`: stop now.
    Immediate,
    /// `shutdown graceful`: stop once the workers are done, as SIGUSR1 does.
    Graceful,
    /// Anything else: "CLIENT_ERROR invalid shutdown mode".
    Invalid,
}

/// A storage command (set/add/replace/append/prepend/cas, their binary
/// opcodes, ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store<'a> {
    /// The effective mode: ms with `C` in set/replace mode is `Cas`, a
    /// binary SET/ADD/REPLACE with a non-zero header CAS is `Cas`.
    pub mode: StoreMode,
    /// The key.
    pub key: &'a [u8],
    /// Client flags.
    pub flags: u32,
    /// Expiry argument (see the module comment); for ms in append/prepend
    /// mode with `N`, the vivify exptime.
    pub exptime: i64,
    /// Length of the value that follows, without a terminator.
    pub value_len: usize,
    /// The CAS unique to compare (cas, binary header CAS, ms `C`); 0 = none.
    pub cas: u64,
    /// ms `E`: the new item's CAS unique.
    pub new_cas: Option<u64>,
    /// ms `I` with `C`: a CAS older than the item's still stores, marked
    /// stale.
    pub stale_if_older: bool,
    /// ms `b`: the key is binary (sent in base64).
    pub binary_key: bool,
    /// ms `N` in append/prepend mode: a miss creates the item with this
    /// expiry argument.
    pub create_exptime: Option<i64>,
}

/// text delete, binary DELETE, md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Delete<'a> {
    /// The key.
    pub key: &'a [u8],
    /// Only if the item's CAS unique is this (md `C`, binary header CAS).
    pub if_cas: Option<u64>,
    /// md `I`: mark the item stale instead of removing it.
    pub mark_stale: bool,
    /// md `T` (with `I`): its new expiry argument.
    pub exptime: Option<i64>,
    /// md `x`: keep the item, empty its value, client flags set to `flags`.
    pub drop_value: bool,
    /// md `x`: the kept item's client flags (md `F`).
    pub flags: u32,
    /// md `E`: the CAS unique to give the kept item.
    pub new_cas: Option<u64>,
    /// md `b`.
    pub binary_key: bool,
}

/// text incr/decr, binary INCREMENT/DECREMENT, ma.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arith<'a> {
    /// The key.
    pub key: &'a [u8],
    /// incr (true) or decr (false).
    pub incr: bool,
    /// The amount added or subtracted.
    pub delta: u64,
    /// Create a missing counter holding this initial value with this expiry
    /// argument (ma `N`/`J`, binary unless exptime is 0xffffffff).
    pub create: Option<(u64, i64)>,
    /// Only if the item's CAS unique is this (ma `C`, binary header CAS);
    /// 0 = no check.
    pub if_cas: u64,
    /// ma `E`.
    pub new_cas: Option<u64>,
    /// ma `T`: new expiry argument.
    pub exptime: Option<i64>,
    /// ma `b`.
    pub binary_key: bool,
}

/// mg.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetaGet<'a> {
    /// The key.
    pub key: &'a [u8],
    /// `v`: return the value.
    pub value: bool,
    /// Not `u`: record the hit (access time, fetched bit, eviction
    /// frequency).
    pub record_hit: bool,
    /// `T`: new expiry argument.
    pub ttl: Option<i64>,
    /// `N`: on a miss, create an empty item with this expiry argument.
    pub vivify: Option<i64>,
    /// `R`: win the recache token if the remaining TTL is below this
    /// expiry argument.
    pub recache: Option<i64>,
    /// `C`: with `v`, the value is sent only if the CAS unique differs.
    pub if_cas: Option<u64>,
    /// `E`: the CAS unique of an item `N` creates.
    pub new_cas: Option<u64>,
    /// `b`.
    pub binary_key: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_list_and_of_one() {
        let list: Vec<&[u8]> = Keys::list(b"  a bb\0c  d ").collect();
        assert_eq!(list, [&b"a"[..], b"bb\0c", b"d"]);
        let one: Vec<&[u8]> = Keys::one(b"a b").collect();
        assert_eq!(one, [&b"a b"[..]]);
        assert_eq!(Keys::one(b"").count(), 0);
        assert_eq!(Keys::list(b"   ").count(), 0);
    }

    #[test]
    fn tokens_trim_trailing_spaces() {
        let line = b"mg  key  v\r\n";
        let mut starts = [0u16; MAX_TOKENS + 1];
        starts[..4].copy_from_slice(&[0, 4, 9, 10]);
        let t = Tokens::from_offsets(line, starts, 3);
        assert_eq!(t.get(0), b"mg");
        assert_eq!(t.get(1), b"key");
        assert_eq!(t.get(2), b"v");
        assert_eq!(t.get(3), b"");
        assert_eq!(t.count(), 3);
    }

    #[test]
    fn negative_exptimes_are_long_past() {
        assert_eq!(exptime_to_positive(-1), REALTIME_MAXDELTA + 1);
        assert_eq!(exptime_to_positive(0), 0);
        assert_eq!(exptime_to_positive(7), 7);
    }
}
