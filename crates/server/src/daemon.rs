//! Running in the background (`-d`) and the pid file (`-P`).
//!
//! `-d` forks before any thread exists. The parent does not exit at once:
//! it waits on a pipe until the daemon says it is serving (`R`) or why it
//! could not start (`E` and the message), then exits 0, or prints the
//! message and exits with the daemon's own exit status, so a service
//! manager or a shell sees a failed start as one.
//!
//! ```text
//!   parent ──fork──▶ daemon: setsid, stdio to /dev/null, …, listening
//!     │                 │
//!     └──read pipe ◀────┴── "R" (ready)  or  "E<message>" then exit(N)
//!   exit 0            or    print message, waitpid, exit N
//! ```
//!
//! The pid file is written as memcached writes it (a warning when it names
//! a running process; written to `FILE.tmp` and renamed, so a reader never
//! sees it empty; a failure is a message, not a stop), with or without
//! `-d`, and removed when the server stops. As memcached, it is written
//! once the process is the `-u` user (memcached drops root first of all;
//! osmium once its listeners are bound), and only once the start can no
//! longer fail, just before the server says it is ready: an unknown user
//! or any other failed start leaves no pid file. And never through a
//! link: the temporary name is created anew (`O_EXCL`, after removing
//! whatever was there), the rename replaces a link at the final name
//! rather than following it, and the old file is read only if it is a
//! regular file (`O_NOFOLLOW`). So a link planted in the pid file's
//! directory by someone who may write there cannot make the server
//! write, or wait on, any other file.

use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The daemon's end of the pipe to its waiting parent, or -1.
static READY_PIPE: AtomicI32 = AtomicI32::new(-1);

/// stderr is the config file's `logfile`: the daemon keeps it.
static KEEP_STDERR: AtomicBool = AtomicBool::new(false);

/// The daemon keeps stderr (a log file) instead of /dev/null.
pub(crate) fn keep_stderr() {
    KEEP_STDERR.store(true, Ordering::Relaxed);
}

/// Forks into the background; returns in the daemon only.
pub(crate) fn daemonize() -> io::Result<()> {
    let mut fds = [-1i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (read_end, write_end) = (fds[0], fds[1]);
    // SAFETY: fork before any thread exists.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: plain libc calls on our own process and descriptors.
            unsafe {
                libc::close(read_end);
                if libc::setsid() == -1 {
                    return Err(io::Error::last_os_error());
                }
                let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if devnull >= 0 {
                    libc::dup2(devnull, 0);
                    libc::dup2(devnull, 1);
                    if !KEEP_STDERR.load(Ordering::Relaxed) {
                        libc::dup2(devnull, 2);
                    }
                    if devnull > 2 {
                        libc::close(devnull);
                    }
                }
            }
            READY_PIPE.store(write_end, Ordering::Relaxed);
            Ok(())
        }
        child => {
            // SAFETY: closing our copy of the daemon's end.
            unsafe { libc::close(write_end) };
            std::process::exit(wait_for_daemon(read_end, child))
        }
    }
}

/// The parent: what the daemon says, then its fate.
fn wait_for_daemon(read_end: i32, child: libc::pid_t) -> i32 {
    let mut said = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        // SAFETY: reading into a local buffer of its length.
        let n = unsafe { libc::read(read_end, buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            said.extend_from_slice(&buf[..n as usize]);
            if said.first() == Some(&b'R') {
                return 0;
            }
        } else if n == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    let message = String::from_utf8_lossy(said.get(1..).unwrap_or_default());
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    let code = if waited == child && libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        71 // EX_OSERR: killed by a signal, or not ours to wait for
    };
    let message = message.trim_end();
    if message.is_empty() {
        eprintln!("failed to start: the daemon exited ({code})");
    } else {
        eprintln!("{message}");
    }
    if code == 0 {
        71
    } else {
        code
    }
}

fn tell_parent(bytes: &[u8]) {
    let fd = READY_PIPE.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: our end of the pipe, written once and closed.
        unsafe {
            libc::write(fd, bytes.as_ptr().cast(), bytes.len());
            libc::close(fd);
        }
    }
}

/// The daemon serves: its parent exits 0. Nothing without `-d`.
pub(crate) fn report_ready() {
    tell_parent(b"R");
}

/// The daemon cannot start: its parent prints `message` (its own stderr
/// is /dev/null). Without `-d`, prints it here.
pub(crate) fn report_failure(message: &str) {
    if READY_PIPE.load(Ordering::Relaxed) >= 0 {
        let mut said = Vec::with_capacity(message.len() + 1);
        said.push(b'E');
        said.extend_from_slice(message.as_bytes());
        tell_parent(&said);
    } else {
        eprintln!("{message}");
    }
}

/// The pid file (`-P`), removed when dropped (at the stop).
pub(crate) struct PidFile {
    path: String,
}

impl PidFile {
    /// Writes the pid file as memcached does (see the module comment);
    /// None, after a warning, when it could not be written.
    pub(crate) fn write(path: &str) -> Option<PidFile> {
        warn_if_running(path);
        let tmp = format!("{path}.tmp");
        // A file left at the temporary name, or a link planted there, is
        // removed (not followed), then the name is created anew: O_EXCL
        // opens no existing file or link.
        let _ = std::fs::remove_file(&tmp);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| writeln!(f, "{}", std::process::id()));
        if let Err(e) = written {
            tracing::warn!("Could not open the pid file {tmp} for writing: {e}");
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        // A rename replaces whatever is at `path`, a link included, and
        // never writes through it.
        if let Err(e) = std::fs::rename(&tmp, path) {
            tracing::warn!("Could not rename the pid file from {tmp} to {path}: {e}");
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        Some(PidFile { path: path.into() })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!("Could not remove the pid file {}: {e}", self.path);
        }
    }
}

/// memcached's warning when the pid file names a running process: its
/// first line read (at most 1 KiB, as memcached's `fgets`) if it is a
/// regular file; a link there is not followed, nor a FIFO waited on.
fn warn_if_running(path: &str) {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let Ok(file) = opened else {
        return;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return;
    }
    let mut head = Vec::new();
    if file.take(1024).read_to_end(&mut head).is_err() {
        return;
    }
    let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let pid = std::str::from_utf8(first)
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok());
    if let Some(pid) = pid {
        // Its own pid is no other server: the file an upgraded image
        // (the same process) writes again.
        let own = pid == std::process::id() as i32;
        // SAFETY: signal 0 only checks that the process exists.
        if pid > 0 && !own && unsafe { libc::kill(pid, 0) } == 0 {
            tracing::warn!("WARNING: The pid file contained the following (running) pid: {pid}");
        }
    }
}
