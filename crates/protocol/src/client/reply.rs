//! Reply framing: how long the reply at the front of a server
//! connection's read buffer is, for what the request expects ([`Expect`]);
//! what it says in short ([`outcome`]: a value, a miss, done, not done, an
//! error); and what it carries: the `VALUE` blocks of a get (which a
//! proxy's multi-key get is merged from), the data of a meta `VA`, a
//! binary packet's value, the `STAT` lines of `stats`.

use super::binary_head::BinaryHead;
use crate::binary::{status, HEADER_LEN, RESPONSE_MAGIC};

/// The shape of the reply a forwarded request gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// One line.
    Line,
    /// `VALUE ...` blocks up to `END` (or one error line).
    Values,
    /// One line, with a data block when it is `VA <size> ...` (mg, ma).
    MetaValue,
    /// One binary response packet.
    Binary,
    /// `STAT ...` lines up to `END` (or one error line).
    Stats,
}

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    memchr::memchr(b'\n', &buf[from..]).map(|i| from + i + 1)
}

fn token(line: &[u8], n: usize) -> Option<&[u8]> {
    line.split(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .filter(|t| !t.is_empty())
        .nth(n)
}

fn number(t: Option<&[u8]>) -> Option<usize> {
    std::str::from_utf8(t?).ok()?.parse().ok()
}

/// A reply that cannot be framed: the connection is out of step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desync;

/// The length of the complete reply at the front of `buf`; `Ok(None)`
/// while incomplete; `Err` when it cannot be framed.
pub fn reply_len(buf: &[u8], expect: Expect) -> Result<Option<usize>, Desync> {
    match expect {
        Expect::Line => Ok(line_end(buf, 0)),
        Expect::Binary => {
            let Some(head) = BinaryHead::parse(buf) else {
                return Ok(None);
            };
            if head.magic != RESPONSE_MAGIC {
                return Err(Desync);
            }
            Ok((buf.len() >= head.packet_len()).then_some(head.packet_len()))
        }
        Expect::MetaValue => {
            let Some(end) = line_end(buf, 0) else {
                return Ok(None);
            };
            if !buf.starts_with(b"VA ") {
                return Ok(Some(end));
            }
            let size = number(token(&buf[..end], 1)).ok_or(Desync)?;
            let total = end.checked_add(size).ok_or(Desync)? + 2;
            Ok((buf.len() >= total).then_some(total))
        }
        Expect::Values | Expect::Stats => {
            let mut at = 0;
            loop {
                let Some(end) = line_end(buf, at) else {
                    return Ok(None);
                };
                let line = &buf[at..end];
                if line.starts_with(b"END\r\n") || line == b"END\n" {
                    return Ok(Some(end));
                }
                if expect == Expect::Values && line.starts_with(b"VALUE ") {
                    let size = number(token(line, 3)).ok_or(Desync)?;
                    at = end.checked_add(size).ok_or(Desync)? + 2;
                    if buf.len() < at {
                        return Ok(None);
                    }
                } else if expect == Expect::Stats && line.starts_with(b"STAT ") {
                    at = end;
                } else if at == 0 {
                    // An error line instead of the reply.
                    return Ok(Some(end));
                } else {
                    return Err(Desync);
                }
            }
        }
    }
}

/// The `VALUE` blocks of a complete get reply: `(key, whole block)`;
/// `None` when the reply is not `VALUE`s and `END` (an error line).
pub fn values(reply: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let end = line_end(reply, at)?;
        let line = &reply[at..end];
        if line.starts_with(b"END") {
            return Some(out);
        }
        if !line.starts_with(b"VALUE ") {
            return None;
        }
        let key = token(line, 1)?;
        let size = number(token(line, 3))?;
        let block_end = end.checked_add(size)? + 2;
        out.push((key, reply.get(at..block_end)?));
        at = block_end;
    }
}

/// The value of `STAT <name> <value>` in a stats reply.
pub fn stat<'r>(reply: &'r [u8], name: &str) -> Option<&'r [u8]> {
    reply.split(|&b| b == b'\n').find_map(|line| {
        let mut t = line
            .split(|&b| b == b' ' || b == b'\r')
            .filter(|t| !t.is_empty());
        (t.next()? == b"STAT" && t.next()? == name.as_bytes()).then_some(())?;
        t.next()
    })
}

/// What a complete reply says, in short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A hit: `VALUE` blocks, a meta `VA`.
    Value,
    /// A miss: a get's bare `END`, `EN`, `NOT_FOUND`, `NF`, binary
    /// "key not found".
    Miss,
    /// Done: `STORED`, `DELETED`, `TOUCHED`, `OK`, `HD`, `MN`, a number,
    /// `STAT` lines, a binary success.
    Done,
    /// Refused by the item's state: `NOT_STORED`, `EXISTS`, `NS`, `EX`,
    /// binary "key exists" or "not stored".
    NotDone,
    /// `ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...`, any other binary
    /// status, or a line no command answers.
    Error,
}

/// What the complete reply at the front of `reply` says (text or meta by
/// its first line, binary by its status).
pub fn outcome(reply: &[u8]) -> Outcome {
    if reply.first() == Some(&RESPONSE_MAGIC) {
        return match BinaryHead::parse(reply).map(|h| h.status) {
            Some(status::NO_ERROR) => Outcome::Done,
            Some(status::KEY_NOT_FOUND) => Outcome::Miss,
            Some(status::KEY_EXISTS | status::ITEM_NOT_STORED) => Outcome::NotDone,
            _ => Outcome::Error,
        };
    }
    let line = &reply[..memchr::memchr(b'\n', reply).map_or(reply.len(), |i| i + 1)];
    let word = line
        .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .next()
        .unwrap_or_default();
    match word {
        b"VALUE" | b"VA" => Outcome::Value,
        b"END" | b"EN" | b"NOT_FOUND" | b"NF" => Outcome::Miss,
        b"STORED" | b"DELETED" | b"TOUCHED" | b"OK" | b"HD" | b"MN" | b"STAT" => Outcome::Done,
        b"NOT_STORED" | b"EXISTS" | b"NS" | b"EX" => Outcome::NotDone,
        w if !w.is_empty() && w.iter().all(u8::is_ascii_digit) => Outcome::Done,
        _ => Outcome::Error,
    }
}

/// A complete reply framed: its length and what it says.
pub fn frame_reply(buf: &[u8], expect: Expect) -> Result<Option<(usize, Outcome)>, Desync> {
    Ok(reply_len(buf, expect)?.map(|n| (n, outcome(&buf[..n]))))
}

/// Whether a line read on its own is a get's closing `END`.
pub fn is_end(line: &[u8]) -> bool {
    line == b"END\r\n" || line == b"END\n"
}

/// The data of the first `VALUE` block of a get reply (`None` for a miss
/// or an error).
pub fn value(reply: &[u8]) -> Option<&[u8]> {
    let end = line_end(reply, 0)?;
    if !reply.starts_with(b"VALUE ") {
        return None;
    }
    let size = number(token(&reply[..end], 3))?;
    reply.get(end..end.checked_add(size)?)
}

/// The parsed header line of a `VALUE` block: key, flags, data length,
/// CAS if the reply carries one (gets).
pub fn value_header(line: &[u8]) -> Option<(&[u8], u32, usize, Option<u64>)> {
    if !line.starts_with(b"VALUE ") {
        return None;
    }
    let key = token(line, 1)?;
    let flags = std::str::from_utf8(token(line, 2)?).ok()?.parse().ok()?;
    let size = number(token(line, 3))?;
    let cas = match token(line, 4) {
        Some(t) => Some(std::str::from_utf8(t).ok()?.parse().ok()?),
        None => None,
    };
    Some((key, flags, size, cas))
}

/// The data length a meta `VA <size> ...` line announces (the line alone,
/// with or without its line end).
pub fn meta_value_len(line: &[u8]) -> Option<usize> {
    if !line.starts_with(b"VA ") {
        return None;
    }
    number(token(line, 1))
}

/// A meta reply's `VA` data and its flags (the tokens after the size);
/// `None` when it is not `VA`.
pub fn meta_value(reply: &[u8]) -> Option<(&[u8], impl Iterator<Item = &[u8]>)> {
    let end = line_end(reply, 0)?;
    if !reply.starts_with(b"VA ") {
        return None;
    }
    let line = &reply[..end];
    let size = number(token(line, 1))?;
    let data = reply.get(end..end.checked_add(size)?)?;
    let flags = line
        .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .filter(|t| !t.is_empty())
        .skip(2);
    Some((data, flags))
}

/// A meta reply flag's value: `flag(b"VA 1 f5 t-1\r\n...", b'f')` is
/// `Some(b"5")`. Looks at the first line only.
pub fn meta_flag(reply: &[u8], flag: u8) -> Option<&[u8]> {
    let line = &reply[..memchr::memchr(b'\n', reply).unwrap_or(reply.len())];
    line.split(|&b| b == b' ' || b == b'\r')
        .skip(1)
        .find_map(|t| t.strip_prefix(&[flag]))
}

/// A binary response's value: what follows its extras and key.
pub fn binary_value(packet: &[u8]) -> Option<&[u8]> {
    let head = BinaryHead::parse(packet)?;
    packet.get(HEADER_LEN + head.extras + head.key_len..head.packet_len())
}

/// Every `STAT <name> <value>` of a stats reply, in order (the value is
/// the rest of the line).
pub fn stats(reply: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    reply.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let rest = line.strip_prefix(b"STAT ")?;
        let sp = memchr::memchr(b' ', rest)?;
        Some((&rest[..sp], &rest[sp + 1..]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_each_shape() {
        let get = b"VALUE a 0 3\r\nEND\r\nEND\r\n";
        assert_eq!(
            reply_len(get, Expect::Values),
            Ok(Some(23)),
            "a value that reads END"
        );
        assert_eq!(reply_len(b"VALUE a 0 3\r\nab", Expect::Values), Ok(None));
        assert_eq!(
            reply_len(b"SERVER_ERROR x\r\n", Expect::Values),
            Ok(Some(16))
        );
        assert_eq!(
            reply_len(b"VA 2 f1\r\nhi\r\nHD\r\n", Expect::MetaValue),
            Ok(Some(13))
        );
        assert_eq!(reply_len(b"EN\r\n", Expect::MetaValue), Ok(Some(4)));
        assert_eq!(
            reply_len(b"STAT a 1\r\nSTAT b 2\r\nEND\r\n", Expect::Stats),
            Ok(Some(25))
        );
    }

    #[test]
    fn reads_values_and_stats() {
        let v = values(b"VALUE a 0 1\r\nx\r\nVALUE b 0 0\r\n\r\nEND\r\n").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0, b"b");
        let s = b"STAT pid 1\r\nSTAT replication_catchup running\r\nEND\r\n";
        assert_eq!(stat(s, "replication_catchup"), Some(&b"running"[..]));
        assert_eq!(stat(s, "nope"), None);
        let all: Vec<_> = stats(s).collect();
        assert_eq!(all[1], (&b"replication_catchup"[..], &b"running"[..]));
        assert_eq!(all.len(), 2);
    }

    #[test]
    fn outcomes_and_values() {
        for (reply, want) in [
            (&b"VALUE k 0 1\r\nx\r\nEND\r\n"[..], Outcome::Value),
            (b"END\r\n", Outcome::Miss),
            (b"EN\r\n", Outcome::Miss),
            (b"STORED\r\n", Outcome::Done),
            (b"42\r\n", Outcome::Done),
            (b"HD c5\r\n", Outcome::Done),
            (b"NS\r\n", Outcome::NotDone),
            (b"SERVER_ERROR out of memory\r\n", Outcome::Error),
            (b"", Outcome::Error),
        ] {
            assert_eq!(outcome(reply), want, "{}", String::from_utf8_lossy(reply));
        }
        assert_eq!(value(b"VALUE k 3 2 9\r\nab\r\nEND\r\n"), Some(&b"ab"[..]));
        assert_eq!(
            value_header(b"VALUE k 3 2 9\r\n"),
            Some((&b"k"[..], 3, 2, Some(9)))
        );
        assert_eq!(
            value_header(b"VALUE k 3 2\r\n"),
            Some((&b"k"[..], 3, 2, None))
        );
        let (data, flags) = meta_value(b"VA 2 f5 t-1\r\nab\r\n").unwrap();
        assert_eq!(data, b"ab");
        assert_eq!(flags.collect::<Vec<_>>(), [&b"f5"[..], b"t-1"]);
        assert_eq!(meta_flag(b"VA 2 f5 t-1\r\nab\r\n", b't'), Some(&b"-1"[..]));
        assert_eq!(meta_flag(b"HD c77\r\n", b'c'), Some(&b"77"[..]));
        let mut bin = vec![0x81, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 6];
        bin.extend_from_slice(&[0; 12]);
        bin.extend_from_slice(b"\0\0\0\0hi");
        assert_eq!(
            frame_reply(&bin, Expect::Binary),
            Ok(Some((30, Outcome::Done)))
        );
        assert_eq!(binary_value(&bin), Some(&b"hi"[..]));
    }
}
