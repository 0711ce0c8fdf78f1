//! [`Client`]: a blocking memcached-protocol client connection, TCP,
//! unix-domain or TLS over TCP, that sends requests (written with
//! `osmium_protocol::client::encode`) and reads replies framed by
//! `osmium_protocol::client::reply`: a whole reply of an expected shape,
//! a line, a value's bytes, a `stats` section as name/value pairs.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use osmium_protocol::client::reply::{self, reply_len, Expect};
use rustls::{ClientConfig, ClientConnection, StreamOwned};
use rustls_pki_types::ServerName;

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 64 * 1024;

/// A blocking stream to a server.
enum Blocking {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Blocking {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Blocking::Tcp(s) => s.read(buf),
            Blocking::Unix(s) => s.read(buf),
            Blocking::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Blocking {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Blocking::Tcp(s) => s.write(buf),
            Blocking::Unix(s) => s.write(buf),
            Blocking::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Blocking::Tcp(s) => s.flush(),
            Blocking::Unix(s) => s.flush(),
            Blocking::Tls(s) => s.flush(),
        }
    }
}

/// One open connection and the bytes read from it not yet taken.
pub struct Client {
    stream: Blocking,
    buf: Vec<u8>,
    /// `buf[start..]` is not taken yet.
    start: usize,
}

/// `stats` pairs in the server's order.
pub type Stats = Vec<(String, String)>;

impl Client {
    /// Connects to `addr`: a unix socket path when it holds a `/`, else
    /// `host:port` over TCP (each address it resolves to tried in turn,
    /// without Nagle). `timeout` bounds the connect and every read and
    /// write.
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<Client> {
        if addr.contains('/') {
            let s = UnixStream::connect(addr)?;
            s.set_read_timeout(Some(timeout))?;
            s.set_write_timeout(Some(timeout))?;
            return Ok(Client::over(Blocking::Unix(s)));
        }
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for sa in addr.to_socket_addrs()? {
            match tcp(sa, timeout) {
                Ok(s) => return Ok(Client::over(Blocking::Tcp(s))),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Connects to `addr` over TLS, the server's certificate verified for
    /// `name` by `config`; the handshake is done before this returns.
    pub fn connect_tls(
        addr: SocketAddr,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        timeout: Duration,
    ) -> io::Result<Client> {
        let mut sock = tcp(addr, timeout)?;
        let mut conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock)?;
        }
        Ok(Client::over(Blocking::Tls(Box::new(StreamOwned::new(
            conn, sock,
        )))))
    }

    fn over(stream: Blocking) -> Client {
        Client {
            stream,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// Writes `bytes` whole.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Reads more from the socket; an error at its end.
    fn fill(&mut self) -> io::Result<()> {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + READ_CHUNK, 0);
        let n = loop {
            match self.stream.read(&mut self.buf[len..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r,
            }
        };
        self.buf.truncate(len + *n.as_ref().unwrap_or(&0));
        match n? {
            0 => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )),
            _ => Ok(()),
        }
    }

    /// Takes the first `n` bytes not taken yet.
    fn take(&mut self, n: usize) -> Vec<u8> {
        let out = self.buf[self.start..self.start + n].to_vec();
        self.start += n;
        out
    }

    /// The next whole reply of the shape `expect` (its bytes as sent).
    /// A reply that cannot be framed is `InvalidData`.
    pub fn reply(&mut self, expect: Expect) -> io::Result<Vec<u8>> {
        loop {
            match reply_len(&self.buf[self.start..], expect) {
                Ok(Some(n)) => return Ok(self.take(n)),
                Ok(None) => self.fill()?,
                Err(reply::Desync) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a reply that cannot be framed",
                    ))
                }
            }
        }
    }

    /// The next line without its `\r\n` (or `\n`).
    pub fn line(&mut self) -> io::Result<Vec<u8>> {
        let mut line = self.reply(Expect::Line)?;
        while matches!(line.last(), Some(b'\n' | b'\r')) {
            line.pop();
        }
        Ok(line)
    }

    /// Exactly `n` bytes, and the `\r\n` after them (dropped).
    pub fn value(&mut self, n: usize) -> io::Result<Vec<u8>> {
        while self.buf.len() - self.start < n + 2 {
            self.fill()?;
        }
        let mut v = self.take(n + 2);
        v.truncate(n);
        Ok(v)
    }

    /// `stats` or `stats <sub>`: the `STAT name value` pairs up to `END`.
    /// A reply that is an error line (`ERROR`, `CLIENT_ERROR ...`,
    /// `SERVER_ERROR ...`) is `Err` (`Unsupported`) with that line.
    pub fn stats(&mut self, sub: &str) -> io::Result<Stats> {
        let cmd = if sub.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {sub}\r\n")
        };
        self.send(cmd.as_bytes())?;
        let r = self.reply(Expect::Stats)?;
        if !r.starts_with(b"STAT ") && !r.starts_with(b"END") {
            let line = String::from_utf8_lossy(&r);
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                line.trim_end().to_string(),
            ));
        }
        Ok(reply::stats(&r)
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect())
    }
}

/// A TCP connection to `sa` within `timeout`, its reads and writes bound
/// by it too, without Nagle.
fn tcp(sa: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&sa, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server over a real socket: reads a request, answers
    /// `answer` in pieces of 7 bytes.
    fn serve(answer: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut req = [0u8; 256];
            let _ = s.read(&mut req).unwrap();
            s.set_nodelay(true).unwrap();
            for piece in answer.chunks(7) {
                s.write_all(piece).unwrap();
            }
        });
        addr
    }

    #[test]
    fn stats_come_as_pairs_in_order() {
        let addr =
            serve(b"STAT pid 42\r\nSTAT version 1.6.45\r\nEND\r\nVALUE k 0 3\r\nabc\r\nEND\r\n");
        let mut c = Client::connect(&addr.to_string(), Duration::from_secs(10)).unwrap();
        let s = c.stats("").unwrap();
        assert_eq!(
            s,
            [
                ("pid".into(), "42".into()),
                ("version".into(), "1.6.45".into())
            ]
        );
        assert_eq!(c.line().unwrap(), b"VALUE k 0 3");
        assert_eq!(c.value(3).unwrap(), b"abc");
        assert_eq!(c.reply(Expect::Line).unwrap(), b"END\r\n");
        let e = c.line().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn an_error_line_instead_of_stats_is_an_error() {
        let addr = serve(b"CLIENT_ERROR bad command line format\r\n");
        let mut c = Client::connect(&addr.to_string(), Duration::from_secs(10)).unwrap();
        let e = c.stats("nonsense").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert_eq!(e.to_string(), "CLIENT_ERROR bad command line format");
    }
}
