//! A server a builder started ([`crate::Osmium`], [`crate::Memcached`],
//! [`crate::Proxy`], [`crate::Nutcracker`]): the process (a
//! [`ServerProcess`], which it dereferences to: port, PID, `stop()`,
//! `kill()`, `send_signal()`, `wait_exit()`), its address, its stats port
//! if it has one, and a scratch directory of its own (its stderr log, its
//! configuration file), removed once the process is killed on drop. A
//! cache server can be started again the same way on the same port
//! ([`Running::restart`]).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::{CacheServer, ServerProcess, EXIT_TIMEOUT};

/// A running server, killed (SIGKILL) when dropped (module comment).
pub struct Running {
    process: ServerProcess,
    pub(crate) stats: Option<u16>,
    pub(crate) config: Option<PathBuf>,
    pub(crate) extra_ports: Vec<u16>,
    pub(crate) builder: Option<CacheServer>,
    scratch: Scratch,
}

impl Running {
    pub(crate) fn new(process: ServerProcess, scratch: Scratch) -> Running {
        Running {
            process,
            stats: None,
            config: None,
            extra_ports: Vec::new(),
            builder: None,
            scratch,
        }
    }

    /// Starts it again as it was started (the same builder: arguments,
    /// memory file, environment) on the same port, once the process it
    /// replaces is gone (killed, if it still ran): a restart, where the
    /// port clients know is the point. Its stderr log starts empty; extra
    /// ports are new ones. Panics for a proxy (no builder kept).
    pub fn restart(&mut self) {
        let builder = self
            .builder
            .clone()
            .unwrap_or_else(|| panic!("{} cannot be restarted", self.name()));
        self.process.kill();
        let port = self.port();
        *self = builder.only_port(port).start();
    }

    /// Polls its stderr for up to [`EXIT_TIMEOUT`] until it holds any of
    /// `needles`; all of its stderr then. Panics with what it said if
    /// none came.
    pub fn wait_for_stderr(&self, needles: &[&str]) -> String {
        let deadline = std::time::Instant::now() + EXIT_TIMEOUT;
        loop {
            let said = self.stderr_text();
            if needles.iter().any(|n| said.contains(n)) {
                return said;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} said none of {needles:?} in {EXIT_TIMEOUT:?}: {said:?}",
                self.name()
            );
            std::thread::sleep(crate::POLL_INTERVAL);
        }
    }

    /// The ports of its extra listeners
    /// ([`crate::CacheServer::extra_listener`]), in the order asked for.
    pub fn extra_ports(&self) -> &[u16] {
        &self.extra_ports
    }

    /// The configuration file it was started with (a proxy's YAML);
    /// panics for a server without one.
    pub fn config_path(&self) -> &Path {
        self.config
            .as_deref()
            .unwrap_or_else(|| panic!("{} has no configuration file", self.name()))
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port()))
    }

    /// The stats port (osmium-proxy's and nutcracker's `-s`); panics for
    /// a server without one.
    pub fn stats_port(&self) -> u16 {
        self.stats
            .unwrap_or_else(|| panic!("{} has no stats port", self.name()))
    }

    /// A connection to it with a 10 s read timeout.
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr())
            .unwrap_or_else(|e| panic!("connect to {} at {}: {e}", self.name(), self.addr()));
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("set a read timeout");
        s
    }

    /// Everything the process wrote to stderr so far (a file, so it can
    /// be read while it runs).
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.scratch.stderr()).unwrap_or_default()
    }

    /// Its scratch directory (removed on drop).
    pub fn scratch_dir(&self) -> &Path {
        &self.scratch.0
    }

    /// The process, for what [`ServerProcess`] offers.
    pub fn process(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

impl Deref for Running {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}

impl DerefMut for Running {
    fn deref_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Killed before its scratch directory goes (the field order would
        // drop the process first too; this says it).
        self.process.kill();
    }
}

/// A directory of one server's files under the system's temporary
/// directory, removed on drop (and by [`crate::kill_all_started`]).
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(what: &str) -> Scratch {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "osmium-test-{what}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        crate::started::add_dir(&dir);
        Scratch(dir)
    }

    pub(crate) fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    /// Where the process's stderr goes.
    pub(crate) fn stderr(&self) -> PathBuf {
        self.path("stderr.log")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        crate::started::remove_dir(&self.0);
    }
}
