//! The tier's flusher thread: writes the write buffers queued full to
//! their pages, packs the staged records and appends them (`stage`), and
//! reclaims the oldest page when the tier is full, rewriting its live
//! records that were read since written (the rest of the page's items
//! leave the tier). Its order: writes first, then (stopping) every staged
//! record, then reclaims while pages are low, then staged buffers that are
//! full (oldest first).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;

impl Flash {
    pub(super) fn flusher_loop(self: Arc<Self>) {
        let mut packing = self.cfg.pack_level.map(stage::Packing::new);
        loop {
            let job = {
                let mut log = self.log.lock();
                loop {
                    if let Some(&b) = log.queued.front() {
                        break Job::Write(b);
                    }
                    if log.stop {
                        // Every staged record to flash first.
                        let mut st = self.stage.lock();
                        st.seal();
                        if let Some(b) = st.next_full() {
                            break Job::Drain(b);
                        }
                        drop(st);
                        self.queue_filling(&mut log);
                        if let Some(&b) = log.queued.front() {
                            break Job::Write(b);
                        }
                        return;
                    }
                    if self.is_on() && log.free.len() < self.cfg.free_pages_min {
                        if let Some(at) = self.most_fragmented(&log) {
                            let p = log.fifo.remove(at).expect("a fifo position");
                            break Job::Reclaim(p, log.pages[p], true);
                        }
                        if let Some(p) = log.fifo.pop_front() {
                            break Job::Reclaim(p, log.pages[p], false);
                        }
                    }
                    if let Some(b) = self.stage.lock().next_full() {
                        break Job::Drain(b);
                    }
                    let idle = self.work.wait_for(&mut log, stage::IDLE_SEAL).timed_out();
                    if idle {
                        // Staged records do not wait for more.
                        let mut st = self.stage.lock();
                        if st.filling_has_records() && !st.has_full() {
                            st.seal();
                        }
                    }
                }
            };
            match job {
                Job::Write(b) => self.write_buffer(b),
                Job::Reclaim(p, page, compact) => self.reclaim(p, page, compact),
                Job::Drain(b) => match packing.as_mut() {
                    Some(packing) => self.drain_stage(b, packing),
                    None => unreachable!("nothing is staged without packing"),
                },
            }
        }
    }

    /// The FIFO position of the sealed page with the fewest live bytes,
    /// if they fill less than `max_frag` of it (a page wholly below the
    /// last flush_all holds none). memcached's extstore picks its page to
    /// compact the same way.
    fn most_fragmented(&self, log: &Log) -> Option<usize> {
        let page_size = self.cfg.page_size;
        let limit = page_size / 100 * self.cfg.max_frag_percent as usize;
        let mut best: Option<(usize, usize)> = None;
        for (at, &p) in log.fifo.iter().enumerate() {
            let page = &log.pages[p];
            let end = page.seq * page_size as u64 + page.used as u64;
            let live = if end <= log.flushed_below {
                0
            } else {
                self.live_part(p, page)
            };
            if live < limit && best.is_none_or(|(_, l)| live < l) {
                best = Some((at, live));
            }
        }
        best.map(|(at, _)| at)
    }

    /// Writes the buffers queued now (the reclaimer calls it between
    /// chunks, so writers do not wait for a whole page's reclaim); false if
    /// there were none.
    pub(super) fn write_queued(&self) -> bool {
        let mut wrote = false;
        loop {
            let next = self.log.lock().queued.front().copied();
            let Some(b) = next else {
                return wrote;
            };
            self.write_buffer(b);
            wrote = true;
        }
    }

    fn write_buffer(&self, b: Buffer) {
        let len = b.len.next_multiple_of(BLOCK);
        let result = if self.is_on() {
            // SAFETY: a queued buffer is not written by anyone.
            let data = unsafe { self.wbuf(b.slot) };
            self.device.write(b.page, b.offset, &data[..len])
        } else {
            Ok(())
        };
        match &result {
            Err(e) => self.fail("writing a flash file", e),
            Ok(()) => {
                self.stats
                    .bytes_written
                    .fetch_add(len as u64, Ordering::Relaxed);
            }
        }
        if self.events.wanted(crate::events::FLASH_WRITES) {
            let w = crate::events::FlashWritten {
                page: b.page,
                offset: b.offset,
                bytes: len,
                failed: result.is_err(),
            };
            self.events.emit(&crate::events::Event::FlashWritten(w));
        }
        let mut log = self.log.lock();
        let queued = log.queued.pop_front().expect("the buffer written");
        debug_assert_eq!(queued.slot, b.slot);
        let page = &mut log.pages[b.page];
        page.written = page.written.max(b.offset + b.len);
        // Only once the records are on flash does a restart count them.
        if result.is_ok() {
            self.persist_page(&log, b.page);
        }
        self.note_wbuf(b.slot, WBUF_FREE, 0, 0, 0);
        log.spare.push(b.slot);
        drop(log);
        self.room.notify_all();
    }

    /// Empties page `p` (taken off the FIFO): rewrites its live records
    /// that were read since they were written (every live record with
    /// `compact`), drops the others, frees it.
    fn reclaim(&self, p: usize, page: Page, compact: bool) {
        let page_pos = page.seq * self.cfg.page_size as u64;
        let mut chunk = AlignedBuf::new(self.cfg.wbuf_size);
        let end = page.written.min(page.used);
        let mut pos = 0;
        while self.is_on() && pos < end {
            self.write_queued();
            let start = pos - pos % BLOCK;
            let len = chunk.len().min(self.cfg.page_size - start);
            if let Err(e) = self.device.read(p, start, &mut chunk[..len]) {
                self.fail("reading a flash file", &e);
                break;
            }
            self.stats
                .bytes_read
                .fetch_add(len as u64, Ordering::Relaxed);
            // The records wholly inside this chunk; the next chunk starts at
            // the first that is not.
            let page_base = p * self.cfg.page_size + start;
            let at = record::scan(&chunk, len, start, pos - start, end, BLOCK, |at, item| {
                let addr = ((page_base + at) / record::ALIGN) as u64 + 1;
                self.reclaim_record(
                    item,
                    addr,
                    compact,
                    page_pos + (start + at) as u64,
                    page.oldest_atime,
                );
            });
            pos = (start + at).max(pos + 1);
        }
        let mut log = self.log.lock();
        log.pages[p] = Page {
            state: PageState::Free,
            seq: 0,
            used: 0,
            written: 0,
            class_bytes: 0,
            oldest_atime: NO_ATIME,
        };
        self.persist_page(&log, p);
        log.free.push(p);
        drop(log);
        if compact {
            self.stats.pages_compacted.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.page_reclaims.fetch_add(1, Ordering::Relaxed);
        }
        self.room.notify_all();
    }

    /// One record of a page being emptied, at log position `origin`.
    /// `oldest_atime` is its page's (a rewrite carries it to the head).
    fn reclaim_record(
        &self,
        item: &[u8],
        addr: u64,
        compact: bool,
        origin: u64,
        oldest_atime: u32,
    ) {
        // SAFETY: a verified record's item bytes are a whole item.
        let it = unsafe { ItemPtr::from_raw(item.as_ptr() as *mut u8) };
        let key = it.key();
        let hash = hash_key(key);
        let Some(e) = self.index.get(hash) else {
            return;
        };
        if e.addr != addr {
            return; // superseded or removed
        }
        // A record below the last flush_all is gone: rewritten, it would
        // come back. (`append` checks it again under the log's lock, so a
        // flush_all that comes while the page is emptied is not missed.)
        let flushed = || origin < self.log.lock().flushed_below;
        if (e.hot || compact) && !flushed() {
            // Rewritten at the head; when the buffers are full, the
            // reclaimer (the flusher) writes them first.
            for _ in 0..3 {
                let spec = it.spec();
                let atime = (oldest_atime != NO_ATIME).then_some(oldest_atime);
                let copy = self.append(
                    &spec,
                    key,
                    it.stored_value(),
                    it.state(),
                    false,
                    Origin::Log(origin),
                    atime,
                );
                if let Some(to) = copy {
                    // A compaction keeps what the entry knew (read since
                    // written); a reclaim's rescue starts it over.
                    let to = index::Entry {
                        hot: compact && e.hot,
                        ..to
                    };
                    if self.index.relocate(hash, addr, to) {
                        let kept = if compact {
                            &self.stats.compact_kept
                        } else {
                            &self.stats.compact_rescues
                        };
                        kept.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
                if flushed() || !self.write_queued() {
                    break;
                }
            }
            if !flushed() {
                self.stats.compact_lost.fetch_add(1, Ordering::Relaxed);
            }
        }
        if self.index.remove_at(hash, addr) {
            self.stats.objects_evicted.fetch_add(1, Ordering::Relaxed);
            self.stats
                .bytes_evicted
                .fetch_add(record::record_size(item.len()) as u64, Ordering::Relaxed);
        }
    }
}

enum Job {
    Write(Buffer),
    /// Pack a staging buffer's records and append them (see `stage`).
    Drain(usize),
    /// Empty a page: compact it (true) or reclaim it (false).
    Reclaim(usize, Page, bool),
}
