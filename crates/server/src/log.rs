//! The server's log: every line goes through `tracing` to stderr (or to
//! the config file's `logfile`, opened as the `-u` user when started as
//! root: [`open_file`]), prefixed with the time (RFC 3339, UTC,
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

/// Installs the subscriber, and sends stderr to `logfile` (appended,
/// created mode 640) when given and `open_now` (else the caller opens it
/// later: [`open_file`]). Errors opening the file are returned.
pub(crate) fn init(logfile: Option<&str>, open_now: bool) -> Result<(), String> {
    if let (Some(path), true) = (logfile, open_now) {
        open_file(path)?;
    }
    // A log file, opened now or later, is never a terminal.
    let ansi = logfile.is_none() && std::io::stderr().is_terminal();
    // `finish` and not `init`: the `log` records of dependencies (mio's
    // registrations, rustls) are not bridged in.
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_max_level(tracing::Level::TRACE)
        .with_level(false)
        .with_target(false)
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

/// Sends stderr to `path` from now on (appended, created mode 640): at
/// start, or, started as root, once the process is the `-u` user
/// (`server::run`), so the file is opened with that user's rights and a
/// link planted at its path reaches nothing that user could not write
/// anyway. A process still root (`-u root`) does not follow a symbolic
/// link there at all.
pub(crate) fn open_file(path: &str) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let nofollow = if unsafe { libc::geteuid() } == 0 {
        libc::O_NOFOLLOW
    } else {
        0
    };
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(nofollow)
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
    Ok(())
}
