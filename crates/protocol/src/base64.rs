//! memcached's base64 codec (base64.c: Jouni Malinen's, as modified for
//! memcached), used for binary keys: a meta request with the `b` flag sends
//! its key in base64, and `k` returns it encoded again.
//!
//! Decoding follows memcached byte for byte, quirks included:
//!
//! * bytes outside the alphabet (and `=`) are skipped, wherever they are;
//! * the count of alphabet bytes must be a non-zero multiple of 4 and the
//!   decoded length (`count / 4 * 3`) must fit the output buffer;
//! * the first block holding a `=` ends decoding: one `=` drops one byte,
//!   two drop two, three or more are invalid;
//! * a result of 0 bytes is a failure (memcached returns 0 for both).
//!
//! Encoding writes no line breaks and pads with `=`.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// memcached's `dtable`: the value of each alphabet byte, 0 for `=`, 0x80
/// for bytes that are skipped.
static DECODE: [u8; 256] = decode_table();

const fn decode_table() -> [u8; 256] {
    let mut t = [0x80u8; 256];
    let mut i = 0;
    while i < 64 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t[b'=' as usize] = 0;
    t
}

/// memcached's `base64_decode` into `out` (whose length is memcached's
/// `out_len`): the decoded length, or None where memcached returns 0.
pub fn base64_decode(src: &[u8], out: &mut [u8]) -> Option<usize> {
    let count = src
        .iter()
        .filter(|&&c| DECODE[usize::from(c)] != 0x80)
        .count();
    if count == 0 || count % 4 != 0 || count / 4 * 3 > out.len() {
        return None;
    }
    let mut pos = 0;
    let mut block = [0u8; 4];
    let mut n = 0;
    let mut pad = 0;
    for &c in src {
        let v = DECODE[usize::from(c)];
        if v == 0x80 {
            continue;
        }
        if c == b'=' {
            pad += 1;
        }
        block[n] = v;
        n += 1;
        if n == 4 {
            out[pos] = (block[0] << 2) | (block[1] >> 4);
            out[pos + 1] = (block[1] << 4) | (block[2] >> 2);
            out[pos + 2] = (block[2] << 6) | block[3];
            pos += 3;
            n = 0;
            if pad > 0 {
                match pad {
                    1 => pos -= 1,
                    2 => pos -= 2,
                    _ => return None,
                }
                break;
            }
        }
    }
    (pos > 0).then_some(pos)
}

/// memcached's `base64_encode` (no line breaks), appended to `out`.
pub fn base64_encode(src: &[u8], out: &mut Vec<u8>) {
    let a = ALPHABET;
    let mut chunks = src.chunks_exact(3);
    for c in &mut chunks {
        out.extend_from_slice(&[
            a[usize::from(c[0] >> 2)],
            a[usize::from(((c[0] & 0x03) << 4) | (c[1] >> 4))],
            a[usize::from(((c[1] & 0x0f) << 2) | (c[2] >> 6))],
            a[usize::from(c[2] & 0x3f)],
        ]);
    }
    match *chunks.remainder() {
        [x] => out.extend_from_slice(&[
            a[usize::from(x >> 2)],
            a[usize::from((x & 0x03) << 4)],
            b'=',
            b'=',
        ]),
        [x, y] => out.extend_from_slice(&[
            a[usize::from(x >> 2)],
            a[usize::from(((x & 0x03) << 4) | (y >> 4))],
            a[usize::from((y & 0x0f) << 2)],
            b'=',
        ]),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_memcached_quirks() {
        let mut out = Vec::new();
        base64_encode(b"foo\x00bar", &mut out);
        assert_eq!(out, b"Zm9vAGJhcg==");
        let mut buf = [0u8; 64];
        let n = base64_decode(&out, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"foo\x00bar");
        // Bytes outside the alphabet are skipped.
        let n = base64_decode(b"Zm!9v", &mut buf).unwrap();
        assert_eq!(&buf[..n], b"foo");
        assert_eq!(base64_decode(b"Zm9", &mut buf), None);
        assert_eq!(base64_decode(b"", &mut buf), None);
        assert_eq!(base64_decode(b"!!!!", &mut buf), None);
        // Three pad bytes are invalid; a block of padding alone too.
        assert_eq!(base64_decode(b"Z===", &mut buf), None);
        assert_eq!(base64_decode(b"====", &mut buf), None);
        // Padding ends decoding, even mid-string.
        let n = base64_decode(b"Zg==Zm9v", &mut buf).unwrap();
        assert_eq!(&buf[..n], b"f");
        // The decoded length must fit the output (memcached's out_len).
        assert_eq!(base64_decode(b"Zm9v", &mut buf[..2]), None);
        assert_eq!(base64_decode(b"Zm9v", &mut buf[..3]), Some(3));
    }

    #[test]
    fn table_matches_memcached() {
        assert_eq!(DECODE[usize::from(b'=')], 0);
        assert_eq!(DECODE[usize::from(b'+')], 62);
        assert_eq!(DECODE[usize::from(b'/')], 63);
        assert_eq!(DECODE[usize::from(b'0')], 52);
        assert_eq!(DECODE[usize::from(b'a')], 26);
        assert_eq!(DECODE.iter().filter(|&&v| v != 0x80).count(), 65);
    }
}
