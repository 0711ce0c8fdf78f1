//! What the warm-restart tests share: a fresh directory for a memory file,
//! the builder of a server on it (osmium or memcached, the current
//! target's), how they stop, and a text-protocol client with the item
//! checks the tests share.
#![allow(dead_code)] // each test uses a different subset

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{target, target_server, Target};
pub(crate) use osmium_test_harness::{CacheServer, Running};

/// The settings every test starts with (a restart must repeat them).
pub(crate) const SETTINGS: [&str; 4] = ["-m", "64", "-I", "2m"];

// ---------------------------------------------------------------------------
// The memory file's directory, servers, clients
// ---------------------------------------------------------------------------

/// A fresh directory for one test's memory file, removed when dropped.
pub(crate) struct MemDir {
    pub dir: PathBuf,
}

impl MemDir {
    pub(crate) fn new() -> MemDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = base.join(format!(
            "osmium-restart-test-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).expect("create the memory file's directory");
        MemDir { dir }
    }

    pub(crate) fn file(&self) -> PathBuf {
        self.dir.join("cache.mem")
    }
}

impl Drop for MemDir {
    fn drop(&mut self) {
        // memcached also leaves FILE.meta beside FILE.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How a server stopped: the time it was seen gone, and its stderr.
pub(crate) struct Stopped {
    pub at: SystemTime,
    pub stderr: String,
}

/// The current target (`common::target_server`) serving from memory file
/// `file`, with `args`.
pub(crate) fn server(file: &Path, args: &[&str]) -> CacheServer {
    target_server().args(args).memory_file(file)
}

/// A text-protocol client of `srv` (20 s read timeout, Nagle off).
pub(crate) fn client(srv: &Running) -> Client {
    Client::new(raw(srv))
}

/// A connection to `srv` with a 20 s read timeout, Nagle off.
pub(crate) fn raw(srv: &Running) -> TcpStream {
    let s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Waits for `srv` to exit; its status and everything it wrote on stderr.
pub(crate) fn exited(srv: &mut Running) -> (ExitStatus, Stopped) {
    let status = srv.wait_exit();
    let at = SystemTime::now();
    let stderr = srv.stderr_text();
    (status, Stopped { at, stderr })
}

/// Stops `srv` with `sig` and checks it exits with status 0.
pub(crate) fn stop(srv: &mut Running, sig: i32) -> Stopped {
    srv.send_signal(sig);
    let (status, stopped) = exited(srv);
    assert_eq!(
        status.code(),
        Some(0),
        "{:?}: signal {sig}: {status:?}; stderr {:?}",
        target(),
        stopped.stderr
    );
    stopped
}

/// memcached 1.6.45 takes a memory file over only if the wall clock's second
/// moved on since the stop (it refuses `stop_time` when its `time_delta` is
/// not positive: "restart incompatible due to setting for [stop_time]");
/// osmium restarts at once.
pub(crate) fn pause_before_restart(stopped: &Stopped) {
    if target() != Target::Memcached {
        return;
    }
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_secs();
    while secs(SystemTime::now()) <= secs(stopped.at) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A stored item as `gets` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    pub flags: u32,
    pub value: Vec<u8>,
    pub cas: u64,
}

/// A text-protocol client that parses replies by their framing, so values
/// may hold any bytes.
pub(crate) struct Client {
    pub r: BufReader<TcpStream>,
    pub w: TcpStream,
}

impl Client {
    pub(crate) fn new(s: TcpStream) -> Client {
        Client {
            r: BufReader::with_capacity(1 << 16, s.try_clone().unwrap()),
            w: s,
        }
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).unwrap();
    }

    /// One reply line, without its `\r\n`.
    pub(crate) fn line(&mut self) -> String {
        let mut buf = Vec::new();
        self.r.read_until(b'\n', &mut buf).unwrap();
        assert!(buf.ends_with(b"\r\n"), "reply line {buf:?}");
        buf.truncate(buf.len() - 2);
        String::from_utf8(buf).unwrap()
    }

    /// Sends one command line and returns the one-line reply.
    pub(crate) fn call(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes());
        self.line()
    }

    pub(crate) fn storage_bytes(
        cmd: &str,
        key: &str,
        flags: u32,
        exptime: i64,
        value: &[u8],
    ) -> Vec<u8> {
        let mut req = format!("{cmd} {key} {flags} {exptime} {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        req
    }

    /// A text storage command (`set`, `add`, `replace`, `append`,
    /// `prepend`); returns the reply line.
    pub(crate) fn store(
        &mut self,
        cmd: &str,
        key: &str,
        flags: u32,
        exptime: i64,
        value: &[u8],
    ) -> String {
        let req = Self::storage_bytes(cmd, key, flags, exptime, value);
        self.send(&req);
        self.line()
    }

    pub(crate) fn set(&mut self, key: &str, flags: u32, exptime: i64, value: &[u8]) {
        assert_eq!(
            self.store("set", key, flags, exptime, value),
            "STORED",
            "set {key}"
        );
    }

    /// The items of `keys` that are hits (`gets`, 100 keys per command).
    pub(crate) fn gets(&mut self, keys: &[&str]) -> HashMap<String, Item> {
        let mut out = HashMap::new();
        for chunk in keys.chunks(100) {
            self.send(format!("gets {}\r\n", chunk.join(" ")).as_bytes());
            loop {
                let line = self.line();
                if line == "END" {
                    break;
                }
                let f: Vec<&str> = line.split(' ').collect();
                assert!(f.len() == 5 && f[0] == "VALUE", "gets reply {line:?}");
                let len: usize = f[3].parse().unwrap();
                let mut value = vec![0u8; len + 2];
                self.r.read_exact(&mut value).unwrap();
                assert_eq!(&value[len..], b"\r\n", "after the value of {}", f[1]);
                value.truncate(len);
                let item = Item {
                    flags: f[2].parse().unwrap(),
                    value,
                    cas: f[4].parse().unwrap(),
                };
                out.insert(f[1].to_string(), item);
            }
        }
        out
    }

    pub(crate) fn get(&mut self, key: &str) -> Option<Item> {
        self.gets(&[key]).remove(key)
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
            assert_eq!(f.next(), Some("STAT"), "{line:?}");
            out.insert(f.next().unwrap().into(), f.next().unwrap_or("").into());
        }
    }

    pub(crate) fn curr_items(&mut self) -> u64 {
        self.stats()["curr_items"].parse().unwrap()
    }

    /// An item's remaining TTL by the meta get's `t` flag (-1: none), or
    /// None on a miss.
    pub(crate) fn ttl(&mut self, key: &str) -> Option<i64> {
        let line = self.call(&format!("mg {key} t"));
        if line == "EN" {
            return None;
        }
        let t = line
            .strip_prefix("HD ")
            .and_then(|rest| rest.split(' ').find_map(|f| f.strip_prefix('t')))
            .unwrap_or_else(|| panic!("mg {key} t: {line:?}"));
        Some(t.parse().unwrap())
    }
}

/// `len` bytes of every value 0..=255, different for every `seed`.
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        // splitmix64
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Checks that exactly the keys of `live` are hits, with their values and
/// flags, and that `gone` are misses; returns the hits.
pub(crate) fn check_items(
    c: &mut Client,
    live: &BTreeMap<String, (u32, Vec<u8>)>,
    gone: &[String],
    when: &str,
) -> HashMap<String, Item> {
    let who = target();
    let keys: Vec<&str> = live.keys().map(String::as_str).collect();
    let got = c.gets(&keys);
    for (key, (flags, value)) in live {
        let item = got
            .get(key)
            .unwrap_or_else(|| panic!("{who:?} {when}: {key} is missing"));
        assert_eq!(item.flags, *flags, "{who:?} {when}: flags of {key}");
        assert!(
            item.value == *value,
            "{who:?} {when}: the value of {key} differs ({} bytes, expected {})",
            item.value.len(),
            value.len()
        );
    }
    let gone: Vec<&str> = gone.iter().map(String::as_str).collect();
    let back = c.gets(&gone);
    assert!(
        back.is_empty(),
        "{who:?} {when}: deleted keys are back: {:?}",
        back.keys().collect::<Vec<_>>()
    );
    got
}
