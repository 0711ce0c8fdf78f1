//! `osmium-tool --generate-man DIR` (a packaging step, not in `-h`):
//! writes DIR/osmium-tool.1. The verbs take memcached-tool's hand-parsed
//! command line, so the page's command is described here (the same words
//! as `USAGE`), with `top`'s and `upgrade`'s clap options as their
//! subcommands, then the files, signals, exit status and examples.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Arg, CommandFactory};

/// None when the command line is not `--generate-man DIR`.
pub(crate) fn generate(args: &[String]) -> Option<ExitCode> {
    if args.first().map(String::as_str) != Some("--generate-man") {
        return None;
    }
    let Some(dir) = args.get(1).filter(|_| args.len() == 2) else {
        eprintln!("osmium-tool: --generate-man needs a directory");
        return Some(ExitCode::FAILURE);
    };
    let path = PathBuf::from(dir).join("osmium-tool.1");
    let man = clap_mangen::Man::new(command());
    let written = std::fs::File::create(&path).and_then(|mut f| {
        man.render_title(&mut f)?;
        man.render_name_section(&mut f)?;
        man.render_synopsis_section(&mut f)?;
        man.render_description_section(&mut f)?;
        man.render_options_section(&mut f)?;
        top_section(&mut f)?;
        upgrade_section(&mut f)?;
        std::io::Write::write_all(&mut f, SECTIONS.as_bytes())?;
        man.render_version_section(&mut f)
    });
    Some(match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osmium-tool: {}: {e}", path.display());
            ExitCode::FAILURE
        }
    })
}

/// osmium-tool's command line as the man page shows it.
fn command() -> clap::Command {
    clap::Command::new("osmium-tool")
        .version(env!("CARGO_PKG_VERSION"))
        .about("memcached-tool's verbs and a live top for osmium and memcached servers")
        .long_about(
            "osmium-tool reads a server's stats as memcached-tool does, with its output \
             formats, from osmium or memcached alike: display (the slab classes, the \
             default), stats, settings, sizes, dump [limit] (keys and values, as add \
             commands), keys [-u] [limit] (keys; -u unescapes them) and hotkeys [limit] \
             (osmium's stats hotkeys). The mode may also come before the server. \
             top shows one server, several, or every server of a nutcracker or \
             osmium-proxy YAML, live (q, Esc or Ctrl-C quits; arrows select), or once \
             with --once, as JSON with --json. upgrade upgrades a local osmium's binary \
             in place (SIGUSR2) and waits for the outcome.",
        )
        .arg(
            Arg::new("server")
                .value_name("host[:port] | /path/to/socket")
                .help("The server: TCP (port 11211 by default) or a unix socket"),
        )
        .arg(
            Arg::new("mode")
                .value_parser([
                    "display", "stats", "settings", "sizes", "dump", "keys", "hotkeys",
                ])
                .help("What to print (default: display)"),
        )
        .arg(
            Arg::new("limit")
                .value_name("limit")
                .help("dump, keys, hotkeys: at most this many"),
        )
}

/// A subcommand's options as clap renders them, under its own heading
/// (not a second OPTIONS section).
fn options_of(command: clap::Command) -> std::io::Result<String> {
    let mut options = Vec::new();
    clap_mangen::Man::new(command).render_options_section(&mut options)?;
    Ok(String::from_utf8_lossy(&options).replacen(".SH OPTIONS\n", "", 1))
}

/// `top`: its synopsis, then its options as clap renders them.
fn top_section(w: &mut dyn std::io::Write) -> std::io::Result<()> {
    w.write_all(TOP.as_bytes())?;
    w.write_all(options_of(crate::TopArgs::command())?.as_bytes())
}

/// `upgrade`: its synopsis and what it does, then its options.
fn upgrade_section(w: &mut dyn std::io::Write) -> std::io::Result<()> {
    w.write_all(UPGRADE.as_bytes())?;
    w.write_all(options_of(crate::upgrade::UpgradeArgs::command())?.as_bytes())
}

/// The head of the UPGRADE section, in roff.
const UPGRADE: &str = r#".SH UPGRADE
\fBosmium\-tool upgrade\fR \fIhost\fR[:\fIport\fR] | \fI/path\fR | \fIPID\fR [\fB\-\-addr\fR \fIADDR\fR] [\fB\-\-timeout\fR \fISECS\fR]
.PP
Upgrades a local osmium's binary in place: reads its \fBstats\fR (\fBpid\fR, \fBupgrades\fR, \fBupgrade_failures\fR, \fBosmium_version\fR), sends SIGUSR2 to its pid, then reads them again until \fBupgrades\fR or \fBupgrade_failures\fR grows, and prints the outcome: the old and new versions, the pid (the same) and the time taken, or the reason of a refusal (\fBstats upgrade\fR's \fBlast_failure\fR), after which the old binary serves on unchanged. Given a PID (digits alone), it finds the server's listening sockets in \fI/proc/PID/fd\fR and \fI/proc/PID/net\fR (root, or the server's user, may read them; a unix socket is reached through \fI/proc/PID/root\fR), unless \fB\-\-addr\fR names it. Given an address, the pid it reports must be a process of this host that listens there. It is the unit's \fBExecReload\fR: \fBsystemctl reload osmium\fR.
.PP
"#;

/// The head of the TOP section, in roff.
const TOP: &str = r#".SH TOP
\fBosmium\-tool top\fR [\fIhost\fR[:\fIport\fR] | \fI/path\fR ...] [\fB\-\-pool\fR \fIFILE.yml\fR [\fB\-\-pool\-name\fR \fINAME\fR]] [\fB\-\-interval\fR \fISECS\fR] [\fB\-\-once\fR] [\fB\-\-json\fR]
.PP
A live view of the servers, redrawn every interval; q, Esc or Ctrl\-C quits, the arrows, Tab and j/k select a server.
.PP
"#;

/// FILES, SIGNALS, EXIT STATUS, EXAMPLES and SEE ALSO, in roff.
const SECTIONS: &str = r#".SH FILES
.TP
\fIFILE.yml\fR of \fBtop \-\-pool\fR
A nutcracker (twemproxy) or osmium\-proxy configuration: top shows its servers (every pool's, or \fB\-\-pool\-name\fR's). osmium\-tool writes no file.
.SH SIGNALS
.TP
\fBSIGINT\fR, \fBSIGTERM\fR
End it at once. Under top, whose screen reads Ctrl\-C as a key that quits as \fBq\fR does and gives the terminal back, a signal leaves the terminal in top's mode (\fBreset\fR(1) restores it).
.TP
\fBSIGPIPE\fR
Ignored: a reader that goes away ends \fBdump\fR or \fBkeys\fR quietly, status 0.
.SH EXIT STATUS
0: done (for upgrade: the upgrade was done). 1: an error (for upgrade: it was refused or failed, or the server stopped). 2 (upgrade): nothing was sent (a bad argument, no server, one that does not upgrade in place or is not a process here, SIGUSR2 not allowed). 3 (upgrade): no outcome within \fB\-\-timeout\fR.
.SH EXAMPLES
.TP
\fBosmium\-tool 127.0.0.1:11211\fR
The slab classes (\fBdisplay\fR), as memcached\-tool prints them.
.TP
\fBosmium\-tool 127.0.0.1:11211 dump 1000 > dump.txt\fR
1,000 items as the add commands that store them again, to be sent to another server.
.TP
\fBosmium\-tool top \-\-pool /etc/osmium/proxy.yml\fR
A live view of the pool's servers.
.TP
\fBosmium\-tool top 127.0.0.1:11211 \-\-once \-\-json\fR
One sample, one second apart, as JSON.
.TP
\fBosmium\-tool upgrade $(cat /run/osmium/osmium.pid)\fR
After the package put a new /usr/bin/osmium: the running server upgraded to it in place (as root).
.SH SEE ALSO
\fBosmium\fR(1), \fBosmium\-proxy\fR(1), \fBmemcached\fR(1)
"#;
