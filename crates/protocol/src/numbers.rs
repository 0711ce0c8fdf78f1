//! Number parsing exactly as memcached does it.
//!
//! memcached parses every numeric token with glibc's `strtol`/`strtoul`/
//! `strtoull` wrapped in its `safe_strto*` helpers (util.c). Their quirks are
//! part of the wire contract, so they are reproduced here byte for byte:
//!
//! * leading C white space (`' '`, `\t`, `\n`, `\v`, `\f`, `\r`) is skipped and
//!   an optional `+` or `-` sign is accepted;
//! * the number must be followed by the end of the token or a C white-space
//!   byte (`"5\t"` is 5, `"5x"` is an error);
//! * a 64-bit overflow is an error (`ERANGE`);
//! * `strtoul` is 64 bits wide on Linux, and memcached stores its result in a
//!   `uint32_t` without a range check, so `4294967296` parses as 0;
//!   likewise `strtol` results are truncated to `int32_t`;
//! * a negative number given to an unsigned parse is rejected only when the
//!   wrapped result looks negative as a signed value (`"-0"` is accepted).

/// C `isspace` in the "C" locale.
#[inline]
pub fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Result of glibc `strtoull`/`strtoll` scanning: the magnitude read, the
/// sign, where scanning stopped, and whether the magnitude overflowed u64.
struct Scan {
    magnitude: u64,
    negative: bool,
    end: usize,
    overflow: bool,
    digits: bool,
}

fn scan(tok: &[u8]) -> Scan {
    let mut i = 0;
    while i < tok.len() && is_c_space(tok[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < tok.len() && (tok[i] == b'+' || tok[i] == b'-') {
        negative = tok[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut magnitude: u64 = 0;
    let mut overflow = false;
    while i < tok.len() && tok[i].is_ascii_digit() {
        let d = u64::from(tok[i] - b'0');
        match magnitude.checked_mul(10).and_then(|m| m.checked_add(d)) {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
        i += 1;
    }
    let digits = i > start;
    Scan {
        magnitude,
        negative,
        end: if digits { i } else { 0 },
        overflow,
        digits,
    }
}

#[inline]
fn ends_cleanly(tok: &[u8], end: usize) -> bool {
    end == tok.len() || is_c_space(tok[end]) || tok[end] == 0
}

/// memcached's `safe_strtoull`: a 64-bit unsigned decimal.
pub fn safe_strtoull(tok: &[u8]) -> Option<u64> {
    let s = scan(tok);
    if !s.digits || s.overflow || !ends_cleanly(tok, s.end) {
        return None;
    }
    let value = if s.negative {
        s.magnitude.wrapping_neg()
    } else {
        s.magnitude
    };
    if (value as i64) < 0 && tok.contains(&b'-') {
        return None;
    }
    Some(value)
}

/// memcached's `safe_strtoul`: `strtoul` (64-bit) stored into a `uint32_t`.
pub fn safe_strtoul(tok: &[u8]) -> Option<u32> {
    safe_strtoull(tok).map(|v| v as u32)
}

/// memcached's `safe_strtol`: `strtol` (64-bit) stored into an `int32_t`.
pub fn safe_strtol(tok: &[u8]) -> Option<i32> {
    let s = scan(tok);
    if !s.digits || !ends_cleanly(tok, s.end) {
        return None;
    }
    // strtol overflows outside [i64::MIN, i64::MAX].
    let limit = if s.negative {
        1u64 << 63
    } else {
        i64::MAX as u64
    };
    if s.overflow || s.magnitude > limit {
        return None;
    }
    let v = if s.negative {
        (s.magnitude as i64).wrapping_neg()
    } else {
        s.magnitude as i64
    };
    Some(v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_64() {
        assert_eq!(safe_strtoull(b"0"), Some(0));
        assert_eq!(safe_strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(safe_strtoull(b"18446744073709551616"), None);
        assert_eq!(safe_strtoull(b"-1"), None);
        assert_eq!(safe_strtoull(b"-0"), Some(0));
        assert_eq!(safe_strtoull(b"+7"), Some(7));
        assert_eq!(safe_strtoull(b"\t7"), Some(7));
        assert_eq!(safe_strtoull(b"7\r"), Some(7));
        assert_eq!(safe_strtoull(b"7x"), None);
        assert_eq!(safe_strtoull(b""), None);
        assert_eq!(safe_strtoull(b"-"), None);
        assert_eq!(safe_strtoull(b"abc"), None);
    }

    #[test]
    fn unsigned_32_truncates_like_memcached() {
        assert_eq!(safe_strtoul(b"4294967295"), Some(u32::MAX));
        assert_eq!(safe_strtoul(b"4294967296"), Some(0));
        assert_eq!(safe_strtoul(b"-5"), None);
    }

    #[test]
    fn signed_32_truncates_like_memcached() {
        assert_eq!(safe_strtol(b"-1"), Some(-1));
        assert_eq!(safe_strtol(b"2147483648"), Some(i32::MIN));
        assert_eq!(safe_strtol(b"4294967297"), Some(1));
        assert_eq!(safe_strtol(b"9223372036854775808"), None);
        assert_eq!(safe_strtol(b"-9223372036854775808"), Some(0));
        assert_eq!(safe_strtol(b"1.5"), None);
    }
}
