//! The fds kept across an exec, the running image's fd, and exec_image's
//! failures, which leave the process as it was.

use super::*;
use crate::testing::{scratch_file, ExecLock};
use std::os::fd::AsFd;

fn cloexec(fd: RawFd) -> bool {
    // SAFETY: F_GETFD of an fd we hold.
    unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
}

fn blocked(sig: libc::c_int) -> bool {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: pthread_sigmask with a null new set only reads the mask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), set.as_mut_ptr());
        libc::sigismember(set.as_ptr(), sig) == 1
    }
}

#[test]
fn keep_fd_and_drop_on_exec_flip_the_flag() {
    let image = running_image().unwrap();
    let fd = image.as_raw_fd();
    assert!(cloexec(fd), "running_image is close-on-exec");
    keep_fd(fd).unwrap();
    assert!(!cloexec(fd));
    drop_on_exec(fd).unwrap();
    assert!(cloexec(fd));
    assert!(keep_fd(-1).is_err());
}

#[test]
fn the_running_image_is_this_process_file() {
    let image = running_image().unwrap();
    let meta = std::fs::metadata("/proc/self/exe").unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(file_id(image.as_fd()).unwrap(), (meta.dev(), meta.ino()));
}

#[test]
fn open_image_is_kept_across_exec() {
    let image = open_image(Path::new("/bin/sh")).unwrap();
    assert!(!cloexec(image.as_raw_fd()));
}

fn exec_fails(content: &str, mode: u32) -> io::Error {
    let _lock = ExecLock::take();
    let path = scratch_file("exec", content, mode);
    let image = open_image(&path).unwrap();
    let state = running_image().unwrap();
    let e = exec_image(
        image.as_fd(),
        &["osmium".into()],
        state.as_fd(),
        Some("why"),
    );
    let _ = std::fs::remove_file(&path);
    assert!(!blocked(libc::SIGUSR2), "the signals are unblocked again");
    e
}

#[test]
fn an_exec_of_a_file_that_is_not_executable_returns() {
    assert_eq!(
        exec_fails("#!/bin/sh\nexit 0\n", 0o644).raw_os_error(),
        Some(libc::EACCES)
    );
}

#[test]
fn an_exec_of_garbage_returns() {
    assert_eq!(
        exec_fails("garbage, not a program\n", 0o755).raw_os_error(),
        Some(libc::ENOEXEC)
    );
}

#[test]
fn an_argument_with_a_nul_is_refused_before_the_exec() {
    let image = running_image().unwrap();
    let e = exec_image(image.as_fd(), &["a\0b".into()], image.as_fd(), None);
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}
