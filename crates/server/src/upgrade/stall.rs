//! Holds an upgrade at one of its points, for a test that kills the
//! process there (kill -9 inside an upgrade): `OSMIUM_UPGRADE_STALL=POINT`
//! in the server's environment (it travels across the exec) makes the
//! thread that reaches POINT log `upgrade stalled at POINT` and wait
//! until the process is killed. Harmless in production: unset, nothing
//! waits; set, it can only hold an upgrade that an operator asked to
//! hold.
//!
//! The points, in the order of the sequence in `mod.rs`: `check` (t0,
//! the check's thread: serving goes on), `quiesced` (t3, threads
//! stopped, the store handed over, the state not yet written), `exec`
//! (t5, the new image before it reads the state), `started` (t5, the new
//! image started from the state: its store taken over, carried
//! connections served, new ones waiting in the listeners' backlogs).

/// The environment variable that names the point.
const STALL_ENV: &str = "OSMIUM_UPGRADE_STALL";

/// Waits for ever at `point` when the environment names it.
pub(crate) fn stall_at(point: &str) {
    if std::env::var_os(STALL_ENV).is_some_and(|v| v == point) {
        tracing::warn!("upgrade stalled at {point} ({STALL_ENV})");
        loop {
            std::thread::park();
        }
    }
}
