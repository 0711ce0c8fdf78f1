//! `-vv`'s lines for the text protocol, as memcached 1.6.45 prints them:
//! `<FD LINE` for each command line received (once, when it runs), and
//! `>FD REPLY` for the replies memcached writes through its `out_string`
//! (storage verdicts, errors, `VERSION`, `OK`, `MN`), `>FD sending key K`
//! for each hit of a get and `>FD END` at its end; a storage verdict
//! noreply kept from the client is `>FD NOREPLY STORED`. Commands memcached
//! answers without `out_string` (touch, delete, incr/decr, meta commands
//! other than mn, stats) log no reply, as there. Callers check the
//! verbosity first, so none of this runs unless `-vv` is on.

use osmium_protocol::request::{Command, Reply};

/// Which of a command's replies memcached logs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Replies {
    /// Each reply line: `>FD LINE`.
    Lines,
    /// A get: `>FD sending key K` per hit, then `>FD END`.
    Get,
    /// None.
    Silent,
}

/// What memcached logs of `command`'s replies.
pub(crate) fn replies(command: &Command<'_>, reply: &Reply<'_>) -> Replies {
    let meta = matches!(reply, Reply::Meta(_));
    match command {
        Command::Get { .. } if !meta => Replies::Get,
        Command::Noop => Replies::Lines,
        _ if meta => Replies::Silent,
        Command::Touch { .. }
        | Command::Delete(_)
        | Command::Arith(_)
        | Command::Stats { .. }
        | Command::MetaGet(_)
        | Command::MetaDebug { .. }
        | Command::Quit
        | Command::LruCrawler { .. } => Replies::Silent,
        _ => Replies::Lines,
    }
}

/// `<FD LINE`: a command line as received, without its line end.
pub(crate) fn command(fd: i32, line: &[u8]) {
    let shown = line.strip_suffix(b"\n").unwrap_or(line);
    let shown = shown.strip_suffix(b"\r").unwrap_or(shown);
    tracing::debug!("<{} {}", fd, String::from_utf8_lossy(shown));
}

/// Logs the replies in `bytes` (what the command added to the output);
/// `unsent`: the storage verdict noreply kept from the client.
pub(crate) fn replies_sent(fd: i32, kind: Replies, bytes: &[u8], unsent: Option<&str>) {
    match kind {
        Replies::Silent => {}
        Replies::Lines if bytes.is_empty() => {
            if let Some(verdict) = unsent {
                tracing::debug!(">{} NOREPLY {}", fd, verdict);
            }
        }
        Replies::Lines => {
            for line in lines(bytes) {
                tracing::debug!(">{} {}", fd, String::from_utf8_lossy(line));
            }
        }
        Replies::Get => {
            // Values may have left straight from item memory, or be
            // gathered beside the buffer: only VALUE headers at a line
            // start and the final END are looked at.
            for line in lines(bytes) {
                if let Some(rest) = line.strip_prefix(b"VALUE ") {
                    let key = rest.split(|&b| b == b' ').next().unwrap_or(rest);
                    tracing::debug!(">{} sending key {}", fd, String::from_utf8_lossy(key));
                } else if line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR") {
                    tracing::debug!(">{} {}", fd, String::from_utf8_lossy(line));
                }
            }
            if bytes.ends_with(b"END\r\n") {
                tracing::debug!(">{} END", fd);
            }
        }
    }
}

/// The `\r\n`-terminated lines of `bytes`.
fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|l| l.strip_suffix(b"\r"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_a_reply() {
        let got: Vec<&[u8]> = lines(b"VALUE a 0 1\r\nx\r\nEND\r\n").collect();
        assert_eq!(got, [&b"VALUE a 0 1"[..], b"x", b"END"]);
        assert_eq!(lines(b"STORED\r\n").count(), 1);
        assert_eq!(lines(b"").count(), 0);
    }
}
