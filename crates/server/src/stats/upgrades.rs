//! The binary upgrades (SIGUSR2) this process went through, from its
//! first start on: carried from image to image in the upgrade's state
//! (`osmium_upgrade::Origin`), shown by `stats` (`upgrades`,
//! `upgrade_failures`).

use std::sync::Mutex;

use osmium_upgrade::Origin;

/// The upgrades this process went through.
#[derive(Clone, Copy)]
pub(crate) struct History {
    /// When the server first started (unix seconds).
    pub first_start: i64,
    pub upgrades: u64,
    pub failures: u64,
}

static HISTORY: Mutex<History> = Mutex::new(History {
    first_start: 0,
    upgrades: 0,
    failures: 0,
});

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Notes how this image started: afresh (None), or from an upgrade's
/// state, taken over (`upgraded`) or handed back.
pub(crate) fn note_start(origin: Option<&Origin>, upgraded: bool) {
    let mut h = HISTORY.lock().unwrap_or_else(|p| p.into_inner());
    *h = match origin {
        None => History {
            first_start: unix_now(),
            upgrades: 0,
            failures: 0,
        },
        Some(o) => History {
            first_start: o.first_start,
            upgrades: o.upgrades + u64::from(upgraded),
            failures: o.failures + u64::from(!upgraded),
        },
    };
}

/// The upgrades so far.
pub(crate) fn history() -> History {
    *HISTORY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts an upgrade that failed.
pub(crate) fn count_failure() {
    HISTORY.lock().unwrap_or_else(|p| p.into_inner()).failures += 1;
}
