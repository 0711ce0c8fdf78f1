//! Waiting for a condition instead of sleeping a fixed time: a test polls
//! what it waits for (a reply, a counter, a file) until it holds or a
//! deadline passes, so it takes as long as the condition needs and no more.

use std::time::{Duration, Instant};

/// How often [`wait_until`] polls.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Polls `ready` every [`POLL_INTERVAL`] until it returns true; panics with
/// `what` once `timeout` has passed without it.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}
