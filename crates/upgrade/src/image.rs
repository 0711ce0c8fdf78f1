//! The process side of an upgrade: file descriptors kept across an exec
//! ([`keep_fd`]), the fd of the running image, the fallback
//! ([`running_image`]), the fd of the new one ([`open_image`]), the exec
//! itself ([`exec_image`]) and, in the image that starts, what the exec
//! handed it ([`take_env`]).
//!
//! The image is exec'd through an fd (`execveat(fd, "", ..,
//! AT_EMPTY_PATH)`), never by its path: the file checked is the file run
//! even if the path is replaced meanwhile, and the old image can be run
//! again after its file was replaced or deleted. The fd must not be
//! close-on-exec: for a `#!` script the kernel hands the interpreter
//! `/dev/fd/N`, and `execveat` fails with ENOENT when N would be closed.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::{ENV_FAILED, ENV_FD, ENV_IMAGE_FD};

/// The signals blocked across the exec: the mask is inherited, the
/// handlers are not, so one of these arriving before the new image has
/// installed its own would take the default action (end it). The new
/// image unblocks them once its handlers are in place; one sent
/// meanwhile is then handled, not lost.
pub const BLOCKED_ACROSS_EXEC: [libc::c_int; 5] = [
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGTERM,
    libc::SIGINT,
];

/// Clears `fd`'s close-on-exec flag: it is kept across the exec.
pub fn keep_fd(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFD / F_SETFD read and set an fd's flags; an invalid fd
    // is an EBADF error, nothing else.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        if flags & libc::FD_CLOEXEC != 0
            && libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets `fd`'s close-on-exec flag again.
pub fn drop_on_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: as in keep_fd.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn open_path(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: open takes a NUL-terminated path and flags; the fd it
    // returns is new.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `O_PATH` fd on the running image (`/proc/self/exe`: the inode this
/// process runs, even after its file was replaced or deleted),
/// close-on-exec: [`exec_image`] keeps it where it is handed over.
pub fn running_image() -> io::Result<OwnedFd> {
    open_path(Path::new("/proc/self/exe"), libc::O_PATH | libc::O_CLOEXEC)
}

/// An `O_PATH` fd on the new image's file, opened before the check so
/// that the checked file is the one run; not close-on-exec (module
/// comment).
pub fn open_image(path: &Path) -> io::Result<OwnedFd> {
    open_path(path, libc::O_PATH)
}

/// The (st_dev, st_ino) of the file `fd` names.
pub fn file_id(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat fills the struct it is given (an O_PATH fd is fine).
    if unsafe { libc::fstat(fd.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it filled the struct.
    let stat = unsafe { stat.assume_init() };
    Ok((stat.st_dev, stat.st_ino))
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument or environment variable with a NUL byte",
        )
    })
}

/// The environment for the exec: this process's, without any upgrade
/// variable it was given, with the state's fd, the image's and `failed`.
fn exec_environment(image: RawFd, state: RawFd, failed: Option<&str>) -> io::Result<Vec<CString>> {
    let ours = [ENV_FD, ENV_FAILED, ENV_IMAGE_FD];
    let mut env = Vec::new();
    for (key, value) in std::env::vars_os() {
        if ours.iter().any(|o| key == *o) {
            continue;
        }
        let mut pair = key;
        pair.push("=");
        pair.push(value);
        env.push(c_string(&pair)?);
    }
    env.push(c_string(OsStr::new(&format!("{ENV_FD}={state}")))?);
    env.push(c_string(OsStr::new(&format!("{ENV_IMAGE_FD}={image}")))?);
    if let Some(why) = failed {
        env.push(c_string(&OsString::from(format!("{ENV_FAILED}={why}")))?);
    }
    Ok(env)
}

/// Replaces this process's image by the file `image` names, with `argv`,
/// this environment plus `OSMIUM_UPGRADE_FD=<state>` (and
/// `OSMIUM_UPGRADE_FAILED=<failed>` for a hand-back): returns only if
/// the exec failed, with its error, the process as it was (the signals
/// blocked for the exec unblocked again). `state` and `image` are kept
/// across the exec; every other fd to keep must be kept before
/// ([`keep_fd`]).
pub fn exec_image(
    image: BorrowedFd<'_>,
    argv: &[OsString],
    state: BorrowedFd<'_>,
    failed: Option<&str>,
) -> io::Error {
    let prepared = (|| -> io::Result<(Vec<CString>, Vec<CString>)> {
        keep_fd(state.as_raw_fd())?;
        keep_fd(image.as_raw_fd())?;
        let args = argv
            .iter()
            .map(|a| c_string(a))
            .collect::<io::Result<Vec<_>>>()?;
        let env = exec_environment(image.as_raw_fd(), state.as_raw_fd(), failed)?;
        Ok((args, env))
    })();
    let (args, env) = match prepared {
        Ok(p) => p,
        Err(e) => return e,
    };
    // execveat's prototype takes `char *const[]`; nothing is written
    // through them.
    let mut arg_ptrs: Vec<*mut libc::c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    arg_ptrs.push(std::ptr::null_mut());
    let mut env_ptrs: Vec<*mut libc::c_char> = env.iter().map(|e| e.as_ptr().cast_mut()).collect();
    env_ptrs.push(std::ptr::null_mut());

    let mut blocked = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut before = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset/sigaddset initialise the set we own;
    // pthread_sigmask reads it and fills `before`.
    let masked = unsafe {
        libc::sigemptyset(blocked.as_mut_ptr());
        for sig in BLOCKED_ACROSS_EXEC {
            libc::sigaddset(blocked.as_mut_ptr(), sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, blocked.as_ptr(), before.as_mut_ptr())
    };
    if masked != 0 {
        return io::Error::from_raw_os_error(masked);
    }
    // SAFETY: the path is an empty NUL-terminated string, argv and envp
    // are NULL-terminated arrays of pointers into CStrings alive until
    // after the call; with AT_EMPTY_PATH the fd itself is run.
    unsafe {
        libc::execveat(
            image.as_raw_fd(),
            c"".as_ptr(),
            arg_ptrs.as_ptr(),
            env_ptrs.as_ptr(),
            libc::AT_EMPTY_PATH,
        );
    }
    let error = io::Error::last_os_error();
    // SAFETY: `before` was filled by the pthread_sigmask above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, before.as_ptr(), std::ptr::null_mut());
    }
    error
}

/// Blocks, in the calling thread, the signals [`exec_image`] blocks: from
/// the moment an upgrade stops serving, one sent is left pending for the
/// image that serves next (pending signals survive the exec) rather
/// than set a flag of this one.
pub fn block_signals() {
    change_mask(libc::SIG_BLOCK);
}

/// Unblocks the signals [`exec_image`] blocked, once the image that
/// starts has installed its handlers (a no-op in an image not started by
/// an upgrade).
pub fn unblock_signals() {
    change_mask(libc::SIG_UNBLOCK);
}

fn change_mask(how: libc::c_int) {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset/sigaddset initialise the set we own;
    // pthread_sigmask only reads it.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for sig in BLOCKED_ACROSS_EXEC {
            libc::sigaddset(set.as_mut_ptr(), sig);
        }
        libc::pthread_sigmask(how, set.as_ptr(), std::ptr::null_mut());
    }
}

/// What an exec by [`exec_image`] handed the image that starts.
#[derive(Debug)]
pub struct Inherited {
    /// The state memfd (close-on-exec again: [`exec_image`] keeps it if
    /// the state is handed on).
    pub state: OwnedFd,
    /// Set when a new image handed the state back: why it could not take
    /// it over.
    pub failed: Option<String>,
}

/// Reads and removes the upgrade variables from the environment, closes
/// the fd this image was exec'd through and marks the state's fd
/// close-on-exec again. None: not started by an upgrade (or a variable
/// that names no fd). To call first thing in `main`, before any thread
/// exists (it changes the environment).
pub fn take_env() -> Option<Inherited> {
    let var = |key: &str| {
        let value = std::env::var_os(key);
        std::env::remove_var(key);
        value.and_then(|v| v.into_string().ok())
    };
    let state = var(ENV_FD);
    let image = var(ENV_IMAGE_FD);
    let failed = var(ENV_FAILED);
    if let Some(fd) = image
        .and_then(|v| v.parse::<RawFd>().ok())
        .filter(|fd| *fd > 2)
    {
        // SAFETY: the exec handed us this fd for us to close, and nothing
        // in this image has used it.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let fd = state?.parse::<RawFd>().ok().filter(|fd| *fd > 2)?;
    drop_on_exec(fd).ok()?;
    Some(Inherited {
        // SAFETY: the exec handed us this fd, and nothing else owns it.
        state: unsafe { OwnedFd::from_raw_fd(fd) },
        failed,
    })
}

#[cfg(test)]
mod tests;
