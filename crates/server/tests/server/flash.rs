//! The flash tier (`-o ext_path=FILE:SIZE`) over real sockets: items far
//! beyond `-m` come back byte for byte in every protocol (packed on their
//! way to flash or not), other commands
//! see keys on flash, `flush_all` reaches flash, the `extstore_*` stats,
//! item counts and every dump include the items on flash, a 64 MB file
//! taken as memcached takes it, and bad `ext_path` options stop the server
//! at start with memcached's messages, leaving no file behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::common;
use common::tcp::LineClient as Client;
use osmium_test_harness::Running;

const OSMIUM: &str = env!("CARGO_BIN_EXE_osmium");

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d =
            std::env::temp_dir().join(format!("osmium-flash-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start_osmium(dir: &Dir, extra: &[&str]) -> Running {
    common::osmium()
        .memory(4)
        .threads(2)
        .flash(dir.0.join("flash"), "64m")
        .opt("ext_page_size=4")
        .opt("ext_wbuf_size=1")
        .args(extra)
        .start()
}

impl Client {
    fn set(&mut self, key: &str, flags: u32, v: &[u8]) {
        let mut req = format!("set {key} {flags} 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        self.send(&req);
        assert_eq!(self.line(), "STORED\r\n", "{key}");
    }

    /// A text get of `keys`: key -> (flags, value).
    fn get(&mut self, keys: &[String]) -> Vec<(String, u32, Vec<u8>)> {
        self.send(format!("get {}\r\n", keys.join(" ")).as_bytes());
        let mut out = Vec::new();
        loop {
            let l = self.line();
            if l == "END\r\n" {
                return out;
            }
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f[0], "VALUE", "{l:?}");
            let len: usize = f[3].parse().unwrap();
            let mut v = vec![0; len + 2];
            self.r.read_exact(&mut v).unwrap();
            v.truncate(len);
            out.push((f[1].to_string(), f[2].parse().unwrap(), v));
        }
    }

    fn stat(&mut self, name: &str) -> u64 {
        self.send(b"stats\r\n");
        let mut found = None;
        loop {
            let l = self.line();
            if l == "END\r\n" {
                return found.unwrap_or_else(|| panic!("no stat {name}"));
            }
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.get(1) == Some(&name) {
                found = f[2].parse().ok();
            }
        }
    }
}

fn value(i: usize) -> Vec<u8> {
    let len = 200 + (i * 131) % 3000;
    (0..len).map(|j| (i * 7 + j) as u8).collect()
}

#[test]
fn items_far_beyond_ram_come_back_from_flash_in_every_protocol() {
    let dir = Dir::new("protocols");
    let srv = start_osmium(&dir, &[]);
    let mut c = Client::to(&srv);
    let n = 8_000; // about 13 MB of values into 4 MB of RAM
    for i in 0..n {
        c.set(&format!("key{i}"), i as u32, &value(i));
    }
    assert!(c.stat("extstore_objects_used") > 1000);
    assert_eq!(c.stat("evictions"), 0);
    // Text multi-gets mixing RAM and flash hits, in order.
    for batch in (0..n).collect::<Vec<_>>().chunks(37) {
        let keys: Vec<String> = batch.iter().map(|i| format!("key{i}")).collect();
        let got = c.get(&keys);
        assert_eq!(got.len(), keys.len());
        for ((k, flags, v), i) in got.into_iter().zip(batch) {
            assert_eq!((k, flags, v), (format!("key{i}"), *i as u32, value(*i)));
        }
    }
    assert!(c.stat("get_extstore") > 0);
    // Meta get and binary GET of keys on flash.
    let mut m = Client::to(&srv);
    m.send(b"mg key1 v f\r\n");
    assert_eq!(m.line(), format!("VA {} f1\r\n", value(1).len()));
    let mut v = vec![0; value(1).len() + 2];
    m.r.read_exact(&mut v).unwrap();
    assert_eq!(&v[..value(1).len()], &value(1)[..]);
    let key = b"key2";
    let mut p = vec![0x80, 0x00, 0, key.len() as u8, 0, 0, 0, 0];
    p.extend_from_slice(&(key.len() as u32).to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(key);
    let mut b = TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
    b.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    b.write_all(&p).unwrap();
    let mut h = [0u8; 24];
    b.read_exact(&mut h).unwrap();
    assert_eq!(u16::from_be_bytes([h[6], h[7]]), 0, "found");
    let body = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
    let mut rest = vec![0; body];
    b.read_exact(&mut rest).unwrap();
    assert_eq!(&rest[4..], &value(2)[..]);
    assert_eq!(u32::from_be_bytes(rest[..4].try_into().unwrap()), 2);
}

#[test]
fn other_commands_and_flush_all_see_keys_on_flash() {
    let dir = Dir::new("commands");
    let srv = start_osmium(&dir, &[]);
    let mut c = Client::to(&srv);
    c.set("early", 0, b"abc");
    c.set("count", 0, b"10");
    c.set("gone", 0, b"x");
    for i in 0..4_000 {
        c.set(&format!("filler{i}"), 0, &value(i));
    }
    c.send(b"add early 0 0 1\r\nz\r\n");
    assert_eq!(c.line(), "NOT_STORED\r\n");
    c.send(b"append early 0 0 3\r\ndef\r\n");
    assert_eq!(c.line(), "STORED\r\n");
    c.send(b"incr count 5\r\n");
    assert_eq!(c.line(), "15\r\n");
    c.send(b"delete gone\r\n");
    assert_eq!(c.line(), "DELETED\r\n");
    let got = c.get(&["early".into(), "gone".into(), "count".into()]);
    assert_eq!(
        got,
        vec![
            ("early".into(), 0, b"abcdef".to_vec()),
            ("count".into(), 0, b"15".to_vec())
        ]
    );
    c.send(b"flush_all\r\n");
    assert_eq!(c.line(), "OK\r\n");
    assert!(c
        .get(&["filler1".into(), "filler3999".into(), "early".into()])
        .is_empty());
}

impl Client {
    /// The lines of a reply ending with `end`, without it.
    fn lines_until(&mut self, request: &[u8], end: &str) -> Vec<String> {
        self.send(request);
        let mut out = Vec::new();
        loop {
            let l = self.line();
            assert!(!l.is_empty(), "connection closed");
            if l == end {
                return out;
            }
            out.push(l);
        }
    }

    fn group_stats(&mut self, group: &str) -> std::collections::HashMap<String, String> {
        self.lines_until(format!("stats {group}\r\n").as_bytes(), "END\r\n")
            .iter()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f[1].to_string(), f[2].to_string())
            })
            .collect()
    }
}

/// Distinct keys of a metadump's lines (`key=<k> ...`).
fn metadump_keys(lines: &[String]) -> std::collections::BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("key="))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

#[test]
fn counts_and_dumps_include_the_items_on_flash() {
    let dir = Dir::new("dumps");
    let srv = start_osmium(&dir, &[]);
    let mut c = Client::to(&srv);
    let n = 6_000;
    for i in 0..n {
        c.set(&format!("key{i}"), i as u32, &value(i));
    }
    let on_flash = c.stat("extstore_objects_used");
    assert!(on_flash > 1000, "{on_flash}");
    assert_eq!(c.stat("curr_items"), n as u64);
    let items = c.group_stats("items");
    let num = |k: &str| items[k].parse::<u64>().unwrap();
    assert_eq!(num("items:1:number"), n as u64);
    assert_eq!(
        num("items:1:number_hot") + num("items:1:number_warm") + num("items:1:number_cold"),
        n as u64
    );
    // Pages as memcached lists them: the ones holding records have a
    // version and bytes.
    let ext = c.group_stats("extstore");
    let used: Vec<&String> = ext
        .iter()
        .filter(|(k, v)| k.ends_with(":bytes") && *v != "0")
        .map(|(k, _)| k)
        .collect();
    assert!(!used.is_empty(), "{ext:?}");
    for k in used {
        let version = k.replace(":bytes", ":version");
        assert_ne!(ext[&version], "0", "{ext:?}");
    }

    let all: std::collections::BTreeSet<String> = (0..n).map(|i| format!("key{i}")).collect();
    let meta = c.lines_until(b"lru_crawler metadump all\r\n", "END\r\n");
    assert_eq!(meta[0], "OK\r\n");
    assert_eq!(meta.len() - 1, n, "one line per item");
    assert_eq!(metadump_keys(&meta), all);
    // A flash item's line has its flags and size like any other.
    let line = meta.iter().find(|l| l.starts_with("key=key7 ")).unwrap();
    assert!(line.contains(" flags=7 "), "{line}");
    let mg = c.lines_until(b"lru_crawler mgdump all\r\n", "EN\r\n");
    assert_eq!(mg[0], "OK\r\n");
    let mg: std::collections::BTreeSet<String> = mg[1..]
        .iter()
        .map(|l| l.trim_end().strip_prefix("mg ").unwrap().to_string())
        .collect();
    assert_eq!(mg, all);
    let cache = c.lines_until(b"stats cachedump 1 0\r\n", "END\r\n");
    assert_eq!(cache.len(), n);
    assert_eq!(
        c.lines_until(b"stats cachedump 1 10\r\n", "END\r\n").len(),
        10
    );

    // Deleted or flushed items on flash are not listed.
    for i in 0..10 {
        c.send(format!("delete key{i}\r\n").as_bytes());
        assert_eq!(c.line(), "DELETED\r\n");
    }
    let meta = c.lines_until(b"lru_crawler metadump all\r\n", "END\r\n");
    assert_eq!(meta.len() - 1, n - 10);
    c.send(b"flush_all\r\n");
    assert_eq!(c.line(), "OK\r\n");
    let meta = c.lines_until(b"lru_crawler metadump all\r\n", "END\r\n");
    assert_eq!(meta, vec!["OK\r\n".to_string()]);
}

/// Starts osmium with `-o option` and waits for it to exit:
/// whether it exited successfully, and what it wrote on stderr.
fn start_with_option(option: &str) -> (bool, String) {
    start_with(&["-o", option])
}

/// Starts osmium with `args` and waits for it to exit (it must: the
/// start is refused).
fn start_with(args: &[&str]) -> (bool, String) {
    let out = common::osmium().args(args).run_to_exit();
    (out.status.success(), out.stderr)
}

#[test]
fn bad_ext_path_options_stop_the_start_with_memcacheds_messages() {
    for (opt, message) in [
        ("ext_path=/tmp/x", "must supply size to ext_path"),
        ("ext_path=/tmp/x:12q", "must supply size to ext_path"),
        (
            "ext_page_size=abc",
            "could not parse argument to ext_page_size",
        ),
        (
            "ext_path=/nonexistent-dir/flash:64m",
            "flash file /nonexistent-dir/flash",
        ),
        // A directory, and a file system that takes no file.
        ("ext_path=/:64m", "cannot open flash file /"),
        ("ext_path=/proc/osmium-flash:64m", "cannot open flash file"),
    ] {
        let (started, err) = start_with_option(opt);
        assert!(!started, "{opt}");
        assert!(err.contains(message), "{opt}: {err}");
    }
}

/// A flash file the disk cannot hold stops the start (its space is
/// reserved then, so the tier never finds the disk full later). tmpfs
/// refuses at once a file larger than itself.
#[test]
fn a_flash_file_larger_than_its_disk_stops_the_start() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        println!("SKIP: no /dev/shm");
        return;
    }
    let path = shm.join(format!("osmium-flash-full-{}", std::process::id()));
    let (started, err) = start_with_option(&format!("ext_path={}:100000g", path.display()));
    let left = path.exists();
    let _ = std::fs::remove_file(&path);
    assert!(!started);
    assert!(!left, "the refused start left {}", path.display());
    assert!(
        err.contains("cannot size flash file") && err.contains("No space left"),
        "{err}"
    );
}

/// memcached's extstore takes a 64 MB file as one page of 64 MB; osmium
/// takes it too, as 8 pages of 8 MiB: the same limit in `stats`, and
/// osmium writes items through it and reads them back.
#[test]
fn a_64m_flash_file_is_taken_as_memcached_takes_it() {
    let mut servers = vec![("osmium", PathBuf::from(OSMIUM))];
    servers.extend(common::memcached_bin().map(|b| ("memcached", b)));
    for (kind, bin) in servers {
        let dir = Dir::new(&format!("64m-{kind}"));
        let server = common::osmium()
            .bin(&bin)
            .memory(8)
            .flash(dir.0.join("flash"), "64m")
            .start();
        let mut c = Client::to(&server);
        assert_eq!(c.stat("extstore_limit_maxbytes"), 64 << 20, "{kind}");
        if kind == "osmium" {
            let n = 8_000; // about 13 MB of values into 8 MB of RAM
            for i in 0..n {
                c.set(&format!("key{i}"), 0, &value(i));
            }
            assert!(c.stat("extstore_objects_written") > 0);
            assert_eq!(c.stat("evictions"), 0);
            for i in [0, 1, n / 2, n - 1] {
                assert_eq!(c.get(&[format!("key{i}")])[0].2, value(i), "key{i}");
            }
        }
    }
}

/// A refused start leaves no file it made: no flash file, no memory file,
/// no flash metadata, no `-s` socket; a file that was there before stays.
#[test]
fn a_refused_start_leaves_no_file_behind() {
    let dir = Dir::new("refused");
    let path = |name: &str| dir.0.join(name).display().to_string();
    // Too small for the tier's three pages.
    let (started, err) = start_with_option(&format!("ext_path={}:2m", path("small")));
    assert!(!started);
    assert!(err.contains("the flash tier needs at least 3"), "{err}");
    // The second file cannot be made, after the first was.
    let (started, _) = start_with_option(&format!(
        "ext_path={}:64m,ext_path=/nonexistent-dir/flash:64m",
        path("first")
    ));
    assert!(!started);
    // A memory file made, then the flash tier refused.
    let (started, _) = start_with(&[
        "-m",
        "8",
        "-e",
        &path("memory"),
        "-o",
        "ext_path=/nonexistent-dir/flash:64m",
    ]);
    assert!(!started);
    // The `-s` socket made before the flash tier was refused.
    let (started, _) = start_with(&[
        "-s",
        &path("sock"),
        "-o",
        "ext_path=/nonexistent-dir/flash:64m",
    ]);
    assert!(!started);
    let left: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // A file that was there is kept.
    std::fs::write(dir.0.join("kept"), b"").unwrap();
    let (started, _) = start_with_option(&format!(
        "ext_path={}:64m,ext_path=/nonexistent-dir/flash:64m",
        path("kept")
    ));
    assert!(!started);
    assert!(dir.0.join("kept").exists());
}

/// Reads every key in batches: each one is a miss or exactly its value,
/// never another; returns the hits.
fn hits_never_wrong(c: &mut Client, n: usize) -> usize {
    let keys: Vec<String> = (0..n).map(|i| format!("key{i}")).collect();
    let mut hits = 0;
    for batch in keys.chunks(50) {
        for (k, flags, v) in c.get(batch) {
            let i: usize = k[3..].parse().unwrap();
            assert_eq!((flags, &v), (i as u32, &value(i)), "{k}");
            hits += 1;
        }
    }
    hits
}

/// A flash file damaged under the running server (overwritten, then cut
/// short) turns hits into misses, never into wrong values; a failing file
/// turns the tier off with a log line and `extstore_failed 1`, and the
/// server goes on from RAM.
#[test]
fn a_damaged_then_truncated_flash_file_gives_misses_never_wrong_values() {
    let dir = Dir::new("faults");
    // Unpacked: its values (byte ramps) pack ~100x, and packed by the
    // cleaner they would nearly all stay in RAM, out of the file's reach.
    let srv = start_osmium(&dir, &["-o", "compression=off"]);
    let mut c = Client::to(&srv);
    let n = 6_000;
    for i in 0..n {
        c.set(&format!("key{i}"), i as u32, &value(i));
    }
    assert!(c.stat("extstore_objects_used") > 1000);
    assert_eq!(hits_never_wrong(&mut c, n), n);

    // Overwrite the first 6 MiB of the file (its first pages) in place.
    let flash = dir.0.join("flash");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&flash)
            .unwrap();
        f.write_all_at(&vec![0x5a; 6 << 20], 0).unwrap();
        f.sync_all().unwrap();
    }
    let hits = hits_never_wrong(&mut c, n);
    assert!(hits < n, "no record was damaged");
    assert!(c.stat("badcrc_from_extstore") > 0 || c.stat("extstore_io_errors") > 0);
    assert_eq!(c.stat("extstore_failed"), 0, "a bad record is a miss");

    // Cut the file short: reads fail, the tier goes off, RAM serves on.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&flash)
        .unwrap()
        .set_len(0)
        .unwrap();
    hits_never_wrong(&mut c, n);
    assert_eq!(c.stat("extstore_failed"), 1);
    assert!(c.stat("extstore_io_errors") > 0);
    for i in 0..200 {
        c.set(&format!("new{i}"), 1, b"fresh");
    }
    let keys: Vec<String> = (0..200).map(|i| format!("new{i}")).collect();
    assert_eq!(c.get(&keys).len(), 200);
    drop(c);
    let mut again = Client::to(&srv);
    again.send(b"version\r\n");
    assert!(again.line().starts_with("VERSION "));
}

#[test]
fn with_a_memory_file_items_on_flash_survive_kill_9_and_a_graceful_stop() {
    let dir = Dir::new("restart");
    let mem = dir.0.join("cache.mem");
    let mem_arg = mem.to_str().unwrap().to_string();
    let n = 6_000;
    let mut srv = start_osmium(&dir, &["-e", &mem_arg]);
    {
        let mut c = Client::to(&srv);
        for i in 0..n {
            c.set(&format!("key{i}"), i as u32, &value(i));
        }
        c.send(b"delete key7\r\n");
        assert_eq!(c.line(), "DELETED\r\n");
        assert!(c.stat("extstore_objects_used") > 1000);
    }
    for stop in ["kill -9", "SIGUSR1"] {
        if stop == "kill -9" {
            srv.kill();
        } else {
            srv.send_signal(libc::SIGUSR1);
            assert!(srv.wait_exit().success());
        }
        drop(srv);
        srv = start_osmium(&dir, &["-e", &mem_arg]);
        let mut c = Client::to(&srv);
        let keys: Vec<String> = (0..n).map(|i| format!("key{i}")).collect();
        let mut got = Vec::new();
        for batch in keys.chunks(50) {
            got.extend(c.get(batch));
        }
        let expected: Vec<(String, u32, Vec<u8>)> = (0..n)
            .filter(|&i| i != 7)
            .map(|i| (format!("key{i}"), i as u32, value(i)))
            .collect();
        assert_eq!(got.len(), expected.len(), "after {stop}");
        assert!(got == expected, "after {stop}: values differ");
    }
}

/// Key `i`'s value for the packing test: JSON-like text (packs about 3x),
/// or, one in five, bytes that do not pack.
fn mixed_value(i: usize) -> Vec<u8> {
    let len = 300 + (i * 131) % 4000;
    let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(len + 64);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if i.is_multiple_of(5) {
            v.extend_from_slice(&x.to_le_bytes());
        } else {
            let line = format!(
                "{{\"id\":{},\"user\":\"name{}\",\"score\":{}}},",
                x % 100_000,
                (x >> 20) % 97,
                (x >> 30) % 1000
            );
            v.extend_from_slice(line.as_bytes());
        }
    }
    v.truncate(len);
    v
}

/// Raw cold items are packed by the flusher on their way to flash (the
/// values that do not pack are written raw): every value reads back
/// identical, and `mg`'s `s` is the client's size.
#[test]
fn values_packed_on_their_way_to_flash_read_back_identical() {
    let dir = Dir::new("packed");
    let n = 6_000; // about 14 MB of values into 4 MB of RAM
    let srv = start_osmium(&dir, &[]);
    let mut c = Client::to(&srv);
    for i in 0..n {
        c.set(&format!("key{i}"), i as u32, &mixed_value(i));
    }
    assert!(c.stat("extstore_objects_used") > 1000);
    common::wait_until("every staged item packed and on flash", || {
        c.stat("extstore_staged_bytes") == 0 && c.stat("extstore_packed_items") > 0
    });
    assert!(c.stat("extstore_pack_staged") > 0);
    let (raw, packed) = (
        c.stat("extstore_packed_raw_bytes"),
        c.stat("extstore_packed_bytes"),
    );
    assert!(2 * raw > 3 * packed, "{raw} {packed}");
    assert_eq!(c.stat("evictions"), 0);
    let keys: Vec<String> = (0..n).map(|i| format!("key{i}")).collect();
    let mut got = 0;
    for batch in keys.chunks(50) {
        for (k, flags, v) in c.get(batch) {
            let i: usize = k[3..].parse().unwrap();
            assert!((flags, &v) == (i as u32, &mixed_value(i)), "{k} differs");
            got += 1;
        }
    }
    assert_eq!(got, n, "every key held");
    assert!(c.stat("get_extstore") > 0);
    // The client's size, flags: key1 is one of the first to go.
    c.send(b"mg key1 s f v\r\n");
    let len = mixed_value(1).len();
    assert_eq!(c.line(), format!("VA {len} s{len} f1\r\n"));
    let mut v = vec![0; len + 2];
    c.r.read_exact(&mut v).unwrap();
    assert_eq!(&v[..len], &mixed_value(1)[..]);
}
