//! Authentication, as memcached does it:
//!
//! * `-S`: SASL for the binary protocol, mechanism PLAIN, checked against
//!   a password file in memcached's sasl-pwdb format (`user:password` per
//!   line; `--sasl-pwdb FILE`, else `$MEMCACHED_SASL_PWDB`). The file is
//!   read again at every attempt, as memcached's
//!   `sasl_server_userdb_checkpass` does, so edits apply without a restart.
//! * `-Y`: text-protocol authentication (memcached's authfile.c and
//!   `try_read_command_asciiauth`): until a connection authenticates, the
//!   only command is `set <any key> <flags> <exptime> <bytes>` whose data
//!   is `user password`. The file (at most 8 `user:password` lines) is read
//!   once at start.
//!
//! The per-connection state lives in the session; the SASL opcodes are run
//! by the executor (`execute::sasl`) and the `-Y` login by the session's
//! text framing (`session::login`).

use std::path::PathBuf;

use crate::settings::Settings;

/// What SASL LIST MECHS answers.
pub(crate) const SASL_MECHANISMS: &[u8] = b"PLAIN";

/// memcached's fgets buffer for both password files (MAX_ENTRY_LEN).
const MAX_ENTRY_LEN: usize = 256;
/// memcached keeps at most this many authfile entries (MAX_ENTRIES).
const MAX_AUTHFILE_ENTRIES: usize = 8;
/// memcached's read buffer: a text auth token that cannot fit in it makes
/// memcached drop the connection.
pub(crate) const TEXT_AUTH_MAX_DATA: u64 = 16 * 1024;

/// Authentication settings shared by every connection.
#[derive(Debug, Default)]
pub(crate) struct AuthConfig {
    /// `-S`: the sasl-pwdb file PLAIN credentials are checked against.
    pub sasl_pwdb: Option<PathBuf>,
    /// `-Y`: the authfile's entries.
    pub ascii: Option<AuthFile>,
}

impl AuthConfig {
    /// Reads what `-S` and `-Y` need; the error is printed and the server
    /// exits with status 1, as memcached does.
    pub(crate) fn load(settings: &Settings) -> Result<AuthConfig, String> {
        let mut config = AuthConfig::default();
        if settings.sasl {
            let Some(path) = &settings.sasl_pwdb else {
                return Err("Error initializing sasl: -S needs a password file of \
                            user:password lines; give --sasl-pwdb FILE or set \
                            MEMCACHED_SASL_PWDB"
                    .into());
            };
            if let Err(e) = std::fs::File::open(path) {
                return Err(format!(
                    "Error initializing sasl: cannot read the password file [{path}]: {e}"
                ));
            }
            config.sasl_pwdb = Some(PathBuf::from(path));
        }
        if let Some(path) = &settings.auth_file {
            let content = std::fs::read(path)
                .map_err(|e| format!("Could not open authfile [{path}] for reading, error {e}"))?;
            let file = AuthFile::parse(&content).ok_or_else(|| {
                format!("Authfile [{path}] has a malformed entry. Should be 'user:password'")
            })?;
            config.ascii = Some(file);
        }
        Ok(config)
    }

    #[inline]
    pub(crate) fn sasl_enabled(&self) -> bool {
        self.sasl_pwdb.is_some()
    }
}

/// What memcached's `fgets(buf, 256, f)` returns line by line: at most 255
/// bytes, ending after a newline if one comes first.
fn fgets_lines(content: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = content;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let limit = rest.len().min(MAX_ENTRY_LEN - 1);
        let take = match memchr::memchr(b'\n', &rest[..limit]) {
            Some(nl) => nl + 1,
            None => limit,
        };
        let (line, tail) = rest.split_at(take);
        rest = tail;
        Some(line)
    })
}

/// The `-Y` authfile: up to 8 `user:password` entries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct AuthFile {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl AuthFile {
    /// memcached's `authfile_load`: None if a line has no `:` (an empty line
    /// counts as malformed). The password ends at `\r`, `\n` or a NUL; a
    /// NUL (or a line of 255+ bytes) also ends the file; entries past the
    /// eighth are ignored.
    pub(crate) fn parse(content: &[u8]) -> Option<AuthFile> {
        let mut entries = Vec::new();
        for line in fgets_lines(content) {
            let user_end = line.iter().position(|&b| b == b':' || b == 0)?;
            if line[user_end] != b':' {
                return None;
            }
            let pass = &line[user_end + 1..];
            let pass_end = pass
                .iter()
                .position(|&b| matches!(b, b'\n' | b'\r' | 0))
                .unwrap_or(pass.len());
            entries.push((line[..user_end].to_vec(), pass[..pass_end].to_vec()));
            let ended_at_nul = !matches!(pass.get(pass_end), Some(b'\n' | b'\r'));
            if entries.len() == MAX_AUTHFILE_ENTRIES || ended_at_nul {
                break;
            }
        }
        Some(AuthFile { entries })
    }

    /// memcached's `authfile_check`.
    pub(crate) fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        self.entries
            .iter()
            .any(|(u, p)| u.as_slice() == user && p.as_slice() == pass)
    }
}

/// memcached's `sasl_server_userdb_checkpass` on the pwdb file's content:
/// the first line starting with `user:` decides; the password must be
/// followed by `:`, a line end or the end of the line.
pub(crate) fn pwdb_check(content: &[u8], user: &[u8], pass: &[u8]) -> bool {
    if user.len() + pass.len() > MAX_ENTRY_LEN - 4 {
        return false;
    }
    for line in fgets_lines(content) {
        // The line as C sees it in its buffer: NUL-terminated.
        let at = |i: usize| line.get(i).copied().unwrap_or(0);
        if line.starts_with(user) && at(user.len()) == b':' {
            let start = user.len() + 1;
            let same = pass.iter().enumerate().all(|(i, &b)| at(start + i) == b);
            return same && matches!(at(start + pass.len()), b':' | b'\n' | b'\r' | 0);
        }
    }
    false
}

/// Where a connection's SASL exchange stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum SaslState {
    /// Nothing started, or the last exchange is over.
    #[default]
    Idle,
    /// SASL AUTH PLAIN came without credentials (answered "continue"); they
    /// come with SASL STEP.
    AwaitingPlainResponse,
}

/// The result of one SASL AUTH or STEP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SaslOutcome {
    Authenticated,
    /// Send status "auth continue" with an empty challenge.
    Continue,
    Failed,
}

/// PLAIN's message: `[authzid] NUL authcid NUL password`, exactly two NULs;
/// an authorization identity other than the user is refused (Cyrus SASL's
/// default policy).
fn plain_credentials(message: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut parts = message.splitn(3, |&b| b == 0);
    let authzid = parts.next()?;
    let authcid = parts.next()?;
    let password = parts.next()?;
    if password.contains(&0) || authcid.is_empty() {
        return None;
    }
    if !authzid.is_empty() && authzid != authcid {
        return None;
    }
    Some((authcid, password))
}

/// One SASL AUTH (`step` false) or SASL STEP, as memcached with Cyrus SASL
/// answers it. Any exchange first drops the connection's authentication
/// (memcached's `init_sasl_conn`).
pub(crate) fn sasl_exchange(
    config: &AuthConfig,
    state: &mut SaslState,
    authenticated: &mut bool,
    step: bool,
    mechanism: &[u8],
    data: &[u8],
) -> SaslOutcome {
    *authenticated = false;
    let Some(pwdb) = &config.sasl_pwdb else {
        return SaslOutcome::Failed;
    };
    if step {
        if *state != SaslState::AwaitingPlainResponse {
            return SaslOutcome::Failed;
        }
    } else if !mechanism.eq_ignore_ascii_case(b"PLAIN") {
        *state = SaslState::Idle;
        return SaslOutcome::Failed;
    } else if data.is_empty() {
        *state = SaslState::AwaitingPlainResponse;
        return SaslOutcome::Continue;
    }
    *state = SaslState::Idle;
    let ok = plain_credentials(data).is_some_and(|(user, pass)| {
        std::fs::read(pwdb).is_ok_and(|content| pwdb_check(&content, user, pass))
    });
    if ok {
        *authenticated = true;
        SaslOutcome::Authenticated
    } else {
        SaslOutcome::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authfile_like_memcached() {
        let f = AuthFile::parse(b"alice:secret\r\nbob:pw2").unwrap();
        assert!(f.check(b"alice", b"secret") && f.check(b"bob", b"pw2"));
        assert!(!f.check(b"bob", b"pw") && !f.check(b"alice", b"secret\r"));
        assert_eq!(AuthFile::parse(b"alice:secret\n\n"), None, "empty line");
        assert_eq!(AuthFile::parse(b"alice\n"), None);
        assert_eq!(AuthFile::parse(b"al\0ice:x\n"), None);
        let f = AuthFile::parse(b"a:b:c\n:pw\nu:\n").unwrap();
        assert!(f.check(b"a", b"b:c") && f.check(b"", b"pw") && f.check(b"u", b""));
        let many: Vec<u8> = (0..10)
            .flat_map(|i| format!("u{i}:p{i}\n").into_bytes())
            .collect();
        let f = AuthFile::parse(&many).unwrap();
        assert!(f.check(b"u7", b"p7") && !f.check(b"u8", b"p8"));
        let f = AuthFile::parse(b"a:b\0junk\nc:d\n").unwrap();
        assert!(
            f.check(b"a", b"b") && !f.check(b"c", b"d"),
            "NUL ends the file"
        );
        assert_eq!(AuthFile::parse(b"").unwrap(), AuthFile::default());
    }

    #[test]
    fn pwdb_like_memcached() {
        let db = b"alice:secret\nbob:pw2:extra\r\ncarol:x";
        assert!(pwdb_check(db, b"alice", b"secret"));
        assert!(!pwdb_check(db, b"alice", b"secre"));
        assert!(!pwdb_check(db, b"alice", b"secrets"));
        assert!(pwdb_check(db, b"bob", b"pw2"));
        assert!(pwdb_check(db, b"carol", b"x"));
        assert!(!pwdb_check(db, b"al", b"ice"));
        assert!(!pwdb_check(db, b"nobody", b""));
        // The first line of a user decides.
        assert!(!pwdb_check(b"a:1\na:2\n", b"a", b"2"));
        let long = vec![b'p'; 250];
        assert!(!pwdb_check(b"u:x\n", b"u", &long));
    }

    #[test]
    fn plain_messages() {
        assert_eq!(plain_credentials(b"\0u\0p"), Some((&b"u"[..], &b"p"[..])));
        assert_eq!(plain_credentials(b"u\0u\0p"), Some((&b"u"[..], &b"p"[..])));
        assert_eq!(plain_credentials(b"x\0u\0p"), None);
        assert_eq!(plain_credentials(b"u\0p"), None);
        assert_eq!(plain_credentials(b"\0u\0p\0"), None);
        assert_eq!(plain_credentials(b"\0\0p"), None);
    }

    #[test]
    fn sasl_state_machine() {
        let dir = std::env::temp_dir().join(format!("osmium-auth-{}", std::process::id()));
        std::fs::write(&dir, b"alice:secret\n").unwrap();
        let config = AuthConfig {
            sasl_pwdb: Some(dir.clone()),
            ascii: None,
        };
        let mut state = SaslState::default();
        let mut authed = false;
        let mut run = |step, mech: &[u8], data: &[u8]| {
            sasl_exchange(&config, &mut state, &mut authed, step, mech, data)
        };
        assert_eq!(
            run(false, b"PLAIN", b"\0alice\0secret"),
            SaslOutcome::Authenticated
        );
        assert_eq!(run(true, b"PLAIN", b"\0alice\0secret"), SaslOutcome::Failed);
        assert_eq!(run(false, b"plain", b""), SaslOutcome::Continue);
        assert_eq!(
            run(true, b"PLAIN", b"\0alice\0secret"),
            SaslOutcome::Authenticated
        );
        assert_eq!(run(false, b"CRAM-MD5", b"x"), SaslOutcome::Failed);
        assert_eq!(run(false, b"PLAIN", b"\0alice\0wrong"), SaslOutcome::Failed);
        assert!(!authed);
        std::fs::remove_file(dir).unwrap();
    }
}
