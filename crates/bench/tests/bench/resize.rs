//! `osmium-bench cluster --mode resize` over real sockets, tiny: 4,000
//! keys, 4 clients, 2-second phases, every contender once (nutcracker when
//! it is on PATH). Asserts that the run finishes and reports every field:
//! per change the keys moved, the extra database reads, failures,
//! reconnects, the switch; and a final read-back in which no key is older
//! than its last acknowledged write and none is wrong. An osmium-proxy
//! that cannot reload yet is restarted instead, and the report says so.
//! The figures themselves are not judged.

use std::path::PathBuf;
use std::process::Command;

const KEYS: u64 = 4_000;

/// osmium and osmium-proxy beside the osmium-bench under test, else the
/// release build's.
fn binary(name: &str) -> Option<PathBuf> {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_osmium-bench"));
    let release = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release");
    [
        bench.parent().map(|d| d.join(name)),
        Some(release.join(name)),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file())
}

fn on_path(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn resize_runs_and_reports_every_field() {
    let (Some(osmium), Some(proxy)) = (binary("osmium"), binary("osmium-proxy")) else {
        eprintln!(
            "SKIP: build osmium and osmium-proxy first (`cargo build -p osmium-server -p osmium-proxy`)"
        );
        return;
    };
    let nutcracker = on_path("nutcracker");
    let contenders = if nutcracker {
        "warm,plain,nutcracker"
    } else {
        eprintln!("nutcracker is not on PATH: osmium-proxy only");
        "warm,plain"
    };
    let plot = std::env::temp_dir().join(format!("osmium-resize-test-{}.svg", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(["cluster", "--mode", "resize", "--json", "--quick"])
        .arg("--osmium")
        .arg(&osmium)
        .arg("--proxy")
        .arg(&proxy)
        .args(["--keys", &KEYS.to_string(), "--clients", "4"])
        .args([
            "--phase-seconds",
            "2",
            "--warmup-seconds",
            "1",
            "--threads",
            "1",
        ])
        .args(["--contenders", contenders])
        .arg("--plot")
        .arg(&plot)
        .output()
        .expect("run osmium-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "osmium-bench cluster --mode resize: {stderr}"
    );
    let svg = std::fs::read_to_string(&plot).expect("the chart");
    let _ = std::fs::remove_file(&plot);
    assert!(svg.starts_with("<svg") && svg.contains("database reads per second"));

    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), contenders.split(',').count(), "{v:#}");
    for r in runs {
        let what = format!("{}: {r}", r["name"]);
        let changes = r["changes"].as_array().unwrap();
        assert_eq!(changes.len(), 2, "{what}");
        assert_eq!(changes[0]["change"], "add", "{what}");
        assert_eq!(changes[1]["change"], "remove", "{what}");
        for c in changes {
            for field in [
                "moved_keys_ring",
                "extra_db_reads",
                "failed",
                "reconnects",
                "p99_change_us",
                "switch_s",
                "migration_s",
                "moved_keys",
                "moved_bytes",
                "server_cpu_s",
                "warm_reads",
            ] {
                assert!(c.get(field).is_some(), "{field} missing: {what}");
            }
            let moved = c["moved_keys_ring"].as_u64().unwrap();
            // About a fifth of the keys move each time; the ring's points
            // depend on the ports, so its shares vary from run to run.
            assert!(moved > 0 && moved < KEYS / 2, "{what}");
        }
        let check = &r["check"];
        assert_eq!(
            check["checked"].as_u64().unwrap() + check["unsure"].as_u64().unwrap(),
            KEYS,
            "{what}"
        );
        assert_eq!(check["older"], 0, "{what}");
        assert_eq!(check["wrong"], 0, "{what}");
        assert_eq!(r["stale_reads"], 0, "{what}");
        assert_eq!(r["wrong_reads"], 0, "{what}");
        assert_eq!(r["evictions"], 0, "{what}");
        assert!(r["seconds"].as_array().unwrap().len() == 6, "{what}");
        let restarted = r["contender"] == "nutcracker"
            || r["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().contains("reload not supported"));
        if restarted {
            // Every client lost its connection at each restart.
            for c in changes {
                assert!(c["reconnects"].as_u64().unwrap() >= 1, "{what}");
            }
        }
    }
}
