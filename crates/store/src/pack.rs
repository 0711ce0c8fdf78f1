//! The pack pass (`-o compression=cold`, the default): cold items are
//! packed (zstd frames, see `codec`) off the request path, by the
//! background cleaner, so that the cache holds more of them in the same
//! memory while hot items stay raw.
//!
//! When free segments run low and no segment is dead enough to compact
//! (`Store::clean_ahead`), the cleaner *pack-compacts* the oldest segment
//! (by activation) of a queue, main first, that the pass has not been
//! over: its live items are copied as a compaction copies them
//! (`Store::move_planned`: the destination takes the victim's place in
//! its FIFO; CAS unique, flags, expiry, access time, state bits and
//! frequency kept), but each cold one (S3-FIFO frequency 0: not hit since
//! it was written or moved) of at least `codec::PACK_MIN` bytes is packed:
//!
//! ```text
//!   main FIFO:   A(packed)  [V]  B  C         V: not packed yet, claimed
//!   plan:        walk V in order; pack each cold raw value into the frames
//!                buffer (the cleaner lock is not held: writers make room
//!                meanwhile, passing V over)
//!   not worth:   the copies would free < 20 % of V -> V left as it is,
//!                marked PACK_NOT_WORTH (never walked again)
//!   move:        (cleaner lock) each item copied to D: its frame, raw if it
//!                was hit since the plan, or raw marked tried
//!   after:       A  D(packed)  B  C            V freed
//! ```
//!
//! Why the oldest first, and the newest while no segment is free: the
//! oldest items have had the longest to be hit, so packing them packs the
//! fewest that are hot; but with no free segment the writers are evicting
//! (the cleaner is behind them), the oldest segments are the next to go,
//! and a pack of one would be undone at once, while a pack of the newest
//! keeps its items for a whole turn of the queue (a hit on a packed item
//! still counts, and S3-FIFO keeps it: packed, or raw if it is hot, see
//! `evict`).
//!
//! Why the pass runs only when free segments run low: until then nothing
//! would be evicted, and a value packed costs a decompression at each
//! GET. Once memory is needed, the choice is between evicting the oldest
//! items and packing them: packing 2.7x-compressible values frees ~60 % of
//! a segment and keeps its items. Why "cold" is frequency 0: it is what
//! S3-FIFO itself keeps or drops by, costs nothing to read, and a packed
//! item that turns hot is written back raw: by the cleaner's next round
//! once GETs have hit it up to the frequency cap (`promote`), without
//! waiting for the evictor; and when the evictor keeps it at that
//! frequency (`evict`). One hit less (warm) is kept packed by the
//! evictor, not written raw to be packed again. So a packed item that
//! turns hot pays a few decompressions, not one per GET until its segment
//! reaches the front of its queue.
//!
//! What keeps the CPU bounded on data that does not compress:
//!
//! * a value tried once and not kept packed is copied raw and marked
//!   raw-tried (`EXT_RAW_TRIED`), never tried again; one that starts like
//!   a compressed format is not tried at all (`codec::sniff_incompressible`);
//! * per size class (powers of two from 64 bytes), the outcomes of the
//!   last 8 tries: a class whose last 8 tries all failed is tried for one
//!   item in 16 only (a success ends the streak);
//! * a segment whose tried values saved less than 20 % of their bytes
//!   pauses the pass on its queue until `PAUSE_SEGMENTS` more segments
//!   were activated;
//! * every segment is walked once (`Segment::packed`: packed, or not worth
//!   it), and the pass's destinations are marked packed.
//!
//! Correctness is compaction's: a copy is written (dead) before it is
//! linked under its key's shard lock, the victim's memory is reused only
//! after the readers pinned while its items were linked have finished, so
//! a lock-free GET sees the raw item or the whole packed copy, never a
//! part; a crash between linking a copy and marking the original dead
//! leaves two versions with the same CAS unique and the same client bytes,
//! of which a recovery keeps one.
//!
//! Dictionaries (`dict`, `train`, `-o compress_dicts`): a cold value of a size
//! class that has a dictionary is packed with it (its copy's codec byte
//! names it); every value tried is offered to the trainer as a sample.
//! Training and the removal of retired dictionaries run at the start of a
//! pack, never between its plan and its moves, so the dictionaries a plan
//! packs with are current (never removed) until the copies naming them
//! are linked and counted.
//!
//! Memory: the cleaner keeps one zstd `CCtx`, a plan of the victim's items
//! and a frames buffer of at most a segment (packed values are smaller
//! than the values they replace).

use std::sync::atomic::Ordering;

use crate::arena::{CleanScan, Queue, SegmentId, PACK_NOT_WORTH};
use crate::clock::thread_cpu_micros;
use crate::codec::{sniff_incompressible, Packed, Packer, PACK_MIN};
use crate::compact::CopyAs;
use crate::dict::{CODEC_PLAIN, DICT_CLASSES};
use crate::index::{hash_key, Location};
use crate::pack_state::{class_of, How, PackWork, Planned};
use crate::store::Store;
use crate::types::Compression;

/// Segments activated after a pack that saved too little before the pass
/// walks that queue again.
const PAUSE_SEGMENTS: u64 = 8;

/// Bytes packed between two yields of the CPU (about 50 µs at zstd's
/// level 1).
const YIELD_BYTES: usize = 16 << 10;

/// What a plan found.
#[derive(Default)]
struct PackPlan {
    /// Bytes the copies will take.
    need: usize,
    /// The client's bytes of the values tried, and what they became
    /// (frames, or themselves when they did not pack).
    tried_raw: usize,
    tried_packed: usize,
    rejected: u64,
    skipped: u64,
}

impl Store {
    /// The background cleaner's pack step (see the module comment), when
    /// no segment is dead enough to compact: pack-compacts the oldest
    /// segment not packed yet of main, else of small, unless the pass is
    /// paused on that queue; the newest instead while the writers evict
    /// (see the module comment). False if there was nothing to do.
    pub(crate) fn pack_ahead(&self, scan: &CleanScan) -> bool {
        if self.cfg.compression != Compression::Cold {
            return false;
        }
        let resume_at = self.pack_work.lock().resume_at;
        let activations = self.arena.activations();
        let candidates = if self.arena.free_segments() == 0 {
            &scan.pack_newest
        } else {
            &scan.pack
        };
        for queue in [Queue::Main, Queue::Small] {
            let Some(victim) = candidates[queue as usize] else {
                continue;
            };
            if activations < resume_at[queue as usize] {
                continue;
            }
            if self.arena.claim_for_compaction(victim) {
                self.pack_segment(victim, true);
            }
            // Done, or the segment changed since the scan: look again.
            return true;
        }
        false
    }

    /// Pack-compacts a segment claimed for compaction (see the module
    /// comment). True if it was emptied (its items copied, cold ones
    /// packed); false if it was given back as it was (not worth it, or
    /// no room for the copies). `background` yields the CPU now and then.
    /// Takes the cleaner lock for the moves only: the caller holds none.
    pub(crate) fn pack_segment(&self, victim: SegmentId, background: bool) -> bool {
        let mut guard = self.pack_work.lock();
        let work = &mut *guard;
        // Before the plan: a dictionary the plan packs with is current,
        // so no training or collection may retire and remove it before
        // the copies naming it are linked.
        self.train_dicts(work);
        let queue = self.arena.queue(victim);
        let s = self.arena.segment(victim);
        let used = s.used.load(Ordering::Acquire);
        let cpu = thread_cpu_micros();
        let plan = self.plan_pack(victim, used, work, background);
        let ps = &self.pack_stats;
        ps.cpu_micros
            .fetch_add(thread_cpu_micros().saturating_sub(cpu), Ordering::Relaxed);
        ps.rejected.fetch_add(plan.rejected, Ordering::Relaxed);
        ps.skipped.fetch_add(plan.skipped, Ordering::Relaxed);
        if plan.tried_raw > 0 && (plan.tried_raw - plan.tried_packed) * 5 < plan.tried_raw {
            // Values that do not compress: new segments may hold others.
            work.resume_at[queue as usize] = self.arena.activations() + PAUSE_SEGMENTS;
        }
        if plan.need * 5 > used * 4 {
            s.packed.store(PACK_NOT_WORTH, Ordering::Relaxed);
            ps.not_worth.fetch_add(1, Ordering::Relaxed);
            self.arena.unclaim(victim, usize::MAX);
            return false;
        }
        let _turn = self.cleaner.lock();
        if plan.need > self.arena.compactor_room(queue) {
            self.clean_stats.aborted.fetch_add(1, Ordering::Relaxed);
            self.arena.unclaim(victim, usize::MAX);
            return false;
        }
        let dead = used.saturating_sub(s.live());
        let (planned, frames) = (&work.plan, &work.frames);
        let moves = self.move_planned(
            victim,
            planned.len(),
            |i| {
                let p = planned[i];
                let hot =
                    p.how != How::Same && self.arena.item(victim, p.offset as usize).freq() > 0;
                let copy = match p.how {
                    // Hit since the plan: raw, as it is.
                    _ if hot => CopyAs::Same,
                    How::Same => CopyAs::Same,
                    How::Packed => CopyAs::Packed(
                        &frames[p.frame_at as usize..][..p.frame_len as usize],
                        p.codec,
                    ),
                    How::RawTried => CopyAs::RawTried,
                };
                (p.offset, p.hash, copy)
            },
            background,
            true,
        );
        ps.items.fetch_add(moves.packed, Ordering::Relaxed);
        if !moves.emptied {
            self.clean_stats.aborted.fetch_add(1, Ordering::Relaxed);
            self.arena.unclaim(victim, usize::MAX);
            return false;
        }
        ps.segments.fetch_add(1, Ordering::Relaxed);
        self.clean_stats
            .dead_bytes_reclaimed
            .fetch_add(dead as u64, Ordering::Relaxed);
        self.arena.release_compacted(victim);
        true
    }

    /// The dictionary trainer's turn (see `dict::train`): trains one size
    /// class whose samples are in, if any is due, and removes the retired
    /// dictionaries no item names.
    fn train_dicts(&self, work: &mut PackWork) {
        if !self.cfg.compress_dicts {
            return;
        }
        let pass_cpu = self.pack_stats.cpu_micros.load(Ordering::Relaxed);
        work.trainer
            .train_due(&self.dicts, self.cfg.compress_level, pass_cpu);
        self.dicts.collect();
    }

    /// The plan of a pack: walks `seg` in order (fetched ahead), notes
    /// each live item, packs the cold raw values worth a try into the
    /// frames buffer, and sums what the copies will take.
    fn plan_pack(
        &self,
        seg: SegmentId,
        used: usize,
        work: &mut PackWork,
        background: bool,
    ) -> PackPlan {
        let PackWork {
            packer,
            plan,
            frames,
            classes,
            trainer,
            ..
        } = work;
        let dicts = self.cfg.compress_dicts.then_some(&self.dicts);
        plan.clear();
        frames.clear();
        let packer = packer.get_or_insert_with(|| Packer::new(self.cfg.compress_level));
        let mut p = PackPlan::default();
        let (mut offset, mut fetched, mut since_yield) = (0, 0, 0);
        while offset < used {
            self.read_ahead(seg, offset, used, &mut fetched);
            let it = self.arena.item(seg, offset);
            let size = it.size();
            if !it.is_dead() {
                let mut entry = Planned {
                    offset: offset as u32,
                    frame_at: 0,
                    frame_len: 0,
                    codec: CODEC_PLAIN,
                    how: How::Same,
                    hash: hash_key(it.key()),
                };
                let len = it.value_len();
                if it.freq() == 0 && len >= PACK_MIN && it.packed().is_none() && !it.raw_tried() {
                    let class_index = class_of(len);
                    let class = &mut classes[class_index];
                    if class.skip() {
                        p.skipped += 1;
                    } else {
                        since_yield += len;
                        let value = it.stored_value();
                        let dict = match dicts {
                            Some(d) if class_index < DICT_CLASSES => {
                                if !sniff_incompressible(value) {
                                    trainer.sample(class_index, value, d);
                                }
                                d.for_len(len)
                            }
                            _ => None,
                        };
                        match packer.pack_with(value, dict) {
                            Packed::Frame(frame) => {
                                if let Some(d) = dict {
                                    entry.codec = d.codec();
                                    trainer.packed_with_dict(class_index, len, frame.len());
                                }
                                entry.how = How::Packed;
                                entry.frame_at = frames.len() as u32;
                                entry.frame_len = frame.len() as u32;
                                frames.extend_from_slice(frame);
                                class.record(false);
                                p.tried_raw += len;
                                p.tried_packed += frame.len();
                            }
                            Packed::Rejected => {
                                entry.how = How::RawTried;
                                class.record(true);
                                p.rejected += 1;
                                p.tried_raw += len;
                                p.tried_packed += len;
                            }
                            Packed::Sniffed => {
                                entry.how = How::RawTried;
                                p.skipped += 1;
                            }
                            Packed::Small => {}
                        }
                    }
                }
                let copy = match entry.how {
                    How::Same => CopyAs::Same,
                    How::Packed => CopyAs::Packed(
                        &frames[entry.frame_at as usize..][..entry.frame_len as usize],
                        entry.codec,
                    ),
                    How::RawTried => CopyAs::RawTried,
                };
                p.need += self.copy_spec(Location { seg, offset }, it, copy).size();
                plan.push(entry);
            }
            offset += size;
            if background && since_yield >= YIELD_BYTES {
                since_yield = 0;
                std::thread::yield_now();
            }
        }
        p
    }
}
