//! Unit tests of the text and meta parser. Where a test says "checked
//! against memcached 1.6.45", the line was sent to the real binary and its
//! answer matched the expectation here.

mod classic;
mod meta;

use super::parse_line;
use crate::request::{Command, KeyBuffer, Reply, Request};

/// Parses `line` and hands the request to `f`.
fn with<R>(line: &[u8], f: impl FnOnce(Request<'_>) -> R) -> R {
    let mut keys = KeyBuffer::new();
    f(parse_line(line, &mut keys))
}

/// The parsed command, for commands that borrow nothing but `'static`
/// test strings.
fn command(line: &[u8]) -> String {
    with(line, |r| format!("{:?}", r.command))
}

/// An error's message, discard and whether the reply hides it (text
/// noreply). Panics if the line parses to anything else.
fn err(line: &[u8]) -> (&'static str, usize, bool) {
    with(line, |r| match r.command {
        Command::Error { message, discard } => (
            message,
            discard,
            matches!(r.reply, Reply::Text { noreply: true }),
        ),
        other => panic!(
            "{:?}: expected an error, got {other:?}",
            String::from_utf8_lossy(line)
        ),
    })
}

/// The text reply's noreply.
fn noreply(line: &[u8]) -> bool {
    with(line, |r| match r.reply {
        Reply::Text { noreply } => noreply,
        other => panic!("not a text reply: {other:?}"),
    })
}

/// The keys of a get.
fn keys(line: &[u8]) -> Vec<Vec<u8>> {
    with(line, |r| match r.command {
        Command::Get { keys, .. } => keys.map(|k| k.to_vec()).collect(),
        other => panic!("not a get: {other:?}"),
    })
}

fn line_of(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}
