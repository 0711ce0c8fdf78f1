//! The proxy's side of the check of a new binary (`--upgrade-check`,
//! run on a thread of its own while the event loop serves on: t0 of the
//! sequence in `mod.rs`; the driver is `osmium_upgrade::checker`): a new
//! binary must say it takes a proxy's state over, and the running
//! image's fd (the fallback) is opened before anything stops.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use osmium_upgrade::checker::{self, Program};
use osmium_upgrade::CheckAnswer;

pub use osmium_upgrade::checker::note_exe;

/// The proxy in the check's log lines.
static PROXY: Program = Program {
    what: "proxy",
    name: "osmium-proxy",
    thread: "osmium-proxy-upgrade",
    on_refused: |_| {},
    warn,
};

fn warn(line: std::fmt::Arguments<'_>) {
    tracing::warn!("{line}");
}

/// A new binary that passed its check, and the running image's fd.
#[derive(Debug)]
pub struct Checked {
    /// The new binary: its path, the fd it is run through, its answer.
    pub new: checker::Checked,
    /// An `O_PATH` fd on the running image: the fallback, opened before
    /// anything stops.
    pub old_exe: OwnedFd,
}

/// The check of a new binary, running on a thread of its own while the
/// event loop serves on (t0).
#[derive(Debug)]
pub struct Checking(checker::Checking);

impl Checking {
    /// Opens the file the proxy runs from and starts its check (the loop
    /// is woken by `waker` when it is done); None (after a log line) if
    /// it cannot be opened.
    pub fn begin(waker: Arc<mio::Waker>) -> Option<Checking> {
        let wake = move || {
            let _ = waker.wake();
        };
        checker::Checking::begin(&PROXY, || {}, wake).map(Checking)
    }

    /// None while the check runs; then Some: the binary that passed it,
    /// or None after the refusal was logged.
    pub fn outcome(&self) -> Option<Option<Checked>> {
        let outcome = self.0.outcome(accept)?;
        Some(outcome.map(|(new, old_exe)| Checked { new, old_exe }))
    }
}

/// A binary that passed the check and takes a proxy's listeners and
/// clients over: the running image's fd, opened now.
fn accept(answer: &CheckAnswer) -> Result<OwnedFd, String> {
    if !answer.takes(osmium_upgrade::TAKES_PROXY) || !answer.takes(osmium_upgrade::TAKES_CONNS) {
        // Not an osmium-proxy that takes a proxy's listeners and clients
        // over (an osmium server, or an older build).
        return Err(format!(
            "the new binary does not take an osmium-proxy's state over (takes={})",
            answer.takes.join(",")
        ));
    }
    osmium_upgrade::running_image().map_err(|e| format!("cannot open /proc/self/exe: {e}"))
}
