//! The flash files (`-o ext_path=FILE:SIZE`, one or more) as one address
//! space of pages, and the reads and writes of whole aligned blocks.
//!
//! Each file holds `size / page_size` pages; page `p` of the tier is page
//! `p - first` of the file whose range holds it. The page size is
//! `ext_page_size`, or smaller for files too small to hold a few pages of
//! it ([`fit_page_size`]). Files are opened with
//! `O_DIRECT` where the file system allows it (a disk's, not tmpfs), so
//! that flash data does not also sit in the page cache: RAM per flash item
//! counts the index, not cached blocks. Then every transfer is a multiple
//! of `BLOCK` bytes at a multiple of `BLOCK`, from memory aligned to it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

/// The unit of every transfer (and the alignment of its memory).
pub const BLOCK: usize = 4096;

/// One `ext_path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashPath {
    /// The file (or block device).
    pub path: PathBuf,
    /// Bytes the tier may use in it.
    pub size: u64,
}

struct DeviceFile {
    file: File,
    /// First page of the tier in this file.
    first: usize,
    pages: usize,
}

/// Every flash file, as pages.
pub struct Device {
    files: Vec<DeviceFile>,
    page_size: usize,
    /// Whether the files bypass the page cache.
    pub direct: bool,
}

/// Fewer pages than this leave the tier no page to write while one is
/// reclaimed (and one kept for the reclaimer's rescues).
pub const MIN_PAGES: usize = 3;
/// The pages a page size chosen for small files gives at least, when it
/// can.
const FITTED_PAGES: usize = 8;

/// The page size the tier uses: `requested` (`ext_page_size`, 64 MiB by
/// default) when every file holds a page of it and all of them
/// `MIN_PAGES`; else it is halved, down to `smallest`, until they hold
/// `FITTED_PAGES`. memcached's extstore takes a 64 MB file as one page of
/// 64 MB; osmium's tier needs a few, so such a file gets 8 of 8 MiB.
pub fn fit_page_size(paths: &[FlashPath], requested: usize, smallest: usize) -> usize {
    let fits = |page: usize, want: usize| {
        let pages: u64 = paths.iter().map(|p| p.size / page as u64).sum();
        paths.iter().all(|p| p.size >= page as u64) && pages >= want as u64
    };
    let mut page = requested.max(BLOCK);
    if fits(page, MIN_PAGES) {
        return page;
    }
    while !fits(page, FITTED_PAGES) && page / 2 >= smallest {
        page = (page / 2).next_multiple_of(BLOCK);
    }
    page
}

impl Device {
    /// Opens (creating them) every file in `paths`, each sized to hold its
    /// pages. Fails with a message naming the file.
    pub fn open(paths: &[FlashPath], page_size: usize) -> io::Result<Device> {
        assert!(page_size.is_multiple_of(BLOCK));
        let mut files = Vec::new();
        let mut first = 0;
        let mut direct = true;
        for p in paths {
            let pages = (p.size / page_size as u64) as usize;
            if pages == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "ext_path {}: {} bytes hold no page of {} bytes",
                        p.path.display(),
                        p.size,
                        page_size
                    ),
                ));
            }
            let (file, is_direct) = open_file(&p.path)?;
            direct &= is_direct;
            let want = (pages * page_size) as u64;
            let len = file.metadata()?.len();
            if len < want {
                reserve(&file, len, want).map_err(|e| named(&p.path, "cannot size", e))?;
            }
            files.push(DeviceFile { file, first, pages });
            first += pages;
        }
        Ok(Device {
            files,
            page_size,
            direct,
        })
    }

    /// Pages in all.
    pub fn pages(&self) -> usize {
        self.files.iter().map(|f| f.pages).sum()
    }

    /// Bytes per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    fn locate(&self, page: usize, offset: usize) -> (&File, u64) {
        let f = self
            .files
            .iter()
            .find(|f| page >= f.first && page < f.first + f.pages)
            .expect("page in the tier");
        (&f.file, ((page - f.first) * self.page_size + offset) as u64)
    }

    /// The descriptor and file offset of `offset` of `page` (for a read
    /// the caller submits itself).
    pub fn position(&self, page: usize, offset: usize) -> (std::os::fd::RawFd, u64) {
        use std::os::fd::AsRawFd;
        let (file, at) = self.locate(page, offset);
        (file.as_raw_fd(), at)
    }

    /// Writes `buf` (whole blocks, block-aligned memory) at `offset` of
    /// `page`.
    pub fn write(&self, page: usize, offset: usize, buf: &[u8]) -> io::Result<()> {
        debug_assert!(buf.len().is_multiple_of(BLOCK) && offset.is_multiple_of(BLOCK));
        debug_assert!(offset + buf.len() <= self.page_size);
        let (file, at) = self.locate(page, offset);
        file.write_all_at(buf, at)
    }

    /// Reads `buf.len()` bytes (whole blocks, into block-aligned memory)
    /// from `offset` of `page`.
    pub fn read(&self, page: usize, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        debug_assert!(buf.len().is_multiple_of(BLOCK) && offset.is_multiple_of(BLOCK));
        let (file, at) = self.locate(page, offset);
        file.read_exact_at(buf, at)
    }
}

fn named(path: &std::path::Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("{what} flash file {}: {e}", path.display()),
    )
}

/// Grows `file` from `len` to `want` bytes with the space reserved on the
/// file system (`fallocate`), so that a disk too small for the tier stops
/// the start instead of failing writes later; a file system without
/// `fallocate` gets a sparse file.
fn reserve(file: &File, len: u64, want: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on our own open descriptor; no memory is passed.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            0,
            len as libc::off_t,
            (want - len) as libc::off_t,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => file.set_len(want),
        _ => Err(e),
    }
}

/// Opens `path` read-write (created if missing), with `O_DIRECT` where
/// the file system takes it; the second value says whether it did.
fn open_file(path: &std::path::Path) -> io::Result<(File, bool)> {
    let open = |direct: bool| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(if direct { libc::O_DIRECT } else { 0 })
            .open(path)
    };
    match open(true) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(false)
            .map(|f| (f, false))
            .map_err(|e| named(path, "cannot open", e)),
        Err(e) => Err(named(path, "cannot open", e)),
    }
}

/// Block-aligned memory of a whole number of blocks, zeroed.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: an AlignedBuf owns its memory like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read it.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// At least `len` bytes, rounded up to whole blocks (one at least).
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.next_multiple_of(BLOCK).max(BLOCK);
        let layout = std::alloc::Layout::from_size_align(len, BLOCK).expect("layout");
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: it holds one block at least).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes allocated and initialised (zeroed) in `new`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, BLOCK).expect("layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sizes: &[u64]) -> Vec<FlashPath> {
        sizes
            .iter()
            .map(|&size| FlashPath {
                path: "f".into(),
                size,
            })
            .collect()
    }

    #[test]
    fn small_files_get_smaller_pages() {
        const MIB: u64 = 1 << 20;
        let page = |sizes: &[u64]| fit_page_size(&files(sizes), 64 << 20, (1 << 20) + 4096);
        // Enough pages of ext_page_size: kept (a taken-over tier keeps its
        // layout).
        assert_eq!(page(&[4096 * MIB]), 64 << 20);
        assert_eq!(page(&[192 * MIB]), 64 << 20);
        // memcached's one page of 64 MB: 8 pages of 8 MiB here.
        assert_eq!(page(&[64 * MIB]), 8 << 20);
        assert_eq!(page(&[16 * MIB]), 2 << 20);
        assert_eq!(page(&[32 * MIB, 1024 * MIB]), 32 << 20);
        // Never below the largest record: 2 pages, which the tier refuses.
        assert_eq!(page(&[4 * MIB]), 2 << 20);
    }
}
