//! What holds item memory: the one mapping in which the arena lays out
//! its segments (segment `i` at `base + i × segment_size`), and the few
//! things the arena asks of it: its base address, handing a range's pages
//! back to the system, backing a range with huge pages, and unmapping it
//! when the store drops.
//!
//! ```text
//!   mapping  +------+------------------------------------------+------+
//!            | pad  | base ... base + len: the arena's segments | tail |
//!            +------+------------------------------------------+------+
//!             up to `align`, so that base is aligned       >= one page
//! ```
//!
//! The arena's logic never depends on which kind of memory it is: a new
//! kind (a file, whose segments outlive the process for a warm restart) is
//! a new [`BackingKind`] and a new [`Backing`] variant that implements the
//! same operations.
//!
//! [`BackingKind::Anonymous`] is private anonymous memory reserved with
//! `MAP_NORESERVE` (address space only): pages become resident when items
//! are first written into them, and go back to the system with
//! `madvise(MADV_DONTNEED)` (they then read as zeros), so resident memory
//! follows the bytes in use, with no allocator header per segment.

use std::io;

/// `madvise` advice: collapse a range into transparent huge pages now
/// (Linux 6.1; not yet in the libc crate's constants for every target).
const MADV_COLLAPSE: libc::c_int = 25;

/// Which memory holds the items (see [`StoreConfig`](crate::StoreConfig)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackingKind {
    /// Private anonymous memory: the items live as long as the process.
    #[default]
    Anonymous,
}

/// The mapping that holds the arena's segments (see the module comment).
pub enum Backing {
    Anonymous(Mapping),
}

impl Backing {
    /// Maps `len` bytes of item memory of the given kind at a base aligned
    /// to `align` (a power of two, at least a page), followed by at least
    /// one more readable page: a lock-free reader that decodes a stale
    /// location near the end reads an item header and key there without
    /// leaving the mapping.
    pub fn new(kind: &BackingKind, len: usize, align: usize) -> io::Result<Backing> {
        assert!(align.is_power_of_two());
        match kind {
            BackingKind::Anonymous => Mapping::anonymous(len, align).map(Backing::Anonymous),
        }
    }

    fn mapping(&self) -> &Mapping {
        match self {
            Backing::Anonymous(m) => m,
        }
    }

    /// The first byte of item memory.
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.mapping().base
    }

    /// Bytes of item memory from `base`.
    pub fn len(&self) -> usize {
        self.mapping().len
    }

    /// Whether there are no bytes of item memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands the pages of `len` bytes from `offset` (whole pages) back to
    /// the system: they hold no memory until written again, and read as
    /// zeros until then.
    ///
    /// # Safety
    /// The range must be inside the item memory (`offset + len <= len()`),
    /// and nothing in it may be needed any more: it holds no item that
    /// anyone can still reach (readers that could hold one have unpinned).
    pub unsafe fn release(&self, offset: usize, len: usize) {
        debug_assert!(offset.checked_add(len).is_some_and(|end| end <= self.len()));
        match self {
            Backing::Anonymous(m) => {
                // SAFETY: the caller guarantees that the range is inside the
                // mapping and that its contents are not needed; anonymous
                // pages that are handed back read as zeros.
                unsafe {
                    libc::madvise(
                        m.base.add(offset) as *mut libc::c_void,
                        len,
                        libc::MADV_DONTNEED,
                    );
                }
            }
        }
    }

    /// Backs `len` bytes from `offset` (whole huge pages, all resident)
    /// with transparent huge pages (`madvise(MADV_COLLAPSE)`, Linux 6.1+;
    /// elsewhere a no-op). Contents do not change.
    pub fn collapse(&self, offset: usize, len: usize) {
        let m = self.mapping();
        assert!(offset.checked_add(len).is_some_and(|end| end <= m.len));
        match self {
            Backing::Anonymous(m) => {
                // SAFETY: the range is inside the mapping (checked above);
                // collapsing moves its pages into a huge page without
                // changing their contents, and concurrent accesses wait for
                // it in the kernel.
                unsafe {
                    libc::madvise(m.base.add(offset) as *mut libc::c_void, len, MADV_COLLAPSE);
                }
            }
        }
    }
}

/// An address range mapped with `mmap`, unmapped when dropped: `len`
/// bytes of item memory from `base`, inside `map_len` bytes from `addr`.
pub struct Mapping {
    addr: *mut u8,
    map_len: usize,
    base: *mut u8,
    len: usize,
}

// SAFETY: a Mapping is an address range; it gives out its base address
// and changes pages only through `Backing`'s methods, whose callers keep
// to the arena's access discipline (see `arena`, `item`, `epoch`).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `len` bytes of private anonymous memory at an `align`-aligned base,
    /// reserved with `MAP_NORESERVE`; `align` bytes more are mapped for the
    /// alignment, of which at least a page follows the item memory.
    fn anonymous(len: usize, align: usize) -> io::Result<Mapping> {
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
        let base = (addr as usize).next_multiple_of(align) as *mut u8;
        Ok(Mapping {
            addr: addr as *mut u8,
            map_len,
            base,
            len,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `anonymous`; its owner
        // (the arena) is being dropped, so nothing references it any more.
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
        let align = 2 << 20;
        let b = Backing::new(&BackingKind::Anonymous, 4 << 20, align).unwrap();
        assert_eq!(b.base() as usize % align, 0);
        assert_eq!(b.len(), 4 << 20);
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
}
