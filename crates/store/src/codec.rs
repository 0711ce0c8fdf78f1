//! Packed values: the zstd frames an item may hold in place of its value
//! (see `item`, `EXT_PACKED`), how they are made ([`Packer`]) and how a
//! reader gets the client's bytes back ([`ValueRef`]).
//!
//! A packed value is one zstd frame in the magicless format, without
//! content size, checksum or dictionary id (the item's header holds the
//! raw length and the codec byte; flash records have their own checksum),
//! so the frame header is 2 bytes. Values under [`PACK_MIN`] bytes are
//! never packed, and a value is kept packed only when that saves at least
//! max(16 bytes, 12.5 %) of it ([`Packer::pack`]).
//!
//! Decompression runs on the reader's thread with a per-thread `DCtx`
//! made at the thread's first packed read (one allocation per thread
//! lifetime), straight into the destination: the reply buffer grown by
//! the raw length ([`ValueRef::append_to`]) or a slot of item memory
//! ([`ValueRef::write_into`]). A frame that does not decode to exactly the
//! raw length is [`Corrupt`].
//!
//! A codec byte other than 0 names a dictionary (`dict`): the frame was
//! made with its `CDict` ([`Packer::pack_with`]) and is decoded with its
//! `DDict`, found lock-free in the store's `DictTable` by the whole codec
//! byte (slot and generation); a codec byte the table does not hold is
//! [`Corrupt`].

use std::cell::RefCell;

use zstd::zstd_safe::{CCtx, CParameter, DCtx, DParameter, FrameFormat, ResetDirective};

use crate::dict::{Dict, DictTable, CODEC_PLAIN};

/// Values shorter than this are never packed.
pub const PACK_MIN: usize = 64;

// The smallest size class (`dict::class_of`) starts at PACK_MIN.
const _: () = assert!(PACK_MIN == 1 << crate::dict::CLASS_MIN_LOG2);

/// The zstd level of `-o compress_level`'s default.
pub const DEFAULT_LEVEL: i32 = 1;

/// A packed value that does not decode to its raw length (or names a
/// dictionary that is not loaded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corrupt;

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("packed value does not decode")
    }
}

impl std::error::Error for Corrupt {}

/// An item's value as a reader gets it: its bytes, or a frame that
/// decodes to them.
#[derive(Clone, Copy)]
pub enum ValueRef<'a> {
    /// The client's bytes, in item memory.
    Raw(&'a [u8]),
    /// A zstd frame (see the module comment).
    Packed {
        /// The frame, in item memory.
        frame: &'a [u8],
        /// The codec byte (dictionary slot and generation; 0 = none).
        codec: u8,
        /// The client's length.
        raw_len: u32,
        /// The dictionaries `codec` may name.
        dicts: &'a DictTable,
    },
}

impl<'a> ValueRef<'a> {
    /// The client's length.
    #[inline]
    pub fn len(&self) -> usize {
        match *self {
            ValueRef::Raw(v) => v.len(),
            ValueRef::Packed { raw_len, .. } => raw_len as usize,
        }
    }

    /// An empty value.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes themselves when the value is raw (for the paths that
    /// send or copy item memory as it is).
    #[inline]
    pub fn as_raw(&self) -> Option<&'a [u8]> {
        match *self {
            ValueRef::Raw(v) => Some(v),
            ValueRef::Packed { .. } => None,
        }
    }

    /// Appends the client's bytes to `out`. On `Err`, `out` is as it was.
    #[inline]
    pub fn append_to(&self, out: &mut Vec<u8>) -> Result<(), Corrupt> {
        match *self {
            ValueRef::Raw(v) => {
                out.extend_from_slice(v);
                Ok(())
            }
            ValueRef::Packed { .. } => {
                let at = out.len();
                // The buffer grows as it would for a raw copy of the same
                // length; the zeroing is the price of a safe destination.
                out.resize(at + self.len(), 0);
                let r = self.write_into(&mut out[at..]);
                if r.is_err() {
                    out.truncate(at);
                }
                r
            }
        }
    }

    /// Writes the client's bytes into `dst`, which must be exactly
    /// [`ValueRef::len`] bytes long (else `Err`). On `Err`, `dst` holds
    /// whatever the decoder left there.
    pub fn write_into(&self, dst: &mut [u8]) -> Result<(), Corrupt> {
        if dst.len() != self.len() {
            return Err(Corrupt);
        }
        match *self {
            ValueRef::Raw(v) => {
                dst.copy_from_slice(v);
                Ok(())
            }
            ValueRef::Packed {
                frame,
                codec,
                dicts,
                ..
            } => unpack(frame, codec, dicts, dst),
        }
    }

    /// The client's bytes in a new vector (recaching a flash item,
    /// replicas, tests: never a GET).
    pub fn to_vec(self) -> Result<Vec<u8>, Corrupt> {
        let mut v = Vec::new();
        self.append_to(&mut v)?;
        Ok(v)
    }
}

impl std::fmt::Debug for ValueRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueRef::Raw(v) => f.debug_tuple("Raw").field(&v.len()).finish(),
            ValueRef::Packed {
                frame,
                codec,
                raw_len,
                ..
            } => f
                .debug_struct("Packed")
                .field("frame", &frame.len())
                .field("codec", codec)
                .field("raw_len", raw_len)
                .finish(),
        }
    }
}

/// Counts of the packed items linked in a part of the index (a shard,
/// or a write head's unlocked swaps: only their sum means anything, so
/// every figure wraps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PackedCounts {
    /// Packed items.
    pub items: u64,
    /// The client's bytes of their values.
    pub raw_bytes: u64,
    /// Bytes the items take (headers, keys and frames).
    pub bytes: u64,
}

impl PackedCounts {
    /// A packed item of `size` bytes whose value is `raw_len` bytes was
    /// linked.
    #[inline]
    pub fn add(&mut self, size: usize, raw_len: usize) {
        self.items = self.items.wrapping_add(1);
        self.raw_bytes = self.raw_bytes.wrapping_add(raw_len as u64);
        self.bytes = self.bytes.wrapping_add(size as u64);
    }

    /// One was unlinked.
    #[inline]
    pub fn sub(&mut self, size: usize, raw_len: usize) {
        self.items = self.items.wrapping_sub(1);
        self.raw_bytes = self.raw_bytes.wrapping_sub(raw_len as u64);
        self.bytes = self.bytes.wrapping_sub(size as u64);
    }

    /// Adds `o`'s figures (summing shards and heads).
    #[inline]
    pub fn merge(&mut self, o: &PackedCounts) {
        self.items = self.items.wrapping_add(o.items);
        self.raw_bytes = self.raw_bytes.wrapping_add(o.raw_bytes);
        self.bytes = self.bytes.wrapping_add(o.bytes);
    }
}

thread_local! {
    /// This thread's decompression context, made at its first packed read.
    static DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
    /// This thread's packer for writes that pack (`-o compression=all`).
    static PACKER: RefCell<Option<Packer>> = const { RefCell::new(None) };
}

fn new_dctx() -> DCtx<'static> {
    let mut d = DCtx::create();
    // The experimental parameter the `experimental` feature enables; it
    // only fails for a libzstd without it, which the vendored one is not.
    let _ = d.set_parameter(DParameter::Format(FrameFormat::Magicless));
    d
}

/// Decodes `frame` into `dst`, which must come out exactly full, with the
/// dictionary `codec` names (none for [`CODEC_PLAIN`]).
fn unpack(frame: &[u8], codec: u8, dicts: &DictTable, dst: &mut [u8]) -> Result<(), Corrupt> {
    let dict = if codec == CODEC_PLAIN {
        None
    } else {
        Some(dicts.get(codec).ok_or(Corrupt)?)
    };
    DCTX.with(|cell| {
        // A decompression never calls back into this module, so the cell
        // is never borrowed twice; a context made aside would do if it were.
        let mut slot = cell.try_borrow_mut().map_err(|_| Corrupt)?;
        let d = slot.get_or_insert_with(new_dctx);
        let r = match dict {
            None => d.decompress(dst, frame),
            Some(dict) => d.decompress_using_ddict(dst, frame, dict.ddict()),
        };
        match r {
            Ok(n) if n == dst.len() => Ok(()),
            _ => Err(Corrupt),
        }
    })
}

/// What [`Packer::pack`] made of a value.
#[derive(Debug, PartialEq, Eq)]
pub enum Packed<'p> {
    /// The frame to store in place of the value.
    Frame(&'p [u8]),
    /// Tried: the frame would not save enough (store raw, `RAW_TRIED`).
    Rejected,
    /// Not tried: its first bytes are those of a compressed format (store
    /// raw, `RAW_TRIED`).
    Sniffed,
    /// Not tried: under [`PACK_MIN`] bytes.
    Small,
}

/// A compression context and its output buffer (one per thread that
/// packs; the buffer grows to the largest value packed, at most `-I`).
pub struct Packer {
    cctx: CCtx<'static>,
    level: i32,
    frame: Vec<u8>,
}

impl Packer {
    /// A packer at zstd level `level` writing magicless frames without
    /// content size, checksum or dictionary id.
    pub fn new(level: i32) -> Packer {
        Packer {
            cctx: new_cctx(level),
            level,
            frame: Vec::new(),
        }
    }

    /// Its zstd level.
    pub fn level(&self) -> i32 {
        self.level
    }

    /// Packs `value` if it is worth it: the frame must save at least
    /// max(16 bytes, 12.5 %) of the value.
    pub fn pack(&mut self, value: &[u8]) -> Packed<'_> {
        self.pack_with(value, None)
    }

    /// Packs `value` as [`Packer::pack`] does, with `dict` if given (the
    /// frame's codec byte is then `dict.codec()`).
    pub fn pack_with(&mut self, value: &[u8], dict: Option<&Dict>) -> Packed<'_> {
        if value.len() < PACK_MIN {
            return Packed::Small;
        }
        if sniff_incompressible(value) {
            return Packed::Sniffed;
        }
        let limit = value.len() - (value.len() / 8).max(16);
        if self.frame.len() < limit {
            self.frame.resize(limit, 0);
        }
        // The dictionary is referenced for this frame only: the context
        // never keeps a pointer to a dictionary past the call.
        // A compression that failed (frame too large) leaves its session
        // mid-frame, where a dictionary cannot be referenced: reset first.
        if let Some(d) = dict {
            let _ = self.cctx.reset(ResetDirective::SessionOnly);
            if self.cctx.ref_cdict(d.cdict()).is_err() {
                return Packed::Rejected;
            }
        }
        // A frame that does not fit in `limit` bytes fails (destination
        // too small): not worth keeping.
        let r = self.cctx.compress2(&mut self.frame[..limit], value);
        if dict.is_some() {
            // Back to no dictionary; should that fail, a new context
            // rather than one that points at the dictionary.
            let _ = self.cctx.reset(ResetDirective::SessionOnly);
            if self.cctx.disable_dictionary().is_err() {
                self.cctx = new_cctx(self.level);
            }
        }
        match r {
            Ok(n) if n <= limit => Packed::Frame(&self.frame[..n]),
            _ => Packed::Rejected,
        }
    }
}

/// A compression context at zstd `level` writing magicless frames without
/// content size, checksum or dictionary id.
fn new_cctx(level: i32) -> CCtx<'static> {
    let mut cctx = CCtx::create();
    for p in [
        CParameter::CompressionLevel(level),
        CParameter::Format(FrameFormat::Magicless),
        CParameter::ContentSizeFlag(false),
        CParameter::ChecksumFlag(false),
        CParameter::DictIdFlag(false),
    ] {
        // Valid parameters of the vendored libzstd (levels are clamped).
        let _ = cctx.set_parameter(p);
    }
    cctx
}

/// Runs `f` with this thread's packer at `level` (made on first use). None
/// if the packer is in use already (a write inside a write: it is stored
/// raw).
pub fn with_thread_packer<R>(level: i32, f: impl FnOnce(&mut Packer) -> R) -> Option<R> {
    PACKER.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.as_ref().is_none_or(|p| p.level != level) {
            *slot = Some(Packer::new(level));
        }
        slot.as_mut().map(f)
    })
}

/// Whether `value` starts like an already compressed format (gzip, zstd,
/// xz, bzip2, PNG, JPEG, GIF, WebP, zip, 7z, MP4/HEIF, ar archives), which
/// is not worth a try.
pub fn sniff_incompressible(value: &[u8]) -> bool {
    const PREFIXES: &[&[u8]] = &[
        b"\x1f\x8b",
        b"\x28\xb5\x2f\xfd",
        b"\xfd7zXZ\x00",
        b"BZh",
        b"\x89PNG",
        b"\xff\xd8\xff",
        b"GIF8",
        b"PK\x03\x04",
        b"7z\xbc\xaf",
        b"!<arch>",
    ];
    if PREFIXES.iter().any(|p| value.starts_with(p)) {
        return true;
    }
    let at = |range: std::ops::Range<usize>, what: &[u8]| value.get(range) == Some(what);
    (at(0..4, b"RIFF") && at(8..12, b"WEBP")) || at(4..8, b"ftyp")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text that compresses like a cache's values (a few kinds of lines).
    fn text(len: usize, seed: u64) -> Vec<u8> {
        let words = [
            &b"user"[..],
            b"session",
            b"{\"id\":",
            b"\"name\":\"",
            b"<div class=\"item\">",
            b"timestamp",
            b"2026-12-06T23:50:00Z",
            b", ",
            b"\n",
        ];
        let mut x = seed | 1;
        let mut v = Vec::with_capacity(len + 32);
        while v.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.extend_from_slice(words[(x % words.len() as u64) as usize]);
            v.extend_from_slice(itoa::Buffer::new().format(x % 1000).as_bytes());
        }
        v.truncate(len);
        v
    }

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn roundtrip(level: i32, value: &[u8]) -> Option<usize> {
        let dicts = DictTable::new();
        let mut p = Packer::new(level);
        let frame = match p.pack(value) {
            Packed::Frame(f) => f.to_vec(),
            _ => return None,
        };
        assert!(frame.len() <= value.len() - (value.len() / 8).max(16));
        let v = ValueRef::Packed {
            frame: &frame,
            codec: CODEC_PLAIN,
            raw_len: value.len() as u32,
            dicts: &dicts,
        };
        assert_eq!(v.len(), value.len());
        assert!(v.as_raw().is_none());
        let mut out = b"VALUE k 0 5\r\n".to_vec();
        v.append_to(&mut out).unwrap();
        assert_eq!(&out[13..], value, "level {level}, {} bytes", value.len());
        let mut slot = vec![0u8; value.len()];
        v.write_into(&mut slot).unwrap();
        assert_eq!(slot, value);
        Some(frame.len())
    }

    #[test]
    fn text_packs_and_unpacks_at_levels_1_and_3_from_64_bytes_to_1_mib() {
        for level in [1, 3] {
            for (i, len) in [64usize, 100, 1000, 4096, 65_536, 1 << 20]
                .iter()
                .enumerate()
            {
                let value = text(*len, i as u64 + 7);
                // Short text may not save enough to be kept; longer must.
                let n = roundtrip(level, &value);
                if *len >= 1000 {
                    let n = n.expect("text packs");
                    assert!(n * 2 < value.len(), "{len}: {n}");
                }
            }
        }
    }

    #[test]
    fn small_noisy_and_compressed_values_stay_raw() {
        let mut p = Packer::new(1);
        assert_eq!(p.pack(&text(63, 1)), Packed::Small);
        assert_eq!(p.pack(&noise(4096, 3)), Packed::Rejected);
        // 64 bytes of repeated text save less than 16 bytes? They save more.
        assert!(matches!(p.pack(&[b'a'; 64]), Packed::Frame(_)));
        let mut gz = vec![0x1f, 0x8b, 8, 0];
        gz.extend_from_slice(&[b'a'; 200]);
        assert_eq!(p.pack(&gz), Packed::Sniffed);
        let mut mp4 = b"\0\0\0\x20ftypisom".to_vec();
        mp4.extend_from_slice(&[0; 100]);
        assert!(sniff_incompressible(&mp4));
        let mut webp = b"RIFF\0\0\0\0WEBPVP8 ".to_vec();
        webp.extend_from_slice(&[0; 100]);
        assert!(sniff_incompressible(&webp));
        for head in [
            &b"\x28\xb5\x2f\xfd"[..],
            b"\xfd7zXZ\x00",
            b"BZh9",
            b"\x89PNG\r\n",
            b"\xff\xd8\xff\xe0",
            b"GIF89a",
            b"PK\x03\x04",
            b"7z\xbc\xaf\x27\x1c",
            b"!<arch>\n",
        ] {
            assert!(sniff_incompressible(head), "{head:?}");
        }
        assert!(!sniff_incompressible(&text(100, 2)));
        assert!(!sniff_incompressible(b"RIFF"));
    }

    #[test]
    fn damaged_frames_are_corrupt_and_leave_the_buffer_as_it_was() {
        let dicts = DictTable::new();
        let value = text(5000, 9);
        let mut p = Packer::new(1);
        let Packed::Frame(frame) = p.pack(&value) else {
            panic!("packs")
        };
        let frame = frame.to_vec();
        let check = |frame: &[u8], codec: u8, raw_len: u32| {
            let v = ValueRef::Packed {
                frame,
                codec,
                raw_len,
                dicts: &dicts,
            };
            let mut out = b"head".to_vec();
            let r = v.append_to(&mut out);
            if r.is_err() {
                assert_eq!(out, b"head");
            } else {
                assert_eq!(out.len(), 4 + raw_len as usize);
            }
            r
        };
        assert!(check(&frame, 0, value.len() as u32).is_ok());
        assert_eq!(check(&frame, 0, value.len() as u32 - 1), Err(Corrupt));
        assert_eq!(check(&frame, 0, value.len() as u32 + 1), Err(Corrupt));
        assert_eq!(check(&frame, 1, value.len() as u32), Err(Corrupt));
        assert_eq!(
            check(&frame[..frame.len() - 1], 0, value.len() as u32),
            Err(Corrupt)
        );
        assert_eq!(check(&[], 0, value.len() as u32), Err(Corrupt));
        for i in 0..frame.len().min(64) {
            let mut bad = frame.clone();
            bad[i] ^= 0x41;
            // Either an error or exactly raw_len bytes (no checksum to
            // catch every flip): never a panic, never another length.
            let _ = check(&bad, 0, value.len() as u32);
        }
        let mut slot = vec![0u8; 10];
        let v = ValueRef::Raw(b"0123456789");
        v.write_into(&mut slot).unwrap();
        assert_eq!(&slot, b"0123456789");
        assert_eq!(v.write_into(&mut slot[..9]), Err(Corrupt));
    }

    #[test]
    fn the_thread_packer_follows_the_level_and_refuses_reentry() {
        let n = with_thread_packer(1, |p| {
            assert_eq!(p.level(), 1);
            assert!(with_thread_packer(1, |_| ()).is_none());
            match p.pack(&text(2000, 4)) {
                Packed::Frame(f) => f.len(),
                other => panic!("{other:?}"),
            }
        });
        assert!(n.is_some());
        assert_eq!(with_thread_packer(3, |p| p.level()), Some(3));
    }
}
