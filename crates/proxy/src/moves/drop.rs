//! How a move drops the old copies on an old owner.
//!
//! A plain `md` is a client write, and a server that replicates
//! (`--replicate-to`) passes it on to its ring successor, which is often
//! the key's new owner: the copy the move just put there would be deleted
//! with it. So the way is chosen per old owner, once, from its
//! `stats settings`:
//!
//! ```text
//!   no replicate_to line (memcached, osmium without --replicate-to) ──▶ Plain: md k C<cas> q
//!   replicate_to, pool has replication_secret: ──▶ Peer: md k C<cas> q on a replication
//!       peer connection (the server applies its writes without passing them on)
//!   replicate_to, no secret (or a unix socket) ──▶ Keep: the old copies stay until
//!       they expire or are evicted; one WARN line says so
//! ```
//!
//! What `Keep` costs: the old owner's copies take memory until they go,
//! and a key deleted after its move and later moved back to that server
//! can be found there again. A later move that meets such a copy on a
//! new owner replaces it (`migrate`'s cas-checked set), so a stale copy
//! is never kept over a moved value.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use osmium_protocol::replication_link::Secret;

use crate::config::Addr;
use crate::peer::{self, PeerConn};

/// How long the peer connection waits to connect and for each answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// How one old owner's copies are dropped.
pub enum DropVia {
    /// `md` on the migration's own connection.
    Plain,
    /// `md` on a replication peer connection (not replicated).
    Peer(PeerConn),
    /// Not dropped.
    Keep,
}

/// Whether a `stats settings` reply names replication targets.
pub fn replicates(settings: &[u8]) -> bool {
    settings.split(|&b| b == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.strip_prefix(b"STAT replicate_to ")
            .is_some_and(|v| !v.is_empty() && v != b"-")
    })
}

/// Whether a `stats` reply shows the server in replication (replicating,
/// or holding a secret that lets it take replication links): a copy on it
/// that is not its own may be a replica.
pub fn takes_replication_links(stats: &[u8]) -> bool {
    stats
        .split(|&b| b == b'\n')
        .any(|line| line.starts_with(b"STAT replica"))
}

/// The way for an old owner that replicates: a peer connection when the
/// pool has the secret, else `Keep` (with one WARN line).
pub fn for_replicating(
    addr: &Addr,
    secret: Option<&Arc<Secret>>,
    pool: &str,
    server: &str,
) -> DropVia {
    let keep = |why: &str| {
        tracing::warn!(
            "pool {pool}: server {server} replicates (--replicate-to): {why}; its old copies \
             of moved keys are left to expire (a plain delete would be replicated to the \
             keys' new owners)"
        );
        DropVia::Keep
    };
    let Some(secret) = secret else {
        return keep("the pool has no replication_secret:");
    };
    let Addr::Tcp { host, port } = addr else {
        return keep("a unix socket server gets no peer connection");
    };
    match peer::connect_peer(&format!("{host}:{port}"), secret, PEER_TIMEOUT) {
        Ok(c) => DropVia::Peer(c),
        Err(e) => keep(&format!("no peer connection ({e})")),
    }
}

/// Sends a batch of quiet deletes ended by `mn` on a peer connection and
/// reads up to its `MN`.
pub fn send_batch(c: &mut PeerConn, batch: &[u8]) -> io::Result<()> {
    c.send(batch)?;
    loop {
        if c.read_line_bytes()?.starts_with(b"MN") {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_replication_targets_from_settings() {
        assert!(replicates(
            b"STAT maxbytes 1\r\nSTAT replicate_to 127.0.0.1:1\r\nEND\r\n"
        ));
        assert!(!replicates(b"STAT maxbytes 1\r\nEND\r\n"));
        assert!(!replicates(b"STAT replicate_to \r\nEND\r\n"));
        assert!(takes_replication_links(
            b"STAT pid 1\r\nSTAT replica_auth_failures 0\r\nEND\r\n"
        ));
        assert!(takes_replication_links(b"STAT replication_mode async\r\n"));
        assert!(!takes_replication_links(b"STAT pid 1\r\nEND\r\n"));
    }
}
