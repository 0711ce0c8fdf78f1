//! Servers and clients for the replication tests: a `Node` is an osmium
//! process on a loopback port (by default holding the tests' replication
//! secret, a mode 0600 file under Cargo's target tmp directory), a
//! `Client` a text-protocol connection to one (over TLS to a node started
//! with `-Z`: `tls`; over Noise frames after a peer's handshake: `peer`).
//! `scenarios` holds the tests run both plain and over TLS.
#![allow(dead_code)] // each test crate uses a different subset

mod peer;
pub(crate) mod scenarios;
pub(crate) mod tls;
#[allow(unused_imports)] // replication.rs runs no handshake of its own
pub(crate) use peer::*;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use osmium_protocol::replication_link::NoiseStream;
use osmium_test_harness::Running;

pub(crate) const OSMIUM: &str = env!("CARGO_BIN_EXE_osmium");

/// The replication tests' directory under Cargo's target tmp directory.
fn scratch() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replication");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A path in `scratch()` no other test (or test process) uses.
fn scratch_path(what: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    scratch().join(format!("{what}-{}-{n}", std::process::id()))
}

/// Writes `content` to `path` with permission bits `mode` (by a rename,
/// so a reader sees the old file or the new one).
fn write_with_mode(path: &PathBuf, content: &[u8], mode: u32) {
    let tmp = scratch_path("writing");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .unwrap();
    f.write_all(content).unwrap();
    // The mode given to open() passed through the umask.
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A secret file a test made, removed when dropped (a server reads its
/// secret at start only).
pub(crate) struct SecretFile(PathBuf);

impl SecretFile {
    pub(crate) fn new(content: &[u8], mode: u32) -> SecretFile {
        let path = scratch_path("secret");
        write_with_mode(&path, content, mode);
        SecretFile(path)
    }

    pub(crate) fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A config file (`--config-file`) a test made and rewrites, removed
/// when dropped.
pub(crate) struct ConfigFile(PathBuf);

impl ConfigFile {
    pub(crate) fn new(content: &str) -> ConfigFile {
        let f = ConfigFile(scratch_path("osmium.conf"));
        f.write(content);
        f
    }

    /// Replaces its contents (by a rename: a reader sees the old file or
    /// the new one).
    pub(crate) fn write(&self, content: &str) {
        write_with_mode(&self.0, content.as_bytes(), 0o644);
    }

    /// `--config-file <path>`.
    pub(crate) fn args(&self) -> Vec<String> {
        vec!["--config-file".into(), self.0.display().to_string()]
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The secret every `Node::start` server holds (128 random bits as hex,
/// as a secret must hold at least).
pub(crate) const SECRET: &[u8] = b"5f0c2a9e4d7b1386a0f3c5e7d9b2a4c6";
/// Another good secret, which no `Node::start` server holds.
pub(crate) const OTHER_SECRET: &[u8] = b"c8d1e2f3a4b5968778695a4b3c2d1e0f";

/// The file of `SECRET` (mode 0600, a trailing newline): one fixed file,
/// written once per test process.
pub(crate) fn default_secret() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = scratch().join("secret");
        let mut content = SECRET.to_vec();
        content.push(b'\n');
        write_with_mode(&path, &content, 0o600);
        path.display().to_string()
    })
}

/// `--replication-secret <file>`.
pub(crate) fn secret_args(file: &str) -> Vec<String> {
    vec!["--replication-secret".into(), file.into()]
}

/// Starts osmium with the tests' usual flags (those of
/// `Node::start_bare`), `args` and no secret of the tests' own; waits for
/// its exit: its status and standard error (a start that must fail).
pub(crate) fn start_refused(args: &[String]) -> (ExitStatus, String) {
    let out = crate::common::osmium()
        .threads(2)
        .memory(64)
        .args(args)
        .run_to_exit();
    (out.status, out.stderr)
}

/// A server process, killed (by its PID) when dropped.
pub(crate) struct Node {
    server: Running,
    pub port: u16,
    /// Its clients speak TLS with this (a node started with `-Z`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Node {
    /// A server holding the tests' secret (`default_secret`).
    pub(crate) fn start(port: u16, args: &[String]) -> Node {
        let mut all = secret_args(default_secret());
        all.extend_from_slice(args);
        Node::start_bare(port, &all)
    }

    /// A server with `args` only (no secret unless they give one). Its
    /// peers name `port`, so a start that finds the port taken is tried
    /// again on it (`osmium_test_harness::Start::only_port`).
    pub(crate) fn start_bare(port: u16, args: &[String]) -> Node {
        let server = crate::common::osmium()
            .only_port(port)
            .threads(2)
            .memory(64)
            .args(args)
            .start();
        Node {
            server,
            port,
            tls: None,
        }
    }

    /// What it wrote to standard error so far.
    pub(crate) fn stderr(&self) -> String {
        self.server.stderr_text()
    }

    pub(crate) fn kill(&mut self) {
        self.server.kill();
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// Sends it signal `sig` (`HUP`, `STOP`, `CONT`) by its PID.
    pub(crate) fn signal(&self, sig: &str) {
        osmium_test_harness::signal_named(self.server.pid(), sig);
    }

    /// Its clients speak TLS with `config`.
    pub(crate) fn over_tls(mut self, config: Arc<rustls::ClientConfig>) -> Node {
        self.tls = Some(config);
        self
    }

    /// A connection, TLS if the node's clients speak it.
    pub(crate) fn client(&self) -> Client {
        match &self.tls {
            Some(config) => tls_client(self.port, config.clone()),
            None => plain_client(self.port),
        }
    }
}

pub(crate) fn to(port: u16) -> Vec<String> {
    vec!["--replicate-to".into(), format!("127.0.0.1:{port}")]
}

pub(crate) fn with(mut a: Vec<String>, more: &[&str]) -> Vec<String> {
    a.extend(more.iter().map(|s| s.to_string()));
    a
}

pub(crate) fn wait(what: &str, ok: impl FnMut() -> bool) {
    osmium_test_harness::wait_until(what, Duration::from_secs(10), ok);
}

/// A plain-text connection to `port` on 127.0.0.1.
pub(crate) fn plain_client(port: u16) -> Client {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    Client::new(Wire::Plain(Arc::new(s)))
}

/// A TLS connection to `port` on 127.0.0.1 with `config`, its handshake
/// done (a refused one panics; see `tls::handshake`).
pub(crate) fn tls_client(port: u16, config: Arc<rustls::ClientConfig>) -> Client {
    let tls = tls::handshake(port, config).expect("TLS handshake");
    Client::new(Wire::Tls(Arc::new(Mutex::new(tls))))
}

/// A client's connection: the reading and the writing end share it.
#[derive(Clone)]
pub(crate) enum Wire {
    Plain(Arc<TcpStream>),
    Tls(Arc<Mutex<tls::TlsConn>>),
    /// A link's Noise frames after a peer's handshake (`peer`).
    Noise(Arc<Mutex<NoiseStream<TcpStream>>>),
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Wire::Plain(s) => (&**s).read(buf),
            Wire::Tls(s) => s.lock().unwrap().read(buf),
            Wire::Noise(s) => s.lock().unwrap().read(buf),
        }
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Wire::Plain(s) => (&**s).write(buf),
            Wire::Tls(s) => s.lock().unwrap().write(buf),
            Wire::Noise(s) => s.lock().unwrap().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Wire::Plain(s) => (&**s).flush(),
            Wire::Tls(s) => s.lock().unwrap().flush(),
            Wire::Noise(s) => s.lock().unwrap().flush(),
        }
    }
}

pub(crate) struct Client {
    pub r: BufReader<Wire>,
    pub w: Wire,
}

/// An item as `mg <key> v f t c` shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    pub value: Vec<u8>,
    pub flags: u32,
    pub ttl: i64,
    pub cas: u64,
}

impl Client {
    pub(crate) fn new(wire: Wire) -> Client {
        Client {
            r: BufReader::new(wire.clone()),
            w: wire,
        }
    }

    pub(crate) fn send(&mut self, b: &[u8]) {
        self.w.write_all(b).unwrap();
    }

    pub(crate) fn line(&mut self) -> String {
        let mut buf = Vec::new();
        self.r.read_until(b'\n', &mut buf).unwrap();
        assert!(buf.ends_with(b"\r\n"), "reply {buf:?}");
        buf.truncate(buf.len() - 2);
        String::from_utf8_lossy(&buf).into_owned()
    }

    pub(crate) fn call(&mut self, b: &[u8]) -> String {
        self.send(b);
        self.line()
    }

    pub(crate) fn mg(&mut self, key: &str) -> Option<Item> {
        let line = self.call(format!("mg {key} v f t c\r\n").as_bytes());
        if line == "EN" {
            return None;
        }
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f[0], "VA", "{line}");
        let len: usize = f[1].parse().unwrap();
        let mut item = Item {
            value: vec![0; len + 2],
            flags: 0,
            ttl: 0,
            cas: 0,
        };
        self.r.read_exact(&mut item.value).unwrap();
        item.value.truncate(len);
        for t in &f[2..] {
            let (k, v) = t.split_at(1);
            match k {
                "f" => item.flags = v.parse().unwrap(),
                "t" => item.ttl = v.parse().unwrap(),
                "c" => item.cas = v.parse().unwrap(),
                _ => {}
            }
        }
        Some(item)
    }

    pub(crate) fn stats(&mut self) -> HashMap<String, String> {
        self.send(b"stats\r\n");
        let mut out = HashMap::new();
        loop {
            let line = self.line();
            if line == "END" {
                return out;
            }
            let mut f = line.splitn(3, ' ');
            f.next();
            out.insert(f.next().unwrap().into(), f.next().unwrap_or("").into());
        }
    }

    pub(crate) fn stat(&mut self, name: &str) -> String {
        self.stats().remove(name).unwrap_or_default()
    }

    /// A binary request; returns (status, body) unless `quiet`.
    pub(crate) fn binary(
        &mut self,
        op: u8,
        key: &[u8],
        extras: &[u8],
        value: &[u8],
    ) -> (u16, Vec<u8>) {
        let mut p = vec![0x80, op];
        p.extend_from_slice(&(key.len() as u16).to_be_bytes());
        p.push(extras.len() as u8);
        p.extend_from_slice(&[0, 0, 0]);
        let body = extras.len() + key.len() + value.len();
        p.extend_from_slice(&(body as u32).to_be_bytes());
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(extras);
        p.extend_from_slice(key);
        p.extend_from_slice(value);
        self.send(&p);
        let mut h = [0u8; 24];
        self.r.read_exact(&mut h).unwrap();
        let len = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        let mut body = vec![0; len];
        self.r.read_exact(&mut body).unwrap();
        (u16::from_be_bytes([h[6], h[7]]), body)
    }
}

/// Whether `b` holds what `a` holds for every key (TTL within 1 s).
pub(crate) fn same(a: &mut Client, b: &mut Client, keys: &[&str]) -> Result<(), String> {
    for k in keys {
        let (x, y) = (a.mg(k), b.mg(k));
        let close = match (&x, &y) {
            (Some(x), Some(y)) => {
                x.value == y.value
                    && x.flags == y.flags
                    && x.cas == y.cas
                    && (x.ttl - y.ttl).abs() <= 1
            }
            (None, None) => true,
            _ => false,
        };
        if !close {
            return Err(format!("{k}: primary {x:?}, replica {y:?}"));
        }
    }
    Ok(())
}

pub(crate) fn converge(a: &mut Client, b: &mut Client, keys: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match same(a, b, keys) {
            Ok(()) => return,
            Err(e) => assert!(Instant::now() < deadline, "replica differs: {e}"),
        }
        std::thread::sleep(Duration::from_millis(30));
    }
}
