//! Key placement: which of a pool's servers a key belongs to, by the
//! pool's `hash`, `hash_tag` and `distribution` ([`PoolSpec`]).
//! [`Ring::server_of`] is the placement over every configured server
//! (where a key lives while all are up); [`Ring::live_server_of`] the
//! placement over the live ones only, which `failover: rehash` uses as
//! nutcracker does. `moved`: the key-hash ranges whose owner changes
//! between two rings.
//!
//! `nutcracker`: nutcracker 0.5.0's ketama and modula; `libmemcached`:
//! libmemcached's ketama (also what osmium-bench's `--targets` uses).

pub mod libmemcached;
pub mod moved;
pub mod nutcracker;

use std::cell::Cell;

use crate::hash::HashKind;

pub use moved::{dump_commands, moved_ranges, owned_spans, MovedRange, Moves, NotByRange};
/// How keys are spread over a pool's servers (a pool's `distribution:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// nutcracker's ketama (its default).
    Ketama,
    /// nutcracker's modula.
    Modula,
    /// A random live server per request.
    Random,
    /// libmemcached's unweighted ketama (pylibmc `{"ketama": True}`).
    Libmemcached,
    /// libmemcached's weighted ketama (pylibmc `{"ketama_weighted": True}`).
    LibmemcachedWeighted,
}

impl Distribution {
    /// The distribution a configuration names, if any.
    pub fn from_name(name: &str) -> Option<Distribution> {
        Some(match name {
            "ketama" => Distribution::Ketama,
            "modula" => Distribution::Modula,
            "random" => Distribution::Random,
            "libmemcached" => Distribution::Libmemcached,
            "libmemcached_weighted" => Distribution::LibmemcachedWeighted,
            _ => return None,
        })
    }
}

/// One server as placement sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSpec {
    /// The name nutcracker's ketama hashes (and the server's identity
    /// across two rings: [`moved_ranges`] compares owners by name).
    pub name: String,
    /// The weight of its `servers:` line (`host:port:weight`).
    pub weight: u32,
    /// Host (or unix socket path) and port (0 for a unix socket), as
    /// libmemcached's continuum hashes them.
    pub host: String,
    /// The port (0 for a unix socket).
    pub port: u16,
}

/// What a pool's placement depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// The pool's `distribution:`.
    pub distribution: Distribution,
    /// The pool's `hash:`.
    pub hash: HashKind,
    /// The pool's `hash_tag:`, its opening and closing characters.
    pub hash_tag: Option<[u8; 2]>,
    /// In `servers:` order.
    pub servers: Vec<ServerSpec>,
}

impl From<&PoolSpec> for PoolSpec {
    fn from(spec: &PoolSpec) -> PoolSpec {
        spec.clone()
    }
}

/// One placement table over some of the pool's servers.
#[derive(Clone, Debug)]
enum Table {
    Ketama(nutcracker::Ketama),
    Modula(nutcracker::Modula),
    /// The servers a random pick chooses from.
    Random(Vec<usize>),
    /// libmemcached's continuum, and the pool index of each of its servers.
    Libmemcached(libmemcached::Continuum, Vec<usize>),
}

/// A pool's placement.
#[derive(Clone, Debug)]
pub struct Ring {
    distribution: Distribution,
    hash: HashKind,
    hash_tag: Option<[u8; 2]>,
    /// `(name, weight, host, port)` per server, in `servers:` order.
    servers: Vec<(String, u32, String, u16)>,
    /// Indexes in nutcracker's server order: by name, shorter names first.
    nutcracker_order: Vec<usize>,
    all: Table,
    live: Table,
    rng: Cell<u64>,
}

impl Ring {
    /// The placement of `pool` with every server up (a [`PoolSpec`], or
    /// anything that converts into one, such as osmium-proxy's pool
    /// configuration).
    pub fn new(pool: impl Into<PoolSpec>) -> Ring {
        let pool: PoolSpec = pool.into();
        let servers: Vec<(String, u32, String, u16)> = pool
            .servers
            .into_iter()
            .map(|s| (s.name, s.weight, s.host, s.port))
            .collect();
        let mut nutcracker_order: Vec<usize> = (0..servers.len()).collect();
        nutcracker_order.sort_by(|&a, &b| {
            let (x, y) = (&servers[a].0, &servers[b].0);
            x.len()
                .cmp(&y.len())
                .then_with(|| x.as_bytes().cmp(y.as_bytes()))
        });
        let mut ring = Ring {
            distribution: pool.distribution,
            hash: pool.hash,
            hash_tag: pool.hash_tag,
            servers,
            nutcracker_order,
            all: Table::Random(Vec::new()),
            live: Table::Random(Vec::new()),
            rng: Cell::new(0x9e37_79b9_7f4a_7c15 ^ std::process::id() as u64),
        };
        let everyone = vec![true; ring.servers.len()];
        ring.all = ring.table(&everyone);
        ring.live = ring.all.clone();
        ring
    }

    /// How many servers the pool has.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether the pool has no servers (never, once configured).
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    fn table(&self, live: &[bool]) -> Table {
        let up = |i: &usize| live[*i];
        match self.distribution {
            Distribution::Ketama => {
                let list: Vec<(usize, &str, u32)> = self
                    .nutcracker_order
                    .iter()
                    .filter(|i| live[**i])
                    .map(|&i| (i, self.servers[i].0.as_str(), self.servers[i].1))
                    .collect();
                Table::Ketama(nutcracker::Ketama::new(&list))
            }
            Distribution::Modula => {
                let list: Vec<(usize, u32)> = self
                    .nutcracker_order
                    .iter()
                    .filter(|i| live[**i])
                    .map(|&i| (i, self.servers[i].1))
                    .collect();
                Table::Modula(nutcracker::Modula::new(&list))
            }
            Distribution::Random => Table::Random((0..self.servers.len()).filter(up).collect()),
            Distribution::Libmemcached | Distribution::LibmemcachedWeighted => {
                let index: Vec<usize> = (0..self.servers.len()).filter(up).collect();
                // libmemcached turns weighted ketama on by itself as soon
                // as a server is given a weight above 1 (`server_add`:
                // `ketama.weighted = true`).
                let weighted = self.distribution == Distribution::LibmemcachedWeighted
                    || self.servers.iter().any(|s| s.1 > 1);
                // Keys: MD5 with `ketama_weighted`, else the client's
                // default hash (one-at-a-time) even on a weighted continuum.
                let key_hash = if self.distribution == Distribution::LibmemcachedWeighted {
                    libmemcached::KeyHash::Md5
                } else {
                    libmemcached::KeyHash::OneAtATime
                };
                let c = if !weighted {
                    let list: Vec<(String, u16)> = index
                        .iter()
                        .map(|&i| (self.servers[i].2.clone(), self.servers[i].3))
                        .collect();
                    libmemcached::Continuum::new(&list, libmemcached::KeyHash::OneAtATime)
                } else {
                    let list: Vec<(String, u16, u32)> = index
                        .iter()
                        .map(|&i| {
                            let s = &self.servers[i];
                            (s.2.clone(), s.3, s.1)
                        })
                        .collect();
                    libmemcached::Continuum::weighted_with(&list, key_hash)
                };
                Table::Libmemcached(c, index)
            }
        }
    }

    /// The part of `key` that is hashed: between the hash tag's two
    /// characters when both are there with something between them.
    pub fn tagged<'k>(&self, key: &'k [u8]) -> &'k [u8] {
        crate::hash::tagged(key, self.hash_tag)
    }

    /// The hash nutcracker dispatches `key` with (0 for one server or an
    /// empty key).
    pub fn key_hash(&self, key: &[u8]) -> u32 {
        let key = self.tagged(key);
        if self.servers.len() == 1 || key.is_empty() {
            return 0;
        }
        self.hash.hash(key)
    }

    fn dispatch(&self, table: &Table, key: &[u8]) -> Option<usize> {
        match table {
            Table::Ketama(k) => k.dispatch(self.key_hash(key)),
            Table::Modula(m) => m.dispatch(self.key_hash(key)),
            Table::Random(list) => {
                if list.is_empty() {
                    return None;
                }
                // xorshift64*: any spread will do.
                let mut x = self.rng.get();
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                self.rng.set(x);
                Some(list[(x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % list.len()])
            }
            Table::Libmemcached(c, index) => {
                if index.is_empty() {
                    return None;
                }
                Some(index[c.server_of(self.tagged(key))])
            }
        }
    }

    /// The server `key` goes to with every server up.
    pub fn server_of(&self, key: &[u8]) -> usize {
        self.dispatch(&self.all, key).unwrap_or(0)
    }

    /// Rebuilds the placement over the live servers (`live[i]`).
    pub fn set_live(&mut self, live: &[bool]) {
        self.live = self.table(live);
    }

    /// The server `key` goes to over the live servers; `None` when none is.
    pub fn live_server_of(&self, key: &[u8]) -> Option<usize> {
        self.dispatch(&self.live, key)
    }

    /// The name of server `i` (nutcracker's: the `servers:` line's name,
    /// else its address): a server's identity across two rings.
    pub fn name(&self, i: usize) -> &str {
        self.servers.get(i).map_or("", |s| s.0.as_str())
    }

    /// The name of the server `key` goes to with every server up.
    pub fn owner_name(&self, key: &[u8]) -> &str {
        self.name(self.server_of(key))
    }

    /// The pool's hash tag.
    pub fn hash_tag(&self) -> Option<[u8; 2]> {
        self.hash_tag
    }

    /// The pool's distribution.
    pub fn distribution(&self) -> Distribution {
        self.distribution
    }

    /// The function keys are placed by (applied to their tagged part):
    /// the pool's `hash` for nutcracker's ketama and modula; for
    /// libmemcached's continuums the client's key hash (MD5 for
    /// `libmemcached_weighted`, else one-at-a-time, whatever `hash` says).
    /// None for `random`, which hashes nothing.
    pub fn placement_hash(&self) -> Option<HashKind> {
        match self.distribution {
            Distribution::Ketama | Distribution::Modula => Some(self.hash),
            Distribution::Libmemcached => Some(HashKind::OneAtATime),
            Distribution::LibmemcachedWeighted => Some(HashKind::Md5),
            Distribution::Random => None,
        }
    }

    /// The placement hash of `key` ([`Ring::placement_hash`] of its tagged
    /// part; 0 for `random`): the value [`Ring::owner_at`] and the moved
    /// ranges speak of, and the one osmium's range-filtered dump computes.
    pub fn placement_hash_of(&self, key: &[u8]) -> u32 {
        self.placement_hash()
            .map_or(0, |h| h.hash(self.tagged(key)))
    }

    /// The server (with every server up) of the keys whose placement hash
    /// is `hash`; None for `random` or an empty pool. For a non-empty key
    /// of a pool of two servers or more, `server_of(key)` is
    /// `owner_at(placement_hash_of(key))`; with one server every key is
    /// that server's.
    pub fn owner_at(&self, hash: u32) -> Option<usize> {
        match &self.all {
            Table::Ketama(k) => k.dispatch(hash),
            Table::Modula(m) => m.dispatch(hash),
            Table::Random(_) => None,
            Table::Libmemcached(c, index) => (!index.is_empty()).then(|| index[c.server_at(hash)]),
        }
    }

    /// For `modula`: the table's length and the entries that are server
    /// `name`'s (a key is `name`'s when its placement hash modulo the
    /// length is one of them); None for other distributions.
    pub fn modula_entries(&self, name: &str) -> Option<(u32, Vec<u32>)> {
        let Table::Modula(m) = &self.all else {
            return None;
        };
        let picks = m
            .entries()
            .iter()
            .enumerate()
            .filter(|(_, &s)| self.name(s as usize) == name)
            .map(|(j, _)| j as u32)
            .collect();
        Some((m.entries().len() as u32, picks))
    }

    /// The values of the continuum's points (sorted, repeats kept) with
    /// every server up; None for `modula` and `random`, which have none.
    pub fn point_values(&self) -> Option<Vec<u32>> {
        match &self.all {
            Table::Ketama(k) => Some(k.point_values().collect()),
            Table::Libmemcached(c, _) => Some(c.point_values().collect()),
            Table::Modula(_) | Table::Random(_) => None,
        }
    }
}
