//! What the proxy's socket tests share: backends (memcached, or osmium),
//! the osmium-proxy binary and nutcracker as child processes on free
//! loopback ports, started again on another port when theirs was taken
//! meanwhile (`osmium-test-harness`), stopped by PID; pipelined writes; and reading which
//! keys a backend holds (`lru_crawler metadump all`); reloading a
//! running proxy (SIGHUP) and waiting for its stats to say it did.
//!
//! `OSMIUM_PROXY_TESTS_RELOADED=1`: every proxy these helpers start
//! serves its YAML by a reload (it starts with each pool's servers
//! replaced by one placeholder, then the file is rewritten and SIGHUP'd),
//! so that a whole suite runs through a reloaded proxy.
#![allow(dead_code)] // each test crate uses a different subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) use osmium_test_harness::{listen_moved, nutcracker_bin};
use osmium_test_harness::{Nutcracker, Osmium, Proxy, Running};

/// A free loopback port, reserved for about a minute
/// (`osmium_test_harness::free_port`).
pub(crate) fn free_port() -> u16 {
    osmium_test_harness::free_port()
}

/// One connection opened and closed once a process listens: the
/// readiness check these starters always made, which the tests' counts of
/// connections (`total_connections`, `client_eof`) include.
fn start_check(port: u16) {
    drop(TcpStream::connect(("127.0.0.1", port)));
}

/// The cache server the backends run: `MEMCACHED_BIN`, else the
/// repository's memcached oracle, else osmium (`OSMIUM_BIN` or
/// target/release/osmium). Both answer `lru_crawler metadump all`.
pub(crate) fn backend_bin() -> PathBuf {
    if let Some(b) = std::env::var_os("MEMCACHED_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(b);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let oracle = root.join(".oracle/memcached-1.6.45/memcached");
    if oracle.is_file() {
        return oracle;
    }
    if let Some(b) = std::env::var_os("OSMIUM_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(b);
    }
    let osmium = root.join("target/release/osmium");
    assert!(
        osmium.is_file(),
        "no backend server: build memcached (scripts/build-memcached.sh) or osmium \
         (cargo build --release -p osmium-server), or set MEMCACHED_BIN / OSMIUM_BIN"
    );
    osmium
}

/// A started backend, proxy or nutcracker (`osmium_test_harness::Running`:
/// `port()`, `pid()`, `stats_port()`, killed when dropped).
pub(crate) type Proc = Running;

/// A backend cache server on `port` (0: a free one, another one if it
/// was taken meanwhile; a given port is tried again a few times).
pub(crate) fn backend(port: u16) -> Proc {
    cache_server(&backend_bin(), "backend", port, 256)
}

/// Writes `yaml` to a file under Cargo's scratch directory for tests
/// (`target/tmp`, not the machine's `/tmp`, where every run would leave
/// its files); its path.
pub(crate) fn write_conf(name: &str, yaml: &str) -> PathBuf {
    let path = conf_path(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Where [`write_conf`] writes `name`.
pub(crate) fn conf_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("osmium-proxy-tests-{}", std::process::id()))
        .join(name)
}

/// osmium-proxy with `yaml`, listening on `port`, its stats port on a
/// free loopback port.
pub(crate) fn proxy(yaml: &str, port: u16) -> Proc {
    proxy_with(yaml, port, &[])
}

/// [`proxy`] with more arguments. If `port` or the stats port was taken
/// meanwhile, the proxy starts again on new ones (its `listen:` line
/// rewritten): the port it listens on is the returned `Proc`'s `port`.
pub(crate) fn proxy_with(yaml: &str, port: u16, extra: &[&str]) -> Proc {
    if std::env::var("OSMIUM_PROXY_TESTS_RELOADED").as_deref() == Ok("1") {
        return proxy_reloaded(yaml, port, extra);
    }
    proxy_started(yaml, port, extra)
}

/// osmium-proxy started with `yaml` (see [`proxy_with`]).
pub(crate) fn proxy_started(yaml: &str, port: u16, extra: &[&str]) -> Proc {
    let px = Proxy::new(yaml, port)
        .bin(env!("CARGO_BIN_EXE_osmium-proxy"))
        .args(extra)
        .start();
    start_check(px.port());
    px
}

/// osmium-proxy serving `yaml` by a reload: started with each pool's
/// servers replaced by one placeholder (nothing listens there), then its
/// file rewritten with `yaml` and SIGHUP'd.
pub(crate) fn proxy_reloaded(yaml: &str, port: u16, extra: &[&str]) -> Proc {
    let px = proxy_started(&placeholder_servers(yaml), port, extra);
    rewrite_conf(&px, &listen_moved(yaml, port, px.port()));
    reload(&px);
    px
}

/// `yaml` with every pool's servers replaced by one placeholder.
fn placeholder_servers(yaml: &str) -> String {
    let mut v: serde_norway::Value = serde_norway::from_str(yaml).expect("test YAML");
    if let serde_norway::Value::Mapping(pools) = &mut v {
        for (_, pool) in pools.iter_mut() {
            if let serde_norway::Value::Mapping(pool) = pool {
                pool.insert(
                    "servers".into(),
                    serde_norway::Value::Sequence(vec!["127.0.0.1:9:1 placeholder".into()]),
                );
            }
        }
    }
    serde_norway::to_string(&v).unwrap()
}

/// Writes `yaml` over the proxy's configuration file (not reloaded yet).
pub(crate) fn rewrite_conf(px: &Proc, yaml: &str) {
    let path = px.config_path();
    let tmp = path.with_extension("yml.new");
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The figure `name` of the first pool in the stats document (the
/// proxy-wide reload counts are in every pool).
pub(crate) fn pool_stat(doc: &str, name: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
    v.as_object()
        .unwrap()
        .values()
        .find_map(|p| p.get(name).and_then(|x| x.as_u64()))
        .unwrap_or_else(|| panic!("no {name}: {doc}"))
}

/// Sends SIGHUP to the proxy and waits until its stats count one more
/// reload applied (`ok`) or refused; the stats document then.
pub(crate) fn reload_expect(px: &Proc, ok: bool) -> String {
    let stat = if ok { "reloads" } else { "reload_failures" };
    let before = pool_stat(&stats_doc(px.stats_port()), stat);
    assert!(
        osmium_test_harness::signal(px.pid(), libc::SIGHUP),
        "SIGHUP not delivered"
    );
    let start = Instant::now();
    loop {
        let doc = stats_doc(px.stats_port());
        if pool_stat(&doc, stat) > before {
            return doc;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no {stat} after SIGHUP: {doc}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`reload_expect`] of a reload that applies.
pub(crate) fn reload(px: &Proc) -> String {
    reload_expect(px, true)
}

/// The osmium server binary: `OSMIUM_BIN`, else beside osmium-proxy's
/// (target/debug or target/release).
pub(crate) fn osmium_bin() -> PathBuf {
    if let Some(b) = std::env::var_os("OSMIUM_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(b);
    }
    let beside = PathBuf::from(env!("CARGO_BIN_EXE_osmium-proxy")).with_file_name("osmium");
    assert!(
        beside.is_file(),
        "no osmium binary beside osmium-proxy: cargo build -p osmium-server, or set OSMIUM_BIN"
    );
    beside
}

/// An osmium server on a free loopback port.
pub(crate) fn osmium_backend() -> Proc {
    osmium_backend_on(0)
}

/// An osmium server on `port` (0: a free one; a given one is tried again
/// a few times, for a server that died and returns).
pub(crate) fn osmium_backend_on(port: u16) -> Proc {
    cache_server(&osmium_bin(), "osmium", port, 64)
}

/// `bin` (memcached or osmium) serving TCP on `port` (0: a free one,
/// another one if it was taken meanwhile; a given port is tried again a
/// few times) with `-m megabytes`, UDP off.
pub(crate) fn cache_server(bin: &Path, name: &str, port: u16, megabytes: u32) -> Proc {
    // memcached takes the flags osmium takes: one builder for both.
    let _ = name;
    let server = Osmium::new().bin(bin).memory(megabytes);
    let server = if port == 0 {
        server.start()
    } else {
        server.only_port(port).start()
    };
    start_check(server.port());
    server
}

/// Which backend (index) holds each of `keys` (whose names start with
/// `prefix`), read from the backends: `lru_crawler metadump` is no
/// snapshot (right after a burst of sets it can miss items the LRU
/// maintainer is moving), so a key it did not list is looked up on each
/// backend with `mg`.
pub(crate) fn holders_of_all(
    backends: &[Proc],
    prefix: &str,
    keys: &[String],
) -> std::collections::HashMap<String, usize> {
    let mut held = std::collections::HashMap::new();
    for (i, b) in backends.iter().enumerate() {
        for k in keys_of(b.port()) {
            if k.starts_with(prefix) {
                assert!(held.insert(k.clone(), i).is_none(), "{k} on two backends");
            }
        }
    }
    for k in keys {
        if held.contains_key(k) {
            continue;
        }
        for (i, b) in backends.iter().enumerate() {
            let reply = roundtrip(b.port(), format!("mg {k}\r\n").as_bytes(), b"\r\n");
            if reply.starts_with(b"HD") {
                assert!(held.insert(k.clone(), i).is_none(), "{k} on two backends");
            }
        }
    }
    held
}

/// nutcracker with `yaml`, listening on `port`.
pub(crate) fn nutcracker(bin: &Path, yaml: &str, port: u16) -> Proc {
    nutcracker_with(bin, yaml, port, &[])
}

/// [`nutcracker`] with more arguments. Its log (`-o`, where it says why
/// it could not start) goes to its scratch directory. If `port` or the
/// stats port was taken meanwhile, it starts again on new ones (its
/// `listen:` line rewritten): the port it listens on is the returned
/// `Proc`'s `port()`.
pub(crate) fn nutcracker_with(bin: &Path, yaml: &str, port: u16, extra: &[&str]) -> Proc {
    let nc = Nutcracker::found(yaml, port)
        .expect("nutcracker")
        .bin(bin)
        .args(extra)
        .start();
    start_check(nc.port());
    nc
}

/// The stats port's document: everything it sends before closing.
pub(crate) fn stats_doc(port: u16) -> String {
    let mut s = connect(port);
    let mut doc = Vec::new();
    s.read_to_end(&mut doc).expect("read stats");
    String::from_utf8(doc).expect("stats are UTF-8")
}

pub(crate) fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Sends `request` and reads until the reply ends with `end`.
pub(crate) fn roundtrip(port: u16, request: &[u8], end: &[u8]) -> Vec<u8> {
    let mut s = connect(port);
    s.write_all(request).unwrap();
    read_until(&mut s, end)
}

pub(crate) fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).expect("read reply");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Stores every key (value `v`) through `port`, pipelined, checking each
/// `STORED`.
pub(crate) fn set_all(port: u16, keys: &[String]) {
    let mut s = connect(port);
    let mut w = s.try_clone().unwrap();
    let keys2: Vec<String> = keys.to_vec();
    let writer = std::thread::spawn(move || {
        let mut buf = Vec::new();
        for chunk in keys2.chunks(1000) {
            buf.clear();
            for k in chunk {
                buf.extend_from_slice(format!("set {k} 0 0 1\r\nv\r\n").as_bytes());
            }
            w.write_all(&buf).unwrap();
        }
    });
    let mut r = BufReader::new(&mut s);
    let mut line = String::new();
    for k in keys {
        line.clear();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, "STORED\r\n", "set {k}");
    }
    writer.join().unwrap();
}

/// The keys a backend holds.
pub(crate) fn keys_of(port: u16) -> Vec<String> {
    let mut s = connect(port);
    s.write_all(b"lru_crawler metadump all\r\n").unwrap();
    let mut r = BufReader::new(s);
    let mut keys = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap() == 0 || line == "END\r\n" {
            return keys;
        }
        if let Some(k) = line.strip_prefix("key=") {
            keys.push(k.split(' ').next().unwrap().to_string());
        }
    }
}

/// Empties a backend.
pub(crate) fn flush(port: u16) {
    assert_eq!(roundtrip(port, b"flush_all\r\n", b"\r\n"), b"OK\r\n");
}
