//! The `osmium` binary: a memcached-compatible cache server. The server
//! is the `osmium_server` library (`src/lib.rs`); this parses the command
//! line, runs the server as this process, and exits with its status.

use osmium_server::cli::{self, Command};

fn main() {
    let code = match cli::parse(std::env::args_os().collect()) {
        Command::Serve(config) => cli::run(config),
        Command::Done(code) => code,
    };
    std::process::exit(code);
}
