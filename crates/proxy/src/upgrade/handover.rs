//! t3 of the sequence in `mod.rs`: what a quiesced proxy hands over
//! ([`HandOver`], filled by `Proxy::hand_over`) put into the state, then
//! written and the new image run (`osmium_upgrade::handover`, which runs
//! the old image again when the new one cannot be); as a last resort the
//! state is returned for the proxy to start again in this process.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use osmium_upgrade::{CommandLine, ConnRec, History, ListenerRec, State};

use super::check::Checked;
use super::VERSION;

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

/// The state for `handed`, its old image `old_exe`.
fn state_of(handed: HandOver, old_exe: &OwnedFd, argv: &[OsString]) -> State {
    let history = handed.history.unwrap_or_else(History::fresh);
    let mut state = State::new(
        history.origin(VERSION, old_exe.as_fd()),
        // No store: nothing to cross-check.
        CommandLine::as_given(argv, 0),
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
    let Checked { new, old_exe } = checked;
    let argv: Vec<OsString> = std::env::args_os().collect();
    let closed = handed.closed;
    let state = state_of(handed, &old_exe, &argv);
    tracing::warn!(
        "upgrade: {} client connections handed over, {closed} closed",
        state.conns.len()
    );
    let (why, _written) = osmium_upgrade::handover::exec_new(
        &state,
        &new,
        "osmium-proxy",
        old_exe.as_fd(),
        &argv,
        warn,
    );
    (state, why)
}

fn warn(line: std::fmt::Arguments<'_>) {
    tracing::warn!("{line}");
}
