//! The item header's variable part (drawn in `item`'s module comment): the
//! ext byte and its optional fields, packed values' codec byte and raw
//! length included; what an item will hold and how many bytes that takes
//! ([`ItemSpec`]); writing a header; decoding one into a [`Layout`]; and
//! the recovery's trust gate (`checked_size`), which decodes bytes that may
//! be no header at all.
//!
//! A raw item's decoding is the same work as before packed values existed:
//! the packed fields are looked at only when the ext byte is present and
//! says PACKED, and their decoding is out of line.

use super::{ItemPtr, STATE_EXT};

pub(super) const EXT_FLAGS: u8 = 1;
pub(super) const EXT_EXPTIME: u8 = 2;
pub(super) const EXT_CAS: u8 = 4;
/// Ext bit: the value is a zstd frame; codec and raw length follow.
pub const EXT_PACKED: u8 = 8;
/// Ext bit: the value was tried and did not compress.
pub const EXT_RAW_TRIED: u8 = 16;
const EXT_KNOWN: u8 = EXT_FLAGS | EXT_EXPTIME | EXT_CAS | EXT_PACKED | EXT_RAW_TRIED;
/// The largest raw length a header may name when the caller has no `-I`
/// at hand (memcached's largest `-I`).
pub const RAW_LEN_MAX: usize = 1 << 30;

pub(super) const OFF_KLEN: usize = 3;
pub(super) const OFF_VLEN: usize = 4;

/// What an item will hold: enough to size and write it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ItemSpec {
    /// Key length, 1..=250.
    pub key_len: usize,
    /// Bytes of value in the item, without `\r\n` (the frame's length
    /// when `packed`).
    pub value_len: usize,
    /// Client flags (stored only when not 0).
    pub flags: u32,
    /// Relative expiry, 0 = never.
    pub exptime: u32,
    /// Reserve the exptime field even when `exptime` is 0 (its expiry may
    /// be set in place later).
    pub exptime_field: bool,
    /// A CAS unique to store (else the location's).
    pub cas: Option<u64>,
    /// The value is a zstd frame: (codec byte, the client's length).
    pub packed: Option<(u8, usize)>,
    /// The value was tried and did not compress (ignored when `packed`).
    pub raw_tried: bool,
}

impl ItemSpec {
    /// The ext byte this item's header gets (0: none).
    #[inline]
    pub(crate) fn ext(&self) -> u8 {
        let mut x = 0;
        if self.flags != 0 {
            x |= EXT_FLAGS;
        }
        if self.exptime != 0 || self.exptime_field {
            x |= EXT_EXPTIME;
        }
        if self.cas.is_some() {
            x |= EXT_CAS;
        }
        if self.packed.is_some() {
            x |= EXT_PACKED;
        } else if self.raw_tried {
            x |= EXT_RAW_TRIED;
        }
        x
    }

    /// Bytes this item occupies in a segment.
    #[inline]
    pub fn size(&self) -> usize {
        let x = self.ext();
        let ext = if x == 0 {
            0
        } else {
            1 + ext_fields_len(x)
                + self
                    .packed
                    .map_or(0, |(_, raw_len)| 1 + varint_len(raw_len))
        };
        4 + varint_len(self.value_len) + ext + self.key_len + self.value_len
    }

    /// The client's value length (`value_len` unless packed).
    #[inline]
    pub fn raw_len(&self) -> usize {
        self.packed.map_or(self.value_len, |(_, raw_len)| raw_len)
    }

    /// This spec with a new raw value of `value_len` bytes: not packed,
    /// not tried (a value the item's copy does not take from the item).
    #[inline]
    pub fn with_raw_value(self, value_len: usize) -> ItemSpec {
        ItemSpec {
            value_len,
            packed: None,
            raw_tried: false,
            ..self
        }
    }
}

/// Bytes of the fixed-size ext fields (the packed fields, whose rawlen
/// varies, are not counted).
#[inline]
fn ext_fields_len(x: u8) -> usize {
    (if x & EXT_FLAGS != 0 { 4 } else { 0 })
        + (if x & EXT_EXPTIME != 0 { 4 } else { 0 })
        + (if x & EXT_CAS != 0 { 8 } else { 0 })
}

#[inline]
fn varint_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// Writes `n` as LEB128 at `q` and returns the address after it.
///
/// # Safety
/// `q` must be writable for `varint_len(n)` bytes.
#[inline]
unsafe fn write_varint(mut q: *mut u8, mut n: usize) -> *mut u8 {
    // SAFETY: the caller's contract covers the varint_len(n) bytes written.
    unsafe {
        while n >= 0x80 {
            q.write((n as u8 & 0x7f) | 0x80);
            q = q.add(1);
            n >>= 7;
        }
        q.write(n as u8);
        q.add(1)
    }
}

/// Bytes a plain item (no flags, expiry or stored CAS) occupies.
#[inline]
pub fn item_size(key_len: usize, value_len: usize) -> usize {
    ItemSpec {
        key_len,
        value_len,
        ..ItemSpec::default()
    }
    .size()
}

/// Where the variable parts of an item are, decoded from its header.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    /// The ext byte (0 without one).
    pub(super) ext: u8,
    /// Offset of the first ext field.
    pub(super) fields: usize,
    pub(super) key: usize,
    pub(super) key_len: usize,
    /// Bytes of value in the item.
    pub(super) stored_len: usize,
    /// The client's length (`stored_len` unless packed).
    pub(super) raw_len: usize,
}

impl ItemPtr {
    /// Writes the item's header (everything but its key and value) with
    /// access time 0 and `state` (the EXT bit is set from `spec`), and
    /// returns where its key goes.
    ///
    /// # Safety
    /// The slot must be exclusively owned and `spec.size()` bytes long.
    pub unsafe fn write_header(self, spec: &ItemSpec, state: u8) -> *mut u8 {
        let p = self.0;
        let x = spec.ext();
        let state = (state & (STATE_EXT - 1)) | if x != 0 { STATE_EXT } else { 0 };
        // SAFETY: the caller guarantees exclusive ownership of a slot of
        // spec.size() bytes; every write below stays inside it.
        unsafe {
            (p.add(self.atime_off()) as *mut u16).write(0);
            p.add(self.state_off()).write(state);
            p.add(OFF_KLEN).write(spec.key_len as u8);
            let mut q = write_varint(p.add(OFF_VLEN), spec.value_len);
            if x != 0 {
                q.write(x);
                q = q.add(1);
                if x & EXT_FLAGS != 0 {
                    (q as *mut [u8; 4]).write(spec.flags.to_le_bytes());
                    q = q.add(4);
                }
                if x & EXT_EXPTIME != 0 {
                    (q as *mut [u8; 4]).write(spec.exptime.to_le_bytes());
                    q = q.add(4);
                }
                if x & EXT_CAS != 0 {
                    (q as *mut [u8; 8]).write(spec.cas.unwrap_or(0).to_le_bytes());
                    q = q.add(8);
                }
                if let Some((codec, raw_len)) = spec.packed {
                    q.write(codec);
                    q = write_varint(q.add(1), raw_len);
                }
            }
            q
        }
    }

    /// The item's size if its header is sound and the item fits in `room`
    /// bytes (a recovery stepping over items it cannot trust: see
    /// `recover`); None for bytes that are no item header. A packed value's
    /// raw length may be at most [`RAW_LEN_MAX`] (see `checked_size_within`).
    pub fn checked_size(self, room: usize) -> Option<usize> {
        self.checked_size_within(room, RAW_LEN_MAX)
    }

    /// `checked_size` for a cache whose values are at most `raw_max`
    /// bytes (`-I`): a packed value must name a raw length from
    /// `codec::PACK_MIN` to `raw_max` that is longer than its frame. The
    /// codec byte's dictionary is the caller's to check.
    pub fn checked_size_within(self, room: usize, raw_max: usize) -> Option<usize> {
        if room < super::HEADER_SIZE {
            return None;
        }
        let key_len = self.byte(OFF_KLEN) as usize;
        if !(1..=250).contains(&key_len) {
            return None;
        }
        let (value_len, mut off) = self.checked_varint(OFF_VLEN, room)?;
        if self.state() & STATE_EXT != 0 {
            if off >= room {
                return None;
            }
            let x = self.byte(off);
            if x == 0
                || x & !EXT_KNOWN != 0
                || x & (EXT_PACKED | EXT_RAW_TRIED) == EXT_PACKED | EXT_RAW_TRIED
            {
                return None;
            }
            off += 1 + ext_fields_len(x);
            if x & EXT_PACKED != 0 {
                // The codec byte, then the raw length.
                off += 1;
                if off > room {
                    return None;
                }
                let (raw_len, next) = self.checked_varint(off, room)?;
                if !(crate::codec::PACK_MIN..=raw_max).contains(&raw_len) || value_len >= raw_len {
                    return None;
                }
                off = next;
            }
        }
        let size = off.checked_add(key_len)?.checked_add(value_len)?;
        (size <= room).then_some(size)
    }

    /// A LEB128 number at `off` that ends inside `room` (at most 5
    /// bytes), and the offset after it.
    fn checked_varint(self, mut off: usize, room: usize) -> Option<(usize, usize)> {
        let mut n = 0usize;
        let mut shift = 0;
        loop {
            if off >= room || shift > 28 {
                return None;
            }
            let b = self.byte(off);
            off += 1;
            n |= ((b & 0x7f) as usize) << shift;
            if b & 0x80 == 0 {
                return Some((n, off));
            }
            shift += 7;
        }
    }

    #[inline]
    pub(super) fn byte(self, off: usize) -> u8 {
        // SAFETY: header bytes are immutable after init and inside the slot.
        unsafe { self.0.add(off).read() }
    }

    /// Decodes the header's lengths and offsets. A raw item costs what it
    /// did before packed values: the packed fields are read only when the
    /// ext byte (present) says PACKED, out of line.
    #[inline]
    pub(super) fn layout(self) -> Layout {
        let key_len = self.byte(OFF_KLEN) as usize;
        let (value_len, off) = self.varint(OFF_VLEN);
        let (ext, fields, key, raw_len) = if self.state() & STATE_EXT != 0 {
            let x = self.byte(off);
            let key = off + 1 + ext_fields_len(x);
            if x & EXT_PACKED != 0 {
                let (raw_len, key) = self.packed_fields(key);
                (x, off + 1, key, raw_len)
            } else {
                (x, off + 1, key, value_len)
            }
        } else {
            (0, off, off, value_len)
        };
        Layout {
            ext,
            fields,
            key,
            key_len,
            stored_len: value_len,
            raw_len,
        }
    }

    /// The raw length of a packed value whose codec byte is at `off`, and
    /// the offset after the raw length (where the key starts).
    #[cold]
    #[inline(never)]
    fn packed_fields(self, off: usize) -> (usize, usize) {
        self.varint(off + 1)
    }

    /// The codec byte of a packed item (whose layout is `l`).
    #[inline]
    pub(super) fn codec(self, l: &Layout) -> u8 {
        self.byte(l.fields + ext_fields_len(l.ext))
    }

    /// A LEB128 number at `off` (at most 5 bytes, even in bytes that are
    /// not a header: a lock-free reader may decode a stale location; see
    /// index) and the offset after it.
    #[inline]
    fn varint(self, mut off: usize) -> (usize, usize) {
        let mut n = 0usize;
        let mut shift = 0;
        loop {
            let b = self.byte(off);
            off += 1;
            n |= ((b & 0x7f) as usize) << shift;
            if b & 0x80 == 0 || shift == 28 {
                return (n, off);
            }
            shift += 7;
        }
    }

    /// Offset of ext field `bit` (which must be present).
    #[inline]
    pub(super) fn field(l: &Layout, bit: u8) -> usize {
        let mut off = l.fields;
        if bit > EXT_FLAGS && l.ext & EXT_FLAGS != 0 {
            off += 4;
        }
        if bit > EXT_EXPTIME && l.ext & EXT_EXPTIME != 0 {
            off += 4;
        }
        off
    }
}
