//! A key's current state as the meta commands a replica applies:
//!
//! ```text
//!   ms <key> <bytes> F<flags> [T<unix exptime>] [E<cas>] q\r\n<value>\r\n
//!   ms <base64 key> <bytes> b F<flags> ... q\r\n<value>\r\n   (keys a text line cannot carry)
//!   md <key> q\r\n                                           (the key is gone)
//!   flush_all <delay> noreply\r\n
//! ```
//!
//! The expiry goes as an absolute unix time (memcached's `T` takes one
//! when it is over 30 days), so it is exact whenever the command is
//! applied; `E` gives the item the primary's CAS unique. The state is read
//! when the command is written (a GET, which reads the flash tier too), so
//! a replica ends with the key's latest state whatever order workers
//! queued it in.

use osmium_protocol::base64::base64_encode;
use osmium_store::{Lookup, Store};

/// Whether a key must go base64-encoded (`b`): a byte a text line cannot
/// carry in a key.
fn needs_base64(key: &[u8]) -> bool {
    key.iter().any(|&b| b <= b' ' || b == 0x7f)
}

fn put_key(out: &mut Vec<u8>, key: &[u8], binary: bool) -> bool {
    if binary || needs_base64(key) {
        base64_encode(key, out);
        true
    } else {
        out.extend_from_slice(key);
        false
    }
}

fn put_number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends the command that gives a replica `key`'s current state;
/// true when it is an `ms` (else the key is gone: `md`).
pub fn key_state(store: &Store, key: &[u8], out: &mut Vec<u8>) -> bool {
    let started = store.clock().process_started();
    let hit = store.get(key, None, |v| {
        write_ms(
            out,
            key,
            v.binary_key(),
            v.flags(),
            v.exptime(),
            v.cas(),
            started,
            v.value(),
        );
    });
    match hit {
        Lookup::Hit(()) => true,
        _ => {
            out.extend_from_slice(b"md ");
            let b = put_key(out, key, false);
            out.extend_from_slice(if b { b" b q\r\n" } else { b" q\r\n" });
            false
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn write_ms(
    out: &mut Vec<u8>,
    key: &[u8],
    binary_key: bool,
    flags: u32,
    exptime: u32,
    cas: u64,
    started: i64,
    value: &[u8],
) {
    out.extend_from_slice(b"ms ");
    let b = put_key(out, key, binary_key);
    out.push(b' ');
    put_number(out, value.len());
    if b {
        out.extend_from_slice(b" b");
    }
    out.extend_from_slice(b" F");
    put_number(out, flags);
    if exptime != 0 {
        out.extend_from_slice(b" T");
        put_number(out, started + i64::from(exptime));
    }
    if cas != 0 {
        out.extend_from_slice(b" E");
        put_number(out, cas);
    }
    out.extend_from_slice(b" q\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends a flush_all with its delay (0 or less: now).
pub fn flush(delay: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(b"flush_all ");
    put_number(out, delay.max(0));
    out.extend_from_slice(b" noreply\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_lines() {
        let mut out = Vec::new();
        write_ms(&mut out, b"k", false, 5, 100, 77, 1_000_000, b"val");
        assert_eq!(out, b"ms k 3 F5 T1000100 E77 q\r\nval\r\n");
        out.clear();
        write_ms(&mut out, b"a b", false, 0, 0, 0, 1, b"");
        assert_eq!(out, b"ms YSBi 0 b F0 q\r\n\r\n");
        out.clear();
        flush(-1, &mut out);
        assert_eq!(out, b"flush_all 0 noreply\r\n");
    }
}
