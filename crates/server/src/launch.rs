//! The one way a server starts, for the `osmium` binary and an in-process
//! server alike: the checks memcached makes before it opens anything, in
//! its order (the open-file limit `-c` needs, root without `-u`, the
//! authentication files; then osmium's TLS certificates, replication
//! secret and metrics token), then `server::start`. A refusal carries the
//! message and the exit status the binary gives it.
//!
//! What a [`Host`] may touch decides the rest: the binary also sets up the
//! log and the allocator; an in-process server first refuses the options
//! that would act on the whole process ([`refuse_process_options`]).

use std::sync::Arc;

use crate::process::{self, Host};
use crate::server::{self, Started};
use crate::settings::Settings;
use crate::transport::listen::ListenFailed;

/// A start that did not happen: what to say, the binary's exit status,
/// and what kind of error it is (`InvalidInput` for a refused option or
/// file; a failed bind's own kind, `AddrInUse` say).
#[derive(Debug)]
pub(crate) struct Refused {
    pub message: String,
    pub exit_code: i32,
    pub kind: std::io::ErrorKind,
}

impl Refused {
    fn new(message: impl Into<String>, exit_code: i32) -> Refused {
        Refused {
            message: message.into(),
            exit_code,
            kind: std::io::ErrorKind::InvalidInput,
        }
    }
}

/// Checks, prepares and starts a server as `host` allows; it serves once
/// the acceptor runs (`Started::serve`).
pub(crate) fn start(settings: Settings, host: Host) -> Result<Started, Refused> {
    match host {
        Host::Process => {
            // Started as root, the log file is opened only once the
            // process is the `-u` user (`server::start`): root never
            // opens a path another user may have put a link at.
            let log_now = !process::running_as_root();
            crate::log::init(settings.logfile.as_deref(), log_now)
                .map_err(|msg| Refused::new(msg, 71))?; // EX_OSERR
            process::tune_allocator();
        }
        Host::Embedded => refuse_process_options(&settings)?,
    }
    // In memcached's order: the open-file limit, then root without `-u`,
    // then the authentication files; then TLS and the replication secret.
    process::raise_file_limit(&settings).map_err(|msg| Refused::new(msg, 71))?; // EX_OSERR, as memcached
    if host == Host::Process {
        process::refuse_root_without_user(&settings).map_err(|msg| Refused::new(msg, 64))?;
        // EX_USAGE, as memcached
    }
    let files = load(&settings)?;
    server::start(
        settings,
        files.auth,
        files.tls,
        files.secret,
        files.metrics_token,
        host,
        server::HandedOver::default(),
    )
    .map_err(|e| refused_start(&e))
}

/// What a start reads from files named by the settings before anything
/// opens: the authentication files, the TLS certificates, the
/// replication secret, the metrics token.
pub(crate) struct Loaded {
    pub auth: crate::auth::AuthConfig,
    pub tls: Option<Arc<crate::tls_context::TlsContext>>,
    pub secret: Option<crate::replication::auth::Secret>,
    pub metrics_token: Option<crate::metrics::Token>,
}

/// Reads the files the settings name, in memcached's order (the
/// authentication files), then osmium's (TLS, the replication secret,
/// the metrics token); a refusal carries the binary's status.
pub(crate) fn load(settings: &Settings) -> Result<Loaded, Refused> {
    // EXIT_FAILURE, as memcached.
    let auth = crate::auth::AuthConfig::load(settings).map_err(|msg| Refused::new(msg, 1))?;
    let tls = if settings.tls.enabled {
        let context = crate::tls_context::TlsContext::new(&settings.tls, settings.verbose > 0)
            .map_err(|msg| Refused::new(msg, 64))?; // EX_USAGE, as memcached's ssl_init
        Some(Arc::new(context))
    } else {
        None
    };
    // Replication's secret file: unreadable, empty, open to others or too
    // weak is a usage error (memcached's status for a bad command line).
    let secret = match settings.replication_secret.as_deref() {
        Some(path) => Some(
            crate::replication::auth::Secret::load(path, "--replication-secret")
                .map_err(|msg| Refused::new(msg, 64))?, // EX_USAGE
        ),
        None => None,
    };
    // The metrics endpoint's token file: the same rules and status.
    let metrics_token = match settings.metrics_token_file.as_deref() {
        Some(path) => Some(crate::metrics::Token::load(path).map_err(|msg| Refused::new(msg, 64))?),
        None => None,
    };
    Ok(Loaded {
        auth,
        tls,
        secret,
        metrics_token,
    })
}

/// A failed `server::start` as a refusal: a listener's failure is said
/// in memcached's words, naming what could not listen; anything else
/// after `failed to start:`.
pub(crate) fn refused_start(e: &std::io::Error) -> Refused {
    let no_user = e.get_ref().is_some_and(|r| r.is::<process::NoSuchUser>());
    Refused {
        message: failure_message(e),
        // EX_NOUSER for a `-u` that names no user, EX_OSERR else.
        exit_code: if no_user { 67 } else { 71 },
        kind: e.kind(),
    }
}

/// How the binary words a failed start or a failed acceptor.
pub(crate) fn failure_message(e: &std::io::Error) -> String {
    let listen = e.get_ref().and_then(|r| r.downcast_ref::<ListenFailed>());
    let no_user = e
        .get_ref()
        .and_then(|r| r.downcast_ref::<process::NoSuchUser>());
    match (listen, no_user) {
        (Some(failed), _) => failed.to_string(),
        (_, Some(no_user)) => no_user.to_string(),
        _ => format!("failed to start: {e}"),
    }
}

/// The options an in-process server refuses: each acts on the whole
/// process, which is not the server's (`-d` forks it, `-u` changes its
/// user, `-k` locks all its memory, `-r` its core size, a config file's
/// `logfile` takes its stderr, and `-s` makes its socket file under a
/// process-wide umask that other threads' files would get too).
fn refuse_process_options(settings: &Settings) -> Result<(), Refused> {
    let refused = [
        (settings.daemon, "-d"),
        (settings.user.is_some(), "-u"),
        (settings.lock_memory, "-k"),
        (settings.coredumps, "-r"),
        (settings.logfile.is_some(), "logfile"),
        (settings.unix_socket.is_some(), "-s"),
    ];
    match refused.iter().find(|(given, _)| *given) {
        Some((_, option)) => Err(Refused::new(
            format!("{option} acts on the whole process: not for an in-process server"),
            64, // EX_USAGE
        )),
        None => Ok(()),
    }
}
