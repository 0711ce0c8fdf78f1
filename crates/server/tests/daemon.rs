//! The process edges a service manager sees: `-P` written with and
//! without `-d` and removed at a stop, and `-d` returning only once the
//! daemon serves, or failing with the daemon's reason and status.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

mod common;
use common::{free_port, osmium_command, wait_exit, wait_until};

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

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn the_pid_file_is_written_in_the_foreground_and_removed_at_a_stop() {
    let pidfile = temp_path("fg.pid");
    let _ = std::fs::remove_file(&pidfile);
    let port = free_port();
    let mut child = osmium_command(osmium())
        .args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"])
        .arg("-P")
        .arg(&pidfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the pid file", || pidfile.exists());
    assert_eq!(read_pid(&pidfile), child.id() as i32);
    wait_until("listening", || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    // SAFETY: stopping our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut child).success());
    assert!(!pidfile.exists(), "removed at the stop");
}

#[test]
fn a_daemon_returns_once_serving_and_removes_its_pid_file() {
    let pidfile = temp_path("d.pid");
    let _ = std::fs::remove_file(&pidfile);
    let port = free_port();
    let out = osmium_command(osmium())
        .args(["-d", "-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"])
        .arg("-P")
        .arg(&pidfile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Serving as soon as the command returned: no wait.
    assert!(version(port).starts_with("VERSION "));
    let pid = read_pid(&pidfile);
    assert!(alive(pid));
    // SAFETY: stopping the daemon we started, by its pid.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    wait_until("the daemon stopped", || !alive(pid));
    assert!(!pidfile.exists(), "removed at the stop");
}

#[test]
fn a_daemon_that_cannot_start_fails_with_its_reason() {
    // An unknown user is found only after the fork (as memcached, `-u` is
    // applied after binding): the daemon's reason and status reach the
    // caller instead of /dev/null and 0. Only root switches users.
    if !common::running_as_root() {
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
    assert_eq!(out.status.code(), Some(71), "{err}");
    assert!(
        err.contains("can't find the user no-such-user-osmium to switch to"),
        "{err:?}"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing serves"
    );
}

#[test]
fn a_pid_file_that_cannot_be_written_is_a_message_not_a_stop() {
    // As memcached: the server runs on, saying why.
    let port = free_port();
    let mut child = osmium_command(osmium())
        .args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"])
        .args(["-P", "/nonexistent-osmium-dir/x.pid"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("listening", || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(version(port).starts_with("VERSION "));
    // SAFETY: stopping our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(wait_exit(&mut child).success());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("Could not open the pid file /nonexistent-osmium-dir/x.pid.tmp for writing"),
        "{err:?}"
    );
}
