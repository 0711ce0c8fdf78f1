//! A record on flash: one item, in the layout it has in RAM (see `item`),
//! behind a checksum, so that a record read back is either whole and the
//! item it was written as, or rejected (a damaged, torn, stale or
//! never-written block is a miss, never a wrong value).
//!
//! ```text
//!  byte 0          4          8                          8+size     16-aligned
//!       +----------+----------+--------------------------+----------+
//!       | checksum | size u32 | item (header, key, value)| (zeros)  |
//!       +----------+----------+--------------------------+----------+
//!   checksum: low 32 bits of xxh3 over bytes 4 .. 8+size
//! ```
//!
//! Records start at 16-byte boundaries; an index entry holds the address
//! in 16-byte units and a size class (six bits) that says how many bytes to
//! read: the record rounded up on a scale of four steps per doubling, from
//! 256 bytes, so a read fetches at most a fifth more than the record.

use crate::item::{ItemPtr, ItemSpec};

/// Records start at multiples of this.
pub const ALIGN: usize = 16;
/// Bytes before the item.
pub const HEADER: usize = 8;
/// Size classes an entry can name.
pub const CLASSES: usize = 64;

/// Bytes a record of an item of `item_size` bytes takes.
#[inline]
pub fn record_size(item_size: usize) -> usize {
    (HEADER + item_size).next_multiple_of(ALIGN)
}

/// The largest record of size class `c` (bytes, a multiple of 16).
pub fn class_bytes(c: u8) -> usize {
    let c = u32::from(c);
    // 256 · 2^(c/4) with four linear steps per doubling.
    let octave = 256usize << (c / 4);
    (octave + octave / 4 * (c % 4) as usize).next_multiple_of(ALIGN)
}

/// The size class of a record of `size` bytes: the smallest class that
/// holds it. None when no class does (over 4 GiB).
pub fn class_of(size: usize) -> Option<u8> {
    (0..CLASSES as u8).find(|&c| class_bytes(c) >= size)
}

/// Writes a record of the item `spec` describes (key `key`, value `value`,
/// access time 0, state bits `state`) at the start of `out`, which must
/// hold `record_size(spec.size())` bytes; returns that size.
pub fn write(out: &mut [u8], spec: &ItemSpec, key: &[u8], value: &[u8], state: u8) -> usize {
    let size = spec.size();
    let total = record_size(size);
    assert!(out.len() >= total && size <= u32::MAX as usize);
    out[4..8].copy_from_slice(&(size as u32).to_le_bytes());
    // SAFETY: `out[8..8 + size]` is ours and holds the whole item.
    unsafe {
        ItemPtr::from_raw(out.as_mut_ptr().add(HEADER)).init(spec, key, &[value], 0, state);
    }
    out[HEADER + size..total].fill(0);
    let sum = checksum(&out[4..HEADER + size]);
    out[0..4].copy_from_slice(&sum.to_le_bytes());
    total
}

fn checksum(bytes: &[u8]) -> u32 {
    xxhash_rust::xxh3::xxh3_64(bytes) as u32
}

/// The item of the record at the start of `bytes`, if the record is whole
/// (its size fits in `bytes`, its checksum matches and the item's header
/// accounts for exactly its size); None otherwise.
pub fn verify(bytes: &[u8]) -> Option<&[u8]> {
    if bytes.len() < HEADER {
        return None;
    }
    let size = u32::from_le_bytes(bytes[4..8].try_into().ok()?) as usize;
    if size == 0 || HEADER + size > bytes.len() {
        return None;
    }
    let sum = u32::from_le_bytes(bytes[0..4].try_into().ok()?);
    if checksum(&bytes[4..HEADER + size]) != sum {
        return None;
    }
    let item = &bytes[HEADER..HEADER + size];
    // SAFETY: the item bytes are readable for `size` bytes (and the
    // header decoder reads no further than `checked_size` allows).
    let it = unsafe { ItemPtr::from_raw(item.as_ptr() as *mut u8) };
    (it.checked_size(size) == Some(size)).then_some(item)
}

/// The whole, verified records in `chunk[..len]` (read from page offset
/// `start`) from chunk offset `at` on and below page offset `end`:
/// `f(chunk offset, item bytes)` for each; padding and anything that does
/// not verify are skipped to the next `block`. Returns the chunk offset
/// where the next chunk's read should start (the first record not wholly
/// inside this one).
pub fn scan(
    chunk: &[u8],
    len: usize,
    start: usize,
    mut at: usize,
    end: usize,
    block: usize,
    mut f: impl FnMut(usize, &[u8]),
) -> usize {
    while start + at < end && at + HEADER <= len {
        let size = u32::from_le_bytes(chunk[at + 4..at + 8].try_into().expect("4 bytes"));
        let total = record_size(size as usize);
        if size == 0 || total > chunk.len() {
            // Padding (or not a record): on to the next block.
            at = (at + 1).next_multiple_of(block);
            continue;
        }
        if at + total > len {
            break;
        }
        match verify(&chunk[at..at + total]) {
            Some(item) => {
                f(at, item);
                at += total;
            }
            None => at = (at + 1).next_multiple_of(block),
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_with_at_most_a_quarter_more() {
        for c in 1..CLASSES as u8 {
            assert!(class_bytes(c) > class_bytes(c - 1));
        }
        for size in (16..2_000_000).step_by(997) {
            let c = class_of(size).unwrap();
            assert!(class_bytes(c) >= size);
            assert!(class_bytes(c) <= (size * 5 / 4).max(256) + ALIGN, "{size}");
        }
    }

    #[test]
    fn a_record_verifies_and_any_damage_is_caught() {
        let spec = ItemSpec {
            key_len: 3,
            value_len: 5,
            flags: 7,
            exptime: 100,
            cas: Some(42),
            ..ItemSpec::default()
        };
        let mut buf = vec![0xAAu8; 256];
        let n = write(&mut buf, &spec, b"key", b"value", 0);
        assert_eq!(n, record_size(spec.size()));
        assert_eq!(n % ALIGN, 0);
        let item = verify(&buf[..n]).expect("whole");
        // SAFETY: the item bytes are a whole item.
        let it = unsafe { ItemPtr::from_raw(item.as_ptr() as *mut u8) };
        assert_eq!(
            (it.key(), it.stored_value(), it.flags()),
            (&b"key"[..], &b"value"[..], 7)
        );
        assert_eq!((it.exptime(), it.stored_cas()), (100, Some(42)));
        for i in 0..HEADER + spec.size() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(verify(&bad[..n]).is_none(), "byte {i}");
        }
        assert!(verify(&buf[..n - ALIGN]).is_none(), "cut short");
        assert!(verify(&[0u8; 64]).is_none(), "never written");
    }
}
