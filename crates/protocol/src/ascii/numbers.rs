//! Number parsing exactly as memcached 1.6.45 does it. Two families, and
//! which one reads an argument is part of the wire contract:
//!
//! **mcmc's strict `tokto*`** (vendor/mcmc/mcmc.c), used for almost every
//! numeric token (`mcmc_token_get_u32/u64/32`, and the meta flags' arguments
//! via `mcmc_token_get_flag_arg_*`): the token's bytes exactly.
//!
//! ```text
//! u32, u64:  digit*            at most 11 (u32) / 22 (u64) bytes
//! i32, i64:  '-'? digit*       at most 11 / 22 bytes, the sign included
//! ```
//!
//! No white space, no `+`, overflow is an error, and an empty token (or a
//! lone `-`) is 0: `touch k -` sets exptime 0. Leading zeros count towards
//! the length limit (`000000000001` is refused).
//!
//! **C's `safe_strto*`** (util.c over glibc `strtoul`/`strtol`), used only by
//! the classic storage commands for their flags and exptime
//! (`process_update_cmd_start`), and on the *raw line* from the token's
//! start, not on the token:
//!
//! ```text
//! space* ('+'|'-')? digit+ (space | NUL) ...     space: ' ' \t \n \v \f \r
//! ```
//!
//! Leading white space is skipped (past the token's end if the token is
//! white space), a 64-bit overflow is an error, and the result is stored
//! into 32 bits without a range check (`4294967296` flags are 0, exptime
//! `4294967297` is 1). An unsigned parse refuses a `-` only when the
//! 64-bit result looks negative (`-1` is refused, `-0` is 0). The end of
//! the slice stands for the C string's NUL.

/// mcmc's `MCMC_TOKTO32_MAX`: longest token the 32-bit parsers read.
const TOKTO32_MAX: usize = 11;
/// mcmc's `MCMC_TOKTO64_MAX`.
const TOKTO64_MAX: usize = 22;

/// Unsigned digits, at most `max` bytes; None on any other byte or overflow.
#[inline]
fn tokto_unsigned(t: &[u8], max: usize, limit: u64) -> Option<u64> {
    if t.len() > max {
        return None;
    }
    let mut sum: u64 = 0;
    for &b in t {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        sum = sum.checked_mul(10)?.checked_add(u64::from(d))?;
        if sum > limit {
            return None;
        }
    }
    Some(sum)
}

/// Signed digits with an optional leading `-`, at most `max` bytes.
#[inline]
fn tokto_signed(t: &[u8], max: usize, min: i64, maxv: i64) -> Option<i64> {
    if t.len() > max {
        return None;
    }
    let (negative, digits) = match t.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, t),
    };
    let mut sum: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        let d = i64::from(d);
        sum = if negative {
            sum.checked_mul(10)?.checked_sub(d)?
        } else {
            sum.checked_mul(10)?.checked_add(d)?
        };
        if sum < min || sum > maxv {
            return None;
        }
    }
    Some(sum)
}

/// mcmc's `mcmc_toktou32`.
#[inline]
pub fn tokto_u32(t: &[u8]) -> Option<u32> {
    tokto_unsigned(t, TOKTO32_MAX, u64::from(u32::MAX)).map(|v| v as u32)
}

/// mcmc's `mcmc_toktou64`.
#[inline]
pub fn tokto_u64(t: &[u8]) -> Option<u64> {
    tokto_unsigned(t, TOKTO64_MAX, u64::MAX)
}

/// mcmc's `mcmc_tokto32`.
#[inline]
pub fn tokto_i32(t: &[u8]) -> Option<i32> {
    tokto_signed(t, TOKTO32_MAX, i64::from(i32::MIN), i64::from(i32::MAX)).map(|v| v as i32)
}

/// mcmc's `mcmc_tokto64`.
#[inline]
pub fn tokto_i64(t: &[u8]) -> Option<i64> {
    tokto_signed(t, TOKTO64_MAX, i64::MIN, i64::MAX)
}

/// The argument of a meta flag token (`T30` → `30`), as
/// `mcmc_token_get_flag_arg_*` takes it: None when the flag has none.
#[inline]
pub fn flag_arg(token: &[u8]) -> Option<&[u8]> {
    match token {
        [_, arg @ ..] if !arg.is_empty() => Some(arg),
        _ => None,
    }
}

/// C `isspace` in the "C" locale.
#[inline]
pub fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What glibc's `strtoull`/`strtoll` read from a C string.
struct Strto {
    negative: bool,
    /// The magnitude, None on a 64-bit overflow.
    magnitude: Option<u64>,
    /// `endptr - str`; 0 when no digits were read (`str == endptr`).
    end: usize,
}

fn strto(s: &[u8]) -> Strto {
    let byte = |i: usize| s.get(i).copied().unwrap_or(0);
    let mut i = 0;
    while is_c_space(byte(i)) {
        i += 1;
    }
    let mut negative = false;
    if byte(i) == b'+' || byte(i) == b'-' {
        negative = byte(i) == b'-';
        i += 1;
    }
    let first = i;
    let mut magnitude = Some(0u64);
    while byte(i).is_ascii_digit() {
        let d = u64::from(byte(i) - b'0');
        magnitude = magnitude.and_then(|m| m.checked_mul(10)?.checked_add(d));
        i += 1;
    }
    Strto {
        negative,
        magnitude,
        end: if i > first { i } else { 0 },
    }
}

/// `xisspace(*endptr) || (*endptr == '\0' && endptr != str)`, given that
/// digits were read.
#[inline]
fn ends_cleanly(s: &[u8], end: usize) -> bool {
    let b = s.get(end).copied().unwrap_or(0);
    is_c_space(b) || b == 0
}

/// `strtoull` then util.c's checks, as a u64.
fn strtoull_checked(s: &[u8]) -> Option<u64> {
    let r = strto(s);
    if r.end == 0 {
        return None;
    }
    let magnitude = r.magnitude?;
    if !ends_cleanly(s, r.end) {
        return None;
    }
    let v = if r.negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    // Only when the result looks negative is a '-' in [str, endptr) refused.
    if (v as i64) < 0 && s[..r.end].contains(&b'-') {
        return None;
    }
    Some(v)
}

/// util.c `safe_strtoull` on a C string starting at `s`.
pub fn safe_strtoull(s: &[u8]) -> Option<u64> {
    strtoull_checked(s)
}

/// util.c `safe_strtoul` (64-bit `unsigned long` stored into a `uint32_t`);
/// memcached's `safe_strtoflags` without LARGE_CLIENT_FLAGS.
pub fn safe_strtoul(s: &[u8]) -> Option<u32> {
    strtoull_checked(s).map(|v| v as u32)
}

/// util.c `safe_strtol` (64-bit `long` stored into an `int32_t`).
pub fn safe_strtol(s: &[u8]) -> Option<i32> {
    let r = strto(s);
    if r.end == 0 {
        return None;
    }
    // strtol reports ERANGE outside [i64::MIN, i64::MAX].
    let magnitude = r.magnitude?;
    let v = if r.negative {
        if magnitude > 1u64 << 63 {
            return None;
        }
        (magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(magnitude).ok()?
    };
    if !ends_cleanly(s, r.end) {
        return None;
    }
    Some(v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcmc_unsigned() {
        assert_eq!(tokto_u32(b"0"), Some(0));
        assert_eq!(tokto_u32(b""), Some(0));
        assert_eq!(tokto_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(tokto_u32(b"4294967296"), None);
        assert_eq!(tokto_u32(b"00000000001"), Some(1));
        assert_eq!(tokto_u32(b"000000000001"), None);
        assert_eq!(tokto_u32(b"+1"), None);
        assert_eq!(tokto_u32(b"-0"), None);
        assert_eq!(tokto_u32(b" 1"), None);
        assert_eq!(tokto_u32(b"1\r"), None);
        assert_eq!(tokto_u32(b"\xb1"), None);
        assert_eq!(tokto_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(tokto_u64(b"18446744073709551616"), None);
        assert_eq!(tokto_u64(b"0000000000000000000001"), Some(1));
        assert_eq!(tokto_u64(b"00000000000000000000001"), None);
    }

    #[test]
    fn mcmc_signed() {
        assert_eq!(tokto_i32(b"-1"), Some(-1));
        assert_eq!(tokto_i32(b"-"), Some(0));
        assert_eq!(tokto_i32(b""), Some(0));
        assert_eq!(tokto_i32(b"-0"), Some(0));
        assert_eq!(tokto_i32(b"2147483647"), Some(i32::MAX));
        assert_eq!(tokto_i32(b"2147483648"), None);
        assert_eq!(tokto_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(tokto_i32(b"-2147483649"), None);
        assert_eq!(tokto_i32(b"--1"), None);
        assert_eq!(tokto_i32(b"1-"), None);
        assert_eq!(tokto_i32(b"+1"), None);
        assert_eq!(tokto_i32(b"000000000001"), None);
        assert_eq!(tokto_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(tokto_i64(b"9223372036854775808"), None);
    }

    #[test]
    fn flag_args() {
        assert_eq!(flag_arg(b"T30"), Some(&b"30"[..]));
        assert_eq!(flag_arg(b"T"), None);
        assert_eq!(flag_arg(b""), None);
    }

    #[test]
    fn c_unsigned_on_the_raw_line() {
        assert_eq!(safe_strtoul(b"5 0 3\r\n"), Some(5));
        assert_eq!(safe_strtoul(b"+0 0 1\r\n"), Some(0));
        assert_eq!(safe_strtoul(b"4294967296 0 1\r\n"), Some(0));
        assert_eq!(safe_strtoul(b"-1 0 1\r\n"), None);
        assert_eq!(safe_strtoul(b"-0 0 1\r\n"), Some(0));
        // `strtoul` negates: -4294967295 wraps to a small positive 64-bit
        // value, which is not refused.
        assert_eq!(safe_strtoul(b"-18446744073709551615 "), Some(1));
        assert_eq!(safe_strtoul(b"18446744073709551616 "), None);
        assert_eq!(safe_strtoul(b"5x 0 1"), None);
        assert_eq!(safe_strtoul(b"5\t 0"), Some(5));
        // White space is skipped across token boundaries.
        assert_eq!(safe_strtoul(b"\t 7 1\r\n"), Some(7));
        assert_eq!(safe_strtoul(b"5\0junk"), Some(5));
        assert_eq!(safe_strtoul(b"5"), Some(5));
        assert_eq!(safe_strtoul(b""), None);
        assert_eq!(safe_strtoul(b"-"), None);
        assert_eq!(safe_strtoull(b"18446744073709551615\n"), Some(u64::MAX));
        assert_eq!(safe_strtoull(b"-1\n"), None);
    }

    #[test]
    fn c_signed_truncates_to_32_bits() {
        assert_eq!(safe_strtol(b"-1 1\r\n"), Some(-1));
        assert_eq!(safe_strtol(b"2147483648 "), Some(i32::MIN));
        assert_eq!(safe_strtol(b"4294967297 "), Some(1));
        assert_eq!(safe_strtol(b"9223372036854775807 "), Some(-1));
        assert_eq!(safe_strtol(b"9223372036854775808 "), None);
        assert_eq!(safe_strtol(b"-9223372036854775808 "), Some(0));
        assert_eq!(safe_strtol(b"-9223372036854775809 "), None);
        assert_eq!(safe_strtol(b"1.5 "), None);
        assert_eq!(safe_strtol(b"+3\r\n"), Some(3));
    }
}
