//! flush_all: invalidating every item stored up to memcached's
//! `oldest_live` second, now or after a delay (a delayed flush runs when
//! the first command or maintenance step after its time checks for it).
//!
//! Every flush that runs has a number, recorded in each segment it covers
//! (`Segment::flush_epoch`); a memory file records the delayed ones with
//! their numbers before flush_all is answered, so a restart applies a
//! delayed flush whose time came exactly where it had not run yet, and
//! never again where it had (items written after it stay).

use std::sync::atomic::Ordering;

use crate::store::Store;

impl Store {
    /// Runs a delayed flush_all whose time has come. Called at the start of
    /// every command (before anything is written) and by the maintainer.
    #[inline]
    pub(crate) fn flush_due(&self, now: u32) {
        for (at, epoch) in self.flush_at.iter().zip(&self.flush_epochs) {
            let t = at.load(Ordering::Relaxed);
            if t != 0
                && t <= now
                && at
                    .compare_exchange(t, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                self.arena.flush(epoch.load(Ordering::Acquire));
                if let Some(flash) = &self.flash {
                    flash.flush_all();
                }
            }
        }
    }

    /// `flush_all [delay]`, as memcached's process_flush_all_command.
    pub fn flush_all(&self, delay: i32) {
        self.flush_all_after(i64::from(delay))
    }

    /// flush_all with a delay of any width (the binary protocol's is an
    /// unsigned 32-bit number): > 0 is a delay or a unix time, else now.
    ///
    /// memcached invalidates items whose time is at or before its
    /// `oldest_live` (the deadline minus one with CAS on, the deadline with
    /// -C) from that second on. Here the arena marks every item written so
    /// far as flushed (see `Arena::flush`) at the start of that second and
    /// once more at the start of the next, which covers the items stored
    /// during it.
    pub fn flush_all_after(&self, delay: i64) {
        let now = self.clock.now();
        let new_oldest = if delay > 0 {
            self.clock.realtime(delay)
        } else {
            now
        };
        let oldest_live = if self.cfg.use_cas {
            new_oldest.wrapping_sub(1)
        } else {
            new_oldest
        };
        // memcached: an oldest_live of 0 (a unix time before the process
        // started) flushes nothing.
        let (first, second) = if oldest_live == 0 {
            (0, 0)
        } else if oldest_live > now {
            (oldest_live, oldest_live + 1)
        } else {
            self.arena.flush(self.next_flush_epoch());
            if let Some(flash) = &self.flash {
                flash.flush_all();
            }
            (0, if oldest_live == now { now + 1 } else { 0 })
        };
        let flushes =
            [first, second].map(|t| (t, if t == 0 { 0 } else { self.next_flush_epoch() }));
        for (i, (t, e)) in flushes.into_iter().enumerate() {
            self.flush_epochs[i].store(e, Ordering::Release);
            self.flush_at[i].store(t, Ordering::Release);
        }
        if let Some(h) = self.memfile_header() {
            h.note_flushes(flushes);
        }
    }

    /// A new flush_all number.
    fn next_flush_epoch(&self) -> u32 {
        self.flush_count.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Resumes the delayed flushes a memory file recorded: one whose time
    /// came runs now, in the segments it did not cover before the stop
    /// (its number tells which); the others stay pending.
    pub(crate) fn resume_flushes(&self, flushes: [(u32, u32); 2]) {
        let numbers = flushes.iter().map(|&(_, e)| e).max().unwrap_or(0);
        self.flush_count
            .store(numbers.max(self.arena.flush_epoch()), Ordering::Release);
        let now = self.clock.now();
        for (i, (t, e)) in flushes.into_iter().enumerate() {
            if t != 0 && t <= now {
                self.arena.flush(e);
            } else if t != 0 {
                self.flush_epochs[i].store(e, Ordering::Release);
                self.flush_at[i].store(t, Ordering::Release);
            }
        }
    }
}
