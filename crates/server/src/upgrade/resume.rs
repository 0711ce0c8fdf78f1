//! t5: an image started by an upgrade's exec (`OSMIUM_UPGRADE_FD` set)
//! takes the state over: the new image, which hands the state back to
//! the old one (by exec'ing the state's `OldExe` fd with
//! `OSMIUM_UPGRADE_FAILED`) if it cannot take it; or the old image again,
//! which takes the same state over and serves on.
//!
//! `OSMIUM_UPGRADE_REFUSE` set in the new image's environment makes it
//! refuse the state, as a build that cannot adopt it would: harmless in
//! production (it can only make an upgrade fall back), it lets a test
//! run the fallback with a good binary. It is removed from the
//! environment, so that it does not travel on to a later upgrade.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use osmium_upgrade::{Inherited, State};

use crate::server::Started;
use crate::settings::{Settings, OSMIUM_VERSION};
use crate::upgrade::adopt::{parse_settings, start_from};
use crate::upgrade::check::{note_start, store_fingerprint};
use crate::upgrade::serve::serve_to_exit;
use crate::{launch, process};

/// Makes the new image refuse the state (module comment).
const REFUSE_ENV: &str = "OSMIUM_UPGRADE_REFUSE";

/// The status when the process can serve in neither image.
const EX_OSERR: i32 = 71;

/// Runs an image started by an upgrade until it stops; its exit status.
/// To call before any thread exists (it changes the environment).
pub(crate) fn resume(inherited: Inherited) -> i32 {
    let refuse = std::env::var_os(REFUSE_ENV).is_some();
    std::env::remove_var(REFUSE_ENV);
    let state = match State::read(inherited.state.as_raw_fd()) {
        Ok(state) => state,
        Err(e) => {
            // Nothing to hand back to: the fallback's fd is in the state.
            eprintln!("osmium: upgrade failed: the hand-over state cannot be read: {e}");
            return EX_OSERR;
        }
    };
    // The listening sockets the old image kept stay open (taken by
    // `adopt::start_from`, or handed back with the state).
    let parsed = parse_settings(&state.command_line.expanded);
    let logfile = parsed.as_ref().ok().and_then(|s| s.logfile.clone());
    if let Err(msg) = crate::log::init(logfile.as_deref(), !process::running_as_root()) {
        eprintln!("osmium: {msg}");
    }
    process::tune_allocator();
    super::stall::stall_at("exec");
    match inherited.failed {
        Some(why) => serve_again(state, parsed, &why),
        None => take_over(state, parsed, refuse, inherited.state.as_fd()),
    }
}

/// What a start reads and checks, then `adopt::start_from`.
fn adopt(state: State, settings: Settings) -> Result<Started, String> {
    process::raise_file_limit(&settings)?;
    let files = launch::load(&settings).map_err(|r| r.message)?;
    start_from(state, settings, files).map_err(|e| launch::failure_message(&e))
}

fn close_fd(fd: RawFd) {
    // SAFETY: an fd the state names, used by nothing else in this image.
    unsafe { libc::close(fd) };
}

/// The new image: takes the state over, or hands it back.
fn take_over(
    state: State,
    parsed: Result<Settings, String>,
    refuse: bool,
    state_fd: BorrowedFd<'_>,
) -> i32 {
    let old_exe = state.old_exe;
    let argv = state.command_line.argv.clone();
    let from = state.origin.clone();
    let fingerprint = state.command_line.store_fingerprint;
    let taken = (|| {
        if refuse {
            return Err(format!("{REFUSE_ENV} is set"));
        }
        let settings = parsed.map_err(|e| format!("the command line is refused: {e}"))?;
        if store_fingerprint(&settings) != fingerprint {
            return Err("the command line gives other store settings here".to_string());
        }
        // Before the start, so that the first request served (a carried
        // one, say `osmium-tool upgrade`'s) sees the upgrade counted. A
        // start that fails hands the state back: this image's count goes
        // with it.
        note_start(Some(&from), None);
        adopt(state, settings)
    })();
    match taken {
        Ok(started) => {
            super::stall::stall_at("started");
            close_fd(old_exe);
            tracing::warn!(
                "upgrade done: osmium {} -> osmium {OSMIUM_VERSION}, pid {}",
                from.version,
                std::process::id()
            );
            serve_to_exit(started)
        }
        Err(why) => {
            tracing::warn!(
                "upgrade refused by the new image (osmium {OSMIUM_VERSION}): {why}; \
                 handing back to osmium {}",
                from.version
            );
            // SAFETY: the state names this fd as the old image's, kept
            // open across the exec and not closed in this image.
            let old_exe = unsafe { BorrowedFd::borrow_raw(old_exe) };
            let e = osmium_upgrade::exec_image(old_exe, &argv, state_fd, Some(&why));
            tracing::error!("upgrade failed: the old image cannot be run again: {e}");
            EX_OSERR
        }
    }
}

/// The old image again, after the new one handed the state back.
fn serve_again(state: State, parsed: Result<Settings, String>, why: &str) -> i32 {
    note_start(Some(&state.origin), Some(why));
    tracing::warn!("upgrade failed: {why}; serving with osmium {OSMIUM_VERSION}");
    // The state's OldExe is the fd this image was run through, which
    // `take_env` closed.
    match parsed.and_then(|settings| adopt(state, settings)) {
        Ok(started) => serve_to_exit(started),
        Err(e) => {
            tracing::error!("upgrade failed: the old image cannot serve again: {e}");
            EX_OSERR
        }
    }
}
