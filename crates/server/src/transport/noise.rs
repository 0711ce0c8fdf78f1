//! A replication link on plain TCP after its handshake, in a worker:
//! every byte both ways is a Noise transport frame
//! (`osmium_protocol::replication_link::frame`) over the non-blocking
//! socket. The listener's end of a link (after `replica_hello`) and this
//! server's own follow link (handed over by its pull, with what it had
//! already received) are such streams.
//!
//! ```text
//!   socket ─read─▶ Inbound (frames opened in order; one that fails ends the link) ─▶ session
//!   socket ◀─write─ Outbound (sealed frames not yet taken) ◀─seal─ output queue pieces
//! ```
//!
//! As for TLS, the worker's epoll is edge-triggered: a read reports
//! `WouldBlock` only when no whole frame waits and the socket is empty;
//! sealed frames the socket did not take count as unsent output, so the
//! connection waits for a writable event until they are out. The output
//! queue (buffer bytes and values in item memory) is gathered up to one
//! frame's plaintext (`SEAL_PLAINTEXT`, 16 KiB) at a time into a scratch
//! buffer, sealed, and sent; at most one frame waits for a full socket.
//! A read that found the socket empty (it returned less than it was
//! offered) with no whole frame left to open says the connection is
//! drained (`drained`), as a short read of a plain socket does: the rest
//! of a frame begun comes with the next readable event, so the socket is
//! not asked again before it (`Inbound::read_available`).

use std::io::{self, IoSlice, Read};

use mio::net::TcpStream;
use osmium_protocol::replication_link::{frame_error, Inbound, Outbound, SEAL_PLAINTEXT};

use crate::compose::output::{Output, GATHER_PIECES};
use crate::stats::counters::ThreadStats;

pub(crate) struct NoiseConn {
    pub sock: TcpStream,
    outbound: Outbound,
    inbound: Inbound,
    /// One frame's plaintext, gathered from the output's pieces.
    scratch: Vec<u8>,
    /// A frame failed to open (counted once, by the worker).
    pub failed: bool,
}

impl NoiseConn {
    pub(crate) fn new(sock: TcpStream, outbound: Outbound, inbound: Inbound) -> NoiseConn {
        NoiseConn {
            sock,
            outbound,
            inbound,
            scratch: Vec::new(),
            failed: false,
        }
    }

    /// The socket and both directions, for a feed thread to go on with
    /// (`replica_follow`).
    pub(crate) fn into_parts(self) -> (TcpStream, Outbound, Inbound) {
        (self.sock, self.outbound, self.inbound)
    }

    /// Whether the last read found the socket empty and nothing is left
    /// to open (the worker then waits for the next readable event).
    pub(crate) fn drained(&self) -> bool {
        self.inbound.drained()
    }

    /// Whether the next read returns plaintext without a socket read (a
    /// whole frame of the last socket read is still to be read).
    pub(crate) fn holds_input(&self) -> bool {
        self.inbound.holds_whole_frame()
    }

    /// Sends the sealed frames that wait. Ok(true): none left.
    pub(crate) fn flush_frames(&mut self) -> io::Result<bool> {
        self.outbound.flush_to(&mut self.sock)
    }

    /// Seals `out`'s queue (what is to leave now, `Output::sendable`)
    /// and sends the frames while the socket takes them; reports what
    /// was sealed to `out`. Ok(true) when all of it left.
    pub(crate) fn send(&mut self, out: &mut Output, stats: &ThreadStats) -> io::Result<bool> {
        let total = out.sendable();
        let mut done = 0;
        let mut iov = [IoSlice::new(&[]); GATHER_PIECES];
        let result = loop {
            match self.flush_frames() {
                Ok(true) => {}
                other => break other,
            }
            if done == total {
                break Ok(true);
            }
            let (count, offered) = out.pieces(done, SEAL_PLAINTEXT.min(total - done), &mut iov);
            self.scratch.clear();
            for piece in &iov[..count] {
                self.scratch.extend_from_slice(piece);
            }
            if let Err(e) = self.outbound.seal(&self.scratch) {
                break Err(e);
            }
            done += offered;
        };
        stats.bytes_written.add(done as u64);
        out.sent_queue(done);
        result
    }

    /// Writes bytes outside a session's output queue (a log watcher's
    /// lines): sealed, and sent as far as the socket takes them.
    pub(crate) fn write_plain(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.flush_frames()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.outbound.seal(buf)?;
        self.flush_frames()?;
        Ok(buf.len())
    }

    /// Sends what waits, if the socket takes it now.
    pub(crate) fn close(&mut self) {
        let _ = self.flush_frames();
    }
}

impl Read for NoiseConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Frames a full socket kept back go first (a writable event may
        // have brought the connection here).
        self.flush_frames()?;
        let r = self.inbound.read_available(&mut self.sock, buf);
        if let Err(e) = &r {
            if frame_error(e).is_some() {
                self.failed = true;
            }
        }
        r
    }
}
