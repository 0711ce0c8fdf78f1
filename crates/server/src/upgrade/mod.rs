//! Binary upgrades in place (SIGUSR2): the process runs a new `osmium`
//! binary in the same PID, and a failed upgrade changes nothing. This
//! module is the process-level orchestration; the state document, the
//! check and the exec are the crate `osmium-upgrade`.
//!
//! ```text
//!  t0  SIGUSR2 -> acceptor: Checking::begin: an O_PATH fd on the file the
//!      server runs from (its path at start), then a thread runs it with
//!      --upgrade-check (the command line on its stdin)        serving goes on
//!  t1  check passed -> Started::quiesce: threads stop at a request
//!      boundary, the listeners kept                          requests wait
//!  t3  the store handed over (`hand_over_store`: item memory in a
//!      memfd, its fd kept for the exec)
//!  t4  the state written (sealed memfd), fds kept, signals blocked,
//!      execveat(checked fd, "", argv, env + OSMIUM_UPGRADE_FD)
//!  t5  the new image (`resume`): reads the state, parses its command
//!      line, starts from it (`adopt::start_from`) and serves; if it cannot, it execs the
//!      old image (the state's O_PATH fd) with OSMIUM_UPGRADE_FAILED, which
//!      adopts the same state and serves on
//! ```
//!
//! A check that fails (a file that cannot run, exits, hangs, reads no
//! format this build writes, refuses the command line) is logged
//! (`upgrade refused: PATH: WHY`) and nothing stops. An `execve` that
//! returns an error runs the old image again the same way; if even that
//! fails, the server starts again in this process from the state.
//!
//! Carried: item memory in a memfd (the default without `-e`). At t3,
//! with every thread stopped, `hand_over_store` records the clock and a
//! clean stop in the memfd's header and puts a duplicate of the memfd
//! into the state; the image that starts (the new one, or the old one
//! again after a failed upgrade) takes the cache over from it
//! (`adopt::start_from`: the store's warm-restart path, the index rebuilt
//! from the segments), or starts empty with a log line saying why when
//! the memory does not match its command line. With `-e` the file is
//! taken over by its path, as after a kill.
//!
//! Not carried yet (`Started::quiesce` returns none of them):
//! connections are closed; listeners are kept across the exec but closed
//! and bound again by the image that starts. Anonymous item memory
//! (`-o item_memory=anonymous`, or where no memfd can be made) ends with
//! the old image, and the flash tier is opened again as at a start (its
//! items are kept only with `-e`, from `FILE.flash`).
//!
//! Refused: SIGUSR2 for an in-process server (`Host::Embedded` installs
//! no handler), and a second SIGUSR2 while an upgrade runs (logged).
//!
//! The files, each below the ones that use it (no module imports one
//! above it): `check.rs` the check on its thread and the upgrade history;
//! `quiesced.rs` what the acceptor's quiesce hands over; `adopt.rs` a
//! server started from a state; `exec.rs` t1-t4 and the fallbacks;
//! `serve.rs` the acceptor's loop with its upgrades; `resume.rs` t5.

pub(crate) mod adopt;
pub(crate) mod check;
mod exec;
pub(crate) mod quiesced;
pub(crate) mod resume;
pub(crate) mod serve;
