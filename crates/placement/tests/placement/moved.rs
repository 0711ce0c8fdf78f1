//! Properties of `moved_ranges` and of the dump filter's lines: a key is in
//! a moved range from A to B exactly when its owner was A and is B; the
//! ranges are sorted and disjoint; growing or shrinking a pool moves about
//! the share of the server added or removed; the filter reads back what
//! `filter_commands` and `DumpFilter::tokens` write, and no input makes
//! its parser panic.

use osmium_placement::filter::{filter_commands, DumpFilter, FilterError, Select, MAX_SELECTORS};
use osmium_placement::hash::HashKind;
use osmium_placement::ring::{
    dump_commands, moved_ranges, owned_spans, Distribution, MovedRange, Moves, PoolSpec, Ring,
    ServerSpec,
};
use proptest::prelude::*;

const NAMES: [&str; 8] = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
];

fn spec(
    distribution: Distribution,
    hash: HashKind,
    tag: bool,
    servers: &[(usize, u32)],
) -> PoolSpec {
    PoolSpec {
        distribution,
        hash,
        hash_tag: tag.then_some(*b"{}"),
        servers: servers
            .iter()
            .map(|&(i, weight)| ServerSpec {
                name: NAMES[i].to_string(),
                weight,
                host: "127.0.0.1".to_string(),
                port: 41000 + i as u16,
            })
            .collect(),
    }
}

fn ranges(m: Moves) -> Vec<MovedRange> {
    match m {
        Moves::Ranges(r) => r,
        Moves::NotByRange(why) => panic!("not by range: {why:?}"),
    }
}

/// A non-empty subset of the servers, each with a weight.
fn servers() -> impl Strategy<Value = Vec<(usize, u32)>> {
    proptest::collection::btree_map(0..NAMES.len(), 1u32..4, 1..6)
        .prop_map(|m| m.into_iter().collect())
}

fn distribution() -> impl Strategy<Value = Distribution> {
    prop_oneof![
        Just(Distribution::Ketama),
        Just(Distribution::Libmemcached),
        Just(Distribution::LibmemcachedWeighted),
    ]
}

fn hash() -> impl Strategy<Value = HashKind> {
    prop_oneof![
        Just(HashKind::Fnv1a64),
        Just(HashKind::Md5),
        Just(HashKind::Murmur),
        Just(HashKind::OneAtATime),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_key_moves_exactly_when_its_owner_changes(
        dist in distribution(),
        hash in hash(),
        tag in any::<bool>(),
        old in servers(),
        new in servers(),
        keys in proptest::collection::vec("[a-z0-9:{}]{1,24}", 200),
    ) {
        let old = Ring::new(spec(dist, hash, tag, &old));
        let new = Ring::new(spec(dist, hash, tag, &new));
        let moved = ranges(moved_ranges(&old, &new));
        // What each old server is asked to dump, as the server parses it.
        let asked: Vec<(String, Vec<DumpFilter>)> = old_names(&old)
            .into_iter()
            .map(|name| {
                let lines = dump_commands(&old, &new, &name);
                let filters = lines.iter().map(|l| parse_line(l)).collect();
                (name, filters)
            })
            .collect();
        for w in moved.windows(2) {
            prop_assert!(w[0].lo <= w[0].hi && w[0].hi < w[1].lo, "{:?}", w);
        }
        for key in &keys {
            let key = key.as_bytes();
            let h = old.placement_hash_of(key);
            prop_assert_eq!(h, new.placement_hash_of(key));
            let (a, b) = (old.owner_name(key), new.owner_name(key));
            let hit: Vec<&MovedRange> = moved.iter().filter(|r| r.contains(h)).collect();
            if a == b {
                prop_assert!(hit.is_empty(), "{:?} stays on {} but is in {:?}", key, a, hit);
            } else {
                prop_assert_eq!(hit.len(), 1);
                prop_assert_eq!((hit[0].from.as_str(), hit[0].to.as_str()), (a, b));
            }
            if old.len() > 1 {
                prop_assert_eq!(old.owner_at(h), Some(old.server_of(key)));
            }
            let owned = owned_spans(&old, a).unwrap();
            prop_assert!(owned.iter().any(|&(lo, hi)| (lo..=hi).contains(&h)));
            // The key is listed by its old owner's dump exactly when it moves.
            for (name, filters) in &asked {
                let listed = filters.iter().filter(|f| f.matches(key)).count();
                prop_assert_eq!(listed, usize::from(name == a && a != b), "{} by {}", String::from_utf8_lossy(key), name);
            }
        }
    }

    #[test]
    fn filter_lines_list_exactly_the_spans(
        spans in proptest::collection::vec((any::<u32>(), any::<u32>()), 0..200),
        probes in proptest::collection::vec(any::<u32>(), 100),
        hash in hash(),
        tag in proptest::option::of(any::<[u8; 2]>()),
    ) {
        let lines = filter_commands(spans.clone(), hash, tag);
        let filters: Vec<DumpFilter> = lines
            .iter()
            .map(|l| {
                prop_assert!(l.len() < 2048 && l.ends_with("\r\n"));
                let tokens: Vec<&[u8]> = l.trim_end_matches("\r\n").split(' ').map(str::as_bytes).collect();
                prop_assert_eq!(&tokens[..3], &[&b"lru_crawler"[..], b"mgdump", b"hash"]);
                let f = DumpFilter::parse(tokens[3..].iter().copied());
                prop_assert!(f.is_ok(), "{}: {:?}", l, f);
                let f = f.unwrap();
                prop_assert_eq!(f.hash, hash);
                prop_assert_eq!(f.tag, tag);
                Ok(f)
            })
            .collect::<Result<_, TestCaseError>>()?;
        let edges = spans.iter().flat_map(|&(a, b)| [a, b, a.wrapping_sub(1), b.wrapping_add(1)]);
        for h in probes.into_iter().chain(edges) {
            let want = spans.iter().any(|&(a, b)| (a.min(b)..=a.max(b)).contains(&h));
            let got = filters.iter().filter(|f| f.matches_hash(h)).count();
            prop_assert_eq!(got, usize::from(want), "hash {}", h);
        }
    }

    #[test]
    fn a_filter_reads_back_its_tokens(
        hash in hash(),
        tag in proptest::option::of(any::<[u8; 2]>()),
        spans in proptest::collection::vec((any::<u32>(), any::<u32>()), 1..MAX_SELECTORS),
        n in 1u32..1000,
        picks in proptest::collection::btree_set(any::<u32>(), 1..MAX_SELECTORS),
        modula in any::<bool>(),
    ) {
        let select = if modula {
            let mut p: Vec<u32> = picks.into_iter().map(|p| p % n).collect();
            p.sort_unstable();
            p.dedup();
            Select::Modula { n, picks: p }
        } else {
            let line = filter_commands(spans, hash, tag);
            let tokens: Vec<&str> = line[0].trim_end().split(' ').collect();
            DumpFilter::parse(tokens[3..].iter().map(|t| t.as_bytes())).unwrap().select
        };
        let f = DumpFilter { hash, tag, select };
        let tokens = f.tokens();
        let back = DumpFilter::parse(tokens.split(' ').map(str::as_bytes));
        prop_assert_eq!(back, Ok(f));
    }

    #[test]
    fn no_filter_input_panics(tokens in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..6)) {
        let _ = DumpFilter::parse(tokens.iter().map(|t| t.as_slice()));
    }

    #[test]
    fn near_misses_are_refused_not_misread(
        lo in any::<u32>(),
        junk in "[-,:=x0-9a-z]{0,12}",
    ) {
        let line = format!("keyhash=md5 ranges={lo}-{junk}");
        let got = DumpFilter::parse(line.split(' ').map(str::as_bytes));
        if let Ok(f) = got {
            // Only a well-formed list of ranges is taken.
            let Select::Ranges(r) = &f.select else { panic!() };
            prop_assert!(!r.is_empty());
            prop_assert_eq!(DumpFilter::parse(f.tokens().split(' ').map(str::as_bytes)), Ok(f.clone()));
        } else {
            prop_assert!(matches!(got, Err(FilterError::BadNumber | FilterError::TooMany)));
        }
    }
}

fn old_names(ring: &Ring) -> Vec<String> {
    (0..ring.len()).map(|i| ring.name(i).to_string()).collect()
}

/// A dump command line's filter, as the server reads it.
fn parse_line(line: &str) -> DumpFilter {
    let tokens: Vec<&str> = line.trim_end_matches("\r\n").split(' ').collect();
    assert_eq!(&tokens[..3], ["lru_crawler", "mgdump", "hash"]);
    DumpFilter::parse(tokens[3..].iter().map(|t| t.as_bytes())).unwrap()
}

/// The share of `keys` random keys whose owner differs between the rings,
/// and the share `moved_ranges` says moved (they must agree).
fn moved_share(old: &[(usize, u32)], new: &[(usize, u32)], dist: Distribution) -> f64 {
    let old = Ring::new(spec(dist, HashKind::Fnv1a64, false, old));
    let new = Ring::new(spec(dist, HashKind::Fnv1a64, false, new));
    let moved = ranges(moved_ranges(&old, &new));
    let keys = 40_000u32;
    let mut n = 0;
    for i in 0..keys {
        let key = format!("user:{:08x}", i.wrapping_mul(2_654_435_761));
        let h = old.placement_hash_of(key.as_bytes());
        let in_range = moved.iter().any(|r| r.contains(h));
        assert_eq!(
            in_range,
            old.owner_name(key.as_bytes()) != new.owner_name(key.as_bytes())
        );
        n += usize::from(in_range);
    }
    n as f64 / keys as f64
}

#[test]
fn adding_a_fifth_server_moves_about_a_fifth() {
    let four = [(0, 1), (1, 1), (2, 1), (3, 1)];
    let five = [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)];
    for dist in [Distribution::Ketama, Distribution::Libmemcached] {
        let share = moved_share(&four, &five, dist);
        assert!((0.15..0.25).contains(&share), "{dist:?}: {share}");
        // Removing it again moves the same keys back.
        let back = moved_share(&five, &four, dist);
        assert!((share - back).abs() < 1e-9, "{dist:?}: {share} vs {back}");
        // Removing one of four moves about its quarter.
        let three = moved_share(&four, &four[1..], dist);
        assert!((0.19..0.31).contains(&three), "{dist:?}: {three}");
    }
}

#[test]
fn every_moved_key_of_a_grown_pool_goes_to_the_new_server() {
    let four = [(0, 1), (1, 1), (2, 1), (3, 1)];
    let five = [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)];
    let old = Ring::new(spec(Distribution::Ketama, HashKind::Fnv1a64, false, &four));
    let new = Ring::new(spec(Distribution::Ketama, HashKind::Fnv1a64, false, &five));
    let moves = moved_ranges(&old, &new);
    let r = moves.ranges().unwrap();
    assert!(r.iter().all(|m| m.to == NAMES[4]));
    // Each old server gives up some ranges; their spans cover what moved.
    for name in &NAMES[..4] {
        assert!(!moves.spans_from(name).is_empty(), "{name}");
    }
    let total: usize = NAMES[..4].iter().map(|n| moves.spans_from(n).len()).sum();
    assert_eq!(total, r.len());
}

#[test]
fn a_modula_or_rehashed_move_asks_each_old_owner_for_all_its_keys() {
    let servers = [(0, 1), (1, 3), (2, 2)];
    let modula = Ring::new(spec(Distribution::Modula, HashKind::Murmur, true, &servers));
    let ketama = Ring::new(spec(Distribution::Ketama, HashKind::Md5, true, &servers));
    for (old, new) in [(&modula, &ketama), (&ketama, &modula)] {
        assert!(moved_ranges(old, new).ranges().is_none());
        for name in old_names(old) {
            let filters: Vec<DumpFilter> = dump_commands(old, new, &name)
                .iter()
                .map(|l| parse_line(l))
                .collect();
            for i in 0..3000 {
                let key = format!("k:{{{}}}:{i}", i % 101);
                let listed = filters.iter().filter(|f| f.matches(key.as_bytes())).count();
                assert_eq!(
                    listed,
                    usize::from(old.owner_name(key.as_bytes()) == name),
                    "{key} {name}"
                );
            }
        }
    }
}
