//! A start that must fail: the process run to its exit (killed, and the
//! test failed, if it is still running after [`crate::EXIT_TIMEOUT`]),
//! its exit status and what it wrote on stderr ([`Exited`]).

use std::fs::File;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{kill_child, EXIT_TIMEOUT};

/// How a process that had to fail at start ended.
#[derive(Debug)]
pub struct Exited {
    /// Its exit status.
    pub status: ExitStatus,
    /// Everything it wrote on stderr.
    pub stderr: String,
}

impl Exited {
    /// Its exit code (`None`: ended by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// Runs `cmd` (stdin and stdout null, stderr into the file `log`) until
/// it exits; panics, after killing it, if it runs past [`EXIT_TIMEOUT`].
pub(crate) fn run_to_exit(name: &str, mut cmd: Command, log: &Path) -> Exited {
    let err = File::create(log).expect("create the stderr log");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
    // Polled often: a refusal comes within milliseconds.
    let deadline = Instant::now() + EXIT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the process") {
            break status;
        }
        if Instant::now() >= deadline {
            kill_child(&mut child);
            let stderr = std::fs::read_to_string(log).unwrap_or_default();
            panic!(
                "{name} still ran after {EXIT_TIMEOUT:?} (a start that must fail); stderr: {stderr}"
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let stderr = std::fs::read_to_string(log).unwrap_or_default();
    Exited { status, stderr }
}
