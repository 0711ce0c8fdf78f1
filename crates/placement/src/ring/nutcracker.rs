//! nutcracker 0.5.0's `ketama` and `modula` distributions
//! (`src/hashkit/nc_ketama.c`, `nc_modula.c`), point for point.
//!
//! Ketama: with `n` servers in the continuum (the live ones when
//! `auto_eject_hosts` is on), a server of weight `w` out of a total `W`
//! gets `floor(w / W × 160 / 4 × n) × 4` points (in `f32`, as nutcracker),
//! four per MD5 digest of `"<name>-<i>"` for `i` from 0: the digest's four
//! little-endian words. `<name>` is the server's `name` from the `servers:`
//! line when it has one, else `host:port`, or just `host` when the port is
//! 11211 (nutcracker's libmemcached compatibility). The points are sorted
//! by value; a key goes to the first point whose value is ≥ its hash, or
//! to the first point when there is none.
//!
//! Modula: every server appears `weight` times, in order; a key goes to
//! entry `hash % entries`.

use crate::hash::md5_word;

/// Points per server at equal weights.
pub const KETAMA_POINTS_PER_SERVER: u32 = 160;

/// A sorted ketama continuum: `(point value, server index)`.
#[derive(Clone, Debug, Default)]
pub struct Ketama {
    points: Vec<(u32, u32)>,
}

impl Ketama {
    /// The continuum of `servers`: `(index, name, weight)` of those that
    /// take part (indexes are the pool's, names as nutcracker hashes them).
    pub fn new(servers: &[(usize, &str, u32)]) -> Ketama {
        let total: u32 = servers.iter().map(|s| s.2).sum();
        let live = servers.len() as f32;
        let mut points = Vec::new();
        for &(index, name, weight) in servers {
            let pct = weight as f32 / total as f32;
            let per_server = ((pct * KETAMA_POINTS_PER_SERVER as f32 / 4.0 * live) as f64
                + 0.000_000_000_1) as f32;
            let per_server = (per_server.floor() * 4.0) as u32;
            for i in 0..per_server / 4 {
                let host = format!("{name}-{i}");
                for x in 0..4 {
                    points.push((md5_word(host.as_bytes(), x), index as u32));
                }
            }
        }
        // nutcracker sorts by value only; equal values (two servers on one
        // 32-bit point) are left in qsort's order, which this does not try
        // to reproduce.
        points.sort_by_key(|&(v, _)| v);
        Ketama { points }
    }

    /// How many points the continuum has.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether the continuum is empty (no live server).
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The points' values, in order.
    pub fn point_values(&self) -> impl Iterator<Item = u32> + '_ {
        self.points.iter().map(|&(v, _)| v)
    }

    /// The server of the first point ≥ `hash`, wrapping to the first point.
    pub fn dispatch(&self, hash: u32) -> Option<usize> {
        let i = self.points.partition_point(|&(v, _)| v < hash);
        self.points
            .get(i)
            .or(self.points.first())
            .map(|&(_, s)| s as usize)
    }
}

/// nutcracker's modula: each server repeated `weight` times.
#[derive(Clone, Debug, Default)]
pub struct Modula {
    entries: Vec<u32>,
}

impl Modula {
    /// The table of `servers`: `(index, weight)` of those that take part.
    pub fn new(servers: &[(usize, u32)]) -> Modula {
        let mut entries = Vec::new();
        for &(index, weight) in servers {
            entries.extend(std::iter::repeat_n(index as u32, weight as usize));
        }
        Modula { entries }
    }

    /// The server index of each entry, in order.
    pub fn entries(&self) -> &[u32] {
        &self.entries
    }

    /// The server of entry `hash % entries`.
    pub fn dispatch(&self, hash: u32) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        Some(self.entries[(hash % self.entries.len() as u32) as usize] as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_weights_give_160_points_each() {
        let k = Ketama::new(&[(0, "a:1", 1), (1, "b:2", 1), (2, "c:3", 1)]);
        assert_eq!(k.len(), 480);
        assert!(k.points.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn weights_share_the_points() {
        // 1:3 over two servers: 0.25 × 40 × 2 = 20 digests, 0.75 → 60.
        let k = Ketama::new(&[(0, "a", 1), (1, "b", 3)]);
        let first = k.points.iter().filter(|p| p.1 == 0).count();
        assert_eq!((first, k.len() - first), (80, 240));
    }

    #[test]
    fn dispatch_wraps_around() {
        let k = Ketama {
            points: vec![(10, 2), (20, 0), (30, 1)],
        };
        assert_eq!(k.dispatch(0), Some(2));
        assert_eq!(k.dispatch(11), Some(0));
        assert_eq!(k.dispatch(30), Some(1));
        assert_eq!(k.dispatch(31), Some(2));
        assert_eq!(Ketama::default().dispatch(5), None);
    }

    #[test]
    fn modula_repeats_servers_by_weight() {
        let m = Modula::new(&[(0, 1), (1, 2)]);
        assert_eq!(
            (0..6).map(|h| m.dispatch(h).unwrap()).collect::<Vec<_>>(),
            [0, 1, 1, 0, 1, 1]
        );
    }
}
