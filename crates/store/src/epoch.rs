//! Grace periods for lock-free readers: item memory (and index buckets)
//! a GET reads without a lock is not rewritten until every reader that
//! could still see it has finished.
//!
//! A GET *pins* for the length of one lookup: it writes the global epoch
//! into its thread's reader slot, reads the index and the item, and clears
//! the slot. A segment whose items were all unlinked is *retired* with the
//! epoch it was freed in (`retire`, which advances the global epoch), and
//! before anyone writes into it again `wait_past` waits until no reader is
//! pinned at that epoch or an older one.
//!
//! ```text
//!   global epoch:  ... 41 | 42 ........................ | 43 ...
//!   reader A:        pin(41) ----- reads seg 7 ---- unpin
//!   evictor:              unlinks seg 7's items, retire(7) -> 42, epoch 43
//!   writer:                          activate(7): wait_past(42)
//!                                    membarrier, then waits for A ----> reuse
//!   reader B:                              pin(43): cannot find seg 7's items
//! ```
//!
//! Pinning costs two plain stores to the thread's own cache line: no atomic
//! read-modify-write and no fence, so consecutive GETs overlap their cache
//! misses. The store-load ordering a pin needs (its slot store must be seen
//! before its reads, by whoever scans the slots) is supplied on the rare
//! writer side by `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which runs
//! a full barrier on every running thread of the process. Where the system
//! call is unavailable, pins issue a full fence themselves instead.
//!
//! A reader that hands item memory to a later system call (a connection
//! gathering several large values into one `writev`) *keeps* its pin
//! past the lookup's guard ([`keep`]) until it drops the [`Kept`].
//! Meanwhile its thread runs more lookups, which may wait for a shard's
//! lock (a contended or stale read) or the arena's pool lock (a due
//! flush_all). So no thread waits for readers while it holds one of those
//! locks, or a lock a holder of one of them waits for: the evictor, which
//! holds a shard's lock and then the evictor head's and the pool's, waits
//! at most 20 ms for its spare segment's readers ([`wait_past_within`])
//! and else drops the item it wanted to keep; a writer taking a free segment waits
//! for its readers after letting the pool lock go (its own write head
//! stays locked: no reader and no shard-lock holder waits for a worker's
//! write head).
//!
//! Slots are process-wide (one per thread, claimed on first use and freed
//! when the thread ends), so every store in the process shares them; a
//! thread beyond the last slot gets no pin and its GETs take the shard
//! lock instead.

use std::cell::Cell;
use std::sync::atomic::{compiler_fence, fence, AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Reader slots (threads that can pin at the same time).
const SLOTS: usize = 512;

/// A thread's reader slot: 0 when not pinned, else
/// `epoch << 3 | OUTER? | KEPT? | 1`: OUTER while the guard that pinned is
/// alive, KEPT while a [`Kept`] is; the slot clears when neither is.
#[repr(align(128))]
struct ReaderSlot {
    state: AtomicU64,
    owned: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE_SLOT: ReaderSlot = ReaderSlot {
    state: AtomicU64::new(0),
    owned: AtomicBool::new(false),
};

static READERS: [ReaderSlot; SLOTS] = [FREE_SLOT; SLOTS];

const PINNED: u64 = 1;
const KEPT: u64 = 2;
const OUTER: u64 = 4;
const EPOCH_SHIFT: u32 = 3;

/// The global epoch; starts above 0, which means "never retired".
static EPOCH: AtomicU64 = AtomicU64::new(1);

/// Every epoch up to this one has been waited out.
static SAFE: AtomicU64 = AtomicU64::new(0);

/// Whether `membarrier` private expedited is registered for this process
/// (the registration is asked for once, here).
static REGISTERED: OnceLock<bool> = OnceLock::new();

/// Registers the process for `membarrier` now rather than at the first
/// pin: the kernel's registration waits for an RCU grace period (5 to
/// 15 ms measured), which the first request would otherwise wait for.
/// `Store::open` calls it.
pub fn prepare() {
    has_membarrier();
}

/// Whether the registration was asked for already (see [`prepare`]).
pub fn prepared() -> bool {
    REGISTERED.get().is_some()
}

/// Whether `membarrier` private expedited is registered for this process.
fn has_membarrier() -> bool {
    *REGISTERED.get_or_init(|| {
        // SAFETY: membarrier takes plain integers and touches no memory of
        // ours; a failure (old kernel, seccomp) is reported as -1.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
                0,
            )
        };
        r == 0
    })
}

const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Owns a thread's slot index for the thread's lifetime.
struct SlotOwner(Cell<Option<usize>>);

impl SlotOwner {
    fn claim() -> SlotOwner {
        let slot = READERS.iter().position(|s| {
            !s.owned.load(Ordering::Relaxed)
                && s.owned
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        });
        SlotOwner(Cell::new(slot))
    }
}

impl Drop for SlotOwner {
    fn drop(&mut self) {
        if let Some(i) = self.0.get() {
            READERS[i].state.store(0, Ordering::Release);
            READERS[i].owned.store(false, Ordering::Release);
        }
    }
}

thread_local! {
    static MY_SLOT: SlotOwner = SlotOwner::claim();
}

/// A pinned reader; unpins when dropped. Not `Send`: it is its thread's.
pub struct Guard {
    slot: usize,
    /// False for a pin nested in another on the same thread (the outer one
    /// unpins).
    outer: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Pins the calling thread: until the guard drops, no segment retired at
/// the current epoch or later is rewritten. None if the thread has no slot
/// (the caller then uses its locks).
#[inline]
pub fn pin() -> Option<Guard> {
    let fast = has_membarrier();
    let slot = MY_SLOT.try_with(|s| s.0.get()).ok().flatten()?;
    let r = &READERS[slot];
    if r.state.load(Ordering::Relaxed) != 0 {
        return Some(Guard {
            slot,
            outer: false,
            _not_send: std::marker::PhantomData,
        });
    }
    let e = EPOCH.load(Ordering::Acquire);
    r.state
        .store(e << EPOCH_SHIFT | OUTER | PINNED, Ordering::Relaxed);
    if fast {
        // Ordered against the reads that follow by `wait_past`'s membarrier.
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
    Some(Guard {
        slot,
        outer: true,
        _not_send: std::marker::PhantomData,
    })
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        if self.outer {
            let r = &READERS[self.slot];
            let s = r.state.load(Ordering::Relaxed);
            let left = if s & KEPT != 0 { s & !OUTER } else { 0 };
            r.state.store(left, Ordering::Release);
        }
    }
}

/// The calling thread's pin, kept past the guard that took it (see the
/// module comment); unpins when dropped unless that guard is still alive.
pub struct Kept {
    slot: usize,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Keeps the calling thread's current pin until the returned [`Kept`]
/// drops, so memory read under it stays valid after the guard goes. None
/// when the thread is not pinned or already keeps its pin.
pub fn keep() -> Option<Kept> {
    let slot = MY_SLOT.try_with(|s| s.0.get()).ok().flatten()?;
    let r = &READERS[slot];
    let s = r.state.load(Ordering::Relaxed);
    if s == 0 || s & KEPT != 0 {
        return None;
    }
    r.state.store(s | KEPT, Ordering::Relaxed);
    Some(Kept {
        slot,
        _not_send: std::marker::PhantomData,
    })
}

impl Drop for Kept {
    fn drop(&mut self) {
        let r = &READERS[self.slot];
        let s = r.state.load(Ordering::Relaxed);
        let left = if s & OUTER != 0 { s & !KEPT } else { 0 };
        r.state.store(left, Ordering::Release);
    }
}

/// Whether the calling thread keeps its pin (a [`Kept`] is alive): memory
/// read under it is still in use, so the thread must not write anything
/// that could reuse a segment (`wait_past` does not wait for the calling
/// thread's own pin).
#[inline]
pub fn keeps() -> bool {
    MY_SLOT
        .try_with(|s| s.0.get())
        .ok()
        .flatten()
        .is_some_and(|slot| READERS[slot].state.load(Ordering::Relaxed) & KEPT != 0)
}

/// Whether the calling thread is pinned (by a guard or a [`Kept`]).
#[inline]
pub fn pinned() -> bool {
    MY_SLOT
        .try_with(|s| s.0.get())
        .ok()
        .flatten()
        .is_some_and(|slot| READERS[slot].state.load(Ordering::Relaxed) != 0)
}

/// Marks memory that readers can no longer reach from the index (every
/// entry pointing into it was unlinked before this call) as retired;
/// returns the epoch to pass to `wait_past` before rewriting it.
pub fn retire() -> u64 {
    EPOCH.fetch_add(1, Ordering::SeqCst)
}

/// Waits until no reader is pinned at epoch `retired` or before (0 returns
/// at once). The calling thread's own pin, if any, is not waited for.
pub fn wait_past(retired: u64) {
    past(retired, Wait::Always);
}

/// Whether no reader is pinned at epoch `retired` or before, without
/// waiting: for a writer that holds a lock a reader with a kept pin may
/// want (see the module comment).
pub fn is_past(retired: u64) -> bool {
    past(retired, Wait::Never)
}

/// Waits as `wait_past`, but at most `limit`; false if a reader pinned at
/// `retired` or before remains. For a writer holding a lock a reader with
/// a kept pin may be waiting for: the bound breaks that cycle, and the
/// usual pins (one lookup, or one connection's run) end well within it.
pub fn wait_past_within(retired: u64, limit: std::time::Duration) -> bool {
    past(retired, Wait::Until(std::time::Instant::now() + limit))
}

enum Wait {
    Never,
    Until(std::time::Instant),
    Always,
}

/// Whether epoch `retired` is known to be waited out already (no system
/// call, no scan).
#[inline]
pub fn waited_out(retired: u64) -> bool {
    retired == 0 || SAFE.load(Ordering::Acquire) >= retired
}

fn past(retired: u64, wait: Wait) -> bool {
    if retired == 0 || SAFE.load(Ordering::Acquire) >= retired {
        return true;
    }
    // Make every reader's slot store visible before we look at the slots.
    if has_membarrier() {
        let barrier = || {
            // SAFETY: as in has_membarrier.
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) }
        };
        if barrier() != 0 {
            // The registration is per address space: a forked child has to
            // register again (readers rely on it from their first pin).
            // SAFETY: as in has_membarrier.
            unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                    0,
                    0,
                )
            };
            let ok = barrier() == 0;
            debug_assert!(ok, "membarrier failed after registering");
        }
    }
    fence(Ordering::SeqCst);
    let mine = MY_SLOT.try_with(|s| s.0.get()).ok().flatten();
    for (i, r) in READERS.iter().enumerate() {
        if Some(i) == mine || !r.owned.load(Ordering::Acquire) {
            continue;
        }
        let mut spins = 0u32;
        loop {
            let s = r.state.load(Ordering::Acquire);
            if s == 0 || s >> EPOCH_SHIFT > retired {
                break;
            }
            match wait {
                Wait::Never => return false,
                Wait::Until(deadline) if spins >= 64 && std::time::Instant::now() > deadline => {
                    return false
                }
                _ => {}
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
    SAFE.fetch_max(retired, Ordering::AcqRel);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn waits_for_a_reader_pinned_before_the_retirement() {
        let pinned = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let (p, r) = (pinned.clone(), release.clone());
        let reader = std::thread::spawn(move || {
            let g = pin().expect("a slot");
            p.store(true, Ordering::SeqCst);
            while !r.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(g);
        });
        while !pinned.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let e = retire();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let waiter = std::thread::spawn(move || {
            wait_past(e);
            d.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(10));
        assert!(
            !done.load(Ordering::SeqCst),
            "returned while a reader was pinned"
        );
        release.store(true, Ordering::SeqCst);
        waiter.join().unwrap();
        reader.join().unwrap();
        assert!(done.load(Ordering::SeqCst));
        // A pin taken after the retirement is not waited for.
        let _g = pin().expect("a slot");
        let e2 = retire();
        let t = std::thread::spawn(move || wait_past(e2 - 1));
        t.join().unwrap();
    }

    #[test]
    fn a_kept_pin_outlives_its_guard_and_is_waited_for() {
        assert!(keep().is_none(), "nothing to keep when not pinned");
        let g = pin().expect("a slot");
        let slot = g.slot;
        let kept = keep().expect("pinned");
        assert!(keep().is_none(), "kept once");
        drop(g);
        assert!(pinned(), "the kept pin stays after its guard");
        let inner = pin().expect("a slot");
        assert!(!inner.outer, "a pin while kept is nested");
        drop(inner);
        assert!(pinned());
        // A writer retiring now waits for the kept pin.
        let e = retire();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let waiter = std::thread::spawn(move || {
            wait_past(e);
            d.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(10));
        assert!(!done.load(Ordering::SeqCst), "returned while kept");
        drop(kept);
        waiter.join().unwrap();
        assert!(!pinned());
        assert_eq!(READERS[slot].state.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn is_past_says_whether_a_reader_pinned_before_the_retirement_remains() {
        let pinned = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let (p, r) = (pinned.clone(), release.clone());
        let reader = std::thread::spawn(move || {
            let g = pin().expect("a slot");
            let kept = keep().expect("pinned");
            drop(g);
            p.store(true, Ordering::SeqCst);
            while !r.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(kept);
        });
        while !pinned.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let e = retire();
        assert!(!is_past(e), "a kept pin from before the retirement");
        release.store(true, Ordering::SeqCst);
        reader.join().unwrap();
        // (Other tests' readers may be pinned too: wait them out.)
        wait_past(e);
        assert!(is_past(e) && waited_out(e));
    }

    #[test]
    fn a_kept_pin_dropped_inside_its_guard_leaves_the_guard_pinned() {
        let g = pin().expect("a slot");
        let kept = keep().expect("pinned");
        drop(kept);
        assert!(pinned(), "the guard still pins");
        drop(g);
        assert!(!pinned());
    }

    #[test]
    fn nested_pins_keep_the_outer_one() {
        let a = pin().expect("a slot");
        let b = pin().expect("a slot");
        drop(b);
        let slot = a.slot;
        assert_ne!(READERS[slot].state.load(Ordering::SeqCst), 0);
        drop(a);
        assert_eq!(READERS[slot].state.load(Ordering::SeqCst), 0);
    }
}
