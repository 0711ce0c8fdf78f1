//! The placement side of a move: the chain of rings a pool went through
//! since it last stood still, the servers a key may be on (*sources*, by
//! address), and where each key's latest value is (see the module comment
//! of `moves` for the invariant). [`Move::new`] starts a chain from one
//! ring change; [`Move::then`] adds a ring change that came while the
//! chain moved, freezing the running move's settled set.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::{key_hash, Kind, Route, Settled};
use crate::config::{Addr, Distribution, PoolConfig};
use crate::ring::Ring;

/// One server a key may be on during the move: every server of every
/// ring of the chain, once, by address.
#[derive(Clone, Debug)]
pub struct Source {
    /// Its address (a source is one address).
    pub addr: Addr,
    /// Its name in the newest ring that has it (for the log).
    pub name: String,
    /// In a ring before the pool's current one: the migration lists it.
    pub listed: bool,
}

/// One ring of the chain.
#[derive(Clone, Debug)]
struct Layer {
    ring: Ring,
    /// Ring index → source index.
    to_source: Vec<usize>,
    /// Ring index → server name (the dump filter names servers).
    names: Vec<String>,
    /// The settled set of the move *to* this ring (none for the chain's
    /// first ring, and for the current ring, whose set is `Move::settled`).
    settled: Option<Arc<Settled>>,
}

impl Layer {
    fn new(cfg: &PoolConfig, sources: &mut Vec<Source>, listed: bool) -> Layer {
        let to_source = cfg
            .servers
            .iter()
            .map(|s| match sources.iter().position(|x| x.addr == s.addr) {
                Some(i) => {
                    sources[i].listed |= listed;
                    sources[i].name = s.name.clone();
                    i
                }
                None => {
                    sources.push(Source {
                        addr: s.addr.clone(),
                        name: s.name.clone(),
                        listed,
                    });
                    sources.len() - 1
                }
            })
            .collect();
        Layer {
            ring: Ring::new(cfg),
            to_source,
            names: cfg.servers.iter().map(|s| s.name.clone()).collect(),
            settled: None,
        }
    }

    fn owner(&self, key: &[u8]) -> usize {
        self.to_source[self.ring.server_of(key)]
    }
}

/// A move of a pool: the rings before its current one (oldest first, the
/// moves between them stopped, their settled sets frozen), the current
/// ring, and the current move's settled set. A clone (the migration
/// thread's: a ring is not shared between threads) shares the sets.
#[derive(Clone, Debug)]
pub struct Move {
    earlier: Vec<Layer>,
    new: Layer,
    /// The keys of the current move already on their new owner.
    pub settled: Arc<Settled>,
    /// Every server of every ring of the chain, once.
    pub sources: Vec<Source>,
    /// One earlier ring whose server names keep their addresses: the
    /// dump filter (by name) finds exactly the moved keys.
    filterable: bool,
}

/// Whether a ring of `cfg` places keys (a `random` pool has no owners).
fn places(cfg: &PoolConfig) -> bool {
    cfg.distribution != Distribution::Random
}

impl Move {
    /// The move of a pool that stood still on `old` to `new`; `None` when
    /// nothing can move warm (a `random` distribution on either side).
    pub fn new(old: &PoolConfig, new: &PoolConfig) -> Option<Move> {
        if !places(old) || !places(new) {
            return None;
        }
        let mut sources = Vec::new();
        let first = Layer::new(old, &mut sources, true);
        let last = Layer::new(new, &mut sources, false);
        let filterable = old.servers.iter().all(|o| {
            new.servers
                .iter()
                .all(|n| n.name != o.name || n.addr == o.addr)
        });
        Some(Move {
            earlier: vec![first],
            new: last,
            settled: Arc::default(),
            sources,
            filterable,
        })
    }

    /// The ring changed again, to `new`, while this move ran: a move from
    /// every ring of the chain. This move's settled set is frozen (linked
    /// to the new one's, see `Settled::supersede`); `None` for a `random`
    /// `new`.
    pub fn then(&self, new: &PoolConfig) -> Option<Move> {
        if !places(new) {
            return None;
        }
        let mut sources = self.sources.clone();
        let mut earlier = self.earlier.clone();
        // The running move's target becomes an earlier ring, with its set.
        let done = Layer {
            ring: self.new.ring.clone(),
            to_source: self.new.to_source.clone(),
            names: self.new.names.clone(),
            settled: Some(self.settled.clone()),
        };
        for &s in &done.to_source {
            sources[s].listed = true;
        }
        earlier.push(done);
        let last = Layer::new(new, &mut sources, false);
        let settled: Arc<Settled> = Arc::default();
        self.settled.supersede(settled.clone());
        Some(Move {
            earlier,
            new: last,
            settled,
            sources,
            filterable: false,
        })
    }

    /// How many rings came before the current one.
    pub fn depth(&self) -> usize {
        self.earlier.len()
    }

    /// The source that holds `key`'s latest value unless the current
    /// move settled it: its owner in the newest earlier ring whose move
    /// settled it, else its owner in the first ring.
    pub fn source_of(&self, key: &[u8]) -> usize {
        let mut h = None;
        for layer in self.earlier.iter().rev() {
            match &layer.settled {
                Some(s) if !s.contains(*h.get_or_insert_with(|| key_hash(key))) => continue,
                _ => return layer.owner(key),
            }
        }
        self.earlier[0].owner(key)
    }

    /// `key`'s owner (a source index) in the current ring.
    pub fn owner_of(&self, key: &[u8]) -> usize {
        self.new.owner(key)
    }

    /// The source `key` moves from, if it moves: its latest value is not
    /// on its current owner unless the current move settled it.
    pub fn moved_from(&self, key: &[u8]) -> Option<usize> {
        let s = self.source_of(key);
        (s != self.owner_of(key)).then_some(s)
    }

    /// The dump commands that list what may move off source `s` (its
    /// moved ranges when filterable, else everything it holds).
    pub fn dump_commands(&self, s: usize) -> Vec<String> {
        let first = &self.earlier[0];
        match first.to_source.iter().position(|&x| x == s) {
            Some(i) if self.filterable => {
                crate::ring::dump_commands(&first.ring, &self.new.ring, &first.names[i])
            }
            _ => vec![osmium_placement::filter::UNFILTERED_MGDUMP.to_string()],
        }
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
            Kind::Overwrite => {
                self.settled.insert(h);
                Route::New
            }
            Kind::Read if self.settled.contains(h) => Route::New,
            Kind::Read => Route::Old(old),
            _ if self.settled.contains(h) => Route::New,
            // A delete too: a copy landing after it would bring the key
            // back (a set is safe: the copy's add does not overwrite).
            _ => Route::Park,
        }
    }
}

/// Whether each source is reachable, shared by the loop (warm reads go
/// only to a reachable source) and the migration (which finds out).
#[derive(Debug)]
pub struct Reach(Vec<AtomicU8>);

/// Not known yet: a removed server the proxy has no connection to.
pub const UNKNOWN: u8 = 0;
/// Connected (by the loop or the migration).
pub const UP: u8 = 1;
/// The migration could not connect.
pub const DOWN: u8 = 2;

impl Reach {
    /// One state per source (`UNKNOWN`, `UP`, `DOWN`).
    pub fn new(states: impl IntoIterator<Item = u8>) -> Reach {
        Reach(states.into_iter().map(AtomicU8::new).collect())
    }
    /// Records source `s`'s state.
    pub fn set(&self, s: usize, state: u8) {
        if let Some(a) = self.0.get(s) {
            a.store(state, Ordering::Relaxed);
        }
    }
    /// Source `s`'s state (`DOWN` for an index past the sources).
    pub fn get(&self, s: usize) -> u8 {
        self.0.get(s).map_or(DOWN, |a| a.load(Ordering::Relaxed))
    }
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

    fn keys() -> Vec<Vec<u8>> {
        (0..2000).map(|i| format!("key:{i}").into_bytes()).collect()
    }

    const A: &str = "127.0.0.1:2001:1 a";
    const B: &str = "127.0.0.1:2002:1 b";
    const C: &str = "127.0.0.1:2003:1 c";

    #[test]
    fn routes_moved_keys_by_the_rules() {
        let (old, new) = (pool(&[A, B]), pool(&[A, B, C]));
        let m = Move::new(&old, &new).unwrap();
        let keys = keys();
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
                    assert_eq!(o, Ring::new(&old).server_of(k), "sources: a, b first");
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
        assert_eq!(m.route(k, Kind::Delete), Route::Park, "waits for the copy");
        assert_eq!(m.route(k, Kind::Read), Route::Old(m.moved_from(k).unwrap()));
        m.settled.insert(key_hash(k));
        assert_eq!(m.route(k, Kind::Delete), Route::New);
        // A removed server: every key it owned moves.
        let fewer = pool(&[A]);
        let m = Move::new(&old, &fewer).unwrap();
        for k in &keys {
            let from_b = Ring::new(&old).server_of(k) == 1;
            assert_eq!(m.moved_from(k).is_some(), from_b);
        }
        assert!(m.sources.iter().all(|s| s.listed));
    }

    #[test]
    fn a_move_during_a_move_reads_each_key_where_its_latest_value_is() {
        // [a, b] -> [a, b, c] (some keys copied or written to c), then
        // back to [a, b] before that move ended.
        let (two, three) = (pool(&[A, B]), pool(&[A, B, C]));
        let first = Move::new(&two, &three).unwrap();
        let keys = keys();
        let to_c: Vec<&Vec<u8>> = keys
            .iter()
            .filter(|k| first.moved_from(k).is_some())
            .collect();
        let half = to_c.len() / 2;
        for k in &to_c[..half] {
            assert_eq!(first.route(k, Kind::Overwrite), Route::New);
        }
        let second = first.then(&two).unwrap();
        assert_eq!(second.depth(), 2);
        assert!(second.sources.iter().all(|s| s.listed), "c stays a source");
        let c = second.sources.iter().position(|s| s.name == "c").unwrap();
        for k in &keys {
            let written = to_c[..half].contains(&k);
            match second.moved_from(k) {
                // Written on c under the first move: it moves back from c.
                Some(s) => {
                    assert!(written, "only keys settled on c move back");
                    assert_eq!(s, c);
                    assert_eq!(second.route(k, Kind::Read), Route::Old(c));
                }
                None => assert!(!written),
            }
        }
        // A client write under the second move settles in its set; the
        // first move's thread sees it as settled later.
        let k = to_c[0];
        assert_eq!(second.route(k, Kind::Overwrite), Route::New);
        assert!(first.settled.settled_later(key_hash(k)));
        assert_eq!(second.moved_from(k), Some(c), "still moved, now settled");
        assert_eq!(second.route(k, Kind::Read), Route::New);
    }

    #[test]
    fn an_address_change_under_the_same_name_moves_and_is_not_filtered() {
        let old = pool(&[A, B]);
        let new = pool(&[A, "127.0.0.1:2009:1 b"]);
        let m = Move::new(&old, &new).unwrap();
        assert!(!m.filterable);
        let k = keys()
            .into_iter()
            .find(|k| Ring::new(&old).server_of(k) == 1)
            .unwrap();
        assert_eq!(
            m.moved_from(&k),
            Some(1),
            "b's keys move to its new address"
        );
        let same = Move::new(&old, &pool(&[B, A, C])).unwrap();
        assert!(same.filterable, "reordered and added: names keep addresses");
    }
}
