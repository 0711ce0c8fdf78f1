//! Where the binaries the tests start are: osmium and osmium-proxy (an
//! environment variable, else beside the running test binary, where Cargo
//! puts a workspace's binaries), memcached 1.6.45 (the oracle) and
//! nutcracker, each by the one rule every suite follows.

use std::path::{Path, PathBuf};

/// The memcached release the tests compare against (tests/oracle/README.md).
pub const ORACLE_VERSION: &str = "1.6.45";

/// The directory Cargo put the running test (or bench) binary's
/// workspace binaries in: `target/PROFILE`, the parent of `deps/`.
fn profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    Some(if dir.ends_with("deps") {
        dir.parent()?.to_path_buf()
    } else {
        dir.to_path_buf()
    })
}

/// A workspace binary: `$VAR` if set, else `name` beside the test binary
/// (`target/PROFILE/name`).
pub fn workspace_bin(name: &str, var: &str) -> PathBuf {
    if let Some(bin) = std::env::var_os(var).filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    let beside = profile_dir().map(|d| d.join(name));
    match beside {
        Some(path) if path.is_file() => path,
        _ => panic!(
            "no {name} binary beside the test binary ({}): build it (cargo build --release \
             --workspace) or set {var}",
            beside.map(|p| p.display().to_string()).unwrap_or_default()
        ),
    }
}

/// The osmium server: `OSMIUM_BIN`, else `target/PROFILE/osmium`.
pub fn osmium_bin() -> PathBuf {
    workspace_bin("osmium", "OSMIUM_BIN")
}

/// osmium-proxy: `OSMIUM_PROXY_BIN`, else `target/PROFILE/osmium-proxy`.
pub fn proxy_bin() -> PathBuf {
    workspace_bin("osmium-proxy", "OSMIUM_PROXY_BIN")
}

/// Where `scripts/build-memcached.sh` puts the oracle.
pub fn oracle_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(format!(".oracle/memcached-{ORACLE_VERSION}/memcached"))
}

/// Genuine memcached for the tests: `MEMCACHED_BIN` if set, else the
/// repository's oracle (`.oracle/memcached-1.6.45/memcached`). Without
/// either: `None`, after a message on stderr naming
/// `scripts/build-memcached.sh` (the caller skips its memcached part), and
/// a panic under `CI=true`, where a missing oracle is a failure.
pub fn memcached_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("MEMCACHED_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let oracle = oracle_path();
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

/// nutcracker on PATH (or in /usr/sbin, /usr/local/sbin); `None` (after
/// a SKIP line) when it is not installed, a panic under `CI=true`.
pub fn nutcracker_bin() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
            .map(|d| d.join("nutcracker"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = "nutcracker is not installed (apt-get install -y nutcracker, Debian 12: 0.5.0)";
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{why} (CI=true: a missing nutcracker is a failure)"
        );
        eprintln!("SKIP nutcracker: {why}");
    }
    found
}

/// Is this process's effective uid 0? (The owner of /proc/self.)
pub fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}
