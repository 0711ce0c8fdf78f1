//! `osmium-bench --generate-man DIR` (a packaging step, not in `-h`):
//! writes DIR/osmium-bench.1 from the clap definition, with the files it
//! reads and writes, the signals it answers and examples.

use std::path::PathBuf;
use std::process::ExitCode;

/// None when the command line is not `--generate-man DIR`.
pub(crate) fn generate<C: clap::CommandFactory>() -> Option<ExitCode> {
    let argv: Vec<_> = std::env::args_os().collect();
    if argv.len() != 3 || argv[1] != "--generate-man" {
        return None;
    }
    let path = PathBuf::from(&argv[2]).join("osmium-bench.1");
    let man = clap_mangen::Man::new(C::command());
    let written = std::fs::File::create(&path).and_then(|mut f| {
        man.render_title(&mut f)?;
        man.render_name_section(&mut f)?;
        man.render_synopsis_section(&mut f)?;
        man.render_description_section(&mut f)?;
        man.render_options_section(&mut f)?;
        std::io::Write::write_all(&mut f, commands(&C::command()).as_bytes())?;
        std::io::Write::write_all(&mut f, SECTIONS.as_bytes())
    });
    Some(match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osmium-bench: {}: {e}", path.display());
            ExitCode::from(2)
        }
    })
}

/// The COMMANDS section: each subcommand and what it measures (its own
/// options: `osmium-bench <command> -h`). clap_mangen's would name a
/// page per subcommand, which the package does not ship.
fn commands(cmd: &clap::Command) -> String {
    let mut out = String::from(
        ".SH COMMANDS\nEach command's options: \\fBosmium\\-bench\\fR \\fIcommand\\fR \\fB\\-h\\fR.\n",
    );
    for sub in cmd.get_subcommands() {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            roff_text(sub.get_name()),
            roff_text(&about)
        ));
    }
    out
}

/// Text as roff shows it literally: backslashes and hyphens escaped, no
/// line starting with a request's `.` or `'`.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

/// FILES, SIGNALS, EXAMPLES and SEE ALSO, in roff.
const SECTIONS: &str = r#".SH FILES
.TP
\fIosmium\fR, \fImemcached\fR
The servers it starts: \fB\-\-osmium\fR (default: osmium beside this executable), \fB\-\-memcached\fR (default: the repository's oracle build, else \fI/usr/bin/memcached\fR). They listen on 127.0.0.1 only.
.TP
\fIDIR\fR of \fB\-\-plot\fR
SVG charts, written there.
.TP
\fB\-\-dir\fR
The memory files of \fBrestart\fR (default \fI/dev/shm\fR) and the flash files of \fBflash\fR (default: a new directory under \fI/tmp\fR); removed at the end.
.SH SIGNALS
.TP
\fBSIGINT\fR, \fBSIGTERM\fR, \fBSIGHUP\fR
Every server it started is killed and its temporary files removed; it exits with 128 + the signal's number.
.SH EXAMPLES
.TP
\fBosmium\-bench load \-\-vs \-\-threads 1 \-\-rounds 4 \-\-duration 5\fR
memcached and osmium started side by side, loaded in alternating rounds: ops/s, latency percentiles, server CPU per request.
.TP
\fBosmium\-bench load \-\-addr 127.0.0.1:11211 \-\-pid 1234\fR
Load a running server (it asks before writing when run on a terminal).
.TP
\fBosmium\-bench memory \-\-json\fR
Resident memory per item of each server, as JSON.
.SH SEE ALSO
\fBosmium\fR(1), \fBosmium\-tool\fR(1), \fBmemcached\fR(1)
"#;
