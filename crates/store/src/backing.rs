//! What holds item memory: one mapping with the segments' control blocks
//! and the segments themselves (segment `i` at `base + i × segment_size`),
//! and the few things the arena asks of it: handing a range's pages back
//! to the system, backing a range with huge pages, writing it all out
//! (`msync`), and unmapping it when the store drops.
//!
//! ```text
//!  offset 0        4 KiB                                 data_offset (2 MiB multiple)
//!        +--------+-----------------------------+-----+-----------------------------+------+
//!        | header | control blocks (128 B each) | pad | segments (segment_size each) | tail |
//!        +--------+-----------------------------+-----+-----------------------------+------+
//!         file     see `segment`                       base: 2 MiB aligned           4 KiB
//!         header
//!         (memfile)
//! ```
//!
//! The tail page lets a lock-free reader that decodes a stale location
//! near the end read an item header and key without leaving the mapping.
//!
//! Three kinds of memory, the same layout:
//!
//! * [`BackingKind::Memfd`] (the server's default): a shared mapping of a
//!   memfd (`memfd_create("osmium-items")`), sized for the layout but
//!   sparse: pages become resident when first written and go back to the
//!   system with `MADV_REMOVE` (a hole in the memfd; `MADV_DONTNEED` would
//!   not free shared memory). The header page is the memory file's
//!   (`memfile`), so the memfd can be handed to the next image of a
//!   binary upgrade (`memfd`), which takes the cache over as a warm
//!   restart takes a memory file over. Segments sit at 2 MiB aligned
//!   addresses and memfd offsets, so a region can be collapsed into a
//!   transparent huge page as anonymous memory can (`collapse`; shmem
//!   allows it unless `shmem_enabled` is `deny`).
//! * [`BackingKind::Anonymous`] (`-o item_memory=anonymous`, or where no
//!   memfd can be made): private anonymous memory reserved with
//!   `MAP_NORESERVE` (address space only): pages become resident when
//!   first written and go back to the system with `MADV_DONTNEED` (they
//!   then read as zeros). The header page is unused; the items live as
//!   long as the process image.
//! * [`BackingKind::File`] (`-e`): a shared mapping of a file, whose pages
//!   live in the page cache (tmpfs, a disk's file system) or on persistent
//!   memory (DAX). Everything the server writes into item memory and the
//!   control blocks is in the file the moment it is written, so it outlives
//!   the process, whether it stops or is killed; `memfile` reads the file
//!   back. Pages are handed back with `MADV_REMOVE` (a hole in the file).
//!   The file is locked (`flock`) while mapped, so two servers never share
//!   one.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use crate::segment::{Segment, CONTROL_BLOCK_SIZE};

/// `madvise` advice: collapse a range into transparent huge pages now
/// (Linux 6.1; not yet in the libc crate's constants for every target).
const MADV_COLLAPSE: libc::c_int = 25;

/// The size of a transparent huge page (x86-64, arm64 with 4K pages).
pub const HUGE_PAGE: usize = 2 << 20;
/// Bytes of the header page at the start of the mapping.
pub const HEADER_SIZE: usize = 4096;
const TAIL: usize = 4096;

/// Which memory holds the items (see [`StoreConfig`](crate::StoreConfig)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackingKind {
    /// Private anonymous memory: the items live as long as the process
    /// image.
    #[default]
    Anonymous,
    /// A memfd mapped shared: the items live as long as the memfd, which a
    /// binary upgrade hands to the next image (see `memfd`).
    Memfd,
    /// A file mapped shared (`-e FILE`): the items outlive the process.
    File(PathBuf),
}

/// The memory under a [`Backing`]'s mapping.
enum Memory {
    Anonymous,
    /// A memfd (close-on-exec).
    Memfd(File),
    /// The `-e` file (locked while we hold it).
    File(File),
}

/// Where the parts of a mapping of `segments` segments of `segment_size`
/// bytes lie, from its start (the same in memory and in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Segments the mapping holds.
    pub segments: usize,
    /// Bytes per segment.
    pub segment_size: usize,
    /// Offset of the control-block table.
    pub control_offset: usize,
    /// Offset of segment 0.
    pub data_offset: usize,
    /// Bytes of the whole mapping (and file).
    pub total: usize,
}

impl Layout {
    /// Where the parts of a mapping of `segments` segments of `segment_size`
    /// bytes go.
    pub fn new(segments: usize, segment_size: usize) -> Layout {
        let control_offset = HEADER_SIZE;
        let data_offset =
            (control_offset + segments * CONTROL_BLOCK_SIZE).next_multiple_of(HUGE_PAGE);
        Layout {
            segments,
            segment_size,
            control_offset,
            data_offset,
            total: data_offset + segments * segment_size + TAIL,
        }
    }
}

/// The mapping that holds the control blocks and the segments (see the
/// module comment).
pub struct Backing {
    map: Mapping,
    layout: Layout,
    memory: Memory,
}

impl Backing {
    /// Anonymous memory for `layout`: zeroed (every control block a free
    /// segment that never held items).
    pub fn anonymous(layout: Layout) -> io::Result<Backing> {
        let map = Mapping::reserve(layout.total, HUGE_PAGE)?;
        Ok(Backing {
            map,
            layout,
            memory: Memory::Anonymous,
        })
    }

    /// Maps `file` (opened read-write, locked by the caller) shared at a
    /// huge-page aligned address, after making its length `layout.total`
    /// (new bytes read as zeros).
    pub fn file(file: File, layout: Layout) -> io::Result<Backing> {
        file.set_len(layout.total as u64)?;
        let map = Mapping::shared(&file, layout.total)?;
        Ok(Backing {
            map,
            layout,
            memory: Memory::File(file),
        })
    }

    /// A new memfd `osmium-items` (close-on-exec) of `layout.total` bytes,
    /// all of them holes (zeros, no memory), mapped shared at a huge-page
    /// aligned address. An error where memfds cannot be made (a kernel
    /// before 3.17, a seccomp filter).
    pub fn new_memfd(layout: Layout) -> io::Result<Backing> {
        // SAFETY: memfd_create takes a NUL-terminated name and flags; the
        // fd it returns is new and ours.
        let fd = unsafe { libc::memfd_create(c"osmium-items".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned to us and nothing else owns it.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(layout.total as u64)?;
        Backing::adopt_memfd(file, layout)
    }

    /// Maps a memfd that holds a cache of `layout` (handed over by a
    /// binary upgrade, at least `layout.total` bytes long: checked by the
    /// caller) shared at a huge-page aligned address, as it is.
    pub fn adopt_memfd(file: File, layout: Layout) -> io::Result<Backing> {
        let map = Mapping::shared(&file, layout.total)?;
        Ok(Backing {
            map,
            layout,
            memory: Memory::Memfd(file),
        })
    }

    /// Where its parts are.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether the memory is a file's (`-e`: it outlives the process).
    pub fn is_file(&self) -> bool {
        matches!(self.memory, Memory::File(_))
    }

    /// Whether the mapping starts with a memory file's header (a file's
    /// or a memfd's; see `memfile`).
    pub fn has_header(&self) -> bool {
        !matches!(self.memory, Memory::Anonymous)
    }

    /// The memfd under the mapping, for a memfd.
    pub fn memfd(&self) -> Option<BorrowedFd<'_>> {
        match &self.memory {
            Memory::Memfd(f) => Some(f.as_fd()),
            _ => None,
        }
    }

    /// Which kind of memory this is.
    pub fn kind_name(&self) -> &'static str {
        match self.memory {
            Memory::Anonymous => "anonymous",
            Memory::Memfd(_) => "memfd",
            Memory::File(_) => "file",
        }
    }

    /// The header page (see `memfile`).
    pub fn header(&self) -> *mut u8 {
        self.map.start
    }

    /// The control blocks, one per segment.
    pub fn control_blocks(&self) -> &[Segment] {
        // SAFETY: the table lies inside the mapping, 128-byte aligned (the
        // mapping is huge-page aligned and the table starts at a page);
        // every bit pattern is a valid Segment (integer atomics only), and
        // the mapping lives as long as `self`.
        unsafe {
            std::slice::from_raw_parts(
                self.map.start.add(self.layout.control_offset) as *const Segment,
                self.layout.segments,
            )
        }
    }

    /// The first byte of item memory.
    #[inline]
    pub fn base(&self) -> *mut u8 {
        // SAFETY: data_offset is inside the mapping.
        unsafe { self.map.start.add(self.layout.data_offset) }
    }

    /// Bytes of item memory from `base`.
    pub fn len(&self) -> usize {
        self.layout.segments * self.layout.segment_size
    }

    /// Whether there are no bytes of item memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands the pages of `len` bytes of item memory from `offset` (whole
    /// pages) back to the system: they hold no memory until written again,
    /// and read as zeros until then.
    ///
    /// # Safety
    /// The range must be inside the item memory (`offset + len <= len()`),
    /// and nothing in it may be needed any more: it holds no item that
    /// anyone can still reach (readers that could hold one have unpinned).
    pub unsafe fn release(&self, offset: usize, len: usize) {
        debug_assert!(offset.checked_add(len).is_some_and(|end| end <= self.len()));
        // Shared memory keeps its pages under MADV_DONTNEED (only this
        // mapping's view of them goes): they are punched out instead.
        let advice = if self.has_header() {
            libc::MADV_REMOVE
        } else {
            libc::MADV_DONTNEED
        };
        // SAFETY: the caller guarantees that the range is inside item
        // memory and that its contents are not needed; pages handed back
        // read as zeros (anonymous) or are a hole in the file or memfd
        // (shared).
        unsafe {
            libc::madvise(self.base().add(offset) as *mut libc::c_void, len, advice);
        }
    }

    /// Reserves the file's blocks under `len` bytes of item memory from
    /// `offset` again after a `release` (a hole punched in the file), so
    /// that writing them cannot meet a full file system (a SIGBUS); false
    /// if the file system cannot hold them. Always true for anonymous
    /// memory or a memfd (whose pages come as they are written, as
    /// anonymous memory's), and for a file system without `fallocate`.
    pub fn reserve(&self, offset: usize, len: usize) -> bool {
        let Memory::File(file) = &self.memory else {
            return true;
        };
        let at = self.layout.data_offset + offset;
        // SAFETY: fallocate on our own open descriptor, inside the file
        // (mode 0 never shrinks it); no memory is passed.
        let r =
            unsafe { libc::fallocate(file.as_raw_fd(), 0, at as libc::off_t, len as libc::off_t) };
        r == 0
            || matches!(
                io::Error::last_os_error().raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            )
    }

    /// Backs `len` bytes of item memory from `offset` (whole huge pages,
    /// all resident) with transparent huge pages (`madvise(MADV_COLLAPSE)`,
    /// Linux 6.1+, and for a file only where its file system allows it;
    /// elsewhere a no-op). Contents do not change.
    pub fn collapse(&self, offset: usize, len: usize) {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len()));
        // SAFETY: the range is inside item memory (checked above);
        // collapsing moves its pages into a huge page without changing
        // their contents, and concurrent accesses wait for it in the kernel.
        unsafe {
            libc::madvise(
                self.base().add(offset) as *mut libc::c_void,
                len,
                MADV_COLLAPSE,
            );
        }
    }

    /// Writes every changed page of a file mapping out to the file and
    /// waits for it (`msync(MS_SYNC)`); nothing for anonymous memory or a
    /// memfd (whose pages are nowhere else to write).
    pub fn sync(&self) -> io::Result<()> {
        if !self.is_file() {
            return Ok(());
        }
        // SAFETY: the range is exactly the file's shared mapping.
        let r = unsafe {
            libc::msync(
                self.map.start as *mut libc::c_void,
                self.layout.total,
                libc::MS_SYNC,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// An address range reserved with `mmap` (anonymous, private,
/// `MAP_NORESERVE`), of which `len` bytes from the `align`-aligned `start`
/// are used; unmapped whole when dropped.
struct Mapping {
    addr: *mut u8,
    map_len: usize,
    start: *mut u8,
}

// SAFETY: a Mapping is an address range; it gives out its start address
// and changes pages only through `Backing`'s methods, whose callers keep
// to the arena's access discipline (see `arena`, `item`, `epoch`).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn reserve(len: usize, align: usize) -> io::Result<Mapping> {
        assert!(align.is_power_of_two());
        let map_len = len
            .checked_add(align)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: an anonymous private mapping with no address hint, checked
        // before use; MAP_NORESERVE reserves address space only.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = (addr as usize).next_multiple_of(align) as *mut u8;
        Ok(Mapping {
            addr: addr as *mut u8,
            map_len,
            start,
        })
    }

    /// `len` bytes of `file` from its start mapped shared over the start
    /// of a huge-page aligned reservation (the file is at least `len`
    /// bytes long).
    fn shared(file: &File, len: usize) -> io::Result<Mapping> {
        let map = Mapping::reserve(len, HUGE_PAGE)?;
        // SAFETY: maps the file over the start of our own reservation
        // (MAP_FIXED replaces exactly those pages of it); the file is at
        // least `len` bytes long, so no page of the mapping lies past its
        // end.
        let addr = unsafe {
            libc::mmap(
                map.start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        debug_assert_eq!(addr as *mut u8, map.start);
        Ok(map)
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        if self.is_file() {
            crate::fault::unwatch(self.map.start);
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the reservation made in `reserve` (with the
        // file mapped over part of it); its owner is being dropped, so
        // nothing references it any more.
        unsafe {
            libc::munmap(self.addr as *mut libc::c_void, self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_memory_is_aligned_zeroed_and_released_to_zeros() {
        let b = Backing::anonymous(Layout::new(4, 1 << 20)).unwrap();
        assert_eq!(b.base() as usize % HUGE_PAGE, 0);
        assert_eq!(b.len(), 4 << 20);
        assert_eq!(b.control_blocks().len(), 4);
        // SAFETY: both ranges are inside the mapping, which the test owns;
        // the tail page past `len` is mapped too.
        unsafe {
            assert_eq!(b.base().add(4096).read(), 0);
            b.base().add(4096).write(7);
            assert_eq!(b.base().add((4 << 20) + 4095).read(), 0);
        }
        b.collapse(0, 2 << 20);
        // SAFETY: the byte is still mapped and readable.
        assert_eq!(unsafe { b.base().add(4096).read() }, 7);
        // SAFETY: nothing in the first page range is needed any more.
        unsafe { b.release(0, 8192) };
        // SAFETY: released anonymous pages stay mapped, reading as zeros.
        assert_eq!(unsafe { b.base().add(4096).read() }, 0);
    }

    #[test]
    fn a_file_mapping_keeps_what_was_written() {
        let dir = std::env::temp_dir().join(format!("osmium-backing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mem");
        let layout = Layout::new(2, 1 << 20);
        {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .unwrap();
            let b = Backing::file(f, layout).unwrap();
            assert_eq!(b.base() as usize % HUGE_PAGE, 0);
            // SAFETY: inside item memory, which the test owns.
            unsafe { b.base().add(12345).write(42) };
            b.control_blocks()[1]
                .seq
                .store(9, std::sync::atomic::Ordering::Relaxed);
            b.sync().unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), layout.total as u64);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes[layout.data_offset + 12345], 42);
        let seq_at = layout.control_offset + CONTROL_BLOCK_SIZE + 24;
        assert_eq!(bytes[seq_at], 9);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
