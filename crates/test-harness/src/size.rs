//! How big the integration tests run: the default sizes keep the whole test
//! command short; `OSMIUM_LONG_TESTS=1` runs the long versions (more keys,
//! more cases, longer loads), for a release or a change to what those tests
//! cover.

/// The environment variable that asks for the long versions.
pub const LONG_TESTS_VAR: &str = "OSMIUM_LONG_TESTS";

/// Whether `OSMIUM_LONG_TESTS=1`.
pub fn long_tests() -> bool {
    std::env::var_os(LONG_TESTS_VAR).is_some_and(|v| v == "1")
}

/// `long` under `OSMIUM_LONG_TESTS=1`, else `default`.
pub fn sized<T>(default: T, long: T) -> T {
    if long_tests() {
        long
    } else {
        default
    }
}
