//! Which command runs on which kind of connection (`WorkerCtx::peer`).
//! A replication connection carries what its role sends and nothing
//! else: a command outside its column is answered `ERROR` and the
//! connection is closed (a peer that sends what its role does not is
//! broken or not what it claims), before anything of it runs.
//!
//! ```text
//!                                client  target link  proxy peer  follower  own follow link
//!   ms, md, mn                     yes      yes          yes         -          yes
//!   flush_all                      yes      yes           -          -          yes
//!   other reads and writes         yes       -           yes         -           -
//!     (get, mg, set, delete, incr, touch, ...)
//!   replica_hello                  yes       -            -          -           -
//!   replica_link                   (1)      yes          yes         -           -
//!   replica_follow                 (1)       -            -         yes          -
//!   replica_targets                (1)       -           yes         -           -
//!   replica_copy, replica_synced    -       yes           -          -          yes
//!   stats, version, verbosity,     yes       -            -          -           -
//!     shutdown, watch, admin
//!   quit, a line that does not parse   yes everywhere
//! ```
//!
//! - client: a connection that completed no handshake (`PEER_NONE`); the
//!   private commands are then unknown (`ERROR`, the connection kept, as
//!   memcached answers a command it does not know), except (1): without
//!   a secret, under `-Z`, for a client certificate that
//!   `replication_peers` / `replication_ca` names (`replica_link` makes
//!   the connection a target link, `replica_follow` a follower);
//! - target link (`PEER_LINK`): another server's link to this one
//!   (handshake role `target`); its writes are applied, not forwarded;
//! - proxy peer (`PEER_PROXY`): osmium-proxy (role `proxy`): a client
//!   whose writes are not replicated, and who may change the targets;
//! - follower (`PEER_FOLLOWER`): role `follow`, before its
//!   `replica_follow` hands the connection to a feed thread;
//! - own follow link (`PEER_FOLLOW + i`): the connection this server
//!   opened to pull target i's copy, handed to a worker, which applies
//!   what the feed sends (`link`'s feed: `ms`, `md`, `flush_all`, `mn`,
//!   `replica_copy`, `replica_synced`).

use osmium_protocol::request::{Command, Reply};

use super::{PEER_FOLLOW, PEER_FOLLOWER, PEER_LINK, PEER_NONE, PEER_PROXY};

/// Whether a connection of kind `peer` may run `command`.
pub(crate) fn carries(peer: u8, command: &Command<'_>, reply: &Reply<'_>) -> bool {
    let meta = matches!(reply, Reply::Meta(_));
    let private =
        |name: &[u8]| matches!(command, Command::Admin { tokens } if tokens.get(0) == name);
    match command {
        Command::Quit | Command::Close | Command::Error { .. } => return true,
        _ if peer == PEER_NONE => return true,
        _ => {}
    }
    match peer {
        PEER_LINK => {
            link_data(command, meta)
                || matches!(command, Command::FlushAll { .. })
                || private(b"replica_link")
                || private(b"replica_copy")
                || private(b"replica_synced")
        }
        PEER_PROXY => {
            matches!(
                command,
                Command::Get { .. }
                    | Command::Touch { .. }
                    | Command::MetaGet(_)
                    | Command::MetaDebug { .. }
                    | Command::Store(_)
                    | Command::Delete(_)
                    | Command::Arith(_)
                    | Command::Noop
            ) || private(b"replica_link")
                || private(b"replica_targets")
        }
        PEER_FOLLOWER => private(b"replica_follow"),
        p if p >= PEER_FOLLOW => {
            link_data(command, meta)
                || matches!(command, Command::FlushAll { .. })
                || private(b"replica_copy")
                || private(b"replica_synced")
        }
        _ => false,
    }
}

/// What the table calls a connection of kind `peer`.
pub(crate) fn kind_name(peer: u8) -> &'static str {
    match peer {
        PEER_NONE => "client",
        PEER_LINK => "target link",
        PEER_PROXY => "proxy peer",
        PEER_FOLLOWER => "follower",
        _ => "follow link",
    }
}

/// What a link's sender writes: `ms`, `md`, `mn`.
fn link_data(command: &Command<'_>, meta: bool) -> bool {
    match command {
        Command::Store(_) | Command::Delete(_) => meta,
        Command::Noop => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use osmium_protocol::ascii::parse_line;
    use osmium_protocol::request::KeyBuffer;

    fn allowed(peer: u8, line: &str) -> bool {
        let mut keys = KeyBuffer::new();
        let req = parse_line(line.as_bytes(), &mut keys);
        carries(peer, &req.command, &req.reply)
    }

    #[test]
    fn each_kind_carries_its_column() {
        let follow = PEER_FOLLOW + 1;
        for line in [
            "ms k 1 T0 q\r\n",
            "md k q\r\n",
            "mn\r\n",
            "flush_all 0 noreply\r\n",
        ] {
            assert!(allowed(PEER_LINK, line), "{line}");
            assert!(allowed(follow, line), "{line}");
            assert!(!allowed(PEER_FOLLOWER, line), "{line}");
        }
        for line in [
            "replica_synced\r\n",
            "replica_copy on\r\n",
            "replica_copy off\r\n",
        ] {
            assert!(allowed(follow, line), "{line}");
            assert!(allowed(PEER_LINK, line), "{line}");
            assert!(!allowed(PEER_PROXY, line), "{line}");
            assert!(!allowed(PEER_FOLLOWER, line), "{line}");
        }
        for line in [
            "replica_targets 127.0.0.1:1\r\n",
            "replica_follow 5\r\n",
            "shutdown\r\n",
            "verbosity 1\r\n",
            "stats reset\r\n",
            "stats\r\n",
            "watch\r\n",
            "set k 0 0 1\r\n",
            "get k\r\n",
            "delete k\r\n",
            "incr k 1\r\n",
            "lru_crawler metadump all\r\n",
            "cache_memlimit 100\r\n",
            "version\r\n",
        ] {
            assert!(!allowed(follow, line), "{line}");
            assert!(!allowed(PEER_LINK, line), "{line}");
            assert!(allowed(PEER_NONE, line), "{line}");
        }
        assert!(allowed(PEER_FOLLOWER, "replica_follow 5\r\n"));
        assert!(!allowed(PEER_FOLLOWER, "get k\r\n"));
        for line in [
            "replica_targets 127.0.0.1:1\r\n",
            "md k q\r\n",
            "set k 0 0 1\r\n",
            "mg k v\r\n",
        ] {
            assert!(allowed(PEER_PROXY, line), "{line}");
        }
        for line in [
            "shutdown\r\n",
            "flush_all\r\n",
            "replica_follow 1\r\n",
            "watch\r\n",
            "stats\r\n",
        ] {
            assert!(!allowed(PEER_PROXY, line), "{line}");
        }
        for peer in [PEER_NONE, PEER_LINK, PEER_PROXY, PEER_FOLLOWER, follow] {
            assert!(allowed(peer, "quit\r\n"));
            // Answered with the parser's error line, wherever it comes.
            assert!(allowed(peer, "bogus\r\n"));
        }
    }
}
