//! Serving a huge multi-get as it arrives.
//!
//! memcached buffers a get line of any length (`try_read_command_ascii`
//! lets a line without `\n` grow past 2048 bytes only when it starts with
//! `get ` or `gets `) and answers once its `\n` has arrived. osmium serves
//! the complete keys of such a line as they come instead, so it never holds
//! the whole line. [`partial_get`] reads the start of the line:
//!
//! ```text
//! "gats 300   key1 key2 ke"         (no '\n' yet)
//!  └with_cas  └touch    └keys_start
//! ```
//!
//! What the caller must do with a [`PartialGet`], to answer as memcached
//! does once the line is complete:
//!
//! 1. `touch` is `Err(message)`: memcached answers only that line, once
//!    the line is complete. Discard through the `\n` and answer it.
//! 2. Otherwise serve the keys from `keys_start` on, in order: a key is
//!    complete when a space follows it (keys are separated by one or more
//!    spaces; any other byte, NUL, tab or `\r` included, is part of a key).
//!    Keep the last, unfinished key and continue when more bytes arrive;
//!    what follows in the buffer is the rest of this line, not a new
//!    request. When the `\n` arrives, the keys before it complete the line
//!    (a `\r` right before the `\n` is not part of the last key), then
//!    `END\r\n`.
//! 3. A key over 250 bytes (known as soon as 251 bytes have come without a
//!    space): memcached answers nothing but
//!    [`GET_KEY_TOO_LONG`](super::GET_KEY_TOO_LONG) for the whole line, the
//!    values of the keys before it dropped with every other reply not yet
//!    written; or just `\r\n` when that key is the first one and the line's
//!    noreply check is true (its last token, or its 23rd when it has more,
//!    is `noreply`). Replies already written for earlier keys cannot be
//!    taken back: a streaming server differs from memcached there.
//!    Discard through the `\n`.
//!
//! None: not the start of a get line memcached would buffer this way, or
//! not far enough along to tell (the first key has not started, or is a
//! lone `\r` that may belong to the terminator, or a gat's exptime is not
//! complete). Once it says Some, the complete line is sure to be that get
//! (or that gat's exptime error). A line starting with a space is never a get
//! (`ERROR` once complete); the caller buffers it or drops it as it sees
//! fit.

use super::numbers::tokto_i32;
use super::INVALID_EXPTIME;
use crate::request::exptime_to_positive;

/// The start of a get/gets/gat/gats line whose `\n` has not arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialGet {
    /// gets/gats: values carry CAS uniques.
    pub with_cas: bool,
    /// gat/gats: the expiry argument every hit gets (see
    /// [`crate::request::exptime_to_positive`]); get/gets: None. Err: the
    /// exptime is not a number, and this is the line's only answer.
    pub touch: Result<Option<i64>, &'static str>,
    /// Where the first key starts.
    pub keys_start: usize,
}

#[inline]
fn skip_spaces(buf: &[u8], mut pos: usize) -> usize {
    while pos < buf.len() && buf[pos] == b' ' {
        pos += 1;
    }
    pos
}

/// Reads the start of a get line from `buf`, which holds no `\n`.
pub fn partial_get(buf: &[u8]) -> Option<PartialGet> {
    let word = memchr::memchr(b' ', buf)?;
    let (with_cas, touch) = match &buf[..word] {
        b"get" => (false, false),
        b"gets" => (true, false),
        b"gat" => (false, true),
        b"gats" => (true, true),
        _ => return None,
    };
    let mut pos = skip_spaces(buf, word);
    let touch = if touch {
        // memcached checks for 3 tokens before it reads the exptime, so the
        // exptime's error stands only once a key has started.
        let len = memchr::memchr(b' ', &buf[pos..])?;
        let exptime = &buf[pos..pos + len];
        pos = skip_spaces(buf, pos + len);
        match tokto_i32(exptime) {
            Some(e) => Ok(Some(exptime_to_positive(e))),
            None => Err(INVALID_EXPTIME),
        }
    } else {
        Ok(None)
    };
    // The first key must have started; a lone `\r` at the end of `buf` may
    // still turn out to be the start of the terminator.
    if pos >= buf.len() || (pos + 1 == buf.len() && buf[pos] == b'\r') {
        return None;
    }
    Some(PartialGet {
        with_cas,
        touch,
        keys_start: pos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::REALTIME_MAXDELTA;

    #[test]
    fn gets_and_gats() {
        assert_eq!(
            partial_get(b"get a b c"),
            Some(PartialGet {
                with_cas: false,
                touch: Ok(None),
                keys_start: 4
            })
        );
        assert_eq!(
            partial_get(b"gets   a"),
            Some(PartialGet {
                with_cas: true,
                touch: Ok(None),
                keys_start: 7
            })
        );
        assert_eq!(
            partial_get(b"gat 30 k"),
            Some(PartialGet {
                with_cas: false,
                touch: Ok(Some(30)),
                keys_start: 7
            })
        );
        assert_eq!(
            partial_get(b"gats -1  k").map(|p| (p.with_cas, p.touch)),
            Some((true, Ok(Some(REALTIME_MAXDELTA + 1))))
        );
        assert_eq!(
            partial_get(b"gat x k").map(|p| p.touch),
            Some(Err("CLIENT_ERROR invalid exptime argument"))
        );
    }

    #[test]
    fn not_yet_or_never() {
        assert_eq!(partial_get(b"get"), None);
        assert_eq!(partial_get(b"get "), None);
        assert_eq!(partial_get(b"get    "), None);
        assert_eq!(partial_get(b"gat 30"), None);
        assert_eq!(partial_get(b"gat 30 "), None);
        assert_eq!(partial_get(b"gat x "), None);
        // "get \r" may be "get \r\n": no key at all.
        assert_eq!(partial_get(b"get \r"), None);
        assert_eq!(partial_get(b"gat 1 \r"), None);
        assert!(partial_get(b"get \rx").is_some());
        assert!(partial_get(b"get a\r").is_some());
        assert_eq!(partial_get(b" get a"), None);
        assert_eq!(partial_get(b"GET a"), None);
        assert_eq!(partial_get(b"getx a"), None);
        assert_eq!(partial_get(b"set a"), None);
        assert_eq!(partial_get(b""), None);
    }
}
