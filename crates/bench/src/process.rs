//! Any other process a benchmark runs beside the servers of [`crate::servers`]
//! (a proxy, servers with their own arguments): started from a ready
//! `Command` whose port the caller chose, waited for until it accepts on
//! that port, killed by PID when dropped or when a signal stops the run.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers;

/// A running process; dropping it kills it (by PID) and reaps it.
pub(crate) struct Process {
    pub name: String,
    pub pid: u32,
    pub port: u16,
    log: PathBuf,
}

impl Process {
    /// Spawns `cmd` (stdout discarded, stderr to a log file) and waits up to
    /// 15 s until something accepts on 127.0.0.1:`port`.
    pub(crate) fn start(name: &str, mut cmd: Command, port: u16) -> Result<Process, String> {
        let log = std::env::temp_dir().join(format!(
            "osmium-bench-{}-{name}-{port}.log",
            std::process::id()
        ));
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("starting {name} ({cmd:?}): {e}"))?;
        let pid = child.id();
        servers::track(child, log.clone());
        let p = Process {
            name: name.to_string(),
            pid,
            port,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = servers::tracked_exit(pid) {
                return Err(format!(
                    "{name} exited at start ({status}): {}",
                    p.stderr_text().trim()
                ));
            }
            if TcpStream::connect_timeout(&p.addr(), Duration::from_millis(200)).is_ok() {
                return Ok(p);
            }
            if Instant::now() > deadline {
                return Err(format!("{name} did not accept on port {port} within 15 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// What the process has written on stderr so far.
    pub(crate) fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails if the process has died.
    pub(crate) fn check_alive(&self) -> Result<(), String> {
        match servers::tracked_exit(self.pid) {
            Some(status) => Err(format!("{} (pid {}) died: {status}", self.name, self.pid)),
            None => Ok(()),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        servers::kill_tracked(self.pid);
        let _ = std::fs::remove_file(&self.log);
    }
}
