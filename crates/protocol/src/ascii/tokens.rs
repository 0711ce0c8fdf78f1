//! mcmc's tokenizer (`_mcmc_tokenize_meta` in vendor/mcmc/mcmc.c), which
//! memcached 1.6.45 runs over every request line it dispatches, and the
//! `noreply` check memcached makes on its result.
//!
//! ```text
//! line:    "ms  key 5 T30 F1   \r\n"
//! tokens:   ^0  ^1  ^2 ^3 ^4   ^end cap        ntokens = 5
//! ```
//!
//! * The line handed over includes its terminator; the content ends before
//!   a final `\r\n`, or before the last byte (the `\n`). Only a `\r` right
//!   before the `\n` is dropped; any other `\r` is content.
//! * Tokens are maximal runs of bytes other than `' '` (a tab, a NUL, a
//!   `\r` are token bytes), so tokens are never empty.
//! * At most [`MAX_TOKENS`] (23) are kept; the rest of the line is ignored
//!   (not even checked), and the end cap is the end of the 23rd token.
//! * Lines longer than `TOKENIZER_MAXLEN` (65534) bytes are tokenized as if
//!   they were that long (the cut-off's last byte, or its last two when the
//!   second-to-last is a `\r`, taken for the terminator): token offsets are
//!   16-bit. Only a get can be that long.
//! * From token `mstart` on (meta commands: 2, or 3 for ms; otherwise
//!   never) each token must start with a byte in `A..=z` (ASCII 65 to 122,
//!   the six punctuation bytes between `Z` and `a` included) or a digit;
//!   otherwise the tokenizer gives up (`MCMC_NOK`), and memcached, which
//!   ignores that result, is left with zero tokens.

use crate::request::{Tokens, MAX_TOKENS};

/// mcmc's `TOKENIZER_MAXLEN`.
pub const TOKENIZER_MAXLEN: usize = u16::MAX as usize - 1;

/// `mstart` for commands that are not meta commands: no flag check.
pub const NO_FLAGS: usize = usize::MAX;

/// The first byte of a meta flag token, as the tokenizer accepts it.
#[inline]
fn flag_start_ok(b: u8) -> bool {
    (65..123).contains(&b) || b.is_ascii_digit()
}

/// The content end of `line` as mcmc and memcached compute it: before a
/// final `\r\n`, else before the last byte (memcached never sees a line
/// shorter than 4 bytes here; an empty one has no content).
#[inline]
pub fn content_end(line: &[u8]) -> usize {
    match line.len() {
        0 | 1 => 0,
        len if line[len - 2] == b'\r' => len - 2,
        len => len - 1,
    }
}

/// Tokenizes a request line (terminator included). None where mcmc
/// returns `MCMC_NOK`: a token at or after `mstart` starts with a byte a
/// meta flag cannot start with.
#[inline]
pub fn tokenize(line: &[u8], mstart: usize) -> Option<Tokens<'_>> {
    let clamped = &line[..line.len().min(TOKENIZER_MAXLEN)];
    let end = content_end(clamped);
    let mut starts = [0u16; MAX_TOKENS + 1];
    let mut count = 0;
    let mut pos = 0;
    let cap = loop {
        while pos < end && line[pos] == b' ' {
            pos += 1;
        }
        if pos >= end {
            break end;
        }
        if count >= mstart && !flag_start_ok(line[pos]) {
            return None;
        }
        // Offsets are below TOKENIZER_MAXLEN, so they fit 16 bits.
        starts[count] = pos as u16;
        count += 1;
        let token_end = match line[pos..end].iter().position(|&b| b == b' ') {
            Some(n) => pos + n,
            None => end,
        };
        if count == MAX_TOKENS {
            break token_end;
        }
        pos = token_end;
    };
    starts[count] = cap as u16;
    Some(Tokens::from_offsets(line, starts, count))
}

/// memcached's `_process_request_noreply`: is the last token `noreply`?
#[inline]
pub fn noreply(t: &Tokens<'_>) -> bool {
    t.count() > 0 && t.get(t.count() - 1) == b"noreply"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(line: &[u8], mstart: usize) -> Option<Vec<Vec<u8>>> {
        tokenize(line, mstart).map(|t| (0..t.count()).map(|i| t.get(i).to_vec()).collect())
    }

    fn words(list: &[&str]) -> Option<Vec<Vec<u8>>> {
        Some(list.iter().map(|w| w.as_bytes().to_vec()).collect())
    }

    #[test]
    fn splits_on_spaces_only() {
        assert_eq!(toks(b"get a\r\n", NO_FLAGS), words(&["get", "a"]));
        assert_eq!(
            toks(b"  get   a  b  \r\n", NO_FLAGS),
            words(&["get", "a", "b"])
        );
        assert_eq!(
            toks(b"get a\tb\0c\rd\n", NO_FLAGS),
            Some(vec![b"get".to_vec(), b"a\tb\0c\rd".to_vec()])
        );
        // Only the \r right before the \n is part of the terminator.
        assert_eq!(
            toks(b"get a\r\r\n", NO_FLAGS),
            Some(vec![b"get".to_vec(), b"a\r".to_vec()])
        );
        assert_eq!(toks(b"get a\n", NO_FLAGS), words(&["get", "a"]));
        assert_eq!(toks(b"    \r\n", NO_FLAGS), Some(vec![]));
    }

    #[test]
    fn keeps_23_tokens() {
        let line: Vec<u8> = (0..30)
            .flat_map(|i| format!("t{i} ").into_bytes())
            .chain(*b"\r\n")
            .collect();
        let t = tokenize(&line, NO_FLAGS).unwrap();
        assert_eq!(t.count(), MAX_TOKENS);
        assert_eq!(t.get(22), b"t22");
        assert_eq!(t.get(23), b"");
        let exact: Vec<u8> = (0..23)
            .flat_map(|i| format!(" t{i}").into_bytes())
            .chain(*b"\r\n")
            .collect();
        let t = tokenize(&exact, NO_FLAGS).unwrap();
        assert_eq!(t.count(), MAX_TOKENS);
        assert_eq!(t.get(22), b"t22");
    }

    #[test]
    fn meta_flag_starts() {
        assert!(tokenize(b"mg key v T30 0 [\r\n", 2).is_some());
        assert!(tokenize(b"mg key v !\r\n", 2).is_none());
        assert!(tokenize(b"mg key v \x80\r\n", 2).is_none());
        assert!(tokenize(b"mg key v {\r\n", 2).is_none());
        assert!(tokenize(b"mg key v \x7f\r\n", 2).is_none());
        // The key and (for ms, mstart 3) the data length are not checked.
        assert!(tokenize(b"mg !key v\r\n", 2).is_some());
        assert!(tokenize(b"ms key -5 v\r\n", 3).is_some());
        // Tokens after the 23rd are not checked.
        let mut line = b"mg k".to_vec();
        for _ in 0..21 {
            line.extend_from_slice(b" v");
        }
        line.extend_from_slice(b" !\r\n");
        assert_eq!(tokenize(&line, 2).unwrap().count(), MAX_TOKENS);
    }

    #[test]
    fn short_lines_have_no_content() {
        assert_eq!(content_end(b""), 0);
        assert_eq!(content_end(b"\n"), 0);
        assert_eq!(content_end(b"\r\n"), 0);
        assert_eq!(content_end(b"a\n"), 1);
        assert_eq!(tokenize(b"", NO_FLAGS).map(|t| t.count()), Some(0));
        assert_eq!(tokenize(b"a", NO_FLAGS).map(|t| t.count()), Some(0));
    }

    #[test]
    fn noreply_is_the_last_token() {
        assert!(noreply(
            &tokenize(b"set k 0 0 1 noreply\r\n", NO_FLAGS).unwrap()
        ));
        assert!(noreply(
            &tokenize(b"set k 0 0 1 noreply  \r\n", NO_FLAGS).unwrap()
        ));
        assert!(!noreply(
            &tokenize(b"set k 0 0 1 noreply x\r\n", NO_FLAGS).unwrap()
        ));
        assert!(!noreply(
            &tokenize(b"set k 0 0 1 noreplyx\r\n", NO_FLAGS).unwrap()
        ));
        assert!(!noreply(&tokenize(b"\r\n", NO_FLAGS).unwrap()));
    }

    #[test]
    fn long_lines_are_cut_at_tokenizer_maxlen() {
        let mut line = b"get a ".to_vec();
        line.resize(70_000, b'k');
        line.extend_from_slice(b" b\r\n");
        let t = tokenize(&line, NO_FLAGS).unwrap();
        assert_eq!(t.count(), 3);
        // The cut-off's last byte is taken for the terminator.
        assert_eq!(t.get(2).len(), TOKENIZER_MAXLEN - 1 - 6);
    }
}
