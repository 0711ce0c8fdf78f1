//! Where each memcached response starts in a datagram endpoint's output.
//!
//! Over UDP memcached sends every response as its own series of datagrams:
//! one per text command, one per key of a multi-key get (END riding on the
//! last), one per binary request. After each request the session records
//! its responses here; the UDP transport then cuts the output at the marks.
//! A mark also says whether memcached would send the responses up to it at
//! once (a *flush point*: after `quit`, `mn`, and binary NOOP and most
//! binary errors), which decides what survives a later close.

use osmium_protocol::request::Keys;

/// Where one response starts in the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ResponseMark {
    pub start: usize,
    /// noreply: memcached never sends it, not even as an empty datagram.
    pub suppressed: bool,
    /// memcached sends the responses up to this one at once, before running
    /// the next command.
    pub flush: bool,
}

/// How a text command's output divides into memcached responses.
pub(crate) enum ReplyShape<'a> {
    /// One response, suppressed when the command wrote nothing (noreply).
    Single,
    /// One response that memcached sends at once (meta `mn`).
    Flush,
    /// One response even if empty, sent at once (`quit`).
    Empty,
    /// get/gets/gat/gats: one response per key, END on the last.
    PerKey(Keys<'a>),
}

/// Records the responses a text command wrote to `out` from `start`.
/// True when memcached would send them at once (a flush point).
pub(crate) fn mark_replies(
    responses: &mut Vec<ResponseMark>,
    out: &mut Vec<u8>,
    start: usize,
    shape: ReplyShape<'_>,
) -> bool {
    let (suppressed, flush) = match shape {
        ReplyShape::PerKey(keys) => return mark_get_replies(responses, out, start, keys),
        ReplyShape::Single => (out.len() == start, false),
        ReplyShape::Flush => (out.len() == start, true),
        ReplyShape::Empty => (false, true),
    };
    responses.push(ResponseMark {
        start,
        suppressed,
        flush,
    });
    flush
}

/// memcached starts a response per key of a get: a hit holds its VALUE
/// block, a miss is empty, and END goes on the last one. The blocks are
/// matched to the keys in order. A get is not a flush point (its replies
/// wait, e.g. for a data block that follows in the datagram). A get that
/// fails (a key too long) drops every response since the last flush
/// point, as memcached's `conn_release_items` does.
fn mark_get_replies(
    responses: &mut Vec<ResponseMark>,
    out: &mut Vec<u8>,
    start: usize,
    keys: Keys<'_>,
) -> bool {
    let before = responses.len();
    let mut pos = start;
    for key in keys {
        responses.push(ResponseMark {
            start: pos,
            suppressed: false,
            flush: false,
        });
        match value_block_len(&out[pos..], key) {
            Some(len) => pos += len,
            None if out[pos..].starts_with(b"VALUE ") || out[pos..] == *b"END\r\n" => {} // a miss
            None => {
                // An error reply instead of VALUE blocks.
                responses.truncate(before);
                let keep = responses.iter().rposition(|m| m.flush).map_or(0, |i| i + 1);
                let cut = responses.get(keep).map_or(start, |m| m.start);
                out.drain(cut..start);
                responses.truncate(keep);
                responses.push(ResponseMark {
                    start: cut,
                    suppressed: false,
                    flush: false,
                });
                return false;
            }
        }
    }
    if responses.len() == before {
        responses.push(ResponseMark {
            start,
            ..ResponseMark::default()
        });
    }
    false
}

/// Length of `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n` at the
/// start of `out`, if it is the block of `key`.
fn value_block_len(out: &[u8], key: &[u8]) -> Option<usize> {
    let rest = out
        .strip_prefix(b"VALUE ")?
        .strip_prefix(key)?
        .strip_prefix(b" ")?;
    let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
    let mut fields = rest[..line_end].split(|&b| b == b' ');
    let _flags = fields.next()?;
    let bytes: usize = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let header = b"VALUE ".len() + key.len() + 1 + line_end + 2;
    let total = header.checked_add(bytes)?.checked_add(2)?;
    (total <= out.len()).then_some(total)
}

/// Binary replies are self-delimiting: one response per 24-byte header
/// plus its body (for output no request marked).
pub(crate) fn mark_binary_replies(responses: &mut Vec<ResponseMark>, out: &[u8]) {
    const HEADER: usize = osmium_protocol::binary::HEADER_LEN;
    responses.clear();
    let mut pos = 0;
    while pos < out.len() {
        responses.push(ResponseMark {
            start: pos,
            ..ResponseMark::default()
        });
        let Some(header) = out.get(pos..pos + HEADER) else {
            break;
        };
        let body = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        pos = pos.saturating_add(HEADER + body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get_marks(keys: &[u8], out: &[u8]) -> Vec<(usize, bool)> {
        let mut marks = Vec::new();
        let mut out = out.to_vec();
        assert!(!mark_replies(
            &mut marks,
            &mut out,
            0,
            ReplyShape::PerKey(Keys::list(keys))
        ));
        assert!(!marks.last().unwrap().flush);
        marks.iter().map(|m| (m.start, m.suppressed)).collect()
    }

    #[test]
    fn get_responses_are_per_key() {
        let a = b"VALUE a 0 1\r\nx\r\n";
        let mut out = a.to_vec();
        out.extend_from_slice(b"END\r\n");
        assert_eq!(get_marks(b"a", &out), [(0, false)]);
        assert_eq!(get_marks(b"nx a", &out), [(0, false), (0, false)]);
        assert_eq!(get_marks(b"a nx", &out), [(0, false), (a.len(), false)]);
        let mut two = a.to_vec();
        two.extend_from_slice(b"VALUE bb 5 2 77\r\nyy\r\nEND\r\n");
        assert_eq!(get_marks(b"a bb", &two), [(0, false), (a.len(), false)]);
        assert_eq!(get_marks(b"nx", b"END\r\n"), [(0, false)]);
        // A value whose data looks like another VALUE line.
        let tricky = b"VALUE a 0 13\r\nVALUE b 0 1\r\n\r\nEND\r\n";
        assert_eq!(get_marks(b"a b", tricky), [(0, false), (29, false)]);
    }

    #[test]
    fn failed_get_drops_replies_since_last_flush() {
        let mut out = b"VALUE a 0 1\r\nx\r\nEND\r\nSTORED\r\n".to_vec();
        let mut marks = vec![
            ResponseMark {
                start: 0,
                suppressed: false,
                flush: true,
            },
            ResponseMark {
                start: 21,
                suppressed: false,
                flush: false,
            },
        ];
        out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
        assert!(!mark_replies(
            &mut marks,
            &mut out,
            29,
            ReplyShape::PerKey(Keys::list(b"a"))
        ));
        assert_eq!(
            out,
            b"VALUE a 0 1\r\nx\r\nEND\r\nCLIENT_ERROR bad command line format\r\n"
        );
        assert_eq!(marks.len(), 2);
        assert_eq!((marks[1].start, marks[1].flush), (21, false));
    }

    #[test]
    fn single_replies_mark_noreply_as_suppressed() {
        let mut marks = Vec::new();
        let mut out = b"STORED\r\n".to_vec();
        assert!(!mark_replies(&mut marks, &mut out, 0, ReplyShape::Single));
        assert!(!mark_replies(&mut marks, &mut out, 8, ReplyShape::Single));
        assert!(mark_replies(&mut marks, &mut out, 8, ReplyShape::Empty));
        let got: Vec<(usize, bool, bool)> = marks
            .iter()
            .map(|m| (m.start, m.suppressed, m.flush))
            .collect();
        assert_eq!(got, [(0, false, false), (8, true, false), (8, false, true)]);
    }

    #[test]
    fn binary_replies_split_on_headers() {
        let mut out = vec![0x81u8; 24];
        out[8..12].copy_from_slice(&5u32.to_be_bytes());
        out.extend_from_slice(b"hello");
        let mut second = vec![0x81u8; 24];
        second[8..12].copy_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&second);
        out.extend_from_slice(&[0x81, 0]); // truncated: still one response
        let mut marks = Vec::new();
        mark_binary_replies(&mut marks, &out);
        let starts: Vec<usize> = marks.iter().map(|m| m.start).collect();
        assert_eq!(starts, [0, 29, 53]);
    }
}
