//! The check of a new binary (`--upgrade-check`, run on a thread of its
//! own while the acceptor serves on: t0 of the sequence in `mod.rs`),
//! and the file the server runs from (the upgrades this process went
//! through are `stats::upgrades`).

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use osmium_upgrade::{CheckAnswer, Origin};

use crate::context::Shared;
use crate::settings::Settings;
use crate::stats::upgrades::count_failure;

/// The file the server runs from: what SIGUSR2 runs.
static EXE_PATH: OnceLock<PathBuf> = OnceLock::new();

/// Notes how this image started: afresh (no `origin`), or from an
/// upgrade's state, taken over (`failed` None) or handed back (`failed`:
/// why the new image could not take it).
pub(crate) fn note_start(origin: Option<&Origin>, failed: Option<&str>) {
    crate::stats::upgrades::note_start(origin, failed);
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

pub(super) fn refused(path: &Path, why: &str) {
    count_failure(why);
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
    pub(super) path: PathBuf,
    pub(super) image: OwnedFd,
    pub(super) answer: CheckAnswer,
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
            let why = "the file this server runs from is not known";
            count_failure(why);
            tracing::warn!("upgrade refused: {why}");
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
                super::stall::stall_at("check");
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
