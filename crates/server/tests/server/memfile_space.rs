//! The memory file's space (`-e FILE`): its blocks are reserved at start
//! (`fallocate`), so a file system too small for `-m` stops the start with
//! a message and a non-zero status, at every start, instead of a SIGBUS
//! when the cache fills (the flash tier's metadata file beside it too);
//! and a SIGBUS on the file later (here: the file cut
//! short under the server) is a message and exit status 74, after which
//! the next start begins with a clean cache instead of meeting it again.
//!
//! The small file system is a 16 MiB tmpfs the test mounts: that needs
//! root (CAP_SYS_ADMIN); where `mount` fails the test says so and passes
//! without checking anything. The other test's file lives in /dev/shm.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::restart_support;
use restart_support::*;

/// A 16 MiB tmpfs mounted on a fresh directory, unmounted when dropped.
struct SmallFs {
    dir: MemDir,
}

impl SmallFs {
    fn mount() -> Option<SmallFs> {
        let dir = MemDir::new();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
            .arg(&dir.dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallFs { dir }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a small tmpfs (needs root): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot run mount: {e}");
                None
            }
        }
    }

    fn file(&self) -> PathBuf {
        self.dir.file()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.dir.dir).status();
    }
}

/// Starts osmium on `file` with `args` and waits for it to exit (it must:
/// the start is refused); returns its status and stderr.
fn refused_start(file: &Path, args: &[&str]) -> (Option<i32>, String) {
    let exited = server(file, args).run_to_exit();
    (exited.code(), exited.stderr)
}

#[test]
fn a_file_system_too_small_for_the_memory_file_is_refused_at_every_start() {
    let Some(fs) = SmallFs::mount() else {
        return;
    };
    let file = fs.file();
    for start in 0..2 {
        let (code, err) = refused_start(&file, &["-m", "64"]);
        assert_eq!(code, Some(71), "start {start}: {err:?}");
        assert!(
            err.contains("cannot reserve")
                && err.contains(&file.display().to_string())
                && err.contains("No space left on device")
                && err.contains("16777216 bytes free"),
            "start {start}: {err:?}"
        );
    }
    // One that fits: reserved whole (every block allocated), and it serves.
    let mut srv = server(&file, &["-m", "8"]).start();
    let meta = std::fs::metadata(&file).unwrap();
    assert!(meta.blocks() * 512 >= meta.len(), "{meta:?}");
    let mut c = client(&srv);
    c.set("k", 0, 0, &vec![b'v'; 100_000]);
    assert_eq!(c.get("k").map(|i| i.value.len()), Some(100_000));
    stop(&mut srv, libc::SIGTERM);
    // With a flash tier, its metadata (FILE.flash, beside FILE) is reserved
    // too: 2 write buffers of 4 MB do not fit beside the 10 MB file.
    let flash_dir = MemDir::new();
    let ext = format!(
        "ext_path={}:64m,ext_page_size=8,ext_wbuf_size=4",
        flash_dir.file().display()
    );
    let (code, err) = refused_start(&file, &["-m", "8", "-o", &ext]);
    assert_eq!(code, Some(71), "{err:?}");
    assert!(
        err.contains(".flash: cannot reserve") && err.contains("No space left on device"),
        "{err:?}"
    );
}

#[test]
fn a_sigbus_on_the_memory_file_is_a_message_and_the_next_start_is_clean() {
    let dir = MemDir::new();
    let file = dir.file();
    let mut srv = server(&file, &["-m", "8"]).start();
    let mut c = client(&srv);
    for i in 0..100 {
        c.set(&format!("k{i}"), 0, 0, &[b'v'; 1000]);
    }
    let len = std::fs::metadata(&file).unwrap().len();
    // Cut short under the server: its item pages now lie past the end.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(8192)
        .unwrap();
    c.send(b"get k1\r\n");
    let (status, stopped) = exited(&mut srv);
    assert_eq!(status.code(), Some(74), "{:?}", stopped.stderr);
    assert!(
        stopped.stderr.contains("I/O error on the memory file")
            && stopped
                .stderr
                .contains("next start begins with a clean cache"),
        "{:?}",
        stopped.stderr
    );
    // The file back at its length (its item pages now zeros): the header
    // says the last run met an I/O error, so it is not taken over.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len)
        .unwrap();
    let srv = server(&file, &["-m", "8"]).start();
    let err = srv.wait_for_stderr(&["[restart] "]);
    assert!(
        err.contains("met an I/O error") && err.contains("starting with a clean cache"),
        "{err:?}"
    );
    let mut c = client(&srv);
    assert_eq!(c.get("k1"), None);
    c.set("k1", 0, 0, b"again");
    assert_eq!(c.get("k1").map(|i| i.value), Some(b"again".to_vec()));
}
