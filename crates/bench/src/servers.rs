//! The servers under test: starting osmium or memcached on a free loopback
//! port with identical flags, waiting until it accepts connections, reading
//! its VmRSS, and stopping it again — by its PID, from a drop guard, and from
//! a signal handler on Ctrl-C/SIGTERM/SIGHUP.

use std::fmt;
use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every server this process started and has not stopped yet, with its
/// stderr log; the signal handler kills whatever is left here.
static CHILDREN: Mutex<Vec<(Child, PathBuf)>> = Mutex::new(Vec::new());

/// Hands `child` (its stderr in `log`) to the signal handler's list: a
/// process started elsewhere ([`crate::process::Process`]).
pub(crate) fn track(child: Child, log: PathBuf) {
    CHILDREN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((child, log));
}

/// Takes process `pid` off the list, kills it (if it still runs) and
/// reaps it.
pub(crate) fn kill_tracked(pid: u32) {
    let child = {
        let mut children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
        children
            .iter()
            .position(|(c, _)| c.id() == pid)
            .map(|i| children.swap_remove(i))
    };
    if let Some((mut child, _)) = child {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Whether tracked process `pid` has exited (reaping it), with its status.
pub(crate) fn tracked_exit(pid: u32) -> Option<String> {
    let mut children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
    let (child, _) = children.iter_mut().find(|(c, _)| c.id() == pid)?;
    match child.try_wait() {
        Ok(Some(status)) => Some(status.to_string()),
        _ => None,
    }
}

/// Files the signal handler removes too (`restart`'s memory files).
static TEMP_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Has the signal handler remove `path` if a signal stops the run.
pub(crate) fn remove_on_signal(path: &Path) {
    let mut files = TEMP_FILES.lock().unwrap_or_else(|e| e.into_inner());
    files.push(path.to_path_buf());
}

/// Undoes [`remove_on_signal`] (the caller has removed `path` itself).
pub(crate) fn forget_on_signal(path: &Path) {
    let mut files = TEMP_FILES.lock().unwrap_or_else(|e| e.into_inner());
    files.retain(|f| f != path);
}

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Memcached,
    Osmium,
    /// A second osmium binary (`--osmium-b PATH`), started like the first:
    /// an A/B comparison of two builds in one alternated run.
    OsmiumB,
    /// The floor server (`osmium-bench floor`, this executable).
    Floor,
    /// The floor server on io_uring (`osmium-bench floor --io-uring`).
    FloorUring,
    /// The same with `--sqpoll`.
    FloorUringSqpoll,
    /// The same with `--recv-multishot`.
    FloorUringMs,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Memcached => "memcached",
            Kind::Osmium => "osmium",
            Kind::OsmiumB => "osmium-b",
            Kind::Floor => "floor",
            Kind::FloorUring => "floor-uring",
            Kind::FloorUringSqpoll => "floor-uring-sqpoll",
            Kind::FloorUringMs => "floor-uring-ms",
        }
    }

    /// One of the floor servers (this executable; stores nothing).
    pub(crate) fn is_floor(self) -> bool {
        matches!(
            self,
            Kind::Floor | Kind::FloorUring | Kind::FloorUringSqpoll | Kind::FloorUringMs
        )
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.name())
    }
}

/// The binaries to run.
#[derive(Clone, Debug)]
pub(crate) struct Binaries {
    pub osmium: PathBuf,
    /// `--osmium-b`, for the `osmium-b` kind.
    pub osmium_b: Option<PathBuf>,
    /// `--osmium-b-args`: more arguments for the `osmium-b` server (e.g.
    /// `-e FILE`, to compare one build with and without a memory file).
    pub osmium_b_args: Vec<String>,
    pub memcached: PathBuf,
    /// This executable (its `floor` subcommand).
    pub floor: PathBuf,
}

impl Binaries {
    /// `--osmium`/`--memcached`, else osmium beside this executable (both
    /// live in `target/release` after `cargo build --release`), else
    /// `target/release/osmium`; memcached: the repository's build of the
    /// test oracle (`.oracle/memcached-1.6.45/memcached`, made by
    /// `scripts/build-memcached.sh`) when it exists, else
    /// `/usr/bin/memcached`.
    pub(crate) fn resolve(osmium: Option<PathBuf>, memcached: Option<PathBuf>) -> Binaries {
        let osmium = osmium.unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|dir| dir.join("osmium")))
                .filter(|p| p.is_file())
                .unwrap_or_else(|| PathBuf::from("target/release/osmium"))
        });
        let memcached = memcached.unwrap_or_else(|| {
            let oracle = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../.oracle/memcached-1.6.45/memcached");
            if oracle.is_file() {
                oracle
            } else {
                PathBuf::from("/usr/bin/memcached")
            }
        });
        let floor = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("osmium-bench"));
        Binaries {
            osmium,
            osmium_b: None,
            osmium_b_args: Vec::new(),
            memcached,
            floor,
        }
    }

    /// Fails if `kind`'s binary is not a file.
    pub(crate) fn check(&self, kind: Kind) -> Result<(), String> {
        let path = self.path(kind);
        if path.is_file() {
            return Ok(());
        }
        Err(match kind {
            Kind::Osmium => format!(
                "{} not found: build it with `cargo build --release -p osmium-server`, or pass --osmium PATH",
                path.display()
            ),
            Kind::Memcached => format!("{} not found: pass --memcached PATH", path.display()),
            Kind::OsmiumB => format!("osmium-b: pass --osmium-b PATH (not found: {})", path.display()),
            Kind::Floor | Kind::FloorUring | Kind::FloorUringSqpoll | Kind::FloorUringMs => {
                format!("{} not found", path.display())
            }
        })
    }

    pub(crate) fn path(&self, kind: Kind) -> &Path {
        match kind {
            Kind::Osmium => &self.osmium,
            Kind::OsmiumB => self.osmium_b.as_deref().unwrap_or(Path::new("")),
            Kind::Memcached => &self.memcached,
            Kind::Floor | Kind::FloorUring | Kind::FloorUringSqpoll | Kind::FloorUringMs => {
                &self.floor
            }
        }
    }
}

/// Kills every server still running when SIGINT, SIGTERM or SIGHUP
/// arrives, then exits with 128 + the signal number.
pub(crate) fn install_signal_handler() -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| format!("installing signal handler: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let mut children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
                for (child, log) in children.iter_mut() {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = std::fs::remove_file(log);
                }
                let n = children.len();
                children.clear();
                for f in TEMP_FILES.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    let _ = std::fs::remove_file(f);
                }
                eprintln!("osmium-bench: signal {sig}, stopped {n} server(s)");
                std::process::exit(128 + sig);
            }
        })
        .map_err(|e| format!("spawning signal thread: {e}"))?;
    Ok(())
}

/// The CPUs this process may run on (its affinity mask), in order.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a cpu_set_t of the size given; pid 0 is
    // the calling thread.
    let got =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if got != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i is below CPU_SETSIZE, inside the set.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// An errno.
pub(crate) struct Errno(pub i32);

/// Allows the calling thread (and the threads and processes it starts
/// from now on) to run on CPU `cpu` only. Async-signal-safe (used between
/// fork and exec).
pub(crate) fn pin_to_cpu(cpu: usize) -> Result<(), Errno> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: plain data; zeroed is the empty set; cpu is inside the set.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        // SAFETY: reads this thread's errno.
        Err(Errno(unsafe { *libc::__errno_location() }))
    }
}

/// The `Cpus_allowed_list` of process `pid` (e.g. `0` or `0-1`).
pub(crate) fn cpus_allowed_list(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// A free port on 127.0.0.1, reserved for about a minute: no other
/// bind(port 0) or outgoing connection takes it before the server binds it
/// (`osmium_test_harness::free_port`).
pub(crate) fn free_port() -> Result<u16, String> {
    Ok(osmium_test_harness::free_port())
}

/// The command line of a cache server (osmium or memcached, both take
/// memcached's flags) at `path` on `port`, as the tests start one
/// (`osmium_test_harness::CacheServer::command`: `-l 127.0.0.1 -p PORT -U
/// 0`, `-u root` when running as root), with `-m memory_mb -t threads`;
/// the caller adds the rest, and its stdio.
pub(crate) fn cache_command(path: &Path, port: u16, memory_mb: u64, threads: u32) -> Command {
    osmium_test_harness::Osmium::new()
        .bin(path)
        .args(["-m".to_string(), memory_mb.to_string()])
        .args(["-t".to_string(), threads.to_string()])
        .command(port)
}

/// A running server; dropping it kills the process (by PID) and reaps it.
pub(crate) struct Server {
    pub kind: Kind,
    pub pid: u32,
    pub port: u16,
    log: PathBuf,
}

impl Server {
    /// Starts `kind` with `-p <port> -U 0 -l 127.0.0.1 -m <memory_mb> -t
    /// <threads>` (plus `-u root` when running as root) and
    /// waits until it accepts a TCP connection. Retries on a new port if the
    /// process dies at once (e.g. the port was taken in between).
    pub(crate) fn start(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        threads: u32,
    ) -> Result<Server, String> {
        Server::start_with(bins, kind, memory_mb, threads, &[])
    }

    /// [`Server::start`] with `extra` arguments after the others (e.g.
    /// `-I 2m`; for the floor server, `--value-size N`).
    pub(crate) fn start_with(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        threads: u32,
        extra: &[String],
    ) -> Result<Server, String> {
        Server::start_on(bins, kind, memory_mb, threads, extra, None)
    }

    /// [`Server::start_with`], the process (every thread it will start)
    /// allowed only on CPU `cpu` when given (`load --vs --pin`).
    pub(crate) fn start_on(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        threads: u32,
        extra: &[String],
        cpu: Option<usize>,
    ) -> Result<Server, String> {
        bins.check(kind)?;
        let path = bins.path(kind);
        let mut args = extra.to_vec();
        if kind == Kind::OsmiumB {
            args.extend(bins.osmium_b_args.iter().cloned());
        }
        let mut last_err = String::new();
        for _attempt in 0..3 {
            let port = free_port()?;
            match Server::try_start(path, kind, port, memory_mb, threads, &args, cpu) {
                Ok(s) => return Ok(s),
                Err(e) => last_err = e,
            }
        }
        Err(last_err)
    }

    /// [`Server::start_with`] without the wait: returns as soon as the
    /// process is spawned (`restart` times the start itself).
    pub(crate) fn spawn(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        threads: u32,
        extra: &[String],
    ) -> Result<Server, String> {
        bins.check(kind)?;
        let port = free_port()?;
        Server::spawn_at(bins.path(kind), kind, port, memory_mb, threads, extra, None)
    }

    fn spawn_at(
        path: &Path,
        kind: Kind,
        port: u16,
        memory_mb: u64,
        threads: u32,
        extra: &[String],
        cpu: Option<usize>,
    ) -> Result<Server, String> {
        let log = std::env::temp_dir().join(format!(
            "osmium-bench-{}-{}-{port}.log",
            std::process::id(),
            kind.name()
        ));
        let log_file =
            File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let mut cmd = if kind.is_floor() {
            let mut cmd = Command::new(path);
            cmd.args(["floor", "-p", &port.to_string()]);
            match kind {
                Kind::FloorUring => cmd.arg("--io-uring"),
                Kind::FloorUringSqpoll => cmd.args(["--io-uring", "--sqpoll"]),
                Kind::FloorUringMs => cmd.args(["--io-uring", "--recv-multishot"]),
                _ => &mut cmd,
            };
            cmd
        } else {
            cache_command(path, port, memory_mb, threads)
        };
        cmd.args(extra);
        if let Some(cpu) = cpu {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec the child only makes the
            // sched_setaffinity system call on itself, which allocates
            // nothing and takes no lock.
            unsafe {
                cmd.pre_exec(move || {
                    pin_to_cpu(cpu).map_err(|e| std::io::Error::from_raw_os_error(e.0))
                });
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", path.display()))?;
        let pid = child.id();
        CHILDREN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((child, log.clone()));
        // From here on the guard owns the process.
        Ok(Server {
            kind,
            pid,
            port,
            log,
        })
    }

    fn try_start(
        path: &Path,
        kind: Kind,
        port: u16,
        memory_mb: u64,
        threads: u32,
        extra: &[String],
        cpu: Option<usize>,
    ) -> Result<Server, String> {
        let server = Server::spawn_at(path, kind, port, memory_mb, threads, extra, cpu)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = server.exited() {
                let tail = std::fs::read_to_string(&server.log).unwrap_or_default();
                return Err(format!(
                    "{} exited at start ({status}) on port {port}: {}",
                    kind.name(),
                    tail.trim()
                ));
            }
            if TcpStream::connect_timeout(&server.addr(), Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not accept connections on port {port} within 15 s",
                    kind.name()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The exit status if the process has exited.
    pub(crate) fn exited(&self) -> Option<String> {
        let mut children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
        let (child, _) = children.iter_mut().find(|(c, _)| c.id() == self.pid)?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }

    /// Sends signal `sig` (e.g. SIGUSR1, SIGKILL) unless the process has
    /// exited (and been reaped) already, so a reused PID is never hit.
    pub(crate) fn signal(&self, sig: i32) -> Result<(), String> {
        let mut children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
        let Some((child, _)) = children.iter_mut().find(|(c, _)| c.id() == self.pid) else {
            return Err(format!("{} (pid {}) is not running", self.kind, self.pid));
        };
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{} (pid {}) exited: {status}", self.kind, self.pid));
        }
        // SAFETY: plain system call; the child is not reaped (checked above,
        // under the lock every reaper takes), so the PID is still its own.
        if unsafe { libc::kill(self.pid as libc::pid_t, sig) } != 0 {
            return Err(format!(
                "signal {sig} to {} (pid {}): {}",
                self.kind,
                self.pid,
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Waits up to `timeout` for the process to exit; its exit status.
    pub(crate) fn wait_exit(&self, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} (pid {}) did not exit within {timeout:?}",
                    self.kind, self.pid
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// What the server has written on stderr so far (its log file).
    pub(crate) fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails if the server has died (e.g. crashed under load).
    pub(crate) fn check_alive(&self) -> Result<(), String> {
        match self.exited() {
            Some(status) => Err(format!("{} (pid {}) died: {status}", self.kind, self.pid)),
            None => Ok(()),
        }
    }

    /// VmRSS from /proc/PID/status, in bytes.
    pub(crate) fn rss_bytes(&self) -> Result<u64, String> {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .ok_or_else(|| format!("no VmRSS in {path}"))?;
        let mut parts = line.split_whitespace().skip(1);
        let kb: u64 = parts
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("bad VmRSS line {line:?}"))?;
        if parts.next() != Some("kB") {
            return Err(format!("bad VmRSS unit in {line:?}"));
        }
        Ok(kb * 1024)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let child = {
            let mut children = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
            children
                .iter()
                .position(|(c, _)| c.id() == self.pid)
                .map(|i| children.swap_remove(i))
        };
        if let Some((mut child, _)) = child {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}
