//! The server's side of the check of a new binary (`--upgrade-check`,
//! run on a thread of its own while the acceptor serves on: t0 of the
//! sequence in `mod.rs`; the driver is `osmium_upgrade::checker`): its
//! refusals counted (the upgrades this process went through are
//! `stats::upgrades`), the acceptor woken when the answer is in, and the
//! settings' fingerprint the new image must come to.

use std::path::Path;
use std::sync::Arc;

use osmium_upgrade::checker::{self, Program};
use osmium_upgrade::Origin;

use crate::context::Shared;
use crate::settings::Settings;
use crate::stats::upgrades::count_failure;

pub(crate) use osmium_upgrade::checker::Checked;

/// The server in the check's log lines; a refusal is counted
/// (`stats::upgrades`).
static SERVER: Program = Program {
    what: "server",
    name: "osmium",
    thread: "osmium-upgrade",
    on_refused: count_failure,
    warn,
};

fn warn(line: std::fmt::Arguments<'_>) {
    tracing::warn!("{line}");
}

/// Notes how this image started: afresh (no `origin`), or from an
/// upgrade's state, taken over (`failed` None) or handed back (`failed`:
/// why the new image could not take it); and the file it runs from.
pub(crate) fn note_start(origin: Option<&Origin>, failed: Option<&str>) {
    crate::stats::upgrades::note_start(origin, failed);
    checker::note_exe();
}

pub(super) fn refused(path: &Path, why: &str) {
    checker::refused(&SERVER, path, why);
}

/// A hash of the settings that shape the store (`-m`, `-I`, `-C`, `-t`,
/// `-e`, the flash tier): the new image's parse of the command line must
/// come to the same.
pub(crate) fn store_fingerprint(s: &Settings) -> u64 {
    let text = format!(
        "m={} I={} C={} t={} e={:?} ext={:?}",
        s.memory_limit, s.item_size_max, s.use_cas, s.threads, s.memory_file, s.flash
    );
    osmium_upgrade::fingerprint(text.as_bytes())
}

/// The check of a new binary, running on a thread of its own while the
/// acceptor serves on (t0).
pub(crate) struct Checking(checker::Checking);

impl Checking {
    /// Opens the file the server runs from and starts its check; None
    /// (after a log line) if it cannot be opened.
    pub(crate) fn begin(shared: &Arc<Shared>) -> Option<Checking> {
        let waker = shared.acceptor_waker.get().cloned();
        let wake = move || {
            if let Some(w) = waker {
                let _ = w.wake();
            }
        };
        checker::Checking::begin(&SERVER, || super::stall::stall_at("check"), wake).map(Checking)
    }

    /// None while the check runs; then Some: the binary that passed it,
    /// or None after the refusal was logged.
    pub(crate) fn outcome(&self) -> Option<Option<Checked>> {
        let outcome = self.0.outcome(|_| Ok(()))?;
        Some(outcome.map(|(checked, ())| checked))
    }
}
