//! The `osmium` binary: a memcached-compatible cache server. The server
//! is the `osmium_server` library (`src/lib.rs`); this parses the command
//! line, runs the server as this process (or, started by a binary
//! upgrade, the server the old image handed over), and exits with its
//! status.

use osmium_server::cli::{self, Command};

fn main() {
    // First, before any thread: an image started by a binary upgrade
    // takes the old image's state over.
    let code = match cli::resume_upgrade() {
        Some(code) => code,
        None => match cli::parse(std::env::args_os().collect()) {
            Command::Serve(config) => cli::run(config),
            Command::Done(code) => code,
        },
    };
    std::process::exit(code);
}
