//! Key placement over several servers exactly as libmemcached's ketama
//! does it (`MEMCACHED_BEHAVIOR_KETAMA`, i.e.
//! `MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA`, as in pylibmc's
//! `behaviors={"ketama": True}`), so that `load --targets` sends every key
//! to the server a libmemcached client would, and osmium-proxy's
//! `distribution: libmemcached` / `libmemcached_weighted` place keys where
//! pylibmc (`{"ketama": True}` / `{"ketama_weighted": True}`) does.
//!
//! What libmemcached (1.0 and 1.1, `hosts.cc` `update_continuum`, `hash.cc`
//! `dispatch_host`) does, and this module repeats bit for bit:
//!
//! * every server gets 100 points (`MEMCACHED_POINTS_PER_SERVER`) on a
//!   `u32` circle; point `n` (0-based) is the *key hash* of the string
//!   `"<host>:<port>-<n>"`, or `"<host>-<n>"` when the port is the default
//!   11211 — `<host>` as the client was given it (e.g. `127.0.0.1`);
//! * the key hash is the client's hash function: Jenkins one-at-a-time by
//!   default ([`KeyHash::OneAtATime`]), or MD5 when the client sets
//!   `MEMCACHED_BEHAVIOR_HASH` to MD5 ([`KeyHash::Md5`]: the first 4 bytes
//!   of the digest, little endian);
//! * the points are sorted by value, then by server index (libmemcached's
//!   `continuum_item_cmp`), in the order the servers were given
//!   (`MEMCACHED_BEHAVIOR_SORT_HOSTS` is off by default);
//! * a key goes to the first point whose value is ≥ the key's hash, and
//!   to the first point of the circle when there is none (wrap-around).
//!
//! The weighted variant ([`Continuum::weighted`], libmemcached's
//! `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`, the original last.fm ketama) is
//! here too: 160 points per server (equal weights), four per MD5 digest of
//! `"<host>:<port>-<n>"` for n in 0..40, and MD5 key hashes; with unequal
//! weights ([`Continuum::weighted_by`]) a server gets
//! `floor(weight share × 40 × servers) × 4` points, as libmemcached's
//! `update_continuum` computes them.

/// The hash function of keys (and, unweighted, of the points).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyHash {
    /// libhashkit's default, `hashkit_one_at_a_time`.
    OneAtATime,
    /// `hashkit_md5`: the digest's first four bytes, little endian.
    Md5,
}

impl KeyHash {
    /// The hash of `data`.
    pub fn hash(self, data: &[u8]) -> u32 {
        match self {
            KeyHash::OneAtATime => one_at_a_time(data),
            KeyHash::Md5 => md5_word(data, 0),
        }
    }
}

/// Points per server of the unweighted continuum.
pub const POINTS_PER_SERVER: usize = 100;
/// Points per server of the weighted continuum (equal weights).
pub const POINTS_PER_SERVER_WEIGHTED: usize = 160;
/// libmemcached's `MEMCACHED_DEFAULT_PORT`, left out of the point strings.
pub const DEFAULT_PORT: u16 = 11211;

pub use crate::hash::{md5_word, one_at_a_time};

/// The string hashed for point `n` of a server.
pub fn point_name(host: &str, port: u16, n: usize) -> String {
    if port == DEFAULT_PORT {
        format!("{host}-{n}")
    } else {
        format!("{host}:{port}-{n}")
    }
}

/// The sorted circle of points, each naming a server by its index in the
/// list the continuum was built from.
#[derive(Clone, Debug)]
pub struct Continuum {
    /// (point value, server index), sorted.
    points: Vec<(u32, u32)>,
    hash: KeyHash,
}

impl Continuum {
    /// libmemcached's unweighted ketama over `servers` (host as the client
    /// spells it, port), with `hash` for the keys and the points.
    pub fn new(servers: &[(String, u16)], hash: KeyHash) -> Continuum {
        let mut points = Vec::with_capacity(servers.len() * POINTS_PER_SERVER);
        for (i, (host, port)) in servers.iter().enumerate() {
            for n in 0..POINTS_PER_SERVER {
                points.push((hash.hash(point_name(host, *port, n).as_bytes()), i as u32));
            }
        }
        points.sort_unstable();
        Continuum { points, hash }
    }

    /// libmemcached's weighted ketama with equal weights: MD5 for keys and
    /// points, four points per digest, 160 per server.
    pub fn weighted(servers: &[(String, u16)]) -> Continuum {
        let weighted: Vec<(String, u16, u32)> =
            servers.iter().map(|(h, p)| (h.clone(), *p, 1)).collect();
        Continuum::weighted_by(&weighted)
    }

    /// libmemcached's weighted ketama over `(host, port, weight)`: a
    /// server's share of the total weight, × 40 × the number of servers,
    /// rounded down (in `f32`, as libmemcached), digests of 4 points each.
    pub fn weighted_by(servers: &[(String, u16, u32)]) -> Continuum {
        Continuum::weighted_with(servers, KeyHash::Md5)
    }

    /// [`Continuum::weighted_by`]'s points with keys hashed by `hash`:
    /// libmemcached's plain ketama (`MEMCACHED_BEHAVIOR_KETAMA`, keys by
    /// the client's hash, one-at-a-time by default) once a server has a
    /// weight above 1, which turns the weighted continuum on by itself.
    pub fn weighted_with(servers: &[(String, u16, u32)], hash: KeyHash) -> Continuum {
        let total: u32 = servers.iter().map(|s| s.2).sum();
        let mut points = Vec::with_capacity(servers.len() * POINTS_PER_SERVER_WEIGHTED);
        for (i, (host, port, weight)) in servers.iter().enumerate() {
            let pct = *weight as f32 / total as f32;
            let per_server = ((pct * POINTS_PER_SERVER_WEIGHTED as f32 / 4.0
                * servers.len() as f32
                + 0.000_000_000_1)
                .floor()
                * 4.0) as usize;
            for n in 0..per_server / 4 {
                let d = md5::compute(point_name(host, *port, n).as_bytes()).0;
                for w in d.chunks_exact(4) {
                    points.push((u32::from_le_bytes([w[0], w[1], w[2], w[3]]), i as u32));
                }
            }
        }
        points.sort_unstable();
        Continuum { points, hash }
    }

    /// The index of the server `key` goes to (0 when there is one server
    /// or none: libmemcached does not hash then).
    pub fn server_of(&self, key: &[u8]) -> usize {
        self.server_at(self.hash.hash(key))
    }

    /// The points' values, in order.
    pub fn point_values(&self) -> impl Iterator<Item = u32> + '_ {
        self.points.iter().map(|&(v, _)| v)
    }

    /// The server of the first point whose value is ≥ `hash`, else (past
    /// the last point) the first point's (0 for an empty continuum).
    pub fn server_at(&self, hash: u32) -> usize {
        let i = self.points.partition_point(|&(v, _)| v < hash);
        match self.points.get(i).or(self.points.first()) {
            Some(&(_, server)) => server as usize,
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(ports: &[u16]) -> Vec<(String, u16)> {
        ports
            .iter()
            .map(|&p| ("127.0.0.1".to_string(), p))
            .collect()
    }

    #[test]
    fn weighted_by_equal_weights_is_weighted() {
        let c = Continuum::weighted_by(&[("a".into(), 1, 5), ("b".into(), 2, 5)]);
        assert_eq!(c.points, Continuum::weighted(&servers_named()).points);
    }

    fn servers_named() -> Vec<(String, u16)> {
        vec![("a".into(), 1), ("b".into(), 2)]
    }

    #[test]
    fn one_at_a_time_matches_libhashkit() {
        // Values printed by libhashkit 1.1.4 itself
        // (`libhashkit_one_at_a_time` called through ctypes).
        assert_eq!(one_at_a_time(b"apple"), 2297466611);
        assert_eq!(one_at_a_time(b"beat"), 3902465932);
        assert_eq!(one_at_a_time(b"k000000000000001"), 2082524945);
        assert_eq!(one_at_a_time(b""), 0);
        // A byte >= 0x80 is sign-extended as a C char.
        assert_eq!(one_at_a_time(&[0x80]), 3273477671);
    }

    #[test]
    fn md5_words_are_little_endian() {
        // md5("") = d41d8cd98f00b204e9800998ecf8427e; `libhashkit_md5`
        // gives 0xd98c1dd4 for "" and 0xbe70381f for "apple".
        assert_eq!(md5_word(b"", 0), 0xd98c1dd4);
        assert_eq!(KeyHash::Md5.hash(b"apple"), 0xbe70381f);
        assert_eq!(md5_word(b"", 3), 0x7e42f8ec);
        assert_eq!(KeyHash::Md5.hash(b""), 0xd98c1dd4);
    }

    #[test]
    fn point_names_leave_out_the_default_port() {
        assert_eq!(point_name("10.0.0.1", 11211, 0), "10.0.0.1-0");
        assert_eq!(point_name("127.0.0.1", 22122, 99), "127.0.0.1:22122-99");
    }

    #[test]
    fn continuum_has_its_points_sorted() {
        let c = Continuum::new(&servers(&[1, 2, 3]), KeyHash::OneAtATime);
        assert_eq!(c.points.len(), 300);
        assert!(c.points.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(Continuum::weighted(&servers(&[1, 2])).points.len(), 320);
    }

    #[test]
    fn keys_go_to_the_next_point_and_wrap_around() {
        let c = Continuum {
            points: vec![(10, 2), (20, 0), (20, 1), (30, 1)],
            hash: KeyHash::OneAtATime,
        };
        assert_eq!(c.server_at(0), 2);
        assert_eq!(c.server_at(10), 2);
        assert_eq!(c.server_at(11), 0, "ties: the lower server index first");
        assert_eq!(c.server_at(21), 1);
        assert_eq!(c.server_at(30), 1);
        assert_eq!(c.server_at(31), 2, "past the last point: wraps around");
        assert_eq!(c.server_at(u32::MAX), 2);
    }

    #[test]
    fn keys_spread_over_every_server() {
        let c = Continuum::new(&servers(&[40001, 40002, 40003]), KeyHash::OneAtATime);
        let mut count = [0usize; 3];
        for i in 0..30_000u64 {
            count[c.server_of(format!("k{i:015}").as_bytes())] += 1;
        }
        assert!(count.iter().all(|&n| n > 3_000), "{count:?}");
    }

    #[test]
    fn one_server_takes_every_key() {
        let c = Continuum::new(&servers(&[40001]), KeyHash::Md5);
        assert_eq!(c.server_of(b"anything"), 0);
        assert_eq!(Continuum::new(&[], KeyHash::OneAtATime).server_of(b"x"), 0);
    }
}
