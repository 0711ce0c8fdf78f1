//! Starting the processes the integration tests and benchmarks run
//! (osmium, memcached, osmium-proxy, nutcracker, any other listener) on
//! loopback ports, stopping them by PID, and the test certificates they
//! serve TLS with. It is the workspace's one launcher: every Rust test and
//! osmium-bench start their servers through it.
//!
//! A test starts a server with one call; the defaults (a free loopback
//! port, UDP off, stderr to a file, `-u root` under root) need no words:
//!
//! ```no_run
//! use osmium_test_harness::{Certs, Memcached, Osmium};
//!
//! let server = Osmium::new().memory(64).start();
//! let conn = server.connect(); // 127.0.0.1:server.port()
//! let certs = Certs::new(); // CA `ca`, `server`, `client`; removed on drop
//! let tls = Osmium::new().tls(&certs).opt("ssl_verify_mode=1").start();
//! let oracle = Memcached::new().args(["-t", "2"]).start();
//! # drop((conn, tls, oracle));
//! ```
//!
//! [`Osmium`] and [`Memcached`] build a [`CacheServer`], [`Proxy`] and
//! [`Nutcracker`] a [`PoolProxy`] (a YAML configuration), [`Program`] any
//! other process told its port on its command line; `start()` returns a
//! [`Running`] server (address, PID, `stop()` by PID, killed on drop),
//! `try_start()` says why it could not start instead of panicking (a
//! benchmark reports it), `run_to_exit()` runs a start that must fail
//! ([`Exited`]). A server can be pinned to one CPU (`cpu(n)`,
//! [`pin_to_cpu`]), started without waiting for it to listen
//! ([`CacheServer::no_wait`]: a caller that times the start), and its
//! resident set read ([`ServerProcess::rss_bytes`]). A server that
//! daemonized is a [`Daemon`]; a process started from a `Command` of the
//! caller's is started by [`Start`]. [`Certs`] makes CAs and certificates
//! with rcgen. [`Images`] holds the binaries a binary upgrade's test
//! installs (new inodes, images that refuse the upgrade).
//!
//! Every process started is on one process-wide list:
//! [`kill_all_started`] kills them all and removes their scratch
//! directories, for a program that stops on a signal (osmium-bench's
//! Ctrl-C handler), where `exit` would leave them running.
//!
//! Underneath, a port picked free can be taken before the server binds
//! it: by another test's server, by another test's probe, or as the local
//! port of any outgoing connection. Two defences:
//! - [`free_port`] reserves the port it returns: it leaves a connection on
//!   it in TIME_WAIT, so for about a minute the kernel gives that port to no
//!   `bind(127.0.0.1:0)` and to no outgoing connection, while a server that
//!   sets `SO_REUSEADDR` (memcached, nutcracker, osmium and osmium-proxy
//!   all do) binds it at once.
//! - [`Start`] retries: a process that exits before it listens, saying its
//!   address was in use (on stderr or in its log file), is started again on
//!   a new port, a few times. Any other exit fails the start with what the
//!   process said.
//!
//! A start is proven by the process itself holding a listening socket on
//! the port ([`listens_on`]; [`binds_udp`], [`listens_on_unix`]), not by
//! a connect, which another test's server on the same port could answer.
//! A [`ServerProcess`] is stopped by its PID (SIGTERM, then SIGKILL after
//! a timeout) and killed when dropped; it is signalled and reaped under
//! one lock, so a signal never reaches a process that reused its PID.
//! [`poll::wait_until`] polls a condition with a deadline, for the waits a
//! test would otherwise sleep through.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::Read;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use started::SharedChild;

mod bins;
mod cache;
mod certs;
mod cpus;
mod daemon;
mod exited;
mod images;
pub mod poll;
mod pool;
mod program;
mod running;
mod started;
mod status;

pub use bins::{
    memcached_bin, nutcracker_bin, oracle_path, osmium_bin, proxy_bin, running_as_root,
    workspace_bin, ORACLE_VERSION,
};
pub use cache::{CacheServer, Memcached, Osmium};
pub use certs::{Certs, KeyType, Role};
pub use cpus::{allowed_cpus, pin_to_cpu};
pub use daemon::Daemon;
pub use exited::Exited;
pub use images::{exe_inode, Images};
pub use poll::{wait_until, POLL_INTERVAL};
pub use pool::{listen_moved, Nutcracker, PoolProxy, Proxy};
pub use program::Program;
pub use running::Running;
pub use started::kill_all_started;
pub use status::{cpus_allowed_list, rss_bytes};
mod size;
pub use size::{long_tests, sized, LONG_TESTS_VAR};

/// How many times [`Start`] starts a process before it gives up.
pub const ATTEMPTS: u32 = 5;
/// How long one start may take to listen.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`ServerProcess::stop`] waits after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`ServerProcess::wait_exit`] (and a start that must fail,
/// [`CacheServer::run_to_exit`]) waits for the process to exit.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

thread_local! {
    static FORCED: RefCell<VecDeque<u16>> = const { RefCell::new(VecDeque::new()) };
    static LAST_ATTEMPTS: Cell<u32> = const { Cell::new(0) };
}

/// Makes the next [`free_port`] call on this thread return `port`, once:
/// how a test of the harness hands a start a port it holds itself, to see
/// the start retried elsewhere.
pub fn force_next_port(port: u16) {
    FORCED.with(|f| f.borrow_mut().push_back(port));
}

/// How many starts the last [`Start`] on this thread took (1: no retry).
pub fn last_start_attempts() -> u32 {
    LAST_ATTEMPTS.with(Cell::get)
}

/// A free loopback TCP port, reserved for about a minute (module comment).
pub fn free_port() -> u16 {
    if let Some(port) = FORCED.with(|f| f.borrow_mut().pop_front()) {
        return port;
    }
    loop {
        if let Some(port) = reserve_port() {
            return port;
        }
    }
}

/// A free loopback port for TCP (reserved, [`free_port`]) that UDP could
/// bind too a moment ago.
pub fn free_port_tcp_udp() -> u16 {
    loop {
        let port = free_port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Binds a port, connects to it, accepts and closes the accepted side
/// first: the side that closes first holds the port in TIME_WAIT.
fn reserve_port() -> Option<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").ok()?;
    let port = listener.local_addr().ok()?.port();
    let client = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let (accepted, _) = listener.accept().ok()?;
    drop(accepted);
    // Wait for the accepted side's FIN before closing ours, so ours is
    // the passive close and the TIME_WAIT stays on `port`.
    let _ = client.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = (&client).read(&mut [0u8; 1]);
    drop(client);
    Some(port)
}

/// Sends the signal named `name` (`STOP`, `CONT`, `HUP`, `TERM`, `INT`,
/// `USR1`, `KILL`) to process `pid` with [`signal`], and panics if it
/// cannot be sent.
pub fn signal_named(pid: u32, name: &str) {
    let number = match name {
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        "HUP" => libc::SIGHUP,
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        "USR1" => libc::SIGUSR1,
        "KILL" => libc::SIGKILL,
        other => panic!("no signal named {other}"),
    };
    assert!(signal(pid, number), "kill -{name} {pid}");
}

/// Whether every thread of `pid` is stopped (`T` in /proc/PID/task/*/stat).
pub fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    })
}

/// Whether process `pid` holds a listening IPv4 TCP socket on `port`: a
/// LISTEN entry of `/proc/net/tcp` with that local port whose socket inode
/// is one of the process's descriptors.
pub fn listens_on(pid: u32, port: u16) -> bool {
    holds_any(pid, &socket_inodes("/proc/net/tcp", port, Some("0A")))
}

/// The `socket:[INODE]` names of the entries of `table` (`/proc/net/tcp`
/// or `/proc/net/udp`) with local port `port` (and state `state`, e.g.
/// `0A` for LISTEN, when given). Fields: sl, local_address (hex
/// addr:port), rem_address, st, tx:rx queues, tr:when, retrnsmt, uid,
/// timeout, inode.
fn socket_inodes(table: &str, port: u16, state: Option<&str>) -> Vec<String> {
    let Ok(table) = std::fs::read_to_string(table) else {
        return Vec::new();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let inode = f.get(9)?;
            (local == port && state.is_none_or(|st| f.get(3) == Some(&st)))
                .then(|| format!("socket:[{inode}]"))
        })
        .collect()
}

/// Whether process `pid` holds an IPv4 UDP socket bound to `port` (an
/// entry of `/proc/net/udp` with that local port whose socket inode is one
/// of the process's descriptors).
pub fn binds_udp(pid: u32, port: u16) -> bool {
    holds_any(pid, &socket_inodes("/proc/net/udp", port, None))
}

/// Whether process `pid` holds a listening unix-domain socket bound to
/// `path` (an entry of `/proc/net/unix` with the accepting flag,
/// `__SO_ACCEPTCON`, and that path, whose inode is one of the process's
/// descriptors).
pub fn listens_on_unix(pid: u32, path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let want = path.to_string_lossy();
    // Fields: Num, RefCount, Protocol, Flags, Type, St, Inode, Path.
    let sockets: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            let inode = f.get(6)?;
            (flags & 0x1_0000 != 0 && *f.get(7)? == want).then(|| format!("socket:[{inode}]"))
        })
        .collect();
    holds_any(pid, &sockets)
}

/// Whether one of `pid`'s descriptors is one of `sockets` (`socket:[INODE]`).
fn holds_any(pid: u32, sockets: &[String]) -> bool {
    if sockets.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
    })
}

/// Whether a server's message says it could not bind because the address
/// was taken: memcached and osmium ("failed to listen on ...: Address
/// already in use"), nutcracker ("bind on p 6 to addr ... failed: Address
/// already in use"), osmium-proxy ("Address already in use (os error 98)").
pub fn says_address_in_use(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    [
        "already in use",
        "address in use",
        "eaddrinuse",
        "os error 98",
    ]
    .iter()
    .any(|s| text.contains(s))
}

/// How to start one process: its name (for messages), the first port,
/// where it logs, how many attempts. `command`/`child` start it.
pub struct Start {
    name: String,
    first_port: Option<u16>,
    same_port: bool,
    log: Option<PathBuf>,
    attempts: u32,
    timeout: Duration,
    wait: bool,
}

enum Outcome {
    Listening,
    Exited(ExitStatus),
    TimedOut,
}

impl Start {
    /// A start of the process `name`, with [`ATTEMPTS`] attempts of
    /// [`READY_TIMEOUT`] each, on any free port.
    pub fn new(name: &str) -> Start {
        Start {
            name: name.to_string(),
            first_port: None,
            same_port: false,
            log: None,
            attempts: ATTEMPTS,
            timeout: READY_TIMEOUT,
            wait: true,
        }
    }

    /// The first attempt uses `port`; a retry takes a new free port.
    pub fn port(mut self, port: u16) -> Start {
        self.first_port = Some(port);
        self
    }

    /// Every attempt uses `port` (a restart where the port is the point),
    /// 200 ms apart.
    pub fn only_port(mut self, port: u16) -> Start {
        self.first_port = Some(port);
        self.same_port = true;
        self
    }

    /// The process also writes its reasons to `path` (nutcracker's `-o`):
    /// removed before each attempt, read after a failed one.
    pub fn log_file(mut self, path: PathBuf) -> Start {
        self.log = Some(path);
        self
    }

    /// At most `attempts` starts (at least 1).
    pub fn attempts(mut self, attempts: u32) -> Start {
        self.attempts = attempts.max(1);
        self
    }

    /// How long each attempt may take to listen.
    pub fn timeout(mut self, timeout: Duration) -> Start {
        self.timeout = timeout;
        self
    }

    /// Returns as soon as the process is spawned, without waiting for it
    /// to listen (a caller that times the start itself), in one attempt:
    /// a process that exits at once is the caller's to see.
    pub fn no_wait(mut self) -> Start {
        self.wait = false;
        self.attempts = 1;
        self
    }

    /// Starts `command(port)` with stdin and stdout null and stderr piped
    /// (read when it fails to start; [`ServerProcess::stderr_text`]).
    pub fn command(self, mut command: impl FnMut(u16) -> Command) -> ServerProcess {
        let name = self.name.clone();
        self.child(|port| {
            command(port)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {name}: {e}"))
        })
    }

    /// Starts the child `spawn(port)` returns (its stdio as the caller set
    /// it: a piped stderr is read when the start fails) until one listens.
    /// An exit that says the address was in use, or says nothing readable,
    /// is retried; any other exit, or no listener within the timeout,
    /// panics with what the process said.
    pub fn child(self, spawn: impl FnMut(u16) -> Child) -> ServerProcess {
        self.child_ready(spawn, |child, port| listens_on(child.id(), port))
    }

    /// [`Start::child`], the start proven by `ready(child, port)` instead
    /// of the process listening on `port` (a unix socket, a UDP port or
    /// more ports too).
    pub fn child_ready(
        self,
        mut spawn: impl FnMut(u16) -> Child,
        ready: impl FnMut(&Child, u16) -> bool,
    ) -> ServerProcess {
        self.try_child_ready(|port| Ok(spawn(port)), ready)
            .unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Start::child_ready`] that says why a start failed instead of
    /// panicking (`spawn` may fail too); the process started is on the
    /// list [`kill_all_started`] kills.
    pub fn try_child_ready(
        self,
        mut spawn: impl FnMut(u16) -> Result<Child, String>,
        mut ready: impl FnMut(&Child, u16) -> bool,
    ) -> Result<ServerProcess, String> {
        let mut tried = Vec::new();
        for attempt in 1..=self.attempts {
            let port = match self.first_port {
                Some(p) if attempt == 1 || self.same_port => p,
                _ => free_port(),
            };
            if let Some(log) = &self.log {
                let _ = std::fs::remove_file(log);
            }
            let shared = started::spawn(|| spawn(port))?;
            let pid = started::lock(&shared).as_ref().map_or(0, Child::id);
            let mut process = ServerProcess {
                pid,
                child: shared,
                port,
                name: self.name.clone(),
                attempts: attempt,
            };
            let outcome = if self.wait {
                wait_ready(&process.child, port, self.timeout, &mut ready)
            } else {
                Outcome::Listening
            };
            match outcome {
                Outcome::Listening => {
                    LAST_ATTEMPTS.with(|a| a.set(attempt));
                    return Ok(process);
                }
                Outcome::Exited(status) => {
                    let said = self.reason(&mut process.child());
                    if !(said.trim().is_empty() || says_address_in_use(&said)) {
                        return Err(format!(
                            "{} exited ({status}) at start on port {port}: {said}",
                            self.name
                        ));
                    }
                    tried.push(format!("{port}: {status}: {}", said.trim()));
                    if self.same_port {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                Outcome::TimedOut => {
                    let mut child = process.child();
                    kill_child(&mut child);
                    let said = self.reason(&mut child);
                    return Err(format!(
                        "{} did not listen on port {port} within {:?}: {said}",
                        self.name, self.timeout
                    ));
                }
            }
        }
        Err(format!(
            "{} did not start in {} attempts ({})",
            self.name,
            self.attempts,
            tried.join("; ")
        ))
    }

    /// What an exited process said: its piped stderr and its log file.
    fn reason(&self, child: &mut Child) -> String {
        let mut said = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut said);
        }
        if let Some(log) = &self.log {
            said.push_str(&std::fs::read_to_string(log).unwrap_or_default());
        }
        said
    }
}

/// Polls until `ready(child, port)`, `child` exits, or `timeout` passes;
/// the child locked for each poll only (so [`kill_all_started`] need not
/// wait for the start).
fn wait_ready(
    child: &SharedChild,
    port: u16,
    timeout: Duration,
    ready: &mut impl FnMut(&Child, u16) -> bool,
) -> Outcome {
    let deadline = Instant::now() + timeout;
    loop {
        {
            let mut child = started::lock(child);
            let Some(child) = child.as_mut() else {
                return Outcome::TimedOut;
            };
            if let Ok(Some(status)) = child.try_wait() {
                return Outcome::Exited(status);
            }
            if ready(child, port) {
                return Outcome::Listening;
            }
        }
        if Instant::now() >= deadline {
            return Outcome::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A started process listening on `port`; killed (SIGKILL) when dropped,
/// and by [`kill_all_started`] while it runs.
pub struct ServerProcess {
    /// Shared with the list of started processes; `None` inside once
    /// handed over ([`ServerProcess::into_child`]).
    child: SharedChild,
    pid: u32,
    port: u16,
    name: String,
    attempts: u32,
}

/// The child of a [`ServerProcess`], locked while the guard lives:
/// whoever signals or reaps it takes the same lock (module `started`).
pub struct ChildGuard<'a>(MutexGuard<'a, Option<Child>>);

impl Deref for ChildGuard<'_> {
    type Target = Child;

    fn deref(&self) -> &Child {
        self.0.as_ref().expect("process handed over")
    }
}

impl DerefMut for ChildGuard<'_> {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("process handed over")
    }
}

impl ServerProcess {
    /// Starts `command(port)` on a free port ([`Start::command`]).
    pub fn start(name: &str, command: impl FnMut(u16) -> Command) -> ServerProcess {
        Start::new(name).command(command)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The name it was started under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many starts it took (1: no retry).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child process, still killed on drop; locked while the guard
    /// lives ([`ChildGuard`]).
    pub fn child(&mut self) -> ChildGuard<'_> {
        ChildGuard(started::lock(&self.child))
    }

    /// The child, which the caller now stops: no kill on drop, none by
    /// [`kill_all_started`].
    pub fn into_child(self) -> Child {
        let child = started::lock(&self.child).take();
        child.expect("process handed over")
    }

    /// SIGTERM, then SIGKILL after [`STOP_TIMEOUT`]; its exit status.
    pub fn stop(&mut self) -> ExitStatus {
        stop_child(&mut self.child(), STOP_TIMEOUT)
    }

    /// SIGKILL, and reaped.
    pub fn kill(&mut self) {
        kill_child(&mut self.child());
    }

    /// Its exit status once it has exited (reaped then), `None` while it
    /// runs.
    pub fn exited(&self) -> Option<ExitStatus> {
        let mut child = started::lock(&self.child);
        child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// `Ok` while it runs, else what it died of (`NAME (pid PID) died:
    /// STATUS`): a check between the steps of a long run.
    pub fn check_running(&self) -> Result<(), String> {
        match self.exited() {
            Some(status) => Err(format!("{} (pid {}) died: {status}", self.name, self.pid)),
            None => Ok(()),
        }
    }

    /// Sends `signal` (`libc::SIGHUP`, ...) to it unless it has exited:
    /// checked under the lock every reaper takes, so a signal never
    /// reaches a process that reused its PID.
    pub fn try_signal(&self, signal: i32) -> Result<(), String> {
        let mut child = started::lock(&self.child);
        let child = child.as_mut().ok_or("process handed over")?;
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{} (pid {}) exited ({status}) before signal {signal}",
                self.name, self.pid
            ));
        }
        if crate::signal(self.pid, signal) {
            Ok(())
        } else {
            Err(format!(
                "signal {signal} to {} (pid {}): {}",
                self.name,
                self.pid,
                std::io::Error::last_os_error()
            ))
        }
    }

    /// Sends `signal` (`libc::SIGHUP`, ...) to it; panics if it cannot be
    /// sent (it exited already). (`&mut`: the tests that send one hold
    /// their server mutably; [`ServerProcess::try_signal`] takes `&self`.)
    pub fn send_signal(&mut self, signal: i32) {
        self.try_signal(signal)
            .unwrap_or_else(|why| panic!("{why}"));
    }

    /// Its resident set in bytes ([`rss_bytes`]).
    pub fn rss_bytes(&self) -> Result<u64, String> {
        rss_bytes(self.pid)
    }

    /// Waits up to [`EXIT_TIMEOUT`] for it to exit on its own (after a
    /// signal the test sent, a `shutdown`, a failure it must meet); its
    /// exit status. Panics if it still runs then (it is killed on drop).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let name = self.name.clone();
        let mut child = self.child();
        let mut status = None;
        poll::wait_until(&format!("{name} to exit"), EXIT_TIMEOUT, || {
            status = child.try_wait().expect("wait for the process");
            status.is_some()
        });
        status.expect("polled until it exited")
    }

    /// Whether it still runs (not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child().try_wait(), Ok(None))
    }

    /// What the process wrote to its piped stderr; reads to its end, so
    /// call it once the process has stopped.
    pub fn stderr_text(&mut self) -> String {
        let mut text = String::new();
        if let Some(err) = self.child().stderr.as_mut() {
            let _ = err.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(child) = started::lock(&self.child).as_mut() {
            kill_child(child);
        }
    }
}

/// Sends `signal` to `pid`; whether it was delivered. After SIGSTOP it
/// returns once every thread of the process has stopped.
pub fn signal(pid: u32, signal: i32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    // Callers pass the PID of their own child that has not been reaped, so
    // the PID names that process (a zombie at worst), never a reused one.
    let sent = unsafe { libc::kill(pid, signal) == 0 };
    if sent && signal == libc::SIGSTOP {
        // kill returns before a thread running on another core has
        // stopped (it stops at its next interrupt), and such a thread
        // could still answer a request sent meanwhile: wait for each.
        let start = Instant::now();
        while !all_threads_stopped(pid.unsigned_abs()) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{pid} did not stop"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    sent
}

/// Stops `child` by PID: SIGTERM, then SIGKILL if it still runs after
/// `timeout`; its exit status.
pub fn stop_child(child: &mut Child, timeout: Duration) -> ExitStatus {
    if let Ok(Some(status)) = child.try_wait() {
        return status;
    }
    signal(child.id(), libc::SIGTERM);
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    child.wait().expect("wait for a killed child")
}

/// SIGKILL and reap, ignoring a child that already exited.
pub fn kill_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests;
