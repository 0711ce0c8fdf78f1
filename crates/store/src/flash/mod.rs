//! The flash tier (`-o ext_path=FILE:SIZE`): items the RAM evictor would
//! drop are written to flash instead, in large sequential writes, and stay
//! findable through the flash index at about 12 bytes of RAM per item (no
//! key in RAM: the key is on flash with the item).
//!
//! ```text
//!  RAM evictor ──demote──▶ write buffer (ext_wbuf_size) ──flusher──▶ page of a flash file
//!        │                    │ (readable until written)               (ext_page_size)
//!        └── index entry ─────┘ key hash → (address, size class, hot)
//!  GET that misses RAM ──▶ flash index ──▶ read the record's blocks ──▶ verify checksum and key
//!                                          (a hot item read twice comes back into RAM)
//!  pages: free ──▶ head (being appended to) ──▶ sealed, FIFO ──▶ when free pages run low:
//!         the most fragmented page whose live records fill less than ext_max_frag of it is
//!         compacted (every live record rewritten at the head); else the oldest page is
//!         reclaimed: each live record read since it was written is rewritten at the
//!         head, the others are dropped (evicted)
//! ```
//!
//! Parts: `device` (the files, as pages; `O_DIRECT` transfers of whole
//! blocks), `record` (an item on flash behind its checksum), `index` (the
//! flash index), `meta` (the metadata mapping), `flusher` (the thread
//! that writes full buffers and reclaims pages), `walk` (every live key on
//! flash, for a full copy). This module owns the log:
//! the pages and their FIFO, the write buffers, reads, flush_all,
//! statistics and failure.
//!
//! Concurrency: one mutex over the log's state (pages, buffers); a writer
//! copies its record into the filling buffer under it, and waits (the
//! writer keeps up with the disk, it does not drop items) when every
//! buffer is full and waiting for the flusher. The flusher writes a buffer
//! without the mutex; until it is written the buffer stays readable. The
//! index has its own locks, never held together with the log's.
//!
//! Failure: an error writing or reading a flash file is counted
//! (`extstore_io_errors`), logged once, and turns the tier off: the server
//! goes on RAM-only (`extstore_failed` 1); what the tier held misses.

mod config;
pub mod device;
mod flusher;
pub mod index;
pub mod meta;
pub mod record;
mod stage;
mod walk;

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

pub use config::{FlashConfig, FlashStats};
pub use device::FlashPath;
use device::{fit_page_size, AlignedBuf, Device, BLOCK, MIN_PAGES};
use index::{Entry, FlashIndex};
pub use meta::MetaSource;
use meta::{Meta, PageRecord, MAX_WBUFS, WBUF_FILLING, WBUF_FREE, WBUF_QUEUED};
use stage::{Stage, STAGE_BUFS};
pub use walk::FlashWalk;

use crate::index::hash_key;
use crate::item::{ItemPtr, ItemSpec};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PageState {
    Free = 0,
    Head = 1,
    Sealed = 2,
}

#[derive(Clone, Copy)]
struct Page {
    state: PageState,
    /// Numbers the page's turns as head (flush_all compares positions).
    seq: u64,
    /// Bytes appended.
    used: usize,
    /// Bytes on flash (written by the flusher).
    written: usize,
    /// The size classes' bytes of every record appended (the flash index
    /// counts its live records' the same way, so live ÷ this is the part
    /// still live; after a restart, the bytes used).
    class_bytes: usize,
    /// The oldest last access (relative clock) of the items written to
    /// it, as the RAM evictor saw them (`NO_ATIME`: none known, as after
    /// a restart): `stats items`' ages of flash items.
    oldest_atime: u32,
}

/// `Page::oldest_atime` of a page with none known.
const NO_ATIME: u32 = u32::MAX;

/// A buffer of records bound for `page` at `offset` (a block boundary):
/// `len` bytes of records, at most `cap` (what is left of the page, or the
/// buffer's size), in write buffer `slot` of the metadata.
#[derive(Clone, Copy, Debug)]
struct Buffer {
    page: usize,
    offset: usize,
    len: usize,
    cap: usize,
    slot: usize,
}

struct Log {
    pages: Vec<Page>,
    fifo: VecDeque<usize>,
    free: Vec<usize>,
    head: Option<usize>,
    next_seq: u64,
    filling: Option<Buffer>,
    /// Full buffers, oldest first; the front one may be being written.
    queued: VecDeque<Buffer>,
    /// Write buffer slots free.
    spare: Vec<usize>,
    /// Records at logical positions below this were flushed (flush_all).
    flushed_below: u64,
    /// flush_alls since the start (staged records are covered by count,
    /// not position: see `stage`).
    flushes: u64,
    stop: bool,
}

/// Where a record given to [`Flash::append`] comes from: what decides
/// whether a flush_all covers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The RAM evictor: new to the tier (a flush_all after it checked the
    /// item is the caller's to catch).
    Ram,
    /// A rewrite of the record at this log position (a reclaim, a
    /// compaction): covered once a flush_all's mark passes it.
    Log(u64),
    /// A staged record (see `stage`) of a buffer started after this many
    /// flush_alls: covered once there was another.
    Staged(u64),
}

/// What opening the tier took over from an earlier run.
#[derive(Debug, Default)]
pub struct Resumed {
    /// The metadata of an earlier run was taken over.
    pub taken_over: bool,
    /// That run ended without a stop (its index was repaired).
    pub crashed: bool,
    /// Why existing metadata was not taken over.
    pub note: Option<String>,
    /// Items found on flash.
    pub items: usize,
}

/// A record to read: where its blocks are.
#[derive(Clone, Copy, Debug)]
pub struct FlashRead {
    /// The key's hash.
    pub hash: u64,
    /// The index entry: where the record is.
    pub entry: Entry,
}

/// Where a record can be read (see [`Flash::source`]).
#[derive(Clone, Copy, Debug)]
pub enum Source {
    /// Not on flash any more (reclaimed, flushed, never written).
    Gone,
    /// Copied from a write buffer: the record's first `len` bytes.
    Ram {
        /// Bytes copied.
        len: usize,
    },
    /// `len` bytes (whole blocks) at `offset` of file `fd`, the record
    /// `skip` bytes in; the file may be open with `O_DIRECT`, so the
    /// memory read into must be block aligned.
    Disk {
        /// The flash file.
        fd: std::os::fd::RawFd,
        /// Offset of the first block, in the file.
        offset: u64,
        /// Bytes to read.
        len: usize,
        /// Where the record starts in what is read.
        skip: usize,
    },
}

/// The flash tier (see the module comment).
pub struct Flash {
    cfg: FlashConfig,
    device: Device,
    /// Where each key's record is.
    pub index: FlashIndex,
    /// Where the pages' records and the index's tables live.
    meta: Arc<Meta>,
    log: Mutex<Log>,
    /// Raw items waiting to be packed (see `stage`); taken after `log`.
    stage: Mutex<Stage>,
    /// The first staged address (past the pages), less one, in 16-byte
    /// units.
    stage_base: u64,
    /// Wakes the flusher (a buffer queued, pages low, stop).
    work: Condvar,
    /// Wakes writers waiting for a buffer or a page.
    room: Condvar,
    /// The tier's counters.
    pub stats: FlashStats,
    failed: AtomicBool,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// What is reported to the store's owner (`events`).
    pub(crate) events: crate::events::Events,
}

impl Flash {
    /// Opens the tier's files and starts its flusher; its metadata lives
    /// where `meta` says (a file beside a memory file, a memfd, anonymous
    /// memory: `meta`), and what an earlier run (or the image a binary
    /// upgrade replaced) left there is taken over. Fails with a message
    /// naming the file that could not be used.
    pub fn open(cfg: FlashConfig, meta: MetaSource<'_>) -> io::Result<(Arc<Flash>, Resumed)> {
        // A page holds the largest record (an item of -I).
        let smallest = record::record_size(cfg.item_size_max + 64).next_multiple_of(BLOCK);
        let page_size = fit_page_size(&cfg.paths, cfg.page_size.next_multiple_of(BLOCK), smallest);
        let pages: usize = cfg
            .paths
            .iter()
            .map(|p| (p.size / page_size as u64) as usize)
            .sum();
        if pages < MIN_PAGES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "ext_path: {} bytes in all hold {pages} pages of {page_size} bytes (a page \
                     holds an item of -I); the flash tier needs at least {MIN_PAGES}",
                    cfg.paths.iter().map(|p| p.size).sum::<u64>()
                ),
            ));
        }
        let device = Device::open(&cfg.paths, page_size)?;
        debug_assert_eq!(device.pages(), pages);
        // A write buffer holds the largest record (an item of -I); so does
        // a staging buffer.
        let largest = record::record_size(cfg.item_size_max + 64);
        let wbuf = cfg
            .wbuf_size
            .max(largest)
            .clamp(BLOCK, page_size)
            .next_multiple_of(BLOCK);
        let stage = Stage::new(
            if cfg.pack_level.is_some() {
                STAGE_BUFS
            } else {
                0
            },
            wbuf,
        );
        if ((pages * page_size + stage.span()) / record::ALIGN) as u64 > index::MAX_ADDR {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ext_path: flash files over 1 TiB in all are not supported",
            ));
        }
        // Reclaim while fewer pages are free (at least 2: writers leave
        // the last one to the reclaimer's rescues).
        let free_pages_min = if cfg.free_pages_min == 0 {
            (pages / 100).min(pages / 2)
        } else {
            cfg.free_pages_min
        }
        .clamp(2, pages - 1);
        let cfg = FlashConfig {
            page_size,
            wbuf_size: wbuf,
            free_pages_min,
            ..cfg
        };
        // The tier's identity: its files, their sizes and the page size.
        let fingerprint = {
            let mut id = format!("{page_size} {wbuf} {}", cfg.wbufs.clamp(2, MAX_WBUFS));
            for p in &cfg.paths {
                id.push_str(&format!("|{}:{}", p.path.display(), p.size));
            }
            xxhash_rust::xxh3::xxh3_64(id.as_bytes())
        };
        // Address space for the index's tables: enough for records of 64
        // bytes filling the tier, through every growth.
        let reserve = (pages * page_size / 64 * 16 * 5).max(64 << 20);
        let wbufs = cfg.wbufs.clamp(2, MAX_WBUFS);
        let opened = Meta::open(meta, fingerprint, pages, wbufs, wbuf, reserve)?;
        let meta = Arc::new(opened.meta);
        let mut index = FlashIndex::new(meta.clone())
            .ok_or_else(|| io::Error::other("ext_path: no address space for the flash index"))?;
        index.track_pages(page_size, pages);
        let mut log_pages = vec![
            Page {
                state: PageState::Free,
                seq: 0,
                used: 0,
                written: 0,
                class_bytes: 0,
                oldest_atime: NO_ATIME,
            };
            pages
        ];
        let mut fifo: Vec<(u64, usize)> = Vec::new();
        let mut free = Vec::new();
        if opened.resumed {
            // SAFETY: the log is not built yet: nothing else uses them.
            let records = unsafe { meta.page_records() };
            for (p, r) in records.iter().enumerate() {
                let written = (r.written as usize).min(page_size);
                if r.state == PageState::Free as u64 {
                    continue;
                }
                // A page that was being filled is sealed where its last
                // write ended.
                log_pages[p] = Page {
                    state: PageState::Sealed,
                    seq: r.seq,
                    used: written,
                    written,
                    class_bytes: 0,
                    oldest_atime: NO_ATIME,
                };
                fifo.push((r.seq, p));
            }
        }
        fifo.sort_unstable();
        for p in (0..pages).rev() {
            if log_pages[p].state == PageState::Free {
                free.push(p);
            }
        }
        let resumed = Resumed {
            taken_over: opened.resumed,
            crashed: opened.crashed,
            note: opened.note,
            items: 0,
        };
        let h = meta.header();
        let next_seq = if opened.resumed {
            h.next_seq
                .load(Ordering::Relaxed)
                .max(fifo.last().map_or(0, |&(s, _)| s) + 1)
        } else {
            1
        };
        let flushed_below = if opened.resumed {
            h.flushed_below.load(Ordering::Relaxed)
        } else {
            0
        };
        let flash = Arc::new(Flash {
            log: Mutex::new(Log {
                pages: log_pages,
                fifo: fifo.into_iter().map(|(_, p)| p).collect(),
                free,
                head: None,
                next_seq,
                filling: None,
                queued: VecDeque::new(),
                spare: (0..wbufs).collect(),
                flushed_below,
                flushes: 0,
                stop: false,
            }),
            stage: Mutex::new(stage),
            stage_base: (pages * page_size / record::ALIGN) as u64,
            cfg,
            device,
            index,
            meta,
            work: Condvar::new(),
            room: Condvar::new(),
            stats: FlashStats::default(),
            failed: AtomicBool::new(false),
            flusher: Mutex::new(None),
            events: Default::default(),
        });
        let mut resumed = resumed;
        if resumed.taken_over {
            flash.write_left_buffers(wbufs);
            flash.persist_all();
            if resumed.crashed {
                // Entries of records that never reached flash, of pages
                // reclaimed, or left twice by the write the kill cut
                // short go: the newest of a key's entries stays.
                let log = flash.log.lock();
                let pages = log.pages.clone();
                drop(log);
                let page_size = flash.cfg.page_size;
                let locate = |e: &Entry| {
                    let pos = (e.addr as usize - 1) * record::ALIGN;
                    (pos / page_size, pos % page_size)
                };
                flash.index.repair(
                    |e| {
                        let (p, off) = locate(e);
                        pages
                            .get(p)
                            .is_some_and(|pg| pg.state != PageState::Free && off < pg.written)
                    },
                    |a, b| {
                        let pos = |e: &Entry| {
                            let (p, off) = locate(e);
                            pages[p].seq * page_size as u64 + off as u64
                        };
                        pos(a) > pos(b)
                    },
                );
            }
            resumed.items = flash.index.len();
            // What was appended before is not known: taken as the bytes
            // used, as if every record were as big as its size class (so
            // a page's live part reads up to a fifth high until it is
            // rewritten), rather than as all live, which would leave no
            // page to compact and make the next reclaims drop live items.
            let mut log = flash.log.lock();
            for (p, page) in log.pages.iter_mut().enumerate() {
                page.class_bytes = page.used.max(flash.index.page_live(p));
            }
        }
        // Only now: a flusher started before the records a killed run left
        // in its write buffers were written out, and the index repaired,
        // could empty a page those records belong to (or move entries the
        // repair is rebuilding), and lose them.
        let worker = flash.clone();
        let handle = std::thread::Builder::new()
            .name("osmium-flash".into())
            .spawn(move || worker.flusher_loop())?;
        *flash.flusher.lock() = Some(handle);
        Ok((flash, resumed))
    }

    /// Writes out the records an earlier run left in its write buffers
    /// (a kill before the flusher wrote them), so that they count.
    fn write_left_buffers(&self, wbufs: usize) {
        let mut log = self.log.lock();
        for slot in 0..wbufs {
            let d = &self.meta.header().wbufs[slot];
            let state = d[0].load(Ordering::Acquire);
            let (page, offset, len) = (
                d[1].load(Ordering::Relaxed) as usize,
                d[2].load(Ordering::Relaxed) as usize,
                d[3].load(Ordering::Relaxed) as usize,
            );
            if (state == WBUF_FILLING || state == WBUF_QUEUED)
                && len > 0
                && page < log.pages.len()
                && offset + len <= self.cfg.page_size
                && offset.is_multiple_of(BLOCK)
                && len <= self.cfg.wbuf_size
            {
                let end = len.next_multiple_of(BLOCK);
                // SAFETY: no other user yet.
                let data = unsafe { self.wbuf(slot) };
                data[len..end].fill(0);
                match self.device.write(page, offset, &data[..end]) {
                    Ok(()) => {
                        let p = &mut log.pages[page];
                        if p.state != PageState::Free {
                            p.written = p.written.max(offset + len);
                            p.used = p.used.max(p.written);
                        }
                    }
                    Err(e) => self.fail("writing a flash file", &e),
                }
            }
            self.note_wbuf(slot, WBUF_FREE, 0, 0, 0);
        }
    }

    /// Copies every page's state into the metadata.
    fn persist_all(&self) {
        let log = self.log.lock();
        for p in 0..log.pages.len() {
            self.persist_page(&log, p);
        }
        let h = self.meta.header();
        h.next_seq.store(log.next_seq, Ordering::Relaxed);
        h.flushed_below.store(log.flushed_below, Ordering::Relaxed);
    }

    /// Records page `p`'s state, sequence and written bytes in the
    /// metadata (the caller holds the log).
    fn persist_page(&self, log: &Log, p: usize) {
        let page = log.pages[p];
        // SAFETY: the log's lock is held: no other access.
        let records = unsafe { self.meta.page_records() };
        records[p] = PageRecord {
            state: page.state as u64,
            seq: page.seq,
            used: page.used as u64,
            written: page.written as u64,
        };
    }

    /// The configuration the tier was opened with.
    pub fn config(&self) -> &FlashConfig {
        &self.cfg
    }

    /// Whether the tier still works (an I/O error turns it off).
    #[inline]
    pub fn is_on(&self) -> bool {
        !self.failed.load(Ordering::Relaxed)
    }

    /// Whether the files bypass the page cache.
    pub fn direct_io(&self) -> bool {
        self.device.direct
    }

    /// Bytes of live records on the pages, and bytes written to them that
    /// no entry points at any more (overwritten, deleted, flushed), by the
    /// entries' size classes (an estimate: a class is up to a fifth larger
    /// than its record).
    pub fn live_dead_bytes(&self) -> (usize, usize) {
        let log = self.log.lock();
        let (mut live, mut dead) = (0, 0);
        for (p, page) in log.pages.iter().enumerate() {
            if page.state == PageState::Free {
                continue;
            }
            let l = self.live_part(p, page);
            live += l;
            dead += page.used - l;
        }
        (live, dead)
    }

    /// The bytes of page `p` still live: its used bytes × its records'
    /// live part (both counted in size classes' bytes, see `Page`).
    fn live_part(&self, p: usize, page: &Page) -> usize {
        let live = self.index.page_live(p);
        if page.class_bytes == 0 || live >= page.class_bytes {
            return if live == 0 { 0 } else { page.used };
        }
        (page.used as u128 * live as u128 / page.class_bytes as u128) as usize
    }

    /// Each page's version (its turn as head, numbered from 1 across the
    /// tier's life; 0 for a page never written) and live bytes, as
    /// memcached's `stats extstore` lists its pages.
    pub fn page_data(&self) -> Vec<(u64, usize)> {
        let log = self.log.lock();
        log.pages
            .iter()
            .enumerate()
            .map(|(p, page)| {
                if page.state == PageState::Free {
                    (0, 0)
                } else {
                    (page.seq, self.live_part(p, page))
                }
            })
            .collect()
    }

    /// The oldest last access known of the items on the pages holding
    /// records (relative clock), if any is known.
    pub fn oldest_access(&self) -> Option<u32> {
        let log = self.log.lock();
        log.pages
            .iter()
            .filter(|p| p.state != PageState::Free && p.oldest_atime != NO_ATIME)
            .map(|p| p.oldest_atime)
            .min()
    }

    /// (pages in all, pages free, pages holding records).
    pub fn pages(&self) -> (usize, usize, usize) {
        let log = self.log.lock();
        (
            log.pages.len(),
            log.free.len(),
            log.pages.len() - log.free.len(),
        )
    }

    /// A graceful stop: the filling buffer is queued, the flusher writes
    /// every queued buffer and stops, and the metadata is written out and
    /// marked whole.
    pub fn shutdown(&self) {
        {
            let mut log = self.log.lock();
            self.queue_filling(&mut log);
            log.stop = true;
        }
        self.work.notify_all();
        self.room.notify_all();
        if let Some(h) = self.flusher.lock().take() {
            let _ = h.join();
        }
        self.write_queued();
        self.meta.close();
    }

    /// A binary upgrade's hand-over, once nothing writes to the tier any
    /// more: with its metadata in a memfd, a graceful stop (`shutdown`:
    /// every buffer written, the metadata marked whole) and a duplicate
    /// of the memfd, not close-on-exec, for the next image to take the
    /// tier over ([`MetaSource::Memfd`]). None, and nothing stopped, for
    /// metadata in a file (taken over by its path, as after a kill) or in
    /// anonymous memory (the next image starts the tier empty).
    pub fn hand_over(&self) -> io::Result<Option<std::os::fd::OwnedFd>> {
        if !self.meta.is_memfd() {
            return Ok(None);
        }
        self.shutdown();
        self.meta.hand_over()
    }

    fn fail(&self, what: &str, e: &io::Error) {
        self.stats.io_errors.fetch_add(1, Ordering::Relaxed);
        if !self.failed.swap(true, Ordering::Relaxed) {
            eprintln!(
                "[extstore] {what} failed: {e}; the flash tier is off, serving from RAM only"
            );
        }
        self.room.notify_all();
    }

    // ---- writing ----

    /// Writes an item to the tier: the record of `spec` (whose CAS unique
    /// must be stored, since its location changes), `key`, `value` and
    /// state bits `state`. Returns its index entry; the caller inserts it
    /// into the index. Waits for the disk when every buffer is full,
    /// unless `wait` is false (then, like a failed tier, None). A record
    /// a flush_all covers since (see [`Origin`]) is not written (None).
    /// `atime`: the item's last access (relative clock), if known, for its
    /// page's oldest (`stats items`).
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &self,
        spec: &ItemSpec,
        key: &[u8],
        value: &[u8],
        state: u8,
        wait: bool,
        origin: Origin,
        atime: Option<u32>,
    ) -> Option<Entry> {
        if !self.is_on() {
            return None;
        }
        let size = record::record_size(spec.size());
        let class = record::class_of(size)?;
        if size > self.cfg.wbuf_size {
            return None;
        }
        let mut log = self.log.lock();
        loop {
            // At a stop, the flusher still drains the staged records.
            if (log.stop && origin == Origin::Ram) || !self.is_on() {
                return None;
            }
            let flushed = match origin {
                Origin::Ram => false,
                Origin::Log(pos) => pos < log.flushed_below,
                Origin::Staged(flushes) => flushes != log.flushes,
            };
            if flushed {
                // A record a flush_all covered.
                return None;
            }
            // The record must fit in the head page ...
            let head_room = log
                .head
                .map_or(0, |p| self.cfg.page_size - log.pages[p].used);
            if head_room < size {
                // Seal the head; its last buffer goes to the flusher.
                self.queue_filling(&mut log);
                if let Some(p) = log.head.take() {
                    log.pages[p].state = PageState::Sealed;
                    log.fifo.push_back(p);
                    self.persist_page(&log, p);
                }
                // The last free page is kept for the reclaimer's rescues.
                let reserve = if wait { 1 } else { 0 };
                let page = (log.free.len() > reserve).then(|| log.free.pop()).flatten();
                let Some(p) = page else {
                    // Every page holds records: the flusher reclaims.
                    self.work.notify_one();
                    if !wait {
                        return None;
                    }
                    self.stats.write_waits.fetch_add(1, Ordering::Relaxed);
                    self.room.wait(&mut log);
                    continue;
                };
                let seq = log.next_seq;
                log.next_seq += 1;
                self.stats.page_allocs.fetch_add(1, Ordering::Relaxed);
                self.meta
                    .header()
                    .next_seq
                    .store(log.next_seq, Ordering::Relaxed);
                log.pages[p] = Page {
                    state: PageState::Head,
                    seq,
                    used: 0,
                    written: 0,
                    class_bytes: 0,
                    oldest_atime: NO_ATIME,
                };
                self.persist_page(&log, p);
                log.head = Some(p);
                if log.free.len() < self.cfg.free_pages_min {
                    self.work.notify_one();
                }
                continue;
            }
            // ... and in the filling buffer.
            let buf_room = log.filling.as_ref().map_or(0, |b| b.cap - b.len);
            if buf_room >= size {
                break;
            }
            self.queue_filling(&mut log);
            let Some(slot) = log.spare.pop() else {
                if !wait {
                    return None;
                }
                self.stats.write_waits.fetch_add(1, Ordering::Relaxed);
                self.work.notify_one();
                self.room.wait(&mut log);
                continue;
            };
            // A new buffer at the head's append point, on a block boundary.
            let page = log.head.expect("a head page");
            let offset = log.pages[page]
                .used
                .next_multiple_of(BLOCK)
                .min(self.cfg.page_size);
            log.pages[page].used = offset;
            let cap = self.cfg.wbuf_size.min(self.cfg.page_size - offset);
            log.filling = Some(Buffer {
                page,
                offset,
                len: 0,
                cap,
                slot,
            });
            self.note_wbuf(slot, WBUF_FILLING, page, offset, 0);
        }
        let page = log.head.expect("a head page");
        let page_used = log.pages[page].used;
        let b = log.filling.as_mut().expect("a filling buffer");
        debug_assert_eq!(b.page, page);
        debug_assert_eq!(b.offset + b.len, page_used);
        let at = b.len;
        let slot = b.slot;
        // SAFETY: the filling buffer is written under the log's lock only.
        let data = unsafe { self.wbuf(slot) };
        let n = record::write(&mut data[at..at + size], spec, key, value, state);
        debug_assert_eq!(n, size);
        let b = log.filling.as_mut().expect("a filling buffer");
        b.len += size;
        let len = b.len;
        // After the record's bytes: a restart writes out what this counts.
        self.meta.header().wbufs[slot][3].store(len as u64, Ordering::Release);
        log.pages[page].used += size;
        log.pages[page].class_bytes += record::class_bytes(class);
        if let Some(t) = atime {
            let oldest = &mut log.pages[page].oldest_atime;
            *oldest = (*oldest).min(t);
        }
        let pos = page * self.cfg.page_size + page_used;
        drop(log);
        self.stats.objects_written.fetch_add(1, Ordering::Relaxed);
        if origin == Origin::Ram {
            // Given to the tier (a rewrite of a record is not: it is what
            // the write amplification counts).
            self.note_stored(spec);
        }
        Some(Entry {
            addr: (pos / record::ALIGN) as u64 + 1,
            class,
            hot: false,
        })
    }

    /// The log position the next record appended gets (flush_all's mark).
    fn head_position(&self, log: &Log) -> u64 {
        match log.head {
            Some(p) => log.pages[p].seq * self.cfg.page_size as u64 + log.pages[p].used as u64,
            None => log.next_seq * self.cfg.page_size as u64,
        }
    }

    /// Queues the filling buffer (if it holds records) for the flusher,
    /// its last block's tail zeroed.
    fn queue_filling(&self, log: &mut Log) {
        if let Some(b) = log.filling.take() {
            if b.len == 0 {
                self.note_wbuf(b.slot, WBUF_FREE, 0, 0, 0);
                log.spare.push(b.slot);
            } else {
                let end = b.len.next_multiple_of(BLOCK);
                // SAFETY: under the log's lock, before the flusher sees it.
                unsafe { self.wbuf(b.slot)[b.len..end].fill(0) };
                self.meta.header().wbufs[b.slot][0].store(WBUF_QUEUED, Ordering::Release);
                log.queued.push_back(b);
                self.work.notify_one();
            }
        }
    }

    /// Write buffer `slot`.
    ///
    /// # Safety
    /// A filling buffer is written under the log's lock only; a queued one
    /// is read only (by readers under the lock, by the flusher).
    #[allow(clippy::mut_from_ref)]
    unsafe fn wbuf(&self, slot: usize) -> &mut [u8] {
        // SAFETY: `wbuf_size` bytes of the metadata mapping, per the
        // caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.meta.wbuf(slot), self.cfg.wbuf_size) }
    }

    /// Records write buffer `slot`'s descriptor in the metadata.
    fn note_wbuf(&self, slot: usize, state: u64, page: usize, offset: usize, len: usize) {
        let d = &self.meta.header().wbufs[slot];
        d[1].store(page as u64, Ordering::Relaxed);
        d[2].store(offset as u64, Ordering::Relaxed);
        d[3].store(len as u64, Ordering::Relaxed);
        d[0].store(state, Ordering::Release);
    }

    // ---- reading ----

    /// Where the record of the key with this hash is, if the index has it.
    pub fn find(&self, hash: u64) -> Option<FlashRead> {
        if !self.is_on() {
            return None;
        }
        self.index.get(hash).map(|entry| FlashRead { hash, entry })
    }

    /// The blocks to read for `r`: (page, offset, bytes), whole blocks.
    fn extent(&self, r: &FlashRead) -> (usize, usize, usize) {
        let pos = (r.entry.addr as usize - 1) * record::ALIGN;
        let page = pos / self.cfg.page_size;
        let offset = pos % self.cfg.page_size;
        let start = offset - offset % BLOCK;
        let end = (offset + record::class_bytes(r.entry.class))
            .min(self.cfg.page_size)
            .next_multiple_of(BLOCK);
        (page, start, end - start)
    }

    /// Where the record `r` points at can be read. A record still in a
    /// write buffer is copied into `buf` (grown as needed) at once.
    pub fn source(&self, r: &FlashRead, buf: &mut Option<AlignedBuf>) -> Source {
        let log = self.log.lock();
        if let Some(staged) = self.staged_source(&log, r.entry.addr, r.entry.class, buf) {
            return staged;
        }
        let (page, start, len) = self.extent(r);
        let pos_in_page = (r.entry.addr as usize - 1) * record::ALIGN % self.cfg.page_size;
        let p = log.pages[page];
        if p.state == PageState::Free {
            return Source::Gone;
        }
        let logical = p.seq * self.cfg.page_size as u64 + pos_in_page as u64;
        if logical < log.flushed_below {
            return Source::Gone;
        }
        let in_ram = log
            .filling
            .iter()
            .chain(log.queued.iter())
            .find(|b| b.page == page && pos_in_page >= b.offset && pos_in_page < b.offset + b.len)
            .copied();
        if let Some(Buffer {
            offset: bo,
            len: bl,
            slot,
            ..
        }) = in_ram
        {
            // SAFETY: under the log's lock: read only.
            let d = unsafe { self.wbuf(slot) };
            let from = pos_in_page - bo;
            let n = (bl - from).min(record::class_bytes(r.entry.class));
            if buf.as_ref().is_none_or(|b| b.len() < n) {
                *buf = Some(AlignedBuf::new(n));
            }
            buf.as_mut().expect("just made")[..n].copy_from_slice(&d[from..from + n]);
            return Source::Ram { len: n };
        }
        if pos_in_page >= p.written {
            return Source::Gone;
        }
        let (fd, offset) = self.device.position(page, start);
        Source::Disk {
            fd,
            offset,
            len,
            skip: pos_in_page - start,
        }
    }

    /// Reads the record `r` points at into `buf` (grown as needed) and
    /// returns the item's bytes in it, if the record is whole, holds `key`
    /// and was not flushed. A record that fails its checksum or holds
    /// another key is a miss (and its entry goes, if it still points
    /// there). Blocks this thread on a disk read.
    pub fn read<'b>(
        &self,
        r: &FlashRead,
        key: &[u8],
        buf: &'b mut Option<AlignedBuf>,
    ) -> Option<&'b [u8]> {
        match self.source(r, buf) {
            Source::Gone => {
                self.index.remove_at(r.hash, r.entry.addr);
                None
            }
            Source::Ram { len } => self.check(r, key, &buf.as_ref().expect("filled")[..len]),
            Source::Disk {
                fd: _,
                offset: _,
                len,
                skip,
            } => {
                if buf.as_ref().is_none_or(|b| b.len() < len) {
                    *buf = Some(AlignedBuf::new(len));
                }
                let (page, start, _) = self.extent(r);
                let data = &mut buf.as_mut().expect("just made")[..len];
                if let Err(e) = self.device.read(page, start, data) {
                    self.fail("reading a flash file", &e);
                    return None;
                }
                self.note_read(len);
                self.check(r, key, &buf.as_ref().expect("made")[skip..len])
            }
        }
    }

    /// Counts `len` bytes read from the files.
    pub fn note_read(&self, len: usize) {
        self.stats
            .bytes_read
            .fetch_add(len as u64, Ordering::Relaxed);
    }

    /// A read of a flash file failed (done by the caller).
    pub fn read_failed(&self, e: &io::Error) {
        self.fail("reading a flash file", e);
    }

    /// The item of the record read for `r` (`bytes` from the record's
    /// first byte), if it is whole and holds `key`.
    pub fn check<'b>(&self, r: &FlashRead, key: &[u8], bytes: &'b [u8]) -> Option<&'b [u8]> {
        let Some(item) = record::verify(bytes) else {
            self.stats.badcrc.fetch_add(1, Ordering::Relaxed);
            self.index.remove_at(r.hash, r.entry.addr);
            return None;
        };
        // SAFETY: a verified record's item bytes are a whole item.
        let it = unsafe { ItemPtr::from_raw(item.as_ptr() as *mut u8) };
        if it.key() != key {
            return None;
        }
        self.stats.objects_read.fetch_add(1, Ordering::Relaxed);
        Some(item)
    }

    /// flush_all: every record written so far is flushed.
    pub fn flush_all(&self) {
        let mut log = self.log.lock();
        let pos = self.head_position(&log);
        log.flushed_below = log.flushed_below.max(pos);
        // It covers every record staged so far; those staged from now on
        // go to a new buffer.
        log.flushes += 1;
        self.stage.lock().seal();
        self.work.notify_one();
        // Recorded before flush_all is answered.
        self.meta
            .header()
            .flushed_below
            .store(log.flushed_below, Ordering::Release);
    }
}

impl Drop for Flash {
    fn drop(&mut self) {
        self.log.get_mut().stop = true;
    }
}
