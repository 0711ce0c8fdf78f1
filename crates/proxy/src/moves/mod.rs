//! Warm moves: a pool whose ring changes (`R_old` → `R_new`) keeps every
//! moved key served while a background migration (`migrate`) copies the
//! moved keys from their old owner to their new one. A key is *moved*
//! when its owner's name differs between the two rings. The *settled*
//! set (`settled`) holds the moved keys whose new owner is authoritative:
//! written or deleted through the proxy since the move began, or copied.
//!
//! Routing of a moved key while the pool moves ([`Move::route`]), the
//! invariants everything else relies on:
//! - a full overwrite or a delete goes to the new owner and settles the
//!   key *before* it is sent (so the migration, which re-checks the set
//!   after its conditional add, removes its copy if a client got there
//!   first, and a copy it made earlier is overwritten);
//! - a plain read of an unsettled key goes to the old owner (no write has
//!   reached the new owner, so the old owner has the latest value): a
//!   *warm read*; a read of a settled key goes to the new owner;
//! - anything else (incr, append, cas, touch, add, ...) on an unsettled
//!   key waits for the key's copy (a priority copy), then goes to the new
//!   owner.
//!
//! Keys that did not move, and every key of a pool that is not moving,
//! route as usual.

pub mod drop;
pub mod migrate;
pub mod settled;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::{Distribution, PoolConfig};
use crate::request::{BIN_HEADER, BIN_REQ};
use crate::ring::Ring;

pub use settled::{key_hash, Settled};

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
    /// To the key's old owner: index `i` of the old ring's servers.
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
    pub fn moved_keys(&self) -> u64 {
        self.moved_keys.load(Ordering::Relaxed)
    }
    pub fn moved_bytes(&self) -> u64 {
        self.moved_bytes.load(Ordering::Relaxed)
    }
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// The placement side of one pool's move: both rings and the settled set.
#[derive(Debug)]
pub struct Move {
    pub old_cfg: PoolConfig,
    old: Ring,
    new: Ring,
    /// Old ring index → new ring index of the server of the same name.
    old_to_new: Vec<Option<usize>>,
    pub settled: Arc<Settled>,
}

impl Move {
    /// The move of a pool from `old` to `new`; `None` when nothing can
    /// move warm: a `random` distribution (no key has an owner) on
    /// either side.
    pub fn new(old: &PoolConfig, new: &PoolConfig, settled: Arc<Settled>) -> Option<Move> {
        if old.distribution == Distribution::Random || new.distribution == Distribution::Random {
            return None;
        }
        let old_to_new = old
            .servers
            .iter()
            .map(|s| new.servers.iter().position(|n| n.name == s.name))
            .collect();
        Some(Move {
            old_cfg: old.clone(),
            old: Ring::new(old),
            new: Ring::new(new),
            old_to_new,
            settled,
        })
    }

    /// The name of server `i` of the old ring.
    pub fn old_name(&self, i: usize) -> &str {
        &self.old_cfg.servers[i].name
    }

    /// The old owner of `key` when it moved (its old ring index).
    pub fn moved_from(&self, key: &[u8]) -> Option<usize> {
        moved_from(&self.old, &self.new, &self.old_to_new, key)
    }

    /// Where a request of kind `kind` for `key` goes now; settles the key
    /// for an overwrite or a delete of a moved key.
    pub fn route(&self, key: &[u8], kind: Kind) -> Route {
        if kind == Kind::Unkeyed {
            return Route::New;
        }
        let Some(old) = self.moved_from(key) else {
            return Route::New;
        };
        let h = key_hash(key);
        match kind {
            Kind::Overwrite | Kind::Delete => {
                self.settled.insert(h);
                Route::New
            }
            Kind::Read if self.settled.contains(h) => Route::New,
            Kind::Read => Route::Old(old),
            _ if self.settled.contains(h) => Route::New,
            _ => Route::Park,
        }
    }
}

/// The old owner of `key` if its owner's name differs between the rings.
fn moved_from(old: &Ring, new: &Ring, old_to_new: &[Option<usize>], key: &[u8]) -> Option<usize> {
    let o = old.server_of(key);
    let n = new.server_of(key);
    (old_to_new.get(o).copied().flatten() != Some(n)).then_some(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn pool(servers: &[&str]) -> PoolConfig {
        let mut y = String::from("p:\n  listen: 127.0.0.1:1\n  servers:\n");
        for s in servers {
            y.push_str(&format!("   - {s}\n"));
        }
        Config::parse(&y).unwrap().pools.remove(0)
    }

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

    #[test]
    fn routes_moved_keys_by_the_rules() {
        let old = pool(&["127.0.0.1:2001:1 a", "127.0.0.1:2002:1 b"]);
        let new = pool(&[
            "127.0.0.1:2001:1 a",
            "127.0.0.1:2002:1 b",
            "127.0.0.1:2003:1 c",
        ]);
        let m = Move::new(&old, &new, Arc::default()).unwrap();
        let keys: Vec<Vec<u8>> = (0..2000).map(|i| format!("key:{i}").into_bytes()).collect();
        let moved: Vec<&Vec<u8>> = keys.iter().filter(|k| m.moved_from(k).is_some()).collect();
        let share = moved.len() as f64 / keys.len() as f64;
        assert!((0.2..0.5).contains(&share), "about a third moves: {share}");
        for k in &keys {
            match m.moved_from(k) {
                None => {
                    for kind in [Kind::Read, Kind::Other, Kind::Overwrite] {
                        assert_eq!(m.route(k, kind), Route::New);
                    }
                }
                Some(o) => {
                    assert_eq!(m.route(k, Kind::Read), Route::Old(o));
                    assert_eq!(m.route(k, Kind::Other), Route::Park);
                }
            }
        }
        let k = moved[0];
        assert_eq!(m.route(k, Kind::Overwrite), Route::New);
        assert!(m.settled.contains(key_hash(k)), "settled before it is sent");
        assert_eq!(m.route(k, Kind::Read), Route::New);
        assert_eq!(m.route(k, Kind::Other), Route::New);
        let k = moved[1];
        assert_eq!(m.route(k, Kind::Delete), Route::New);
        assert_eq!(m.route(k, Kind::Read), Route::New);
        // A removed server: every key it owned moves.
        let fewer = pool(&["127.0.0.1:2001:1 a"]);
        let m = Move::new(&old, &fewer, Arc::default()).unwrap();
        for k in &keys {
            let from_b = Ring::new(&old).server_of(k) == 1;
            assert_eq!(m.moved_from(k).is_some(), from_b);
        }
    }
}
