//! What the bench crate's socket tests share: running the `osmium-bench`
//! binary built for the tests.

use std::process::Command;

/// Runs `osmium-bench` with `args`; its stdout, after checking it succeeded.
pub fn bench(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(args)
        .output()
        .expect("run osmium-bench");
    assert!(
        out.status.success(),
        "osmium-bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
