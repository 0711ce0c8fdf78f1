//! t3 of the sequence in `mod.rs`: what a quiesced proxy hands over
//! ([`HandOver`], filled by `Proxy::hand_over`) written into the state,
//! the new image run; and the fallbacks when it cannot be (the old image
//! run again, or, as a last resort, the state returned for the proxy to
//! start again in this process).

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use osmium_upgrade::{CommandLine, ConnRec, ListenerRec, Origin, State};

use super::check::Checked;
use super::{History, VERSION};

/// What a quiesced proxy hands over (t2).
#[derive(Debug, Default)]
pub struct HandOver {
    /// Each pool's listener and the stats port's.
    pub listeners: Vec<ListenerRec>,
    /// The plain clients, at a request boundary.
    pub conns: Vec<ConnRec>,
    /// Clients closed instead (module comment of `mod.rs`).
    pub closed: usize,
    /// The counters, by name (`Proxy::hand_over`).
    pub counters: Vec<(String, u64)>,
    /// The upgrades this process went through.
    pub history: Option<History>,
}

/// Every fd the state names.
fn state_fds(state: &State) -> Vec<RawFd> {
    let mut fds = vec![state.old_exe];
    fds.extend(state.listeners.iter().map(|l| l.fd));
    fds.extend(state.conns.iter().map(|c| c.fd));
    fds
}

/// The state for `handed`, its old image `old_exe`.
fn state_of(handed: HandOver, old_exe: &OwnedFd, argv: &[OsString]) -> State {
    let old_id = osmium_upgrade::image::file_id(old_exe.as_fd()).unwrap_or_default();
    let history = handed.history.unwrap_or_else(History::fresh);
    let mut state = State::new(
        Origin {
            version: VERSION.into(),
            exe: old_id,
            pid: std::process::id(),
            first_start: history.first_start,
            upgrades: history.upgrades,
            failures: history.failures,
            failed: None,
        },
        CommandLine {
            argv: argv.to_vec(),
            // The command line as given: the -c file is read again by the
            // new image.
            expanded: argv.to_vec(),
            // No store: nothing to cross-check.
            store_fingerprint: 0,
        },
        old_exe.as_raw_fd(),
    );
    state.listeners = handed.listeners;
    state.conns = handed.conns;
    state.counters = handed.counters;
    state
}

/// Writes the state for `handed` and runs the new image `checked`
/// names; if it cannot be run, the old image again, handed the state
/// with why. Returns only if neither could be run: the state and why,
/// for the proxy to start again in this process (its fds kept open; the
/// old image's is not).
pub fn exec(handed: HandOver, checked: Checked) -> (State, String) {
    let Checked {
        path,
        image,
        answer,
        old_exe,
    } = checked;
    let argv: Vec<OsString> = std::env::args_os().collect();
    let closed = handed.closed;
    let state = state_of(handed, &old_exe, &argv);
    tracing::warn!(
        "upgrade: {} client connections handed over, {closed} closed",
        state.conns.len()
    );
    for fd in state_fds(&state) {
        if let Err(e) = osmium_upgrade::keep_fd(fd) {
            tracing::warn!("upgrade: fd {fd} cannot be kept across the exec: {e}");
        }
    }
    let written = match state.write() {
        Ok(fd) => fd,
        Err(e) => return (state, format!("cannot write the hand-over state: {e}")),
    };
    tracing::warn!(
        "upgrade: running {} (osmium-proxy {})",
        path.display(),
        answer.version
    );
    let e = osmium_upgrade::exec_image(image.as_fd(), &argv, written.as_fd(), None);
    let why = format!("execve: {e}");
    tracing::warn!("upgrade failed: {why}; running the old image again");
    let again = osmium_upgrade::exec_image(old_exe.as_fd(), &argv, written.as_fd(), Some(&why));
    tracing::warn!("upgrade failed: the old image cannot be run again either ({again})");
    (state, why)
}
