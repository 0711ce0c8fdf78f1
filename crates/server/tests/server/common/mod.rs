//! Helpers shared by the integration tests that start real server
//! processes: a free loopback port and a start retried when its port was
//! taken meanwhile (both over the `osmium-test-harness` crate), waiting for
//! a condition, waiting for a process to exit, which memcached to compare against, test certificates
//! made with `openssl` (`certs`), and a TCP server killed on drop with a
//! line client (`tcp`, for the suites that need no more). Suites that start
//! servers otherwise (UDP, unix sockets, TLS, restarts) keep their own
//! launcher over `start_on_free_port`.
#![allow(dead_code)] // each test crate uses a different subset

pub(crate) mod certs;
pub(crate) mod tcp;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// The memcached release the tests compare against (tests/oracle/README.md).
pub(crate) const ORACLE_VERSION: &str = "1.6.45";

/// Where `scripts/build-memcached.sh` puts the oracle.
pub(crate) fn oracle_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(format!(".oracle/memcached-{ORACLE_VERSION}/memcached"))
}

/// Genuine memcached for the tests, by the one rule every suite follows:
/// `MEMCACHED_BIN` if set, else the repository's oracle
/// (`.oracle/memcached-1.6.45/memcached`). Without either: `None`, after a
/// message on stderr naming `scripts/build-memcached.sh` (the caller skips
/// its memcached part), and a panic under `CI=true`, where a missing oracle
/// is a failure.
pub(crate) fn memcached_bin() -> Option<PathBuf> {
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

/// Is this process's effective uid 0? (The owner of /proc/self.)
pub(crate) fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// A server binary (`osmium` or `memcached`) plus `-u root` when running
/// as root: both refuse to run as root without `-u`.
pub(crate) fn server_command(bin: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(bin);
    if running_as_root() {
        cmd.args(["-u", "root"]);
    }
    cmd
}

/// `memcached` plus `-u root` when running as root (`server_command`).
pub(crate) fn memcached_command(bin: &Path) -> Command {
    server_command(bin)
}

/// `osmium` plus `-u root` when running as root (`server_command`).
pub(crate) fn osmium_command(bin: impl AsRef<std::ffi::OsStr>) -> Command {
    server_command(bin)
}

/// The server a test runs against: osmium or genuine memcached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Osmium,
    Memcached,
}

thread_local! {
    static TARGET: Cell<Target> = const { Cell::new(Target::Osmium) };
}

/// The current test's target (see `against_both!`); osmium outside it.
pub(crate) fn target() -> Target {
    TARGET.with(Cell::get)
}

/// Runs `test` with `target` as the current target. A memcached run without
/// a memcached binary is skipped (see `memcached_bin`).
pub(crate) fn run_against(target: Target, test: fn()) {
    if target == Target::Memcached && memcached_bin().is_none() {
        return;
    }
    // Back to osmium afterwards, even when the test panics: libtest may run
    // the next test on the same thread.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            TARGET.with(|t| t.set(Target::Osmium));
        }
    }
    let _reset = Reset;
    TARGET.with(|t| t.set(target));
    test();
}

/// A command for the current target's binary: `osmium` (the path of the
/// osmium binary; `osmium_command`) or memcached (`memcached_command`).
pub(crate) fn target_command(osmium: &str) -> Command {
    match target() {
        Target::Osmium => osmium_command(osmium),
        Target::Memcached => memcached_command(&memcached_bin().expect("memcached binary")),
    }
}

/// Declares, for each test function named, two tests: `osmium::<name>`
/// running it against the osmium binary and `memcached::<name>` running it
/// against genuine memcached (`run_against`). The functions start their
/// servers with `target_command`, so the same assertions hold for both.
#[allow(unused_macros)]
macro_rules! against_both {
    ($($name:ident),* $(,)?) => {
        mod osmium {
            $(
                #[test]
                fn $name() {
                    crate::common::run_against(crate::common::Target::Osmium, super::$name)
                }
            )*
        }
        mod memcached {
            $(
                #[test]
                fn $name() {
                    crate::common::run_against(crate::common::Target::Memcached, super::$name)
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use against_both;

/// A loopback port, free for TCP and UDP and reserved for TCP for about a
/// minute (`osmium_test_harness::free_port`: no other bind or outgoing
/// connection takes it, a server binds it).
pub(crate) fn free_port() -> u16 {
    osmium_test_harness::free_port_tcp_udp()
}

/// Starts a server on a free loopback port (`spawn(port)` starts the
/// process) and returns it once *that process* listens on the port. A
/// connect alone is not proof: two tests running at once can be given the
/// same free port, and the one whose server then fails to bind would talk
/// to the other test's server until that one stops. A server that exits
/// saying its address was in use (read from its piped stderr), or saying
/// nothing readable, is started again on another port; any other exit
/// panics with its message (`osmium_test_harness::Start::child`).
pub(crate) fn start_on_free_port(spawn: impl FnMut(u16) -> Child) -> (Child, u16) {
    let server = osmium_test_harness::Start::new("server").child(spawn);
    let port = server.port();
    (server.into_child(), port)
}

/// Whether process `pid` holds a listening IPv4 TCP socket on `port`
/// (`osmium_test_harness::listens_on`).
pub(crate) fn listens_on(pid: u32, port: u16) -> bool {
    osmium_test_harness::listens_on(pid, port)
}

/// Polls `ready` every 20 ms for up to 10 s; panics with `what` after that.
pub(crate) fn wait_until(what: &str, ready: impl FnMut() -> bool) {
    osmium_test_harness::wait_until(what, Duration::from_secs(10), ready);
}

/// Waits up to 10 s for `child` to exit and returns its status.
pub(crate) fn wait_exit(child: &mut Child) -> ExitStatus {
    let mut status = None;
    wait_until("server did not exit", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    status.unwrap()
}
