//! The pre-flight check: before anything stops, the new file is run as
//! `NAME --upgrade-check` ([`run_check`]) while the old image serves; it
//! reads the command line to take over on its stdin (NUL-separated),
//! parses it, and answers one line on stdout ([`answer_check`],
//! [`check_line`]):
//!
//! ```text
//! osmium-upgrade-check ok version=0.2.0 reads=1-1 exe=2049:5423411 takes=memory,conns,flash
//! osmium-upgrade-check refused <why, on one line>
//! ```
//!
//! `takes` lists what the binary takes over by fd beyond what every state
//! format it reads carries (`memory`: item memory in a memfd, the state's
//! `Memory` record; `conns`: client connections, the `Conn` records;
//! `flash`: the flash tier's metadata in a memfd, the `FlashMeta` record;
//! `proxy`: an osmium-proxy's listeners and clients); a
//! binary that does not say takes none, so the old
//! image hands it none (an fd it would not use would stay open, its memory
//! held, for the life of the process). Fields a build does not know are
//! ignored.
//!
//! What it catches: a file that cannot be run (missing, not executable,
//! not a program for this machine, missing libraries), one that exits,
//! crashes or hangs (killed after the timeout, by its PID), one that is
//! not an osmium with upgrades (no answer line), one that reads no state
//! format this build writes, and one that refuses the command line.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::ops::RangeInclusive;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{ENV_FAILED, ENV_FD, ENV_IMAGE_FD, FORMAT, READS};

/// The option that asks a binary for the check's answer.
pub const CHECK_FLAG: &str = "--upgrade-check";
/// How long the check may take before the new binary is killed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// The answer line's first word.
const PREFIX: &str = "osmium-upgrade-check";
/// The longest answer line read.
const LINE_MAX: usize = 4096;

/// What a new binary answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckAnswer {
    /// Its osmium version.
    pub version: String,
    /// The state formats it reads.
    pub reads: RangeInclusive<u32>,
    /// The file it runs from: (st_dev, st_ino).
    pub exe: (u64, u64),
    /// What it takes over by fd beyond its state formats (module comment).
    pub takes: Vec<String>,
}

impl CheckAnswer {
    /// Whether it takes `what` over (`takes=`).
    pub fn takes(&self, what: &str) -> bool {
        self.takes.iter().any(|t| t == what)
    }
}

/// What `takes=` says the image takes: item memory in a memfd.
pub const TAKES_MEMORY: &str = "memory";

/// What `takes=` says the image takes: the flash tier's metadata in a
/// memfd (the state's `FlashMeta`).
pub const TAKES_FLASH: &str = "flash";

/// What `takes=` says the image takes: client connections (the state's
/// `Conn` records, their fds and buffers).
pub const TAKES_CONNS: &str = "conns";

/// What `takes=` says the image takes: an osmium-proxy's state (its
/// pools' and stats port's listeners, `ListenerKind::ProxyPool` and
/// `ProxyStats`, and its clients, `Conn` records with a `ProxyConnRec`).
/// osmium-proxy upgrades only to a binary that says it: an `osmium`
/// server installed at the proxy's path is refused at the check.
pub const TAKES_PROXY: &str = "proxy";

/// The answer line for `answer` (without the newline).
pub fn check_line(answer: &Result<CheckAnswer, String>) -> String {
    match answer {
        Ok(a) => {
            let mut line = format!(
                "{PREFIX} ok version={} reads={}-{} exe={}:{}",
                a.version,
                a.reads.start(),
                a.reads.end(),
                a.exe.0,
                a.exe.1
            );
            if !a.takes.is_empty() {
                line.push_str(" takes=");
                line.push_str(&a.takes.join(","));
            }
            line
        }
        Err(why) => {
            let one_line: String = why
                .trim_end()
                .chars()
                .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
                .collect();
            format!("{PREFIX} refused {one_line}")
        }
    }
}

/// Reads an answer line. Err: why it is not one.
fn parse_line(line: &str) -> Result<CheckAnswer, String> {
    let line = line.trim_end();
    let rest = line
        .strip_prefix(PREFIX)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| format!("not an answer: {line:?}"))?;
    if let Some(why) = rest.strip_prefix("refused ") {
        return Err(format!("the new binary refuses the command line: {why}"));
    }
    let fields = rest
        .strip_prefix("ok")
        .ok_or_else(|| format!("not an answer: {line:?}"))?;
    let (mut version, mut reads, mut exe) = (None, None, None);
    let mut takes = Vec::new();
    for field in fields.split_whitespace() {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        match key {
            "version" => version = Some(value.to_string()),
            "reads" => {
                reads = value
                    .split_once('-')
                    .and_then(|(a, b)| Some(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?))
            }
            "exe" => {
                exe = value
                    .split_once(':')
                    .and_then(|(d, i)| Some((d.parse::<u64>().ok()?, i.parse::<u64>().ok()?)))
            }
            "takes" => {
                takes = value
                    .split(',')
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            _ => {} // a later build's field
        }
    }
    match (version, reads, exe) {
        (Some(version), Some(reads), Some(exe)) => Ok(CheckAnswer {
            version,
            reads,
            exe,
            takes,
        }),
        _ => Err(format!("an answer without version, reads or exe: {line:?}")),
    }
}

/// The check's side in the new binary: reads the command line on stdin,
/// parses it with `parse`, prints the answer line (saying it `takes`
/// those things over, see the module comment); the exit status (0: ok).
/// For `main`, when its first argument is [`CHECK_FLAG`].
pub fn answer_check(
    version: &str,
    takes: &[&str],
    parse: impl FnOnce(Vec<OsString>) -> Result<(), String>,
) -> i32 {
    let mut input = Vec::new();
    let (line, code) = match io::stdin().read_to_end(&mut input) {
        Ok(_) => answer(&input, version, takes, parse),
        Err(e) => (
            check_line(&Err(format!("cannot read the command line: {e}"))),
            1,
        ),
    };
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
    code
}

/// The answer line and exit status for the command line `input`.
fn answer(
    input: &[u8],
    version: &str,
    takes: &[&str],
    parse: impl FnOnce(Vec<OsString>) -> Result<(), String>,
) -> (String, i32) {
    let args: Vec<OsString> = input
        .split(|b| *b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect();
    // Each argument ends with a NUL: the last piece is empty.
    let args = match args.split_last() {
        Some((last, args)) if last.is_empty() => args.to_vec(),
        _ => {
            return (
                check_line(&Err("a command line not NUL-terminated".into())),
                1,
            )
        }
    };
    let answer = parse(args).and_then(|()| {
        let exe = std::fs::metadata("/proc/self/exe")
            .map_err(|e| format!("cannot stat /proc/self/exe: {e}"))?;
        Ok(CheckAnswer {
            version: version.to_string(),
            reads: READS,
            exe: (
                std::os::unix::fs::MetadataExt::dev(&exe),
                std::os::unix::fs::MetadataExt::ino(&exe),
            ),
            takes: takes.iter().map(|t| t.to_string()).collect(),
        })
    });
    let code = i32::from(answer.is_err());
    (check_line(&answer), code)
}

/// Runs the file `image` names with [`CHECK_FLAG`], the command line
/// `expanded` (its program name first) on its stdin; its answer, or why
/// the upgrade must not go on. The child is killed (by its PID) if it
/// has not answered and exited within `timeout`.
pub fn run_check(
    image: BorrowedFd<'_>,
    expanded: &[OsString],
    timeout: Duration,
) -> Result<CheckAnswer, String> {
    let deadline = Instant::now() + timeout;
    // The child's own fd N: `open_image` leaves it open across the exec.
    let path = format!("/proc/self/fd/{}", image.as_raw_fd());
    let mut child = Command::new(&path)
        .arg0(
            expanded
                .first()
                .map_or(OsStr::new("osmium"), |a| a.as_os_str()),
        )
        .arg(CHECK_FLAG)
        .env_remove(ENV_FD)
        .env_remove(ENV_FAILED)
        .env_remove(ENV_IMAGE_FD)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut input = Vec::new();
    for arg in expanded {
        input.extend_from_slice(arg.as_bytes());
        input.push(0);
    }
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let answered = std::thread::scope(|scope| {
        // A child that never reads its stdin must not block the check:
        // the write is on a thread of its own, ended by the child's exit
        // (EPIPE) at the latest.
        scope.spawn(move || {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(&input);
            }
        });
        let line = stdout.map(|out| read_line(out, deadline));
        let status = wait_until(&mut child, deadline);
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        (line, status)
    });
    let (line, status) = answered;
    let Some(status) = status else {
        return Err(format!(
            "the new binary did not answer the check in {} s (killed)",
            timeout.as_secs_f64()
        ));
    };
    let line = line.unwrap_or_default();
    let answer = match parse_line(&line) {
        Err(why) if why.starts_with("the new binary refuses") => return Err(why),
        _ if !status.success() => {
            return Err(format!(
                "the new binary did not answer the check ({status})"
            ))
        }
        Err(why) => return Err(format!("the new binary did not answer the check: {why}")),
        Ok(answer) => answer,
    };
    if !answer.reads.contains(&FORMAT) {
        return Err(format!(
            "the new binary reads state formats {}-{}, this server writes {FORMAT}",
            answer.reads.start(),
            answer.reads.end()
        ));
    }
    Ok(answer)
}

/// The first line of `out` (at most [`LINE_MAX`] bytes), read until
/// `deadline`; what came by then if no newline did.
fn read_line(mut out: impl Read + AsRawFd, deadline: Instant) -> String {
    let mut line = Vec::new();
    let mut buf = [0u8; 512];
    while !line.contains(&b'\n') && line.len() < LINE_MAX {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        let mut pfd = libc::pollfd {
            fd: out.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll reads and writes the one pollfd we own.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready == 0 {
            break;
        }
        if ready < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let end = line.iter().position(|b| *b == b'\n').unwrap_or(line.len());
    String::from_utf8_lossy(&line[..end]).into_owned()
}

/// The child's exit status if it exits before `deadline` (a pidfd polled,
/// no sleeping loop); None if it still runs then.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    if pidfd < 0 {
        // No pidfd (a kernel before 5.3): asked every 10 ms.
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            deadline.checked_duration_since(Instant::now())?;
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // SAFETY: pidfd_open returned a new fd, owned by nothing else.
    let pidfd =
        unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pidfd as i32) };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        let mut pfd = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll reads and writes the one pollfd we own.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }
}

#[cfg(test)]
mod tests;
