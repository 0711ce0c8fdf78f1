//! `osmium-bench hotkeys` against osmium (`target/release/osmium`, when
//! built): it drives a zipf load, asks `stats hotkeys` while it runs and
//! compares the answer with what it sent. A short run counting every
//! request (`--sample 1`): the mode works end to end; the accuracy figure
//! of BENCHMARKS.md comes from a full-length run. It compares the top 3
//! only, within 50 %: on a loaded machine a 3 s warm-up sees too few gets
//! to tell zipf's 10th key from its 11th, and the server's rate window and
//! the bench's are not the same seconds.

mod common;
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
        "10000",
        "--conns",
        "2",
        "--warmup",
        "3",
        "--queries",
        "1",
        "--sample",
        "1",
        "--top",
        "3",
        "--tolerance",
        "0.5",
    ]);
    assert!(out.contains("top-3 set right"), "{out}");
    assert!(
        out.contains("1 of 1 queries within 50 % with the right top 3"),
        "{out}"
    );
}
