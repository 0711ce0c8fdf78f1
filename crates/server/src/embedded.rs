//! A server inside another program (a test's process): [`Server::start`]
//! checks and starts it as the binary does (`launch`, `server`), runs its
//! acceptor on a thread of its own, and hands back a [`RunningServer`]
//! that says where it listens and stops it. [`Config`] is the settings,
//! parsed from memcached's command line by the binary's own parser.
//!
//! What the process keeps for itself: an in-process server installs no
//! signal handler, log subscriber or allocator setting, never forks,
//! changes user or locks memory, and tells no service manager anything;
//! the options that would (`-d`, `-u`, `-k`, `-r`, `logfile`, and `-s`,
//! whose socket file is made under a process-wide umask) are refused.
//! Its log lines go to the program's own `tracing` subscriber, if any.
//! Several can run in one process: nothing they start is process-wide
//! but the open-file limit `-c` raises and the latency clock's one-time
//! calibration, both shared.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::context::{Shared, StopRequest};
use crate::launch;
use crate::process::Host;
use crate::settings::{self, Action};

/// A server's settings, as `osmium`'s command line gives them.
#[derive(Debug)]
pub struct Config(pub(crate) Box<settings::Settings>);

impl Config {
    /// Parses `args`, the options without the program's name (`["-l",
    /// "127.0.0.1:0", "-m", "64"]`), as the `osmium` binary parses its
    /// command line, a `--config-file` included. Err: the binary's
    /// message; a command line that only prints (`-h`, `-V`) or writes a
    /// secret is refused too.
    pub fn from_args<I, T>(args: I) -> Result<Config, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        let mut all: Vec<std::ffi::OsString> = vec!["osmium".into()];
        all.extend(args.into_iter().map(Into::into));
        match settings::parse(all)? {
            Action::Run(s) => Ok(Config(s)),
            Action::Print(_) | Action::GenSecret(_) => {
                Err("a command line that starts no server".into())
            }
        }
    }
}

/// Starts servers inside this process.
#[derive(Debug)]
pub struct Server;

impl Server {
    /// Starts a server with `config`, as the binary starts one (the same
    /// checks, listeners, store and threads), its acceptor on a thread
    /// named `osmium-acceptor`. It answers once this returns. Err: a
    /// refused or failed start, in the words the binary would print
    /// (`InvalidInput` for a refused option or file, else the failure's
    /// own kind: `AddrInUse` for a port taken).
    pub fn start(config: Config) -> io::Result<RunningServer> {
        let started = launch::start(*config.0, Host::Embedded)
            .map_err(|refused| io::Error::new(refused.kind, refused.message))?;
        let shared = started.shared.clone();
        let tcp = started.tcp_addrs.clone();
        let udp = started.udp_addrs.clone();
        let metrics = started.metrics_addr;
        let spawned = std::thread::Builder::new()
            .name("osmium-acceptor".into())
            .spawn(move || crate::upgrade::serve::serve(started));
        let acceptor = match spawned {
            Ok(handle) => handle,
            Err(e) => {
                // The closure, and the server in it, went with the failed
                // spawn without stopping its threads: ask them to stop.
                shared.request_stop(StopRequest::Exit);
                return Err(e);
            }
        };
        Ok(RunningServer {
            shared,
            acceptor: Some(acceptor),
            tcp,
            udp,
            metrics,
        })
    }
}

/// A server started by [`Server::start`]. [`RunningServer::stop`], or
/// dropping it, stops it: every thread it started returns (replication's
/// link threads, if any, and metrics clients being answered end on their
/// own soon after) and its ports are free again.
pub struct RunningServer {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<io::Result<StopRequest>>>,
    tcp: Vec<SocketAddr>,
    udp: Vec<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl RunningServer {
    /// Where its TCP listeners (TLS ones included) are bound, in `-l`'s
    /// order: the ports `-l HOST:0` left to the system are known here.
    pub fn tcp_addrs(&self) -> &[SocketAddr] {
        &self.tcp
    }

    /// Where its UDP sockets (`-U`) are bound.
    pub fn udp_addrs(&self) -> &[SocketAddr] {
        &self.udp
    }

    /// Where its metrics endpoint (`--metrics-addr`) listens.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// Whether it still serves: false once asked to stop (`shutdown`).
    pub fn is_running(&self) -> bool {
        self.shared.stop_requested().is_none()
    }

    /// Stops it as SIGTERM stops the binary (unless a `shutdown` already
    /// asked for a stop) and waits until it has: its threads returned, the
    /// memory file written out (`-e`), its sockets closed. Err: the
    /// acceptor failed, or panicked.
    pub fn stop(mut self) -> io::Result<()> {
        self.stop_and_wait()
    }

    fn stop_and_wait(&mut self) -> io::Result<()> {
        let Some(acceptor) = self.acceptor.take() else {
            return Ok(());
        };
        self.shared.request_stop(StopRequest::Exit);
        match acceptor.join() {
            Ok(served) => served.map(|_| ()),
            Err(_) => Err(io::Error::other("the server's acceptor panicked")),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop_and_wait();
    }
}
