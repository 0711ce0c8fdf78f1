//! `osmium-bench hotkeys` against osmium (`target/release/osmium`, when
//! built): it drives a zipf load of gets and sets, asks `stats hotkeys`
//! while it runs and compares the answer with what it sent over the
//! window the answer states. A short open-loop run at a low rate, where
//! osmium's default (adaptive) sampling counts every request: the mode
//! works end to end, reads (two keys per get) and writes. The accuracy figures of
//! BENCHMARKS.md come from full-length runs.

use crate::common;
use common::bench;
use std::path::PathBuf;

#[test]
fn hotkeys_mode_compares_the_report_with_the_truth() {
    let osmium = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/osmium");
    if !osmium.is_file() {
        eprintln!("SKIP osmium: build it first with `cargo build --release`");
        return;
    }
    let out = bench(&[
        "hotkeys",
        "--osmium",
        osmium.to_str().unwrap(),
        "--threads",
        "2",
        "--keys",
        "1000",
        "--zipf",
        "1.1",
        "--rate",
        "2000",
        "--writes",
        "0.2",
        "--conns",
        "2",
        "--depth",
        "4",
        "--keys-per-get",
        "2",
        "--warmup",
        "3",
        "--queries",
        "1",
        "--top",
        "5",
        "--tolerance",
        "0.15",
    ]);
    assert!(out.contains("every request counted"), "{out}");
    assert!(out.contains("top-5 set right"), "{out}");
    assert!(
        out.contains("1 of 1 queries within 15 % with the right top 5"),
        "{out}"
    );
}
