//! flush_all: invalidating every item stored up to memcached's
//! `oldest_live` second, now or after a delay (a delayed flush runs when
//! the first command or maintenance step after its time checks for it).

use std::sync::atomic::Ordering;

use crate::store::Store;

impl Store {
    /// Runs a delayed flush_all whose time has come. Called at the start of
    /// every command (before anything is written) and by the maintainer.
    #[inline]
    pub(crate) fn flush_due(&self, now: u32) {
        for at in &self.flush_at {
            let t = at.load(Ordering::Relaxed);
            if t != 0
                && t <= now
                && at
                    .compare_exchange(t, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                self.arena.flush();
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
            self.arena.flush();
            (0, if oldest_live == now { now + 1 } else { 0 })
        };
        self.flush_at[0].store(first, Ordering::Relaxed);
        self.flush_at[1].store(second, Ordering::Relaxed);
    }
}
