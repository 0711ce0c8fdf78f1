//! Finding a request line in a read buffer: memcached 1.6.45's
//! `try_read_command_ascii` (proto_text.c).
//!
//! ```text
//! buffer:  "get a b\r\nset k 0 0 1\r\nx\r\n..."
//!           └── Line(9) ──┘
//! ```
//!
//! * The line is everything up to and including the first `\n`; whether a
//!   `\r` comes before it is [`parse_line`](super::parse_line)'s business,
//!   as it is `process_request`'s.
//! * Without a `\n`, a buffer of up to [`LINE_LIMIT`] bytes is waiting for
//!   more. Beyond that it must be a large multi-get: after at most 100
//!   leading spaces (memcached skips spaces up to 6 bytes before the end of
//!   the buffer) it must start with `get ` or `gets `, or memcached closes
//!   the connection. `gat`/`gats` lines get no such exception. A get line
//!   with leading spaces is kept too, although once complete it is answered
//!   `ERROR` (its command token is not at the start of the line).
//! * memcached makes this decision on what one read left in its buffer;
//!   given the same buffer, [`frame`] decides the same.

/// Without a `\n` in more than this many bytes, a request line must be a
/// get or gets.
pub const LINE_LIMIT: usize = 2048;

/// Most leading spaces memcached skips before looking for `get `.
const MAX_LEADING_SPACES: usize = 100;

/// What the front of a read buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A complete request line: the first `len` bytes, its `\n` included.
    /// Hand them to [`parse_line`](super::parse_line).
    Line(usize),
    /// No `\n` yet: wait for more bytes. For a get/gets line longer than
    /// [`LINE_LIMIT`], see [`partial_get`](super::partial_get).
    Incomplete,
    /// No `\n` in more than [`LINE_LIMIT`] bytes and not a get/gets line:
    /// memcached closes the connection without a reply.
    Close,
}

/// Frames the request line at the front of `buf`.
#[inline]
pub fn frame(buf: &[u8]) -> Frame {
    if let Some(nl) = memchr::memchr(b'\n', buf) {
        return Frame::Line(nl + 1);
    }
    if buf.len() <= LINE_LIMIT {
        return Frame::Incomplete;
    }
    // `while (*ptr == ' ' && ptr != end) ++ptr;` with end = rbytes - 6.
    let end = buf.len() - 6;
    let lead = buf[..end].iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[lead..];
    if lead > MAX_LEADING_SPACES || !(rest.starts_with(b"get ") || rest.starts_with(b"gets ")) {
        Frame::Close
    } else {
        Frame::Incomplete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn padded(prefix: &[u8], len: usize) -> Vec<u8> {
        let mut v = prefix.to_vec();
        v.resize(len, b'k');
        v
    }

    #[test]
    fn lines_include_their_newline() {
        assert_eq!(frame(b"get a\r\nxx"), Frame::Line(7));
        assert_eq!(frame(b"get a\nxx"), Frame::Line(6));
        assert_eq!(frame(b"\n"), Frame::Line(1));
        assert_eq!(frame(b""), Frame::Incomplete);
        assert_eq!(frame(b"get a\r"), Frame::Incomplete);
    }

    #[test]
    fn the_2048_byte_rule() {
        assert_eq!(frame(&padded(b"set ", 2048)), Frame::Incomplete);
        assert_eq!(frame(&padded(b"set ", 2049)), Frame::Close);
        assert_eq!(frame(&padded(b"get ", 5000)), Frame::Incomplete);
        assert_eq!(frame(&padded(b"gets ", 5000)), Frame::Incomplete);
        assert_eq!(frame(&padded(b"gat ", 5000)), Frame::Close);
        assert_eq!(frame(&padded(b"gats ", 5000)), Frame::Close);
        assert_eq!(frame(&padded(b"getx ", 5000)), Frame::Close);
        assert_eq!(frame(&padded(b"GET ", 5000)), Frame::Close);
        // A newline anywhere makes it a line, however long.
        let mut long = padded(b"set ", 5000);
        long.push(b'\n');
        assert_eq!(frame(&long), Frame::Line(5001));
    }

    #[test]
    fn leading_spaces() {
        let mut spaced = vec![b' '; 100];
        spaced.extend_from_slice(b"get ");
        assert_eq!(frame(&padded(&spaced, 3000)), Frame::Incomplete);
        let mut spaced = vec![b' '; 101];
        spaced.extend_from_slice(b"get ");
        assert_eq!(frame(&padded(&spaced, 3000)), Frame::Close);
        assert_eq!(frame(&vec![b' '; 3000]), Frame::Close);
    }
}
