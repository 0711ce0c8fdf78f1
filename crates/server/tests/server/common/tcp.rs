//! A server process on a free loopback TCP port, killed when dropped, and
//! a line-at-a-time client for it: the launcher and client the dump and
//! flash suites share.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A started server: its process and the port it listens on.
pub(crate) struct TcpServer {
    pub child: Child,
    pub port: u16,
}

impl TcpServer {
    /// Runs `command(port)` (stdio to /dev/null) on a free port, on
    /// another one when that port was taken meanwhile.
    pub(crate) fn start(mut command: impl FnMut(u16) -> Command) -> TcpServer {
        let (child, port) = super::start_on_free_port(|port| {
            command(port)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start server")
        });
        TcpServer { child, port }
    }

    /// A connection with a 10 s read timeout.
    pub(crate) fn stream(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    pub(crate) fn client(&self) -> LineClient {
        let s = self.stream();
        LineClient {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection read line by line (the suites add their commands).
pub(crate) struct LineClient {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl LineClient {
    pub(crate) fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).unwrap();
    }

    pub(crate) fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }
}
