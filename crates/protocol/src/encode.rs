//! Response encoding for the text protocol: the `VALUE` header of a hit and
//! decimal numbers, written into a caller-owned output buffer (no allocation
//! once the buffer has grown to its working size).

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n`.
#[inline]
pub fn value_header(out: &mut Vec<u8>, key: &[u8], flags: u32, len: usize, cas: Option<u64>) {
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    out.extend_from_slice(num.format(flags).as_bytes());
    out.push(b' ');
    out.extend_from_slice(num.format(len).as_bytes());
    if let Some(cas) = cas {
        out.push(b' ');
        out.extend_from_slice(num.format(cas).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends a status or error line followed by `\r\n`.
#[inline]
pub fn line(out: &mut Vec<u8>, msg: &[u8]) {
    out.extend_from_slice(msg);
    out.extend_from_slice(b"\r\n");
}

/// Appends a decimal number followed by `\r\n` (incr/decr replies).
#[inline]
pub fn number_line(out: &mut Vec<u8>, n: u64) {
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(num.format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `STAT <name> <value>\r\n`.
#[inline]
pub fn stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// memcached's `uriencode` (util.c), how `watch`, `lru_crawler metadump` and
/// `stats hotkeys` show keys: ASCII letters, digits and `-._~` stay, every
/// other byte becomes `%XX` (upper-case hex).
pub fn uri_encode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_are_uri_encoded_as_memcached_does() {
        let mut out = Vec::new();
        super::uri_encode(b"a-b.c_d~e f/g%\x00", &mut out);
        assert_eq!(out, b"a-b.c_d~e%20f%2Fg%25%00");
    }

    #[test]
    fn header() {
        let mut out = Vec::new();
        super::value_header(&mut out, b"k", 7, 3, Some(42));
        super::value_header(&mut out, b"k", 0, 0, None);
        assert_eq!(out, b"VALUE k 7 3 42\r\nVALUE k 0 0\r\n");
    }
}
