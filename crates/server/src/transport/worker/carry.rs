//! A worker's connections at a binary upgrade's stop (`Started::quiesce`
//! with connections carried): each stopped between two requests (a
//! worker sees the stop only between two turns of its loop), sends what
//! output the socket takes at once, and is handed over as a `ConnRec`
//! (its fd, no longer close-on-exec once the state is written, its
//! unsent output and unrun input, its session's state: `session`'s
//! `carried`); the image that starts deals them to its workers, which
//! run their buffered input first (`Worker::accept_new`).
//!
//! Closed as a stop closes them, not carried: TLS connections (rustls's
//! state cannot be written down), Noise links and replication peers, a
//! connection waiting for flash reads or for sync replication's
//! acknowledgements, one whose peer has closed, and the sessions
//! `Session::carry` refuses (a large value being read into its item, a
//! streaming multi-get or dump, buffers over `CARRY_LIMIT`).

use std::os::fd::IntoRawFd;

use osmium_upgrade::ConnRec;

use super::{Conn, Stream, Worker};
use crate::replication::PEER_NONE;

impl Worker {
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
