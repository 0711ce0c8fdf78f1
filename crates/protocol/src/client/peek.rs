//! `first_key` and `keys`: the keys of the requests waiting in a read
//! buffer, found without parsing the requests.
//!
//! The server reads every connection an `epoll_wait` returned before it
//! executes any of them; for each it peeks at the first request's key so
//! the store can prefetch that key's index bucket and item while the other
//! connections are read, and `keys` walks a batch of pipelined requests
//! for the same purpose (see `crates/server/src/worker.rs`). The answer is
//! a hint: a wrong or missing key costs a wasted prefetch, never a wrong
//! reply, because the request is parsed for real afterwards. So this looks
//! only at the shapes that matter for speed:
//!
//! * text `get`, `gets`, `set`, `add`, `replace`, `append`, `prepend`,
//!   `cas`, `delete`, `incr`, `decr`, `touch` and meta `mg`, `ms`, `md`,
//!   `ma`: the second token of the first line (first separator a space);
//! * binary requests (magic 0x80) whose 24-byte header is complete: the
//!   key after the extras, if it has arrived.
//!
//! It reads at most the first `KEY_MAX_LENGTH + 16` bytes of a text line,
//! allocates nothing and never panics. It is the request framer's
//! ([`super::frame`]) fast entry point: the same keyed commands and the
//! same binary header reading, without validating or tokenizing the
//! line (the server's own parser does that next).

use super::frame::{BinaryHead, KEYED_COMMANDS};
use crate::binary::REQUEST_MAGIC;
use crate::request::KEY_MAX_LENGTH;

/// The keys of the requests waiting in `input`, in order, as far as they
/// have arrived: for every request (binary, framed by its header) or every
/// line (text), what [`first_key`] finds there. A text data block is taken
/// for a line too; it rarely looks like a keyed command, and if it does,
/// the cost is a wasted prefetch.
pub fn keys(input: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = input;
    std::iter::from_fn(move || loop {
        let request = rest;
        let first = *request.first()?;
        rest = if first == REQUEST_MAGIC {
            let head = BinaryHead::parse(request)?;
            request.get(head.packet_len()..).unwrap_or_default()
        } else {
            let end = memchr::memchr(b'\n', request)?;
            &request[end + 1..]
        };
        if let Some(key) = first_key(request) {
            return Some(key);
        }
    })
}

/// The key of the first request in `input`, if it is one of the shapes
/// above and its key has fully arrived.
#[inline]
pub fn first_key(input: &[u8]) -> Option<&[u8]> {
    if *input.first()? == REQUEST_MAGIC {
        binary_key(input)
    } else {
        text_key(input)
    }
}

fn binary_key(input: &[u8]) -> Option<&[u8]> {
    let head = BinaryHead::parse(input)?;
    if head.key_len == 0 {
        return None;
    }
    input.get(head.key_range())
}

fn text_key(input: &[u8]) -> Option<&[u8]> {
    let window = &input[..input.len().min(KEY_MAX_LENGTH + 16)];
    let space = memchr::memchr(b' ', &window[..window.len().min(8)])?;
    if !KEYED_COMMANDS.contains(&&window[..space]) {
        return None;
    }
    let rest = &window[space + 1..];
    let end = memchr::memchr3(b' ', b'\r', b'\n', rest)?;
    (end > 0 && end <= KEY_MAX_LENGTH).then(|| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::{first_key, keys};

    #[test]
    fn text_keys() {
        assert_eq!(first_key(b"get foo\r\n"), Some(&b"foo"[..]));
        assert_eq!(first_key(b"gets foo bar\r\n"), Some(&b"foo"[..]));
        assert_eq!(first_key(b"set k 0 0 1\r\nx\r\n"), Some(&b"k"[..]));
        assert_eq!(first_key(b"mg key v\r\n"), Some(&b"key"[..]));
        assert_eq!(first_key(b"get foo\n"), Some(&b"foo"[..]));
    }

    #[test]
    fn no_key_until_it_has_arrived() {
        assert_eq!(first_key(b"get fo"), None);
        assert_eq!(first_key(b"get"), None);
        assert_eq!(first_key(b""), None);
        assert_eq!(first_key(b"get  foo\r\n"), None);
        assert_eq!(first_key(b"version\r\n"), None);
        assert_eq!(first_key(b"stats items\r\n"), None);
        assert_eq!(first_key(&[b'g'; 400]), None);
    }

    #[test]
    fn keys_of_a_pipeline() {
        let text = b"get a\r\nset b 0 0 1\r\nx\r\nversion\r\ngets c d\r\nget e";
        assert_eq!(keys(text).collect::<Vec<_>>(), [&b"a"[..], b"b", b"c"]);
        let mut bin = Vec::new();
        for k in [&b"k1"[..], b"key2"] {
            bin.extend_from_slice(&[0x80, 0x00, 0, k.len() as u8, 0, 0, 0, 0, 0, 0, 0]);
            bin.push(k.len() as u8);
            bin.extend_from_slice(&[0; 12]);
            bin.extend_from_slice(k);
        }
        assert_eq!(keys(&bin).collect::<Vec<_>>(), [&b"k1"[..], b"key2"]);
        assert_eq!(keys(&bin[..30]).count(), 1);
    }

    #[test]
    fn binary_keys() {
        let mut req = vec![0x80, 0x00, 0, 3, 0, 0, 0, 0];
        req.extend_from_slice(&[0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(first_key(&req), None);
        req.extend_from_slice(b"abc");
        assert_eq!(first_key(&req), Some(&b"abc"[..]));
        // A set: 8 bytes of extras before the key.
        let mut set = vec![0x80, 0x01, 0, 2, 8, 0, 0, 0, 0, 0, 0, 12];
        set.extend_from_slice(&[0; 12]);
        set.extend_from_slice(&[9; 8]);
        set.extend_from_slice(b"kvvalu");
        assert_eq!(first_key(&set), Some(&b"kv"[..]));
        assert_eq!(first_key(&set[..24]), None);
    }
}
