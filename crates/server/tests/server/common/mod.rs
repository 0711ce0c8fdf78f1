//! Helpers shared by the integration tests that start real server
//! processes: the builders of the servers under test (`osmium`,
//! `memcached`, `target_server`: `osmium_test_harness` builders), which
//! target a test runs against (`against_both!`), waiting for a condition,
//! waiting for a process to exit, and a line client (`tcp`).
#![allow(dead_code)] // each test crate uses a different subset

pub(crate) mod tcp;

use std::cell::Cell;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

pub(crate) use osmium_test_harness::{memcached_bin, running_as_root};
use osmium_test_harness::{CacheServer, Memcached, Osmium};

/// A builder of the osmium server under test: this package's binary
/// (Cargo's `CARGO_BIN_EXE_osmium`), else the harness's
/// (`osmium_test_harness::osmium_bin`) for crates that include this module.
pub(crate) fn osmium() -> CacheServer {
    match option_env!("CARGO_BIN_EXE_osmium") {
        Some(bin) => Osmium::new().bin(bin),
        None => Osmium::new(),
    }
}

/// A builder of genuine memcached (the oracle; `memcached_bin`).
pub(crate) fn memcached() -> CacheServer {
    Memcached::new()
}

/// A builder of the current test's target (see `against_both!`): osmium
/// (`osmium`) or memcached (`memcached`).
pub(crate) fn target_server() -> CacheServer {
    match target() {
        Target::Osmium => osmium(),
        Target::Memcached => memcached(),
    }
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
