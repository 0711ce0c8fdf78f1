//! The old image's last step, the same for the server and the proxy: the
//! state, filled by the program, written into its sealed memfd with every
//! fd it names kept across the exec; the new image run; and the first
//! fallback when it cannot be: the old image run again, handed the state
//! with why (`OSMIUM_UPGRADE_FAILED`). What is left when even that fails
//! (the last resort: starting again in this process from the state) is
//! the program's.

use std::ffi::OsString;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use crate::checker::Checked;
use crate::image::{exec_image, keep_fd};
use crate::state::State;

/// Every fd `state` names: the old image's, item memory's, the flash
/// tier's metadata, listeners, connections and `watch` connections.
fn state_fds(state: &State) -> Vec<RawFd> {
    let mut fds = vec![state.old_exe];
    fds.extend(state.memory.iter().map(|m| m.fd));
    fds.extend(state.flash_meta.iter().map(|m| m.fd));
    fds.extend(state.listeners.iter().map(|l| l.fd));
    fds.extend(state.conns.iter().map(|c| c.fd));
    fds.extend(state.watchers.iter().map(|w| w.fd));
    fds
}

/// Keeps every fd `state` names across the exec, writes the state and
/// runs the new image `new` (`name` its program's name in the log line),
/// the command line `argv`; if it cannot be run, the old image `old_exe`
/// again, handed the state with why. Returns only if neither could be
/// run: why, and the state's memfd if it was written (for the program to
/// close once it no longer needs the state's fds). `warn` writes the log
/// lines as the program's own.
pub fn exec_new(
    state: &State,
    new: &Checked,
    name: &str,
    old_exe: BorrowedFd<'_>,
    argv: &[OsString],
    warn: fn(fmt::Arguments<'_>),
) -> (String, Option<OwnedFd>) {
    for fd in state_fds(state) {
        if let Err(e) = keep_fd(fd) {
            warn(format_args!(
                "upgrade: fd {fd} cannot be kept across the exec: {e}"
            ));
        }
    }
    let written = match state.write() {
        Ok(fd) => fd,
        Err(e) => return (format!("cannot write the hand-over state: {e}"), None),
    };
    warn(format_args!(
        "upgrade: running {} ({name} {})",
        new.path.display(),
        new.answer.version
    ));
    let e = exec_image(new.image.as_fd(), argv, written.as_fd(), None);
    let why = format!("execve: {e}");
    warn(format_args!(
        "upgrade failed: {why}; running the old image again"
    ));
    let again = exec_image(old_exe, argv, written.as_fd(), Some(&why));
    warn(format_args!(
        "upgrade failed: the old image cannot be run again either ({again})"
    ));
    (why, Some(written))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::CheckAnswer;
    use crate::state::{CommandLine, ListenerKind, ListenerRec, MemoryRec, Origin};
    use crate::testing::{scratch_file, ExecLock};
    use std::os::fd::AsRawFd;

    fn state(old_exe: RawFd) -> State {
        State::new(
            Origin {
                version: "9.9.9".into(),
                exe: (1, 2),
                pid: std::process::id(),
                first_start: 1_700_000_000,
                upgrades: 0,
                failures: 0,
                failed: None,
            },
            CommandLine {
                argv: vec!["osmium".into()],
                expanded: vec!["osmium".into()],
                store_fingerprint: 0,
            },
            old_exe,
        )
    }

    #[test]
    fn every_fd_the_state_names_is_kept() {
        let mut s = state(3);
        s.memory = Some(MemoryRec {
            fd: 4,
            path: None,
            consistent: true,
        });
        s.listeners.push(ListenerRec {
            fd: 5,
            kind: ListenerKind::Tcp,
            local: String::new(),
        });
        assert_eq!(state_fds(&s), vec![3, 4, 5]);
    }

    #[test]
    fn when_neither_image_can_be_run_the_written_state_and_why_come_back() {
        // Files that are not executable: execveat fails (EACCES) and the
        // test process stays itself.
        let _lock = ExecLock::take();
        let new_path = scratch_file("new", "#!/bin/sh\nexit 0\n", 0o644);
        let old_path = scratch_file("old", "#!/bin/sh\nexit 0\n", 0o644);
        let new = Checked {
            path: new_path.clone(),
            image: crate::open_image(&new_path).unwrap(),
            answer: CheckAnswer {
                version: "9.9.9".into(),
                reads: crate::READS,
                exe: (1, 2),
                takes: Vec::new(),
            },
        };
        let old_exe = crate::open_image(&old_path).unwrap();
        let s = state(old_exe.as_raw_fd());
        let (why, written) = exec_new(
            &s,
            &new,
            "osmium",
            old_exe.as_fd(),
            &s.command_line.argv,
            |_| {},
        );
        let _ = std::fs::remove_file(&new_path);
        let _ = std::fs::remove_file(&old_path);
        assert!(why.starts_with("execve: "), "{why}");
        let written = written.expect("the state was written");
        assert_eq!(State::read(written.as_raw_fd()).unwrap(), s);
    }
}
