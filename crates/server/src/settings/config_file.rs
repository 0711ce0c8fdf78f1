//! `--config-file FILE`: options read from a file in the format of
//! Debian's `/etc/memcached.conf`, one option per line:
//!
//! ```text
//! # comment (a `#` starts one anywhere on a line; `\#` is a literal `#`)
//! -m 64
//! -p 11211
//! -u osmium
//! -l 127.0.0.1
//! -o ext_path=/var/lib/osmium/flash:1g
//! logfile /var/log/osmium.log
//! ```
//!
//! Each option line is split on white space into words, which take the
//! place of `--config-file FILE` on the command line: options given after
//! it on the command line win (the last value of an option is the one
//! taken, as memcached's getopt does). `logfile PATH` is the one line that
//! is not an option (Debian's wrapper script handles it for memcached):
//! osmium appends its log (stderr) to PATH. An option osmium does not know
//! is refused as memcached refuses it, with the file and line named; so
//! is a value the rest of the parse refuses (`-m abc`): [`locate`] finds
//! the line whose words make the command line fail.

use std::ffi::OsString;

use clap::CommandFactory;

use super::Cli;

/// The command line with every `--config-file FILE` expanded, and the
/// last `logfile` line's path.
pub(crate) struct Expanded {
    pub args: Vec<OsString>,
    pub logfile: Option<String>,
    /// Where each of `args` came from: a file's line, or None for the
    /// command line.
    pub origins: Vec<Option<Origin>>,
}

/// A config file's line (numbered from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub path: String,
    pub line: usize,
}

/// Expands `--config-file FILE` (or `--config-file=FILE`) in `args`: the
/// file's options are put before it, so that clap still sees (and `-h`
/// still lists) the option itself.
pub(crate) fn expand(args: Vec<OsString>) -> Result<Expanded, String> {
    let mut out = Vec::with_capacity(args.len());
    let mut origins: Vec<Option<Origin>> = Vec::with_capacity(args.len());
    let mut logfile = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let text = arg.to_string_lossy().into_owned();
        let path = if text == "--config-file" {
            match it.next() {
                Some(p) => {
                    let p = p.to_string_lossy().into_owned();
                    out.push(arg);
                    out.push(OsString::from(&p));
                    origins.extend([None, None]);
                    p
                }
                None => {
                    out.push(arg);
                    origins.push(None);
                    continue; // clap reports the missing value
                }
            }
        } else if let Some(p) = text.strip_prefix("--config-file=") {
            out.push(arg.clone());
            origins.push(None);
            p.to_string()
        } else {
            out.push(arg);
            origins.push(None);
            continue;
        };
        let contents = std::fs::read_to_string(&path)
            .map_err(|e| format!("Could not read the config file {path}: {e}"))?;
        let at = out.len() - if text == "--config-file" { 2 } else { 1 };
        let (words, log) = parse(&path, &contents)?;
        if log.is_some() {
            logfile = log;
        }
        let from: Vec<Option<Origin>> = words
            .iter()
            .map(|(line, _)| {
                Some(Origin {
                    path: path.clone(),
                    line: *line,
                })
            })
            .collect();
        origins.splice(at..at, from);
        out.splice(at..at, words.into_iter().map(|(_, w)| OsString::from(w)));
    }
    Ok(Expanded {
        args: out,
        logfile,
        origins,
    })
}

/// The command line `refused` as `message` names a config file's line
/// when that line is where it starts to fail: the message is then
/// prefixed `osmium: FILE line N: ` (as an unknown option is). `check`
/// parses a command line and returns its refusal. The lines are added in
/// order, the command line's own words always there: the first line with
/// which `check` refuses it with the same message is named; none when
/// the command line alone is refused so.
pub(crate) fn locate(
    message: String,
    expanded: &Expanded,
    check: impl Fn(Vec<OsString>) -> Option<String>,
) -> String {
    let mut lines: Vec<&Origin> = Vec::new();
    for o in expanded.origins.iter().flatten() {
        if lines.last() != Some(&o) {
            lines.push(o);
        }
    }
    if lines.is_empty() {
        return message;
    }
    let with_lines = |upto: usize| -> Vec<OsString> {
        let kept = &lines[..upto];
        expanded
            .args
            .iter()
            .zip(&expanded.origins)
            .filter(|(_, o)| o.as_ref().is_none_or(|o| kept.contains(&o)))
            .map(|(a, _)| a.clone())
            .collect()
    };
    if check(with_lines(0)).as_deref() == Some(message.as_str()) {
        return message;
    }
    for upto in 1..=lines.len() {
        if check(with_lines(upto)).as_deref() == Some(message.as_str()) {
            let o = lines[upto - 1];
            return format!("osmium: {} line {}: {message}", o.path, o.line);
        }
    }
    message
}

/// A config file's option words, each with its line number, and its
/// `logfile` line's path.
pub(crate) type Words = Vec<(usize, String)>;

/// The option words of a config file and its `logfile` line's path.
pub(crate) fn parse(path: &str, contents: &str) -> Result<(Words, Option<String>), String> {
    let cmd = Cli::command();
    let shorts: Vec<char> = cmd.get_arguments().filter_map(|a| a.get_short()).collect();
    let longs: Vec<&str> = cmd.get_arguments().filter_map(|a| a.get_long()).collect();
    let mut words = Vec::new();
    let mut logfile = None;
    for (n, raw) in contents.lines().enumerate() {
        let line = strip_comment(raw);
        let mut parts = line.split_whitespace();
        let Some(first) = parts.next() else { continue };
        let here = || format!("osmium: {path} line {}", n + 1);
        if !first.starts_with('-') {
            if first == "logfile" {
                let rest: Vec<&str> = parts.collect();
                if rest.is_empty() {
                    return Err(format!("{}: logfile needs a path", here()));
                }
                logfile = Some(rest.join(" "));
                continue;
            }
            return Err(format!(
                "{}: unrecognized line '{}'\nIllegal argument \"?\"",
                here(),
                line.trim()
            ));
        }
        if let Some(long) = first.strip_prefix("--") {
            let name = long.split_once('=').map_or(long, |(n, _)| n);
            if name == "config-file" {
                return Err(format!("{}: --config-file inside a config file", here()));
            }
            if !longs.contains(&name) {
                return Err(format!(
                    "{}: unrecognized option '{first}'\nIllegal argument \"?\"",
                    here()
                ));
            }
        } else {
            let c = first[1..].chars().next().unwrap_or('-');
            if !shorts.contains(&c) {
                return Err(format!(
                    "{}: invalid option -- '{c}'\nIllegal argument \"?\"",
                    here()
                ));
            }
        }
        words.push((n + 1, first.to_string()));
        words.extend(parts.map(|w| (n + 1, w.to_string())));
    }
    Ok((words, logfile))
}

/// The line without its comment: a `#` not preceded by `\` starts one;
/// `\#` stands for `#`.
fn strip_comment(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'#') => {
                out.push('#');
                chars.next();
            }
            '#' => break,
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_style_lines() {
        let conf = "# osmium\n-m 64\n\n  -p 11211   # the port\n-u osmium\n-l 127.0.0.1,::1\nlogfile /var/log/osmium.log\n-vv\n-o a\\#b\n";
        let (words, log) = parse("f", conf).unwrap();
        assert_eq!(words[0], (2, "-m".to_string()));
        assert_eq!(words[2], (4, "-p".to_string()));
        let words: Vec<String> = words.into_iter().map(|(_, w)| w).collect();
        assert_eq!(
            words,
            [
                "-m",
                "64",
                "-p",
                "11211",
                "-u",
                "osmium",
                "-l",
                "127.0.0.1,::1",
                "-vv",
                "-o",
                "a#b"
            ]
        );
        assert_eq!(log.as_deref(), Some("/var/log/osmium.log"));
    }

    #[test]
    fn unknown_options_are_refused_with_the_line() {
        let e = parse("f", "-m 64\n-x 1\n").err().unwrap();
        assert!(
            e.starts_with("osmium: f line 2: invalid option -- 'x'"),
            "{e}"
        );
        let e = parse("f", "--no-such 1\n").err().unwrap();
        assert!(e.contains("line 1: unrecognized option '--no-such'"), "{e}");
        let e = parse("f", "memory 64\n").err().unwrap();
        assert!(e.contains("unrecognized line 'memory 64'"), "{e}");
        assert!(parse("f", "--memory-limit=64\n").is_ok());
    }

    #[test]
    fn expands_in_place_so_later_options_win() {
        let dir = std::env::temp_dir().join(format!("osmium-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("osmium.conf");
        std::fs::write(&f, "-m 64\n-p 1\n").unwrap();
        let args: Vec<OsString> = [
            "osmium",
            "-t",
            "2",
            "--config-file",
            f.to_str().unwrap(),
            "-p",
            "2",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let e = expand(args).unwrap();
        let got: Vec<String> = e.args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            got,
            [
                "osmium",
                "-t",
                "2",
                "-m",
                "64",
                "-p",
                "1",
                "--config-file",
                f.to_str().unwrap(),
                "-p",
                "2"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
