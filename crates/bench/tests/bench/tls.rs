//! `osmium-bench tls` and `load --tls` over real sockets against genuine
//! memcached `-Z` (and osmium when `target/release/osmium` has been
//! built), with certificates the bench makes with the `openssl` command.
//! Nothing is timed: only that every server answered over TLS, resumed
//! when asked, and that the figures are there.

use crate::common;
use common::{bench, memcached_bin};
use std::path::PathBuf;

/// `--servers` and the binaries of the servers there are: memcached (the
/// oracle) and osmium when built (else SKIP lines).
fn servers() -> Option<(String, Vec<String>)> {
    let mut names = Vec::new();
    let mut args = Vec::new();
    if let Some(m) = memcached_bin() {
        names.push("memcached");
        args.extend(["--memcached".to_string(), m.display().to_string()]);
    }
    let osmium = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    if osmium.is_file() {
        names.push("osmium");
        args.extend(["--osmium".to_string(), osmium.display().to_string()]);
    } else {
        eprintln!("SKIP osmium: build it first with `cargo build --release`");
    }
    if names.is_empty() {
        return None;
    }
    Some((names.join(","), args))
}

/// One bench run at a time: servers of parallel runs take free ports
/// from the same pool, and a run whose server lost its port to another's
/// would handshake with the other's certificate.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(base: &[&str], servers: &(String, Vec<String>)) -> Vec<serde_json::Value> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut args: Vec<&str> = base.to_vec();
    args.extend(["--servers", &servers.0, "--threads", "1", "--json"]);
    args.extend(servers.1.iter().map(String::as_str));
    let out = bench(&args);
    let rows: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    rows.as_array().unwrap().clone()
}

#[test]
fn handshakes_full_and_resumed_on_both_versions() {
    let Some(servers) = servers() else { return };
    for version in ["1.2", "1.3"] {
        let rows = run(
            &[
                "tls",
                "handshakes",
                "--tls-version",
                version,
                "--key-type",
                "ecdsa-p256",
                "--clients",
                "2",
                "--duration",
                "0.4",
                "--warmup",
                "0.2",
                "--rounds",
                "1",
            ],
            &servers,
        );
        assert_eq!(rows.len(), 2 * servers.0.split(',').count(), "{rows:?}");
        for row in &rows {
            assert!(row["handshakes_per_sec"].as_f64().unwrap() > 0.0, "{row}");
            assert!(
                row["handshakes_per_core_sec"].as_f64().unwrap() > 0.0,
                "{row}"
            );
            let resumed = row["resumed_pct"].as_f64().unwrap();
            match row["handshake"].as_str().unwrap() {
                "full" => assert_eq!(resumed, 0.0, "TLS {version}: {row}"),
                _ => assert!(resumed > 90.0, "TLS {version}: {row}"),
            }
        }
    }
}

#[test]
fn idle_tls_connections_cost_some_ram() {
    let Some(servers) = servers() else { return };
    let rows = run(
        &[
            "tls",
            "idle",
            "--conns",
            "50",
            "--rounds",
            "1",
            "--key-type",
            "ecdsa-p256",
        ],
        &servers,
    );
    for row in &rows {
        assert_eq!(row["tls"], true, "{row}");
        assert!(row["rss_bytes_per_conn"].as_f64().is_some(), "{row}");
    }
}

#[test]
fn load_vs_over_tls_gets_every_value() {
    let Some(servers) = servers() else { return };
    for depth in ["1", "8"] {
        let rows = run(
            &[
                "load",
                "--vs",
                "--tls",
                "--tls-key-type",
                "ecdsa-p256",
                "--value-size",
                "4096",
                "--keys",
                "500",
                "--conns",
                "2",
                "--depth",
                depth,
                "--duration",
                "0.4",
                "--warmup",
                "0.1",
                "--rounds",
                "1",
            ],
            &servers,
        );
        for row in &rows {
            assert!(row["gets"].as_u64().unwrap() > 0, "{row}");
            assert_eq!(row["misses"], 0, "{row}");
            assert!(row["cpu_us_per_req"].as_f64().unwrap() > 0.0, "{row}");
        }
    }
}
