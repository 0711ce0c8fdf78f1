//! What a ring change moves: the key-hash ranges whose owner differs
//! between two rings of one pool ([`moved_ranges`]), with the old and the
//! new owner by server name (a server keeps its identity across the
//! change by its name, as nutcracker's ketama hashes it).
//!
//! On a continuum (nutcracker's ketama, libmemcached's two), the owner of
//! placement hash `h` is the server of the first point ≥ `h`, wrapping to
//! the first point: between two consecutive point values of either ring
//! both owners are constant, so the moved keys are a union of intervals of
//! the hash, cut at the two rings' points. `modula` (owner `h % entries`)
//! and `random` (no owner) have no such intervals, nor do two rings that
//! hash keys differently (another hash function or hash tag): then the
//! answer is [`Moves::NotByRange`], and a move has to list every key of
//! each old owner (an unfiltered dump) and decide key by key with
//! [`Ring::owner_name`] (`modula` can still narrow an old owner's dump
//! with the filter's `modula=` form, see `crate::filter`).

use super::{Distribution, Ring};
use crate::filter::{filter_commands, DumpFilter, Select, MAX_SELECTORS, UNFILTERED_MGDUMP};

/// Key hashes `lo..=hi` (placement hashes, [`Ring::placement_hash_of`])
/// whose owner was `from` and is `to` (server names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovedRange {
    /// Inclusive.
    pub lo: u32,
    /// Inclusive.
    pub hi: u32,
    /// The name of the server that owned the range.
    pub from: String,
    /// The name of the server that owns it now.
    pub to: String,
}

impl MovedRange {
    /// `(lo, hi)`.
    pub fn span(&self) -> (u32, u32) {
        (self.lo, self.hi)
    }

    /// Whether `hash` lies in the range.
    pub fn contains(&self, hash: u32) -> bool {
        (self.lo..=self.hi).contains(&hash)
    }
}

/// Why a ring change has no moved ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotByRange {
    /// One of the rings is `modula`: owners follow `hash % entries`.
    Modula,
    /// One of the rings is `random`: keys have no owner.
    Random,
    /// The rings place keys by different hashes (function or hash tag),
    /// or one is nutcracker's and the other libmemcached's with unrelated
    /// key hashes.
    HashChanged,
}

/// The keys a ring change moves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Moves {
    /// Every key whose placement hash lies in one of these ranges changes
    /// owner, from the range's `from` to its `to`; no other key does.
    /// Sorted by `lo`, disjoint, adjacent ranges with the same owners
    /// merged; empty when nothing moves.
    Ranges(Vec<MovedRange>),
    /// Not intervals of the hash: a move lists all keys of each old owner
    /// and compares the two rings' owners key by key.
    NotByRange(NotByRange),
}

impl Moves {
    /// The ranges, when the move is by range.
    pub fn ranges(&self) -> Option<&[MovedRange]> {
        match self {
            Moves::Ranges(r) => Some(r),
            Moves::NotByRange(_) => None,
        }
    }

    /// The spans of the ranges whose old owner is `server` (by name): what
    /// that server is asked to dump (see `crate::filter::filter_commands`).
    pub fn spans_from(&self, server: &str) -> Vec<(u32, u32)> {
        self.ranges()
            .unwrap_or_default()
            .iter()
            .filter(|r| r.from == server)
            .map(MovedRange::span)
            .collect()
    }
}

/// The key-hash ranges whose owner (by server name, every server up)
/// differs between `old` and `new`.
pub fn moved_ranges(old: &Ring, new: &Ring) -> Moves {
    for ring in [old, new] {
        match ring.distribution() {
            Distribution::Modula => return Moves::NotByRange(NotByRange::Modula),
            Distribution::Random => return Moves::NotByRange(NotByRange::Random),
            _ => {}
        }
    }
    if old.placement_hash() != new.placement_hash() || old.hash_tag() != new.hash_tag() {
        return Moves::NotByRange(NotByRange::HashChanged);
    }
    let (Some(mut cuts), Some(more)) = (old.point_values(), new.point_values()) else {
        return Moves::NotByRange(NotByRange::Modula);
    };
    cuts.extend(more);
    cuts.sort_unstable();
    cuts.dedup();
    let segments = segments(&cuts);
    let mut out: Vec<MovedRange> = Vec::new();
    for (lo, hi) in segments {
        let (Some(a), Some(b)) = (old.owner_at(hi), new.owner_at(hi)) else {
            continue;
        };
        let (from, to) = (old.name(a), new.name(b));
        if from == to {
            continue;
        }
        if let Some(last) = out.last_mut() {
            if last.hi.checked_add(1) == Some(lo) && last.from == from && last.to == to {
                last.hi = hi;
                continue;
            }
        }
        out.push(MovedRange {
            lo,
            hi,
            from: from.to_string(),
            to: to.to_string(),
        });
    }
    Moves::Ranges(out)
}

/// The hash space cut after each of `cuts` (sorted, unique): segments
/// `[lo, cut]`, then `[last cut + 1, MAX]` (which wraps to the first
/// points). No point lies inside a segment, so on a continuum with these
/// points (or a subset of them) every hash of a segment has the owner of
/// its upper end.
fn segments(cuts: &[u32]) -> Vec<(u32, u32)> {
    let mut segments: Vec<(u32, u32)> = Vec::with_capacity(cuts.len() + 1);
    let mut lo = Some(0u32);
    for &cut in cuts {
        let Some(from) = lo else { break };
        segments.push((from, cut));
        lo = cut.checked_add(1);
    }
    if let Some(from) = lo {
        segments.push((from, u32::MAX));
    }
    segments
}

/// The hash ranges server `name` owns on `ring`'s continuum (merged,
/// sorted); None when the ring has no continuum (`modula`, `random`).
pub fn owned_spans(ring: &Ring, name: &str) -> Option<Vec<(u32, u32)>> {
    let mut cuts = ring.point_values()?;
    cuts.dedup();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (lo, hi) in segments(&cuts) {
        if ring.owner_at(hi).map(|i| ring.name(i)) != Some(name) {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1.checked_add(1) == Some(lo) => last.1 = hi,
            _ => out.push((lo, hi)),
        }
    }
    Some(out)
}

/// The `lru_crawler mgdump` lines (each ending `\r\n`) that ask server
/// `server` (by name) of `old` for the keys that may leave it for `new`:
/// when the move is by range, the moved ranges it owned (none when it
/// loses no range: nothing to ask); else every key it owns on `old`: its
/// ranges of `old`'s continuum, or for a `modula` ring its table entries
/// (`modula=` filters); for `random`, the unfiltered dump. The range form
/// lists exactly the keys that left `server`, the others every key it
/// holds for the pool, so the caller checks each key against both rings.
/// A server that answers the first line `ERROR` (memcached) is sent
/// `crate::filter::UNFILTERED_MGDUMP` instead.
pub fn dump_commands(old: &Ring, new: &Ring, server: &str) -> Vec<String> {
    let (Some(hash), tag) = (old.placement_hash(), old.hash_tag()) else {
        return vec![UNFILTERED_MGDUMP.to_string()];
    };
    let moves = moved_ranges(old, new);
    if let Moves::Ranges(_) = moves {
        return filter_commands(moves.spans_from(server), hash, tag);
    }
    if let Some(spans) = owned_spans(old, server) {
        return filter_commands(spans, hash, tag);
    }
    if let Some((n, picks)) = old.modula_entries(server) {
        if picks.is_empty() || n == 0 {
            return Vec::new();
        }
        return picks
            .chunks(MAX_SELECTORS)
            .map(|chunk| {
                DumpFilter {
                    hash,
                    tag,
                    select: Select::Modula {
                        n,
                        picks: chunk.to_vec(),
                    },
                }
                .command()
            })
            .collect();
    }
    vec![UNFILTERED_MGDUMP.to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::HashKind;
    use crate::ring::{PoolSpec, ServerSpec};

    fn ring(distribution: Distribution, names: &[&str]) -> Ring {
        Ring::new(PoolSpec {
            distribution,
            hash: HashKind::Fnv1a64,
            hash_tag: None,
            servers: names
                .iter()
                .enumerate()
                .map(|(i, n)| ServerSpec {
                    name: n.to_string(),
                    weight: 1,
                    host: "127.0.0.1".into(),
                    port: 40000 + i as u16,
                })
                .collect(),
        })
    }

    #[test]
    fn the_same_ring_moves_nothing() {
        let a = ring(Distribution::Ketama, &["a", "b", "c"]);
        let b = ring(Distribution::Ketama, &["c", "a", "b"]);
        assert_eq!(moved_ranges(&a, &b), Moves::Ranges(Vec::new()));
    }

    #[test]
    fn a_new_server_takes_ranges_from_the_others() {
        let old = ring(Distribution::Ketama, &["a", "b"]);
        let new = ring(Distribution::Ketama, &["a", "b", "c"]);
        let Moves::Ranges(r) = moved_ranges(&old, &new) else {
            panic!("by range")
        };
        assert!(!r.is_empty());
        assert!(r.iter().all(|m| m.to == "c" && m.from != "c"));
        assert!(r.windows(2).all(|w| w[0].hi < w[1].lo));
    }

    #[test]
    fn modula_random_and_another_hash_are_not_by_range() {
        let k = ring(Distribution::Ketama, &["a", "b"]);
        let m = ring(Distribution::Modula, &["a", "b"]);
        let r = ring(Distribution::Random, &["a", "b"]);
        let l = ring(Distribution::Libmemcached, &["a", "b"]);
        assert_eq!(moved_ranges(&k, &m), Moves::NotByRange(NotByRange::Modula));
        assert_eq!(moved_ranges(&r, &k), Moves::NotByRange(NotByRange::Random));
        assert_eq!(
            moved_ranges(&k, &l),
            Moves::NotByRange(NotByRange::HashChanged)
        );
        assert_eq!(moved_ranges(&k, &m).ranges(), None);
    }

    #[test]
    fn dump_commands_by_distribution() {
        let k2 = ring(Distribution::Ketama, &["a", "b"]);
        let k3 = ring(Distribution::Ketama, &["a", "b", "c"]);
        let a = dump_commands(&k2, &k3, "a");
        assert_eq!(a.len(), 1);
        assert!(a[0].starts_with("lru_crawler mgdump hash keyhash=fnv1a_64 ranges="));
        // A server that gives up nothing is asked for nothing.
        assert!(dump_commands(&k2, &k2, "a").is_empty());
        // modula: every entry the old owner has.
        let m = ring(Distribution::Modula, &["a", "b"]);
        assert_eq!(
            dump_commands(&m, &k3, "b"),
            ["lru_crawler mgdump hash keyhash=fnv1a_64 modula=2:1\r\n"]
        );
        let r = ring(Distribution::Random, &["a", "b"]);
        assert_eq!(dump_commands(&r, &k3, "a"), [UNFILTERED_MGDUMP]);
        // ketama to modula: every range "a" owned.
        let owned = owned_spans(&k2, "a").unwrap();
        let lines = dump_commands(&k2, &m, "a");
        assert_eq!(
            lines,
            filter_commands(owned.clone(), HashKind::Fnv1a64, None)
        );
        for h in [0u32, 1 << 20, 1 << 31, u32::MAX] {
            let mine = owned.iter().any(|&(lo, hi)| (lo..=hi).contains(&h));
            assert_eq!(mine, k2.owner_at(h) == Some(0), "{h}");
        }
    }
}
