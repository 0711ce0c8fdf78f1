//! The dispatcher thread (`osmium-logger`): moves the producers' lines to
//! the watchers and writes the watchers' sockets, as memcached's logger
//! thread does.
//!
//! Each round it swaps every producer buffer with an empty one of the same
//! capacity (a producer waits for that swap at most), copies each line
//! into the buffer of every watcher that asked for its stream and was
//! added before it (its gid), and writes what each watcher's socket takes
//! without blocking. A watcher's buffer is bounded ([`WATCHER_BUF`]): a
//! line it has no room for, even after a write, is skipped and counted,
//! and the next line that fits goes out after `skipped=N\n`. A watcher is
//! closed when its peer closes or a write fails. Rounds come every
//! millisecond while there are lines, slowing to 50 ms when there are
//! none; with no watcher the thread sleeps until one comes.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::{lock, LogBuf, NewWatcher, HEADER, WATCHER_BUF};
use crate::context::Shared;
use crate::transport::stream::Stream;

const MIN_SLEEP: Duration = Duration::from_millis(1);
const MAX_SLEEP: Duration = Duration::from_millis(50);
/// Room kept for a `skipped=N\n` line.
const SKIP_ROOM: usize = 128;

struct Watcher {
    stream: Stream,
    fd: i32,
    flags: u16,
    min_gid: u64,
    /// Bytes to send, from `sent` on.
    buf: Vec<u8>,
    sent: usize,
    skipped: u64,
    /// This round's write left no room: skip without trying again.
    failed_flush: bool,
    closed: bool,
}

impl Watcher {
    fn pending(&self) -> usize {
        self.buf.len() - self.sent
    }

    fn has_room(&self, len: usize) -> bool {
        self.pending() + len + SKIP_ROOM <= WATCHER_BUF
    }

    /// Writes what the socket takes. Errors close the watcher.
    fn flush(&mut self) {
        while self.pending() > 0 && !self.closed {
            let data = &self.buf[self.sent..];
            let r = match &mut self.stream {
                Stream::Tcp(s) => s.write(data),
                Stream::Unix(s) => s.write(data),
                Stream::Tls(s) => s.write_plain(data),
                Stream::Noise(s) => s.write_plain(data),
            };
            match r {
                Ok(0) => self.closed = true,
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => self.closed = true,
            }
        }
        if self.sent == self.buf.len() {
            self.buf.clear();
            self.sent = 0;
        } else if self.sent > WATCHER_BUF / 2 {
            self.buf.drain(..self.sent);
            self.sent = 0;
        }
    }

    /// Reads and drops what the peer sent (memcached ignores a watcher's
    /// input); notices that it closed.
    fn check_input(&mut self) {
        let mut scratch = [0u8; 512];
        loop {
            match self.stream.read(&mut scratch) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }

    /// memcached's `logger_thread_write_entry` for one watcher.
    fn offer(&mut self, line: &[u8], skipped_total: &mut u64, sent_total: &mut u64) {
        if !self.failed_flush && !self.has_room(line.len()) {
            self.flush();
            if !self.has_room(line.len()) {
                self.failed_flush = true;
            }
        }
        if self.failed_flush || self.closed {
            self.skipped += 1;
            *skipped_total += 1;
            return;
        }
        if self.sent > 0 && self.buf.len() + line.len() + SKIP_ROOM > self.buf.capacity() {
            // Room at the front: the buffer never grows past its size.
            self.buf.drain(..self.sent);
            self.sent = 0;
        }
        if self.skipped > 0 {
            let _ = writeln!(self.buf, "skipped={}", self.skipped);
            self.skipped = 0;
        }
        self.buf.extend_from_slice(line);
        *sent_total += 1;
    }
}

/// Starts the dispatcher; it ends after [`Logger::stop`](super::Logger::stop).
pub(crate) fn spawn(shared: Arc<Shared>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("osmium-logger".into())
        .spawn(move || run(&shared))
}

fn run(shared: &Shared) {
    let logger = &shared.logger;
    let mut watchers: Vec<Watcher> = Vec::new();
    let mut spare = Vec::new();
    let mut sleep = MIN_SLEEP;
    loop {
        let last_round = logger.stopping.load(Relaxed);
        if !last_round {
            let mut incoming = lock(&logger.incoming);
            // `stop` sets `stopping` before it takes this lock to notify:
            // read under the lock, the flag cannot be missed.
            if watchers.is_empty() && incoming.is_empty() && !logger.stopping.load(Relaxed) {
                // Nothing to send until a watcher comes (which notifies);
                // the timeout is a fallback, long so an idle server sleeps.
                let (g, _) = logger
                    .wake
                    .wait_timeout(incoming, Duration::from_secs(1))
                    .unwrap_or_else(|e| e.into_inner());
                incoming = g;
            } else if incoming.is_empty() {
                let (g, _) = logger
                    .wake
                    .wait_timeout(incoming, sleep)
                    .unwrap_or_else(|e| e.into_inner());
                incoming = g;
            }
            for w in incoming.drain(..) {
                watchers.push(take(w));
            }
        }
        let mut lines = 0;
        let (mut skipped, mut sent) = (0, 0);
        for w in &mut watchers {
            w.failed_flush = false;
        }
        for buf in logger.bufs.iter() {
            let (written, dropped) = {
                let mut b = lock(buf);
                if b.data.is_empty() && b.dropped == 0 {
                    continue;
                }
                if spare.capacity() < b.data.capacity() {
                    spare.reserve_exact(b.data.capacity());
                }
                std::mem::swap(&mut b.data, &mut spare);
                b.woke = false;
                let LogBuf {
                    written, dropped, ..
                } = &mut *b;
                (std::mem::take(written), std::mem::take(dropped))
            };
            let st = &logger.stats;
            st.worker_written.fetch_add(written, Relaxed);
            st.worker_dropped.fetch_add(dropped, Relaxed);
            lines += written;
            let mut at = 0;
            while at + HEADER <= spare.len() {
                let flags = u16::from_le_bytes([spare[at], spare[at + 1]]);
                let mut gid = [0u8; 8];
                gid.copy_from_slice(&spare[at + 2..at + 10]);
                let gid = u64::from_le_bytes(gid);
                let len = usize::from(u16::from_le_bytes([spare[at + 10], spare[at + 11]]));
                let line = &spare[at + HEADER..(at + HEADER + len).min(spare.len())];
                for w in &mut watchers {
                    if w.flags & flags != 0 && gid >= w.min_gid && !w.closed {
                        w.offer(line, &mut skipped, &mut sent);
                    }
                }
                at += HEADER + len;
            }
            spare.clear();
        }
        let st = &logger.stats;
        st.watcher_skipped.fetch_add(skipped, Relaxed);
        st.watcher_sent.fetch_add(sent, Relaxed);
        for w in &mut watchers {
            w.check_input();
            w.flush();
        }
        if watchers.iter().any(|w| w.closed) {
            watchers.retain_mut(|w| {
                if w.closed {
                    close(shared, w);
                }
                !w.closed
            });
            // The streams still watched; a watcher added meanwhile put
            // its own in already.
            let _guard = lock(&logger.incoming);
            let mut mask = watchers.iter().fold(0, |m, w| m | w.flags);
            for w in _guard.iter() {
                mask |= w.flags;
            }
            logger.set_mask(mask);
        }
        if last_round {
            return;
        }
        sleep = if lines > 0 {
            MIN_SLEEP
        } else {
            (sleep + sleep / 8).min(MAX_SLEEP)
        };
    }
}

/// A new watcher: its `OK` first.
fn take(w: NewWatcher) -> Watcher {
    let mut buf = Vec::with_capacity(WATCHER_BUF);
    buf.extend_from_slice(b"OK\r\n");
    Watcher {
        stream: w.stream,
        fd: w.fd,
        flags: w.flags,
        min_gid: w.min_gid,
        buf,
        sent: 0,
        skipped: 0,
        failed_flush: false,
        closed: false,
    }
}

fn close(shared: &Shared, w: &mut Watcher) {
    w.stream.close();
    shared.conns.remove(w.fd);
    shared.logger.watchers.fetch_sub(1, Relaxed);
    shared.global.curr_connections.fetch_sub(1, Relaxed);
    // The socket closes when the watcher is dropped.
}
