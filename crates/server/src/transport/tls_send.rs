//! Sending a session's output over TLS: the output queue (buffer bytes
//! and values in item memory, see `compose::output`) fed to a
//! [`TlsStream`]'s rustls session piece by piece, at most `ssl_wbuf_size`
//! bytes a call, so a large value goes from item memory straight into
//! records, copied once, by the encryption. Kept apart from the record
//! layer (`tls`), which knows nothing of the output (and is what the
//! `tls_records` fuzz target compiles).

use std::io::{self, IoSlice, Write};

use crate::compose::output::{Output, GATHER_PIECES};
use crate::stats::counters::ThreadStats;
use crate::transport::tls::TlsStream;

impl TlsStream {
    /// Feeds `out`'s queue (what is to leave now, `Output::sendable`) to
    /// rustls and sends the records while the socket takes them; reports
    /// what rustls took to `out` (which keeps the rest). Ok(true) when all
    /// of it left, records included.
    pub(crate) fn send(&mut self, out: &mut Output, stats: &ThreadStats) -> io::Result<bool> {
        let total = out.sendable();
        let chunk = self.events.ctx.wbuf_size().max(1);
        let mut done = 0;
        let mut iov = [IoSlice::new(&[]); GATHER_PIECES];
        // Records a full socket kept back go first.
        let result = match self.send_records() {
            Ok(true) => loop {
                if done == total {
                    break self.send_records();
                }
                let (count, offered) = out.pieces(done, chunk.min(total - done), &mut iov);
                let n = match self.conn_mut().writer().write_vectored(&iov[..count]) {
                    Ok(n) => n,
                    Err(e) => break Err(e),
                };
                done += n;
                if n < offered {
                    // rustls holds all the records it may: they leave
                    // before it takes more. Taking nothing while it held
                    // none, it waits for the handshake to finish.
                    match self.send_records() {
                        Ok(true) if n > 0 => {}
                        Ok(true) => break Ok(false),
                        other => break other,
                    }
                }
            },
            other => other,
        };
        stats.bytes_written.add(done as u64);
        out.sent_queue(done);
        result
    }
}
