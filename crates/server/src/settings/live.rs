//! What a reload (SIGHUP with `--config-file`) may change: the options as
//! parsed at start ([`Options`], kept in `Settings`) against those of the
//! command line read again with the config file's new contents.
//! `--replicate-to` and `--replication` change live ([`LIVE`]); any other
//! option that differs is named ([`unchangeable`]) and left as it was.

use clap::CommandFactory;

use super::Cli;

/// The options that a reload applies.
pub(crate) const LIVE: &[&str] = &["replicate_to", "replication"];

/// Fields of `Cli` that are not settings of a running server.
const NOT_SETTINGS: &[&str] = &["help", "version", "license", "config_file"];

/// The parsed options, each as its field's `Debug` text, to compare.
#[derive(Clone, Default)]
pub(crate) struct Options {
    /// `--config-file`: what SIGHUP re-reads (None: SIGHUP reloads the
    /// TLS certificates only).
    pub config_file: Option<String>,
    /// (`Cli` field, its value) in declaration order, `-o` apart.
    fields: Vec<(String, String)>,
    /// The `-o` items, one `key[=value]` each.
    extended: Vec<String>,
    logfile: Option<String>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("config_file", &self.config_file)
            .finish_non_exhaustive()
    }
}

/// The options of a parsed command line (and the config file's
/// `logfile`).
pub(crate) fn capture(cli: &Cli, logfile: &Option<String>) -> Options {
    // Pretty `Debug` puts each field of `Cli` on lines of its own, the
    // first indented by exactly four spaces and starting with its name.
    let text = format!("{cli:#?}");
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in text.lines().skip(1) {
        let field = line
            .strip_prefix("    ")
            .filter(|l| l.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
            .and_then(|l| l.split_once(':'));
        match (field, fields.last_mut()) {
            (Some((name, value)), _) => fields.push((name.to_string(), value.trim().to_string())),
            (None, Some((_, value))) => {
                value.push('\n');
                value.push_str(line.trim());
            }
            (None, None) => {}
        }
    }
    fields.retain(|(name, _)| name != "extended");
    Options {
        config_file: cli.config_file.clone(),
        fields,
        extended: cli
            .extended
            .iter()
            .flat_map(|o| o.split(','))
            .map(|o| o.trim().to_string())
            .filter(|o| !o.is_empty())
            .collect(),
        logfile: logfile.clone(),
    }
}

/// The options whose values differ between `old` and `new` and that
/// cannot change live, by the name an operator knows them by
/// (`-m/--memory-limit`, `-o ext_path`, `logfile`).
pub(crate) fn unchangeable(old: &Options, new: &Options) -> Vec<String> {
    let cmd = Cli::command();
    let mut names = Vec::new();
    for (name, value) in &new.fields {
        if LIVE.contains(&name.as_str()) || NOT_SETTINGS.contains(&name.as_str()) {
            continue;
        }
        let before = old.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v);
        if before == Some(value) {
            continue;
        }
        let arg = cmd.get_arguments().find(|a| a.get_id().as_str() == name);
        let shown = match (
            arg.and_then(|a| a.get_short()),
            arg.and_then(|a| a.get_long()),
        ) {
            (Some(s), Some(l)) => format!("-{s}/--{l}"),
            (None, Some(l)) => format!("--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, None) => name.clone(),
        };
        names.push(shown);
    }
    // `-o key[=value]` items: a key whose items differ.
    let key = |o: &String| o.split('=').next().unwrap_or_default().to_string();
    let mut keys: Vec<String> = Vec::new();
    for o in old.extended.iter().chain(&new.extended) {
        let k = key(o);
        let items =
            |of: &[String]| -> Vec<String> { of.iter().filter(|x| key(x) == k).cloned().collect() };
        if items(&old.extended) != items(&new.extended) && !keys.contains(&k) {
            keys.push(k);
        }
    }
    names.extend(keys.into_iter().map(|k| format!("-o {k}")));
    if old.logfile != new.logfile {
        names.push("logfile".into());
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn options(args: &[&str]) -> Options {
        let cli = Cli::try_parse_from(args).unwrap();
        capture(&cli, &None)
    }

    #[test]
    fn names_what_changed_but_not_the_live_options() {
        let old = options(&[
            "osmium",
            "-m",
            "64",
            "--replicate-to",
            "a:1",
            "-o",
            "idle_spin=0",
        ]);
        let new = options(&[
            "osmium",
            "-m",
            "128",
            "--replicate-to",
            "b:2",
            "--replication",
            "sync",
            "-o",
            "idle_spin=5,hotkeys_top=10",
            "-l",
            "127.0.0.1",
        ]);
        assert_eq!(
            unchangeable(&old, &new),
            [
                "-l/--listen",
                "-m/--memory-limit",
                "-o idle_spin",
                "-o hotkeys_top"
            ]
        );
        assert!(unchangeable(&old, &old).is_empty());
        let same = options(&[
            "osmium",
            "-m",
            "64",
            "--replicate-to",
            "c:3",
            "-o",
            "idle_spin=0",
        ]);
        assert!(unchangeable(&old, &same).is_empty());
    }
}
