//! Running under a service manager: systemd's `Type=notify` protocol
//! (`READY=1` once the listeners accept, `RELOADING=1` with
//! `MONOTONIC_USEC=` then `READY=1` around a SIGHUP reload, `STOPPING=1`
//! at a stop; nothing when `NOTIFY_SOCKET` is unset; with it set, `-d`
//! stays in the foreground, so that the process systemd started is the
//! one that tells it), and the man page
//! written from the command line's definition (`--generate-man DIR`, a
//! packaging step: not listed by `-h`).

use sd_notify::NotifyState;

/// Whether a service manager listens for notifications (`NOTIFY_SOCKET`):
/// then `-d` does not fork (see `server::run`).
pub fn manager_is_notified() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty())
}

fn notify(states: &[NotifyState<'_>]) {
    // A service manager that cannot be told is no reason to stop serving.
    let _ = sd_notify::notify(false, states);
}

/// The listeners accept.
pub fn ready() {
    notify(&[NotifyState::Ready]);
}

/// A SIGHUP reload starts (systemd 253 and later want the time with it).
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => notify(&[NotifyState::Reloading, now]),
        Err(_) => notify(&[NotifyState::Reloading]),
    }
}

/// The server stops.
pub fn stopping() {
    notify(&[NotifyState::Stopping]);
}

/// `osmium --generate-man DIR`: writes DIR/osmium.1; None when the
/// command line is not that.
pub fn generate_man(args: &[std::ffi::OsString]) -> Option<Result<(), String>> {
    if args.get(1).and_then(|a| a.to_str()) != Some("--generate-man") {
        return None;
    }
    let Some(dir) = args.get(2) else {
        return Some(Err("--generate-man needs a directory".into()));
    };
    use clap::CommandFactory;
    let cmd = crate::settings::Cli::command()
        .version(crate::settings::OSMIUM_VERSION)
        .about("a memcached-compatible cache server")
        .after_long_help(format!(
            "{}\n\nVersion: {}.",
            crate::settings::EXTENDED_HELP.trim_end(),
            crate::settings::version_line()
        ))
        .long_about(
            "osmium is a memcached-compatible cache server: it speaks memcached's text, meta \
             and binary protocols and takes memcached's command line. Options may also be read \
             from a file in memcached.conf's format (--config-file).",
        );
    let path = std::path::Path::new(dir).join("osmium.1");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&path)?;
        clap_mangen::Man::new(cmd).render(&mut f)
    };
    Some(write().map_err(|e| format!("{}: {e}", path.display())))
}
