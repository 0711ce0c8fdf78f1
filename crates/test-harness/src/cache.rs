//! The builder of a cache server process, osmium ([`Osmium::new`]) or
//! genuine memcached 1.6.45 ([`Memcached::new`]): both take memcached's
//! flags, so one builder serves both. Defaults: TCP on a free loopback
//! port (`-l 127.0.0.1 -p PORT`), UDP off (`-U 0`), `-u root` when the
//! tests run as root (both refuse root without it); stdin and stdout
//! null, stderr to a file ([`Running::stderr_text`]). [`CacheServer::start`]
//! returns once the process itself listens on its port, started again on
//! another port if that one was taken meanwhile ([`crate::Start`]).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::bins::{memcached_bin, osmium_bin, running_as_root};
use crate::running::{Running, Scratch};
use crate::{listens_on, wait_until, Certs, Start, READY_TIMEOUT};

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

/// How to start one osmium or memcached process (module comment).
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
    extra_listeners: Vec<String>,
    listen: String,
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
            extra_listeners: Vec::new(),
            listen: "127.0.0.1".to_string(),
        }
    }

    /// Runs `bin` instead of the located binary.
    pub fn bin(mut self, bin: impl AsRef<Path>) -> CacheServer {
        self.bin = Some(bin.as_ref().to_path_buf());
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
    pub fn extra_listener(mut self, prefix: &str) -> CacheServer {
        self.extra_listeners.push(prefix.to_string());
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
        let udp = if self.udp { port } else { 0 };
        cmd.args(["-l", &self.listen, "-p", &port.to_string()])
            .args(["-U", &udp.to_string()])
            .args(&self.args);
        if !self.opts.is_empty() {
            cmd.args(["-o", &self.opts.join(",")]);
        }
        for key in &self.env_removed {
            cmd.env_remove(key);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Starts it; returns once it listens (module comment).
    pub fn start(self) -> Running {
        let scratch = Scratch::new(&self.name);
        let log = scratch.stderr();
        let mut start = Start::new(&self.name).log_file(log.clone());
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
        let mut extra_ports = Vec::new();
        let process = start.child(|port| {
            let err = File::create(&log).expect("create the stderr log");
            let mut cmd = self.command(port);
            extra_ports.clear();
            for prefix in &self.extra_listeners {
                let extra = crate::free_port();
                extra_ports.push(extra);
                cmd.args(["-l", &format!("{prefix}127.0.0.1:{extra}")]);
            }
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary().display()))
        });
        let pid = process.pid();
        for &port in &extra_ports {
            wait_until(
                &format!("{} listening on its extra port {port}", self.name),
                READY_TIMEOUT,
                || listens_on(pid, port),
            );
        }
        let mut running = Running::new(process, scratch);
        running.extra_ports = extra_ports;
        running
    }
}
