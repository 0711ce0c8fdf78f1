//! `osmium-bench hitratio` over real sockets: a small cache-aside replay
//! against genuine memcached and osmium (each started by the benchmark on a
//! free loopback port and stopped by it). Nothing is timed and no ratio is
//! asserted: only that the replay ran, every hit carried its key's value,
//! one-time scan keys always missed, and the warm-up check reports whether
//! the cache was full.

use std::path::PathBuf;
use std::process::Command;

use crate::common;
use common::memcached_bin;

/// The servers this machine has: `--servers`, and the `--osmium` and
/// `--memcached` options naming their binaries (memcached by
/// `common::memcached_bin`: MEMCACHED_BIN, else the oracle).
fn servers() -> Option<(String, Vec<String>)> {
    let mut names = Vec::new();
    let mut binaries = Vec::new();
    if let Some(memcached) = memcached_bin() {
        names.push("memcached");
        binaries.extend(["--memcached".to_string(), memcached.display().to_string()]);
    }
    let osmium = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    if osmium.is_file() {
        names.push("osmium");
    } else {
        eprintln!("SKIP osmium: build it first with `cargo build --release`");
    }
    binaries.extend(["--osmium".to_string(), osmium.display().to_string()]);
    (!names.is_empty()).then(|| (names.join(","), binaries))
}

/// Runs a small replay; its JSON and its stderr.
fn replay(
    servers: &str,
    binaries: &[String],
    memory: &str,
    warmup: &str,
) -> (serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(["hitratio", "--servers", servers])
        .args(binaries)
        .args(["--memory", memory, "--keys", "200000", "--warmup", warmup])
        .args(["--requests", "100000", "--threads", "1", "--json"])
        .args(["--scan-len", "10000", "--scan-every", "50000"])
        .output()
        .expect("run osmium-bench");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "osmium-bench hitratio: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

#[test]
fn replays_zipf_and_scans_on_real_servers_and_checks_the_warm_up() {
    let Some((servers, binaries)) = servers() else {
        return;
    };
    // -m 8 fills and evicts within 1,000,000 requests for both servers;
    // -m 64 is far from full after 20,000.
    for (memory, warmup, full) in [("8", "1000000", true), ("64", "20000", false)] {
        let (json, stderr) = replay(&servers, &binaries, memory, warmup);
        let rows = json["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2 * servers.split(',').count(), "{json}");
        for r in rows {
            let who = format!("{} {}: {r}", r["server"], r["variant"]);
            for bad in ["bad_values", "get_errors", "set_errors"] {
                assert_eq!(r[bad], 0, "{who}");
            }
            let miss = r["miss_ratio"].as_f64().unwrap();
            assert!(miss > 0.0 && miss < 1.0, "{who}");
            assert_eq!(r["zipf_gets"], 100_000, "{who}");
            if r["variant"] == "zipf+scan" {
                // Two scans of 10,000 one-time keys: every one misses.
                assert!(r["scan_gets"].as_u64().unwrap() >= 20_000, "{who}");
                assert_eq!(r["scan_gets"], r["scan_misses"], "{who}");
            } else {
                assert_eq!(r["scan_gets"], 0, "{who}");
            }
            let evicted = r["evictions_in_warmup"].as_u64().unwrap();
            assert_eq!(evicted > 0, full, "{who}");
            let tag = format!(
                "{} -m {memory} {}: WARNING",
                r["server"].as_str().unwrap(),
                r["variant"].as_str().unwrap()
            );
            assert_eq!(stderr.contains(&tag), !full, "{tag}: {stderr}");
        }
    }
}
