//! `osmium-bench restart` over real sockets: 5,000 mixed-size items, one
//! round, on osmium (and genuine memcached when the oracle is built), memory
//! files in a fresh directory under /dev/shm. Asserts that osmium has every
//! item back byte-exact after a graceful stop (SIGUSR1) and after kill -9,
//! that memcached has every item back after the graceful stop and returns no
//! wrong value after kill -9 (it starts empty then), that every restart was
//! timed, and that no memory file is left behind. Restart times are not
//! judged.

use std::path::PathBuf;
use std::process::Command;

use crate::common;
use common::memcached_bin;

const ITEMS: u64 = 5_000;

#[test]
fn osmium_keeps_every_item_through_a_graceful_stop_and_kill_9() {
    let osmium = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    if !osmium.is_file() {
        eprintln!("SKIP osmium: build it first with `cargo build --release`");
        return;
    }
    let mut names = vec!["osmium"];
    let mut args: Vec<String> = vec!["--osmium".into(), osmium.display().to_string()];
    if let Some(memcached) = memcached_bin() {
        names.insert(0, "memcached");
        args.extend(["--memcached".into(), memcached.display().to_string()]);
    }
    let dir = PathBuf::from(format!(
        "/dev/shm/osmium-bench-restart-test-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create a directory in /dev/shm");

    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(["restart", "--servers", &names.join(",")])
        .args(&args)
        .args(["--items", &ITEMS.to_string(), "--rounds", "1", "-m", "128"])
        .args(["--large-fraction", "0.02", "--threads", "2", "--json"])
        .arg("--dir")
        .arg(&dir)
        .output()
        .expect("run osmium-bench");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "osmium-bench restart: {stderr}");
    assert!(left.is_empty(), "memory files left behind: {left:?}");

    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["items"], ITEMS);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * names.len(), "{v:#}");
    for r in rows {
        let (server, after) = (r["server"].as_str().unwrap(), r["after"].as_str().unwrap());
        let what = format!("{server} after {after}: {r}");
        assert_eq!(r["wrong"], 0, "{what}");
        assert!(r["up_ms"].as_f64().unwrap() > 0.0, "{what}");
        if server == "memcached" && after == "kill9" {
            eprintln!("memcached after kill -9: {} % back", r["back_pct"]);
            continue;
        }
        assert_eq!(r["found"], ITEMS, "{what}");
        assert_eq!(r["missing"], 0, "{what}");
        assert_eq!(r["back_pct"], 100.0, "{what}");
        assert!(r["restart_ms"].as_f64().unwrap() > 0.0, "{what}");
        assert!(
            r["restart_lines"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l.as_str().unwrap().contains("[restart]")),
            "{what}"
        );
    }
}
