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
//!  t3  the store handed over (item memory by fd)
//!  t4  the state written (sealed memfd), fds kept, signals blocked,
//!      execveat(checked fd, "", argv, env + OSMIUM_UPGRADE_FD)
//!  t5  the new image (`resume`): reads the state, parses its command
//!      line, `server::adopt`s it and serves; if it cannot, it execs the
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
//! Until the connections, listeners and item memory are carried
//! (`Started::quiesce` and `server::adopt` return and take none of them
//! yet, `hand_over_store` hands nothing over): connections are closed,
//! listeners are kept across the exec but closed and bound again by the
//! image that starts, and the cache is the memory file's with `-e`
//! (taken over as after a kill), empty without.
//!
//! Refused: SIGUSR2 for an in-process server (`Host::Embedded` installs
//! no handler), and a second SIGUSR2 while an upgrade runs (logged).

mod resume;

pub(crate) use resume::{parse_settings, resume};

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use osmium_store::Store;
use osmium_upgrade::{
    CheckAnswer, CommandLine, ConnRec, ListenerKind, ListenerRec, MemoryRec, Origin, ReplQueueRec,
    State, WatcherRec,
};

use crate::context::Shared;
use crate::server::Started;
use crate::settings::{Settings, OSMIUM_VERSION};
use crate::transport::listen::Listener;

/// How long running requests may take to finish at the quiesce.
const DRAIN: Duration = Duration::from_millis(300);

/// What a quiesced server hands over (t1-t3).
pub(crate) struct Quiesced {
    pub conns: Vec<ConnRec>,
    pub listeners: Vec<ListenerRec>,
    pub watchers: Vec<WatcherRec>,
    pub repl: Vec<ReplQueueRec>,
    pub counters: Vec<(String, u64)>,
    pub live: Vec<(String, String)>,
    pub store: Arc<Store>,
    /// Connections closed at the deadline.
    pub closed: u64,
}

/// The upgrades this process went through, from its first start on.
#[derive(Clone, Copy)]
pub(crate) struct History {
    /// When the server first started (unix seconds).
    pub first_start: i64,
    pub upgrades: u64,
    pub failures: u64,
}

static HISTORY: Mutex<History> = Mutex::new(History {
    first_start: 0,
    upgrades: 0,
    failures: 0,
});

/// The file the server runs from: what SIGUSR2 runs.
static EXE_PATH: OnceLock<PathBuf> = OnceLock::new();

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Notes how this image started: afresh (None), or from an upgrade's
/// state, taken over (`upgraded`) or handed back.
pub(crate) fn note_start(origin: Option<&Origin>, upgraded: bool) {
    let mut h = HISTORY.lock().unwrap_or_else(|p| p.into_inner());
    *h = match origin {
        None => History {
            first_start: unix_now(),
            upgrades: 0,
            failures: 0,
        },
        Some(o) => History {
            first_start: o.first_start,
            upgrades: o.upgrades + u64::from(upgraded),
            failures: o.failures + u64::from(!upgraded),
        },
    };
    drop(h);
    // The path as started: after an upgrade that failed, the running
    // file may have been replaced (its link then ends in " (deleted)").
    if let Ok(path) = std::env::current_exe() {
        let text = path.as_os_str().to_string_lossy();
        let path = match text.strip_suffix(" (deleted)") {
            Some(stripped) => PathBuf::from(stripped),
            None => path,
        };
        let _ = EXE_PATH.set(path);
    }
}

/// The upgrades so far.
pub(crate) fn history() -> History {
    *HISTORY.lock().unwrap_or_else(|p| p.into_inner())
}

fn count_failure() {
    HISTORY.lock().unwrap_or_else(|p| p.into_inner()).failures += 1;
}

fn refused(path: &Path, why: &str) {
    count_failure();
    tracing::warn!("upgrade refused: {}: {why}", path.display());
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

/// A new binary that passed its check: the fd it is run through.
pub(crate) struct Checked {
    path: PathBuf,
    image: OwnedFd,
    answer: CheckAnswer,
}

/// The check of a new binary, running on a thread of its own while the
/// acceptor serves on (t0).
pub(crate) struct Checking {
    path: PathBuf,
    done: mpsc::Receiver<Result<(OwnedFd, CheckAnswer), String>>,
}

impl Checking {
    /// Opens the file the server runs from and starts its check; None
    /// (after a log line) if it cannot be opened.
    pub(crate) fn begin(shared: &Arc<Shared>) -> Option<Checking> {
        let Some(path) = EXE_PATH.get().cloned() else {
            count_failure();
            tracing::warn!("upgrade refused: the file this server runs from is not known");
            return None;
        };
        tracing::warn!("upgrade requested: checking {}", path.display());
        let image = match osmium_upgrade::open_image(&path) {
            Ok(fd) => fd,
            Err(e) => {
                refused(&path, &e.to_string());
                return None;
            }
        };
        let expanded: Vec<OsString> = std::env::args_os().collect();
        let waker = shared.acceptor_waker.get().cloned();
        let (tell, done) = mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("osmium-upgrade".into())
            .spawn(move || {
                let answer = osmium_upgrade::run_check(
                    image.as_fd(),
                    &expanded,
                    osmium_upgrade::CHECK_TIMEOUT,
                );
                let _ = tell.send(answer.map(|a| (image, a)));
                if let Some(w) = waker {
                    let _ = w.wake();
                }
            });
        match spawned {
            Ok(_) => Some(Checking { path, done }),
            Err(e) => {
                refused(&path, &format!("cannot start the check: {e}"));
                None
            }
        }
    }

    /// None while the check runs; then Some: the binary that passed it,
    /// or None after the refusal was logged.
    pub(crate) fn outcome(&self) -> Option<Option<Checked>> {
        let answer = match self.done.try_recv() {
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => {
                Err("the check ended without an answer".into())
            }
            Ok(answer) => answer,
        };
        Some(match answer {
            Ok((image, answer)) => {
                tracing::warn!(
                    "upgrade: {} passed the check (osmium {}, reads state formats {}-{})",
                    self.path.display(),
                    answer.version,
                    answer.reads.start(),
                    answer.reads.end()
                );
                Some(Checked {
                    path: self.path.clone(),
                    image,
                    answer,
                })
            }
            Err(why) => {
                refused(&self.path, &why);
                None
            }
        })
    }
}

/// What a listener is in the state; its fd stays open (the listener is
/// forgotten, not closed).
pub(crate) fn listener_rec(l: Listener) -> ListenerRec {
    use crate::settings::tls::ListenerTls;
    let fd = l.fd();
    let local = l.describe();
    let kind = match &l {
        Listener::Tcp(_) => ListenerKind::Tcp,
        Listener::Tls(_, mode, _) => ListenerKind::Tls {
            mode: match mode {
                ListenerTls::Off => 0,
                ListenerTls::Default => 1,
                ListenerTls::NoPeer => 2,
                ListenerTls::Peer => 3,
            },
        },
        Listener::Unix(_) => ListenerKind::Unix {
            path: PathBuf::from(&local),
        },
    };
    std::mem::forget(l);
    ListenerRec { fd, kind, local }
}

/// Item memory and the flash tier's metadata handed over by fd (t3).
/// None yet (until the store hands them over): without `-e` the new image
/// starts with an empty cache; with `-e` it takes the file over as after
/// a kill (the file's fd is close-on-exec, so its lock goes with the old
/// image). The store is neither written out nor marked closed.
fn hand_over_store(store: &Arc<Store>) -> (Option<MemoryRec>, Option<MemoryRec>) {
    let _ = store;
    (None, None)
}

/// Every fd the state names.
fn state_fds(state: &State) -> Vec<RawFd> {
    let mut fds = vec![state.old_exe];
    fds.extend(state.memory.iter().map(|m| m.fd));
    fds.extend(state.flash_meta.iter().map(|m| m.fd));
    fds.extend(state.listeners.iter().map(|l| l.fd));
    fds.extend(state.conns.iter().map(|c| c.fd));
    fds.extend(state.watchers.iter().map(|w| w.fd));
    fds
}

/// t1-t4: quiesces the server, writes the state and runs the new image.
/// Returns only if no image could be run: the server started again in
/// this process from the state.
pub(crate) fn run(started: Started, checked: Checked) -> io::Result<Started> {
    let Checked {
        path,
        image,
        answer,
    } = checked;
    // The fallback, opened before anything stops.
    let old_exe = match osmium_upgrade::running_image() {
        Ok(fd) => fd,
        Err(e) => {
            refused(&path, &format!("cannot open /proc/self/exe: {e}"));
            return Ok(started);
        }
    };
    let old_id = osmium_upgrade::image::file_id(old_exe.as_fd()).unwrap_or_default();
    let argv: Vec<OsString> = std::env::args_os().collect();
    let fingerprint = store_fingerprint(&started.shared.settings);
    // A signal from here on waits for the image that serves next (which
    // unblocks them once its handlers are installed). Threads the quiesce
    // has not stopped yet may still take one, whose flag then goes with
    // this image.
    osmium_upgrade::image::block_signals();
    let quiesced = started.quiesce(Instant::now() + DRAIN);
    let (memory, flash_meta) = hand_over_store(&quiesced.store);
    let history = history();
    let state = State {
        origin: Origin {
            version: OSMIUM_VERSION.into(),
            exe: old_id,
            pid: std::process::id(),
            first_start: history.first_start,
            upgrades: history.upgrades,
            failures: history.failures,
            failed: None,
        },
        command_line: CommandLine {
            argv: argv.clone(),
            // The command line as given: a config file is read again by
            // the new image.
            expanded: argv.clone(),
            store_fingerprint: fingerprint,
        },
        memory,
        flash_meta,
        old_exe: old_exe.as_raw_fd(),
        listeners: quiesced.listeners,
        conns: quiesced.conns,
        watchers: quiesced.watchers,
        repl: quiesced.repl,
        counters: quiesced.counters,
        secrets: Vec::new(),
        live: quiesced.live,
        extra: Vec::new(),
    };
    if quiesced.closed > 0 {
        tracing::warn!(
            "upgrade: {} connections closed at the drain deadline",
            quiesced.closed
        );
    }
    for fd in state_fds(&state) {
        if let Err(e) = osmium_upgrade::keep_fd(fd) {
            tracing::warn!("upgrade: fd {fd} cannot be kept across the exec: {e}");
        }
    }
    let written = match state.write() {
        Ok(fd) => fd,
        Err(e) => {
            let why = format!("cannot write the hand-over state: {e}");
            return start_here(state, None, quiesced.store, &why);
        }
    };
    tracing::warn!(
        "upgrade: running {} (osmium {})",
        path.display(),
        answer.version
    );
    let e = osmium_upgrade::exec_image(image.as_fd(), &argv, written.as_fd(), None);
    let why = format!("execve: {e}");
    tracing::warn!("upgrade failed: {why}; running the old image again");
    let again = osmium_upgrade::exec_image(old_exe.as_fd(), &argv, written.as_fd(), Some(&why));
    tracing::warn!("upgrade failed: the old image cannot be run again either ({again})");
    start_here(state, Some(written), quiesced.store, &why)
}

/// The last resort, when no image could be run: the server starts again
/// in this process from the state it could not hand over.
fn start_here(
    state: State,
    written: Option<OwnedFd>,
    store: Arc<Store>,
    why: &str,
) -> io::Result<Started> {
    count_failure();
    tracing::warn!("upgrade failed: {why}; serving with osmium {OSMIUM_VERSION} (started again in this process)");
    // The store's memory and its file's lock go before the start takes
    // them again.
    drop(store);
    drop(written);
    resume::close_listeners(&state);
    let settings = parse_settings(&state.command_line.expanded).map_err(io::Error::other)?;
    let files = crate::launch::load(&settings).map_err(|r| io::Error::other(r.message))?;
    crate::server::adopt(state, settings, files)
}
