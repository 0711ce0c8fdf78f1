//! `stats hotkeys` over real sockets (osmium's own; memcached has no hot
//! key report): at a low rate the default (adaptive) sampling counts every
//! request, so the report's reads and writes of each key are exactly what
//! was sent; the hottest key comes first with plausible rates, a fixed
//! `-o hotkeys_sample=1/N` scales its samples back, keys are URI-encoded
//! as memcached's `watch` prints them (binary protocol keys with spaces
//! and control bytes), the binary STAT answers the same rows,
//! `-o hotkeys_top=0` turns it off, and a key nobody reads any more
//! leaves the report within the 10 s window.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common;
use osmium_test_harness::Running;

/// osmium on a free loopback port with `args`.
fn start(args: &[&str]) -> Running {
    common::osmium().args(args).start()
}

/// Sends `cmd` and reads lines until one is `last`.
fn text(s: &mut TcpStream, cmd: &str, last: &str) -> Vec<String> {
    s.write_all(cmd.as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "closed");
        let line = line.trim_end_matches("\r\n").to_string();
        let done = line == last;
        lines.push(line);
        if done {
            return lines;
        }
    }
}

/// `n` text gets of `key`, pipelined, replies read.
fn gets(s: &mut TcpStream, key: &str, n: usize) {
    let batch = format!("get {key}\r\n").repeat(n);
    s.write_all(batch.as_bytes()).unwrap();
    let mut ends = 0;
    let mut r = BufReader::new(s.try_clone().unwrap());
    while ends < n {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0);
        if line == "END\r\n" {
            ends += 1;
        }
    }
}

/// A hot-key row: (rank, key, reads/s, writes/s, bytes/s).
fn parse(row: &str) -> (usize, String, f64, f64, f64) {
    let f: Vec<&str> = row.split(' ').collect();
    assert_eq!(f.len(), 7, "{row}");
    assert_eq!(&f[..2], ["STAT", "hotkey"], "{row}");
    (
        f[2].parse().unwrap(),
        f[3].to_string(),
        f[4].parse().unwrap(),
        f[5].parse().unwrap(),
        f[6].parse().unwrap(),
    )
}

fn hotkeys(s: &mut TcpStream) -> Vec<(usize, String, f64, f64, f64)> {
    report(s).rows
}

/// A whole `stats hotkeys` answer.
struct Report {
    rows: Vec<(usize, String, f64, f64, f64)>,
    /// `hotkeys_window`: what the rates are over, Unix ms.
    from_ms: u64,
    to_ms: u64,
    /// `hotkeys_sampled`: samples taken and the requests they came from.
    samples: u64,
    requests: u64,
}

impl Report {
    /// The seconds the rates are per (the window, at least 1).
    fn window_secs(&self) -> f64 {
        ((self.to_ms - self.from_ms) as f64 / 1000.0).max(1.0)
    }
}

fn report(s: &mut TcpStream) -> Report {
    let lines = text(s, "stats hotkeys\r\n", "END");
    let pair = |name: &str| -> (u64, u64) {
        let line = lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {lines:?}"));
        let (a, b) = line.split_once(' ').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    };
    let (from_ms, to_ms) = pair("hotkeys_window");
    let (samples, requests) = pair("hotkeys_sampled");
    let n = lines.len();
    assert!(
        lines[n - 3].starts_with("STAT hotkeys_window ")
            && lines[n - 2].starts_with("STAT hotkeys_sampled "),
        "the window and the sampling end the rows: {lines:?}"
    );
    Report {
        rows: lines[..n - 3].iter().map(|l| parse(l)).collect(),
        from_ms,
        to_ms,
        samples,
        requests,
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Sends `cmds` then `mn`, and reads every reply up to its `MN`.
fn run(s: &mut TcpStream, cmds: &[u8]) {
    s.write_all(cmds).unwrap();
    s.write_all(b"mn\r\n").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    loop {
        let mut line = String::new();
        assert!(r.read_line(&mut line).unwrap() > 0, "closed");
        if line == "MN\r\n" {
            return;
        }
    }
}

/// Write `n` of `key`: every kind of write in turn.
fn write_request(key: &str, n: u64) -> String {
    match n % 8 {
        0 => format!("set {key} 0 0 2\r\n10\r\n"),
        1 => format!("ms {key} 1\r\n7\r\n"),
        2 => format!("incr {key} 1\r\n"),
        3 => format!("append {key} 0 0 1\r\n5\r\n"),
        4 => format!("touch {key} 0\r\n"),
        5 => format!("ma {key}\r\n"),
        6 => format!("delete {key}\r\n"),
        _ => format!("md {key} q\r\n"),
    }
}

/// Read `n` of `key`, `left` reads of it still to send: every kind of
/// read in turn, and the reads it makes (a `get k k` is two).
fn read_request(key: &str, n: u64, left: u64) -> (String, u64) {
    match n % 5 {
        0 => (format!("get {key}\r\n"), 1),
        1 => (format!("gets {key}\r\n"), 1),
        2 => (format!("mg {key} v\r\n"), 1),
        3 => (format!("gat 0 {key}\r\n"), 1),
        _ if left >= 2 => (format!("get {key} {key}\r\n"), 2),
        _ => (format!("get {key}\r\n"), 1),
    }
}

#[test]
fn at_a_low_rate_every_request_is_counted_exactly() {
    // The default sampling counts every request while a worker's rate of
    // reads (or of writes) is under its budget (16,384 a second): a few
    // hundred requests over three connections (so over several workers)
    // are all counted, with weight 1. Twelve keys with distinct totals
    // (100, 93, 86, ...) and writes (1 to 12): the report ranks them
    // exactly and its rates times its window are exactly the reads and
    // writes sent. Should the window not cover the requests (an epoch
    // turned twice while they ran: a stalled machine), the round is run
    // again with fresh keys.
    let server = start(&[]);
    let mut s = server.connect();
    let settings = text(&mut s, "stats settings\r\n", "END");
    assert!(
        settings.contains(&"STAT hotkeys_sample adaptive".to_string()),
        "{settings:?}"
    );
    let mut conns: Vec<TcpStream> = (0..3).map(|_| server.connect()).collect();
    for round in 0..3 {
        let began = unix_ms();
        // (key, reads, writes)
        let keys: Vec<(String, u64, u64)> = (0..12u64)
            .map(|i| {
                let total = 100 - 7 * i;
                (format!("user:{round}:{i}"), total - (i + 1), i + 1)
            })
            .collect();
        // Every key's requests, interleaved, dealt to the connections in
        // turn.
        let mut batches = vec![String::new(); conns.len()];
        let mut next = vec![(0u64, 0u64); keys.len()];
        let mut dealt = 0;
        while next.iter().zip(&keys).any(|(n, k)| n.0 < k.1 || n.1 < k.2) {
            for ((key, reads, writes), (r, w)) in keys.iter().zip(next.iter_mut()) {
                if *r < *reads {
                    let (req, n) = read_request(key, *r, *reads - *r);
                    batches[dealt % conns.len()].push_str(&req);
                    *r += n;
                    dealt += 1;
                }
                if *w < *writes {
                    batches[dealt % conns.len()].push_str(&write_request(key, *w));
                    *w += 1;
                    dealt += 1;
                }
            }
        }
        for (c, batch) in conns.iter_mut().zip(&batches) {
            run(c, batch.as_bytes());
        }
        let rep = report(&mut s);
        if rep.from_ms > began {
            eprintln!("round {round}: the window starts after the requests; again");
            continue;
        }
        // Every request a sample (an earlier round's may be in the window
        // too).
        let sent: u64 = keys.iter().map(|k| k.1 + k.2).sum();
        assert_eq!(rep.samples, rep.requests, "every request a sample");
        assert!(
            round > 0 || rep.requests == sent,
            "{} of {sent}",
            rep.requests
        );
        let prefix = format!("user%3A{round}%3A");
        let rows: Vec<_> = rep
            .rows
            .iter()
            .filter(|r| r.1.starts_with(&prefix))
            .collect();
        let names: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
        let want: Vec<String> = keys.iter().map(|k| k.0.replace(':', "%3A")).collect();
        assert_eq!(names, want, "ranked by requests");
        let secs = rep.window_secs();
        for ((_, name, reads, writes, bytes), (_, want_reads, want_writes)) in
            rows.into_iter().zip(&keys)
        {
            // Rates have two decimals and the window is under 10 s: the
            // counts come back exact.
            assert_eq!(
                (
                    (reads * secs).round() as u64,
                    (writes * secs).round() as u64
                ),
                (*want_reads, *want_writes),
                "{name}: {:?}",
                rep.rows
            );
            assert!(*bytes > 0.0, "{name}");
        }
        return;
    }
    panic!("three rounds and the window never covered one");
}

#[test]
fn the_hottest_key_comes_first_with_plausible_rates() {
    let server = start(&["-o", "hotkeys_sample=1/1"]);
    let mut s = server.connect();
    for key in ["hot", "warm", "cold"] {
        text(
            &mut s,
            &format!("set {key} 0 0 10\r\n0123456789\r\n"),
            "STORED",
        );
    }
    gets(&mut s, "hot", 2000);
    gets(&mut s, "warm", 200);
    gets(&mut s, "cold", 20);
    let rows = hotkeys(&mut s);
    let names: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(names, ["hot", "warm", "cold"], "{rows:?}");
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 2, 3],
        "ranks"
    );
    let (_, _, reads, writes, bytes) = rows[0];
    // Counted exactly (1 in 1): 2,000 reads and a write over a window of
    // 1 to 10 s; the hot key's 10-byte value each time.
    assert!((200.0..=2000.5).contains(&reads), "{rows:?}");
    assert!(writes > 0.0 && writes * 1000.0 < reads * 1.01, "{rows:?}");
    assert!((bytes / (reads + writes) - 10.0).abs() < 0.1, "{rows:?}");
    let ratio = rows[0].2 / rows[1].2;
    assert!((ratio - 10.0).abs() < 0.1, "{rows:?}");

    // `stats hotkeys N` gives the N hottest (then the window and the
    // sampling).
    let lines = text(&mut s, "stats hotkeys 1\r\n", "END");
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("STAT hotkey 1 hot "), "{lines:?}");
    let settings = text(&mut s, "stats settings\r\n", "END");
    assert!(settings.contains(&"STAT hotkeys_top 32".to_string()));
    assert!(settings.contains(&"STAT hotkeys_sample 1/1".to_string()));
}

#[test]
fn a_fixed_sampling_is_scaled_back() {
    // `-o hotkeys_sample=1/32`: 32,000 and 3,200 gets, the rates' ratio
    // still about 10, and the hot key's rate about 32,000 over the
    // window, which a short run keeps at the 1 s floor.
    let server = start(&["-o", "hotkeys_sample=1/32"]);
    let mut s = server.connect();
    let started = Instant::now();
    for key in ["a", "b"] {
        text(&mut s, &format!("set {key} 0 0 1\r\nx\r\n"), "STORED");
    }
    gets(&mut s, "a", 32_000);
    gets(&mut s, "b", 3_200);
    let rows = hotkeys(&mut s);
    assert_eq!(rows[0].1, "a", "{rows:?}");
    assert_eq!(rows[1].1, "b", "{rows:?}");
    let ratio = rows[0].2 / rows[1].2;
    assert!((5.0..=20.0).contains(&ratio), "{rows:?}");
    let settings = text(&mut s, "stats settings\r\n", "END");
    assert!(settings.contains(&"STAT hotkeys_sample 1/32".to_string()));
    // Within 20 % once the window is known to be the 1 s floor.
    if started.elapsed() < Duration::from_millis(900) {
        assert!((rows[0].2 - 32_000.0).abs() < 6_400.0, "{rows:?}");
    }
    // About 1 request in 32 was a sample.
    let rep = report(&mut s);
    let share = rep.requests as f64 / rep.samples as f64;
    assert!((24.0..=40.0).contains(&share), "1 in {share}");
}

/// A binary packet: request header (magic 0x80) then extras, key, value.
fn packet(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut p = vec![0x80, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extras.len() as u8);
    p.extend_from_slice(&[0, 0, 0]);
    p.extend_from_slice(&(body as u32).to_be_bytes());
    p.extend_from_slice(&[0; 12]);
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

/// Reads one binary response: (status, key, value).
fn response(s: &mut TcpStream) -> (u16, Vec<u8>, Vec<u8>) {
    let mut h = [0u8; 24];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[0], 0x81);
    let keylen = u16::from_be_bytes([h[2], h[3]]) as usize;
    let extlen = h[4] as usize;
    let status = u16::from_be_bytes([h[6], h[7]]);
    let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut b = vec![0u8; body];
    s.read_exact(&mut b).unwrap();
    (
        status,
        b[extlen..extlen + keylen].to_vec(),
        b[extlen + keylen..].to_vec(),
    )
}

#[test]
fn odd_keys_are_uri_encoded_and_binary_stat_has_the_rows() {
    let server = start(&["-o", "hotkeys_sample=1/1"]);
    let mut s = server.connect();
    let key: &[u8] = b"a b\x01\xff:%";
    s.write_all(&packet(0x01, &[0; 8], key, b"value")).unwrap();
    assert_eq!(response(&mut s).0, 0);
    for _ in 0..3 {
        s.write_all(&packet(0x00, &[], key, &[])).unwrap();
        let (status, _, value) = response(&mut s);
        assert_eq!((status, value.as_slice()), (0, &b"value"[..]));
    }
    // Binary STAT "hotkeys": one packet per row (key `hotkey`, the rest
    // of the row as value), then the empty packet.
    s.write_all(&packet(0x10, &[], b"hotkeys", &[])).unwrap();
    let (status, k, v) = response(&mut s);
    assert_eq!((status, k.as_slice()), (0, &b"hotkey"[..]));
    let v = String::from_utf8(v).unwrap();
    let f: Vec<&str> = v.split(' ').collect();
    assert_eq!(&f[..2], ["1", "a%20b%01%FF%3A%25"], "{v}");
    let (reads, writes): (f64, f64) = (f[2].parse().unwrap(), f[3].parse().unwrap());
    assert!(reads > 0.0 && (reads / writes - 3.0).abs() < 0.01, "{v}");
    // Then the window and the sampling, then the empty packet.
    for name in ["hotkeys_window", "hotkeys_sampled"] {
        let (status, k, v) = response(&mut s);
        assert_eq!((status, k.as_slice()), (0, name.as_bytes()));
        assert_eq!(String::from_utf8(v).unwrap().split(' ').count(), 2);
    }
    let (status, k, v) = response(&mut s);
    assert_eq!((status, k.len(), v.len()), (0, 0, 0));
    // The text protocol (a connection of its own) gives the same key.
    let rows = hotkeys(&mut server.connect());
    assert_eq!(rows[0].1, "a%20b%01%FF%3A%25");
}

#[test]
fn hotkeys_top_zero_turns_it_off() {
    let server = start(&["-o", "hotkeys_top=0"]);
    let mut s = server.connect();
    text(&mut s, "set k 0 0 1\r\nx\r\n", "STORED");
    gets(&mut s, "k", 100);
    assert_eq!(text(&mut s, "stats hotkeys\r\n", "END"), ["END"]);
    let settings = text(&mut s, "stats settings\r\n", "END");
    assert!(settings.contains(&"STAT hotkeys_top 0".to_string()));
}

#[test]
fn a_key_no_longer_read_leaves_within_ten_seconds() {
    let server = start(&["-o", "hotkeys_sample=1/1"]);
    let mut s = server.connect();
    text(&mut s, "set gone 0 0 1\r\nx\r\n", "STORED");
    text(&mut s, "set stays 0 0 1\r\nx\r\n", "STORED");
    gets(&mut s, "gone", 500);
    let stopped = Instant::now();
    assert_eq!(hotkeys(&mut s)[0].1, "gone");
    loop {
        gets(&mut s, "stays", 50);
        let rows = hotkeys(&mut s);
        if !rows.iter().any(|r| r.1 == "gone") {
            break;
        }
        assert!(
            stopped.elapsed() < Duration::from_millis(11_500),
            "still reported after {:?}: {rows:?}",
            stopped.elapsed()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // It stays until the epoch after the one of its reads is over.
    assert!(stopped.elapsed() >= Duration::from_secs(4), "left too soon");
    assert_eq!(hotkeys(&mut s)[0].1, "stays");
}
