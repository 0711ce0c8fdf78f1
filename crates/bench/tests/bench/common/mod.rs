//! What the bench crate's socket tests share: running the `osmium-bench`
//! binary built for the tests, and which memcached to run.
#![allow(dead_code)] // each test crate uses a different subset

use std::process::Command;

/// Genuine memcached for the tests, by the harness's one rule
/// (`MEMCACHED_BIN`, else the repository's oracle; `None` after a SKIP
/// line, a panic under `CI=true`).
pub(crate) use osmium_test_harness::memcached_bin;

/// Runs `osmium-bench` with `args`; its stdout, after checking it succeeded.
pub(crate) fn bench(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(args)
        .output()
        .expect("run osmium-bench");
    assert!(
        out.status.success(),
        "osmium-bench {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}
