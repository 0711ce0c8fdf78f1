//! A server started from an upgrade's state (by the image an upgrade ran,
//! by the old image a failed one handed back to, or in this process as a
//! last resort): the command line the state carries, the listeners it
//! names, and the start.

use std::ffi::OsString;
use std::io;

use osmium_upgrade::State;

use crate::launch::Loaded;
use crate::process::Host;
use crate::server::Started;
use crate::settings::{self, Action, Settings};

/// Closes the listening sockets the state names.
pub(crate) fn close_listeners(state: &State) {
    for l in &state.listeners {
        // SAFETY: close of an fd the state names, which nothing in this
        // image has opened or taken yet (an fd already closed: EBADF).
        unsafe { libc::close(l.fd) };
    }
}

/// The settings of the command line the state carries.
pub(crate) fn parse_settings(expanded: &[OsString]) -> Result<Settings, String> {
    match settings::parse(expanded.to_vec())? {
        Action::Run(s) => Ok(*s),
        Action::Print(_) | Action::GenSecret(_) => {
            Err("a command line that starts no server".into())
        }
    }
}

/// Starts the server a state describes, with the files `launch::load`
/// read. Until listeners, connections and item memory are carried, the
/// state gives only the settings: the listeners are bound again (closed
/// beforehand by `close_listeners`), and the store opens as at a start.
pub(crate) fn start_from(
    state: State,
    mut settings: Settings,
    files: Loaded,
) -> io::Result<Started> {
    let _ = state;
    // The process is already the daemon `-d` made (forking again would
    // change its pid).
    settings.daemon = false;
    crate::server::start(
        settings,
        files.auth,
        files.tls,
        files.secret,
        files.metrics_token,
        Host::Process,
    )
}
