//! `osmium-bench density` over real sockets, at a tiny size: a 16 MiB
//! corpus, `-m 16`, a 64 MiB flash file, values for 1.5 x (`-m` + flash),
//! osmium with `compression=cold` and `off`: it runs, every value held is
//! read back byte for byte (the subcommand fails otherwise), the packed
//! run holds at least as many items per flash GB as the unpacked one, and
//! no flash file is left behind; and `--phases replay,gets,sets` reports
//! on every run.

use std::path::PathBuf;

use crate::common;

#[test]
fn density_with_flash_reads_every_value_back_and_packing_holds_more_per_flash_gb() {
    let osmium = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    if !osmium.is_file() {
        eprintln!("SKIP osmium: build it first with `cargo build --release`");
        return;
    }
    let dir = PathBuf::from(format!(
        "/tmp/osmium-bench-density-test-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create a directory in /tmp");
    let out = common::bench(&[
        "density",
        "--osmium",
        osmium.to_str().unwrap(),
        "--runs",
        "cold,off",
        "-m",
        "16",
        "--flash",
        "64M",
        "--factor",
        "1.5",
        "--corpus-mb",
        "16",
        "--rate",
        "0",
        "--threads",
        "2",
        "--json",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(left.is_empty(), "flash files left behind: {left:?}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{v:#}");
    let per_gb = |i: usize| rows[i]["items_per_flash_gb"].as_f64().unwrap_or(0.0);
    for r in rows {
        assert!(r["held"].as_u64().unwrap() > 0, "{r}");
        assert!(r["extstore_objects_used"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(rows[0]["run"], "cold");
    assert!(per_gb(0) >= per_gb(1), "{v:#}");
    assert!(
        rows[0]["extstore_packed_items"].as_u64().unwrap() > 0,
        "{v:#}"
    );
}

/// `--phases replay,gets,sets` at a tiny size (`-m 16`, values for 1.5 x
/// `-m`, small counts) on osmium `cold` and `off` (and memcached when it
/// is built): every phase reports on every run, the hot and cold GETs hit,
/// the replay's miss ratio is the server's, and the ratios against `off`
/// are there. No figure is held to a bound: timing is the benchmark's.
#[test]
fn density_phases_report_replay_gets_and_sets_on_every_run() {
    let osmium = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    if !osmium.is_file() {
        eprintln!("SKIP osmium: build it first with `cargo build --release`");
        return;
    }
    let memcached = common::memcached_bin();
    let runs = if memcached.is_some() {
        "cold,off,memcached"
    } else {
        "cold,off"
    };
    let mut args = vec![
        "density",
        "--osmium",
        osmium.to_str().unwrap(),
        "--runs",
        runs,
        "-m",
        "16",
        "--factor",
        "1.5",
        "--corpus-mb",
        "16",
        "--rate",
        "0",
        "--threads",
        "2",
        "--phases",
        "replay,gets,sets",
        "--gets",
        "2000",
        "--sets",
        "500",
        "--replay-requests",
        "20000",
        "--replay-warmup",
        "5000",
        "--replay-conns",
        "2",
        // Paced (25,000 requests in about 0.25 s): the pacing's path.
        "--replay-rate",
        "100000",
        "--json",
    ];
    let mc;
    if let Some(m) = &memcached {
        mc = m.to_str().unwrap().to_string();
        args.extend(["--memcached", mc.as_str()]);
    }
    let out = common::bench(&args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), runs.split(',').count(), "{v:#}");
    for r in rows {
        let replay = &r["replay"];
        assert_eq!(replay["requests"], 20000, "{r}");
        assert_eq!(replay["rate"], 100000, "{r}");
        let (hits, misses) = (
            replay["get_hits"].as_u64().unwrap(),
            replay["get_misses"].as_u64().unwrap(),
        );
        assert_eq!(hits + misses, 20000, "{r}");
        assert_eq!(replay["set_errors"], 0, "{r}");
        for set in ["hot", "cold"] {
            let g = &r["gets"][set];
            assert!(g["keys"].as_u64().unwrap() > 0, "{set}: {r}");
            assert_eq!(g["gets"], 2000, "{set}: {r}");
            assert_eq!(g["hits"], 2000, "{set}: {r}");
            assert!(g["latency"]["p99_us"].as_f64().unwrap() > 0.0, "{r}");
        }
        let sets = &r["sets"];
        assert!(sets["cpu_us_per_set"].as_f64().is_some(), "{r}");
        assert_eq!(sets["single"]["sets"], 500, "{r}");
        assert_eq!(sets["single"]["errors"], 0, "{r}");
    }
    let cold = &v["ratios"]["cold"];
    for name in [
        "hot GET CPU vs off",
        "hot GET p99 vs off",
        "cold GET p99 vs off",
        "SET CPU vs off",
        "replay miss ratio vs off",
    ] {
        assert!(cold[name]["value"].as_f64().is_some(), "{name}: {v:#}");
    }
}
