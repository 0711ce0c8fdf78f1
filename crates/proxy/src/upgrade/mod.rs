//! Binary upgrades in place (SIGUSR2): osmium-proxy runs a new binary in
//! the same PID, its listening sockets and plain client connections kept;
//! a failed upgrade changes nothing. The state document, the check and
//! the exec are the crate `osmium-upgrade` (the same as the server's);
//! this module is the proxy's side of them.
//!
//! ```text
//!  t0  SIGUSR2 -> the event loop: Checking::begin: an O_PATH fd on the
//!      file the proxy runs from (its path at start), then a thread runs
//!      it with --upgrade-check (the command line on its stdin: the new
//!      binary parses it and loads the -c file)          serving goes on
//!  t1  check passed -> quiescing (`proxy::upgrade`): no new client is
//!      accepted, no client is read, no request is framed; the requests
//!      already sent to the servers are answered and their replies
//!      written                      new clients wait in the backlogs
//!  t2  every client owes nothing (or the drain deadline passed):
//!      `Proxy::hand_over`: each pool's listener and the stats port's
//!      listener (ListenerRec), each plain client (ConnRec with its
//!      ProxyConnRec: pool, protocol, unread input, unsent output)
//!  t3  the state written (sealed memfd), fds kept, signals blocked,
//!      execveat(checked fd, "", argv, env + OSMIUM_UPGRADE_FD)
//!      (`handover::exec`)
//!  t4  the new image (main's start from a state): reads the state,
//!      parses its command line, loads the -c file, binds by taking the
//!      carried listeners (`carried`), adopts the clients and serves;
//!      if it cannot, it execs the old image (the state's O_PATH fd)
//!      with OSMIUM_UPGRADE_FAILED, which adopts the same state and
//!      serves on
//! ```
//!
//! A check that fails (a file that cannot run, exits, hangs, reads no
//! state format this build writes, refuses the command line or the
//! configuration file) is logged (`upgrade refused: PATH: WHY`) and
//! nothing stops. An `execve` that returns an error runs the old image
//! again the same way; if even that fails, the proxy starts again in
//! this process from the state.
//!
//! Not carried (closed as a stop closes them): TLS clients (rustls's
//! session cannot be written down), a client that already ended its
//! side or sent `quit`, a client of a pool a reload removed, a client
//! still owed a reply at the drain deadline (a server that does not
//! answer, in a pool without `timeout:`), the stats port's connections,
//! and the server connections: the new image connects to the servers
//! again. An upgrade asked while a warm move runs (a reload changed a
//! pool's placement and keys are being copied) is refused: the new image
//! would start without the move's state.
//!
//! The configuration: the new image reads the `-c` file again, as a
//! SIGHUP would (the check loads it first, so a file that does not load
//! refuses the upgrade before anything stops).

pub mod carried;
pub mod check;
pub mod handover;

/// The status when the process can serve in neither image.
pub const EX_OSERR: u8 = 71;

/// `OSMIUM_UPGRADE_REFUSE` set in the new image's environment makes it
/// refuse the state, as a build that cannot adopt it would: harmless in
/// production (it can only make an upgrade fall back), it lets a test
/// run the fallback with a good binary. Removed from the environment at
/// start, so that it does not travel on to a later upgrade.
pub const REFUSE_ENV: &str = "OSMIUM_UPGRADE_REFUSE";

pub use osmium_upgrade::History;

/// The version the check answers and the state's origin names.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
