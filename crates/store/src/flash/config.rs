//! The flash tier's settings (`FlashConfig`, memcached's `ext_*` options
//! where they apply) and its counters (`FlashStats`, memcached's
//! `extstore_*` meanings where they have one).

use std::sync::atomic::AtomicU64;

use super::FlashPath;

/// The tier's settings (memcached's `ext_*` options where they apply).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashConfig {
    /// `ext_path` (one or more).
    pub paths: Vec<FlashPath>,
    /// `ext_page_size`: bytes of a page, the unit reclaimed at once.
    pub page_size: usize,
    /// `ext_wbuf_size`: bytes of a write buffer (default 512 KiB).
    pub wbuf_size: usize,
    /// Write buffers (two: one filling while one is written).
    pub wbufs: usize,
    /// `ext_item_size`: values shorter than this are dropped, not flashed.
    pub item_size_min: usize,
    /// `ext_drop_unread`: a reclaim drops live items that were not read
    /// (osmium always does; kept for `stats settings`).
    pub drop_unread: bool,
    /// `ext_recache_rate`: one in this many reads of items already read
    /// once on flash brings the item back into RAM (0: never), as
    /// memcached recaches one in `ext_recache_rate` flash reads.
    pub recache_rate: u32,
    /// `ext_compact_under`: reclaim while fewer pages than this are free.
    pub free_pages_min: usize,
    /// `ext_max_frag` as a percent: a page whose live records fill less
    /// than this much of it is compacted (its live records rewritten, none
    /// dropped), the most fragmented first, before the oldest page is
    /// reclaimed; memcached's meaning and default (0.80).
    pub max_frag_percent: u32,
    /// The largest item (`-I`): a write buffer holds at least one.
    pub item_size_max: usize,
    /// The zstd level raw cold items are packed at on their way to flash
    /// (`-o compress_level`); None: written as they are (`-o
    /// compression=off`, or a memory file: staged items would not
    /// survive a kill). See `stage`.
    pub pack_level: Option<i32>,
}

impl Default for FlashConfig {
    fn default() -> Self {
        FlashConfig {
            paths: Vec::new(),
            page_size: 64 << 20,
            // memcached's default is 4 MiB; two 512 KiB buffers keep the
            // tier's fixed RAM at 1 MiB and still write in large chunks.
            wbuf_size: 512 << 10,
            wbufs: 2,
            item_size_min: 0,
            drop_unread: true,
            recache_rate: 2000,
            free_pages_min: 0,
            max_frag_percent: 80,
            item_size_max: 1 << 20,
            pack_level: Some(crate::codec::DEFAULT_LEVEL),
        }
    }
}

/// Counters, with memcached's `extstore_*` meanings where they have one.
#[derive(Default)]
pub struct FlashStats {
    /// Records appended (memcached's `extstore_objects_written`).
    pub objects_written: AtomicU64,
    /// Bytes written to the flash files.
    pub bytes_written: AtomicU64,
    /// Records read and found whole, holding the key looked up.
    pub objects_read: AtomicU64,
    /// Bytes read from the flash files (lookups, reclaims, walks).
    pub bytes_read: AtomicU64,
    /// Records dropped when their page was emptied (reclaimed or compacted).
    pub objects_evicted: AtomicU64,
    /// Bytes of those records.
    pub bytes_evicted: AtomicU64,
    /// Pages emptied to be reused (not by compaction).
    pub page_reclaims: AtomicU64,
    /// Records a reclaim kept by rewriting them at the head (read since
    /// written).
    pub compact_rescues: AtomicU64,
    /// Records a reclaim or compaction meant to keep but found no room for.
    pub compact_lost: AtomicU64,
    /// Pages compacted (every live record rewritten), and the records
    /// they kept.
    pub pages_compacted: AtomicU64,
    /// The records compaction kept (rewritten at the head).
    pub compact_kept: AtomicU64,
    /// Bytes of records given to the tier by the RAM evictor, not counting
    /// the rewrites of reclaims and compactions (for write amplification:
    /// `bytes_written` / this).
    pub bytes_stored: AtomicU64,
    /// Lookups answered from flash.
    pub get_hits: AtomicU64,
    /// Lookups of an indexed key that found no valid record for it.
    pub get_misses: AtomicU64,
    /// Items read from flash and stored in RAM again (see
    /// `FlashConfig::recache_rate`).
    pub recaches: AtomicU64,
    /// Records read that failed their checksum (their entry is removed).
    pub badcrc: AtomicU64,
    /// Reads and writes of the flash files that failed (the tier turns off).
    pub io_errors: AtomicU64,
    /// Writes that waited for the flusher (buffers all full).
    pub write_waits: AtomicU64,
    /// Pages taken from the free list to be written (memcached's
    /// `extstore_page_allocs`).
    pub page_allocs: AtomicU64,
    /// Raw items staged to be packed on their way to flash (see `stage`).
    pub staged: AtomicU64,
    /// Items given to the tier with a packed value (packed in RAM, or by
    /// the flusher).
    pub packed_items: AtomicU64,
    /// The client's bytes of those values.
    pub packed_raw_bytes: AtomicU64,
    /// The bytes of their frames.
    pub packed_bytes: AtomicU64,
    /// Staged values tried that did not pack enough (written raw, marked
    /// tried).
    pub pack_rejected: AtomicU64,
    /// Staged values not tried: their size class keeps failing, or they
    /// start like a compressed format.
    pub pack_skipped: AtomicU64,
    /// The flusher's CPU time packing staged values, µs.
    pub pack_cpu_micros: AtomicU64,
}
