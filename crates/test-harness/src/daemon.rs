//! A server that daemonized (`-d`): not a child of the test, so it is
//! known by the PID it wrote to its pid file, stopped by that PID and
//! killed (SIGKILL) when dropped, so a failing test leaves none behind.

use std::path::Path;

use crate::{poll, signal, EXIT_TIMEOUT};

/// A daemon found by its pid file (module comment).
pub struct Daemon {
    pid: u32,
}

impl Daemon {
    /// The daemon whose PID is in `pid_file` (waited for up to
    /// [`EXIT_TIMEOUT`]: a daemon may write it after its parent returned).
    pub fn from_pid_file(pid_file: &Path) -> Daemon {
        let mut pid = None;
        poll::wait_until(
            &format!("a pid in {}", pid_file.display()),
            EXIT_TIMEOUT,
            || {
                pid = std::fs::read_to_string(pid_file)
                    .ok()
                    .and_then(|p| p.trim().parse().ok());
                pid.is_some()
            },
        );
        Daemon {
            pid: pid.expect("polled until read"),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process still runs (exists, and is no zombie waiting
    /// for a parent that does not reap it).
    pub fn alive(&self) -> bool {
        let zombie =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z'))
            });
        signal(self.pid, 0) && !zombie
    }

    /// SIGTERM, then waits up to [`EXIT_TIMEOUT`] for it to be gone.
    pub fn stop(&self) {
        assert!(signal(self.pid, libc::SIGTERM), "SIGTERM to {}", self.pid);
        poll::wait_until(
            &format!("daemon {} to exit", self.pid),
            EXIT_TIMEOUT,
            || !self.alive(),
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.alive() {
            signal(self.pid, libc::SIGKILL);
        }
    }
}
