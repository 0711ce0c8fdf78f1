//! What the unit tests share: scratch files, and a lock held while a
//! test writes a program and runs it (a file still open for writing in a
//! child another test forks meanwhile would make its exec fail with
//! ETXTBSY).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

static EXEC: Mutex<()> = Mutex::new(());

/// Held while a test writes a program and runs it.
pub(crate) struct ExecLock(#[allow(dead_code)] MutexGuard<'static, ()>);

impl ExecLock {
    pub(crate) fn take() -> ExecLock {
        ExecLock(EXEC.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A new file under the temporary directory with `content` and `mode`.
pub(crate) fn scratch_file(name: &str, content: &str, mode: u32) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "osmium-upgrade-{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)
        .expect("create a scratch file");
    file.write_all(content.as_bytes()).expect("write it");
    path
}
