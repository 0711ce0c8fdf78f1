//! The ghost: fingerprints of keys recently evicted from the small queue
//! (S3-FIFO's ghost queue). A key written again while its fingerprint is
//! here skips small and goes straight to main.
//!
//! ```text
//!  slots: [u16; n]   n = a power of two near the number of items the
//!                    cache holds
//!  slot of a key  = (hash >> 32) & (n - 1)
//!  fingerprint    = ((hash >> 16) as u16) | 1       (0 = empty)
//! ```
//!
//! Direct mapped: a newer key takes the slot of an older one, so the ghost
//! forgets in roughly FIFO order and never needs a lock (slots are atomics;
//! a lost race only forgets a key). Two bytes per slot, in an anonymous
//! mapping whose pages become resident only once evictions write them.

use std::sync::atomic::{AtomicU16, Ordering};

/// S3-FIFO's ghost queue: fingerprints of keys recently evicted from small.
pub struct Ghost {
    slots: *mut AtomicU16,
    mask: usize,
}

// SAFETY: the mapping is owned by the Ghost (made in `new`, unmapped only
// by its drop) and tied to no thread, so another thread may own it.
unsafe impl Send for Ghost {}
// SAFETY: through `&Ghost` the slots are reached only as `&AtomicU16`
// (`slot`), so threads sharing it race only on atomics, and the mapping
// stays mapped while any `&Ghost` lives (drop needs the Ghost itself).
unsafe impl Sync for Ghost {}

impl Ghost {
    /// A ghost of about `items` entries (at least 1024).
    pub fn new(items: usize) -> Ghost {
        let n = items.clamp(1024, 1 << 30).next_power_of_two();
        // SAFETY: an anonymous private mapping with no address hint,
        // checked before use; zeroed pages are empty slots.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n * 2,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "ghost: cannot map {} bytes", n * 2);
        Ghost {
            slots: p as *mut AtomicU16,
            mask: n - 1,
        }
    }

    #[inline]
    fn slot(&self, hash: u64) -> &AtomicU16 {
        // SAFETY: the index is masked to the mapping's n slots.
        unsafe { &*self.slots.add((hash >> 32) as usize & self.mask) }
    }

    #[inline]
    fn fingerprint(hash: u64) -> u16 {
        (hash >> 16) as u16 | 1
    }

    /// Remembers an evicted key.
    #[inline]
    pub fn insert(&self, hash: u64) {
        self.slot(hash)
            .store(Self::fingerprint(hash), Ordering::Relaxed);
    }

    /// Was the key evicted recently? Forgets it if so.
    #[inline]
    pub fn take(&self, hash: u64) -> bool {
        let slot = self.slot(hash);
        let fp = Self::fingerprint(hash);
        slot.load(Ordering::Relaxed) == fp
            && slot
                .compare_exchange(fp, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

impl Drop for Ghost {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in new().
        unsafe {
            libc::munmap(self.slots as *mut libc::c_void, (self.mask + 1) * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_and_forgets() {
        let g = Ghost::new(1000);
        let h = 0x1234_5678_9abc_def0u64;
        assert!(!g.take(h));
        g.insert(h);
        assert!(g.take(h));
        assert!(!g.take(h), "taken once");
        g.insert(h);
        g.insert(h ^ (1 << 20)); // same slot, another fingerprint
        assert!(!g.take(h));
    }
}
