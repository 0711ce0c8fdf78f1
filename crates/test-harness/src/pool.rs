//! The builder of a proxy process configured by nutcracker's YAML:
//! osmium-proxy ([`Proxy::new`]) or nutcracker itself
//! ([`Nutcracker::new`]). The YAML is written to the server's scratch
//! directory ([`Running::config_path`]); the process runs with
//! `-c FILE -a 127.0.0.1 -s STATS` (a free stats port,
//! [`Running::stats_port`]), nutcracker also with `-o LOG`, where it says
//! why it could not start; the start returns once it listens on both
//! ports. The YAML names the listen port; when that port or the stats
//! port was taken meanwhile, the process starts again on new ones, its
//! `listen:` line moved ([`listen_moved`]), unless the port is the point
//! ([`PoolProxy::only_port`]).

use std::cell::Cell;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::bins::{nutcracker_bin, proxy_bin};
use crate::exited::{run_to_exit, Exited};
use crate::running::{Running, Scratch};
use crate::Start;

/// osmium-proxy, the nutcracker drop-in of this workspace.
pub struct Proxy;

impl Proxy {
    /// A builder of osmium-proxy serving `yaml`, whose `listen:` line
    /// names 127.0.0.1:`port` (`OSMIUM_PROXY_BIN`, else the
    /// `osmium-proxy` beside the test binary; [`PoolProxy::bin`] to name
    /// another).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(yaml: &str, port: u16) -> PoolProxy {
        PoolProxy::new("osmium-proxy", None, yaml, port)
    }
}

/// nutcracker (twemproxy), the reference the proxy is a drop-in for.
pub struct Nutcracker;

impl Nutcracker {
    /// A builder of nutcracker serving `yaml` on `port` ([`Proxy::new`]);
    /// panics when nutcracker is not installed ([`Nutcracker::found`] to
    /// skip instead).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(yaml: &str, port: u16) -> PoolProxy {
        Nutcracker::found(yaml, port).expect("nutcracker (apt-get install -y nutcracker)")
    }

    /// [`Nutcracker::new`], or `None` (after a SKIP line) when nutcracker
    /// is not installed ([`crate::nutcracker_bin`]).
    pub fn found(yaml: &str, port: u16) -> Option<PoolProxy> {
        nutcracker_bin().map(|bin| Nutcracker::at(bin, yaml, port))
    }

    /// A builder of the nutcracker at `bin` serving `yaml` on `port`.
    pub fn at(bin: impl AsRef<Path>, yaml: &str, port: u16) -> PoolProxy {
        PoolProxy::new("nutcracker", Some(bin.as_ref().to_path_buf()), yaml, port)
    }
}

/// How to start one osmium-proxy or nutcracker process (module comment).
pub struct PoolProxy {
    name: String,
    bin: Option<PathBuf>,
    yaml: String,
    port: u16,
    only_port: bool,
    args: Vec<OsString>,
}

impl PoolProxy {
    fn new(name: &str, bin: Option<PathBuf>, yaml: &str, port: u16) -> PoolProxy {
        PoolProxy {
            name: name.to_string(),
            bin,
            yaml: yaml.to_string(),
            port,
            only_port: false,
            args: Vec::new(),
        }
    }

    /// Every attempt listens on the port its YAML names, none moves it (a
    /// restart, where the port clients know is the point).
    pub fn only_port(mut self) -> PoolProxy {
        self.only_port = true;
        self
    }

    /// Runs `bin` instead of the located binary.
    pub fn bin(mut self, bin: impl AsRef<Path>) -> PoolProxy {
        self.bin = Some(bin.as_ref().to_path_buf());
        self
    }

    /// More arguments, after the defaults.
    pub fn args<I, S>(mut self, args: I) -> PoolProxy
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    fn binary(&self) -> PathBuf {
        self.bin.clone().unwrap_or_else(proxy_bin)
    }

    /// Runs a start that must fail (a configuration it refuses, a port in
    /// use) until the process exits: its status and stderr. Panics, after
    /// killing it, if it still runs after [`crate::EXIT_TIMEOUT`].
    pub fn run_to_exit(self) -> Exited {
        let scratch = Scratch::new(&self.name);
        let config = scratch.path("config.yml");
        std::fs::write(&config, &self.yaml).expect("write the proxy's configuration");
        let mut cmd = Command::new(self.binary());
        cmd.arg("-c")
            .arg(&config)
            .args(["-a", "127.0.0.1", "-s", &crate::free_port().to_string()]);
        cmd.args(&self.args);
        run_to_exit(&self.name, cmd, &scratch.stderr())
    }

    /// Starts it; returns once it listens on its port (module comment).
    /// Panics if it does not start, saying why.
    pub fn start(self) -> Running {
        self.try_start().unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`PoolProxy::start`] that says why it could not start instead of
    /// panicking.
    pub fn try_start(self) -> Result<Running, String> {
        let scratch = Scratch::new(&self.name);
        let log = scratch.stderr();
        let nutcracker_log = scratch.path("nutcracker.log");
        let config = scratch.path("config.yml");
        let nutcracker = self.name == "nutcracker";
        let mut start = Start::new(&self.name).log_file(log.clone());
        start = if self.only_port {
            start.only_port(self.port)
        } else {
            start.port(self.port)
        };
        if nutcracker {
            start = start.log_file(nutcracker_log.clone());
        }
        let stats = Cell::new(0);
        let process = start.try_child_ready(
            |port| {
                std::fs::write(&config, listen_moved(&self.yaml, self.port, port))
                    .map_err(|e| format!("write the proxy's configuration: {e}"))?;
                stats.set(crate::free_port());
                let mut cmd = Command::new(self.binary());
                cmd.arg("-c").arg(&config).args([
                    "-a",
                    "127.0.0.1",
                    "-s",
                    &stats.get().to_string(),
                ]);
                if nutcracker {
                    cmd.arg("-o").arg(&nutcracker_log);
                }
                let err = File::create(&log).map_err(|e| format!("create the stderr log: {e}"))?;
                cmd.args(&self.args)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(err)
                    .spawn()
                    .map_err(|e| format!("cannot run {}: {e}", self.binary().display()))
            },
            |child, port| {
                crate::listens_on(child.id(), port) && crate::listens_on(child.id(), stats.get())
            },
        )?;
        let mut running = Running::new(process, scratch);
        running.stats = Some(stats.get());
        running.config = Some(config);
        Ok(running)
    }
}

/// `yaml` with every `listen: 127.0.0.1:from` line moved to port `to`,
/// nothing else changed (a server that happens to be on `from` keeps it).
pub fn listen_moved(yaml: &str, from: u16, to: u16) -> String {
    if from == to {
        return yaml.to_string();
    }
    let old = format!("127.0.0.1:{from}");
    yaml.split_inclusive('\n')
        .map(|line| {
            let value = line.trim_start().strip_prefix("listen:").map(str::trim);
            if value.is_some_and(|v| v.trim_matches(|c| c == '"' || c == '\'') == old) {
                line.replacen(&old, &format!("127.0.0.1:{to}"), 1)
            } else {
                line.to_string()
            }
        })
        .collect()
}
