//! Warm moves: a pool whose ring changes keeps every key served while a
//! background migration (`migrate`) copies the keys whose owner changed
//! to their new owner. The rings, the servers a key may be on and the
//! routing rules are `chain`'s; the settled sets are `settled`'s.
//!
//! **Where a key's latest value is.** When no move runs, every key written
//! through the proxy (and not deleted, expired or evicted) is on its owner
//! in the pool's ring. A move keeps the chain of rings the pool went
//! through since it last stood still, `R_0 … R_m` (`R_m` the ring now),
//! and for each move `j` (`R_j-1 → R_j`) its settled set `S_j`. Servers are
//! told apart by address (a server renamed is the same server; a name
//! given a new address is a new, empty one). With `owner_j(k)` the owner
//! of key `k` in `R_j`:
//!
//! ```text
//!   src_0(k) = owner_0(k)
//!   src_j(k) = owner_j(k)   if k ∈ S_j
//!            = src_j-1(k)   otherwise
//!
//!   invariant: k's latest value (or its deletion) is on
//!              owner_m(k)     if k ∈ S_m
//!              src_m-1(k)     otherwise
//! ```
//!
//! `k` is *moved* when `src_m-1(k) ≠ owner_m(k)`; it is *settled* once it is
//! in `S_m` (written or deleted through the proxy since the move began, or
//! copied). Only the last move runs: a ring change while a move runs
//! stops that move's migration (its set frozen, see `Settled::supersede`)
//! and starts one from every ring of the chain, so a key's latest value is
//! found however many reloads came back to back. A server in no current
//! ring stays a source (kept connected, listed by the migration) until the
//! move that drains it ends. The chain is dropped, and the pool stands
//! still again, only when the last migration has listed every server of
//! `R_0 … R_m-1` and a pass found no moved key left: every key is then on
//! its owner in `R_m`.
//!
//! How each rule keeps the invariant (routing: [`Move::route`]):
//! - a full overwrite of a moved key goes to its new owner and settles the
//!   key *before* it is sent (so the migration, which re-checks the set
//!   after its conditional add, removes its copy if a client got there
//!   first, and a copy it made earlier is overwritten);
//! - a plain read of an unsettled moved key goes to `src_m-1(k)`: a *warm
//!   read*; of a settled key, to the new owner;
//! - anything else (a delete, incr, append, cas, touch, add, ...) on an
//!   unsettled moved key waits for the key's copy (a priority copy), then
//!   goes to the new owner (a delete sent at once could be followed by the
//!   copy's add, bringing the key back until the copy is undone);
//! - the migration copies with an add (never over a client's write) and
//!   settles the key; a copy on a server that is neither the key's source
//!   nor its settled owner is stale and dropped (`md` with the cas the
//!   migration read, skipped when a later move settled the key); writes of
//!   a stopped move's thread that are still on their way check the newer
//!   moves' sets first.
//!
//! A server that dies or restarts empty during a move loses its keys, as
//! any dead cache server does: the keys whose source it was miss (its
//! listing fails, it is marked unreachable, their reads go to the new
//! owner); no other key is affected.
//!
//! Keys that did not move, and every key of a pool that is not moving,
//! route as usual.

pub mod chain;
pub mod conn;
pub mod drop;
pub mod migrate;
pub mod settled;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::request::{BIN_HEADER, BIN_REQ};

pub use chain::{Move, Reach, Source};
pub use settled::{key_hash, Settle, Settled};

/// What a forwarded request does to its key, for routing during a move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Replaces the whole value whatever was there: `set`, `ms` in set
    /// mode without a compared cas, binary SET without a cas.
    Overwrite,
    /// Removes the key: `delete`, `md` without cas or invalidation,
    /// binary DELETE without a cas.
    Delete,
    /// Only reads: `get`, `gets`, an `mg` that neither touches nor
    /// vivifies, binary GET and GETK.
    Read,
    /// Needs the current item: everything else that names a key.
    Other,
    /// Names no key (`version`): routed as usual.
    Unkeyed,
}

/// Where a request for a key goes during a move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// As usual, by the new ring (and the pool's failover).
    New,
    /// To the source that holds the key's latest value (`Move::sources`).
    Old(usize),
    /// Held until the key's copy is done, then as usual.
    Park,
}

/// The kind of a forwarded request, from its wire bytes (`noreply`,
/// meta `q` and binary quiet opcodes already stripped).
pub fn classify(wire: &[u8]) -> Kind {
    if wire.first() == Some(&BIN_REQ) {
        if wire.len() < BIN_HEADER {
            return Kind::Other;
        }
        let cas_zero = wire[16..24].iter().all(|&b| b == 0);
        return match wire[1] {
            0x00 | 0x0c => Kind::Read,
            0x01 if cas_zero => Kind::Overwrite,
            0x04 if cas_zero => Kind::Delete,
            0x0b => Kind::Unkeyed,
            _ => Kind::Other,
        };
    }
    let line = &wire[..memchr::memchr(b'\n', wire).unwrap_or(wire.len())];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let cmd = tokens.next().unwrap_or(b"");
    match cmd {
        b"get" | b"gets" => Kind::Read,
        b"set" => Kind::Overwrite,
        b"delete" => Kind::Delete,
        b"version" => Kind::Unkeyed,
        b"mg" if crate::request::is_plain_read(wire) => Kind::Read,
        b"ms" => {
            // key, length, then flags.
            let flags = tokens.skip(2);
            let mut plain = true;
            for f in flags {
                match f.first() {
                    Some(b'C' | b'I') => plain = false,
                    Some(b'M') if !matches!(f.get(1), Some(b'S' | b's')) => plain = false,
                    _ => {}
                }
            }
            if plain {
                Kind::Overwrite
            } else {
                Kind::Other
            }
        }
        b"md" => {
            let other = tokens
                .skip(1)
                .any(|f| matches!(f.first(), Some(b'C' | b'I' | b'x' | b'E')));
            if other {
                Kind::Other
            } else {
                Kind::Delete
            }
        }
        _ => Kind::Other,
    }
}

/// What the migration has done, read by the loop (stats) and the
/// migration thread's own counters.
#[derive(Debug, Default)]
pub struct Progress {
    /// Keys copied to their new owner.
    pub moved_keys: AtomicU64,
    /// Their value bytes.
    pub moved_bytes: AtomicU64,
    /// Set when the migration is over (every old owner listed, every
    /// moved key copied or found gone).
    pub done: AtomicBool,
    /// Set by the loop when a newer ring change replaces this move.
    pub cancel: AtomicBool,
}

impl Progress {
    /// Keys copied so far.
    pub fn moved_keys(&self) -> u64 {
        self.moved_keys.load(Ordering::Relaxed)
    }
    /// Their value bytes.
    pub fn moved_bytes(&self) -> u64 {
        self.moved_bytes.load(Ordering::Relaxed)
    }
    /// Whether a newer ring change replaced this move.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
    /// Whether the migration is over.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_what_the_request_does_to_its_key() {
        for (wire, kind) in [
            (&b"get k\r\n"[..], Kind::Read),
            (b"gets k\r\n", Kind::Read),
            (b"mg k v f t\r\n", Kind::Read),
            (b"mg k v T30\r\n", Kind::Other),
            (b"set k 0 0 1\r\nx\r\n", Kind::Overwrite),
            (b"ms k 1 T0 F3\r\nx\r\n", Kind::Overwrite),
            (b"ms k 1 MS\r\nx\r\n", Kind::Overwrite),
            (b"ms k 1 ME\r\nx\r\n", Kind::Other),
            (b"ms k 1 MA\r\nx\r\n", Kind::Other),
            (b"ms k 1 C12\r\nx\r\n", Kind::Other),
            (b"delete k\r\n", Kind::Delete),
            (b"md k\r\n", Kind::Delete),
            (b"md k C5\r\n", Kind::Other),
            (b"md k I T30\r\n", Kind::Other),
            (b"add k 0 0 1\r\nx\r\n", Kind::Other),
            (b"incr k 1\r\n", Kind::Other),
            (b"touch k 10\r\n", Kind::Other),
            (b"cas k 0 0 1 5\r\nx\r\n", Kind::Other),
            (b"ma k\r\n", Kind::Other),
            (b"version\r\n", Kind::Unkeyed),
        ] {
            assert_eq!(classify(wire), kind, "{}", String::from_utf8_lossy(wire));
        }
        let mut bin = [0u8; 24];
        bin[0] = BIN_REQ;
        assert_eq!(classify(&bin), Kind::Read);
        bin[1] = 0x01;
        assert_eq!(classify(&bin), Kind::Overwrite);
        bin[23] = 1;
        assert_eq!(classify(&bin), Kind::Other, "a cas set needs the item");
        bin[23] = 0;
        bin[1] = 0x04;
        assert_eq!(classify(&bin), Kind::Delete);
        bin[1] = 0x05;
        assert_eq!(classify(&bin), Kind::Other);
    }
}
