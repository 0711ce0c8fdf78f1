//! Who may reload the proxy from its stats port: `--admin-token-file
//! FILE` holds a token (one line, readable by its owner only, as the
//! server's `--replication-secret` file), and the command line
//! `reload <token>` is obeyed only when its token is that one (compared
//! in constant time). Without a token file the command is refused.

/// The longest command line read from a stats connection.
pub const MAX_LINE: usize = 1024;

/// The admin token (never logged, never sent back).
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// Reads `--admin-token-file FILE`: one trailing newline dropped;
    /// refused when unreadable, not a regular file, open to group or
    /// others, empty, or more than one line.
    pub fn load(path: &std::path::Path) -> Result<Token, String> {
        let b = osmium_protocol::replication_link::read_owner_only(
            path,
            "--admin-token-file",
            "an admin token",
        )?;
        if b.len() > MAX_LINE / 2 || b.iter().any(|&c| c.is_ascii_whitespace() || c < 0x20) {
            return Err(format!(
                "--admin-token-file {}: the token must be one word of at most {} printable bytes",
                path.display(),
                MAX_LINE / 2
            ));
        }
        Ok(Token(b))
    }

    /// Whether `given` is the token, in a time that depends on the
    /// token's length only.
    pub fn matches(&self, given: &[u8]) -> bool {
        let mut diff = u8::from(given.len() != self.0.len());
        for (i, &want) in self.0.iter().enumerate() {
            diff |= want ^ given.get(i).copied().unwrap_or(!want);
        }
        std::hint::black_box(diff) == 0
    }
}

/// A command line sent to the stats port.
#[derive(Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// `reload`, with the token given (empty when none).
    Reload(&'a [u8]),
    /// Anything else (an HTTP request line, say): not a command.
    Other,
}

/// Reads one line (without its `\r\n` or `\n`).
pub fn parse(line: &[u8]) -> Command<'_> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match line.strip_prefix(b"reload") {
        Some([]) => Command::Reload(&[]),
        Some([b' ', token @ ..]) => Command::Reload(token),
        _ => Command::Other,
    }
}

/// Who may reload, and how a `reload` line is answered when it may not.
#[derive(Debug, Default)]
pub struct Admin {
    /// `--admin-token-file`'s token (None: `reload` is refused).
    pub token: Option<Token>,
}

impl Admin {
    /// `Ok` when `given` is the right token; else the `ERROR` line's text.
    pub fn check(&self, given: &[u8]) -> Result<(), &'static str> {
        match &self.token {
            None => Err("reload is not enabled (start osmium-proxy with --admin-token-file)"),
            Some(t) if t.matches(given) => Ok(()),
            Some(_) => Err("bad token"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse() {
        assert_eq!(parse(b"reload\r\n"), Command::Reload(b""));
        assert_eq!(parse(b"reload abc\r\n"), Command::Reload(b"abc"));
        assert_eq!(parse(b"reload abc\n"), Command::Reload(b"abc"));
        assert_eq!(parse(b"reloadx\r\n"), Command::Other);
        assert_eq!(parse(b"GET / HTTP/1.0\r\n"), Command::Other);
    }

    #[test]
    fn tokens_compare_whole() {
        let t = Token(b"secret-1".to_vec());
        assert!(t.matches(b"secret-1"));
        for bad in [&b""[..], b"secret-", b"secret-12", b"secret-2", b"Secret-1"] {
            assert!(!t.matches(bad), "{bad:?}");
        }
        let a = Admin { token: Some(t) };
        assert_eq!(a.check(b"secret-1"), Ok(()));
        assert!(a.check(b"x").is_err());
        assert!(Admin::default().check(b"secret-1").is_err());
    }
}
