//! The metrics endpoint's bearer token (`--metrics-token-file FILE`): read
//! once at start from a file only its owner may read (the rules of the
//! replication secret's file, `read_owner_only`), then asked of every
//! request as `Authorization: Bearer <token>` (RFC 6750), which is how
//! Prometheus sends a scrape config's `authorization: {credentials_file:
//! ...}`.
//!
//! The comparison takes a time that tells nothing of the token: both the
//! token and what a client sent are run through HMAC-SHA256 under a key
//! drawn at start (`aws_lc_rs::hmac`), and the two tags compared in
//! constant time (`hmac::verify`), so neither a matching prefix nor the
//! token's length changes the time of an answer.

use aws_lc_rs::hmac;
use aws_lc_rs::rand::SystemRandom;

/// The shortest token taken (characters).
pub(crate) const MIN_LEN: usize = 16;
/// The longest token taken: well inside the request head's 8 KiB.
pub(crate) const MAX_LEN: usize = 1024;

/// The token, kept as its HMAC tag under a key of this process's own
/// (never printed, never sent).
pub(crate) struct Token {
    key: hmac::Key,
    tag: hmac::Tag,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// Reads `--metrics-token-file FILE`: one trailing newline dropped;
    /// refused when unreadable, not a regular file, open to group or
    /// others, empty, or not one word of [`MIN_LEN`] to [`MAX_LEN`]
    /// printable ASCII characters.
    pub(crate) fn load(path: &str) -> Result<Token, String> {
        let bytes = osmium_protocol::replication_link::read_owner_only(
            path,
            "--metrics-token-file",
            "a metrics token",
        )?;
        Token::new(&bytes).map_err(|e| format!("--metrics-token-file {path}: {e}"))
    }

    fn new(token: &[u8]) -> Result<Token, String> {
        if !(MIN_LEN..=MAX_LEN).contains(&token.len()) || !token.iter().all(u8::is_ascii_graphic) {
            return Err(format!(
                "the token must be one word of {MIN_LEN} to {MAX_LEN} printable ASCII \
                 characters (e.g. `openssl rand -hex 32`)"
            ));
        }
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())
            .map_err(|_| "no random bytes for the token's key".to_string())?;
        let tag = hmac::sign(&key, token);
        Ok(Token { key, tag })
    }

    /// Whether an `Authorization` header's value is `Bearer <token>` (the
    /// scheme in any case, as RFC 9110 has it; spaces around the token
    /// ignored).
    pub(crate) fn accepts(&self, authorization: &[u8]) -> bool {
        let value = authorization.trim_ascii();
        let Some(split) = value.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (scheme, given) = value.split_at(split);
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return false;
        }
        hmac::verify(&self.key, given.trim_ascii(), self.tag.as_ref()).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_whole_token_in_a_bearer_header_is_accepted() {
        let t = Token::new(b"0123456789abcdef-token").unwrap();
        assert!(t.accepts(b"Bearer 0123456789abcdef-token"));
        assert!(t.accepts(b"bearer 0123456789abcdef-token"));
        assert!(t.accepts(b"BEARER   0123456789abcdef-token  "));
        for bad in [
            &b""[..],
            b"Bearer",
            b"Bearer ",
            b"0123456789abcdef-token",
            b"Basic 0123456789abcdef-token",
            b"Bearer 0123456789abcdef-toke",
            b"Bearer 0123456789abcdef-token2",
            b"Bearer 0123456789ABCDEF-token",
            b"Bearer 0123456789abcdef-token 0123456789abcdef-token",
            b"Bearer0123456789abcdef-token",
        ] {
            assert!(!t.accepts(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn weak_or_odd_tokens_are_refused() {
        assert!(Token::new(b"short").is_err());
        assert!(Token::new(b"fifteen-chars-x").is_err());
        assert!(Token::new(b"sixteen-chars-xx").is_ok());
        assert!(Token::new(b"two words in a token").is_err());
        assert!(Token::new(b"tab\tin-the-middle-of-it").is_err());
        assert!(Token::new("ünïcödé-is-not-ascii".as_bytes()).is_err());
        assert!(Token::new(&vec![b'x'; MAX_LEN + 1]).is_err());
        assert!(Token::new(&vec![b'x'; MAX_LEN]).is_ok());
    }
}
