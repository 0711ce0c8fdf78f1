//! The check of a new binary (`--upgrade-check`, run on a thread of its
//! own while the event loop serves on: t0 of the sequence in `mod.rs`),
//! and the file the proxy runs from.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use osmium_upgrade::CheckAnswer;

/// The file the proxy runs from: what SIGUSR2 runs.
static EXE_PATH: OnceLock<PathBuf> = OnceLock::new();

/// Notes the file this image runs from, by the path it was started
/// from (after an upgrade that failed, the running file may have been
/// replaced: its link then ends in " (deleted)").
pub fn note_exe() {
    if let Ok(path) = std::env::current_exe() {
        let text = path.as_os_str().to_string_lossy();
        let path = match text.strip_suffix(" (deleted)") {
            Some(stripped) => PathBuf::from(stripped),
            None => path,
        };
        let _ = EXE_PATH.set(path);
    }
}

/// Logs a refused upgrade.
pub fn refused(path: &Path, why: &str) {
    tracing::warn!("upgrade refused: {}: {why}", path.display());
}

/// A new binary that passed its check: the fd it is run through.
#[derive(Debug)]
pub struct Checked {
    /// Its path.
    pub path: PathBuf,
    /// An `O_PATH` fd on it (the file checked is the file run).
    pub image: OwnedFd,
    /// What it answered.
    pub answer: CheckAnswer,
    /// An `O_PATH` fd on the running image: the fallback, opened before
    /// anything stops.
    pub old_exe: OwnedFd,
}

/// The check of a new binary, running on a thread of its own while the
/// event loop serves on (t0).
#[derive(Debug)]
pub struct Checking {
    path: PathBuf,
    done: mpsc::Receiver<Result<(OwnedFd, CheckAnswer), String>>,
}

impl Checking {
    /// Opens the file the proxy runs from and starts its check (the loop
    /// is woken by `waker` when it is done); None (after a log line) if
    /// it cannot be opened.
    pub fn begin(waker: Arc<mio::Waker>) -> Option<Checking> {
        let Some(path) = EXE_PATH.get().cloned() else {
            tracing::warn!("upgrade refused: the file this proxy runs from is not known");
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
        let (tell, done) = mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("osmium-proxy-upgrade".into())
            .spawn(move || {
                let answer = osmium_upgrade::run_check(
                    image.as_fd(),
                    &expanded,
                    osmium_upgrade::CHECK_TIMEOUT,
                );
                let _ = tell.send(answer.map(|a| (image, a)));
                let _ = waker.wake();
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
    pub fn outcome(&self) -> Option<Option<Checked>> {
        let answer = match self.done.try_recv() {
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => {
                Err("the check ended without an answer".into())
            }
            Ok(answer) => answer,
        };
        Some(match answer {
            Ok((image, answer))
                if !answer.takes(osmium_upgrade::TAKES_PROXY)
                    || !answer.takes(osmium_upgrade::TAKES_CONNS) =>
            {
                // Not an osmium-proxy that takes a proxy's listeners and
                // clients over (an osmium server, or an older build).
                drop(image);
                refused(
                    &self.path,
                    &format!(
                        "the new binary does not take an osmium-proxy's state over (takes={})",
                        answer.takes.join(",")
                    ),
                );
                None
            }
            Ok((image, answer)) => {
                let old_exe = match osmium_upgrade::running_image() {
                    Ok(fd) => fd,
                    Err(e) => {
                        refused(&self.path, &format!("cannot open /proc/self/exe: {e}"));
                        return Some(None);
                    }
                };
                tracing::warn!(
                    "upgrade: {} passed the check (osmium-proxy {}, reads state formats {}-{})",
                    self.path.display(),
                    answer.version,
                    answer.reads.start(),
                    answer.reads.end()
                );
                Some(Checked {
                    path: self.path.clone(),
                    image,
                    answer,
                    old_exe,
                })
            }
            Err(why) => {
                refused(&self.path, &why);
                None
            }
        })
    }
}
