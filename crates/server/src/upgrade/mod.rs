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
//!      boundary, each worker hands its connections over (ConnRec), the
//!      listeners kept open              requests wait, new ones queue in
//!                                       the listeners' backlogs
//!  t3  the store handed over (`hand_over_store`: item memory in a
//!      memfd, its fd kept for the exec)
//!  t4  the state written (sealed memfd), fds kept, signals blocked,
//!      execveat(checked fd, "", argv, env + OSMIUM_UPGRADE_FD)
//!  t5  the new image (`resume`): reads the state, parses its command
//!      line, starts from it (`adopt::start_from`: the same listening
//!      sockets, the same connections) and serves; if it cannot, it execs the
//!      old image (the state's O_PATH fd) with OSMIUM_UPGRADE_FAILED, which
//!      adopts the same state and serves on
//! ```
//!
//! A check that fails (a file that cannot run, exits, hangs, reads no
//! format this build writes, refuses the command line or cannot read the
//! files it names, as the server's user: `cli::parse`) is logged
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
//! Carried too: the flash tier. Its files are opened again by their paths
//! (what is on them stays); its metadata (the pages' records, the flash
//! index, the write buffers) lives beside item memory: with `-e` in
//! `FILE.flash`, taken over by its path as after a kill (the index
//! repaired: `[restart] N items back on flash (after a crash)`); without
//! `-e` in a memfd of its own (`osmium-flash-meta`), which
//! `hand_over_store` hands over after a graceful stop of the tier (its
//! write buffers written to flash, the metadata marked whole) as the
//! `FlashMeta` record, to a binary whose check says `takes=flash`; the
//! image that starts takes the tier over from it as a restart takes
//! `FILE.flash` over. Only with anonymous item memory does the tier end
//! with the image.
//!
//! Carried too: every listening socket (TCP, TLS, unix, UDP; not the
//! metrics endpoint's, bound again): its fd is kept across the exec and
//! the image that starts takes the one whose kind and address match each
//! listener its command line asks for instead of binding
//! (`transport::carried`; one not matched is bound, a socket not taken
//! is closed), so a client that connects meanwhile waits in the backlog
//! and none is refused. And every plain client connection (TCP or unix),
//! at a request boundary: the worker sends what output the socket takes
//! and hands over the fd, the bytes read but not yet run (complete
//! requests and a partial one), the replies not yet sent and the
//! session's state (protocol, `-S`/`-Y` authentication, a refused block
//! still to swallow, `quit`): `transport::worker::carry`,
//! `session::carried`; the new image's workers take them as new
//! connections and run the buffered input first. A connection whose
//! request waits for flash reads is finished first: the worker waits for
//! the reads (at most 1 s), runs that request (its reply composed), and
//! carries the connection as any other. Only to a binary whose check
//! says `takes=conns`. Both are taken as duplicates, the state's fds
//! closed once the start succeeded, so a refused state hands them back
//! to the old image unchanged.
//!
//! Not carried (finished and closed as a stop closes them): TLS
//! connections (rustls's session cannot be written down), replication
//! links and peers, `watch` connections, a connection whose flash reads
//! did not finish within 1 s or waiting for sync replication's
//! acknowledgements, one reading a large value straight into item
//! memory, a streaming multi-get or dump, and one holding more than
//! 1 MiB of input or of unsent output (the state stays bounded).
//! Anonymous item memory (`-o item_memory=anonymous`, or where no memfd
//! can be made) ends with the old image, and so does the flash tier's
//! metadata then (the tier starts empty).
//!
//! Killed (kill -9) inside an upgrade, at any point (after the signal,
//! in the check, with the threads stopped, right after the exec, in the
//! new image's take-over; `stall.rs` holds one for a test): with `-e`
//! every acknowledged write survives. It is in the memory file (a shared
//! mapping) when it is acknowledged, each flash record is on flash or in
//! a write buffer inside `FILE.flash`, and an upgrade neither writes them
//! out nor marks them closed, so the next start takes them over as after
//! any kill (the index rebuilt, the flash index repaired); requests in
//! flight may or may not have happened, connections are lost (the
//! `upgrade_kill` test). Without `-e` a kill loses the cache as any kill
//! does: item memory and the flash tier's metadata are memfds, which end
//! with the process (the flash files stay, unreadable without the
//! metadata: the next start begins the tier empty).
//!
//! Refused: SIGUSR2 for an in-process server (`Host::Embedded` installs
//! no handler), and a second SIGUSR2 while an upgrade runs (logged).
//!
//! The files, each below the ones that use it (no module imports one
//! above it): `check.rs` the server's side of the check (the thread and
//! its outcome are `osmium_upgrade::checker`); `quiesced.rs` what the
//! acceptor's quiesce hands over; `adopt.rs` a server started from a
//! state; `exec.rs` t1-t4 (the state written, the exec and its first
//! fallback are `osmium_upgrade::handover`) and the last resort;
//! `serve.rs` the acceptor's loop with its upgrades; `resume.rs` t5;
//! `stall.rs` a test's hold at one point (to kill the process there).

pub(crate) mod adopt;
pub(crate) mod check;
mod exec;
pub(crate) mod quiesced;
pub(crate) mod resume;
pub(crate) mod serve;
mod stall;
