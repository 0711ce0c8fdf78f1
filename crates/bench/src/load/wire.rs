//! The generator's wire format: the get and set requests it sends in each
//! protocol, and the replies it reads back (how long the first complete
//! reply of a connection is, and whether it was a miss), both by the
//! shared client-side codec (`osmium_protocol::client`), the framing
//! through the connection (`osmium_net::nb::Conn::next_reply`).

use osmium_net::nb::Conn;
use osmium_protocol::client::encode;
use osmium_protocol::client::reply::{Desync, Expect, Outcome};

use super::Protocol;

/// Appends a get of `key` (or a set of `value`) in `protocol` to `out`.
pub(super) fn push_request(
    out: &mut Vec<u8>,
    protocol: Protocol,
    key: &[u8],
    get: bool,
    value: &[u8],
) {
    match (protocol, get) {
        (Protocol::Text, true) => encode::get(out, b"get", [key]),
        (Protocol::Text, false) => encode::set(out, key, 0, 0, value, false),
        (Protocol::Meta, true) => encode::meta(out, b"mg", key, None, false).flag(b'v').end(),
        (Protocol::Meta, false) => {
            encode::meta(out, b"ms", key, Some(value.len()), false).data(value)
        }
        (Protocol::Binary, true) => encode::binary(out, 0x00, key, &[], &[], 0, 0),
        (Protocol::Binary, false) => {
            let extras = encode::binary_store_extras(0, 0);
            encode::binary(out, 0x01, key, &extras, value, 0, 0)
        }
    }
}

/// The shape of a reply to the generator's requests in `protocol`.
fn expect(protocol: Protocol) -> Expect {
    match protocol {
        Protocol::Text => Expect::Values,
        Protocol::Binary => Expect::Binary,
        Protocol::Meta => Expect::MetaValue,
    }
}

/// The first complete reply of `conn`'s input: its length and whether it
/// was a get's miss; None if incomplete.
pub(super) fn next_reply(conn: &Conn, protocol: Protocol) -> Result<Option<(usize, bool)>, String> {
    judged(conn.input(), protocol, conn.next_reply(expect(protocol)))
}

/// A reply `framed` at the front of `input`, judged. Text: `VALUE` blocks
/// up to `END` (a hit), a bare `END` (a miss), `STORED`. Meta: `VA <n>
/// <flags>*` and its data, `EN` (a miss), `HD`, `MN`. Binary: any status
/// counts as an answer (1, key not found, is a miss), a packet that is not
/// a response is an error. A text or meta reply the benchmark never
/// expects (`ERROR`, `SERVER_ERROR ...`, `NS`...) is an error.
fn judged(
    input: &[u8],
    protocol: Protocol,
    framed: Result<Option<(usize, Outcome)>, Desync>,
) -> Result<Option<(usize, bool)>, String> {
    if protocol == Protocol::Binary {
        return match framed {
            Ok(reply) => Ok(reply.map(|(n, outcome)| (n, outcome == Outcome::Miss))),
            Err(_) => Err(format!(
                "not a binary response: {:02x?}",
                &input[..input.len().min(24)]
            )),
        };
    }
    let bad = |n: usize| {
        let line = &input[..memchr::memchr(b'\n', &input[..n]).map_or(n, |i| i + 1)];
        format!("unexpected reply {:?}", String::from_utf8_lossy(line))
    };
    match framed {
        Ok(None) => Ok(None),
        Ok(Some((n, Outcome::Miss))) => Ok(Some((n, true))),
        Ok(Some((n, Outcome::Value | Outcome::Done))) => Ok(Some((n, false))),
        Ok(Some((n, _))) => Err(bad(n)),
        Err(_) => Err(bad(input.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osmium_protocol::client::reply::frame_reply;

    fn reply(input: &[u8], protocol: Protocol) -> Result<Option<(usize, bool)>, String> {
        judged(input, protocol, frame_reply(input, expect(protocol)))
    }

    fn text_reply(input: &[u8]) -> Result<Option<(usize, bool)>, String> {
        reply(input, Protocol::Text)
    }

    fn meta_reply(input: &[u8]) -> Result<Option<(usize, bool)>, String> {
        reply(input, Protocol::Meta)
    }

    fn binary_reply(input: &[u8]) -> Result<Option<(usize, bool)>, String> {
        reply(input, Protocol::Binary)
    }

    #[test]
    fn text_replies_are_framed() {
        let hit = b"VALUE k1 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(text_reply(hit).unwrap(), Some((hit.len(), false)));
        assert_eq!(text_reply(&hit[..hit.len() - 1]).unwrap(), None);
        let cas = b"VALUE k1 0 3 99\r\nabc\r\nEND\r\nSTORED\r\n";
        assert_eq!(text_reply(cas).unwrap(), Some((cas.len() - 8, false)));
        assert_eq!(text_reply(b"END\r\n").unwrap(), Some((5, true)));
        assert_eq!(text_reply(b"STORED\r\nEND").unwrap(), Some((8, false)));
        assert!(text_reply(b"SERVER_ERROR out of memory\r\n").is_err());
    }

    #[test]
    fn meta_replies_are_framed() {
        let hit = b"VA 3\r\nabc\r\n";
        assert_eq!(meta_reply(hit).unwrap(), Some((hit.len(), false)));
        assert_eq!(meta_reply(&hit[..hit.len() - 1]).unwrap(), None);
        let flags = b"VA 2 f0 t-1\r\nab\r\nHD\r\n";
        assert_eq!(meta_reply(flags).unwrap(), Some((flags.len() - 4, false)));
        assert_eq!(meta_reply(b"EN\r\n").unwrap(), Some((4, true)));
        assert_eq!(meta_reply(b"HD\r\nEN").unwrap(), Some((4, false)));
        assert_eq!(meta_reply(b"MN\r\n").unwrap(), Some((4, false)));
        assert_eq!(meta_reply(b"HD").unwrap(), None);
        assert!(meta_reply(b"NS\r\n").is_err());
        assert!(meta_reply(b"SERVER_ERROR out of memory\r\n").is_err());
    }

    #[test]
    fn requests_are_encoded() {
        let mut out = Vec::new();
        push_request(&mut out, Protocol::Meta, b"k1", true, b"");
        push_request(&mut out, Protocol::Meta, b"k2", false, b"xyz");
        push_request(&mut out, Protocol::Text, b"k3", false, b"ab");
        assert_eq!(out, b"mg k1 v\r\nms k2 3\r\nxyz\r\nset k3 0 0 2\r\nab\r\n");
    }

    #[test]
    fn binary_replies_are_framed() {
        let mut r = vec![0x81, 0, 0, 0, 4, 0, 0, 1, 0, 0, 0, 9];
        r.extend_from_slice(&[0; 12]);
        r.extend_from_slice(b"Not found");
        assert_eq!(binary_reply(&r), Ok(Some((33, true))));
        assert_eq!(binary_reply(&r[..30]), Ok(None));
    }
}
