//! What the bench crate's socket tests share: running the `osmium-bench`
//! binary built for the tests, and which memcached to run.
#![allow(dead_code)] // each test crate uses a different subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// The memcached release the tests compare against (tests/oracle/README.md).
pub(crate) const ORACLE_VERSION: &str = "1.6.45";

/// Genuine memcached for the tests, by the one rule every suite follows:
/// `MEMCACHED_BIN` if set, else the repository's oracle
/// (`.oracle/memcached-1.6.45/memcached`, built by
/// `scripts/build-memcached.sh`). Without either: `None`, after a SKIP line
/// on stderr naming the script, and a panic under `CI=true`, where a
/// missing oracle is a failure.
pub(crate) fn memcached_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("MEMCACHED_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let oracle = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(format!(".oracle/memcached-{ORACLE_VERSION}/memcached"));
    if oracle.is_file() {
        return Some(oracle);
    }
    let why = format!(
        "memcached {ORACLE_VERSION} (the oracle) is not built: run `bash scripts/build-memcached.sh` \
         (it builds {}) or set MEMCACHED_BIN",
        oracle.display()
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why} (CI=true: a missing oracle is a failure)"
    );
    eprintln!("SKIP memcached: {why}");
    None
}

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
