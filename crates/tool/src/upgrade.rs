//! `osmium-tool upgrade ADDR|PID [--addr ADDR] [--timeout SECS]`: the
//! binary upgrade in place of a local osmium (SIGUSR2), waited for and
//! reported: what `systemctl reload osmium` runs (`ExecReload=`).
//!
//! ```text
//!  ADDR ──stats──▶ pid, upgrades, upgrade_failures, osmium_version
//!  PID  ──/proc/PID/fd + net──▶ its listening sockets ──stats (pid = PID)──▶ the same
//!  kill(pid, SIGUSR2); then `stats` every 50 ms (the connection is carried
//!  across the exec; a new one when it fails) until
//!    upgrades grew          -> done: old version -> new version, pid, time   exit 0
//!    upgrade_failures grew  -> refused: `stats upgrade`'s last_failure       exit 1
//!    another pid, or none   -> the server stopped or was restarted           exit 1
//!    --timeout passed       -> no outcome                                    exit 3
//!  nothing sent (a bad argument, no server, not an osmium that upgrades,
//!  not a process of this host, SIGUSR2 not allowed)                          exit 2
//! ```
//!
//! With an ADDR the pid its `stats` gives must be a process here that
//! listens on that address (when its `/proc/PID/fd` can be read): a
//! server on another host, or in another PID namespace, is not signalled.

use std::io;
use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::conn::{normalize, Conn};
use crate::procfs::{self, Listening};

/// `osmium-tool upgrade`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "osmium-tool upgrade",
    about = "Upgrade a local osmium's binary in place (SIGUSR2) and wait for the outcome"
)]
pub(crate) struct UpgradeArgs {
    /// The server: host[:port] or a unix socket path, or its PID (digits
    /// alone), whose address is then found in /proc (root, or the
    /// server's user, may read it) unless --addr gives it.
    #[arg(value_name = "ADDR|PID")]
    target: String,
    /// With a PID: the server's address, not looked for in /proc.
    #[arg(long, value_name = "ADDR")]
    addr: Option<String>,
    /// Seconds to wait for the outcome (the new binary's check takes up
    /// to 5; a large cache is indexed again by the new image).
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    timeout: f64,
}

/// The exit status when the upgrade was refused or failed.
const EXIT_FAILED: u8 = 1;
/// The exit status when nothing was sent (no upgrade asked).
const EXIT_NOT_SENT: u8 = 2;
/// The exit status when no outcome came within `--timeout`.
const EXIT_TIMEOUT: u8 = 3;

/// How long a probe of one listening socket found in /proc may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the stats are read while the upgrade runs.
const POLL: Duration = Duration::from_millis(50);
/// The longest a read may wait while the upgrade runs (then a new
/// connection is made).
const WAIT_READ: Duration = Duration::from_secs(5);

/// What `stats` says of the upgrades.
#[derive(Clone, Debug)]
struct Snapshot {
    pid: u32,
    upgrades: u64,
    failures: u64,
    version: String,
}

/// Reads the `stats` of an open connection.
fn snapshot(conn: &mut Conn) -> io::Result<Snapshot> {
    let stats = conn.stats("")?;
    let get = |name: &str| {
        stats
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let number = |name: &str| -> io::Result<u64> {
        get(name)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, format!("no {name}")))
    };
    let pid = number("pid")?;
    Ok(Snapshot {
        pid: u32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?,
        upgrades: number("upgrades")?,
        failures: number("upgrade_failures")?,
        version: get("osmium_version")
            .or_else(|| get("version"))
            .unwrap_or("?")
            .to_string(),
    })
}

/// Connects to `addr` with reads bounded by `timeout` and reads its stats.
fn probe(addr: &str, timeout: Duration) -> io::Result<(Conn, Snapshot)> {
    let mut conn = Conn::connect_within(addr, timeout)?;
    let snap = snapshot(&mut conn)?;
    Ok((conn, snap))
}

/// The server, found: its address, a connection and its stats.
struct Found {
    addr: String,
    conn: Conn,
    before: Snapshot,
}

/// Nothing sent: why.
struct NotSent(String);

/// The server at `addr`; its pid must run here and, when its sockets can
/// be read, listen on `addr`.
fn at_address(addr: &str) -> Result<Found, NotSent> {
    let addr = normalize(addr);
    let (conn, before) = probe(&addr, crate::conn::IO_TIMEOUT).map_err(|e| match e.kind() {
        io::ErrorKind::Unsupported => NotSent(format!(
            "{addr} does not upgrade in place ({e} in its stats: memcached, or an osmium from \
             before binary upgrades)"
        )),
        _ => NotSent(format!("{addr}: {e}")),
    })?;
    let pid = before.pid;
    if !procfs::exists(pid) {
        return Err(NotSent(format!(
            "{addr} is pid {pid}, which is no process here: a server on another host or in \
             another PID namespace cannot be upgraded from here"
        )));
    }
    if let Ok(listening) = procfs::listening(pid) {
        if !listening.iter().any(|l| same_address(l, &addr)) {
            return Err(NotSent(format!(
                "{addr} is pid {pid}, and the process {pid} here does not listen on it \
                 (another host or PID namespace?)"
            )));
        }
    }
    Ok(Found { addr, conn, before })
}

/// Whether `addr` (as the tool takes it) names listening socket `l`: a
/// unix path the same file (a path the server bound relative to its own
/// directory: the same name), a TCP address the same port.
fn same_address(l: &Listening, addr: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    match l {
        Listening::Unix(_) if !addr.contains('/') => false,
        Listening::Unix(path) => {
            let addr = Path::new(addr);
            let same_file = match (std::fs::metadata(path), std::fs::metadata(addr)) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                _ => path == addr,
            };
            let same_name = path.is_relative() && path.file_name() == addr.file_name();
            same_file || same_name
        }
        Listening::Tcp(sa) => {
            !addr.contains('/')
                && addr
                    .to_socket_addrs()
                    .is_ok_and(|mut all| all.any(|a| a.port() == sa.port()))
        }
    }
}

/// The server process `pid`: at `addr`, or at the first of its listening
/// sockets whose stats give that pid.
fn by_pid(pid: u32, addr: Option<&str>) -> Result<Found, NotSent> {
    if let Some(addr) = addr {
        let found = at_address(addr)?;
        if found.before.pid != pid {
            return Err(NotSent(format!(
                "{} is pid {}, not {pid}",
                found.addr, found.before.pid
            )));
        }
        return Ok(found);
    }
    if !procfs::exists(pid) {
        return Err(NotSent(format!("no process {pid}")));
    }
    let listening = procfs::listening(pid).map_err(|e| {
        NotSent(format!(
            "the sockets of process {pid} cannot be read ({e}): run as root or as its user, \
             or give its address (--addr)"
        ))
    })?;
    let candidates: Vec<String> = listening.iter().flat_map(|l| l.addresses(pid)).collect();
    if candidates.is_empty() {
        return Err(NotSent(format!(
            "process {pid} listens on no TCP or unix socket"
        )));
    }
    // All at once: a TLS listener or a metrics endpoint may take the
    // probe's whole timeout to turn a `stats` down.
    let probes: Vec<io::Result<(Conn, Snapshot)>> = std::thread::scope(|s| {
        let handles: Vec<_> = candidates
            .iter()
            .map(|a| s.spawn(move || probe(a, PROBE_TIMEOUT)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("probe panicked")))
            })
            .collect()
    });
    let mut tried = Vec::new();
    for (addr, probed) in candidates.iter().zip(probes) {
        match probed {
            Ok((conn, before)) if before.pid == pid => {
                return Ok(Found {
                    addr: addr.clone(),
                    conn,
                    before,
                })
            }
            Ok((_, other)) => tried.push(format!("{addr}: pid {}", other.pid)),
            Err(e) => tried.push(format!("{addr}: {e}")),
        }
    }
    Err(NotSent(format!(
        "no listening socket of process {pid} answers as an osmium that upgrades in place ({})",
        tried.join("; ")
    )))
}

/// Sends SIGUSR2 to `pid`.
fn send_upgrade(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    if unsafe { libc::kill(pid, libc::SIGUSR2) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How the upgrade ended.
enum Outcome {
    Done(Snapshot),
    Refused(String),
    Gone(String),
    TimedOut,
}

/// Why the last upgrade failed, as the server's `stats upgrade` says it.
fn last_failure(conn: &mut Conn) -> String {
    match conn.stats("upgrade") {
        Ok(rows) => rows
            .into_iter()
            .find(|(k, _)| k == "last_failure")
            .map(|(_, v)| v)
            .unwrap_or_else(|| "no reason given (see the server's log)".into()),
        Err(_) => "the server does not say why (no stats upgrade): see its log".into(),
    }
}

/// Polls the server's stats until the upgrade's outcome, or `deadline`.
fn wait(found: Found, deadline: Instant) -> Outcome {
    let Found { addr, conn, before } = found;
    let mut conn = Some(conn);
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Outcome::TimedOut;
        }
        let c = match conn.take() {
            Some(c) => Ok(c),
            None => Conn::connect_within(&addr, WAIT_READ.min(deadline - now)),
        };
        match c.and_then(|mut c| snapshot(&mut c).map(|s| (c, s))) {
            Ok((mut c, after)) => {
                if after.pid != before.pid {
                    return Outcome::Gone(format!(
                        "{addr} is now pid {}: the server was restarted, not upgraded",
                        after.pid
                    ));
                }
                if after.upgrades > before.upgrades {
                    return Outcome::Done(after);
                }
                if after.failures > before.failures {
                    return Outcome::Refused(last_failure(&mut c));
                }
                conn = Some(c);
            }
            Err(_) if !procfs::runs(before.pid) => {
                return Outcome::Gone(format!("pid {} exited: the server stopped", before.pid));
            }
            // Between the images, or a read that timed out: a new
            // connection next time.
            Err(_) => {}
        }
        std::thread::sleep(POLL);
    }
}

/// `osmium-tool upgrade ...` (its arguments after `upgrade`).
pub(crate) fn main(args: &[String]) -> ExitCode {
    let args = UpgradeArgs::parse_from(
        std::iter::once("osmium-tool upgrade".to_string()).chain(args.iter().cloned()),
    );
    let not_sent = |why: String| {
        eprintln!("osmium-tool: upgrade: {why}");
        ExitCode::from(EXIT_NOT_SENT)
    };
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return not_sent("--timeout must be a positive number of seconds".into());
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    let pid = Some(&args.target)
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .map(|t| t.parse::<u32>());
    let found = match pid {
        Some(Ok(pid)) => by_pid(pid, args.addr.as_deref()),
        Some(Err(e)) => Err(NotSent(format!("{}: {e}", args.target))),
        None if args.addr.is_some() => Err(NotSent("--addr goes with a PID".into())),
        None => at_address(&args.target),
    };
    let found = match found {
        Ok(f) => f,
        Err(NotSent(why)) => return not_sent(why),
    };
    let (addr, before) = (found.addr.clone(), found.before.clone());
    let pid = before.pid;
    let started = Instant::now();
    if let Err(e) = send_upgrade(pid) {
        return not_sent(format!("cannot signal pid {pid} ({addr}): {e}"));
    }
    let outcome = wait(found, started + timeout);
    let took = started.elapsed().as_secs_f64();
    match outcome {
        Outcome::Done(after) => {
            println!(
                "upgraded {addr} (pid {pid}): osmium {} -> osmium {} in {took:.2} s \
                 (upgrade {} since the first start)",
                before.version, after.version, after.upgrades
            );
            ExitCode::SUCCESS
        }
        Outcome::Refused(why) => {
            eprintln!(
                "osmium-tool: upgrade of {addr} (pid {pid}) refused: {why}; osmium {} serves on",
                before.version
            );
            ExitCode::from(EXIT_FAILED)
        }
        Outcome::Gone(why) => {
            eprintln!("osmium-tool: upgrade of {addr} (pid {pid}) failed: {why}");
            ExitCode::from(EXIT_FAILED)
        }
        Outcome::TimedOut => {
            eprintln!(
                "osmium-tool: upgrade of {addr} (pid {pid}): no outcome after {:.0} s \
                 (the server's log says where it is)",
                args.timeout
            );
            ExitCode::from(EXIT_TIMEOUT)
        }
    }
}
