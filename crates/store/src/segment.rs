//! A segment's control block: what the arena knows about one segment of
//! item memory besides its items.
//!
//! The control blocks lie in a table beside item memory, in the same
//! mapping (see `backing`): with a memory file they are in the file, so
//! everything a restart needs to read a segment back (its state, queue,
//! fill mark, sequence number, base time, flush mark, expiry summary) is
//! kept by the kernel even when the process is killed, without being
//! written anywhere else. The layout is fixed (`repr(C)`, 64-bit) and its
//! size is part of the file's format:
//!
//! ```text
//!  byte 0      1      2         3      4          8        16            24      32          36
//!      +------+------+---------+------+----------+--------+-------------+-------+-----------+
//!      |state |queue |immortal |packed| pending  | used   | activations | seq   | base_time |
//!      +------+------+---------+------+----------+--------+-------------+-------+-----------+
//!  36            40            44              56        64           72..128
//!      +-------------+-------------+---------------+---------+------------+-------+
//!      | max_exptime | flush_epoch | flushed_below | retired | live_bytes | (pad) |
//!      +-------------+-------------+---------------+---------+------------+-------+
//!
//!  kept across a restart: state, queue, immortal, packed, used,
//!                         activations, seq, base_time, max_exptime,
//!                         flush_epoch, flushed_below
//!  this run's only:       pending, retired (cleared when the file is opened),
//!                         live_bytes (recounted by the recovery's scan)
//! ```
//!
//! `live_bytes` is on the block's second cache line: writers append to
//! their own segment (first line: `pending`, `used`), while the bytes of
//! the items they replace are taken off other segments' second lines. It
//! packs two counts in one word, so that a link or an unlink updates both
//! with one atomic add: the bytes in the low 32 bits (a segment is at most
//! 1 GiB) and the number of items in the high 32 (`stats items` sums them
//! by queue).
//! `used - live_bytes` is the segment's dead space (overwritten, deleted
//! and abandoned items), which the compactor reclaims (see `compact`).
//!
//! Every field is an integer atomic, so any bytes a damaged file holds are
//! a valid control block; the recovery checks what it reads before it
//! trusts it (see `recover`).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// A segment's index in the arena.
pub type SegmentId = u32;

/// Segment state: no items, on the free list (or never used).
pub const STATE_FREE: u8 = 0;
/// Segment state: a write head appends to it.
pub const STATE_ACTIVE: u8 = 1;
/// Segment state: full, in its queue.
pub const STATE_SEALED: u8 = 2;
/// Segment state: taken out of its queue to be evicted or compacted.
pub const STATE_CLAIMED: u8 = 3;

/// Pack state: the pack pass has not been over the segment.
pub const PACK_NOT_YET: u8 = 0;
/// Pack state: the pack pass went over it (its cold items are packed or
/// were tried), or it is a destination the pass filled.
pub const PACKED: u8 = 1;
/// Pack state: the pass found that packing it would free too little, and
/// left it as it was.
pub const PACK_NOT_WORTH: u8 = 2;

/// Bytes of a control block in the table (two cache lines, for the
/// adjacent-line prefetcher, so that writers appending to neighbouring
/// segments do not share lines).
pub const CONTROL_BLOCK_SIZE: usize = 128;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("the segment control block layout assumes a 64-bit target");

/// A segment's control block (see the module comment).
#[repr(C, align(128))]
pub struct Segment {
    /// One of the `STATE_*` values.
    pub state: AtomicU8,
    /// The queue it was written for (a `Queue` as u8).
    pub queue: AtomicU8,
    /// Whether an item written into it never expires (see
    /// `max_exptime`): 0 or 1.
    pub immortal: AtomicU8,
    /// What the pack pass (`pack`) made of it: [`PACK_NOT_YET`], [`PACKED`]
    /// or [`PACK_NOT_WORTH`]. A hint only: any value is a valid block
    /// (a file written before the field existed holds 0 there).
    pub packed: AtomicU8,
    /// Writers that reserved space in it and have not yet published or
    /// abandoned their item.
    pub pending: AtomicU32,
    /// Bytes allocated from the start of the segment: every item header
    /// below it is written (see `Arena::reserve`).
    pub used: AtomicUsize,
    /// Times the segment was activated: 0 for a segment that never held
    /// items.
    pub activations: AtomicU64,
    /// Numbers the segment's activations across the arena (0, 1, ...):
    /// the high half of the CAS uniques of the items written into it.
    pub seq: AtomicU64,
    /// Relative time of activation; item access times are relative to it.
    pub base_time: AtomicU32,
    /// The latest expiry (relative time) of any item written into it, and
    /// (`immortal`) whether any never expires: once that time passes and
    /// none is immortal, every item in it has expired and the reclaimer
    /// frees the segment whole, without looking at any other.
    pub max_exptime: AtomicU32,
    /// The last flush_all that covered the segment (numbered by the
    /// store; a segment activated after a flush carries its number too), so
    /// that a recovery applies a pending flush only where it did not run.
    pub flush_epoch: AtomicU32,
    /// Items at offsets below this were invalidated by flush_all.
    pub flushed_below: AtomicUsize,
    /// The epoch in which the segment was freed with items in it (0: none
    /// since it was last written): lock-free readers pinned then may still
    /// read it, so it is not rewritten (or released) before `epoch::
    /// wait_past` that epoch.
    pub retired: AtomicU64,
    /// Bytes (low 32 bits) and number (high 32 bits) of the items in it
    /// that the index links to: added when an item is linked, taken off
    /// when it is unlinked or replaced.
    pub live_bytes: AtomicU64,
    _pad1: [u64; 7],
}

const _: () = assert!(std::mem::size_of::<Segment>() == CONTROL_BLOCK_SIZE);

/// `live_bytes`: the bytes' part, and one item in the count's part.
const LIVE_BYTES_MASK: u64 = (1 << 32) - 1;
const ONE_LIVE_ITEM: u64 = 1 << 32;

impl Segment {
    /// Bytes of linked items.
    #[inline]
    pub fn live(&self) -> usize {
        (self.live_bytes.load(Ordering::Relaxed) & LIVE_BYTES_MASK) as usize
    }

    /// Number of linked items.
    #[inline]
    pub fn live_items(&self) -> u64 {
        self.live_bytes.load(Ordering::Relaxed) >> 32
    }

    /// Bytes written into it that no item the index links to holds any
    /// more (overwritten, deleted, abandoned). Racy: an estimate while
    /// writers work, exact once the segment is sealed and quiet.
    #[inline]
    pub fn dead(&self) -> usize {
        self.used
            .load(Ordering::Relaxed)
            .saturating_sub(self.live())
    }

    /// An item of `size` bytes in it was linked.
    #[inline]
    pub fn add_live(&self, size: usize) {
        self.live_bytes
            .fetch_add(ONE_LIVE_ITEM + size as u64, Ordering::Relaxed);
    }

    /// An item of `size` bytes in it was unlinked.
    #[inline]
    pub fn sub_live(&self, size: usize) {
        self.live_bytes
            .fetch_sub(ONE_LIVE_ITEM + size as u64, Ordering::Relaxed);
    }

    /// Whether an item in it may be expired or flushed: some item has an
    /// expiry, or a flush covered part of it.
    #[inline]
    pub fn may_hold_stale(&self) -> bool {
        self.max_exptime.load(Ordering::Acquire) != 0
            || self.flushed_below.load(Ordering::Acquire) != 0
    }

    /// Whether an item written into it never expires.
    #[inline]
    pub fn is_immortal(&self) -> bool {
        self.immortal.load(Ordering::Relaxed) != 0
    }

    /// Records the expiry of an item written into (or touched in) it.
    #[inline]
    pub fn note_expiry(&self, exptime: u32) {
        if exptime == 0 {
            if !self.is_immortal() {
                self.immortal.store(1, Ordering::Relaxed);
            }
        } else if self.max_exptime.load(Ordering::Relaxed) < exptime {
            self.max_exptime.fetch_max(exptime, Ordering::Relaxed);
        }
    }
}
