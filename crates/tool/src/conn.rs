//! A connection to one memcached-protocol server: `host[:port]` over TCP
//! (port 11211 when none is given, as memcached-tool does) or a unix
//! socket path (any address holding a `/`), through `osmium_net::Client`,
//! which sends text commands and reads the replies: `stats` sections into
//! name/value pairs, raw lines for dumps, exact byte counts for values.

use std::io;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

/// How long a connect, a read or a write may wait before the server is
/// taken as gone.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The address memcached-tool would use: unix paths as given, else
/// `:11211` appended unless the address ends in `:<digits>`.
pub(crate) fn normalize(addr: &str) -> String {
    if addr.contains('/') {
        return addr.to_string();
    }
    match addr.rsplit_once(':') {
        Some((_, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            addr.to_string()
        }
        _ => format!("{addr}:11211"),
    }
}

/// One open connection: `osmium_net`'s blocking client (its replies
/// framed by `osmium_protocol::client`).
pub(crate) struct Conn(osmium_net::Client);

impl Conn {
    /// Connects to `addr` (already `normalize`d or not).
    pub(crate) fn connect(addr: &str) -> io::Result<Conn> {
        Conn::connect_within(addr, IO_TIMEOUT)
    }

    /// Connects to `addr`, the connect and every read and write bounded by
    /// `timeout`.
    pub(crate) fn connect_within(addr: &str, timeout: Duration) -> io::Result<Conn> {
        osmium_net::Client::connect(&normalize(addr), timeout).map(Conn)
    }
}

/// `send`, `line`, `value`, `stats`.
impl Deref for Conn {
    type Target = osmium_net::Client;
    fn deref(&self) -> &osmium_net::Client {
        &self.0
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut osmium_net::Client {
        &mut self.0
    }
}

/// `%XX` sequences decoded (as memcached-tool's `s/%(.{2})/chr hex $1/eg`).
pub(crate) fn uri_decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' && i + 2 < s.len() {
            let hex = std::str::from_utf8(&s[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_memcached_tool() {
        assert_eq!(normalize("localhost"), "localhost:11211");
        assert_eq!(normalize("10.0.0.5:22122"), "10.0.0.5:22122");
        assert_eq!(normalize("/tmp/mc.sock"), "/tmp/mc.sock");
        assert_eq!(normalize("host:"), "host::11211");
    }

    #[test]
    fn decodes_and_encodes() {
        assert_eq!(uri_decode(b"a%20b%2"), b"a b%2");
        assert_eq!(uri_decode(b"%zz%41"), b"%zzA");
    }
}
