//! Writing into a server this tool did not start (`load --addr`,
//! `--targets`): every key gets a prefix of its own (`--key-prefix`,
//! `osmium-bench:` by default) so an operator can find and delete what
//! was written, and a warning on stderr says, before anything is written,
//! how many keys under which prefix into which servers.
//!
//! The rule: with `--yes`, or when standard input is not a terminal (a
//! script, CI, a test), the warning is printed and the run goes on; at a
//! terminal without `--yes` it asks `Continue? [y/N]` and stops unless
//! the answer is y or yes. Servers started by the tool itself (`--vs`)
//! are private to the run: no warning, and no prefix unless asked for.

use std::io::{BufRead, IsTerminal};

/// The prefix of every key written into a server this tool did not start.
pub(crate) const DEFAULT_KEY_PREFIX: &str = "osmium-bench:";

#[derive(clap::Args, Clone, Debug)]
pub(crate) struct ForeignArgs {
    /// Put this before every key [default: `osmium-bench:` with --addr or
    /// --targets, none with --vs]; `--key-prefix ''` for bare keys. Adds
    /// to --key-size.
    #[arg(long, value_name = "PREFIX")]
    pub key_prefix: Option<String>,
    /// With --addr or --targets: write without asking (the warning is
    /// still printed). Asked only when standard input is a terminal.
    #[arg(long)]
    pub yes: bool,
}

impl ForeignArgs {
    /// The key prefix of a run; `foreign`: into servers the tool did not
    /// start.
    pub(crate) fn key_prefix(&self, foreign: bool) -> Vec<u8> {
        match &self.key_prefix {
            Some(p) => p.as_bytes().to_vec(),
            None if foreign => DEFAULT_KEY_PREFIX.as_bytes().to_vec(),
            None => Vec::new(),
        }
    }

    /// Warns (and at a terminal without --yes, asks) before up to `keys`
    /// keys under `prefix` are written into `servers`.
    pub(crate) fn confirm(&self, servers: &str, keys: u64, prefix: &[u8]) -> Result<(), String> {
        let prefix = String::from_utf8_lossy(prefix);
        let prefix = if prefix.is_empty() {
            "no prefix".to_string()
        } else {
            format!("prefix `{prefix}`")
        };
        eprintln!(
            "osmium-bench: warning: writing up to {keys} keys ({prefix}) into {servers}, \
             a server this tool did not start"
        );
        if self.yes || !std::io::stdin().is_terminal() {
            return Ok(());
        }
        eprint!("Continue? [y/N] ");
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| format!("reading the answer: {e}"))?;
        match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Ok(()),
            _ => Err("not confirmed: nothing was written".into()),
        }
    }
}
