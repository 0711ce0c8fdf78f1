//! `osmium-bench flash --mode density` over real sockets, at a tiny size:
//! `-m 16`, 1 KiB values, 4 x `-m` of item data (64 MiB), a 256 MiB flash
//! file in a fresh directory under /tmp. Against genuine memcached (when the
//! oracle is built) it asserts that extstore kept items on flash
//! (`extstore_objects_used` > 0), that every value read back is byte-exact
//! and that the report has its fields; against osmium only that it runs and
//! returns no wrong value (its flash tier is still being written). Both:
//! no flash file left behind. About 10 s.

use std::path::PathBuf;
use std::process::Command;

use crate::common;
use common::memcached_bin;

/// Runs the density mode on `servers` with `extra` arguments; the JSON.
fn density(servers: &str, extra: &[String]) -> serde_json::Value {
    let dir = PathBuf::from(format!(
        "/tmp/osmium-bench-flash-test-{}-{servers}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create a directory in /tmp");
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(["flash", "--mode", "density", "--servers", servers])
        .args(extra)
        .args(["-m", "16", "--value-sizes", "1024", "--data-ratio", "4"])
        .args(["--flash-size", "256M", "--threads", "2", "--json"])
        .arg("--dir")
        .arg(&dir)
        .output()
        .expect("run osmium-bench");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "osmium-bench flash: {stderr}");
    assert!(left.is_empty(), "flash files left behind: {left:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["benchmark"], "flash", "{v:#}");
    assert_eq!(v["config"]["memory_mb"], 16, "{v:#}");
    v
}

/// The fields every density row has, and no wrong value.
fn check_row(r: &serde_json::Value) {
    for field in [
        "round",
        "server",
        "value_size",
        "items",
        "kept",
        "missing",
        "wrong",
        "rss",
        "base_rss",
        "ram_per_item_kept",
        "marginal_ram_per_flash_item",
        "extstore_objects_used",
        "load_seconds",
    ] {
        assert!(r.get(field).is_some(), "no {field} in {r}");
    }
    assert_eq!(r["wrong"], 0, "{r}");
    assert_eq!(r["value_size"], 1024, "{r}");
    let items = r["items"].as_u64().unwrap();
    // 4 x 16 MiB of 1 KiB values with 16 B keys.
    assert_eq!(items, 64_528, "{r}");
    let (kept, missing) = (r["kept"].as_u64().unwrap(), r["missing"].as_u64().unwrap());
    assert_eq!(kept + missing, items, "{r}");
    assert!(r["rss"].as_u64().unwrap() > 0 && r["base_rss"].as_u64().unwrap() > 0);
}

#[test]
fn memcached_keeps_items_on_flash_byte_exact() {
    let Some(memcached) = memcached_bin() else {
        return;
    };
    let v = density(
        "memcached",
        &["--memcached".into(), memcached.display().to_string()],
    );
    let rows = v["density"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v:#}");
    let r = &rows[0];
    check_row(r);
    assert_eq!(r["server"], "memcached");
    let on_flash = r["extstore_objects_used"].as_u64().unwrap();
    assert!(on_flash > 0, "memcached put nothing on flash: {r}");
    let kept = r["kept"].as_u64().unwrap();
    // 4 x -m of data: far more kept than -m alone holds (~14k items).
    assert!(kept > 30_000, "{r}");
    assert!(r["ram_per_item_kept"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["marginal_ram_per_flash_item"].is_number(), "{r}");
    assert!(r["flash_file_allocated"].as_u64().unwrap() > 0, "{r}");
    let medians = v["density"]["medians"].as_array().unwrap();
    assert_eq!(medians[0]["server"], "memcached", "{v:#}");
    assert_eq!(medians[0]["kept"].as_f64().unwrap() as u64, kept);
}

#[test]
fn osmium_runs_the_density_mode() {
    let osmium = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    if !osmium.is_file() {
        eprintln!("SKIP osmium: build it first with `cargo build --release`");
        return;
    }
    let v = density("osmium", &["--osmium".into(), osmium.display().to_string()]);
    let rows = v["density"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{v:#}");
    check_row(&rows[0]);
    assert_eq!(rows[0]["server"], "osmium");
    eprintln!(
        "osmium: {} of {} kept, {} on flash",
        rows[0]["kept"], rows[0]["items"], rows[0]["extstore_objects_used"]
    );
}
