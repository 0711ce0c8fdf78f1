//! A line-at-a-time client of a running server (an
//! `osmium_test_harness::Running`): the client the dump and flash suites
//! share.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use osmium_test_harness::Running;

/// A connection read line by line (the suites add their commands).
pub(crate) struct LineClient {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl LineClient {
    /// A connection to `server` with a 10 s read timeout.
    pub(crate) fn to(server: &Running) -> LineClient {
        let s = server.connect();
        LineClient {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).unwrap();
    }

    pub(crate) fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        l
    }
}
