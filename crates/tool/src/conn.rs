//! A connection to one memcached-protocol server: `host[:port]` over TCP
//! (port 11211 when none is given, as memcached-tool does) or a unix
//! socket path (any address holding a `/`). It sends text commands and
//! reads the replies line by line: `stats` sections into name/value pairs,
//! raw lines for dumps, exact byte counts for values.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
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

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// One open connection.
pub(crate) struct Conn {
    io: BufReader<Stream>,
}

/// `stats` pairs in the server's order.
pub(crate) type Stats = Vec<(String, String)>;

impl Conn {
    /// Connects to `addr` (already `normalize`d or not).
    pub(crate) fn connect(addr: &str) -> io::Result<Conn> {
        let addr = normalize(addr);
        let stream = if addr.contains('/') {
            let s = UnixStream::connect(&addr)?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            Stream::Unix(s)
        } else {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
            let mut found = None;
            for sa in addr.to_socket_addrs()? {
                match TcpStream::connect_timeout(&sa, IO_TIMEOUT) {
                    Ok(s) => {
                        found = Some(s);
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            let s = found.ok_or(last)?;
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))?;
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        };
        Ok(Conn {
            io: BufReader::with_capacity(64 * 1024, stream),
        })
    }

    /// Writes `bytes` whole.
    pub(crate) fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.io.get_mut().write_all(bytes)
    }

    /// The next line without its `\r\n` (or `\n`); an error at end of
    /// stream.
    pub(crate) fn line(&mut self) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        let n = self.io.read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        Ok(buf)
    }

    /// Exactly `n` bytes followed by `\r\n`.
    pub(crate) fn value(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; n + 2];
        self.io.read_exact(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// `stats` or `stats <sub>`: the `STAT name value` pairs up to `END`.
    /// A reply that is an error line (`ERROR`, `CLIENT_ERROR ...`,
    /// `SERVER_ERROR ...`) is returned as `Err` with that line.
    pub(crate) fn stats(&mut self, sub: &str) -> io::Result<Stats> {
        let cmd = if sub.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {sub}\r\n")
        };
        self.send(cmd.as_bytes())?;
        let mut out = Vec::new();
        loop {
            let line = self.line()?;
            let line = String::from_utf8_lossy(&line);
            if line == "END" {
                return Ok(out);
            }
            if let Some(rest) = line.strip_prefix("STAT ") {
                let (name, value) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push((name.to_string(), value.to_string()));
            } else if line.contains("ERROR") {
                return Err(io::Error::new(io::ErrorKind::Unsupported, line.to_string()));
            }
        }
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
