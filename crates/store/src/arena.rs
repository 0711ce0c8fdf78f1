//! Item memory: a bounded set of fixed-size segments, appended to by write
//! heads and reclaimed whole.
//!
//! ```text
//!   SegmentId:  0        1        2        3   ...  (limit = -m / segment_size)
//!             +--------+--------+--------+--------+
//!   memory    |items...|items...|items...|        |   each segment_size bytes,
//!             +--------+--------+--------+--------+   resident once written
//!   state      SEALED   ACTIVE   SEALED   FREE
//!                 ^ oldest in FIFO           ^ free list
//! ```
//!
//! All segments live in one anonymous mapping reserved at start for the
//! arena's capacity (`MAP_NORESERVE`: address space only). A segment's
//! pages become resident when items are first written into them and are
//! handed back with `madvise(MADV_DONTNEED)` when cache_memlimit shrinks, so
//! resident memory follows the bytes used, with no per-segment allocator
//! header, and segment `i` is at `base + i * segment_size` (the layout a
//! file-backed mapping needs for warm restart).
//!
//! A segment is FREE (on the free list), ACTIVE (owned by one write head,
//! being appended to), SEALED (full, in the FIFO, oldest first) or CLAIMED
//! (a walker — the evictor or the expiry reclaimer — is reading it). Items
//! are addressed by `(SegmentId, offset)`; nothing in item memory points at
//! anything else, so the segments can later be file-backed (warm restart) or
//! partly on flash.
//!
//! Allocation takes the write head's mutex only (one head per worker thread,
//! so workers do not contend); a head that fills its segment seals it and
//! takes a new one from the pool: free list, then fresh memory while under
//! the limit, then the oldest sealed segment, whose live items the caller
//! evicts (see `Store::evict_segment`).
//!
//! `pending` counts writers that allocated in a segment but have not yet
//! published their item; a segment is only walked once it is sealed and
//! `pending` is 0, so every item in `0..used` is complete.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::item::ItemPtr;

pub type SegmentId = u32;

/// A write head moves to a new segment once its segment is this many
/// seconds old, so that item access times fit 16 bits.
const MAX_SEGMENT_AGE: u32 = 60_000;

pub const STATE_FREE: u8 = 0;
pub const STATE_ACTIVE: u8 = 1;
pub const STATE_SEALED: u8 = 2;
pub const STATE_CLAIMED: u8 = 3;

/// Most segments an arena can ever hold.
pub const MAX_SEGMENTS: usize = 1 << 20;

pub struct Segment {
    pub state: AtomicU8,
    /// Bytes allocated from the start of the segment.
    pub used: AtomicUsize,
    pub pending: AtomicU32,
    pub live_items: AtomicU32,
    pub live_bytes: AtomicUsize,
    /// Incremented each time the segment is reused: lets walkers notice.
    pub generation: AtomicU64,
    /// Numbers the segment's activations across the arena (0, 1, ...):
    /// the high half of the CAS uniques of the items written into it.
    pub seq: AtomicU64,
    /// Relative time of activation; item access times are relative to it.
    pub base_time: AtomicU32,
    /// Items at offsets below this were invalidated by flush_all.
    pub flushed_below: AtomicUsize,
}

impl Segment {
    fn new() -> Segment {
        Segment {
            state: AtomicU8::new(STATE_FREE),
            used: AtomicUsize::new(0),
            pending: AtomicU32::new(0),
            live_items: AtomicU32::new(0),
            live_bytes: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            base_time: AtomicU32::new(0),
            flushed_below: AtomicUsize::new(0),
        }
    }
}

struct Pool {
    free: Vec<SegmentId>,
    /// Sealed (or claimed-by-reclaimer) segments, oldest first.
    fifo: VecDeque<SegmentId>,
    /// Segments that have memory.
    allocated: usize,
    /// Segments allowed by the memory limit.
    limit: usize,
    /// Next segment id never used yet.
    next_fresh: SegmentId,
    /// Ids whose memory was handed back (cache_memlimit shrank): reused
    /// before fresh ones.
    released: Vec<SegmentId>,
}

/// One append point; each worker thread has its own.
pub struct WriteHead {
    seg: Option<SegmentId>,
    offset: usize,
}

/// A reserved slot, not yet published. Drop it with `Arena::finish_write`.
pub struct Slot {
    pub seg: SegmentId,
    pub offset: usize,
    pub ptr: ItemPtr,
}

pub enum Reserve {
    /// Got a slot.
    Slot(Slot),
    /// The pool is exhausted: this sealed segment was claimed for eviction;
    /// the caller must evict its items, then call `recycle`, then retry.
    Evict(SegmentId),
    /// Nothing can be freed (evictions disabled, or every segment busy).
    OutOfMemory,
}

pub struct Arena {
    /// The mapping holding every segment.
    base: *mut u8,
    segment_size: usize,
    segments: Box<[Segment]>,
    pool: Mutex<Pool>,
    heads: Box<[Mutex<WriteHead>]>,
    evictions_enabled: bool,
    next_seq: AtomicU64,
}

impl Arena {
    pub fn new(memory_limit: usize, segment_size: usize, heads: usize, evictions: bool) -> Arena {
        assert!(segment_size.is_power_of_two());
        let limit = (memory_limit / segment_size).clamp(1, MAX_SEGMENTS);
        // Room to grow with cache_memlimit without reallocating the table
        // (and without widening index addresses much: see `index`).
        let capacity = (limit * 2).clamp((4 << 30) / segment_size, MAX_SEGMENTS);
        let bytes = capacity * segment_size;
        // SAFETY: an anonymous private mapping with no address hint, checked
        // before use; MAP_NORESERVE reserves address space only.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            base != libc::MAP_FAILED,
            "cannot reserve {bytes} bytes of address space for item memory"
        );
        let segments: Vec<Segment> = (0..capacity).map(|_| Segment::new()).collect();
        let heads = heads.clamp(1, limit.max(1));
        Arena {
            base: base as *mut u8,
            segment_size,
            segments: segments.into_boxed_slice(),
            pool: Mutex::new(Pool {
                free: Vec::new(),
                fifo: VecDeque::new(),
                allocated: 0,
                limit,
                next_fresh: 0,
                released: Vec::new(),
            }),
            heads: (0..heads)
                .map(|_| {
                    Mutex::new(WriteHead {
                        seg: None,
                        offset: 0,
                    })
                })
                .collect(),
            evictions_enabled: evictions,
            next_seq: AtomicU64::new(0),
        }
    }

    pub fn segment_size(&self) -> usize {
        self.segment_size
    }

    /// log2 of the segment size.
    pub fn segment_shift(&self) -> u32 {
        self.segment_size.trailing_zeros()
    }

    /// Segments the arena can ever address (its table's length).
    pub fn capacity(&self) -> usize {
        self.segments.len()
    }

    pub fn heads(&self) -> usize {
        self.heads.len()
    }

    #[inline]
    pub fn segment(&self, id: SegmentId) -> &Segment {
        &self.segments[id as usize]
    }

    /// The item at `(seg, offset)`.
    #[inline]
    pub fn item(&self, seg: SegmentId, offset: usize) -> ItemPtr {
        debug_assert!((seg as usize) < self.segments.len() && offset < self.segment_size);
        // SAFETY: seg is below the capacity and offset below segment_size,
        // so the address is inside the arena's mapping, which lives until
        // the arena drops; offset is an item offset handed out by `reserve`
        // (2-aligned, and the mapping is page aligned).
        unsafe { ItemPtr::from_raw(self.base.add(seg as usize * self.segment_size + offset)) }
    }

    /// Reserves `size` bytes (an item's size) on write head `head` at
    /// relative time `now`.
    pub fn reserve(&self, head: usize, size: usize, now: u32) -> Reserve {
        debug_assert!(size <= self.segment_size);
        let mut h = self.heads[head % self.heads.len()].lock();
        loop {
            if let Some(seg) = h.seg {
                let s = self.segment(seg);
                // Item access times are 16-bit offsets from the base time.
                let young = now.wrapping_sub(s.base_time.load(Ordering::Relaxed)) < MAX_SEGMENT_AGE;
                if h.offset + size <= self.segment_size && young {
                    let offset = h.offset;
                    h.offset += size;
                    s.pending.fetch_add(1, Ordering::AcqRel);
                    s.used.store(h.offset, Ordering::Release);
                    return Reserve::Slot(Slot {
                        seg,
                        offset,
                        ptr: self.item(seg, offset),
                    });
                }
                self.seal(seg);
                h.seg = None;
            }
            match self.take_segment(now) {
                Ok(seg) => {
                    h.seg = Some(seg);
                    h.offset = 0;
                }
                Err(r) => return r,
            }
        }
    }

    /// Marks a slot's item as published (or abandoned).
    #[inline]
    pub fn finish_write(&self, seg: SegmentId) {
        self.segment(seg).pending.fetch_sub(1, Ordering::AcqRel);
    }

    fn seal(&self, seg: SegmentId) {
        let mut pool = self.pool.lock();
        self.segment(seg)
            .state
            .store(STATE_SEALED, Ordering::Release);
        pool.fifo.push_back(seg);
    }

    fn take_segment(&self, now: u32) -> Result<SegmentId, Reserve> {
        let mut pool = self.pool.lock();
        while pool.allocated > pool.limit {
            // cache_memlimit shrank: release free segments first.
            match pool.free.pop() {
                Some(seg) => {
                    self.release_memory(seg);
                    pool.released.push(seg);
                    pool.allocated -= 1;
                }
                None => break,
            }
        }
        if pool.allocated <= pool.limit {
            if let Some(seg) = pool.free.pop() {
                self.activate(seg, now);
                return Ok(seg);
            }
        }
        if pool.allocated < pool.limit {
            let seg = match pool.released.pop() {
                Some(seg) => Some(seg),
                None if (pool.next_fresh as usize) < self.segments.len() => {
                    pool.next_fresh += 1;
                    Some(pool.next_fresh - 1)
                }
                None => None,
            };
            if let Some(seg) = seg {
                pool.allocated += 1;
                self.activate(seg, now);
                return Ok(seg);
            }
        }
        // Reuse a sealed segment: one with nothing live first, else (when
        // evicting) the oldest.
        let pick = |want_empty: bool, pool: &Pool| {
            pool.fifo.iter().position(|&seg| {
                let s = self.segment(seg);
                s.state.load(Ordering::Acquire) == STATE_SEALED
                    && s.pending.load(Ordering::Acquire) == 0
                    && (!want_empty || s.live_items.load(Ordering::Acquire) == 0)
            })
        };
        let pos = pick(true, &pool).or_else(|| {
            if self.evictions_enabled {
                pick(false, &pool)
            } else {
                None
            }
        });
        let Some(pos) = pos else {
            return Err(Reserve::OutOfMemory);
        };
        let seg = pool.fifo.remove(pos).expect("fifo position");
        self.segment(seg)
            .state
            .store(STATE_CLAIMED, Ordering::Release);
        Err(Reserve::Evict(seg))
    }

    fn activate(&self, seg: SegmentId, now: u32) {
        let s = self.segment(seg);
        s.seq.store(
            self.next_seq.fetch_add(1, Ordering::Relaxed),
            Ordering::Release,
        );
        s.base_time.store(now, Ordering::Release);
        s.flushed_below.store(0, Ordering::Release);
        s.used.store(0, Ordering::Release);
        s.live_items.store(0, Ordering::Release);
        s.live_bytes.store(0, Ordering::Release);
        s.generation.fetch_add(1, Ordering::AcqRel);
        s.state.store(STATE_ACTIVE, Ordering::Release);
    }

    /// Hands a free segment's pages back to the system.
    fn release_memory(&self, seg: SegmentId) {
        let s = self.segment(seg);
        // SAFETY: the range is one whole segment inside the mapping; a free
        // segment holds no indexed items, and its pages read back as zeros.
        unsafe {
            libc::madvise(
                self.base.add(seg as usize * self.segment_size) as *mut libc::c_void,
                self.segment_size,
                libc::MADV_DONTNEED,
            );
        }
        s.state.store(STATE_FREE, Ordering::Release);
    }

    /// Returns an evicted (now empty) segment to the free list.
    pub fn recycle(&self, seg: SegmentId) {
        let mut pool = self.pool.lock();
        self.segment(seg).state.store(STATE_FREE, Ordering::Release);
        pool.free.push(seg);
    }

    /// Claims a sealed segment for the expiry reclaimer: the `cursor`-th in
    /// FIFO order (wrapping). It stays in the FIFO while claimed.
    pub fn claim_for_reclaim(&self, cursor: usize) -> Option<SegmentId> {
        let pool = self.pool.lock();
        if pool.fifo.is_empty() {
            return None;
        }
        let seg = pool.fifo[cursor % pool.fifo.len()];
        let s = self.segment(seg);
        if s.pending.load(Ordering::Acquire) != 0 {
            return None;
        }
        s.state
            .compare_exchange(
                STATE_SEALED,
                STATE_CLAIMED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .ok()
            .map(|_| seg)
    }

    /// Ends a reclaimer claim; an emptied segment goes to the free list.
    pub fn unclaim(&self, seg: SegmentId) {
        let mut pool = self.pool.lock();
        let s = self.segment(seg);
        if s.live_items.load(Ordering::Acquire) == 0 {
            if let Some(pos) = pool.fifo.iter().position(|&x| x == seg) {
                pool.fifo.remove(pos);
            }
            s.state.store(STATE_FREE, Ordering::Release);
            pool.free.push(seg);
        } else {
            s.state.store(STATE_SEALED, Ordering::Release);
        }
    }

    /// Changes the memory limit (cache_memlimit). Growth takes effect at
    /// once; shrinking releases memory as segments are recycled.
    pub fn set_limit(&self, memory_limit: usize) -> bool {
        let limit = memory_limit / self.segment_size;
        if limit == 0 || limit > self.segments.len() {
            return false;
        }
        self.pool.lock().limit = limit;
        true
    }

    /// (segments with memory, segment limit)
    pub fn usage(&self) -> (usize, usize) {
        let pool = self.pool.lock();
        (pool.allocated, pool.limit)
    }

    /// flush_all: invalidates every item written so far (each segment's
    /// items below its current fill mark).
    pub fn flush(&self) {
        let pool = self.pool.lock();
        for s in &self.segments[..pool.next_fresh as usize] {
            s.flushed_below
                .store(s.used.load(Ordering::Acquire), Ordering::Release);
        }
    }

    /// Number of segments in the FIFO (for the reclaimer's cursor).
    pub fn sealed_count(&self) -> usize {
        self.pool.lock().fifo.len()
    }
}

// SAFETY: the mapping is shared item memory whose access discipline is
// enforced by the index shard locks (see `item`); everything else in the
// arena is atomics and mutexes.
unsafe impl Send for Arena {}
unsafe impl Sync for Arena {}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in new(); nothing can
        // reference item memory once the arena is dropped.
        unsafe {
            libc::munmap(
                self.base as *mut libc::c_void,
                self.segments.len() * self.segment_size,
            );
        }
    }
}
