//! The builder of a cache server process, osmium ([`Osmium::new`]) or
//! genuine memcached 1.6.45 ([`Memcached::new`]): both take memcached's
//! flags, so one builder serves both. Defaults: TCP on a free loopback
//! port (`-l 127.0.0.1 -p PORT`), UDP off (`-U 0`), `-u root` when the
//! tests run as root (both refuse root without it); stdin and stdout
//! null, stderr to a file ([`Running::stderr_text`]). [`CacheServer::start`]
//! returns once the process itself listens on its port (and on its extra
//! ports, its UDP port, its unix socket, as asked), started again on
//! other ports if one was taken meanwhile ([`crate::Start`]), or says
//! why it did not ([`CacheServer::try_start`]); [`CacheServer::cpu`] pins
//! it to one CPU, [`CacheServer::no_wait`] returns at the spawn;
//! [`CacheServer::run_to_exit`] runs a start that must fail.

use std::cell::RefCell;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::bins::{memcached_bin, osmium_bin, running_as_root};
use crate::cpus::pin_command;
use crate::exited::{run_to_exit, Exited};
use crate::running::{Running, Scratch};
use crate::{binds_udp, listens_on, listens_on_unix, Certs, Start};

/// osmium, the server of this workspace.
pub struct Osmium;

impl Osmium {
    /// A builder of an osmium server (`OSMIUM_BIN`, else the `osmium`
    /// beside the test binary; [`CacheServer::bin`] to name another).
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> CacheServer {
        CacheServer::new("osmium", None)
    }
}

/// Genuine memcached 1.6.45, the oracle ([`crate::memcached_bin`]).
pub struct Memcached;

impl Memcached {
    /// A builder of a memcached server; panics when there is no oracle
    /// ([`Memcached::found`] to skip instead).
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> CacheServer {
        Memcached::found().expect("memcached 1.6.45 (set MEMCACHED_BIN)")
    }

    /// A builder of a memcached server, or `None` (after a SKIP line)
    /// when the oracle is not built.
    pub fn found() -> Option<CacheServer> {
        memcached_bin().map(|bin| CacheServer::new("memcached", Some(bin)))
    }
}

/// The arguments naming one extra port ([`CacheServer::extra_port`]);
/// unwind-safe, so a [`Running`] holding its builder still crosses
/// `catch_unwind`.
type PortArgs = Arc<dyn Fn(u16) -> Vec<String> + Send + Sync + RefUnwindSafe + UnwindSafe>;

/// How to start one osmium or memcached process (module comment). A
/// clone starts another process the same way.
#[derive(Clone)]
pub struct CacheServer {
    name: String,
    bin: Option<PathBuf>,
    args: Vec<OsString>,
    opts: Vec<String>,
    env: Vec<(OsString, OsString)>,
    env_removed: Vec<OsString>,
    udp: bool,
    first_port: Option<u16>,
    only_port: bool,
    extra_ports: Vec<PortArgs>,
    listen: String,
    bare: bool,
    unix: Option<PathBuf>,
    cpu: Option<usize>,
    wait: bool,
}

impl CacheServer {
    fn new(name: &str, bin: Option<PathBuf>) -> CacheServer {
        CacheServer {
            name: name.to_string(),
            bin,
            args: Vec::new(),
            opts: Vec::new(),
            env: Vec::new(),
            env_removed: Vec::new(),
            udp: false,
            first_port: None,
            only_port: false,
            extra_ports: Vec::new(),
            listen: "127.0.0.1".to_string(),
            bare: false,
            unix: None,
            cpu: None,
            wait: true,
        }
    }

    /// Runs `bin` instead of the located binary.
    pub fn bin(mut self, bin: impl AsRef<Path>) -> CacheServer {
        self.bin = Some(bin.as_ref().to_path_buf());
        self
    }

    /// The name it is started under (messages, its scratch directory):
    /// `osmium-b` for a second osmium build, `memcached` for another
    /// memcached binary ([`CacheServer::bin`]).
    pub fn name(mut self, name: &str) -> CacheServer {
        self.name = name.to_string();
        self
    }

    /// The process, and every thread it starts, runs on CPU `cpu` only
    /// (pinned before it execs, [`crate::pin_to_cpu`]).
    pub fn cpu(mut self, cpu: usize) -> CacheServer {
        self.cpu = Some(cpu);
        self
    }

    /// [`CacheServer::start`] returns as soon as the process is spawned,
    /// without waiting for it to listen, in one attempt
    /// ([`crate::Start::no_wait`]): a caller that times the start itself.
    pub fn no_wait(mut self) -> CacheServer {
        self.wait = false;
        self
    }

    /// One more argument, after the defaults.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> CacheServer {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// More arguments, after the defaults.
    pub fn args<I, S>(mut self, args: I) -> CacheServer
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// One `-o` option (`key=value`); all of them go in one `-o`.
    pub fn opt(mut self, opt: impl Into<String>) -> CacheServer {
        self.opts.push(opt.into());
        self
    }

    /// `-m megabytes`.
    pub fn memory(self, megabytes: u32) -> CacheServer {
        self.args(["-m".to_string(), megabytes.to_string()])
    }

    /// `-t threads`.
    pub fn threads(self, threads: u32) -> CacheServer {
        self.args(["-t".to_string(), threads.to_string()])
    }

    /// TLS on its port (`-Z`) with the server certificate `server` of
    /// `certs`, verifying client certificates against its CA `ca`.
    pub fn tls(self, certs: &Certs) -> CacheServer {
        self.tls_cert(certs, "server", Some("ca"))
    }

    /// TLS on its port (`-Z`) with certificate `cert` of `certs` and, with
    /// `ca`, client certificates verified against that CA.
    pub fn tls_cert(mut self, certs: &Certs, cert: &str, ca: Option<&str>) -> CacheServer {
        self.args.push("-Z".into());
        self.opts.extend(certs.server_opts(cert, ca));
        self
    }

    /// The flash tier in file `path` of `size` (`-o ext_path=PATH:SIZE`,
    /// `SIZE` as memcached takes it: `64m`, `1g`).
    pub fn flash(self, path: impl AsRef<Path>, size: &str) -> CacheServer {
        let opt = format!("ext_path={}:{size}", path.as_ref().display());
        self.opt(opt)
    }

    /// UDP on the TCP port too (`-U PORT` instead of `-U 0`).
    pub fn udp(mut self) -> CacheServer {
        self.udp = true;
        self
    }

    /// `-l spec` instead of `-l 127.0.0.1` (memcached's list: `spec` may
    /// name ports of its own, `mtls:` listeners; `-p PORT` stays).
    pub fn listen(mut self, spec: &str) -> CacheServer {
        self.listen = spec.to_string();
        self
    }

    /// One more listener, `-l PREFIX127.0.0.1:PORT` on a free port of its
    /// own (`prefix`: `mtls:`, `tls:`, or empty); its port is in
    /// [`Running::extra_ports`], and the start waits until it listens.
    pub fn extra_listener(self, prefix: &str) -> CacheServer {
        let prefix = prefix.to_string();
        self.extra_port(move |port| vec!["-l".into(), format!("{prefix}127.0.0.1:{port}")])
    }

    /// One more TCP port the process listens on, a free one of its own,
    /// named by the arguments `args(port)` (`--metrics-addr
    /// 127.0.0.1:PORT`); its port is in [`Running::extra_ports`] (in the
    /// order asked for), the start waits until it listens there too, and a
    /// start that found it taken is made again on new ports.
    pub fn extra_port(
        mut self,
        args: impl Fn(u16) -> Vec<String> + Send + Sync + RefUnwindSafe + UnwindSafe + 'static,
    ) -> CacheServer {
        self.extra_ports.push(Arc::new(args));
        self
    }

    /// No `-l`, `-p` or `-U` of the builder's (`-u root` under root
    /// stays): the arguments are the test's own, which names the port the
    /// start waits for with [`CacheServer::port`] or
    /// [`CacheServer::only_port`] (a `--config-file` naming it).
    pub fn bare(mut self) -> CacheServer {
        self.bare = true;
        self
    }

    /// The memory file `path` (`-e PATH`: a restartable cache).
    pub fn memory_file(self, path: impl AsRef<Path>) -> CacheServer {
        self.arg("-e").arg(path.as_ref())
    }

    /// Serves the unix socket `path` (`-s PATH`, which turns TCP and UDP
    /// off): the start waits until the process listens on that socket.
    pub fn unix_socket(mut self, path: impl AsRef<Path>) -> CacheServer {
        self.unix = Some(path.as_ref().to_path_buf());
        self
    }

    /// An environment variable of the process.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> CacheServer {
        self.env
            .push((key.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// An environment variable the process does not inherit.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> CacheServer {
        self.env_removed.push(key.as_ref().to_os_string());
        self
    }

    /// The first attempt uses `port`; a retry takes a free one.
    pub fn port(mut self, port: u16) -> CacheServer {
        self.first_port = Some(port);
        self
    }

    /// Every attempt uses `port` (a restart where the port is the point).
    pub fn only_port(mut self, port: u16) -> CacheServer {
        self.first_port = Some(port);
        self.only_port = true;
        self
    }

    fn binary(&self) -> PathBuf {
        self.bin.clone().unwrap_or_else(osmium_bin)
    }

    /// The command [`CacheServer::start`] runs for `port` (stdio not set).
    pub fn command(&self, port: u16) -> Command {
        let mut cmd = Command::new(self.binary());
        if running_as_root() {
            cmd.args(["-u", "root"]);
        }
        if !self.bare {
            let udp = if self.udp { port } else { 0 };
            cmd.args(["-l", &self.listen, "-p", &port.to_string()])
                .args(["-U", &udp.to_string()]);
        }
        if let Some(path) = &self.unix {
            cmd.arg("-s").arg(path);
        }
        cmd.args(&self.args);
        if !self.opts.is_empty() {
            cmd.args(["-o", &self.opts.join(",")]);
        }
        for key in &self.env_removed {
            cmd.env_remove(key);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(cpu) = self.cpu {
            pin_command(&mut cmd, cpu);
        }
        cmd
    }

    /// Starts it; returns once it listens (module comment). Panics if it
    /// does not start, saying why.
    pub fn start(self) -> Running {
        self.try_start().unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`CacheServer::start`] that says why it could not start instead of
    /// panicking.
    pub fn try_start(self) -> Result<Running, String> {
        let scratch = Scratch::new(&self.name);
        let log = scratch.stderr();
        let mut start = Start::new(&self.name).log_file(log.clone());
        if !self.wait {
            start = start.no_wait();
        }
        let first = match self.first_port {
            Some(port) => port,
            None if self.udp => crate::free_port_tcp_udp(),
            None => crate::free_port(),
        };
        start = if self.only_port {
            start.only_port(first)
        } else {
            start.port(first)
        };
        let extra_ports = RefCell::new(Vec::new());
        let process = start.try_child_ready(
            |port| {
                let err = File::create(&log).map_err(|e| format!("create the stderr log: {e}"))?;
                let mut cmd = self.command(port);
                *extra_ports.borrow_mut() = self.add_extra_ports(&mut cmd);
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(err)
                    .spawn()
                    .map_err(|e| format!("cannot run {}: {e}", self.binary().display()))
            },
            |child, port| {
                let pid = child.id();
                self.ready(pid, port) && extra_ports.borrow().iter().all(|&p| listens_on(pid, p))
            },
        )?;
        let mut running = Running::new(process, scratch);
        running.extra_ports = extra_ports.into_inner();
        running.builder = Some(self);
        Ok(running)
    }

    /// Runs a start that must fail (a refused option, a port in use, a
    /// file it cannot use) until the process exits: its status and stderr.
    /// Panics, after killing it, if it still runs after
    /// [`crate::EXIT_TIMEOUT`].
    pub fn run_to_exit(self) -> Exited {
        let scratch = Scratch::new(&self.name);
        let port = self.first_port.unwrap_or_else(crate::free_port);
        let mut cmd = self.command(port);
        self.add_extra_ports(&mut cmd);
        run_to_exit(&self.name, cmd, &scratch.stderr())
    }

    /// Adds the extra ports' arguments, each on a new free port; the ports.
    fn add_extra_ports(&self, cmd: &mut Command) -> Vec<u16> {
        self.extra_ports
            .iter()
            .map(|args| {
                let port = crate::free_port();
                cmd.args(args(port));
                port
            })
            .collect()
    }

    /// Whether process `pid`, started for `port`, serves: it listens on its
    /// unix socket, or on the TCP port (and holds the UDP port, with UDP).
    fn ready(&self, pid: u32, port: u16) -> bool {
        match &self.unix {
            Some(path) => listens_on_unix(pid, path),
            None => listens_on(pid, port) && (!self.udp || binds_udp(pid, port)),
        }
    }
}
