//! The process around the server (daemonizing and the pid file are
//! `crate::daemon`): dropping
//! root (`-u`), core dumps (`-r`), locked memory (`-k`), the open-file
//! limit `-c` needs, and the signals memcached answers: SIGTERM and
//! SIGINT stop, SIGUSR1 stops gracefully, SIGHUP loads the TLS
//! certificates again (as memcached); and osmium's SIGUSR2, a binary
//! upgrade in place (`crate::upgrade`).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::settings::Settings;

/// What a server may do to the process it runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Host {
    /// The `osmium` binary: the process is the server's. It installs the
    /// signal handlers, the log and the allocator setting, forks with
    /// `-d`, drops root with `-u`, applies `-k` and `-r`, and tells a
    /// service manager its state.
    Process,
    /// A server inside another program (`crate::embedded`): none of the
    /// above (the options that would need them are refused before the
    /// start), the program's own `tracing` subscriber, if any, takes its
    /// log. It raises the open-file limit for `-c`, as the binary does:
    /// a raise only, harmless to the rest of the process.
    Embedded,
}

/// Open files the server needs besides its clients: standard streams,
/// listening and UDP sockets, one event loop and waker per thread, and
/// some to spare.
pub(crate) fn reserved_fds(settings: &Settings) -> u64 {
    32 + 4 * settings.threads as u64 + 2 * settings.listen.len() as u64
}

/// Gives every allocation of 64 KiB or more (a grown read or write buffer)
/// its own mapping, returned to the system when freed. glibc otherwise
/// raises this threshold as large blocks are freed, and then serves them
/// from its heaps, which keep freed memory: a burst of slow clients would
/// leave the server's resident size high.
pub(crate) fn tune_allocator() {
    // SAFETY: mallopt only changes a setting of the allocator; it is called
    // before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
}

/// Gives the calling thread a lower CPU priority (a nice value above the
/// process's): the background cleaner, which should run when the workers
/// leave a core idle, and yield it as soon as a worker wants it. Best
/// effort: an error leaves the priority as it was.
pub(crate) fn lower_this_thread(nice: i32) {
    // SAFETY: gettid and setpriority take and return plain integers; on
    // Linux a thread id as PRIO_PROCESS's `who` names that thread only.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}

/// Sets the open-file limit to what `-c` connections need, as memcached
/// does at start; the error message is memcached's (the caller exits with
/// EX_OSERR).
pub(crate) fn raise_file_limit(settings: &Settings) -> Result<(), String> {
    let want = settings.max_connections as u64 + reserved_fds(settings);
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err("failed to getrlimit number of files".into());
    }
    if lim.rlim_cur >= want {
        return Ok(());
    }
    let raised = libc::rlimit {
        rlim_cur: want,
        rlim_max: lim.rlim_max.max(want),
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Err("failed to set rlimit for open files. Try starting as root or requesting smaller maxconns value.".into());
    }
    Ok(())
}

/// What the signals asked for, set from their handlers.
pub(crate) struct Signals {
    pub exit: Arc<AtomicBool>,
    pub graceful: Arc<AtomicBool>,
    /// SIGHUP arrived since last asked (`take_hangup`).
    hangup: Arc<AtomicBool>,
    /// SIGUSR2 arrived since last asked (`take_upgrade`).
    upgrade: Arc<AtomicBool>,
    /// Readable once any of the signals arrived (a byte per signal, written
    /// by signal-hook's handler after it set the flags): the acceptor
    /// polls it, so it sleeps until a connection or a signal comes.
    wake: Option<std::os::unix::net::UnixStream>,
}

impl Signals {
    /// Installs the handlers (before any port opens: a client that sees
    /// the port may signal at once), then unblocks the signals an upgrade
    /// blocked across its exec (one sent meanwhile is handled now).
    pub(crate) fn install() -> io::Result<Signals> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
        let exit = Arc::new(AtomicBool::new(false));
        let graceful = Arc::new(AtomicBool::new(false));
        for sig in [SIGTERM, SIGINT] {
            signal_hook::flag::register(sig, exit.clone())?;
        }
        signal_hook::flag::register(SIGUSR1, graceful.clone())?;
        // Handled, so it no longer kills: the TLS certificates reload.
        let hangup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(SIGHUP, hangup.clone())?;
        let upgrade = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(SIGUSR2, upgrade.clone())?;
        let (wake, wake_write) = std::os::unix::net::UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        wake_write.set_nonblocking(true)?;
        for sig in [SIGTERM, SIGINT, SIGUSR1, SIGHUP, SIGUSR2] {
            signal_hook::low_level::pipe::register(sig, wake_write.try_clone()?)?;
        }
        osmium_upgrade::image::unblock_signals();
        Ok(Signals {
            exit,
            graceful,
            hangup,
            upgrade,
            wake: Some(wake),
        })
    }

    /// The end that turns readable when a signal arrives (once).
    pub(crate) fn take_wake(&mut self) -> Option<mio::net::UnixStream> {
        self.wake.take().map(mio::net::UnixStream::from_std)
    }

    /// Whether SIGHUP arrived since the last call.
    pub(crate) fn take_hangup(&self) -> bool {
        self.hangup.swap(false, Ordering::Relaxed)
    }

    /// Whether SIGUSR2 (an upgrade) arrived since the last call.
    pub(crate) fn take_upgrade(&self) -> bool {
        self.upgrade.swap(false, Ordering::Relaxed)
    }

    /// The stop a signal asked for, if any.
    pub(crate) fn requested(&self) -> Option<crate::context::StopRequest> {
        if self.exit.load(Ordering::Relaxed) {
            Some(crate::context::StopRequest::Exit)
        } else if self.graceful.load(Ordering::Relaxed) {
            Some(crate::context::StopRequest::Graceful)
        } else {
            None
        }
    }
}

/// Is the real or the effective user id root? (memcached's test before
/// `-u`.)
pub(crate) fn running_as_root() -> bool {
    // SAFETY: getuid and geteuid have no preconditions and cannot fail.
    unsafe { libc::getuid() == 0 || libc::geteuid() == 0 }
}

/// memcached's refusal to run as root unless `-u` names a user (`-u root`
/// to stay root). The error message is memcached's; the caller exits with
/// EX_USAGE. memcached checks this after raising the open-file limit and
/// before reading the authentication files or opening any socket.
pub(crate) fn refuse_root_without_user(settings: &Settings) -> Result<(), String> {
    let named = settings.user.as_deref().is_some_and(|u| !u.is_empty());
    if running_as_root() && !named {
        return Err("must add '-u root' to start as root".into());
    }
    Ok(())
}

/// `-u` names no user: memcached's words, and its status (`EX_NOUSER`).
#[derive(Debug)]
pub(crate) struct NoSuchUser(pub String);

impl std::fmt::Display for NoSuchUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "can't find the user {} to switch to", self.0)
    }
}

impl std::error::Error for NoSuchUser {}

/// Becomes `user` when started as root (real or effective uid 0); does
/// nothing otherwise, as memcached ignores `-u` then.
pub(crate) fn drop_privileges(user: &str) -> io::Result<()> {
    if !running_as_root() {
        return Ok(());
    }
    let name = std::ffi::CString::new(user).map_err(io::Error::other)?;
    // SAFETY: getpwnam returns a pointer into static storage or null; we
    // read it before any other getpw* call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(io::Error::other(NoSuchUser(user.to_string())));
    }
    // SAFETY: pw is non-null and valid until the next getpw* call.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    // SAFETY: plain libc calls.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM)
        {
            return Err(io::Error::last_os_error());
        }
        if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(io::Error::other(format!(
                "failed to assume identity of user {user}"
            )));
        }
    }
    Ok(())
}

pub(crate) fn apply_process_flags(settings: &Settings) {
    if settings.coredumps {
        let lim = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) } != 0 {
            tracing::warn!("failed to ensure corefile creation");
        }
    }
    if settings.lock_memory {
        // SAFETY: mlockall has no memory-safety preconditions.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            tracing::warn!(
                "warning: -k invalid, mlockall() failed: {}",
                io::Error::last_os_error()
            );
        }
    }
}
