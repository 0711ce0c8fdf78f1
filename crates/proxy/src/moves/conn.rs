//! The migration's blocking connections to a pool's servers: TCP or a
//! unix socket, and over TLS when the pool has `tls.servers` (the pool's
//! rustls client configuration, each server's certificate verified
//! against the name the loop's connections use), with socket timeouts;
//! lines and exact byte counts read through one buffer.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, ClientConnection, StreamOwned};
use rustls_pki_types::ServerName;

use crate::config::Addr;

/// Socket timeouts (connect, each read and write).
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS to the servers of a moving pool: the pool's client configuration
/// and, by source index, the name each server's certificate must carry.
#[derive(Clone, Debug)]
pub struct MigrationTls {
    /// The pool's client configuration.
    pub config: Arc<ClientConfig>,
    /// By source index, the name its certificate must carry (None: none can be
    /// made, as for a unix socket without `server_name`).
    pub names: Vec<Option<ServerName<'static>>>,
}

trait Rw: Read + Write + Send {}
impl<T: Read + Write + Send> Rw for T {}

/// A blocking connection to one server.
pub struct Conn {
    r: BufReader<Box<dyn Rw>>,
}

fn tls_over<S: Read + Write + Send + 'static>(
    sock: S,
    tls: (&Arc<ClientConfig>, &ServerName<'static>),
) -> io::Result<Box<dyn Rw>> {
    let conn = ClientConnection::new(tls.0.clone(), tls.1.clone()).map_err(io::Error::other)?;
    let mut s = StreamOwned::new(conn, sock);
    // The handshake now, so that a server whose certificate does not
    // verify fails the connect, not a later read.
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(Box::new(s))
}

impl Conn {
    /// Connects to `addr` (with TLS when `tls` is given).
    pub fn open(
        addr: &Addr,
        tls: Option<(&Arc<ClientConfig>, &ServerName<'static>)>,
    ) -> io::Result<Conn> {
        let s: Box<dyn Rw> = match addr {
            Addr::Tcp { host, port } => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                let mut found = None;
                for a in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&a, IO_TIMEOUT) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = found.ok_or(last)?;
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                match tls {
                    Some(t) => tls_over(s, t)?,
                    None => Box::new(s),
                }
            }
            Addr::Unix(p) => {
                let s = UnixStream::connect(p)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                match tls {
                    Some(t) => tls_over(s, t)?,
                    None => Box::new(s),
                }
            }
        };
        Ok(Conn {
            r: BufReader::with_capacity(64 << 10, s),
        })
    }

    /// Writes `bytes` whole and flushes them.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let w = self.r.get_mut();
        w.write_all(bytes)?;
        w.flush()
    }

    /// The next line, with its line end.
    pub fn line(&mut self, line: &mut Vec<u8>) -> io::Result<()> {
        line.clear();
        if self.r.read_until(b'\n', line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    /// Exactly `n` bytes into `out`.
    pub fn exact(&mut self, n: usize, out: &mut Vec<u8>) -> io::Result<()> {
        out.resize(n, 0);
        self.r.read_exact(out)
    }

    /// Reads lines up to `MN` (after a batch of quiet commands); how many
    /// other lines (failures) came before it.
    pub fn until_mn(&mut self) -> io::Result<usize> {
        let mut line = Vec::new();
        let mut others = 0;
        loop {
            self.line(&mut line)?;
            if line.starts_with(b"MN") {
                return Ok(others);
            }
            others += 1;
        }
    }

    /// Sends `command` and reads its `STAT` lines up to `END` (or an
    /// `ERROR`): all of them.
    pub fn stats(&mut self, command: &[u8]) -> io::Result<Vec<u8>> {
        self.send(command)?;
        let mut all = Vec::new();
        let mut line = Vec::new();
        loop {
            self.line(&mut line)?;
            all.extend_from_slice(&line);
            if line.starts_with(b"END") || line.starts_with(b"ERROR") {
                return Ok(all);
            }
        }
    }
}
