//! The generator's wire format: the get and set requests it sends in each
//! protocol, and the framing of the replies it reads back (how long the
//! first complete reply is, and whether it was a miss).

use super::Protocol;

/// Appends a get of `key` (or a set of `value`) in `protocol` to `out`.
pub(super) fn push_request(
    out: &mut Vec<u8>,
    protocol: Protocol,
    key: &[u8],
    get: bool,
    value: &[u8],
) {
    match protocol {
        Protocol::Text => {
            if get {
                out.extend_from_slice(b"get ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" 0 0 ");
                out.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
        Protocol::Meta => {
            if get {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" v\r\n");
            } else {
                out.extend_from_slice(b"ms ");
                out.extend_from_slice(key);
                out.push(b' ');
                out.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
        Protocol::Binary => {
            let (opcode, extras, body) = if get {
                (0x00u8, 0usize, key.len())
            } else {
                (0x01, 8, 8 + key.len() + value.len())
            };
            out.extend_from_slice(&[0x80, opcode]);
            out.extend_from_slice(&(key.len() as u16).to_be_bytes());
            out.extend_from_slice(&[extras as u8, 0, 0, 0]);
            out.extend_from_slice(&(body as u32).to_be_bytes());
            out.extend_from_slice(&[0; 12]);
            if !get {
                out.extend_from_slice(&[0; 8]);
            }
            out.extend_from_slice(key);
            if !get {
                out.extend_from_slice(value);
            }
        }
    }
}

/// The length of the first complete text reply in `input`, and whether it
/// was a get's miss; None if incomplete. A reply the benchmark never
/// expects (`ERROR`, `SERVER_ERROR ...`) is an error.
pub(super) fn text_reply(input: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let Some(end) = memchr::memchr(b'\n', input) else {
        return Ok(None);
    };
    let line = &input[..end + 1];
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        // VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\nEND\r\n
        let bytes = rest
            .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
            .filter(|f| !f.is_empty())
            .nth(2)
            .and_then(|b| std::str::from_utf8(b).ok()?.parse::<usize>().ok())
            .ok_or_else(|| format!("bad reply {:?}", String::from_utf8_lossy(line)))?;
        let total = line.len() + bytes + 2 + 5;
        return Ok((input.len() >= total).then_some((total, false)));
    }
    match line {
        b"END\r\n" => Ok(Some((line.len(), true))),
        b"STORED\r\n" => Ok(Some((line.len(), false))),
        _ => Err(format!(
            "unexpected reply {:?}",
            String::from_utf8_lossy(line)
        )),
    }
}

/// The length of the first complete binary reply, and whether it was a
/// get's miss (status 1, key not found); None if incomplete.
pub(super) fn binary_reply(input: &[u8]) -> Option<(usize, bool)> {
    if input.len() < 24 {
        return None;
    }
    let body = u32::from_be_bytes([input[8], input[9], input[10], input[11]]) as usize;
    let status = u16::from_be_bytes([input[6], input[7]]);
    (input.len() >= 24 + body).then_some((24 + body, status == 1))
}

/// The length of the first complete meta reply in `input`, and whether it
/// was a get's miss (`EN`); None if incomplete. `VA <n> <flags>*` is
/// followed by n bytes of data and CRLF; `HD` (a set stored) and `MN`
/// are lines. Anything else (`NS`, `EX`, `NF`, `ERROR`, `CLIENT_ERROR`,
/// `SERVER_ERROR ...`) is an error.
pub(super) fn meta_reply(input: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let Some(end) = memchr::memchr(b'\n', input) else {
        return Ok(None);
    };
    let line = &input[..end + 1];
    let bad = || format!("unexpected reply {:?}", String::from_utf8_lossy(line));
    let word = line
        .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(b"");
    match word {
        b"VA" => {
            let bytes = line[3..]
                .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
                .find(|f| !f.is_empty())
                .and_then(|b| std::str::from_utf8(b).ok()?.parse::<usize>().ok())
                .ok_or_else(bad)?;
            let total = line.len() + bytes + 2;
            Ok((input.len() >= total).then_some((total, false)))
        }
        b"EN" => Ok(Some((line.len(), true))),
        b"HD" | b"MN" => Ok(Some((line.len(), false))),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(binary_reply(&r), Some((33, true)));
        assert_eq!(binary_reply(&r[..30]), None);
    }
}
