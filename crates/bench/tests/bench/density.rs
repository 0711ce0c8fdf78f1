//! `osmium-bench density` over real sockets, at a tiny size: a 16 MiB
//! corpus, `-m 16`, a 64 MiB flash file, values for 1.5 x (`-m` + flash),
//! osmium with `compression=cold` and `off`: it runs, every value held is
//! read back byte for byte (the subcommand fails otherwise), the packed
//! run holds at least as many items per flash GB as the unpacked one, and
//! no flash file is left behind.

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
