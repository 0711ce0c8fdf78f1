//! A worker's connections at a binary upgrade's stop (`Started::quiesce`
//! with connections carried): each stopped between two requests (a
//! worker sees the stop only between two turns of its loop), sends what
//! output the socket takes at once, and is handed over as a `ConnRec`
//! (its fd, no longer close-on-exec once the state is written, its
//! unsent output and unrun input, its session's state: `session`'s
//! `carried`); the image that starts deals them to its workers, which
//! run their buffered input first (`Worker::accept_new`).
//!
//! A connection whose request waits for flash reads is finished first
//! (`finish_flash_reads`): the worker waits for those reads' completions
//! and runs that one request again, its replies composed (it then reads
//! nothing more from its socket and runs no further request: see
//! `WorkerCtx::finishing`), so that it too stands between two requests;
//! a request that needs more reads waits for those too. A connection
//! whose reads are not in after `FLASH_FINISH` is closed.
//!
//! Closed as a stop closes them, not carried: TLS connections (rustls's
//! state cannot be written down), Noise links and replication peers, a
//! connection whose flash reads did not finish in time or waiting for
//! sync replication's acknowledgements, one whose peer has closed, and
//! the sessions `Session::carry` refuses (a large value being read into
//! its item, a streaming multi-get or dump, buffers over `CARRY_LIMIT`).

use std::io;
use std::os::fd::IntoRawFd;
use std::time::{Duration, Instant};

use mio::Events;
use osmium_upgrade::ConnRec;

use super::{Conn, Stream, Worker};
use crate::replication::PEER_NONE;

/// How long an upgrade's stop waits for a worker's flash reads.
const FLASH_FINISH: Duration = Duration::from_secs(1);

impl Worker {
    /// At an upgrade's stop: finishes the requests waiting for flash
    /// reads (module comment), for at most `FLASH_FINISH`.
    pub(super) fn finish_flash_reads(&mut self) {
        if self.flash.is_none() || !self.awaits_flash() {
            return;
        }
        let began = Instant::now();
        let deadline = began + FLASH_FINISH;
        let waiting = self
            .conns
            .iter()
            .filter(|(_, c)| c.awaiting_flash > 0)
            .count();
        // Connections that yielded stand between two requests: they are
        // carried as they are.
        self.ready.clear();
        self.ctx.finishing.set(true);
        let mut events = Events::with_capacity(64);
        loop {
            // Also reaps completions whose wake-up came with the stop
            // (the last turn returned before handling it).
            self.flash_done();
            let ready: Vec<usize> = self.ready.drain(..).collect();
            for key in ready {
                self.run_conn(key);
            }
            // Each ran its request (or found its records without a read:
            // nothing consumed, it runs in the next image).
            self.ready.clear();
            if !self.awaits_flash() {
                break;
            }
            if let Some(io) = &mut self.flash {
                io.submit();
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match self.poll.poll(&mut events, Some(deadline - now)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!("upgrade: worker poll failed: {e}");
                    break;
                }
            }
        }
        self.ctx.finishing.set(false);
        let late = self
            .conns
            .iter()
            .filter(|(_, c)| c.awaiting_flash > 0)
            .count();
        tracing::warn!(
            "upgrade: {} connections' requests waiting for flash reads finished in {:.1} ms",
            waiting.saturating_sub(late),
            began.elapsed().as_secs_f64() * 1000.0
        );
        if late > 0 {
            tracing::warn!(
                "upgrade: {late} connections closed: their flash reads did not finish in {} ms",
                FLASH_FINISH.as_millis()
            );
        }
    }

    /// Whether a connection waits for flash reads.
    fn awaits_flash(&self) -> bool {
        self.conns.iter().any(|(_, c)| c.awaiting_flash > 0)
    }

    /// Hands over every connection that can be carried; closes the others.
    pub(super) fn carry_conns(&mut self) -> Vec<ConnRec> {
        let keys: Vec<usize> = self.conns.iter().map(|(key, _)| key).collect();
        let mut carried = Vec::with_capacity(keys.len());
        for key in keys {
            match self.carry(key) {
                Some(rec) => carried.push(rec),
                None => self.close(key),
            }
        }
        carried
    }

    /// Connection `key` as a record, taken out of the worker (its fd
    /// forgotten, not closed); None leaves it for `close`.
    fn carry(&mut self, key: usize) -> Option<ConnRec> {
        let ctx = &self.ctx;
        let conn = self.conns.get_mut(key)?;
        if !carriable(conn) {
            return None;
        }
        // What the socket takes now leaves now; a socket that fails is
        // closed.
        conn.flush(ctx).ok()?;
        let mut rec = conn.session.carry()?;
        rec.unix = matches!(conn.stream, Stream::Unix(_));
        rec.peer = ctx.shared.conns.remote(conn.fd);
        rec.last_active = conn.last_active;
        let mut conn = self.conns.try_remove(key)?;
        let queued = conn.session.output().footprint();
        self.ctx.output_changed(queued, 0);
        conn.session.close(&self.ctx);
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.ctx.shared.conns.remove(conn.fd);
        rec.fd = match conn.stream {
            Stream::Tcp(tcp) => tcp.into_raw_fd(),
            Stream::Unix(unix) => unix.into_raw_fd(),
            _ => unreachable!("checked by carriable"),
        };
        Some(rec)
    }
}

/// Whether a connection is one that can be carried (module comment).
fn carriable(conn: &Conn) -> bool {
    matches!(conn.stream, Stream::Tcp(_) | Stream::Unix(_))
        && conn.peer == PEER_NONE
        && conn.copy == 0
        && !conn.repl_held
        && conn.awaiting_flash == 0
        && !conn.hangup
}
