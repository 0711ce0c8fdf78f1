//! Packing on the way to flash: the staging buffers where raw cold items
//! the RAM evictor gives the tier wait, readable, until the flusher packs
//! them (zstd frames, see `codec`) and appends the packed records to the
//! log. Packed records are smaller, so more items fit in a page and in
//! the tier; the packing runs on the flusher's thread, off the requests.
//!
//! ```text
//!  evictor ──stage (a copy)──▶ staging buffer (filling) ──full──▶ flusher, per record:
//!     │                          │ (readable: a GET copies the record)     the key's entry still
//!     └── index entry: staged ───┘                                         here? pack it, append
//!         address (past the pages)                                         the packed record to
//!                                                                          the log, move the entry
//! ```
//!
//! Which items: a raw value of at least `codec::PACK_MIN` bytes not tried
//! before (an item the RAM pack pass packed is appended as it is, codec
//! byte kept; one it tried is appended raw). The CPU bounds are the pack
//! pass's (`pack`): `codec::Packer` sniffs compressed formats and keeps a
//! frame only when it saves enough; a value that does not pack is written
//! raw marked tried (`EXT_RAW_TRIED`: a reclaim's rewrite does not try it
//! again); each size class's last tries (`pack_state::ClassHistory`, the
//! flusher's own): a class whose last 8 tries failed is tried for one
//! value in 16.
//!
//! Addresses: a staged record's entry holds an address past the pages
//! (`Flash::stage_base` + its place in the buffers, in 16-byte units), so
//! reads find it in RAM and the index's per-page counts ignore it. A
//! buffer notes how many flush_alls ran before it was started: one more
//! covers its records (they read as gone and are dropped, not appended;
//! counted, not compared by log position, since staging does not move
//! the log's head), and seals the filling buffer, so that records staged
//! after it go to a buffer it does not cover. A buffer is sealed and
//! drained when it is full, when the flusher has been idle for
//! `IDLE_SEAL`, or when a walk or a stop wants every record on flash.
//!
//! Failure and restarts: staged records are in RAM only. A stop drains
//! them first; a kill would lose them (their entries point past the pages,
//! and the repair after a crash drops such entries), so a tier whose
//! metadata outlives a kill (a memory file: `FlashConfig::pack_level` is
//! None then) stages nothing. When both buffers are busy (the flusher
//! behind) an item is appended raw, as without packing.
//!
//! Locks: the log's, then the staging's, then an index shard's (never
//! the other way round).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::*;
use crate::clock::thread_cpu_micros;
use crate::codec::{Packed, Packer, PACK_MIN};
use crate::dict::CODEC_PLAIN;
use crate::pack_state::{class_of, ClassHistory, CLASSES};

/// Staging buffers (one filling while the flusher drains the other).
pub(super) const STAGE_BUFS: usize = 2;

/// How long the flusher waits, idle, before it seals a filling buffer
/// that holds records (so that they reach flash, and outlive a kill).
pub(super) const IDLE_SEAL: Duration = Duration::from_secs(1);

/// Appends a drain tries for a record (writing the queued buffers between
/// tries) before it gives the record up.
const APPEND_TRIES: usize = 4;

struct StageBuf {
    data: Vec<u8>,
    /// Bytes of records (0: free).
    len: usize,
    /// flush_alls before the buffer was started (see the module comment).
    flushes: u64,
    /// The oldest last access of its items (relative clock), as the
    /// evictor saw them; `NO_ATIME` when none is known.
    oldest_atime: u32,
}

/// The staging buffers' state (under `Flash::stage`).
pub(super) struct Stage {
    bufs: Vec<StageBuf>,
    /// Each buffer's size.
    cap: usize,
    filling: Option<usize>,
    /// Sealed buffers waiting for the flusher, oldest first.
    full: VecDeque<usize>,
    /// Free buffers.
    spare: Vec<usize>,
    /// Buffers sealed with records, and buffers drained, since the start
    /// (drains go oldest first: a walk waits for the count it saw).
    sealed: u64,
    drained: u64,
}

impl Stage {
    /// `bufs` buffers of `cap` bytes (none: packing off).
    pub(super) fn new(bufs: usize, cap: usize) -> Stage {
        Stage {
            bufs: (0..bufs)
                .map(|_| StageBuf {
                    data: Vec::new(),
                    len: 0,
                    flushes: 0,
                    oldest_atime: NO_ATIME,
                })
                .collect(),
            cap,
            filling: None,
            full: VecDeque::new(),
            spare: (0..bufs).rev().collect(),
            sealed: 0,
            drained: 0,
        }
    }

    /// Bytes of staged addresses (past the pages) the buffers take.
    pub(super) fn span(&self) -> usize {
        self.bufs.len() * self.cap
    }

    /// Seals the filling buffer (if it holds records) for the flusher.
    pub(super) fn seal(&mut self) {
        if let Some(b) = self.filling.take() {
            if self.bufs[b].len == 0 {
                self.spare.push(b);
            } else {
                self.full.push_back(b);
                self.sealed += 1;
            }
        }
    }

    /// Whether a sealed buffer waits for the flusher.
    pub(super) fn has_full(&self) -> bool {
        !self.full.is_empty()
    }

    /// Whether the filling buffer holds records.
    pub(super) fn filling_has_records(&self) -> bool {
        self.filling.is_some_and(|b| self.bufs[b].len > 0)
    }

    /// The oldest sealed buffer, to drain; it stays readable until the
    /// drain ends.
    pub(super) fn next_full(&mut self) -> Option<usize> {
        self.full.pop_front()
    }
}

/// The flusher's packer and each size class's last tries.
pub(super) struct Packing {
    packer: Packer,
    classes: [ClassHistory; CLASSES],
}

impl Packing {
    pub(super) fn new(level: i32) -> Packing {
        Packing {
            packer: Packer::new(level),
            classes: [ClassHistory::default(); CLASSES],
        }
    }
}

impl Flash {
    /// Stages a raw item for packing (see the module comment): copies
    /// its record into the filling staging buffer and points the key
    /// (`hash`) at it, under the staging lock (so that the flusher, which
    /// looks for the entry, never drains the record before the entry is
    /// there); returns the entry. None when the tier does not pack (off,
    /// failed, stopping, a value not worth a try) or both buffers are
    /// busy: then the caller appends the item as it is.
    pub fn stage(
        &self,
        hash: u64,
        spec: &ItemSpec,
        key: &[u8],
        value: &[u8],
        state: u8,
        atime: Option<u32>,
    ) -> Option<Entry> {
        if self.cfg.pack_level.is_none()
            || !self.is_on()
            || spec.packed.is_some()
            || spec.raw_tried
            || spec.value_len < PACK_MIN
        {
            return None;
        }
        let size = record::record_size(spec.size());
        let class = record::class_of(size)?;
        let log = self.log.lock();
        if log.stop {
            return None;
        }
        let mut st = self.stage.lock();
        if size > st.cap {
            return None;
        }
        let room = st.filling.map_or(0, |b| st.cap - st.bufs[b].len);
        if room < size {
            if st.filling.is_some() {
                st.seal();
                self.work.notify_one();
            }
            let b = st.spare.pop()?;
            let cap = st.cap;
            let buf = &mut st.bufs[b];
            if buf.data.len() < cap {
                buf.data = vec![0; cap];
            }
            buf.len = 0;
            buf.flushes = log.flushes;
            buf.oldest_atime = NO_ATIME;
            st.filling = Some(b);
        }
        drop(log);
        let b = st.filling.expect("a filling buffer");
        let cap = st.cap;
        let buf = &mut st.bufs[b];
        let at = buf.len;
        record::write(&mut buf.data[at..at + size], spec, key, value, state);
        buf.len += size;
        if let Some(t) = atime {
            buf.oldest_atime = buf.oldest_atime.min(t);
        }
        let entry = Entry {
            addr: self.stage_base + ((b * cap + at) / record::ALIGN) as u64 + 1,
            class,
            hot: false,
        };
        self.index.insert(hash, entry);
        drop(st);
        self.stats.staged.fetch_add(1, Ordering::Relaxed);
        Some(entry)
    }

    /// Where a staged record can be read, if `addr` is a staged address:
    /// copied into `buf` (grown as needed), or gone (its buffer was
    /// drained or flushed since). The caller holds the log.
    pub(super) fn staged_source(
        &self,
        log: &Log,
        addr: u64,
        class: u8,
        buf: &mut Option<AlignedBuf>,
    ) -> Option<Source> {
        let off = ((addr - 1).checked_sub(self.stage_base)? as usize) * record::ALIGN;
        let st = self.stage.lock();
        let (b, at) = (off / st.cap.max(1), off % st.cap.max(1));
        let Some(sb) = st.bufs.get(b) else {
            return Some(Source::Gone);
        };
        if at >= sb.len || sb.flushes != log.flushes {
            return Some(Source::Gone);
        }
        let n = (sb.len - at).min(record::class_bytes(class));
        if buf.as_ref().is_none_or(|x| x.len() < n) {
            *buf = Some(AlignedBuf::new(n));
        }
        buf.as_mut().expect("just made")[..n].copy_from_slice(&sb.data[at..at + n]);
        Some(Source::Ram { len: n })
    }

    /// The flusher's drain of staging buffer `b` (sealed, taken off the
    /// queue): packs each record its key's entry still points at and
    /// appends it to the log, moving the entry there; frees the buffer.
    pub(super) fn drain_stage(&self, b: usize, packing: &mut Packing) {
        let (data, flushes, oldest_atime, cap) = {
            let st = self.stage.lock();
            let sb = &st.bufs[b];
            (
                sb.data[..sb.len].to_vec(),
                sb.flushes,
                sb.oldest_atime,
                st.cap,
            )
        };
        let atime = (oldest_atime != NO_ATIME).then_some(oldest_atime);
        let base = self.stage_base + (b * cap / record::ALIGN) as u64 + 1;
        let len = data.len();
        record::scan(&data, len, 0, 0, len, record::ALIGN, |at, item| {
            let staged = base + (at / record::ALIGN) as u64;
            self.drain_record(item, staged, flushes, atime, packing);
        });
        let mut st = self.stage.lock();
        st.bufs[b].len = 0;
        st.spare.push(b);
        st.drained += 1;
        drop(st);
        self.room.notify_all();
    }

    /// One record of a drained buffer, at staged address `staged`.
    fn drain_record(
        &self,
        item: &[u8],
        staged: u64,
        flushes: u64,
        atime: Option<u32>,
        packing: &mut Packing,
    ) {
        // SAFETY: a verified record's item bytes are a whole item.
        let it = unsafe { ItemPtr::from_raw(item.as_ptr() as *mut u8) };
        let key = it.key();
        let hash = hash_key(key);
        if self.index.get(hash).is_none_or(|e| e.addr != staged) {
            return; // replaced or deleted since: not worth a try
        }
        if flushes != self.log.lock().flushes {
            self.index.remove_at(hash, staged);
            return; // a flush_all covers it
        }
        let spec = it.spec();
        let raw = it.stored_value();
        let cpu = thread_cpu_micros();
        let (spec, value) = self.pack_record(spec, raw, packing);
        self.stats
            .pack_cpu_micros
            .fetch_add(thread_cpu_micros().saturating_sub(cpu), Ordering::Relaxed);
        for _ in 0..APPEND_TRIES {
            let to = self.append(
                &spec,
                key,
                value,
                it.state(),
                false,
                Origin::Staged(flushes),
                atime,
            );
            if let Some(to) = to {
                self.note_stored(&spec);
                // Read while staged: it stays hot (a reclaim keeps it).
                let hot = self
                    .index
                    .get(hash)
                    .is_some_and(|e| e.addr == staged && e.hot);
                self.index.relocate(hash, staged, Entry { hot, ..to });
                return;
            }
            if !self.is_on() || !self.write_queued() {
                break;
            }
        }
        // No room (or flushed, or the tier failed): the item goes.
        let flushed = flushes != self.log.lock().flushes;
        if self.index.remove_at(hash, staged) && self.is_on() && !flushed {
            self.stats.compact_lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The record to append for a staged raw value: packed when it is
    /// worth it (its spec and frame), else raw marked tried; as it is
    /// when its size class keeps failing (not tried).
    fn pack_record<'a>(
        &self,
        spec: ItemSpec,
        raw: &'a [u8],
        packing: &'a mut Packing,
    ) -> (ItemSpec, &'a [u8]) {
        let class = &mut packing.classes[class_of(raw.len())];
        if class.skip() {
            self.stats.pack_skipped.fetch_add(1, Ordering::Relaxed);
            return (spec, raw);
        }
        match packing.packer.pack(raw) {
            Packed::Frame(frame) => {
                class.record(false);
                let spec = ItemSpec {
                    value_len: frame.len(),
                    packed: Some((CODEC_PLAIN, raw.len())),
                    ..spec
                };
                (spec, frame)
            }
            Packed::Rejected => {
                class.record(true);
                self.stats.pack_rejected.fetch_add(1, Ordering::Relaxed);
                let spec = ItemSpec {
                    raw_tried: true,
                    ..spec
                };
                (spec, raw)
            }
            Packed::Sniffed => {
                self.stats.pack_skipped.fetch_add(1, Ordering::Relaxed);
                let spec = ItemSpec {
                    raw_tried: true,
                    ..spec
                };
                (spec, raw)
            }
            Packed::Small => (spec, raw),
        }
    }

    /// Counts an item newly given to the tier (`bytes_stored`, and the
    /// packed figures when its value is packed).
    pub(super) fn note_stored(&self, spec: &ItemSpec) {
        let s = &self.stats;
        s.bytes_stored
            .fetch_add(record::record_size(spec.size()) as u64, Ordering::Relaxed);
        if let Some((_, raw_len)) = spec.packed {
            s.packed_items.fetch_add(1, Ordering::Relaxed);
            s.packed_raw_bytes
                .fetch_add(raw_len as u64, Ordering::Relaxed);
            s.packed_bytes
                .fetch_add(spec.value_len as u64, Ordering::Relaxed);
        }
    }

    /// Bytes of records staged now (in RAM, waiting for the flusher).
    pub fn staged_bytes(&self) -> usize {
        self.stage.lock().bufs.iter().map(|b| b.len).sum()
    }

    /// Seals the filling staging buffer and waits until the flusher has
    /// drained every record staged so far (a walk wants them on flash;
    /// records staged meanwhile are not waited for). The caller holds the
    /// log, which the wait releases.
    pub(super) fn drain_all(&self, log: &mut parking_lot::MutexGuard<'_, Log>) {
        let target = {
            let mut st = self.stage.lock();
            st.seal();
            st.sealed
        };
        self.work.notify_one();
        while self.is_on() && self.stage.lock().drained < target {
            self.room.wait_for(log, Duration::from_millis(50));
        }
    }
}
