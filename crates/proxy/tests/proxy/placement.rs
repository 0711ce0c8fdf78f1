//! Key placement against the real thing: for each pool configuration,
//! keys written through nutcracker 0.5.0 land on the backend osmium-proxy's
//! ring names, and keys written through osmium-proxy land on the same
//! backends (ketama weighted and unweighted, with server names and
//! without, modula, and every hash function); keys written by pylibmc
//! (libmemcached's ketama) land where `distribution: libmemcached` and
//! `libmemcached_weighted` put them.

use crate::common;

use common::*;
use osmium_proxy::ring::Ring;
use osmium_proxy::Config;

fn pool_yaml(listen: u16, body: &str, servers: &[String]) -> String {
    let mut y = format!("pool:\n  listen: 127.0.0.1:{listen}\n{body}  servers:\n");
    for s in servers {
        y.push_str(&format!("   - {s}\n"));
    }
    y
}

fn check(
    backends: &[Proc],
    ring: &Ring,
    port: u16,
    prefix: &str,
    keys: &[String],
    via: &str,
    what: &str,
) {
    set_all(port, keys);
    let held = holders_of_all(backends, prefix, keys);
    assert_eq!(held.len(), keys.len(), "{what} via {via}: keys missing");
    let mut wrong = 0;
    let mut example = None;
    for k in keys {
        let want = ring.server_of(k.as_bytes());
        if held[k] != want {
            wrong += 1;
            example.get_or_insert(format!(
                "{k}: {via} put it on {}, ring says {want}",
                held[k]
            ));
        }
    }
    assert_eq!(
        wrong,
        0,
        "{what}: {wrong} of {} keys misplaced, e.g. {example:?}",
        keys.len()
    );
    eprintln!("{what} via {via}: {} keys placed alike", keys.len());
}

#[test]
fn keys_go_where_nutcracker_puts_them() {
    let Some(nc) = nutcracker_bin() else {
        return;
    };
    let backends: Vec<Proc> = (0..4).map(|_| backend(0)).collect();
    let addr = |i: usize, w: u32| format!("127.0.0.1:{}:{w}", backends[i].port());
    // Keys per ketama case: 10,000 (about 15 per point of a 4-server,
    // 160-points-per-server ring); 100,000 with OSMIUM_LONG_TESTS=1.
    let ketama_keys = osmium_test_harness::sized(10_000, 100_000);
    let cases: Vec<(&str, String, Vec<String>, usize)> = vec![
        (
            "ketama",
            "  hash: fnv1a_64\n  distribution: ketama\n".into(),
            (0..4).map(|i| addr(i, 1)).collect(),
            ketama_keys,
        ),
        (
            "ketama-weighted",
            "  hash: fnv1a_64\n  distribution: ketama\n".into(),
            (0..4).map(|i| addr(i, [1, 2, 3, 5][i])).collect(),
            ketama_keys,
        ),
        (
            "ketama-named",
            "  hash: md5\n  distribution: ketama\n".into(),
            (0..4)
                .map(|i| {
                    format!(
                        "{} {}",
                        addr(i, [3, 1, 1, 2][i]),
                        ["web", "db-1", "cache", "z"][i]
                    )
                })
                .collect(),
            ketama_keys,
        ),
        (
            "modula",
            "  hash: fnv1a_64\n  distribution: modula\n".into(),
            (0..4)
                .map(|i| {
                    format!(
                        "{} {}",
                        addr(i, [1, 2, 1, 1][i]),
                        ["bb", "a", "ccc", "ab"][i]
                    )
                })
                .collect(),
            osmium_test_harness::sized(5_000, 20_000),
        ),
    ];
    let mut cases = cases;
    for (name, _) in osmium_proxy::hash::HashKind::ALL {
        cases.push((
            name,
            format!("  hash: {name}\n  distribution: ketama\n"),
            (0..4).map(|i| addr(i, 1)).collect(),
            osmium_test_harness::sized(1_000, 3_000),
        ));
    }
    for (what, body, servers, n) in &cases {
        let nc_port = free_port();
        let yaml = pool_yaml(nc_port, body, servers);
        let ring = Ring::new(&Config::parse(&yaml).unwrap().pools[0]);
        let prefix = format!("nc-{what}-");
        let keys: Vec<String> = (0..*n).map(|i| format!("{prefix}{i}")).collect();
        let nc_proc = nutcracker(&nc, &yaml, nc_port);
        check(
            &backends,
            &ring,
            nc_proc.port(),
            &prefix,
            &keys,
            "nutcracker",
            what,
        );

        let px_port = free_port();
        let px = proxy(&pool_yaml(px_port, body, servers), px_port);
        let prefix = format!("px-{what}-");
        let keys: Vec<String> = (0..*n).map(|i| format!("{prefix}{i}")).collect();
        check(
            &backends,
            &ring,
            px.port(),
            &prefix,
            &keys,
            "osmium-proxy",
            what,
        );
    }
}

fn pylibmc(script: &str, args: &[String]) -> Option<String> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No module named") {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "pylibmc missing (CI=true)"
            );
            eprintln!("SKIP pylibmc: {err}");
            return None;
        }
        panic!("python3: {err}");
    }
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// pylibmc (libmemcached, `behaviors`) and osmium-proxy put 100,000 keys
/// each where the proxy's ring for `dist` with `weights` says, on three
/// servers. One test per case: the cases run in parallel.
fn libmemcached_distribution_matches_pylibmc(dist: &str, behaviors: &str, weights: [u32; 3]) {
    let backends: Vec<Proc> = (0..3).map(|_| backend(0)).collect();
    let list: Vec<String> = backends
        .iter()
        .map(|b| format!("127.0.0.1:{}", b.port()))
        .collect();
    let servers: Vec<String> = list
        .iter()
        .zip(weights)
        .map(|(s, w)| format!("{s}:{w}"))
        .collect();
    let body = format!("  distribution: {dist}\n");
    let yaml = pool_yaml(1, &body, &servers);
    let ring = Ring::new(&Config::parse(&yaml).unwrap().pools[0]);
    let label = format!("{dist}-{}{}{}", weights[0], weights[1], weights[2]);
    let prefix = format!("py-{label}-");
    let n = osmium_test_harness::sized(10_000, 100_000);
    let script = format!(
        "import sys, pylibmc\n\
         c = pylibmc.Client(sys.argv[1].split(','), behaviors={behaviors})\n\
         for i in range({n}):\n    assert c.set('{prefix}%d' % i, 'v')\n"
    );
    // pylibmc takes "host:port:weight".
    if pylibmc(&script, &[servers.join(",")]).is_none() {
        return;
    }
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let held = holders_of_all(&backends, &prefix, &keys);
    assert_eq!(held.len(), n);
    for k in &keys {
        assert_eq!(held[k], ring.server_of(k.as_bytes()), "{label}: {k}");
    }
    // And osmium-proxy itself writes them there.
    let port = free_port();
    let px = proxy(&pool_yaml(port, &body, &servers), port);
    let prefix = format!("pyx-{label}-");
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    check(
        &backends,
        &ring,
        px.port(),
        &prefix,
        &keys,
        "osmium-proxy",
        dist,
    );
}

#[test]
fn libmemcached_ketama_matches_pylibmc() {
    libmemcached_distribution_matches_pylibmc("libmemcached", r#"{"ketama": True}"#, [1, 1, 1]);
}

#[test]
fn libmemcached_ketama_with_weights_matches_pylibmc() {
    // A weight above 1 turns libmemcached's weighted ketama on.
    libmemcached_distribution_matches_pylibmc("libmemcached", r#"{"ketama": True}"#, [1, 2, 3]);
}

#[test]
fn libmemcached_weighted_matches_pylibmc() {
    libmemcached_distribution_matches_pylibmc(
        "libmemcached_weighted",
        r#"{"ketama_weighted": True}"#,
        [1, 1, 1],
    );
}

#[test]
fn libmemcached_weighted_with_weights_matches_pylibmc() {
    libmemcached_distribution_matches_pylibmc(
        "libmemcached_weighted",
        r#"{"ketama_weighted": True}"#,
        [1, 2, 3],
    );
}
