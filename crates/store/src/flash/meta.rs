//! The flash tier's metadata: its pages' control records and the flash
//! index's tables, in one mapping ([`MetaSource`]). With a memory file
//! (`-e FILE`) a file beside it, `FILE.flash`, mapped shared: like RAM
//! segments, everything the tier records in it outlives the process, so a
//! restart (after a stop or a kill) finds its items on flash again without
//! reading the flash. With item memory in a memfd (the default without
//! `-e`) a memfd `osmium-flash-meta`, mapped shared, which a binary
//! upgrade hands to the next image ([`Meta::hand_over`]) as it hands item
//! memory over: the next image takes the tier over from it as a restart
//! takes `FILE.flash` over. Otherwise (anonymous item memory, or where no
//! memfd can be made) anonymous memory, which ends with the image.
//!
//! ```text
//!  offset 0         4 KiB                      (4 KiB aligned)
//!        +---------+--------------------------+------------------+---------------------------+
//!        | header  | page records (32 B each) | write buffers    | index tables, allocated   |
//!        |         | state, seq, used, written | (ext_wbuf_size   | at the end (4 KiB aligned);|
//!        |         |                          |  each)           | an outgrown one is freed  |
//!        +---------+--------------------------+------------------+---------------------------+
//!
//!  header: magic "osmiumFX", format, fingerprint of the tier (files, sizes,
//!  page size, write buffers), pages, open (1 while a server uses it),
//!  boot id, the log's next sequence and flush position, the allocation
//!  end, one table descriptor per index shard ((offset / 4 KiB) << 24 |
//!  buckets) and one descriptor per write buffer (state, page, offset,
//!  bytes of records)
//! ```
//!
//! The write buffers are here too, so that records a killed server had
//! not yet written to flash are not lost: a restart writes them out.
//!
//! The address space for the tables is reserved at start (`MAP_NORESERVE`):
//! a table that grows is written whole at the end, then its descriptor is
//! switched with one store, so a kill leaves the old table or the new one.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::index::SHARDS;

const MAGIC: u64 = u64::from_le_bytes(*b"osmiumFX");
const FORMAT: u64 = 1;
const HEADER: usize = 4096;
const PAGE_RECORD: usize = 32;
const ALLOC_ALIGN: usize = 4096;

/// The header (see the module comment).
#[repr(C)]
pub struct Header {
    magic: AtomicU64,
    format: AtomicU64,
    fingerprint: AtomicU64,
    pages: AtomicU64,
    open: AtomicU64,
    boot: AtomicU64,
    /// The log's next page sequence number.
    pub next_seq: AtomicU64,
    /// The log's flush position: records below it were flushed (flush_all).
    pub flushed_below: AtomicU64,
    alloc_end: AtomicU64,
    /// Per index shard: (offset / 4 KiB) << 24 | buckets; 0: none.
    pub tables: [AtomicU64; SHARDS],
    /// Per write buffer: state (`WBUF_*`), page, offset, bytes of records.
    pub wbufs: [[AtomicU64; 4]; MAX_WBUFS],
}

/// Write buffers the metadata can describe.
pub const MAX_WBUFS: usize = 8;
/// A write buffer's states.
pub const WBUF_FREE: u64 = 0;
/// A write buffer being filled.
pub const WBUF_FILLING: u64 = 1;
/// A full write buffer waiting for the flusher.
pub const WBUF_QUEUED: u64 = 2;

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER);

/// A page's record (see `flash`): state, sequence, bytes appended, bytes
/// on flash. Only the log touches them, under its lock.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageRecord {
    /// The page's state (free, head, sealed).
    pub state: u64,
    /// The page's sequence number as head.
    pub seq: u64,
    /// Bytes appended.
    pub used: u64,
    /// Bytes on flash.
    pub written: u64,
}

const _: () = assert!(std::mem::size_of::<PageRecord>() == PAGE_RECORD);

/// The metadata mapping (see the module comment).
pub struct Meta {
    base: *mut u8,
    reserved: usize,
    file: Option<File>,
    /// `file` is a memfd (handed over at a binary upgrade).
    memfd: bool,
    pages: usize,
    /// Where the write buffers start, and their size.
    wbuf_offset: usize,
    wbuf_size: usize,
    /// Serialises table allocation (and growing the file).
    alloc: Mutex<()>,
}

// SAFETY: the mapping is shared memory whose parts are each used under
// their owner's lock (the log's for page records, each shard's for its
// table); the header holds atomics only.
unsafe impl Send for Meta {}
// SAFETY: as above.
unsafe impl Sync for Meta {}

/// What opening the metadata found.
pub struct Opened {
    /// The mapping.
    pub meta: Meta,
    /// The tier's records and tables from an earlier run are taken over
    /// (else everything starts empty).
    pub resumed: bool,
    /// That run ended without a stop (its tables may need repair).
    pub crashed: bool,
    /// Why an existing file was not taken over.
    pub note: Option<String>,
}

/// Where the metadata lives (see the module comment).
#[derive(Clone, Copy, Debug)]
pub enum MetaSource<'a> {
    /// Anonymous memory: the metadata ends with the image.
    Anonymous,
    /// A file (`FILE.flash` beside the memory file), taken over if it
    /// was made for the same tier.
    File(&'a Path),
    /// A memfd: the one a binary upgrade handed over (`Some`: a
    /// duplicate is mapped, taken over if it was made for the same tier,
    /// else a new memfd is made and the handed one left as it is), or a
    /// new one; anonymous memory where no memfd can be made.
    Memfd(Option<BorrowedFd<'a>>),
}

/// The sizes of a tier's metadata (see [`Meta::open`]).
#[derive(Clone, Copy)]
struct Shape {
    fingerprint: u64,
    pages: usize,
    wbuf_offset: usize,
    wbuf_size: usize,
    fixed: usize,
    reserved: usize,
}

impl Meta {
    /// Metadata for a tier of `pages` pages whose files and settings have
    /// `fingerprint`, where `source` says, taken over if it was made for
    /// the same tier. `reserve` is the address space to keep for index
    /// tables.
    pub fn open(
        source: MetaSource<'_>,
        fingerprint: u64,
        pages: usize,
        wbufs: usize,
        wbuf_size: usize,
        reserve: usize,
    ) -> io::Result<Opened> {
        assert!(wbufs <= MAX_WBUFS && wbuf_size.is_multiple_of(ALLOC_ALIGN));
        let wbuf_offset = (HEADER + pages * PAGE_RECORD).next_multiple_of(ALLOC_ALIGN);
        let fixed = wbuf_offset + wbufs * wbuf_size;
        let shape = Shape {
            fingerprint,
            pages,
            wbuf_offset,
            wbuf_size,
            fixed,
            reserved: fixed + reserve.next_multiple_of(ALLOC_ALIGN),
        };
        match source {
            MetaSource::Anonymous => Meta::anonymous(shape, None),
            MetaSource::File(path) => {
                let file = crate::memfile::open_or_make(path).map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
                })?;
                let name = path.display().to_string();
                match Meta::take_over(file, false, shape, &name)? {
                    Ok(opened) => Ok(opened),
                    Err((meta, note)) => {
                        meta.file.as_ref().expect("a file").set_len(0)?;
                        meta.init(fingerprint, fixed).map_err(|e| {
                            io::Error::new(
                                e.kind(),
                                format!("{name}: cannot reserve {fixed} bytes: {e}"),
                            )
                        })?;
                        Ok(Opened {
                            meta,
                            resumed: false,
                            crashed: false,
                            note: note.map(|n| format!("{name}: {n}, the flash tier starts empty")),
                        })
                    }
                }
            }
            MetaSource::Memfd(inherited) => {
                let mut note = None;
                if let Some(fd) = inherited {
                    let name = "the flash tier's metadata handed over";
                    match fd.try_clone_to_owned() {
                        Ok(copy) => match Meta::take_over(File::from(copy), true, shape, name)? {
                            Ok(opened) => return Ok(opened),
                            // Left as it is, for an image it may be
                            // handed back to.
                            Err((_, why)) => {
                                note = Some(format!(
                                    "{name}: {}, the flash tier starts empty",
                                    why.unwrap_or_else(|| "empty".into())
                                ))
                            }
                        },
                        Err(e) => note = Some(format!("{name}: cannot be opened ({e})")),
                    }
                }
                let file = match new_memfd() {
                    Ok(file) => file,
                    Err(e) => {
                        let why = format!(
                            "the flash tier's metadata: no memfd can be made ({e}): anonymous \
                             memory instead, which a binary upgrade does not keep"
                        );
                        let note = Some(match note {
                            Some(n) => format!("{n}; {why}"),
                            None => why,
                        });
                        return Meta::anonymous(shape, note);
                    }
                };
                let meta = Meta::mapped(file, true, shape)?;
                meta.init(fingerprint, fixed)?;
                Ok(Opened {
                    meta,
                    resumed: false,
                    crashed: false,
                    note,
                })
            }
        }
    }

    /// Fresh metadata in anonymous memory.
    fn anonymous(shape: Shape, note: Option<String>) -> io::Result<Opened> {
        let base = map(None, shape.reserved)?;
        let meta = Meta {
            base,
            reserved: shape.reserved,
            file: None,
            memfd: false,
            pages: shape.pages,
            wbuf_offset: shape.wbuf_offset,
            wbuf_size: shape.wbuf_size,
            alloc: Mutex::new(()),
        };
        meta.init(shape.fingerprint, shape.fixed)?;
        Ok(Opened {
            meta,
            resumed: false,
            crashed: false,
            note,
        })
    }

    /// `file` mapped shared.
    fn mapped(file: File, memfd: bool, shape: Shape) -> io::Result<Meta> {
        let base = map(Some(&file), shape.reserved)?;
        Ok(Meta {
            base,
            reserved: shape.reserved,
            file: Some(file),
            memfd,
            pages: shape.pages,
            wbuf_offset: shape.wbuf_offset,
            wbuf_size: shape.wbuf_size,
            alloc: Mutex::new(()),
        })
    }

    /// `file` (named `name` in notes) mapped and taken over when it holds
    /// the metadata of the same tier; else the mapping, untouched, and
    /// why not (None: the file is empty).
    #[allow(clippy::type_complexity)]
    fn take_over(
        file: File,
        memfd: bool,
        shape: Shape,
        name: &str,
    ) -> io::Result<Result<Opened, (Meta, Option<String>)>> {
        let len = file
            .metadata()
            .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?
            .len() as usize;
        let meta = Meta::mapped(file, memfd, shape)?;
        let h = meta.header_unchecked(len);
        let refusal = match h {
            None if len == 0 => Some(None),
            None => Some(Some(
                "too short to be the flash tier's metadata".to_string(),
            )),
            Some(h) if h.magic.load(Ordering::Relaxed) != MAGIC => {
                Some(Some("not the flash tier's metadata".into()))
            }
            Some(h) if h.format.load(Ordering::Relaxed) != FORMAT => {
                Some(Some("made by another osmium (other format)".into()))
            }
            Some(h)
                if h.fingerprint.load(Ordering::Relaxed) != shape.fingerprint
                    || h.pages.load(Ordering::Relaxed) != shape.pages as u64 =>
            {
                Some(Some(
                    "made for other ext_path files or another ext_page_size".into(),
                ))
            }
            Some(h) if (h.alloc_end.load(Ordering::Relaxed) as usize) > len.min(shape.reserved) => {
                Some(Some("truncated".into()))
            }
            Some(h)
                if h.open.load(Ordering::Relaxed) != 0
                    && h.boot.load(Ordering::Relaxed) != crate::memfile::boot_id() =>
            {
                Some(Some(
                    "the system restarted since the server that used it stopped without a \
                     graceful stop"
                        .into(),
                ))
            }
            Some(_) => None,
        };
        if let Some(note) = refusal {
            return Ok(Err((meta, note)));
        }
        let h = meta.header();
        let crashed = h.open.load(Ordering::Relaxed) != 0;
        h.boot.store(crate::memfile::boot_id(), Ordering::Relaxed);
        h.open.store(1, Ordering::Release);
        Ok(Ok(Opened {
            meta,
            resumed: true,
            crashed,
            note: None,
        }))
    }

    /// The metadata is in a memfd.
    pub fn is_memfd(&self) -> bool {
        self.memfd
    }

    /// A binary upgrade's hand-over, after a graceful stop of the tier
    /// (`close`: marked whole): a duplicate of the memfd, not
    /// close-on-exec, for the next image ([`MetaSource::Memfd`]); None for
    /// metadata in a file (taken over by its path) or in anonymous memory
    /// (ends with the image).
    pub fn hand_over(&self) -> io::Result<Option<OwnedFd>> {
        match &self.file {
            Some(f) if self.memfd => {
                let copy = OwnedFd::from(f.try_clone()?);
                crate::memfd::keep_across_exec(&copy)?;
                Ok(Some(copy))
            }
            _ => Ok(None),
        }
    }

    /// A fresh header and empty page records.
    fn init(&self, fingerprint: u64, fixed: usize) -> io::Result<()> {
        self.ensure_len(fixed)?;
        let h = self.header();
        h.magic.store(MAGIC, Ordering::Relaxed);
        h.format.store(FORMAT, Ordering::Relaxed);
        h.fingerprint.store(fingerprint, Ordering::Relaxed);
        h.pages.store(self.pages as u64, Ordering::Relaxed);
        h.next_seq.store(1, Ordering::Relaxed);
        h.flushed_below.store(0, Ordering::Relaxed);
        h.alloc_end.store(fixed as u64, Ordering::Relaxed);
        for t in &h.tables {
            t.store(0, Ordering::Relaxed);
        }
        for w in &h.wbufs {
            w[0].store(WBUF_FREE, Ordering::Relaxed);
        }
        h.boot.store(crate::memfile::boot_id(), Ordering::Relaxed);
        h.open.store(1, Ordering::Release);
        Ok(())
    }

    fn header_unchecked(&self, len: usize) -> Option<&Header> {
        (len >= HEADER).then(|| self.header())
    }

    /// The header, at the start of the mapping.
    pub fn header(&self) -> &Header {
        // SAFETY: the header page starts the mapping, which is page
        // aligned and at least HEADER long (ensured before use), holding
        // integer atomics only.
        unsafe { &*(self.base as *const Header) }
    }

    /// The page records (the log uses them under its lock only).
    ///
    /// # Safety
    /// At most one `&mut` to them may be alive (the log's).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn page_records(&self) -> &mut [PageRecord] {
        // SAFETY: the records lie after the header inside the mapping's
        // fixed part; the caller keeps the borrow unique.
        unsafe {
            std::slice::from_raw_parts_mut(self.base.add(HEADER) as *mut PageRecord, self.pages)
        }
    }

    /// Write buffer `slot` (the log fills it under its lock; the flusher
    /// reads a queued one).
    pub fn wbuf(&self, slot: usize) -> *mut u8 {
        self.at(self.wbuf_offset + slot * self.wbuf_size)
    }

    /// The memory at `offset` (returned by `alloc`).
    pub fn at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset < self.reserved);
        // SAFETY: inside the reservation.
        unsafe { self.base.add(offset) }
    }

    /// Allocates `bytes` (zeroed) for an index table; returns its offset.
    /// None when the reserved address space is used up.
    pub fn alloc(&self, bytes: usize) -> Option<usize> {
        let _g = self.alloc.lock();
        let h = self.header();
        let start = h.alloc_end.load(Ordering::Relaxed) as usize;
        let end = start + bytes.next_multiple_of(ALLOC_ALIGN);
        if end > self.reserved {
            return None;
        }
        // A table the file system cannot hold is not made (the index does
        // not grow): its pages would be a SIGBUS when first written.
        self.ensure_len(end).ok()?;
        h.alloc_end.store(end as u64, Ordering::Release);
        Some(start)
    }

    /// Hands an outgrown table's memory back (a hole in the file).
    pub fn free(&self, offset: usize, bytes: usize) {
        let advice = if self.file.is_some() {
            libc::MADV_REMOVE
        } else {
            libc::MADV_DONTNEED
        };
        // SAFETY: a whole allocation inside the reservation, no longer
        // referenced by any table descriptor.
        unsafe {
            libc::madvise(
                self.at(offset) as *mut libc::c_void,
                bytes.next_multiple_of(ALLOC_ALIGN),
                advice,
            );
        }
    }

    /// Makes the file at least `len` bytes, the new bytes' blocks reserved
    /// on the file system (`fallocate`; a file system without it, and a
    /// memfd, get a sparse file).
    fn ensure_len(&self, len: usize) -> io::Result<()> {
        let Some(f) = &self.file else {
            return Ok(());
        };
        let have = f.metadata()?.len() as usize;
        if have >= len {
            return Ok(());
        }
        if self.memfd {
            // Sparse, as anonymous memory: pages are allocated when first
            // written, not reserved up front.
            return f.set_len(len as u64);
        }
        // SAFETY: fallocate on our own open descriptor; no memory is passed.
        let r = unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                0,
                have as libc::off_t,
                (len - have) as libc::off_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => f.set_len(len as u64),
            _ => Err(e),
        }
    }

    /// A graceful stop: writes the file out and marks it whole.
    pub fn close(&self) {
        if let Some(f) = &self.file {
            let end = self.header().alloc_end.load(Ordering::Relaxed) as usize;
            // SAFETY: the written part of the shared mapping.
            unsafe { libc::msync(self.base as *mut libc::c_void, end, libc::MS_SYNC) };
            self.header().open.store(0, Ordering::Release);
            // SAFETY: the header page.
            unsafe { libc::msync(self.base as *mut libc::c_void, HEADER, libc::MS_SYNC) };
            let _ = f.as_raw_fd();
        }
    }
}

impl Drop for Meta {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the reservation made in `map`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.reserved) };
    }
}

/// A new memfd `osmium-flash-meta` (close-on-exec), empty.
fn new_memfd() -> io::Result<File> {
    // SAFETY: memfd_create takes a NUL-terminated name and flags; the fd
    // it returns is new and ours.
    let fd = unsafe { libc::memfd_create(c"osmium-flash-meta".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned to us and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Reserves `len` bytes of address space: anonymous, or `file` shared
/// (pages past its end are only touched once it is extended).
fn map(file: Option<&File>, len: usize) -> io::Result<*mut u8> {
    let (flags, fd) = match file {
        Some(f) => (libc::MAP_SHARED | libc::MAP_NORESERVE, f.as_raw_fd()),
        None => (
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
        ),
    };
    // SAFETY: a fresh mapping with no address hint, checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}
