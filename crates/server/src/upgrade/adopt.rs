//! A server started from an upgrade's state (by the image an upgrade ran,
//! by the old image a failed one handed back to, or in this process as a
//! last resort): the command line the state carries, and the start, with
//! the listening sockets and the item memory it hands over.

use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;

use osmium_upgrade::State;

use crate::launch::Loaded;
use crate::process::Host;
use crate::server::{HandedOver, Started};
use crate::settings::{self, Action, Settings};
use crate::transport::carried::{close_state_fds, Carried};

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
/// read. The state gives the settings, item memory in a memfd and the
/// flash tier's metadata in one (taken over by the store: see
/// `osmium_store::Store::open_handed_over`; a memory file and
/// `FILE.flash` are taken over by their paths, as at a start). Each
/// listening socket the state names is taken where the command line asks
/// for its kind and address (`transport::carried`: the same socket, so
/// that no connection is refused meanwhile); any other listener is bound.
/// Once the server started, the state's fds of item memory, the flash
/// tier's metadata and listeners are closed (the server holds its own
/// duplicates; a socket no listener took ends there); a start that fails
/// leaves them open, for the image it hands the state back to.
pub(crate) fn start_from(
    state: State,
    mut settings: Settings,
    files: Loaded,
) -> io::Result<Started> {
    // The process is already the daemon `-d` made (forking again would
    // change its pid).
    settings.daemon = false;
    let memfd = state
        .memory
        .as_ref()
        .filter(|m| m.path.is_none())
        .map(|m| m.fd);
    let flash_memfd = state
        .flash_meta
        .as_ref()
        .filter(|m| m.path.is_none())
        .map(|m| m.fd);
    // SAFETY: fds the state names as item memory and the flash tier's
    // metadata, kept open across the exec and closed only below, after
    // the start.
    let handed_over = memfd.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
    // SAFETY: as above.
    let flash_meta = flash_memfd.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) });
    let started = crate::server::start(
        settings,
        files.auth,
        files.tls,
        files.secret,
        files.metrics_token,
        Host::Process,
        HandedOver {
            memory: handed_over,
            flash_meta,
            sockets: Carried::from_state(&state),
        },
    )?;
    close_state_fds(&state);
    for fd in memfd.into_iter().chain(flash_memfd) {
        // SAFETY: the state's fd, which nothing in this image uses any
        // more (the store took a duplicate).
        unsafe { libc::close(fd) };
    }
    Ok(started)
}
