//! Request encoding: text, meta and binary requests written into a
//! caller-owned `Vec<u8>` (nothing allocated once it has grown to its
//! working size). What a memcached client sends: the proxy's own requests
//! (probes, multi-get parts), replication's `ms`/`md` stream, the bench's
//! loads. Every request written here frames back whole with
//! [`super::frame::frame`] (the property tests check it).

use crate::base64::base64_encode;
use crate::binary::{HEADER_LEN, REQUEST_MAGIC};

fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A command line of `tokens` joined by single spaces, ended by `\r\n`
/// (`mn`, `stats`, `version`, `flush_all 0`, `stats detail on`...).
pub fn line(out: &mut Vec<u8>, tokens: &[&[u8]]) {
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(t);
    }
    out.extend_from_slice(b"\r\n");
}

/// `<cmd> <key> <key>...\r\n`, `cmd` being `get`, `gets`, `gat <t>` or
/// `gats <t>`.
pub fn get<K: AsRef<[u8]>>(out: &mut Vec<u8>, cmd: &[u8], keys: impl IntoIterator<Item = K>) {
    out.extend_from_slice(cmd);
    for k in keys {
        out.push(b' ');
        out.extend_from_slice(k.as_ref());
    }
    out.extend_from_slice(b"\r\n");
}

/// A storage command: `<cmd> <key> <flags> <exptime> <bytes>[ <cas>][
/// noreply]\r\n<data>\r\n`, `cmd` being `set`, `add`, `replace`,
/// `append`, `prepend` or `cas` (which takes `cas`).
#[allow(clippy::too_many_arguments)]
pub fn storage(
    out: &mut Vec<u8>,
    cmd: &[u8],
    key: &[u8],
    flags: u32,
    exptime: i64,
    data: &[u8],
    cas: Option<u64>,
    noreply: bool,
) {
    storage_line(out, cmd, key, flags, exptime, data.len(), cas, noreply);
    out.extend_from_slice(data);
    block_end(out);
}

/// A storage command's line alone, for a caller that writes its `bytes`
/// of data itself and then [`block_end`].
#[allow(clippy::too_many_arguments)]
pub fn storage_line(
    out: &mut Vec<u8>,
    cmd: &[u8],
    key: &[u8],
    flags: u32,
    exptime: i64,
    bytes: usize,
    cas: Option<u64>,
    noreply: bool,
) {
    out.extend_from_slice(cmd);
    out.push(b' ');
    out.extend_from_slice(key);
    out.push(b' ');
    number(out, flags);
    out.push(b' ');
    number(out, exptime);
    out.push(b' ');
    number(out, bytes);
    if let Some(cas) = cas {
        out.push(b' ');
        number(out, cas);
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

/// The end of a data block (after the data a storage line or an `ms`
/// announced).
#[inline]
pub fn block_end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

/// `set <key> <flags> <exptime> <bytes>\r\n<data>\r\n`.
#[inline]
pub fn set(out: &mut Vec<u8>, key: &[u8], flags: u32, exptime: i64, data: &[u8], noreply: bool) {
    storage(out, b"set", key, flags, exptime, data, None, noreply);
}

/// `set <key> 0 0 <bytes>[ noreply]\r\n` alone: the caller appends the
/// data and [`block_end`].
#[inline]
pub fn set_line(out: &mut Vec<u8>, key: &[u8], bytes: usize, noreply: bool) {
    storage_line(out, b"set", key, 0, 0, bytes, None, noreply);
}

/// A key command with an optional number: `delete <key>`, `incr <key>
/// <n>`, `decr <key> <n>`, `touch <key> <exptime>`, then ` noreply` if
/// asked.
pub fn keyed(out: &mut Vec<u8>, cmd: &[u8], key: &[u8], arg: Option<i64>, noreply: bool) {
    out.extend_from_slice(cmd);
    out.push(b' ');
    out.extend_from_slice(key);
    if let Some(n) = arg {
        out.push(b' ');
        number(out, n);
    }
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

/// Whether a key must go base64-encoded in a meta command (flag `b`): it
/// holds a byte a text line cannot carry in a key.
pub fn needs_base64(key: &[u8]) -> bool {
    key.iter().any(|&b| b <= b' ' || b == 0x7f)
}

/// A meta command being written: `meta(out, b"mg", key, None,
/// false).flag(b'v').num(b'N', 30).end()`. The key goes base64-encoded
/// (with the `b` flag) when asked or when a text line cannot carry it.
#[must_use = "a meta request ends with end() or data()"]
pub struct Meta<'o> {
    out: &'o mut Vec<u8>,
}

/// Starts a meta command: `<cmd> <key>[ <data_len>][ b]` (`data_len` for
/// `ms`).
pub fn meta<'o>(
    out: &'o mut Vec<u8>,
    cmd: &[u8],
    key: &[u8],
    data_len: Option<usize>,
    base64: bool,
) -> Meta<'o> {
    out.extend_from_slice(cmd);
    out.push(b' ');
    let base64 = base64 || needs_base64(key);
    if base64 {
        base64_encode(key, out);
    } else {
        out.extend_from_slice(key);
    }
    if let Some(n) = data_len {
        out.push(b' ');
        number(out, n);
    }
    if base64 {
        out.extend_from_slice(b" b");
    }
    Meta { out }
}

impl Meta<'_> {
    /// A flag without a value (`v`, `q`, `k`...).
    pub fn flag(self, flag: u8) -> Self {
        self.out.extend_from_slice(&[b' ', flag]);
        self
    }

    /// A flag with a number (`T30`, `F5`, `E77`, `MA`-style modes go
    /// through [`Meta::token`]).
    pub fn num(self, flag: u8, n: impl itoa::Integer) -> Self {
        self.out.extend_from_slice(&[b' ', flag]);
        number(self.out, n);
        self
    }

    /// Any token (`MA`, `O<opaque>`...).
    pub fn token(self, t: &[u8]) -> Self {
        self.out.push(b' ');
        self.out.extend_from_slice(t);
        self
    }

    /// Ends the command line.
    pub fn end(self) {
        self.out.extend_from_slice(b"\r\n");
    }

    /// Ends the command line and appends its data block (`ms`: `data`
    /// must be as long as the `data_len` given).
    pub fn data(self, data: &[u8]) {
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(data);
        self.out.extend_from_slice(b"\r\n");
    }
}

/// A binary request packet: header, `extras`, `key`, `value`.
pub fn binary(
    out: &mut Vec<u8>,
    opcode: u8,
    key: &[u8],
    extras: &[u8],
    value: &[u8],
    opaque: u32,
    cas: u64,
) {
    let body = extras.len() + key.len() + value.len();
    out.reserve(HEADER_LEN + body);
    out.extend_from_slice(&[REQUEST_MAGIC, opcode]);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// The extras of a binary SET, ADD or REPLACE: flags and expiration.
pub fn binary_store_extras(flags: u32, exptime: u32) -> [u8; 8] {
    let mut e = [0; 8];
    e[..4].copy_from_slice(&flags.to_be_bytes());
    e[4..].copy_from_slice(&exptime.to_be_bytes());
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_requests() {
        let mut out = Vec::new();
        get(&mut out, b"get", [&b"a"[..], b"b"]);
        set(&mut out, b"k", 5, 0, b"xyz", false);
        storage(&mut out, b"cas", b"k", 0, -1, b"", Some(9), true);
        keyed(&mut out, b"incr", b"n", Some(2), false);
        keyed(&mut out, b"delete", b"n", None, true);
        line(&mut out, &[b"flush_all", b"0"]);
        assert_eq!(
            out,
            b"get a b\r\nset k 5 0 3\r\nxyz\r\ncas k 0 -1 0 9 noreply\r\n\r\n\
              incr n 2\r\ndelete n noreply\r\nflush_all 0\r\n"
        );
    }

    #[test]
    fn meta_requests() {
        let mut out = Vec::new();
        meta(&mut out, b"mg", b"k", None, false)
            .flag(b'v')
            .num(b'N', 30)
            .end();
        meta(&mut out, b"ms", b"k", Some(3), false)
            .num(b'F', 5)
            .num(b'T', 100)
            .flag(b'q')
            .data(b"val");
        meta(&mut out, b"ms", b"a b", Some(0), false)
            .num(b'F', 0)
            .data(b"");
        meta(&mut out, b"md", b"k", None, true).flag(b'q').end();
        assert_eq!(
            out,
            b"mg k v N30\r\nms k 3 F5 T100 q\r\nval\r\nms YSBi 0 b F0\r\n\r\nmd aw== b q\r\n"
        );
    }

    #[test]
    fn binary_requests() {
        let mut out = Vec::new();
        binary(&mut out, 0x01, b"k", &binary_store_extras(1, 2), b"v", 7, 0);
        assert_eq!(out.len(), 24 + 8 + 1 + 1);
        assert_eq!(&out[..4], &[0x80, 0x01, 0, 1]);
        assert_eq!(&out[8..16], &[0, 0, 0, 10, 0, 0, 0, 7]);
        assert_eq!(&out[24..32], &[0, 0, 0, 1, 0, 0, 0, 2]);
    }
}
