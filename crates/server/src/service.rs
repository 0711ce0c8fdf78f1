//! Running under a service manager: systemd's `Type=notify` protocol
//! (`READY=1` once the listeners accept, `RELOADING=1` with
//! `MONOTONIC_USEC=` then `READY=1` around a SIGHUP reload and around a
//! binary upgrade (SIGUSR2: `READY=1` from the new image once it serves,
//! or from the old one after a refusal; never `STOPPING=1`, and the PID
//! stays the main one), `STOPPING=1` at a stop; nothing when
//! `NOTIFY_SOCKET` is unset; with it set, `-d`
//! stays in the foreground, so that the process systemd started is the
//! one that tells it), and the man page
//! written from the command line's definition (`--generate-man DIR`, a
//! packaging step: not listed by `-h`).

use sd_notify::NotifyState;

/// Whether a service manager listens for notifications (`NOTIFY_SOCKET`):
/// then `-d` does not fork (see `server::run`).
pub(crate) fn manager_is_notified() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some_and(|s| !s.is_empty())
}

fn notify(states: &[NotifyState<'_>]) {
    // A service manager that cannot be told is no reason to stop serving.
    let _ = sd_notify::notify(false, states);
}

/// The listeners accept.
pub(crate) fn ready() {
    notify(&[NotifyState::Ready]);
}

/// A SIGHUP reload or a binary upgrade starts (systemd 253 and later want
/// the time with it).
pub(crate) fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => notify(&[NotifyState::Reloading, now]),
        Err(_) => notify(&[NotifyState::Reloading]),
    }
}

/// The server stops.
pub(crate) fn stopping() {
    notify(&[NotifyState::Stopping]);
}

/// `osmium --generate-man DIR`: writes DIR/osmium.1; None when the
/// command line is not that.
pub(crate) fn generate_man(args: &[std::ffi::OsString]) -> Option<Result<(), String>> {
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
        render_man(&clap_mangen::Man::new(cmd), &mut f)
    };
    Some(write().map_err(|e| format!("{}: {e}", path.display())))
}

/// The man page: clap's sections, then what `-h` cannot say (the files,
/// the signals, examples), then the version.
fn render_man(man: &clap_mangen::Man, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    man.render_extra_section(w)?;
    w.write_all(MAN_SECTIONS.as_bytes())?;
    man.render_version_section(w)
}

/// FILES, SIGNALS, EXAMPLES and SEE ALSO, in roff.
const MAN_SECTIONS: &str = r#".SH FILES
.TP
\fI/etc/osmium/osmium.conf\fR
The Debian package's options, in the format of Debian's memcached.conf (one option per line, \fB#\fR comments, \fBlogfile\fR \fIPATH\fR), read by \fB\-\-config\-file\fR and again at SIGHUP.
.TP
\fI/lib/systemd/system/osmium.service\fR
The unit (\fBType=notify\fR: \fBREADY=1\fR once the listeners accept; \fB\-d\fR is ignored under it).
.TP
\fI/run/osmium/osmium.pid\fR
The package's \fB\-P\fR pid file, written as the \fB\-u\fR user once the server listens, removed at a stop.
.TP
\fI/var/lib/osmium\fR
Where the package lets the server write its \fB\-e\fR memory file and \fB\-o ext_path=\fR flash files.
.TP
\fI/var/log/osmium\fR
For a config file's \fBlogfile\fR (without one, the log goes to stderr: the journal).
.SH SIGNALS
.TP
\fBSIGTERM\fR, \fBSIGINT\fR
Stop (exit 0). With \fB\-e\fR the memory file is written out and the next start takes the cache over.
.TP
\fBSIGUSR1\fR
Stop gracefully ("Gracefully stopping"), exit 0; the memory file kept as above.
.TP
\fBSIGHUP\fR
Reload the TLS certificates (\fB\-Z\fR) and read \fB\-\-config\-file\fR again: \fB\-\-replicate\-to\fR and \fB\-\-replication\fR are applied, other changed options named in a warning and left as they were.
.TP
\fBSIGUSR2\fR
Upgrade the binary in place: the file the server was started from is checked, then run in the same process, the cache, the listening sockets and plain client connections kept; a refused upgrade changes nothing (\fBupgrade refused: \fR\fIPATH\fR\fB: \fR\fIWHY\fR in the log). \fBosmium\-tool upgrade\fR sends it and waits for the outcome (the unit's \fBsystemctl reload\fR). \fBstats upgrade\fR says how many upgrades were done and failed, and why the last one failed.
.SH EXAMPLES
.TP
\fBosmium \-m 1024 \-u osmium\fR
1 GiB of items on 127.0.0.1:11211, as the user osmium when started as root.
.TP
\fBosmium \-\-config\-file /etc/osmium/osmium.conf \-p 11311\fR
The options of the file, then a port of its own (later options win).
.TP
\fBosmium \-m 4096 \-e /dev/shm/osmium.mem\fR
A cache that outlives a restart of the server.
.TP
\fBosmium \-m 1024 \-o ext_path=/mnt/nvme/osmium\-flash:200G\fR
Items that do not fit in memory go to a flash file.
.TP
\fBosmium\-tool 127.0.0.1:11211 stats\fR
The server's counters, as memcached\-tool prints them.
.SH SEE ALSO
\fBosmium\-proxy\fR(1), \fBosmium\-tool\fR(1), \fBosmium\-bench\fR(1), \fBmemcached\fR(1)
"#;
