//! Memcached binary-protocol packets built and parsed by hand, independently
//! of the server's protocol crate, and an osmium server to send them to:
//! what the binary protocol and authentication tests share.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::target_server;
use osmium_test_harness::Running;

pub(crate) const GET: u8 = 0x00;
pub(crate) const SET: u8 = 0x01;
pub(crate) const ADD: u8 = 0x02;
pub(crate) const REPLACE: u8 = 0x03;
pub(crate) const DELETE: u8 = 0x04;
pub(crate) const INCR: u8 = 0x05;
pub(crate) const DECR: u8 = 0x06;
pub(crate) const QUIT: u8 = 0x07;
pub(crate) const FLUSH: u8 = 0x08;
pub(crate) const GETQ: u8 = 0x09;
pub(crate) const NOOP: u8 = 0x0a;
pub(crate) const VERSION: u8 = 0x0b;
pub(crate) const GETK: u8 = 0x0c;
pub(crate) const GETKQ: u8 = 0x0d;
pub(crate) const APPEND: u8 = 0x0e;
pub(crate) const PREPEND: u8 = 0x0f;
pub(crate) const STAT: u8 = 0x10;
pub(crate) const SETQ: u8 = 0x11;
pub(crate) const DELETEQ: u8 = 0x14;
pub(crate) const INCRQ: u8 = 0x15;
pub(crate) const QUITQ: u8 = 0x17;
pub(crate) const APPENDQ: u8 = 0x19;
pub(crate) const VERBOSITY: u8 = 0x1b;
pub(crate) const TOUCH: u8 = 0x1c;
pub(crate) const GAT: u8 = 0x1d;
pub(crate) const GATQ: u8 = 0x1e;
pub(crate) const SASL_LIST: u8 = 0x20;
pub(crate) const SASL_AUTH: u8 = 0x21;
pub(crate) const SASL_STEP: u8 = 0x22;
pub(crate) const GATK: u8 = 0x23;

pub(crate) const NOT_FOUND: u16 = 0x01;
pub(crate) const EXISTS: u16 = 0x02;
pub(crate) const TOO_LARGE: u16 = 0x03;
pub(crate) const EINVAL: u16 = 0x04;
pub(crate) const NOT_STORED: u16 = 0x05;
pub(crate) const NON_NUMERIC: u16 = 0x06;
pub(crate) const AUTH_ERROR: u16 = 0x20;
pub(crate) const AUTH_CONTINUE: u16 = 0x21;
pub(crate) const UNKNOWN: u16 = 0x81;

/// The current target (`common::target_server`) on a free port.
pub(crate) struct Server(Running);

impl std::ops::Deref for Server {
    type Target = Running;

    fn deref(&self) -> &Running {
        &self.0
    }
}

impl Server {
    pub(crate) fn start(args: &[&str]) -> Server {
        Self::start_with_env(args, &[])
    }

    pub(crate) fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut server = target_server().env_remove("MEMCACHED_SASL_PWDB").args(args);
        for (k, v) in env {
            server = server.env(k, v);
        }
        Server(server.start())
    }

    /// A connection with a 5 s read timeout, Nagle off.
    pub(crate) fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }
}

/// Builds a request packet.
#[derive(Clone, Default)]
pub(crate) struct Req {
    pub op: u8,
    pub extras: Vec<u8>,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub opaque: u32,
    pub cas: u64,
}

impl Req {
    pub(crate) fn new(op: u8) -> Req {
        Req {
            op,
            ..Req::default()
        }
    }
    pub(crate) fn key(mut self, k: &[u8]) -> Req {
        self.key = k.to_vec();
        self
    }
    pub(crate) fn value(mut self, v: &[u8]) -> Req {
        self.value = v.to_vec();
        self
    }
    pub(crate) fn extras(mut self, e: &[u8]) -> Req {
        self.extras = e.to_vec();
        self
    }
    pub(crate) fn opaque(mut self, o: u32) -> Req {
        self.opaque = o;
        self
    }
    pub(crate) fn cas(mut self, c: u64) -> Req {
        self.cas = c;
        self
    }
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut p = vec![0x80, self.op];
        p.extend_from_slice(&(self.key.len() as u16).to_be_bytes());
        p.push(self.extras.len() as u8);
        p.extend_from_slice(&[0, 0, 0]);
        let body = self.extras.len() + self.key.len() + self.value.len();
        p.extend_from_slice(&(body as u32).to_be_bytes());
        p.extend_from_slice(&self.opaque.to_be_bytes());
        p.extend_from_slice(&self.cas.to_be_bytes());
        p.extend_from_slice(&self.extras);
        p.extend_from_slice(&self.key);
        p.extend_from_slice(&self.value);
        p
    }
}

pub(crate) fn set(key: &[u8], flags: u32, exptime: u32, value: &[u8]) -> Req {
    let mut e = flags.to_be_bytes().to_vec();
    e.extend_from_slice(&exptime.to_be_bytes());
    Req::new(SET).key(key).extras(&e).value(value)
}

pub(crate) fn with_op(mut r: Req, op: u8) -> Req {
    r.op = op;
    r
}

pub(crate) fn arith(op: u8, key: &[u8], delta: u64, initial: u64, exptime: u32) -> Req {
    let mut e = delta.to_be_bytes().to_vec();
    e.extend_from_slice(&initial.to_be_bytes());
    e.extend_from_slice(&exptime.to_be_bytes());
    Req::new(op).key(key).extras(&e)
}

pub(crate) fn expiry(op: u8, key: &[u8], exptime: u32) -> Req {
    Req::new(op).key(key).extras(&exptime.to_be_bytes())
}

pub(crate) fn pipeline(reqs: &[Req]) -> Vec<u8> {
    reqs.iter().flat_map(|r| r.bytes()).collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resp {
    pub op: u8,
    pub status: u16,
    pub opaque: u32,
    pub cas: u64,
    pub extras: Vec<u8>,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

impl Resp {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }
}

/// Parses every complete response in `buf`.
pub(crate) fn parse(buf: &[u8]) -> Vec<Resp> {
    let mut out = Vec::new();
    let mut i = 0;
    while buf.len() >= i + 24 {
        let h = &buf[i..i + 24];
        assert_eq!(h[0], 0x81, "response magic");
        assert_eq!(h[5], 0, "data type");
        let klen = u16::from_be_bytes([h[2], h[3]]) as usize;
        let elen = h[4] as usize;
        let blen = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if buf.len() < i + 24 + blen {
            break;
        }
        let body = &buf[i + 24..i + 24 + blen];
        out.push(Resp {
            op: h[1],
            status: u16::from_be_bytes([h[6], h[7]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
            extras: body[..elen].to_vec(),
            key: body[elen..elen + klen].to_vec(),
            value: body[elen + klen..].to_vec(),
        });
        i += 24 + blen;
    }
    out
}

/// Bytes making up exactly `n` responses.
pub(crate) fn read_responses_raw(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    while parse(&buf).len() < n {
        match s.read(&mut chunk) {
            Ok(0) => panic!("closed after {} of {n} responses", parse(&buf).len()),
            Ok(k) => buf.extend_from_slice(&chunk[..k]),
            Err(e) => panic!("read failed after {} of {n}: {e}", parse(&buf).len()),
        }
    }
    buf
}

pub(crate) fn read_responses(s: &mut TcpStream, n: usize) -> Vec<Resp> {
    let got = parse(&read_responses_raw(s, n));
    assert_eq!(got.len(), n, "{got:?}");
    got
}

pub(crate) fn exchange(s: &mut TcpStream, reqs: &[Req], n: usize) -> Vec<Resp> {
    s.write_all(&pipeline(reqs)).unwrap();
    read_responses(s, n)
}

pub(crate) fn one(s: &mut TcpStream, req: Req) -> Resp {
    exchange(s, &[req], 1).remove(0)
}

/// Everything the server sends until it closes the connection.
pub(crate) fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("connection not closed: {e} after {got:?}"),
    }
    got
}

/// True if nothing more arrives for a short while (the connection is open
/// and idle).
pub(crate) fn quiet_for_a_moment(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut b = [0u8; 64];
    let r = s.read(&mut b);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut)
}

pub(crate) fn stats(s: &mut TcpStream, group: &[u8]) -> Vec<(String, String)> {
    s.write_all(&Req::new(STAT).key(group).bytes()).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let rs = parse(&buf);
        if rs.last().is_some_and(|r| r.key.is_empty()) {
            return rs
                .iter()
                .filter(|r| !r.key.is_empty())
                .map(|r| {
                    assert_eq!((r.op, r.status), (STAT, 0));
                    (String::from_utf8_lossy(&r.key).into_owned(), r.text())
                })
                .collect();
        }
        let k = s.read(&mut chunk).unwrap();
        assert!(k > 0, "closed during stats");
        buf.extend_from_slice(&chunk[..k]);
    }
}

pub(crate) fn stat(all: &[(String, String)], name: &str) -> String {
    all.iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no stat {name}"))
        .1
        .clone()
}
