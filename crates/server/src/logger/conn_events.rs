//! The `connevents` stream's lines, in memcached 1.6.45's formats
//! (`logger.c`): `conn_new`, `conn_close` with why the connection closed,
//! and `conntlserr` for a TLS error.

use std::io::Write;

use super::{Logger, CONNEVENTS};
use crate::conns::Kind;

/// Why a connection closed (memcached's `close_reasons`). As in memcached,
/// a close nothing else names is `error`: a protocol error (an HTTP request
/// line, a text line too long, a bad binary packet, a refused `-Y` login),
/// a read or write that failed, a TLS error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum CloseReason {
    #[default]
    Error,
    /// The client closed its end, or sent `quit` (text or binary).
    Normal,
    /// `-o idle_timeout`.
    IdleTimeout,
    /// The client sent `shutdown`.
    Shutdown,
}

impl CloseReason {
    /// The word memcached logs (`reason_map`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CloseReason::Error => "error",
            CloseReason::Normal => "normal",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

/// `type=conn_new rip=... rport=... transport=... cfd=...`.
pub(crate) fn conn_new(logger: &Logger, slot: usize, kind: Kind, fd: i32) {
    conn_event(logger, slot, "conn_new", kind, None, fd);
}

/// `type=conn_close rip=... rport=... transport=... reason=... cfd=...`.
pub(crate) fn conn_close(logger: &Logger, slot: usize, kind: Kind, reason: CloseReason, fd: i32) {
    conn_event(logger, slot, "conn_close", kind, Some(reason), fd);
}

/// `type=conntlserr fd=... msg=...`: a TLS error ends connection `fd`. The
/// message is the TLS library's, unencoded as memcached writes OpenSSL's
/// (osmium's comes from rustls, so its words differ).
pub(crate) fn tls_error(logger: &Logger, slot: usize, fd: i32, error: &dyn std::fmt::Display) {
    if !logger.watching(CONNEVENTS) {
        return;
    }
    logger.log(slot, CONNEVENTS, |b| {
        let start = b.len();
        let _ = write!(b, "type=conntlserr fd={fd} msg={error}");
        // One line, whatever the message holds.
        for byte in &mut b[start..] {
            if *byte == b'\n' || *byte == b'\r' {
                *byte = b' ';
            }
        }
    });
}

fn conn_event(
    logger: &Logger,
    slot: usize,
    what: &str,
    kind: Kind,
    reason: Option<CloseReason>,
    fd: i32,
) {
    if !logger.watching(CONNEVENTS) {
        return;
    }
    logger.log(slot, CONNEVENTS, |b| {
        let _ = match kind {
            Kind::Tcp {
                remote: Some(addr), ..
            } => write!(
                b,
                "type={what} rip={} rport={} transport=tcp",
                addr.ip(),
                addr.port()
            ),
            Kind::Tcp { remote: None, .. } => write!(b, "type={what} rip= rport=0 transport=tcp"),
            _ => write!(b, "type={what} rip=unix rport=0 transport=local"),
        };
        if let Some(reason) = reason {
            let _ = write!(b, " reason={}", reason.as_str());
        }
        let _ = write!(b, " cfd={fd}");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_memcacheds_words() {
        assert_eq!(CloseReason::default().as_str(), "error");
        assert_eq!(CloseReason::Normal.as_str(), "normal");
        assert_eq!(CloseReason::IdleTimeout.as_str(), "idle_timeout");
        assert_eq!(CloseReason::Shutdown.as_str(), "shutdown");
    }
}
