//! Server reply framing: how long the reply at the front of a server
//! connection's read buffer is, for what the request expects ([`Expect`]);
//! and the pieces of a text get's reply a multi-key get is merged from.

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
            if buf.len() < 24 {
                return Ok(None);
            }
            if buf[0] != 0x81 {
                return Err(Desync);
            }
            let body = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
            Ok((buf.len() >= 24 + body).then_some(24 + body))
        }
        Expect::MetaValue => {
            let Some(end) = line_end(buf, 0) else {
                return Ok(None);
            };
            if !buf.starts_with(b"VA ") {
                return Ok(Some(end));
            }
            let size = number(token(&buf[..end], 1)).ok_or(Desync)?;
            let total = end + size + 2;
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
                    at = end + size + 2;
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
        let block_end = end + size + 2;
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
    }
}
