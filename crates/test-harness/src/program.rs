//! The builder of any other process that listens on a loopback TCP port
//! named on its command line ([`Program::new`]: a stand-in server, a
//! benchmark's floor server): its arguments made for the port the start
//! picks, stdin and stdout null, stderr to a file
//! ([`Running::stderr_text`]), optionally pinned to one CPU. Started and
//! stopped as the cache servers are ([`crate::Start`]): a port taken
//! meanwhile is retried on another, the start proven by the process
//! listening.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::cpus::pin_command;
use crate::running::{Running, Scratch};
use crate::{listens_on, Start};

/// How to start one process that listens where its arguments say
/// (module comment).
pub struct Program {
    name: String,
    bin: PathBuf,
    args: Box<dyn Fn(u16) -> Vec<OsString>>,
    cpu: Option<usize>,
}

impl Program {
    /// A builder of `bin`, started as `name`, with the arguments
    /// `args(port)` for the port it is to listen on.
    pub fn new<S: Into<OsString>>(
        name: &str,
        bin: impl AsRef<Path>,
        args: impl Fn(u16) -> Vec<S> + 'static,
    ) -> Program {
        Program {
            name: name.to_string(),
            bin: bin.as_ref().to_path_buf(),
            args: Box::new(move |port| args(port).into_iter().map(Into::into).collect()),
            cpu: None,
        }
    }

    /// The process, and every thread it starts, runs on CPU `cpu` only
    /// ([`crate::CacheServer::cpu`]).
    pub fn cpu(mut self, cpu: usize) -> Program {
        self.cpu = Some(cpu);
        self
    }

    /// Starts it; returns once it listens on its port. Panics if it does
    /// not start, saying why.
    pub fn start(self) -> Running {
        self.try_start().unwrap_or_else(|why| panic!("{why}"))
    }

    /// [`Program::start`] that says why it could not start instead of
    /// panicking.
    pub fn try_start(self) -> Result<Running, String> {
        let scratch = Scratch::new(&self.name);
        let log = scratch.stderr();
        let process = Start::new(&self.name)
            .log_file(log.clone())
            .try_child_ready(
                |port| {
                    let err =
                        File::create(&log).map_err(|e| format!("create the stderr log: {e}"))?;
                    let mut cmd = Command::new(&self.bin);
                    cmd.args((self.args)(port));
                    if let Some(cpu) = self.cpu {
                        pin_command(&mut cmd, cpu);
                    }
                    cmd.stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(err)
                        .spawn()
                        .map_err(|e| format!("cannot run {}: {e}", self.bin.display()))
                },
                |child, port| listens_on(child.id(), port),
            )?;
        Ok(Running::new(process, scratch))
    }
}
