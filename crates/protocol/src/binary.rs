//! memcached's binary protocol (protocol-binary.txt) as pure functions:
//! request framing, memcached 1.6's per-opcode validation
//! (`dispatch_bin_command` in proto_bin.c) and response encoding into a
//! caller-owned buffer. No I/O and no allocation.
//!
//! Every packet starts with a 24-byte header, all integers big-endian:
//!
//! ```text
//!   byte     0         1         2         3
//!        +---------+---------+---------+---------+
//!     0  | magic   | opcode  |    key length     |
//!        +---------+---------+---------+---------+
//!     4  | extras  | data    | vbucket (request) |
//!        | length  | type    | status (response) |
//!        +---------+---------+---------+---------+
//!     8  |        total body length              |
//!        +---------+---------+---------+---------+
//!    12  |        opaque (echoed unchanged)      |
//!        +---------+---------+---------+---------+
//!    16  |        CAS                            |
//!    20  |                                       |
//!        +---------+---------+---------+---------+
//!    24  extras, then key, then value: body length = extras + key + value
//! ```
//!
//! Requests carry magic 0x80, responses 0x81. How a request is consumed
//! follows memcached exactly, quirks included: the header, extras and key
//! must be buffered before anything is decided ([`scan_request`]); what is
//! left of the body is then read as the value, swallowed, or (for opcodes
//! that take no value, like STAT) parsed as the next request.

use crate::request::{StoreMode, KEY_MAX_LENGTH};

/// Length of a request or response header.
pub const HEADER_LEN: usize = 24;
/// First byte of every request.
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of every response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Longest SASL mechanism name memcached accepts (MAX_SASL_MECH_LEN).
pub const SASL_MECHANISM_MAX_LENGTH: usize = 32;
/// INCR/DECR expiration meaning "do not create a missing counter".
pub const ARITH_DO_NOT_CREATE: u32 = 0xffff_ffff;

/// Command opcodes (protocol-binary.txt, "Command Opcodes").
pub mod opcode {
    /// Get: a key's flags and value.
    pub const GET: u8 = 0x00;
    /// Set: store a value, whatever the key holds.
    pub const SET: u8 = 0x01;
    /// Add: store only if the key holds nothing.
    pub const ADD: u8 = 0x02;
    /// Replace: store only if the key holds an item.
    pub const REPLACE: u8 = 0x03;
    /// Delete a key.
    pub const DELETE: u8 = 0x04;
    /// Increment a 64-bit counter (created from the initial value if missing).
    pub const INCREMENT: u8 = 0x05;
    /// Decrement a 64-bit counter, stopping at 0.
    pub const DECREMENT: u8 = 0x06;
    /// Quit: answer, then close the connection.
    pub const QUIT: u8 = 0x07;
    /// Flush: invalidate every item, now or after a delay.
    pub const FLUSH: u8 = 0x08;
    /// GET, quiet: a miss sends nothing.
    pub const GETQ: u8 = 0x09;
    /// No-op: answered at once (ends a run of quiet requests).
    pub const NOOP: u8 = 0x0a;
    /// The server's version string.
    pub const VERSION: u8 = 0x0b;
    /// GET whose response carries the key.
    pub const GETK: u8 = 0x0c;
    /// GETK, quiet: a miss sends nothing.
    pub const GETKQ: u8 = 0x0d;
    /// Append: add bytes after an item's value.
    pub const APPEND: u8 = 0x0e;
    /// Prepend: add bytes before an item's value.
    pub const PREPEND: u8 = 0x0f;
    /// Stat: one packet per statistic, then an empty one.
    pub const STAT: u8 = 0x10;
    /// SET, quiet: success sends nothing.
    pub const SETQ: u8 = 0x11;
    /// ADD, quiet: success sends nothing.
    pub const ADDQ: u8 = 0x12;
    /// REPLACE, quiet: success sends nothing.
    pub const REPLACEQ: u8 = 0x13;
    /// DELETE, quiet: success sends nothing.
    pub const DELETEQ: u8 = 0x14;
    /// INCREMENT, quiet: success sends nothing.
    pub const INCREMENTQ: u8 = 0x15;
    /// DECREMENT, quiet: success sends nothing.
    pub const DECREMENTQ: u8 = 0x16;
    /// QUIT without an answer: the connection just closes.
    pub const QUITQ: u8 = 0x17;
    /// FLUSH, quiet: success sends nothing.
    pub const FLUSHQ: u8 = 0x18;
    /// APPEND, quiet: success sends nothing.
    pub const APPENDQ: u8 = 0x19;
    /// PREPEND, quiet: success sends nothing.
    pub const PREPENDQ: u8 = 0x1a;
    /// Defined by the protocol, not implemented by memcached 1.6 (answered
    /// "Unknown command").
    pub const VERBOSITY: u8 = 0x1b;
    /// Touch: set a key's expiry; a hit answers its flags.
    pub const TOUCH: u8 = 0x1c;
    /// Get and touch: GET that also sets the expiry.
    pub const GAT: u8 = 0x1d;
    /// GAT, quiet: a miss sends nothing.
    pub const GATQ: u8 = 0x1e;
    /// The SASL mechanisms the server offers.
    pub const SASL_LIST_MECHS: u8 = 0x20;
    /// SASL: start an authentication with a mechanism.
    pub const SASL_AUTH: u8 = 0x21;
    /// SASL: the next step of an authentication.
    pub const SASL_STEP: u8 = 0x22;
    /// GAT whose response carries the key.
    pub const GATK: u8 = 0x23;
    /// GATK, quiet: a miss sends nothing.
    pub const GATKQ: u8 = 0x24;
}

/// Response status codes (protocol-binary.txt, "Response Status").
pub mod status {
    /// Success.
    pub const NO_ERROR: u16 = 0x0000;
    /// No item under the key.
    pub const KEY_NOT_FOUND: u16 = 0x0001;
    /// The key holds an item (ADD), or a CAS that does not match.
    pub const KEY_EXISTS: u16 = 0x0002;
    /// The value is over the item size limit.
    pub const VALUE_TOO_LARGE: u16 = 0x0003;
    /// Lengths or arguments wrong for the opcode.
    pub const INVALID_ARGUMENTS: u16 = 0x0004;
    /// Not stored (an APPEND or PREPEND to a missing key, among others).
    pub const ITEM_NOT_STORED: u16 = 0x0005;
    /// INCREMENT or DECREMENT of a value that is not a number.
    pub const NON_NUMERIC_VALUE: u16 = 0x0006;
    /// Authentication failed or is required first (also a FLUSH refused by -F).
    pub const AUTH_ERROR: u16 = 0x0020;
    /// Authentication goes on: send the next SASL step.
    pub const AUTH_CONTINUE: u16 = 0x0021;
    /// An opcode the server does not implement.
    pub const UNKNOWN_COMMAND: u16 = 0x0081;
    /// No memory for the item.
    pub const OUT_OF_MEMORY: u16 = 0x0082;
}

/// The error text memcached sends with a status (`write_bin_error`).
pub fn status_message(code: u16) -> &'static str {
    match code {
        status::OUT_OF_MEMORY => "Out of memory",
        status::UNKNOWN_COMMAND => "Unknown command",
        status::KEY_NOT_FOUND => "Not found",
        status::INVALID_ARGUMENTS => "Invalid arguments",
        status::KEY_EXISTS => "Data exists for key.",
        status::VALUE_TOO_LARGE => "Too large.",
        status::NON_NUMERIC_VALUE => "Non-numeric server-side value for incr or decr",
        status::ITEM_NOT_STORED => "Not stored.",
        status::AUTH_ERROR => "Auth failure.",
        _ => "UNHANDLED ERROR",
    }
}

/// A request header, integers in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// REQUEST_MAGIC (or RESPONSE_MAGIC in a response).
    pub magic: u8,
    /// The command ([`opcode`]).
    pub opcode: u8,
    /// Length of the key, after the extras.
    pub key_len: u16,
    /// Length of the extras, first in the body.
    pub extras_len: u8,
    /// Data type (0: raw bytes).
    pub data_type: u8,
    /// The vbucket of a request; the status of a response.
    pub vbucket: u16,
    /// Extras, key and value together.
    pub body_len: u32,
    /// Copied unchanged into the response.
    pub opaque: u32,
    /// CAS unique: a compare-and-swap's expected value, or 0.
    pub cas: u64,
}

impl RequestHeader {
    /// Reads the first 24 bytes of `buf` (None if fewer are there).
    pub fn parse(buf: &[u8]) -> Option<RequestHeader> {
        let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
        Some(RequestHeader {
            magic: h[0],
            opcode: h[1],
            key_len: u16::from_be_bytes([h[2], h[3]]),
            extras_len: h[4],
            data_type: h[5],
            vbucket: u16::from_be_bytes([h[6], h[7]]),
            body_len: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
        })
    }

    /// Appends the header in wire order (what a client sends).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.vbucket.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }

    /// Header, extras and key: what must be buffered before dispatch.
    #[inline]
    pub fn prefix_len(&self) -> usize {
        HEADER_LEN + usize::from(self.extras_len) + usize::from(self.key_len)
    }

    /// The whole packet (header and body).
    #[inline]
    pub fn packet_len(&self) -> usize {
        HEADER_LEN + self.body_len as usize
    }

    /// Body bytes after extras and key (0 if the lengths are inconsistent).
    #[inline]
    pub fn value_len(&self) -> u32 {
        self.body_len
            .saturating_sub(u32::from(self.extras_len) + u32::from(self.key_len))
    }
}

/// What the front of the read buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// Wait until `need` bytes are buffered (the header, then the header,
    /// extras and key).
    Incomplete {
        /// The bytes the buffer must hold before the next scan.
        need: usize,
    },
    /// The first byte is not a request magic: memcached closes the
    /// connection (checked only once 24 bytes are in).
    BadMagic(u8),
    /// The header, extras and key are buffered.
    Ready(RequestHeader),
}

/// memcached's `try_read_command_binary`: frames the next request.
pub fn scan_request(buf: &[u8]) -> Scan {
    let Some(h) = RequestHeader::parse(buf) else {
        return Scan::Incomplete { need: HEADER_LEN };
    };
    if h.magic != REQUEST_MAGIC {
        return Scan::BadMagic(h.magic);
    }
    if buf.len() < h.prefix_len() {
        return Scan::Incomplete {
            need: h.prefix_len(),
        };
    }
    Scan::Ready(h)
}

/// A request that passed memcached's validation. Key and extras point into
/// the read buffer; a value (`value_len` bytes) follows the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// GET, GETQ, GETK, GETKQ.
    Get {
        /// The key.
        key: &'a [u8],
        /// GETQ/GETKQ: a miss sends nothing.
        quiet: bool,
        /// GETK/GETKQ: the response carries the key.
        with_key: bool,
    },
    /// TOUCH: a hit answers the flags, no value.
    Touch {
        /// The key.
        key: &'a [u8],
        /// The new expiry (memcached's exptime rules).
        exptime: u32,
    },
    /// GAT, GATQ, GATK, GATKQ.
    GetAndTouch {
        /// The key.
        key: &'a [u8],
        /// The new expiry (memcached's exptime rules).
        exptime: u32,
        /// GATQ/GATKQ: a miss sends nothing.
        quiet: bool,
        /// GATK/GATKQ: the response carries the key.
        with_key: bool,
    },
    /// SET, ADD, REPLACE and their quiet forms (`mode` is Set, Add or
    /// Replace; a non-zero header CAS makes it a compare-and-swap).
    Store {
        /// Set, Add or Replace.
        mode: StoreMode,
        /// The key.
        key: &'a [u8],
        /// The client's flags, stored with the value.
        flags: u32,
        /// The expiry (memcached's exptime rules).
        exptime: u32,
        /// Bytes of value after the key.
        value_len: u32,
        /// The quiet form: success sends nothing.
        quiet: bool,
    },
    /// APPEND, PREPEND and their quiet forms (`mode` is Append or Prepend).
    Concat {
        /// Append or Prepend.
        mode: StoreMode,
        /// The key.
        key: &'a [u8],
        /// Bytes of value after the key.
        value_len: u32,
        /// The quiet form: success sends nothing.
        quiet: bool,
    },
    /// DELETE, DELETEQ.
    Delete {
        /// The key.
        key: &'a [u8],
        /// DELETEQ: success sends nothing.
        quiet: bool,
    },
    /// INCREMENT, DECREMENT and their quiet forms.
    Arith {
        /// INCREMENT (true) or DECREMENT (false).
        incr: bool,
        /// The key.
        key: &'a [u8],
        /// The amount added or subtracted.
        delta: u64,
        /// The value of a counter created for a missing key.
        initial: u64,
        /// The expiry of a created counter; [`ARITH_DO_NOT_CREATE`] creates
        /// none.
        exptime: u32,
        /// The quiet form: success sends nothing.
        quiet: bool,
    },
    /// QUIT, QUITQ.
    Quit {
        /// QUITQ: close without an answer.
        quiet: bool,
    },
    /// FLUSH, FLUSHQ; `delay` 0 means now.
    Flush {
        /// When the flush takes effect, as flush_all's argument (0: now).
        delay: u32,
        /// FLUSHQ: success sends nothing.
        quiet: bool,
    },
    /// NOOP.
    Noop,
    /// VERSION.
    Version,
    /// STAT with an optional group name in the key. Body bytes past the key
    /// are not part of the request (memcached parses them as the next one).
    Stat {
        /// The group (`settings`, `slabs`, ...); empty for the general stats.
        group: &'a [u8],
    },
    /// SASL LIST MECHS.
    SaslListMechs,
    /// SASL AUTH (`step` false) or SASL STEP: mechanism in the key, the
    /// client's data as the value.
    Sasl {
        /// SASL STEP (true) or SASL AUTH (false).
        step: bool,
        /// The mechanism name (the packet's key).
        mechanism: &'a [u8],
        /// Bytes of the client's data after the key.
        value_len: u32,
    },
}

/// Outcome of [`decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A valid request.
    Request(Request<'a>),
    /// Key and extras longer than the body: "Unknown command", then close.
    BadBodyLength,
    /// Key over 250 bytes, or extras/key/body lengths wrong for the opcode:
    /// "Invalid arguments", then close.
    InvalidArguments,
    /// An opcode memcached does not implement: "Unknown command", and
    /// `body_len` bytes *after* the extras and key are swallowed (memcached's
    /// own arithmetic, kept for compatibility).
    UnknownCommand,
}

/// Opcodes answered before SASL authentication (memcached's
/// `authenticated()`); everything else gets "Auth failure." and a close.
pub fn allowed_unauthenticated(op: u8) -> bool {
    matches!(
        op,
        opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP | opcode::VERSION
    )
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// memcached's `dispatch_bin_command` validation, given the header and the
/// buffered extras and key. The server checks SASL authentication between
/// [`Decoded::BadBodyLength`] and everything else, as memcached does.
pub fn decode<'a>(h: &RequestHeader, extras: &'a [u8], key: &'a [u8]) -> Decoded<'a> {
    use opcode::*;
    let extlen = u32::from(h.extras_len);
    let keylen = u32::from(h.key_len);
    let bodylen = h.body_len;
    if keylen > bodylen || keylen + extlen > bodylen {
        return Decoded::BadBodyLength;
    }
    if key.len() > KEY_MAX_LENGTH || extras.len() != extlen as usize || key.len() != keylen as usize
    {
        return Decoded::InvalidArguments;
    }
    let quiet = matches!(
        h.opcode,
        SETQ | ADDQ
            | REPLACEQ
            | DELETEQ
            | INCREMENTQ
            | DECREMENTQ
            | QUITQ
            | FLUSHQ
            | APPENDQ
            | PREPENDQ
            | GETQ
            | GETKQ
            | GATQ
            | GATKQ
    );
    let value_len = bodylen - keylen - extlen;
    let valid = |ok: bool, r: Request<'a>| {
        if ok {
            Decoded::Request(r)
        } else {
            Decoded::InvalidArguments
        }
    };
    match h.opcode {
        VERSION => valid(extlen == 0 && keylen == 0 && bodylen == 0, Request::Version),
        FLUSH | FLUSHQ => valid(
            keylen == 0 && bodylen == extlen && (extlen == 0 || extlen == 4),
            Request::Flush {
                delay: if extlen == 4 { be32(extras) } else { 0 },
                quiet,
            },
        ),
        NOOP => valid(extlen == 0 && keylen == 0 && bodylen == 0, Request::Noop),
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => {
            if extlen != 8 || keylen == 0 {
                return Decoded::InvalidArguments;
            }
            let mode = match h.opcode {
                SET | SETQ => StoreMode::Set,
                ADD | ADDQ => StoreMode::Add,
                _ => StoreMode::Replace,
            };
            Decoded::Request(Request::Store {
                mode,
                key,
                flags: be32(&extras[0..4]),
                exptime: be32(&extras[4..8]),
                value_len,
                quiet,
            })
        }
        GET | GETQ | GETK | GETKQ => valid(
            extlen == 0 && bodylen == keylen && keylen > 0,
            Request::Get {
                key,
                quiet,
                with_key: matches!(h.opcode, GETK | GETKQ),
            },
        ),
        DELETE | DELETEQ => valid(
            keylen > 0 && extlen == 0 && bodylen == keylen,
            Request::Delete { key, quiet },
        ),
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
            if keylen == 0 || extlen != 20 || bodylen != keylen + extlen {
                return Decoded::InvalidArguments;
            }
            Decoded::Request(Request::Arith {
                incr: matches!(h.opcode, INCREMENT | INCREMENTQ),
                key,
                delta: be64(&extras[0..8]),
                initial: be64(&extras[8..16]),
                exptime: be32(&extras[16..20]),
                quiet,
            })
        }
        APPEND | APPENDQ | PREPEND | PREPENDQ => valid(
            keylen > 0 && extlen == 0,
            Request::Concat {
                mode: if matches!(h.opcode, APPEND | APPENDQ) {
                    StoreMode::Append
                } else {
                    StoreMode::Prepend
                },
                key,
                value_len,
                quiet,
            },
        ),
        STAT => valid(extlen == 0, Request::Stat { group: key }),
        QUIT | QUITQ => valid(
            keylen == 0 && extlen == 0 && bodylen == 0,
            Request::Quit { quiet },
        ),
        SASL_LIST_MECHS => valid(
            extlen == 0 && keylen == 0 && bodylen == 0,
            Request::SaslListMechs,
        ),
        SASL_AUTH | SASL_STEP => valid(
            extlen == 0 && keylen != 0,
            Request::Sasl {
                step: h.opcode == SASL_STEP,
                mechanism: key,
                value_len,
            },
        ),
        TOUCH => valid(
            extlen == 4 && keylen != 0,
            Request::Touch {
                key,
                exptime: if extlen == 4 { be32(extras) } else { 0 },
            },
        ),
        GAT | GATQ | GATK | GATKQ => valid(
            extlen == 4 && keylen != 0,
            Request::GetAndTouch {
                key,
                exptime: if extlen == 4 { be32(extras) } else { 0 },
                quiet,
                with_key: matches!(h.opcode, GATK | GATKQ),
            },
        ),
        _ => Decoded::UnknownCommand,
    }
}

/// A decoded request as a protocol-neutral request (see
/// `crate::request`). `use_cas` is false with -C, where memcached ignores
/// the header's CAS of storage commands.
pub fn to_request<'a>(
    h: &RequestHeader,
    r: Request<'a>,
    use_cas: bool,
) -> crate::request::Request<'a> {
    use crate::request::{
        Arith, BinaryReply, Command, Delete, Keys, Reply, Request as Neutral, Store,
        StoreMode as Mode,
    };
    let reply = |quiet: bool, with_key: bool| {
        Reply::Binary(BinaryReply {
            opcode: h.opcode,
            opaque: h.opaque,
            quiet,
            with_key,
        })
    };
    let mode = |m: StoreMode| m;
    let cas = if use_cas { h.cas } else { 0 };
    let (command, reply) = match r {
        Request::Get {
            key,
            quiet,
            with_key,
        } => (
            Command::Get {
                keys: Keys::one(key),
                touch: None,
                with_cas: true,
            },
            reply(quiet, with_key),
        ),
        Request::Touch { key, exptime } => (
            Command::Touch {
                key,
                exptime: i64::from(exptime),
            },
            reply(false, false),
        ),
        Request::GetAndTouch {
            key,
            exptime,
            quiet,
            with_key,
        } => (
            Command::Get {
                keys: Keys::one(key),
                touch: Some(i64::from(exptime)),
                with_cas: true,
            },
            reply(quiet, with_key),
        ),
        Request::Store {
            mode: m,
            key,
            flags,
            exptime,
            value_len,
            quiet,
        } => (
            Command::Store(Store {
                // A non-zero CAS makes any storage opcode a compare-and-swap.
                mode: if cas != 0 { Mode::Cas } else { mode(m) },
                key,
                flags,
                exptime: i64::from(exptime),
                value_len: value_len as usize,
                cas,
                new_cas: None,
                stale_if_older: false,
                binary_key: false,
                create_exptime: None,
            }),
            reply(quiet, false),
        ),
        Request::Concat {
            mode: m,
            key,
            value_len,
            quiet,
        } => (
            Command::Store(Store {
                mode: mode(m),
                key,
                flags: 0,
                exptime: 0,
                value_len: value_len as usize,
                cas,
                new_cas: None,
                stale_if_older: false,
                binary_key: false,
                create_exptime: None,
            }),
            reply(quiet, false),
        ),
        Request::Delete { key, quiet } => (
            Command::Delete(Delete {
                key,
                if_cas: (h.cas != 0).then_some(h.cas),
                ..Delete::default()
            }),
            reply(quiet, false),
        ),
        Request::Arith {
            incr,
            key,
            delta,
            initial,
            exptime,
            quiet,
        } => (
            Command::Arith(Arith {
                key,
                incr,
                delta,
                create: (exptime != ARITH_DO_NOT_CREATE).then_some((initial, i64::from(exptime))),
                if_cas: h.cas,
                new_cas: None,
                exptime: None,
                binary_key: false,
            }),
            reply(quiet, false),
        ),
        Request::Quit { quiet } => (Command::Quit, reply(quiet, false)),
        Request::Flush { delay, quiet } => (
            Command::FlushAll {
                delay: Some(i64::from(delay)),
            },
            reply(quiet, false),
        ),
        Request::Noop => (Command::Noop, reply(false, false)),
        Request::Version => (Command::Version, reply(false, false)),
        Request::Stat { group } => (
            Command::Stats {
                group: Some(group),
                tokens: crate::request::Tokens::empty(),
            },
            reply(false, false),
        ),
        Request::SaslListMechs => (Command::SaslListMechs, reply(false, false)),
        Request::Sasl {
            step,
            mechanism,
            value_len,
        } => (
            Command::SaslAuth {
                step,
                mechanism,
                value_len: value_len as usize,
            },
            reply(false, false),
        ),
    };
    Neutral { command, reply }
}

/// Appends a response header. `data_type` is always raw bytes (0).
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn put_response_header(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    key_len: u16,
    extras_len: u8,
    body_len: u32,
    opaque: u32,
    cas: u64,
) {
    let mut h = [0u8; HEADER_LEN];
    h[0] = RESPONSE_MAGIC;
    h[1] = opcode;
    h[2..4].copy_from_slice(&key_len.to_be_bytes());
    h[4] = extras_len;
    h[6..8].copy_from_slice(&status.to_be_bytes());
    h[8..12].copy_from_slice(&body_len.to_be_bytes());
    h[12..16].copy_from_slice(&opaque.to_be_bytes());
    h[16..24].copy_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(&h);
}

/// Appends a success response with `body` as its value (no extras, no key).
#[inline]
pub fn put_response(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64, body: &[u8]) {
    put_response_with_status(out, opcode, status::NO_ERROR, opaque, cas, body);
}

/// Appends a response with a status and a value (no extras, no key).
#[inline]
pub fn put_response_with_status(
    out: &mut Vec<u8>,
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    body: &[u8],
) {
    put_response_header(out, opcode, status, 0, 0, body.len() as u32, opaque, cas);
    out.extend_from_slice(body);
}

/// Appends an error response with memcached's text for `status`.
#[inline]
pub fn put_error(out: &mut Vec<u8>, opcode: u8, status: u16, opaque: u32) {
    put_response_with_status(
        out,
        opcode,
        status,
        opaque,
        0,
        status_message(status).as_bytes(),
    );
}

/// Appends a GET-family hit: 4 bytes of flags as extras, the key if asked,
/// then the value.
#[inline]
pub fn put_hit(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    flags: u32,
    key: Option<&[u8]>,
    value: &[u8],
) {
    put_hit_head(out, opcode, opaque, cas, flags, key, value.len());
    out.extend_from_slice(value);
}

/// Appends a hit's response up to its value (header, flags, key), for a
/// caller that sends the `value_len` bytes of value itself.
#[inline]
pub fn put_hit_head(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    flags: u32,
    key: Option<&[u8]>,
    value_len: usize,
) {
    let key = key.unwrap_or(&[]);
    let body = 4 + key.len() + value_len;
    put_response_header(
        out,
        opcode,
        status::NO_ERROR,
        key.len() as u16,
        4,
        body as u32,
        opaque,
        cas,
    );
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(key);
}

/// Appends a GETK/GATK miss: status "not found" carrying the key, no text.
#[inline]
pub fn put_keyed_miss(out: &mut Vec<u8>, opcode: u8, opaque: u32, key: &[u8]) {
    let n = key.len();
    put_response_header(
        out,
        opcode,
        status::KEY_NOT_FOUND,
        n as u16,
        0,
        n as u32,
        opaque,
        0,
    );
    out.extend_from_slice(key);
}

/// Appends one STAT packet (an empty key and value end a STAT reply).
#[inline]
pub fn put_stat(out: &mut Vec<u8>, opaque: u32, key: &[u8], value: &[u8]) {
    put_response_header(
        out,
        opcode::STAT,
        status::NO_ERROR,
        key.len() as u16,
        0,
        (key.len() + value.len()) as u32,
        opaque,
        0,
    );
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// A parsed response (for tests and clients; the server only encodes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response<'a> {
    /// The opcode of the request answered.
    pub opcode: u8,
    /// The status ([`status`]).
    pub status: u16,
    /// The request's opaque, echoed.
    pub opaque: u32,
    /// The item's CAS unique, or 0.
    pub cas: u64,
    /// The extras (the flags of a GET hit).
    pub extras: &'a [u8],
    /// The key (GETK, GATK, STAT).
    pub key: &'a [u8],
    /// The value, or an error's text.
    pub value: &'a [u8],
}

/// Parses one response from the front of `buf`: the response and its
/// length, or None if it is incomplete or not a response.
pub fn parse_response(buf: &[u8]) -> Option<(Response<'_>, usize)> {
    let h = RequestHeader::parse(buf)?;
    if h.magic != RESPONSE_MAGIC {
        return None;
    }
    let total = h.packet_len();
    let body = buf.get(HEADER_LEN..total)?;
    let (extras, rest) = body.split_at_checked(usize::from(h.extras_len))?;
    let (key, value) = rest.split_at_checked(usize::from(h.key_len))?;
    Some((
        Response {
            opcode: h.opcode,
            status: h.vbucket,
            opaque: h.opaque,
            cas: h.cas,
            extras,
            key,
            value,
        },
        total,
    ))
}

#[cfg(test)]
mod tests;
