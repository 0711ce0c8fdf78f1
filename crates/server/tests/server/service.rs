//! The edges a service manager and an operator see: `-V`/`-h` and `stats`
//! say osmium's version beside the protocol level, `-vv` logs memcached's
//! lines with a time prefix and no ANSI codes, systemd's notify protocol
//! (`READY=1`, `RELOADING=1`, `STOPPING=1`; `-d` staying in the
//! foreground under a notify socket), and `--config-file`, its
//! `logfile` opened as the `-u` user (a link planted there, followed as
//! that user or not at all by root, reaches no file of root's).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common;
use common::free_port;
use osmium_test_harness::{CacheServer, Memcached, Running};

const PROTOCOL: &str = "1.6.45";

fn osmium() -> String {
    std::env::var("OSMIUM_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_osmium").to_string())
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("osmium-service-{}-{name}", std::process::id()))
}

fn request(port: u16, req: &[u8], end: &[u8]) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(req).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(end) {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// SIGTERM, and waits for the exit.
fn stop(server: &mut Running) {
    server.send_signal(libc::SIGTERM);
    server.wait_exit();
}

#[test]
fn version_flag_and_help_say_osmium_and_the_protocol_level() {
    let want = format!(
        "osmium {} (memcached {PROTOCOL} protocol)",
        env!("CARGO_PKG_VERSION")
    );
    let out = Command::new(osmium()).arg("-V").output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{want}\n"));
    let out = Command::new(osmium()).arg("-h").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert_eq!(help.lines().next(), Some(want.as_str()));
}

#[test]
fn stats_say_both_versions_and_the_wire_version_stays_memcached() {
    let mut server = common::osmium().start();
    let port = server.port();
    let stats = request(port, b"stats\r\n", b"END\r\n");
    let want = format!(
        "STAT version {PROTOCOL}\r\nSTAT osmium_version {}\r\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(stats.contains(&want), "{stats}");
    assert_eq!(
        request(port, b"version\r\n", b"\r\n"),
        format!("VERSION {PROTOCOL}\r\n")
    );
    stop(&mut server);
}

/// A log line's time prefix: RFC 3339, UTC, microseconds.
fn strip_time(line: &str) -> Option<&str> {
    let (time, rest) = line.split_once(' ')?;
    let b = time.as_bytes();
    let ok = b.len() == 27
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[26] == b'Z'
        && time[..4].bytes().all(|c| c.is_ascii_digit());
    ok.then_some(rest)
}

/// One client's session at -vv: a set whose data comes in a second
/// packet, a noreply set, gets, an unknown command, then a close. Returns the lines of
/// the log about that client's descriptor, the descriptor as `FD`.
fn vv_session(server: CacheServer, osmium: bool) -> Vec<String> {
    let mut server = server.arg("-vv").start();
    let mut c = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"set foo 0 0 3\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    c.write_all(b"bar\r\n").unwrap();
    let mut buf = [0u8; 256];
    let n = c.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STORED\r\n");
    c.write_all(b"set n 0 0 1 noreply\r\nx\r\nget foo\r\nget nope\r\nbogus\r\n")
        .unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"ERROR\r\n") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    drop(c);
    std::thread::sleep(Duration::from_millis(200));
    stop(&mut server);
    let text = server.stderr_text();
    assert!(
        !text.contains("\x1b["),
        "ANSI codes in a log file: {text:?}"
    );
    let mut lines = Vec::new();
    for line in text.lines() {
        let line = if osmium {
            strip_time(line).unwrap_or_else(|| panic!("no time prefix: {line:?}"))
        } else {
            line
        };
        lines.push(line.to_string());
    }
    let fd = lines
        .iter()
        .find_map(|l| l.strip_suffix(" new auto-negotiating client connection"))
        .and_then(|l| l.strip_prefix('<'))
        .unwrap_or_else(|| panic!("no new connection line in {lines:?}"))
        .to_string();
    let marks = [format!("<{fd} "), format!(">{fd} "), format!("{fd}: ")];
    lines
        .iter()
        .filter(|l| marks.iter().any(|m| l.starts_with(m.as_str())))
        .map(|l| l.replacen(&fd, "FD", 1))
        .collect()
}

#[test]
fn vv_logs_each_command_once_and_the_replies_as_memcached_does() {
    let got = vv_session(common::osmium(), true);
    let want = [
        "<FD new auto-negotiating client connection",
        "FD: Client using the ascii protocol",
        "<FD set foo 0 0 3",
        ">FD STORED",
        "<FD set n 0 0 1 noreply",
        ">FD NOREPLY STORED",
        "<FD get foo",
        ">FD sending key foo",
        ">FD END",
        "<FD get nope",
        ">FD END",
        "<FD bogus",
        ">FD ERROR",
        "<FD connection closed.",
    ];
    assert_eq!(got, want);
    // Side by side with genuine memcached: the same lines, less the time.
    if let Some(memcached) = Memcached::found() {
        assert_eq!(vv_session(memcached, false), want);
    }
}

/// The next datagram on the notify socket.
fn next_notice(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).expect("a notify datagram in time");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn systemd_is_told_ready_reloading_and_stopping() {
    let path = temp_path("notify.sock");
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut server = common::osmium().env("NOTIFY_SOCKET", &path).start();
    let port = server.port();
    assert_eq!(next_notice(&sock).trim_end(), "READY=1");
    // Ready means serving.
    assert_eq!(
        request(port, b"version\r\n", b"\r\n"),
        format!("VERSION {PROTOCOL}\r\n")
    );
    server.send_signal(libc::SIGHUP);
    let reloading = next_notice(&sock);
    let fields: Vec<&str> = reloading.lines().collect();
    assert_eq!(fields.first(), Some(&"RELOADING=1"), "{reloading:?}");
    let usec = fields
        .iter()
        .find_map(|f| f.strip_prefix("MONOTONIC_USEC="))
        .unwrap_or_else(|| panic!("no MONOTONIC_USEC in {reloading:?}"));
    assert!(usec.parse::<u64>().unwrap() > 0);
    assert_eq!(next_notice(&sock).trim_end(), "READY=1");
    stop(&mut server);
    assert_eq!(next_notice(&sock).trim_end(), "STOPPING=1");
    let _ = std::fs::remove_file(path);
}

/// The next datagram on the notify socket and the pid of its sender (the
/// kernel's credentials, `SO_PASSCRED`: what systemd checks against
/// `NotifyAccess=main`).
fn next_notice_from(sock: &UnixDatagram) -> (String, i32) {
    use std::os::fd::AsRawFd;
    let mut buf = [0u8; 512];
    // Room for one SCM_CREDENTIALS message (a ucred), 8-aligned.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty one; its pointers are set
    // to live local buffers of the lengths given.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg into the buffers `msg` points at.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    assert!(
        n >= 0,
        "no notify datagram in time: {}",
        std::io::Error::last_os_error()
    );
    let mut pid = 0;
    // SAFETY: walking the control messages the kernel wrote into `control`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                let cred: libc::ucred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                pid = cred.pid;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    (
        String::from_utf8_lossy(&buf[..n as usize]).into_owned(),
        pid,
    )
}

#[test]
fn dash_d_under_a_notify_socket_stays_the_process_systemd_started() {
    use std::os::fd::AsRawFd;
    let path = temp_path("notify-d.sock");
    let pid_file = temp_path("notify-d.pid");
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let on: libc::c_int = 1;
    // SAFETY: setting an int socket option on our own socket.
    let set = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    // `-d` is ignored under a notify socket: the started process serves.
    let mut server = common::osmium()
        .args(["-d", "-P", pid_file.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &path)
        .start();
    let port = server.port();
    // READY=1 from the process systemd would have started (its main
    // PID), which did not exit: under NotifyAccess=main a daemon's
    // notice would be ignored and its parent's exit end the start.
    let (ready, sender) = next_notice_from(&sock);
    assert_eq!(ready.trim_end(), "READY=1");
    assert_eq!(sender, server.pid() as i32);
    assert!(server.is_running(), "the started process exited");
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap().trim(),
        server.pid().to_string()
    );
    assert_eq!(
        request(port, b"version\r\n", b"\r\n"),
        format!("VERSION {PROTOCOL}\r\n")
    );
    let said = server.stderr_text();
    assert!(
        said.contains("-d ignored: NOTIFY_SOCKET is set"),
        "no warning in {said:?}"
    );
    stop(&mut server);
    let (stopping, sender) = next_notice_from(&sock);
    assert_eq!(stopping.trim_end(), "STOPPING=1");
    assert_eq!(sender, server.pid() as i32);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn the_config_file_is_read_and_its_logfile_written() {
    let port = free_port();
    let conf = temp_path("osmium.conf");
    let logfile = temp_path("osmium.log");
    let _ = std::fs::remove_file(&logfile);
    std::fs::write(
        &conf,
        format!(
            "# as /etc/memcached.conf\n-m 16\n-p {port}   # the port\n-U 0\n-l 127.0.0.1\n-vv\nlogfile {}\n",
            logfile.display()
        ),
    )
    .unwrap();
    // The file names the port: no arguments of the builder's.
    let mut server = common::osmium()
        .bare()
        .only_port(port)
        .arg("--config-file")
        .arg(&conf)
        .start();
    let settings = request(port, b"stats settings\r\n", b"END\r\n");
    assert!(
        settings.contains("STAT maxbytes 16777216\r\n"),
        "{settings}"
    );
    request(port, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    stop(&mut server);
    let log = std::fs::read_to_string(&logfile).unwrap();
    assert!(log.contains(" set k 0 0 1\n"), "{log}");
    assert!(log.lines().all(|l| strip_time(l).is_some()), "{log}");

    // An option osmium does not know: refused as memcached refuses one.
    std::fs::write(&conf, "-m 16\n-x 1\n").unwrap();
    let out = common::osmium()
        .bare()
        .arg("--config-file")
        .arg(&conf)
        .run_to_exit();
    assert_eq!(out.code(), Some(1));
    let err = out.stderr;
    assert!(
        err.contains("line 2: invalid option -- 'x'") && err.contains("Illegal argument \"?\""),
        "{err}"
    );
    let _ = std::fs::remove_file(conf);
    let _ = std::fs::remove_file(logfile);
}

/// nobody's uid and gid.
fn nobody() -> (u32, u32) {
    // SAFETY: getpwnam returns static storage or null, read at once.
    unsafe {
        let pw = libc::getpwnam(c"nobody".as_ptr());
        assert!(!pw.is_null(), "no user nobody");
        ((*pw).pw_uid, (*pw).pw_gid)
    }
}

/// A directory the `nobody` group may write (as a service's log directory
/// may be), removed when dropped.
struct GroupDir(PathBuf);

impl GroupDir {
    fn new(name: &str) -> GroupDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_path(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(0), Some(nobody().1)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        GroupDir(dir)
    }
}

impl Drop for GroupDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// osmium with a config file naming `logfile` and `port` (and `extra`
/// options after it): no arguments of the builder's, the file's only.
fn with_logfile(conf: &Path, logfile: &Path, port: u16, extra: &[&str]) -> CacheServer {
    std::fs::write(
        conf,
        format!(
            "-p {port}\n-U 0\n-l 127.0.0.1\n-vv\nlogfile {}\n",
            logfile.display()
        ),
    )
    .unwrap();
    common::osmium()
        .bare()
        .only_port(port)
        .arg("--config-file")
        .arg(conf)
        .args(extra)
}

#[test]
fn the_log_file_is_opened_as_the_user() {
    if !osmium_test_harness::running_as_root() {
        eprintln!("SKIP: -u is ignored unless started as root");
        return;
    }
    let dir = GroupDir::new("logdir");
    let logfile = dir.0.join("osmium.log");
    let port = free_port();
    let mut server = with_logfile(&dir.0.join("conf"), &logfile, port, &["-u", "nobody"]).start();
    request(port, b"set k 0 0 1\r\nv\r\n", b"STORED\r\n");
    stop(&mut server);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&logfile).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (nobody().0, 0o640));
    let log = std::fs::read_to_string(&logfile).unwrap();
    assert!(log.contains(" set k 0 0 1\n"), "{log}");
}

#[test]
fn a_link_at_the_log_file_reaches_no_file_of_roots() {
    if !osmium_test_harness::running_as_root() {
        eprintln!("SKIP: the link is root's concern only");
        return;
    }
    let dir = GroupDir::new("loglink");
    let target = temp_path("loglink-precious");
    std::fs::write(&target, "precious\n").unwrap();
    let logfile = dir.0.join("osmium.log");
    std::os::unix::fs::symlink(&target, &logfile).unwrap();
    // As nobody (the link followed with nobody's rights), then as root
    // (`-u root`: the link not followed): the start fails, the file is
    // untouched.
    for user in ["nobody", "root"] {
        let conf = dir.0.join("conf");
        let out = with_logfile(&conf, &logfile, free_port(), &["-u", user]).run_to_exit();
        assert_eq!(out.code(), Some(71), "-u {user}: {}", out.stderr);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n");
    }
    let _ = std::fs::remove_file(target);
}
