//! Helpers shared by the integration tests that start real server
//! processes: the builders of the servers under test (`osmium`,
//! `memcached`, `target_server`: `osmium_test_harness` builders), which
//! target a test runs against (`against_both!`), waiting for a condition,
//! and a line client (`tcp`).
#![allow(dead_code)] // each test crate uses a different subset

pub(crate) mod tcp;

use std::cell::Cell;
use std::time::Duration;

pub(crate) use osmium_test_harness::memcached_bin;
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

/// Declares, for each test function named, two tests: `osmium::<name>`
/// running it against the osmium binary and `memcached::<name>` running it
/// against genuine memcached (`run_against`). The functions start their
/// servers with `target_server`, so the same assertions hold for both.
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

/// Polls `ready` every 20 ms for up to 10 s; panics with `what` after that.
pub(crate) fn wait_until(what: &str, ready: impl FnMut() -> bool) {
    osmium_test_harness::wait_until(what, Duration::from_secs(10), ready);
}
