//! The state document's framing: the 32-byte header (magic, format,
//! oldest reader, length, xxh3), the records (`tag u16 | flags u16 | len
//! u32 | bytes`) and the little-endian fields inside them, written by
//! [`Writer`] and read by [`Reader`]; [`StateError`], why a document is
//! refused. Nothing here allocates more than the input's size: every
//! length is checked against the bytes left before it is used.
//!
//! ```text
//!  offset 0  magic "osmiumUP" (8)
//!         8  format u32          this document's format
//!        12  min_reader u32      the oldest format a reader must understand
//!        16  length u64          bytes after the header
//!        24  xxh3_64 u64         of bytes 0..24 and of the bytes after the header
//!        32  records
//! ```
//!
//! The checksum covers the header's fields too, so that a flipped bit in
//! the format numbers is a damaged document, not another format.

use std::fmt;

use xxhash_rust::xxh3::Xxh3;

/// The document's first bytes.
pub(crate) const MAGIC: &[u8; 8] = b"osmiumUP";
/// The header's size.
pub(crate) const HEADER: usize = 32;
/// A record's flag: a reader that does not know its tag skips it (and
/// passes it on) rather than refuse the document.
pub(crate) const SKIPPABLE: u16 = 1;

/// Why a state document was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// Not a state document (no magic, or not even a header).
    NotState,
    /// Truncated, lengthened or altered: the length or the checksum does
    /// not match.
    Damaged,
    /// A format this build does not read.
    Format {
        /// The document's format.
        found: u32,
        /// The oldest format a reader must understand to take it.
        min_reader: u32,
    },
    /// A record this build cannot take: unknown and not skippable, or
    /// malformed.
    Record {
        /// The record's tag.
        tag: u16,
        /// What is wrong with it.
        why: String,
    },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::NotState => write!(f, "not an upgrade state document"),
            StateError::Damaged => write!(f, "the upgrade state is damaged (length or checksum)"),
            StateError::Format { found, min_reader } => write!(
                f,
                "upgrade state format {found} (needs a reader of format {min_reader} or later), \
                 this build reads formats {}-{}",
                crate::READS.start(),
                crate::READS.end()
            ),
            StateError::Record { tag, why } => write!(f, "upgrade state record {tag}: {why}"),
        }
    }
}

impl std::error::Error for StateError {}

/// The checksum of a document: its header's first 24 bytes, then its body.
fn checksum(head: &[u8], body: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(&head[..24]);
    h.update(body);
    h.digest()
}

/// Frames `body` (the records) as a document of `format`.
pub(crate) fn seal(format: u32, min_reader: u32, body: &[u8]) -> Vec<u8> {
    let mut doc = Vec::with_capacity(HEADER + body.len());
    doc.extend_from_slice(MAGIC);
    doc.extend_from_slice(&format.to_le_bytes());
    doc.extend_from_slice(&min_reader.to_le_bytes());
    doc.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let sum = checksum(&doc, body);
    doc.extend_from_slice(&sum.to_le_bytes());
    doc.extend_from_slice(body);
    doc
}

/// Checks a document's header and checksum; its body (the records).
pub(crate) fn open(doc: &[u8]) -> Result<&[u8], StateError> {
    if doc.len() < HEADER || &doc[..8] != MAGIC {
        return Err(StateError::NotState);
    }
    let word = |at: usize| u32::from_le_bytes(doc[at..at + 4].try_into().expect("4 bytes"));
    let long = |at: usize| u64::from_le_bytes(doc[at..at + 8].try_into().expect("8 bytes"));
    let (format, min_reader, length, sum) = (word(8), word(12), long(16), long(24));
    let body = &doc[HEADER..];
    if length != body.len() as u64 || checksum(doc, body) != sum {
        return Err(StateError::Damaged);
    }
    if min_reader > *crate::READS.end() || format < *crate::READS.start() || min_reader > format {
        return Err(StateError::Format {
            found: format,
            min_reader,
        });
    }
    Ok(body)
}

/// Writes records and their fields.
#[derive(Default)]
pub(crate) struct Writer {
    out: Vec<u8>,
    /// Where the open record's length goes.
    open: Option<usize>,
}

impl Writer {
    /// Starts a record; the fields written until [`Writer::end`] are its.
    pub(crate) fn begin(&mut self, tag: u16, flags: u16) {
        debug_assert!(self.open.is_none(), "records do not nest");
        self.out.extend_from_slice(&tag.to_le_bytes());
        self.out.extend_from_slice(&flags.to_le_bytes());
        self.open = Some(self.out.len());
        self.out.extend_from_slice(&0u32.to_le_bytes());
    }

    /// Ends the open record (its length written).
    pub(crate) fn end(&mut self) {
        let at = self.open.take().expect("a record is open");
        let len = (self.out.len() - at - 4) as u32;
        self.out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// A whole record of raw bytes (one passed on as it came).
    pub(crate) fn raw(&mut self, tag: u16, flags: u16, bytes: &[u8]) {
        self.begin(tag, flags);
        self.out.extend_from_slice(bytes);
        self.end();
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.out.push(v);
    }

    pub(crate) fn bool(&mut self, v: bool) {
        self.out.push(u8::from(v));
    }

    pub(crate) fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn i32(&mut self, v: i32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn i64(&mut self, v: i64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    /// Bytes as `len u32 | bytes`.
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.out.extend_from_slice(v);
    }

    pub(crate) fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }

    /// `0`, or `1` then the value.
    pub(crate) fn option<T>(&mut self, v: Option<T>, each: impl FnOnce(&mut Writer, T)) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                each(self, v);
            }
        }
    }

    /// `count u32`, then each item.
    pub(crate) fn list<T>(&mut self, items: &[T], mut each: impl FnMut(&mut Writer, &T)) {
        self.u32(items.len() as u32);
        for item in items {
            each(self, item);
        }
    }

    /// The records written.
    pub(crate) fn finish(self) -> Vec<u8> {
        debug_assert!(self.open.is_none(), "a record left open");
        self.out
    }
}

/// One record as read: its tag, flags and contents.
pub(crate) struct Record<'a> {
    pub tag: u16,
    pub flags: u16,
    pub bytes: &'a [u8],
}

/// Splits a body into its records. Err: a record header or length that
/// runs past the end (which the checksum makes a writer's bug, or fuzz).
pub(crate) fn records(mut body: &[u8]) -> impl Iterator<Item = Result<Record<'_>, StateError>> {
    std::iter::from_fn(move || {
        if body.is_empty() {
            return None;
        }
        if body.len() < 8 {
            body = &[];
            return Some(Err(StateError::Damaged));
        }
        let tag = u16::from_le_bytes([body[0], body[1]]);
        let flags = u16::from_le_bytes([body[2], body[3]]);
        let len = u32::from_le_bytes([body[4], body[5], body[6], body[7]]) as usize;
        if body.len() - 8 < len {
            body = &[];
            return Some(Err(StateError::Record {
                tag,
                why: "runs past the end of the document".into(),
            }));
        }
        let bytes = &body[8..8 + len];
        body = &body[8 + len..];
        Some(Ok(Record { tag, flags, bytes }))
    })
}

/// Reads the fields of one record; every error names the record's tag.
pub(crate) struct Reader<'a> {
    tag: u16,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(tag: u16, bytes: &'a [u8]) -> Reader<'a> {
        Reader { tag, rest: bytes }
    }

    /// A refusal of this record.
    pub(crate) fn refuse(&self, why: impl Into<String>) -> StateError {
        StateError::Record {
            tag: self.tag,
            why: why.into(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        if self.rest.len() < n {
            return Err(self.refuse("ends inside a field"));
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StateError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, StateError> {
        Ok(self.array::<1>()?[0])
    }

    /// A flag: 0 or 1, nothing else.
    pub(crate) fn bool(&mut self) -> Result<bool, StateError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.refuse(format!("a flag of {v}"))),
        }
    }

    pub(crate) fn u16(&mut self) -> Result<u16, StateError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, StateError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, StateError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, StateError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, StateError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A file descriptor: not negative.
    pub(crate) fn fd(&mut self) -> Result<i32, StateError> {
        let fd = self.i32()?;
        if fd < 0 {
            return Err(self.refuse(format!("file descriptor {fd}")));
        }
        Ok(fd)
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], StateError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub(crate) fn string(&mut self) -> Result<String, StateError> {
        let bytes = self.bytes()?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(self.refuse("a string that is not UTF-8")),
        }
    }

    /// `0`, or `1` then the value.
    pub(crate) fn option<T>(
        &mut self,
        each: impl FnOnce(&mut Reader<'a>) -> Result<T, StateError>,
    ) -> Result<Option<T>, StateError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(each(self)?)),
            v => Err(self.refuse(format!("an option marked {v}"))),
        }
    }

    /// `count u32`, then each item. The count is not trusted for an
    /// allocation: items are pushed as they are read.
    pub(crate) fn list<T>(
        &mut self,
        mut each: impl FnMut(&mut Reader<'a>) -> Result<T, StateError>,
    ) -> Result<Vec<T>, StateError> {
        let count = self.u32()?;
        let mut items = Vec::new();
        for _ in 0..count {
            items.push(each(self)?);
        }
        Ok(items)
    }

    /// Ends the record: nothing may be left in it.
    pub(crate) fn done(self) -> Result<(), StateError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(self.refuse(format!("{} bytes left over", self.rest.len())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_body_opens_again() {
        let doc = seal(1, 1, b"abc");
        assert_eq!(open(&doc), Ok(&b"abc"[..]));
    }

    #[test]
    fn a_format_this_build_does_not_read_is_refused() {
        let newer = seal(7, 7, b"");
        assert_eq!(
            open(&newer),
            Err(StateError::Format {
                found: 7,
                min_reader: 7
            })
        );
        // A newer format that older readers may still take is read.
        assert!(open(&seal(7, 1, b"")).is_ok());
        assert!(matches!(
            open(&seal(0, 0, b"")),
            Err(StateError::Format { .. })
        ));
    }

    #[test]
    fn no_magic_is_not_a_state() {
        assert_eq!(open(b"short"), Err(StateError::NotState));
        let mut doc = seal(1, 1, b"x");
        doc[0] = b'O';
        assert_eq!(open(&doc), Err(StateError::NotState));
    }

    #[test]
    fn a_record_longer_than_the_body_is_refused() {
        let mut w = Writer::default();
        w.raw(9, 0, b"abcdef");
        let mut body = w.finish();
        body.truncate(body.len() - 1);
        let all: Vec<_> = records(&body).collect();
        assert_eq!(all.len(), 1);
        assert!(all[0].is_err());
    }

    #[test]
    fn fields_read_back_and_leftovers_are_refused() {
        let mut w = Writer::default();
        w.begin(3, 0);
        w.u8(7);
        w.bool(true);
        w.u16(0xbeef);
        w.u32(12);
        w.i32(-3);
        w.u64(u64::MAX);
        w.i64(-9);
        w.str("hé");
        w.option(Some(5u32), |w, v| w.u32(v));
        w.list(&[1u64, 2], |w, v| w.u64(*v));
        w.end();
        let body = w.finish();
        let rec = records(&body).next().unwrap().unwrap();
        assert_eq!((rec.tag, rec.flags), (3, 0));
        let mut r = Reader::new(rec.tag, rec.bytes);
        assert_eq!(r.u8().unwrap(), 7);
        assert!(r.bool().unwrap());
        assert_eq!(r.u16().unwrap(), 0xbeef);
        assert_eq!(r.u32().unwrap(), 12);
        assert_eq!(r.i32().unwrap(), -3);
        assert_eq!(r.u64().unwrap(), u64::MAX);
        assert_eq!(r.i64().unwrap(), -9);
        assert_eq!(r.string().unwrap(), "hé");
        assert_eq!(r.option(|r| r.u32()).unwrap(), Some(5));
        assert_eq!(r.list(|r| r.u64()).unwrap(), vec![1, 2]);
        r.done().unwrap();

        let mut r = Reader::new(3, &[1, 2]);
        r.u8().unwrap();
        assert!(r.done().is_err());
        assert!(Reader::new(3, &[2]).bool().is_err());
        assert!(Reader::new(3, &[0xff, 0xff, 0xff, 0xff]).fd().is_err());
        assert!(Reader::new(3, &[0xff, 0xff, 0xff, 0x7f]).bytes().is_err());
    }
}
