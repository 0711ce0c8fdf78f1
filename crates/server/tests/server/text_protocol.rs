//! Integration tests: start the real `osmium` binary on a free loopback port
//! and speak raw bytes to it. (Byte-for-byte comparison with genuine
//! memcached lives in tests/conformance; these cover server behaviour that
//! needs no oracle: process lifecycle, limits, framing under any split.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::common;
use common::{memcached_bin, wait_until};
use osmium_test_harness::Running;

/// osmium on a free port with `args`.
fn start(args: &[&str]) -> Running {
    common::osmium().args(args).start()
}

/// Reads until the reply ends with `end` (or times out).
fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read failed after {:?}: {e}", String::from_utf8_lossy(&out)),
        }
    }
    out
}

fn roundtrip(s: &mut TcpStream, req: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    read_until(s, end)
}

#[test]
fn basic_commands() {
    let srv = start(&["-t", "2"]);
    let mut c = srv.connect();
    assert_eq!(
        roundtrip(&mut c, b"set k 7 0 5\r\nhello\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"get k missing\r\n", b"END\r\n"),
        b"VALUE k 7 5\r\nhello\r\nEND\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"version\r\n", b"\r\n"),
        b"VERSION 1.6.45\r\n"
    );
    assert_eq!(roundtrip(&mut c, b"bogus\r\n", b"\r\n"), b"ERROR\r\n");
}

#[test]
fn requests_split_at_every_byte() {
    let srv = start(&[]);
    let mut c = srv.connect();
    c.set_nodelay(true).unwrap();
    let req = b"set split 1 0 10\r\n0123456789\r\nget split\r\nincr n 1\r\n";
    for b in req.iter() {
        c.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(
        read_until(&mut c, b"NOT_FOUND\r\n"),
        b"STORED\r\nVALUE split 1 10\r\n0123456789\r\nEND\r\nNOT_FOUND\r\n"
    );
}

#[test]
fn many_pipelined_requests_in_one_write() {
    let srv = start(&[]);
    let mut c = srv.connect();
    let mut req = Vec::new();
    let mut want = Vec::new();
    for i in 0..1000 {
        req.extend_from_slice(
            format!("set p{i} 0 0 {}\r\n{i}\r\n", i.to_string().len()).as_bytes(),
        );
        want.extend_from_slice(b"STORED\r\n");
    }
    for i in 0..1000 {
        req.extend_from_slice(format!("get p{i}\r\n").as_bytes());
        want.extend_from_slice(
            format!("VALUE p{i} 0 {}\r\n{i}\r\nEND\r\n", i.to_string().len()).as_bytes(),
        );
    }
    req.extend_from_slice(b"version\r\n");
    want.extend_from_slice(b"VERSION 1.6.45\r\n");
    c.write_all(&req).unwrap();
    assert_eq!(read_until(&mut c, b"VERSION 1.6.45\r\n"), want);
}

#[test]
fn large_values_and_too_large_stay_in_sync() {
    let srv = start(&["-m", "64"]);
    let mut c = srv.connect();
    let big = vec![b'x'; 1_000_000];
    let mut req = b"set big 0 0 1000000\r\n".to_vec();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    assert_eq!(roundtrip(&mut c, &req, b"\r\n"), b"STORED\r\n");
    let got = roundtrip(&mut c, b"get big\r\n", b"END\r\n");
    assert_eq!(
        got.len(),
        "VALUE big 0 1000000\r\n".len() + 1_000_000 + 2 + 5
    );
    let mut req = b"set huge 0 0 2097152\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'y', 2_097_152));
    req.extend_from_slice(b"\r\nget huge\r\n");
    assert_eq!(
        roundtrip(&mut c, &req, b"END\r\n"),
        b"SERVER_ERROR object too large for cache\r\nEND\r\n"
    );
}

#[test]
fn eviction_keeps_accepting_writes() {
    let srv = start(&["-m", "8"]);
    let mut c = srv.connect();
    let value = vec![b'v'; 10_000];
    for i in 0..3000 {
        let mut req = format!("set e{i} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut c, &req, b"\r\n"), b"STORED\r\n", "set {i}");
    }
    let stats = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
    let evictions: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("STAT evictions "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(evictions > 0);
}

/// `STAT <name> <value>` of a `stats` reply, as a number.
fn stat_of(stats: &str, name: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
        .parse()
        .unwrap()
}

#[test]
fn overwrites_are_compacted_not_evicted() {
    // 800 keys of 10 KB (8 MB) in -m 32, overwritten 15 times over with
    // new sizes (120 MB written): the dead versions are compacted away;
    // no live key is evicted; stats tell live from dead.
    let srv = start(&["-m", "32", "-t", "2"]);
    let mut c = srv.connect();
    for round in 0..15 {
        let mut req = Vec::new();
        for i in 0..800 {
            let len = 9_000 + (i * 7 + round * 131) % 2_000;
            req.extend_from_slice(format!("set c{i} {round} 0 {len} noreply\r\n").as_bytes());
            req.extend(std::iter::repeat_n(b'a' + round as u8, len));
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"mn\r\n");
        assert_eq!(roundtrip(&mut c, &req, b"MN\r\n"), b"MN\r\n");
    }
    let stats = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
    assert_eq!(stat_of(&stats, "curr_items"), 800, "{stats}");
    assert_eq!(stat_of(&stats, "evictions"), 0, "{stats}");
    assert!(stat_of(&stats, "segments_compacted") > 0, "{stats}");
    assert!(stat_of(&stats, "reclaimed_dead_bytes") > 0, "{stats}");
    assert_eq!(stat_of(&stats, "evicted_live_bytes"), 0, "{stats}");
    assert_eq!(
        stat_of(&stats, "live_bytes"),
        stat_of(&stats, "bytes"),
        "{stats}"
    );
    let dead = stat_of(&stats, "dead_bytes");
    assert!(dead < 32 << 20, "{stats}");
    for i in [0, 399, 799] {
        let len = 9_000 + (i * 7 + 14 * 131) % 2_000;
        let got = roundtrip(&mut c, format!("get c{i}\r\n").as_bytes(), b"END\r\n");
        let mut want = format!("VALUE c{i} 14 {len}\r\n").into_bytes();
        want.extend(std::iter::repeat_n(b'a' + 14, len));
        want.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(got, want, "c{i}");
    }
    let settings = String::from_utf8(roundtrip(&mut c, b"stats settings\r\n", b"END\r\n")).unwrap();
    assert!(
        settings.contains("STAT compact_policy greedy\r\n"),
        "{settings}"
    );
}

#[test]
fn no_evictions_flag_reports_out_of_memory() {
    let srv = start(&["-m", "2", "-M"]);
    let mut c = srv.connect();
    let value = vec![b'v'; 100_000];
    let mut saw_oom = false;
    for i in 0..100 {
        let mut req = format!("set m{i} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(&value);
        req.extend_from_slice(b"\r\n");
        let r = roundtrip(&mut c, &req, b"\r\n");
        if r == b"SERVER_ERROR out of memory storing object\r\n" {
            saw_oom = true;
            break;
        }
        assert_eq!(r, b"STORED\r\n");
    }
    assert!(saw_oom);
    assert!(roundtrip(&mut c, b"get m0\r\n", b"END\r\n").starts_with(b"VALUE m0"));
}

/// A new connection to `srv`, if it answers `version` (`None` when the
/// server refused or closed it).
fn served(srv: &Running) -> Option<TcpStream> {
    let mut s = srv.connect();
    s.write_all(b"version\r\n").ok()?;
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while !got.ends_with(b"\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    (got == b"VERSION 1.6.45\r\n").then_some(s)
}

#[test]
fn connection_limit_refuses_cleanly() {
    let srv = start(&["-c", "2"]);
    // Two connections are served once the server has seen every earlier
    // close (a refused pair is closed before the next try).
    let (mut a, mut b) = (None, None);
    wait_until("two connections served under -c 2", || {
        drop((a.take(), b.take()));
        a = served(&srv);
        b = served(&srv);
        a.is_some() && b.is_some()
    });
    let mut c = srv.connect();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"ERROR Too many open connections\r\n");
    // A closed connection's slot is given again once the server saw the close.
    drop(a);
    wait_until("a's slot given to a new connection", || {
        served(&srv).is_some()
    });
    drop(b);
}

#[test]
fn junk_line_closes_only_that_connection() {
    let srv = start(&[]);
    let mut good = srv.connect();
    assert_eq!(
        roundtrip(&mut good, b"set g 0 0 1\r\nx\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    let mut bad = srv.connect();
    bad.write_all(&[b'z'; 5000]).unwrap();
    let mut got = Vec::new();
    let _ = bad.read_to_end(&mut got);
    assert!(got.is_empty(), "closed without a reply");
    // binary garbage on another connection
    let mut bad2 = srv.connect();
    let junk: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let _ = bad2.write_all(&junk);
    assert_eq!(
        roundtrip(&mut good, b"get g\r\n", b"END\r\n"),
        b"VALUE g 0 1\r\nx\r\nEND\r\n"
    );
}

#[test]
fn shutdown_command_needs_enable_flag() {
    let mut srv = start(&[]);
    let mut c = srv.connect();
    assert_eq!(
        roundtrip(&mut c, b"shutdown\r\n", b"\r\n"),
        b"SERVER_ERROR: shutdown not enabled\r\n"
    );
    drop(c);
    let mut srv2 = start(&["-A"]);
    let mut c = srv2.connect();
    c.write_all(b"shutdown\r\n").unwrap();
    let status = srv2.wait_exit();
    assert!(status.success());
    srv.kill();
}

#[test]
fn sigterm_stops_gracefully() {
    let mut srv = start(&[]);
    let _c = srv.connect();
    srv.send_signal(libc::SIGTERM);
    assert!(srv.wait_exit().success());
}

#[test]
fn command_line_errors_and_help() {
    let bin = env!("CARGO_BIN_EXE_osmium");
    let out = Command::new(bin).arg("-h").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "-p", "-U", "-l", "-m", "-c", "-t", "-I", "-M", "-C", "-F", "-A", "-R", "-b", "-o",
    ] {
        assert!(help.contains(flag), "help lists {flag}");
    }
    let out = Command::new(bin).arg("-V").output().unwrap();
    assert!(out.status.success());
    let out = Command::new(bin).arg("--no-such-flag").output().unwrap();
    assert!(!out.status.success());
    let out = Command::new(bin).args(["-m", "lots"]).output().unwrap();
    assert!(!out.status.success());
    assert!(!out.stderr.is_empty());
}

#[test]
fn parallel_clients() {
    let srv = start(&["-t", "4"]);
    let port = srv.port();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                for i in 0..300 {
                    let v = format!("{t}-{i}");
                    let req = format!("set c{t}-{i} 0 0 {}\r\n{v}\r\nget c{t}-{i}\r\n", v.len());
                    let got = roundtrip(&mut c, req.as_bytes(), b"END\r\n");
                    let want = format!("STORED\r\nVALUE c{t}-{i} 0 {}\r\n{v}\r\nEND\r\n", v.len());
                    assert_eq!(String::from_utf8_lossy(&got), want);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn idle_timeout_closes_idle_connections() {
    let srv = start(&["-o", "idle_timeout=1"]);
    let mut c = srv.connect();
    // The read waits for the close: one to two seconds of idleness on the
    // server's one-second clock; a read timeout is a failure.
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 16];
    let n = match c.read(&mut buf) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
        Err(e) => panic!("the idle connection was not closed: {e}"),
    };
    assert_eq!(n, 0, "connection was closed");
}

/// Sends `req`, shuts the write side at once (its FIN often arrives in the
/// same event as the data), and reads until the server closes.
fn send_and_half_close(port: u16, req: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Let the server take the connection and wait for data first, so that
    // data and FIN arrive together on a connection it already watches.
    std::thread::sleep(Duration::from_millis(5));
    s.write_all(req).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = Vec::new();
    if let Err(e) = s.read_to_end(&mut out) {
        panic!("no close after {} bytes of replies: {e}", out.len());
    }
    out
}

#[test]
fn a_half_closed_client_gets_its_replies_then_the_close() {
    // As memcached: requests that came before the client's FIN are
    // answered, then the server closes. (A read that returns less than it
    // asked for must not be taken for an empty socket when the FIN came
    // with that data: no new event would ever report it.)
    let srv = start(&["-t", "4"]);
    let mut memcached = None;
    if let Some(bin) = memcached_bin() {
        memcached = Some(common::memcached().bin(bin).start());
    }
    for server in std::iter::once(&srv).chain(memcached.as_ref()) {
        let port = server.port();
        assert_eq!(
            send_and_half_close(port, b"set k 0 0 1\r\nv\r\n"),
            b"STORED\r\n"
        );
        for round in 0..20 {
            let n = if round % 2 == 0 { 1 } else { 2000 };
            let replies = send_and_half_close(port, &b"get k\r\n".repeat(n));
            assert_eq!(
                replies,
                b"VALUE k 0 1\r\nv\r\nEND\r\n".repeat(n),
                "port {port}"
            );
            let misses = send_and_half_close(port, &b"get nokey\r\n".repeat(n));
            assert_eq!(misses, b"END\r\n".repeat(n), "port {port}");
        }
    }
}
