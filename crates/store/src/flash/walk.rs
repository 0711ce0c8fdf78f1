//! Walking the keys held on flash, for a copy of the whole cache (a
//! replication link's full copy) and the dumps: the staged records (see
//! `stage`) and those still in the filling write buffer go to the flusher
//! first, then every page holding
//! records is read in log order, a chunk at a time, and each record that
//! its key's index entry still points at is reported (older records of a
//! key, and records of deleted or flushed keys, are not).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::*;

/// Where a walk of the tier is (see [`Flash::walk_step`]).
pub struct FlashWalk {
    /// The pages to read, oldest first: (page, its seq when the walk
    /// began, bytes written then).
    pages: Vec<(usize, u64, usize)>,
    next: usize,
    pos: usize,
    chunk: Option<AlignedBuf>,
}

impl std::fmt::Debug for FlashWalk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlashWalk")
            .field("pages", &self.pages.len())
            .field("next", &self.next)
            .field("pos", &self.pos)
            .finish()
    }
}

impl Flash {
    /// Starts a walk: waits until every record appended so far is on
    /// flash (the filling buffer is queued for the flusher), then notes
    /// the pages that hold records.
    pub fn walk(&self) -> FlashWalk {
        let mut log = self.log.lock();
        self.drain_all(&mut log);
        self.queue_filling(&mut log);
        while !log.queued.is_empty() && self.is_on() {
            self.work.notify_one();
            self.room.wait_for(&mut log, Duration::from_millis(50));
        }
        let mut pages: Vec<(usize, u64, usize)> = log
            .pages
            .iter()
            .enumerate()
            .filter(|(_, pg)| pg.state != PageState::Free && pg.written > 0)
            .map(|(p, pg)| (p, pg.seq, pg.written.min(pg.used)))
            .collect();
        pages.sort_by_key(|&(_, seq, _)| seq);
        FlashWalk {
            pages,
            next: 0,
            pos: 0,
            chunk: None,
        }
    }

    /// Reads the next chunk of the walk and calls `f` with the key of each
    /// live record in it; false once the walk is over (or the tier
    /// failed). A page reclaimed since the walk began is skipped: its live
    /// records were rewritten at the head, past the walk's pages, and what
    /// changes from here on reaches a copy by other means (a replication
    /// link streams every key written after its copy began).
    pub fn walk_step(&self, w: &mut FlashWalk, mut f: impl FnMut(&[u8])) -> bool {
        self.walk_records(w, |it| f(it.key()))
    }

    /// [`walk_step`](Self::walk_step), calling `f` with each live record's
    /// item (valid during the call only).
    pub fn walk_records(&self, w: &mut FlashWalk, mut f: impl FnMut(ItemPtr)) -> bool {
        loop {
            if !self.is_on() {
                return false;
            }
            let Some(&(p, seq, end)) = w.pages.get(w.next) else {
                return false;
            };
            let (same, flushed_below) = {
                let log = self.log.lock();
                (
                    log.pages[p].seq == seq && log.pages[p].state != PageState::Free,
                    log.flushed_below,
                )
            };
            let page_logical = seq * self.cfg.page_size as u64;
            if !same || w.pos >= end {
                w.next += 1;
                w.pos = 0;
                continue;
            }
            let chunk = w
                .chunk
                .get_or_insert_with(|| AlignedBuf::new(self.cfg.wbuf_size));
            let start = w.pos - w.pos % BLOCK;
            let len = chunk.len().min(self.cfg.page_size - start);
            if let Err(e) = self.device.read(p, start, &mut chunk[..len]) {
                self.fail("reading a flash file", &e);
                return false;
            }
            self.stats
                .bytes_read
                .fetch_add(len as u64, Ordering::Relaxed);
            let page_base = p * self.cfg.page_size + start;
            let at = record::scan(chunk, len, start, w.pos - start, end, BLOCK, |at, item| {
                let addr = ((page_base + at) / record::ALIGN) as u64 + 1;
                // SAFETY: a verified record's item bytes are a whole item.
                let it = unsafe { ItemPtr::from_raw(item.as_ptr() as *mut u8) };
                let flushed = page_logical + ((start + at) as u64) < flushed_below;
                if !flushed
                    && self
                        .index
                        .get(hash_key(it.key()))
                        .is_some_and(|e| e.addr == addr)
                {
                    f(it);
                }
            });
            w.pos = (start + at).max(w.pos + 1);
            return true;
        }
    }
}
