//! Stats rows as data: each row a name and a value, in the order a report
//! gave them. The executor's reports (`execute/report.rs`, the socket
//! registry's `stats conns`, `stats hotkeys`) fill them; the composers say
//! them: the text protocol as memcached's `STAT <name> <value>\r\n` lines
//! (`text::stat_rows`), the binary protocol as one packet per row
//! (`binary::stats`); `/metrics` reads them as they are.

use std::fmt::Display;
use std::io::Write;

/// Rows of a stats reply.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StatRows {
    /// Every row's name, then its value, back to back.
    bytes: Vec<u8>,
    /// Where each row's name ends and its value ends in `bytes`.
    ends: Vec<(usize, usize)>,
}

impl StatRows {
    pub(crate) fn new() -> StatRows {
        StatRows::default()
    }

    /// Adds a row (`name` without spaces).
    pub(crate) fn push(&mut self, name: impl Display, value: impl Display) {
        let _ = write!(self.bytes, "{name}");
        let name_end = self.bytes.len();
        let _ = write!(self.bytes, "{value}");
        self.ends.push((name_end, self.bytes.len()));
    }

    /// Adds a row whose value `value` appends to the buffer it is given.
    pub(crate) fn push_with(&mut self, name: &str, value: impl FnOnce(&mut Vec<u8>)) {
        self.bytes.extend_from_slice(name.as_bytes());
        let name_end = self.bytes.len();
        value(&mut self.bytes);
        self.ends.push((name_end, self.bytes.len()));
    }

    /// The rows, in order: (name, value).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&(name_end, end)| {
            let row = (&self.bytes[start..name_end], &self.bytes[name_end..end]);
            start = end;
            row
        })
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// The rows as the text protocol says them (for tests).
    #[cfg(test)]
    pub(crate) fn text(&self) -> String {
        let mut buf = Vec::new();
        crate::compose::text::stat_rows(&mut buf, self);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// A `STAT <name> <value>` row (the shape of memcached's `APPEND_STAT`).
#[inline]
pub(crate) fn stat(rows: &mut StatRows, name: &str, value: impl Display) {
    rows.push(name, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_their_order_names_and_values() {
        let mut rows = StatRows::new();
        stat(&mut rows, "pid", 42);
        rows.push_with("hotkey", |b| b.extend_from_slice(b"1 a%20b 3.00"));
        stat(&mut rows, "version", "1.6.45");
        let got: Vec<_> = rows.iter().collect();
        assert_eq!(
            got,
            [
                (&b"pid"[..], &b"42"[..]),
                (b"hotkey", b"1 a%20b 3.00"),
                (b"version", b"1.6.45"),
            ]
        );
        assert_eq!(
            rows.text(),
            "STAT pid 42\r\nSTAT hotkey 1 a%20b 3.00\r\nSTAT version 1.6.45\r\n"
        );
    }
}
