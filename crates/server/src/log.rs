//! The server's log: every line goes through `tracing` to stderr (or to
//! the config file's `logfile`), prefixed with the time (RFC 3339, UTC,
//! microseconds: osmium's addition); the rest of each line is memcached's
//! own text, byte for byte (`<14 set foo 0 0 3`, `>14 STORED`). No ANSI
//! codes unless stderr is a terminal.
//!
//! Which lines are written is decided where they are made, by the
//! verbosity (`-v`, `-vv`, `-vvv`, or the `verbosity` command), as
//! memcached decides: a level check, so that a worker pays one relaxed
//! load for a `-vv` line it does not log. The tracing levels say what a
//! line is: `error!`/`warn!` always written, `info!` with `-v`, `debug!`
//! with `-vv`, `trace!` with `-vvv`.

use std::io::IsTerminal;
use std::os::fd::AsRawFd;

/// Sends stderr to `logfile` (appended, created mode 640) when given, and
/// installs the subscriber. Errors opening the file are returned.
pub fn init(logfile: Option<&str>) -> Result<(), String> {
    if let Some(path) = logfile {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(path)
            .map_err(|e| format!("Could not open the log file {path}: {e}"))?;
        // SAFETY: dup2 onto stderr's descriptor; `file` stays open until
        // the call returns and its copy on 2 outlives it.
        if unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
            return Err(format!(
                "Could not write the log to {path}: {}",
                std::io::Error::last_os_error()
            ));
        }
        crate::daemon::keep_stderr();
    }
    // `finish` and not `init`: the `log` records of dependencies (mio's
    // registrations, rustls) are not bridged in.
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(tracing::Level::TRACE)
        .with_level(false)
        .with_target(false)
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}
