//! The `osmium` binary's command line (`src/main.rs` is only its `main`):
//! what parsing it came to ([`Command`]: a server to run, or done with an
//! exit status), and running that server as the process
//! ([`run`]); `--upgrade-check`, a binary upgrade's check of this binary,
//! and [`resume_upgrade`], this binary started by one. The exit statuses are memcached's: 64 (`EX_USAGE`) for
//! most refusals, 71 (`EX_OSERR`) when the server cannot start, 1 for a
//! few, as memcached.

use crate::embedded::Config;
use crate::process::Host;
use crate::settings::{self, Action};
use crate::{daemon, launch, service};

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run a server with these settings.
    Serve(Config),
    /// Nothing more to do: exit with this status (`-h` and `-V` printed,
    /// `--generate-man` and `--gen-secret` done, or a refused command
    /// line said on stderr).
    Done(i32),
}

/// Parses the command line `args` (the program's name first): memcached's
/// options, a config file's, and osmium's own. What only prints or
/// writes a file is done here.
pub fn parse(args: Vec<std::ffi::OsString>) -> Command {
    // A binary upgrade's check of this binary, before anything else: the
    // command line to take over comes on stdin. The files it names (TLS
    // certificates and key, authentication, secrets) are read too, as
    // the user the server runs as: one this image could not read at its
    // start (say a key only root reads, the server having dropped to
    // `-u`) refuses the upgrade here, before anything stops, rather than
    // in the new image, whose hand-back to the old one would read it
    // again and fail the same way.
    if args.get(1).is_some_and(|a| a == osmium_upgrade::CHECK_FLAG) {
        return Command::Done(osmium_upgrade::answer_check(
            settings::OSMIUM_VERSION,
            &[
                osmium_upgrade::TAKES_MEMORY,
                osmium_upgrade::TAKES_CONNS,
                osmium_upgrade::TAKES_FLASH,
            ],
            |expanded| {
                let settings = crate::upgrade::adopt::parse_settings(&expanded)?;
                launch::load(&settings).map(|_| ()).map_err(|r| r.message)
            },
        ));
    }
    if let Some(done) = service::generate_man(&args) {
        if let Err(msg) = done {
            eprintln!("{msg}");
            return Command::Done(1);
        }
        return Command::Done(0);
    }
    let action = match settings::parse(args) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{}", msg.trim_end());
            return Command::Done(settings::exit_code(&msg)); // EX_USAGE mostly, as memcached
        }
    };
    match action {
        Action::Print(text) => {
            print!("{text}");
            Command::Done(0)
        }
        Action::GenSecret(path) => {
            match osmium_protocol::replication_link::write_new_secret(&path) {
                Ok(()) => println!("wrote a new replication secret to {path} (mode 600)"),
                Err(msg) => {
                    eprintln!("{msg}");
                    return Command::Done(1);
                }
            }
            Command::Done(0)
        }
        Action::Run(s) => Command::Serve(Config(s)),
    }
}

/// Runs the server as this process (its signals, `-d`, `-u`, the log)
/// until a signal or `shutdown` stops it; returns the exit status: 0
/// after a stop, else that of the refused or failed start, said on
/// stderr (under `-d`, by the waiting parent).
pub fn run(config: Config) -> i32 {
    crate::upgrade::check::note_start(None, None);
    let started = match launch::start(*config.0, Host::Process) {
        Ok(s) => s,
        Err(refused) => {
            daemon::report_failure(&refused.message);
            return refused.exit_code;
        }
    };
    crate::upgrade::serve::serve_to_exit(started)
}

/// When this image was started by a binary upgrade's exec
/// (`OSMIUM_UPGRADE_FD`): runs the server it takes over (or, when the new
/// image handed it back, serves on) until a stop; its exit status. None:
/// an ordinary start. To call first in `main`, before any thread.
pub fn resume_upgrade() -> Option<i32> {
    osmium_upgrade::take_env().map(crate::upgrade::resume::resume)
}
