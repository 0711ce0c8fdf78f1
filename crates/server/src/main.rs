//! The `osmium` binary: a memcached-compatible cache server.
//!
//! ```text
//!   transport ──▶ session ──▶ parse ──▶ execute ──▶ compose
//!   (TCP, unix,   (framing,   (osmium-   (one       (text, meta,
//!    UDP)          buffers)    protocol)  executor)  binary replies)
//!                                           │
//!                                           ▼
//!                                     osmium-store
//! ```
//!
//! `main` parses memcached's command line (`settings`, with a config
//! file's options), sets up the log (`log`), checks what must be
//! refused at start (`-c` above the open-file limit, root without `-u`,
//! authentication files, TLS certificates, the replication secret, the
//! metrics token),
//! and runs the server (`server`) until a signal or `shutdown` stops it.
//! See `docs/ARCHITECTURE.md` for where each stage lives.

mod auth;
mod buffers;
mod compose;
mod conns;
mod context;
mod daemon;
mod execute;
mod hotkeys;
mod log;
mod logger;
mod metrics;
mod process;
mod reload;
mod replication;
mod server;
mod service;
mod session;
mod settings;
mod stats;
mod tls_context;
mod transport;

use settings::Action;
use transport::listen::ListenFailed;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(done) = service::generate_man(&args) {
        if let Err(msg) = done {
            eprintln!("{msg}");
            std::process::exit(1);
        }
        return;
    }
    let action = match settings::parse(args) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{}", msg.trim_end());
            std::process::exit(settings::exit_code(&msg)); // EX_USAGE mostly, as memcached
        }
    };
    let settings = match action {
        Action::Print(text) => {
            print!("{text}");
            return;
        }
        Action::GenSecret(path) => {
            match osmium_protocol::replication_link::write_new_secret(&path) {
                Ok(()) => println!("wrote a new replication secret to {path} (mode 600)"),
                Err(msg) => {
                    eprintln!("{msg}");
                    std::process::exit(1);
                }
            }
            return;
        }
        Action::Run(s) => *s,
    };
    // Started as root, the log file is opened only once the process is the
    // `-u` user (`server::run`): root never opens a path another user may
    // have put a link at.
    let log_now = !process::running_as_root();
    if let Err(msg) = log::init(settings.logfile.as_deref(), log_now) {
        eprintln!("{msg}");
        std::process::exit(71); // EX_OSERR
    }
    // In memcached's order: the open-file limit, then root without `-u`,
    // then the authentication files; then TLS and the replication secret.
    process::tune_allocator();
    if let Err(msg) = process::raise_file_limit(&settings) {
        eprintln!("{msg}");
        std::process::exit(71); // EX_OSERR, as memcached
    }
    if let Err(msg) = process::refuse_root_without_user(&settings) {
        eprintln!("{msg}");
        std::process::exit(64); // EX_USAGE, as memcached
    }
    let auth = match auth::AuthConfig::load(&settings) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(1); // EXIT_FAILURE, as memcached
        }
    };
    let tls = if settings.tls.enabled {
        match tls_context::TlsContext::new(&settings.tls, settings.verbose > 0) {
            Ok(c) => Some(std::sync::Arc::new(c)),
            Err(msg) => {
                eprintln!("{msg}");
                std::process::exit(64); // EX_USAGE, as memcached's ssl_init
            }
        }
    } else {
        None
    };
    // Replication's secret file: unreadable, empty, open to others or too
    // weak is a usage error (memcached's status for a bad command line).
    let secret = match settings.replication_secret.as_deref() {
        Some(path) => match replication::auth::Secret::load(path, "--replication-secret") {
            Ok(s) => Some(s),
            Err(msg) => {
                eprintln!("{msg}");
                std::process::exit(64); // EX_USAGE
            }
        },
        None => None,
    };
    // The metrics endpoint's token file: the same rules and status.
    let metrics_token = match settings.metrics_token_file.as_deref() {
        Some(path) => match metrics::Token::load(path) {
            Ok(t) => Some(t),
            Err(msg) => {
                eprintln!("{msg}");
                std::process::exit(64); // EX_USAGE
            }
        },
        None => None,
    };
    if let Err(e) = server::run(settings, auth, tls, secret, metrics_token) {
        // A listener's failure is said in memcached's words, naming what
        // could not listen; anything else after `failed to start:`.
        let listen = e.get_ref().and_then(|r| r.downcast_ref::<ListenFailed>());
        let message = match listen {
            Some(failed) => failed.to_string(),
            None => format!("failed to start: {e}"),
        };
        // Under -d the waiting parent prints it and exits with 71 too.
        daemon::report_failure(&message);
        std::process::exit(71); // EX_OSERR
    }
}
