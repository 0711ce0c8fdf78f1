//! Every process the harness started and still owns, and every scratch
//! directory it made, in one process-wide list, so that a program that
//! must stop at once (a benchmark on Ctrl-C) can kill them all:
//! [`kill_all_started`].
//!
//! A started process is shared between its [`crate::ServerProcess`] and
//! this list as one `Arc<Mutex<Option<Child>>>`: whoever signals or reaps
//! it does so under that lock, and std's `Child` remembers that it was
//! reaped, so a signal never reaches a process that reused the PID of one
//! already gone. The list holds weak references: a process dropped (and so
//! killed) leaves it by itself.
//!
//! ```text
//!   ServerProcess ──Arc──▶ Mutex<Option<Child>> ◀──Weak── STARTED.children
//!   Scratch ─────────────── path ───────────────────────── STARTED.dirs
//! ```

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::kill_child;

/// A started process, shared by its owner and the list.
pub(crate) type SharedChild = Arc<Mutex<Option<Child>>>;

struct Started {
    children: Vec<Weak<Mutex<Option<Child>>>>,
    dirs: Vec<PathBuf>,
    /// Set by [`kill_all_started`]: no start after it.
    closed: bool,
}

static STARTED: Mutex<Started> = Mutex::new(Started {
    children: Vec::new(),
    dirs: Vec::new(),
    closed: false,
});

fn started() -> MutexGuard<'static, Started> {
    STARTED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Locks one shared child (a panic while it was held leaves it usable).
pub(crate) fn lock(child: &SharedChild) -> MutexGuard<'_, Option<Child>> {
    child.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `spawn` and puts the child it made on the list, both under the
/// list's lock: [`kill_all_started`] sees every child spawned before it,
/// and after it no child is spawned (an error instead).
pub(crate) fn spawn(spawn: impl FnOnce() -> Result<Child, String>) -> Result<SharedChild, String> {
    let mut list = started();
    if list.closed {
        return Err(
            "the harness has killed every process it started (kill_all_started): \
                    no more starts"
                .to_string(),
        );
    }
    let child = Arc::new(Mutex::new(Some(spawn()?)));
    list.children.retain(|c| c.strong_count() > 0);
    list.children.push(Arc::downgrade(&child));
    Ok(child)
}

/// Puts a scratch directory on the list.
pub(crate) fn add_dir(dir: &Path) {
    started().dirs.push(dir.to_path_buf());
}

/// Takes a scratch directory off the list (its owner removed it).
pub(crate) fn remove_dir(dir: &Path) {
    started().dirs.retain(|d| d != dir);
}

/// Kills (SIGKILL) and reaps every process the harness started that its
/// owner has not stopped or handed over yet, removes every scratch
/// directory still there, and refuses any start from then on; how many
/// processes it killed. For a program about to exit on a signal (its
/// handler runs on another thread than the owners, who are not told):
/// `exit` runs no destructor, so without it the servers would outlive it.
pub fn kill_all_started() -> usize {
    let mut list = started();
    list.closed = true;
    let mut killed = 0;
    for child in list.children.drain(..).filter_map(|c| c.upgrade()) {
        if let Some(child) = lock(&child).as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                killed += 1;
            }
            kill_child(child);
        }
    }
    for dir in list.dirs.drain(..) {
        let _ = std::fs::remove_dir_all(dir);
    }
    killed
}
