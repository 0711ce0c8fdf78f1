//! The process edges a service manager sees: `-P` written with and
//! without `-d` and removed at a stop, and `-d` returning only once the
//! daemon serves, or failing with the daemon's reason and status. And the
//! pid file attacked: links planted at its temporary and final names (the
//! linked file untouched), a FIFO there (no hang), a failed start (no pid
//! file left), written as the `-u` user.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common;
use common::{free_port, wait_until};
use osmium_test_harness::{Daemon, Running};

fn osmium() -> String {
    std::env::var("OSMIUM_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_osmium").to_string())
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("osmium-daemon-{}-{name}", std::process::id()))
}

fn version(port: u16) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"version\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = c.read(&mut buf).unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn read_pid(path: &PathBuf) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn the_pid_file_is_written_in_the_foreground_and_removed_at_a_stop() {
    let pidfile = temp_path("fg.pid");
    let _ = std::fs::remove_file(&pidfile);
    let mut server = common::osmium().arg("-P").arg(&pidfile).start();
    wait_until("the pid file", || pidfile.exists());
    assert_eq!(read_pid(&pidfile), server.pid() as i32);
    assert!(version(server.port()).starts_with("VERSION "));
    assert!(server.stop().success());
    assert!(!pidfile.exists(), "removed at the stop");
}

#[test]
fn a_daemon_returns_once_serving_and_removes_its_pid_file() {
    let pidfile = temp_path("d.pid");
    let _ = std::fs::remove_file(&pidfile);
    // A daemonizing start, which the test drives itself: the command's
    // return is what is tested.
    let port = free_port();
    let mut cmd = Command::new(osmium());
    if osmium_test_harness::running_as_root() {
        cmd.args(["-u", "root"]);
    }
    let out = cmd
        .args(["-d", "-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"])
        .arg("-P")
        .arg(&pidfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let daemon = Daemon::from_pid_file(&pidfile);
    // Serving as soon as the command returned: no wait.
    assert!(version(port).starts_with("VERSION "));
    assert!(daemon.alive());
    daemon.stop();
    assert!(!pidfile.exists(), "removed at the stop");
}

#[test]
fn a_daemon_that_cannot_start_fails_with_its_reason() {
    // An unknown user is found only after the fork (as memcached, `-u` is
    // applied after binding): the daemon's reason and status reach the
    // caller instead of /dev/null and 0. Only root switches users.
    if !osmium_test_harness::running_as_root() {
        eprintln!("SKIP: -u is ignored unless started as root");
        return;
    }
    let port = free_port();
    let out = std::process::Command::new(osmium())
        .args(["-d", "-u", "no-such-user-osmium", "-p", &port.to_string()])
        .args(["-U", "0", "-l", "127.0.0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(67), "{err}");
    assert!(
        err.contains("can't find the user no-such-user-osmium to switch to"),
        "{err:?}"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing serves"
    );
    // Nor with -P, in the foreground: no pid file left (it is written as
    // the user, once the start cannot fail).
    let pidfile = temp_path("nouser.pid");
    let out = std::process::Command::new(osmium())
        .args(["-u", "no-such-user-osmium", "-p", &port.to_string()])
        .args(["-U", "0", "-l", "127.0.0.1", "-P"])
        .arg(&pidfile)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(67));
    assert!(!pidfile.exists(), "a pid file left by a failed start");
    assert!(!PathBuf::from(format!("{}.tmp", pidfile.display())).exists());
}

#[test]
fn a_start_that_fails_after_binding_leaves_no_pid_file() {
    // The memory file's directory does not exist: the store cannot open,
    // after the listeners are bound.
    let pidfile = temp_path("failed.pid");
    let _ = std::fs::remove_file(&pidfile);
    let out = common::osmium()
        .memory_file("/nonexistent-osmium-dir/memory")
        .arg("-P")
        .arg(&pidfile)
        .run_to_exit();
    assert!(!out.status.success(), "{out:?}");
    assert!(!pidfile.exists(), "a pid file left by a failed start");
}

/// A directory of the test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = temp_path(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// osmium with `-P pidfile` (and `extra`), once it listens and the pid
/// file is there.
fn start_with_pid_file(pidfile: &Path, extra: &[&str]) -> Running {
    let mut server = common::osmium().args(extra).arg("-P").arg(pidfile).start();
    wait_until("the pid file", || {
        assert!(server.is_running(), "osmium exited");
        std::fs::symlink_metadata(pidfile).is_ok_and(|m| m.is_file())
    });
    server
}

fn stop(server: &mut Running) {
    assert!(server.stop().success());
}

#[test]
fn links_at_the_pid_files_names_are_replaced_not_followed() {
    let dir = TempDir::new("links");
    let target = dir.0.join("precious");
    std::fs::write(&target, "precious\n").unwrap();
    let pidfile = dir.0.join("osmium.pid");
    let tmp = dir.0.join("osmium.pid.tmp");
    // At the temporary name, then at the final one.
    for planted in [&tmp, &pidfile] {
        std::os::unix::fs::symlink(&target, planted).unwrap();
        let mut server = start_with_pid_file(&pidfile, &[]);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
        assert_eq!(read_pid(&pidfile), server.pid() as i32);
        assert!(
            std::fs::symlink_metadata(&tmp).is_err(),
            "the temporary name left"
        );
        stop(&mut server);
        assert!(!pidfile.exists());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
    }
    // A FIFO at the final name: not waited on, replaced.
    let fifo = std::ffi::CString::new(pidfile.display().to_string()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let mut server = start_with_pid_file(&pidfile, &[]);
    assert_eq!(read_pid(&pidfile), server.pid() as i32);
    stop(&mut server);
}

#[test]
fn a_pid_file_naming_a_running_process_is_a_warning() {
    // As memcached: the server says so, and writes its own pid.
    let dir = TempDir::new("running");
    let pidfile = dir.0.join("osmium.pid");
    std::fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
    let mut server = start_with_pid_file(&pidfile, &[]);
    wait_until("the pid file rewritten", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|p| p.trim() == server.pid().to_string())
    });
    stop(&mut server);
    let err = server.stderr_text();
    let want = format!(
        "WARNING: The pid file contained the following (running) pid: {}",
        std::process::id()
    );
    assert!(err.contains(&want), "{err:?}");
}

#[test]
fn the_pid_file_is_written_as_the_user() {
    if !osmium_test_harness::running_as_root() {
        eprintln!("SKIP: -u is ignored unless started as root");
        return;
    }
    // A directory the user's group may write, as /run/osmium was.
    let dir = TempDir::new("as-user");
    let nobody = c"nobody";
    // SAFETY: getpwnam returns static storage or null, read at once.
    let (uid, gid) = unsafe {
        let pw = libc::getpwnam(nobody.as_ptr());
        assert!(!pw.is_null(), "no user nobody");
        ((*pw).pw_uid, (*pw).pw_gid)
    };
    std::os::unix::fs::chown(&dir.0, Some(0), Some(gid)).unwrap();
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o775)).unwrap();
    let pidfile = dir.0.join("osmium.pid");
    let mut server = start_with_pid_file(&pidfile, &["-u", "nobody"]);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&pidfile).unwrap().uid(), uid);
    assert_eq!(read_pid(&pidfile), server.pid() as i32);
    stop(&mut server);
    assert!(!pidfile.exists(), "removed at the stop, as the user");
}

#[test]
fn a_pid_file_that_cannot_be_written_is_a_message_not_a_stop() {
    // As memcached: the server runs on, saying why.
    let mut server = common::osmium()
        .args(["-P", "/nonexistent-osmium-dir/x.pid"])
        .start();
    assert!(version(server.port()).starts_with("VERSION "));
    stop(&mut server);
    let err = server.stderr_text();
    assert!(
        err.contains("Could not open the pid file /nonexistent-osmium-dir/x.pid.tmp for writing"),
        "{err:?}"
    );
}
