//! The servers under test as the benchmarks start them: which binary and
//! which flags each kind runs with ([`Kind`], [`Binaries`], identical
//! flags for osmium and memcached), a [`Server`] of a kind, and the signal
//! handler that stops every server on Ctrl-C/SIGTERM/SIGHUP. Starting on
//! a free loopback port, waiting until the process listens, pinning to a
//! CPU, reading VmRSS and stopping by PID are the test harness's, the one
//! launcher of the workspace ([`osmium_test_harness`]).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use osmium_test_harness::{CacheServer, Osmium, Program, Running};

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

/// Set once a signal arrived: the handler is stopping the run.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

/// Blocks for good once a signal arrived, so the handler's exit (128 + the
/// signal, its message) ends the process, not the run's error: a run whose
/// servers the handler killed under it, or whose next start the harness
/// refused, ends in an error meanwhile.
pub(crate) fn wait_if_signalled() {
    while SIGNALLED.load(Ordering::SeqCst) {
        std::thread::park();
    }
}

/// Kills every server still running when SIGINT, SIGTERM or SIGHUP
/// arrives (every process the harness started:
/// [`osmium_test_harness::kill_all_started`]), removes the files of
/// [`remove_on_signal`], then exits with 128 + the signal number.
pub(crate) fn install_signal_handler() -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| format!("installing signal handler: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                SIGNALLED.store(true, Ordering::SeqCst);
                let n = osmium_test_harness::kill_all_started();
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

/// A cache server (osmium or memcached, both take memcached's flags) at
/// `path`, started as `name`, as the tests start one (`-l 127.0.0.1 -p
/// PORT -U 0`, `-u root` when running as root) with `-m memory_mb -t
/// threads`; the caller adds the rest.
pub(crate) fn cache_server(path: &Path, name: &str, memory_mb: u64, threads: u32) -> CacheServer {
    Osmium::new()
        .bin(path)
        .name(name)
        .args(["-m".to_string(), memory_mb.to_string()])
        .args(["-t".to_string(), threads.to_string()])
}

/// The floor server of `kind` (this executable's `floor` subcommand) at
/// `path`: `floor -p PORT`, its I/O flags, then `extra`.
fn floor_server(path: &Path, kind: Kind, extra: Vec<String>) -> Program {
    Program::new(kind.name(), path, move |port| {
        let mut args = vec!["floor".to_string(), "-p".into(), port.to_string()];
        let io: &[&str] = match kind {
            Kind::FloorUring => &["--io-uring"],
            Kind::FloorUringSqpoll => &["--io-uring", "--sqpoll"],
            Kind::FloorUringMs => &["--io-uring", "--recv-multishot"],
            _ => &[],
        };
        args.extend(io.iter().map(|a| a.to_string()));
        args.extend(extra.iter().cloned());
        args
    })
}

/// A running server of one kind; dropping it kills the process (by PID)
/// and reaps it.
pub(crate) struct Server {
    pub kind: Kind,
    pub pid: u32,
    pub port: u16,
    running: Running,
}

impl Server {
    /// Starts `kind` with `-p <port> -U 0 -l 127.0.0.1 -m <memory_mb> -t
    /// <threads>` (plus `-u root` when running as root) on a free port and
    /// waits until it listens there; a start whose port was taken
    /// meanwhile is made again on another.
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
        Server::launch(bins, kind, memory_mb, threads, extra, cpu, true)
    }

    /// [`Server::start_with`] without the wait: returns as soon as the
    /// process is spawned (`restart` times the start itself). Memcached
    /// and osmium only: the floor server is always waited for.
    pub(crate) fn spawn(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        threads: u32,
        extra: &[String],
    ) -> Result<Server, String> {
        Server::launch(bins, kind, memory_mb, threads, extra, None, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        bins: &Binaries,
        kind: Kind,
        memory_mb: u64,
        threads: u32,
        extra: &[String],
        cpu: Option<usize>,
        wait: bool,
    ) -> Result<Server, String> {
        bins.check(kind)?;
        let path = bins.path(kind);
        let mut args = extra.to_vec();
        if kind == Kind::OsmiumB {
            args.extend(bins.osmium_b_args.iter().cloned());
        }
        let running = if kind.is_floor() {
            let mut floor = floor_server(path, kind, args);
            if let Some(cpu) = cpu {
                floor = floor.cpu(cpu);
            }
            floor.try_start()?
        } else {
            let mut server = cache_server(path, kind.name(), memory_mb, threads).args(&args);
            if let Some(cpu) = cpu {
                server = server.cpu(cpu);
            }
            if !wait {
                server = server.no_wait();
            }
            server.try_start()?
        };
        Ok(Server {
            kind,
            pid: running.pid(),
            port: running.port(),
            running,
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.running.addr()
    }

    /// The exit status if the process has exited.
    pub(crate) fn exited(&self) -> Option<String> {
        self.running.exited().map(|status| status.to_string())
    }

    /// Sends signal `sig` (e.g. SIGUSR1, SIGKILL) unless the process has
    /// exited (and been reaped) already, so a reused PID is never hit.
    pub(crate) fn signal(&self, sig: i32) -> Result<(), String> {
        self.running.try_signal(sig)
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
        self.running.stderr_text()
    }

    /// Fails if the server has died (e.g. crashed under load).
    pub(crate) fn check_alive(&self) -> Result<(), String> {
        self.running.check_running()
    }

    /// VmRSS from /proc/PID/status, in bytes.
    pub(crate) fn rss_bytes(&self) -> Result<u64, String> {
        self.running.rss_bytes()
    }
}
