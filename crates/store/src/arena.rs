//! Item memory: a bounded set of fixed-size segments, appended to by write
//! heads and reclaimed whole.
//!
//! ```text
//!   SegmentId:  0        1        2        3   ...  (limit = -m / segment_size)
//!             +--------+--------+--------+--------+
//!   memory    |items...|items...|items...|        |   each segment_size bytes,
//!             +--------+--------+--------+--------+   resident once written
//!   state      SEALED   ACTIVE   SEALED   FREE
//!   queue      small    main     main
//!                 ^ oldest in its FIFO       ^ free list
//! ```
//!
//! **Eviction (S3-FIFO on segments).** Sealed segments sit in one of two
//! FIFOs: *small* (new items; about a tenth of memory) and *main* (items
//! that proved themselves). Each worker has a write head for small, and
//! one for main (in a small arena they share one for main, since every
//! half-filled segment costs); a new item goes to small unless its key is
//! in the ghost (see `Store`).
//! When every segment holds items, a writer makes room (`Store::
//! make_room`): it compacts a mostly dead segment (see `cleaning`: its
//! live items are copied, none is dropped) or, when the live items fill
//! memory, evicts: the oldest segment of small if small is over its
//! share, else the oldest of main. The evictor (`Store::evict_segment`)
//! copies the victim's items that were hit into main through the evictor
//! head, and drops the rest: a one-time scan passes through small without
//! displacing main. The evictor head and the compactor's heads always
//! have room for one victim's items: when their segment fills they take
//! the *spare*, which the next emptied victim replaces.
//!
//! Each segment counts the bytes of its items the index links to
//! (`Segment::live_bytes`), so `used - live` is its dead space: what
//! overwrites, deletes and abandoned writes left in it.
//!
//! All segments live in one mapping reserved at start for the arena's
//! capacity (see `backing`: anonymous memory that is address space only
//! until written). A segment's pages become resident when items are first
//! written into them and are handed back to the system (`Backing::release`)
//! when cache_memlimit shrinks, so resident memory follows the bytes used,
//! with no per-segment allocator header, and segment `i` is at
//! `base + i * segment_size` (the layout a file-backed mapping needs for
//! warm restart).
//!
//! A segment is FREE (on the free list), ACTIVE (owned by one write head,
//! being appended to; a compactor's destination is in its FIFO already),
//! SEALED (full, in the FIFO, oldest first) or CLAIMED (a walker — the
//! evictor, the compactor or the expiry reclaimer — is reading it). Items
//! are addressed by `(SegmentId, offset)`; nothing in item memory points at
//! anything else, so the segments can later be file-backed (warm restart) or
//! partly on flash.
//!
//! Allocation takes the write head's mutex only (a small-queue head per
//! worker thread, so new items do not contend); a head that fills its segment seals
//! it and takes a new one from the pool: free list, then fresh memory while
//! under the limit; else (`Reserve::Full`) the caller makes room, as above,
//! and asks again.
//!
//! `pending` counts writers that allocated in a segment but have not yet
//! published their item; a segment is only walked once it is sealed and
//! `pending` is 0, so every item in `0..used` is complete.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::backing::{Backing, HUGE_PAGE};
use crate::epoch;
use crate::item::{ItemPtr, ItemSpec, STATE_DEAD};
pub use crate::segment::{
    Segment, SegmentId, PACKED, PACK_NOT_WORTH, PACK_NOT_YET, STATE_ACTIVE, STATE_CLAIMED,
    STATE_FREE, STATE_SEALED,
};

mod cleaning;
mod queues;
pub use cleaning::{CleanPolicy, CleanScan, CleanStats, Room};
pub use queues::QueueFigures;

/// A write head moves to a new segment once its segment is this many
/// seconds old, so that item access times fit 16 bits.
const MAX_SEGMENT_AGE: u32 = 60_000;

/// The two eviction queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    /// S3-FIFO's small queue: where new items go.
    Small = 0,
    /// S3-FIFO's main queue: items hit while in small, or remembered by the
    /// ghost.
    Main = 1,
}

/// Most segments an arena can ever hold.
pub const MAX_SEGMENTS: usize = 1 << 20;

/// Asks the CPU to bring the cache line at `p` into its caches: a hint,
/// with no effect on memory (a prefetch never faults, whatever `p` is).
#[inline]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 reads nothing architecturally and cannot fault,
    // even for an unmapped address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

struct Pool {
    free: Vec<SegmentId>,
    /// Sealed (or claimed-by-reclaimer) segments of each queue, oldest
    /// first.
    fifo: [VecDeque<SegmentId>; 2],
    /// The evictor's next segment (see the module comment).
    spare: Option<SegmentId>,
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

/// One append point; each worker thread has one per queue. Cache-line
/// aligned: heads of different threads must not share a line.
#[repr(align(128))]
pub struct WriteHead {
    seg: Option<SegmentId>,
    offset: usize,
}

/// A reserved slot, not yet published. Drop it with `Arena::finish_write`.
pub struct Slot {
    /// The segment.
    pub seg: SegmentId,
    /// Byte offset of the slot in the segment.
    pub offset: usize,
    /// The slot, where the item is written.
    pub ptr: ItemPtr,
}

/// What `Arena::reserve` got.
pub enum Reserve {
    /// Got a slot.
    Slot(Slot),
    /// Every segment holds items: the caller makes room (compacts or
    /// evicts a segment, see `Store::make_room`), then retries.
    Full,
}

/// Item memory: the segments, their queues and the write heads (see the module
/// comment).
pub struct Arena {
    /// Where the segments start (huge page aligned): `backing.base()`,
    /// kept here for item lookups.
    base: *mut u8,
    /// Huge-page regions (of `region_segments` segments) already backed by
    /// a huge page.
    collapsed: Box<[AtomicBool]>,
    region_segments: usize,
    segment_size: usize,
    /// The control blocks, in the backing's mapping (see `segment`).
    segments: &'static [Segment],
    pool: Mutex<Pool>,
    /// Small heads of the workers, then the main heads, then the evictor
    /// head, then the compactor's heads (small, main).
    heads: Box<[Mutex<WriteHead>]>,
    workers: usize,
    /// One main head per worker, or (in a small arena, where every
    /// half-filled segment costs) one they share.
    main_heads: usize,
    evictions_enabled: bool,
    next_seq: AtomicU64,
    /// The latest flush_all number applied (see `flush`).
    flush_epoch: AtomicU32,
    /// The memory holding every segment.
    backing: Backing,
}

/// Longest the evictor waits for the readers of its spare segment (it holds
/// a shard's lock meanwhile).
const SPARE_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

impl Arena {
    /// Segments of `segment_size` bytes an arena for `memory_limit` bytes
    /// may use (its limit), and how many it can address (its capacity:
    /// room to grow with cache_memlimit without remapping, and without
    /// widening index addresses much, see `index`). A memory file holds
    /// exactly the limit.
    pub fn geometry(memory_limit: usize, segment_size: usize, file: bool) -> (usize, usize) {
        assert!(segment_size.is_power_of_two());
        let limit = (memory_limit / segment_size).clamp(1, MAX_SEGMENTS);
        let capacity = if file {
            limit
        } else {
            (limit * 2).clamp((4 << 30) / segment_size, MAX_SEGMENTS)
        };
        (limit, capacity)
    }

    /// An arena of `memory_limit` bytes for `workers` worker threads over
    /// `backing` (sized by `geometry`), every segment free. A backing
    /// whose control blocks hold segments written before (a memory file
    /// being recovered) is taken over with `recover` instead.
    pub fn new(backing: Backing, memory_limit: usize, workers: usize, evictions: bool) -> Arena {
        let layout = *backing.layout();
        let segment_size = layout.segment_size;
        let capacity = layout.segments;
        let limit = (memory_limit / segment_size).clamp(1, capacity);
        let base = backing.base();
        // SAFETY: the control blocks lie in the backing's mapping, which the
        // arena owns and unmaps only when it drops (after its last use of
        // this slice); the slice's 'static lifetime never escapes the arena
        // (`segment` hands out borrows of `&self`).
        let segments: &'static [Segment] = unsafe {
            std::mem::transmute::<&[Segment], &'static [Segment]>(backing.control_blocks())
        };
        let region_segments = (HUGE_PAGE / segment_size).max(1);
        let regions = capacity.div_ceil(region_segments);
        let workers = workers.max(1);
        let main_heads = if limit >= 32 * workers { workers } else { 1 };
        let heads = workers + main_heads + 3;
        Arena {
            collapsed: (0..regions).map(|_| AtomicBool::new(false)).collect(),
            region_segments,
            base,
            segment_size,
            segments,
            pool: Mutex::new(Pool {
                free: Vec::new(),
                fifo: [VecDeque::new(), VecDeque::new()],
                spare: None,
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
            workers,
            main_heads,
            evictions_enabled: evictions,
            next_seq: AtomicU64::new(0),
            flush_epoch: AtomicU32::new(0),
            backing,
        }
    }

    /// The memory holding the segments.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// Bytes per segment.
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

    /// Worker `worker`'s write head for `queue`.
    #[inline]
    pub fn head(&self, worker: usize, queue: Queue) -> usize {
        match queue {
            Queue::Small => worker % self.workers,
            Queue::Main => self.workers + worker % self.main_heads,
        }
    }

    /// Write heads in all (workers', the evictor's, the compactor's).
    pub fn head_count(&self) -> usize {
        self.heads.len()
    }

    /// The head of copies made outside a worker's writes (main queue).
    pub fn copy_head(&self) -> usize {
        self.workers
    }

    fn evictor_head(&self) -> usize {
        self.workers + self.main_heads
    }

    /// The head the compactor copies a `queue` segment's items through.
    fn compactor_head(&self, queue: Queue) -> usize {
        self.workers + self.main_heads + 1 + queue as usize
    }

    fn queue_of_head(&self, head: usize) -> Queue {
        if head < self.workers || head == self.compactor_head(Queue::Small) {
            Queue::Small
        } else {
            Queue::Main
        }
    }

    /// The queue a segment was written for.
    #[inline]
    pub fn queue(&self, seg: SegmentId) -> Queue {
        if self.segment(seg).queue.load(Ordering::Relaxed) == Queue::Main as u8 {
            Queue::Main
        } else {
            Queue::Small
        }
    }

    /// The control block of segment `id`.
    #[inline]
    pub fn segment(&self, id: SegmentId) -> &Segment {
        &self.segments[id as usize]
    }

    /// Prefetches the first 128 bytes of the item that may be at `loc` (a
    /// guess: nothing is read): two or three cache lines, as items start at
    /// any even offset. That holds a whole item of a 16-byte key and a
    /// value of up to 100 bytes or so, the sizes a lone GET's copy into the
    /// reply would otherwise stall on.
    #[inline]
    pub fn prefetch_item(&self, seg: SegmentId, offset: usize) {
        if (seg as usize) < self.segments.len() {
            let p = self
                .base
                .wrapping_add(seg as usize * self.segment_size + offset);
            prefetch(p);
            prefetch(p.wrapping_add(64));
            prefetch(p.wrapping_add(127));
        }
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

    /// Reserves room for the item `spec` describes on write head `head` at
    /// relative time `now`, and writes its header there, marked dead (not
    /// yet committed: see `Store::link`), before the segment's fill mark
    /// covers it: whatever happens to the process, every item header below
    /// a segment's `used` is whole, so a recovery can step over items whose
    /// writers never finished.
    pub fn reserve(&self, head: usize, spec: &ItemSpec, now: u32) -> Reserve {
        let size = spec.size();
        debug_assert!(size <= self.segment_size);
        let queue = self.queue_of_head(head);
        let mut h = self.heads[head].lock();
        loop {
            if let Some(seg) = h.seg {
                let s = self.segment(seg);
                // Item access times are 16-bit offsets from the base time.
                let young = now.wrapping_sub(s.base_time.load(Ordering::Relaxed)) < MAX_SEGMENT_AGE;
                if h.offset + size <= self.segment_size && young {
                    return Reserve::Slot(self.take_slot(&mut h, spec));
                }
                self.seal(seg);
                h.seg = None;
            }
            match self.take_segment(queue, now) {
                Ok(seg) => {
                    h.seg = Some(seg);
                    h.offset = 0;
                }
                Err(r) => return r,
            }
        }
    }

    /// Reserves room for a copy the evictor keeps (main queue). Never
    /// evicts: when the evictor head's segment is full it takes the spare;
    /// None if there is none, or if readers that could still see the
    /// spare's old items remain after `SPARE_WAIT` (the item is then
    /// dropped). The evictor holds a shard's lock here, which a reader
    /// keeping its pin may be waiting for, so its wait is bounded (see
    /// `epoch`).
    pub fn reserve_evictor(&self, spec: &ItemSpec, now: u32) -> Option<Slot> {
        let size = spec.size();
        let mut h = self.heads[self.evictor_head()].lock();
        let fits = |h: &WriteHead| h.seg.is_some() && h.offset + size <= self.segment_size;
        if !fits(&h) {
            let (spare, was_spare) = {
                let mut pool = self.pool.lock();
                match pool.spare.take() {
                    Some(seg) => (seg, true),
                    None => (pool.free.pop()?, false),
                }
            };
            // Waited for without the pool lock (see `take_segment`).
            let retired = self.segment(spare).retired.load(Ordering::Acquire);
            if !epoch::wait_past_within(retired, SPARE_WAIT) {
                let mut pool = self.pool.lock();
                if was_spare && pool.spare.is_none() {
                    pool.spare = Some(spare);
                } else {
                    pool.free.push(spare);
                }
                return None;
            }
            if let Some(seg) = h.seg.take() {
                self.seal(seg);
            }
            // Under the pool's lock, as every activation (a flush_all
            // marks segments under it).
            let pool = self.pool.lock();
            self.activate(spare, Queue::Main, now);
            drop(pool);
            h.seg = Some(spare);
            h.offset = 0;
        }
        Some(self.take_slot(&mut h, spec))
    }

    /// Hands out the next `spec.size()` bytes of the head's segment (which
    /// has room for them): the item's header is written there, marked
    /// dead, before the segment's fill mark covers it (see `reserve`).
    #[inline]
    fn take_slot(&self, h: &mut WriteHead, spec: &ItemSpec) -> Slot {
        let seg = h.seg.expect("a head with a segment");
        let offset = h.offset;
        h.offset += spec.size();
        let s = self.segment(seg);
        s.pending.fetch_add(1, Ordering::AcqRel);
        let ptr = self.item(seg, offset);
        // SAFETY: the slot's bytes were just handed to us under the head's
        // lock (the caller holds it); nobody else writes them.
        unsafe { ptr.write_header(spec, STATE_DEAD) };
        s.used.store(h.offset, Ordering::Release);
        Slot { seg, offset, ptr }
    }

    /// Marks a slot's item as published (or abandoned).
    #[inline]
    pub fn finish_write(&self, seg: SegmentId) {
        self.segment(seg).pending.fetch_sub(1, Ordering::AcqRel);
    }

    fn seal(&self, seg: SegmentId) {
        let mut pool = self.pool.lock();
        let s = self.segment(seg);
        s.state.store(STATE_SEALED, Ordering::Release);
        pool.fifo[self.queue(seg) as usize].push_back(seg);
    }

    /// A segment for write head of `queue`: a free one, a fresh one, or
    /// (Err) one to evict. Readers are never waited for with the pool's
    /// lock held (see `epoch`): a reader keeping its pin may be waiting
    /// for a shard lock whose holder (the evictor) waits for this lock.
    fn take_segment(&self, queue: Queue, now: u32) -> Result<SegmentId, Reserve> {
        let mut pool = self.pool.lock();
        while pool.allocated > pool.limit {
            // cache_memlimit shrank: release free segments first (those no
            // reader can still see; the others at a later call).
            match pool.free.pop() {
                Some(seg) if epoch::is_past(self.segment(seg).retired.load(Ordering::Acquire)) => {
                    self.release_memory(seg);
                    pool.released.push(seg);
                    pool.allocated -= 1;
                }
                Some(seg) => {
                    pool.free.push(seg);
                    break;
                }
                None => break,
            }
        }
        if pool.allocated <= pool.limit {
            if let Some(seg) = pool.free.pop() {
                // Taken off the free list, the segment is this writer's:
                // wait for its old readers without the lock.
                let retired = self.segment(seg).retired.load(Ordering::Acquire);
                if !epoch::waited_out(retired) {
                    drop(pool);
                    epoch::wait_past(retired);
                    pool = self.pool.lock();
                }
                self.activate(seg, queue, now);
                drop(pool);
                return Ok(seg);
            }
        }
        // The last segment under the limit becomes the spare of the
        // evictor and the compactor (see the module comment).
        if pool.spare.is_none() && pool.limit >= 2 && pool.allocated + 1 == pool.limit {
            if let Some(seg) = self.fresh_id(&mut pool) {
                pool.allocated += 1;
                pool.spare = Some(seg);
            }
        }
        if pool.allocated < pool.limit {
            if let Some(seg) = self.fresh_id(&mut pool) {
                pool.allocated += 1;
                self.activate(seg, queue, now);
                return Ok(seg);
            }
        }
        Err(Reserve::Full)
    }

    /// Claims the segment S3-FIFO evicts next: the oldest of small if
    /// small is over its share (or main is empty), else the oldest of
    /// main; a segment being written or walked is passed over (a
    /// compactor's destination in the way is sealed first, when the
    /// compactor is not using it). The caller evicts its items and
    /// `recycle`s it. None with evictions off or nothing eligible.
    pub fn claim_eviction_victim(&self) -> Option<SegmentId> {
        if !self.evictions_enabled {
            return None;
        }
        let mut pool = self.pool.lock();
        let small_share = (pool.limit / 10).max(1);
        let order = if pool.fifo[0].len() > small_share || pool.fifo[1].is_empty() {
            [0, 1]
        } else {
            [1, 0]
        };
        let mut pick = None;
        for q in order {
            let found = pool.fifo[q].iter().position(|&seg| {
                self.seal_idle_destination(seg);
                let s = self.segment(seg);
                s.state.load(Ordering::Acquire) == STATE_SEALED
                    && s.pending.load(Ordering::Acquire) == 0
            });
            if let Some(pos) = found {
                pick = Some((q, pos));
                break;
            }
        }
        let (q, pos) = pick?;
        let seg = pool.fifo[q].remove(pos).expect("fifo position");
        self.segment(seg)
            .state
            .store(STATE_CLAIMED, Ordering::Release);
        Some(seg)
    }

    /// A segment id whose memory is not in use: a released one, else one
    /// never used.
    fn fresh_id(&self, pool: &mut Pool) -> Option<SegmentId> {
        match pool.released.pop() {
            // A memory file's released segment is a hole in the file: its
            // blocks are reserved again first (else writing it could meet
            // a full file system, a SIGBUS).
            Some(seg) => {
                if self
                    .backing
                    .reserve(seg as usize * self.segment_size, self.segment_size)
                {
                    Some(seg)
                } else {
                    pool.released.push(seg);
                    None
                }
            }
            None if (pool.next_fresh as usize) < self.segments.len() => {
                pool.next_fresh += 1;
                Some(pool.next_fresh - 1)
            }
            None => None,
        }
    }

    fn activate(&self, seg: SegmentId, queue: Queue, now: u32) {
        self.activate_at(seg, queue, now);
    }

    /// Activates `seg` for `queue` with item access times counted from
    /// `base_time`.
    fn activate_at(&self, seg: SegmentId, queue: Queue, base_time: u32) {
        let s = self.segment(seg);
        epoch::wait_past(s.retired.swap(0, Ordering::AcqRel));
        s.queue.store(queue as u8, Ordering::Relaxed);
        s.packed.store(PACK_NOT_YET, Ordering::Relaxed);
        s.seq.store(
            self.next_seq.fetch_add(1, Ordering::Relaxed),
            Ordering::Release,
        );
        s.live_bytes.store(0, Ordering::Relaxed);
        s.base_time.store(base_time, Ordering::Release);
        s.flushed_below.store(0, Ordering::Release);
        // Flushes already applied do not cover items written from now on.
        s.flush_epoch
            .fetch_max(self.flush_epoch.load(Ordering::Acquire), Ordering::AcqRel);
        s.max_exptime.store(0, Ordering::Release);
        s.immortal.store(0, Ordering::Release);
        s.used.store(0, Ordering::Release);
        s.activations.fetch_add(1, Ordering::AcqRel);
        s.state.store(STATE_ACTIVE, Ordering::Release);
    }

    /// Hands a free segment's pages back to the system.
    fn release_memory(&self, seg: SegmentId) {
        let s = self.segment(seg);
        epoch::wait_past(s.retired.swap(0, Ordering::AcqRel));
        self.collapsed[seg as usize / self.region_segments].store(false, Ordering::Relaxed);
        // SAFETY: the range is one whole segment, below the capacity; a
        // free segment holds no indexed items, and the readers that could
        // still see its old ones were waited out above.
        unsafe {
            self.backing
                .release(seg as usize * self.segment_size, self.segment_size)
        };
        s.state.store(STATE_FREE, Ordering::Release);
    }

    /// Returns an evicted (now empty) segment: it becomes the evictor's
    /// spare if that was used, else goes to the free list.
    pub fn recycle(&self, seg: SegmentId) {
        let mut pool = self.pool.lock();
        let s = self.segment(seg);
        s.retired.store(epoch::retire(), Ordering::Release);
        s.state.store(STATE_FREE, Ordering::Release);
        // (An arena of one segment has no room for a spare.)
        if pool.spare.is_none() && pool.limit >= 2 {
            pool.spare = Some(seg);
        } else {
            pool.free.push(seg);
        }
    }

    /// Claims a sealed segment for the expiry reclaimer: the `cursor`-th in
    /// FIFO order (wrapping). It stays in the FIFO while claimed.
    pub fn claim_for_reclaim(&self, cursor: usize) -> Option<SegmentId> {
        let pool = self.pool.lock();
        let (small, main) = (pool.fifo[0].len(), pool.fifo[1].len());
        if small + main == 0 {
            return None;
        }
        let i = cursor % (small + main);
        let seg = if i < small {
            pool.fifo[0][i]
        } else {
            pool.fifo[1][i - small]
        };
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

    /// Claims every sealed segment whose items have all expired by `now`
    /// (see `Segment::max_exptime`), for the reclaimer. A look at each
    /// segment's header, never at items.
    pub fn claim_expired(&self, now: u32) -> Vec<SegmentId> {
        let pool = self.pool.lock();
        let mut out = Vec::new();
        for &seg in pool.fifo[0].iter().chain(pool.fifo[1].iter()) {
            let s = self.segment(seg);
            let max = s.max_exptime.load(Ordering::Relaxed);
            if max != 0
                && max <= now
                && !s.is_immortal()
                && s.pending.load(Ordering::Acquire) == 0
                && s.state
                    .compare_exchange(
                        STATE_SEALED,
                        STATE_CLAIMED,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                out.push(seg);
            }
        }
        out
    }

    /// Ends a reclaimer claim; a segment with nothing live left (`live`
    /// items remained after the walk) goes to the free list.
    pub fn unclaim(&self, seg: SegmentId, live: usize) {
        let mut pool = self.pool.lock();
        let s = self.segment(seg);
        if live == 0 {
            let q = self.queue(seg) as usize;
            if let Some(pos) = pool.fifo[q].iter().position(|&x| x == seg) {
                pool.fifo[q].remove(pos);
            }
            s.retired.store(epoch::retire(), Ordering::Release);
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

    /// Bytes of the segments with memory that items can still be written
    /// into: the free ones (free list, spare) whole, and what the
    /// segments being filled have left. Racy while writers work.
    pub fn room(&self) -> usize {
        let (ids, free) = {
            let pool = self.pool.lock();
            (
                pool.next_fresh as usize,
                pool.free.len() + usize::from(pool.spare.is_some()),
            )
        };
        let filling: usize = self.segments[..ids]
            .iter()
            .filter(|s| s.state.load(Ordering::Acquire) == STATE_ACTIVE)
            .map(|s| {
                self.segment_size
                    .saturating_sub(s.used.load(Ordering::Relaxed))
            })
            .sum();
        free * self.segment_size + filling
    }

    /// flush_all number `epoch`: invalidates every item written so far
    /// (each segment's items below its current fill mark), in the segments
    /// no flush of that number covered yet; segments activated from now on
    /// carry the number (see `Segment::flush_epoch`).
    pub fn flush(&self, epoch: u32) {
        let pool = self.pool.lock();
        self.flush_epoch.fetch_max(epoch, Ordering::AcqRel);
        for s in &self.segments[..pool.next_fresh as usize] {
            if s.flush_epoch.load(Ordering::Acquire) < epoch {
                s.flushed_below
                    .store(s.used.load(Ordering::Acquire), Ordering::Release);
                s.flush_epoch.fetch_max(epoch, Ordering::AcqRel);
            }
        }
    }

    /// The latest flush_all number applied (0: none).
    pub fn flush_epoch(&self) -> u32 {
        self.flush_epoch.load(Ordering::Acquire)
    }

    /// Backs full regions of sealed segments with transparent huge pages
    /// (`Backing::collapse`, Linux 6.1+; elsewhere a no-op): a random
    /// read of item memory then costs one TLB entry per 2 MiB instead of
    /// per 4 KiB. Only regions whose segments are all sealed and at least
    /// 15/16 written are collapsed, so no untouched memory becomes
    /// resident. Called by the maintainer (it copies up to 2 MiB per
    /// region, once); returns how many regions it collapsed.
    pub fn collapse_sealed(&self, max_regions: usize) -> usize {
        let regions = {
            let pool = self.pool.lock();
            (pool.next_fresh as usize).div_ceil(self.region_segments)
        };
        let mut done = 0;
        for r in 0..regions {
            if done == max_regions {
                break;
            }
            if self.collapsed[r].load(Ordering::Relaxed) {
                continue;
            }
            let first = r * self.region_segments;
            let last = (first + self.region_segments).min(self.segments.len());
            if last - first < self.region_segments {
                continue;
            }
            let full = (first..last).all(|i| {
                let s = &self.segments[i];
                s.state.load(Ordering::Acquire) == STATE_SEALED
                    && s.used.load(Ordering::Acquire) >= self.segment_size - self.segment_size / 16
            });
            if !full {
                continue;
            }
            self.collapsed[r].store(true, Ordering::Relaxed);
            // Whole segments, all of them resident and in use.
            self.backing.collapse(
                first * self.segment_size,
                self.region_segments * self.segment_size,
            );
            done += 1;
            // One region is up to 2 MiB copied in the kernel: let a thread
            // waiting for this core run before the next.
            std::thread::yield_now();
        }
        done
    }

    /// Takes over the segments a memory file holds (see `recover`): every
    /// segment that was being written, sealed or walked becomes sealed, in
    /// its queue's FIFO in the order it was activated; segments that never
    /// held items are fresh, the others free. A control block that cannot
    /// be right (a state, queue or fill mark out of range) loses its
    /// segment's items. Returns the sealed segments, for the index to be
    /// rebuilt from, and how many control blocks were dropped.
    pub fn recover(&self) -> (Vec<SegmentId>, usize) {
        let mut pool = self.pool.lock();
        let mut sealed: Vec<(u64, SegmentId)> = Vec::new();
        let mut dropped = 0;
        let mut max_seq = None;
        let mut last_used = None;
        let mut flush_epoch = 0;
        for (id, s) in self.segments.iter().enumerate() {
            let id = id as SegmentId;
            s.pending.store(0, Ordering::Relaxed);
            s.retired.store(0, Ordering::Relaxed);
            // Recounted as the index is rebuilt.
            s.live_bytes.store(0, Ordering::Relaxed);
            if s.activations.load(Ordering::Relaxed) == 0 {
                s.state.store(STATE_FREE, Ordering::Relaxed);
                continue;
            }
            last_used = Some(id);
            // Uniques never repeat: new activations number after every
            // one the file remembers.
            max_seq = max_seq.max(Some(s.seq.load(Ordering::Relaxed)));
            flush_epoch = flush_epoch.max(s.flush_epoch.load(Ordering::Relaxed));
            let state = s.state.load(Ordering::Relaxed);
            let sound = state <= STATE_CLAIMED
                && s.queue.load(Ordering::Relaxed) <= Queue::Main as u8
                && s.immortal.load(Ordering::Relaxed) <= 1
                && s.used.load(Ordering::Relaxed) <= self.segment_size
                && s.flushed_below.load(Ordering::Relaxed) <= self.segment_size;
            if !sound {
                dropped += 1;
            }
            if state == STATE_FREE || !sound || s.used.load(Ordering::Relaxed) == 0 {
                s.state.store(STATE_FREE, Ordering::Relaxed);
                pool.free.push(id);
                continue;
            }
            s.state.store(STATE_SEALED, Ordering::Relaxed);
            sealed.push((s.seq.load(Ordering::Relaxed), id));
        }
        sealed.sort_unstable();
        for &(_, id) in &sealed {
            pool.fifo[self.queue(id) as usize].push_back(id);
        }
        // Ids below the last used one that never held items have no memory:
        // like released ones, they are taken before fresh ones.
        pool.next_fresh = last_used.map_or(0, |id| id + 1);
        pool.released = (0..pool.next_fresh)
            .filter(|&id| self.segment(id).activations.load(Ordering::Relaxed) == 0)
            .collect();
        pool.allocated = pool.next_fresh as usize - pool.released.len();
        self.next_seq
            .store(max_seq.map_or(0, |s| s + 1), Ordering::Relaxed);
        self.flush_epoch.store(flush_epoch, Ordering::Relaxed);
        (sealed.into_iter().map(|(_, id)| id).collect(), dropped)
    }

    /// After a recovery rebuilt the index: a sealed segment in which no
    /// item is live goes back to the free list.
    pub fn free_if_empty(&self, seg: SegmentId, live: usize) {
        if live == 0 {
            let s = self.segment(seg);
            if s.state
                .compare_exchange(
                    STATE_SEALED,
                    STATE_CLAIMED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                self.unclaim(seg, 0);
            }
        }
    }

    /// Segment activations so far: the sequence number the next activated
    /// segment gets (the pack pass counts new segments with it).
    pub fn activations(&self) -> u64 {
        self.next_seq.load(Ordering::Relaxed)
    }

    /// Number of segments in the FIFO (for the reclaimer's cursor).
    pub fn sealed_count(&self) -> usize {
        let pool = self.pool.lock();
        pool.fifo[0].len() + pool.fifo[1].len()
    }
}

// SAFETY: `base` points into the backing's mapping, shared item memory
// whose access discipline is enforced by the index shard locks and reader
// pins (see `item`, `epoch`); the backing unmaps it when the arena drops;
// everything else in the arena is atomics and mutexes.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}
