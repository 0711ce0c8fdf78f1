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
//! queued it in. The commands are written by the shared client-side
//! codec (`osmium_protocol::client::encode`).

use osmium_protocol::client::encode;
use osmium_store::{Corrupt, Lookup, Store, ValueRef};

/// Appends the command that gives a replica `key`'s current state;
/// true when it is an `ms` (else the key is gone: `md`).
pub(crate) fn key_state(store: &Store, key: &[u8], out: &mut Vec<u8>) -> bool {
    let started = store.clock().process_started();
    let start = out.len();
    let mut corrupt = false;
    let hit = store.get(key, None, |v| {
        // A packed value goes as the client's bytes (the replica packs on
        // its own terms).
        corrupt = write_ms(
            out,
            key,
            v.binary_key(),
            v.flags(),
            v.exptime(),
            v.cas(),
            started,
            v.value(),
        )
        .is_err();
    });
    if corrupt {
        // A packed value that does not decode: the key is gone here too.
        out.truncate(start);
        store.drop_corrupt(key);
    }
    match hit {
        Lookup::Hit(()) if !corrupt => true,
        _ => {
            encode::meta(out, b"md", key, None, false).flag(b'q').end();
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
    value: ValueRef<'_>,
) -> Result<(), Corrupt> {
    let mut ms = encode::meta(out, b"ms", key, Some(value.len()), binary_key).num(b'F', flags);
    if exptime != 0 {
        ms = ms.num(b'T', started + i64::from(exptime));
    }
    if cas != 0 {
        ms = ms.num(b'E', cas);
    }
    match value.as_raw() {
        Some(raw) => ms.flag(b'q').data(raw),
        None => {
            ms.flag(b'q').end();
            value.append_to(out)?;
            out.extend_from_slice(b"\r\n");
        }
    }
    Ok(())
}

/// Appends a flush_all with its delay (0 or less: now).
pub(crate) fn flush(delay: i64, out: &mut Vec<u8>) {
    let mut n = itoa::Buffer::new();
    encode::line(
        out,
        &[b"flush_all", n.format(delay.max(0)).as_bytes(), b"noreply"],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_lines() {
        let mut out = Vec::new();
        let raw = |v: &'static [u8]| ValueRef::Raw(v);
        write_ms(&mut out, b"k", false, 5, 100, 77, 1_000_000, raw(b"val")).unwrap();
        assert_eq!(out, b"ms k 3 F5 T1000100 E77 q\r\nval\r\n");
        out.clear();
        write_ms(&mut out, b"a b", false, 0, 0, 0, 1, raw(b"")).unwrap();
        assert_eq!(out, b"ms YSBi 0 b F0 q\r\n\r\n");
        out.clear();
        flush(-1, &mut out);
        assert_eq!(out, b"flush_all 0 noreply\r\n");
        out.clear();
        write_ms(&mut out, b"k", true, 0, 0, 0, 1, raw(b"v")).unwrap();
        assert_eq!(out, b"ms aw== 1 b F0 q\r\nv\r\n");
    }
}
