//! The front door, over real sockets, against osmium and genuine memcached
//! 1.6.45 alike (`MEMCACHED_BIN`, else the repository's built oracle
//! `.oracle/memcached-1.6.45/memcached`; without either the memcached half
//! is skipped, and under `CI=true` that is a failure): a refused storage
//! command's data block is never run as commands, keys are bytes up to a
//! space (a NUL included), the signals memcached answers, `-c` above the
//! open-file limit, root without `-u` refused, `-o idle_timeout` (and
//! `idle_kicks`), `stats settings`' `inter`, `-o
//! read_buf_mem_limit`, and `stats conns` listing every connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::common;
use common::wait_until;
use osmium_test_harness::Running;

/// The servers to test: osmium, and memcached 1.6.45 when there is one.
fn servers() -> Vec<(&'static str, PathBuf)> {
    let mut out = vec![("osmium", PathBuf::from(env!("CARGO_BIN_EXE_osmium")))];
    if let Some(bin) = common::memcached_bin() {
        out.push(("memcached", bin));
    }
    out
}

/// `bin` (osmium or memcached) on a free port with `args`.
fn start(bin: &PathBuf, args: &[&str]) -> Running {
    common::osmium().bin(bin).args(args).start()
}

/// Reads until the reply ends with `end` (or the peer closes).
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

/// Sends `req`, then `mn`, and returns what came back before `MN`.
fn exchange(s: &mut TcpStream, req: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    s.write_all(b"mn\r\n").unwrap();
    let mut out = read_until(s, b"MN\r\n");
    out.truncate(out.len() - 4);
    out
}

#[test]
fn a_refused_storage_commands_data_block_is_never_run() {
    let long_key = "k".repeat(251);
    // Each command is refused at its command line; its data block is a
    // command that would flush the cache, store a key, or delete one.
    let refused: Vec<String> = vec![
        format!("set {long_key} 0 0 9\r\nflush_all\r\n"),
        format!("set {long_key} 0 0 9 noreply\r\nflush_all\r\n"),
        format!("add {long_key} 0 0 9\r\nflush_all\r\n"),
        format!("replace {long_key} 0 0 9\r\nflush_all\r\n"),
        format!("append {long_key} 0 0 9\r\nflush_all\r\n"),
        format!("prepend {long_key} 0 0 9\r\nflush_all\r\n"),
        format!("cas {long_key} 0 0 9 1\r\nflush_all\r\n"),
        "set k 0 xx 9\r\nflush_all\r\n".into(),
        "set k yy 0 9\r\nflush_all\r\n".into(),
        "cas k 0 0 9 zz\r\nflush_all\r\n".into(),
        format!("ms {long_key} 9\r\nflush_all\r\n"),
        "ms k 9 T1 T2\r\nflush_all\r\n".into(),
        "ms k 9 MZ\r\nflush_all\r\n".into(),
        format!("ms k 9 {}\r\nflush_all\r\n", "O1 ".repeat(25)),
        "ms k 11 Tabc\r\ndelete keep\r\n".into(),
        "set k 0 0 2000000\r\n".to_string() + &"x".repeat(2_000_000) + "\r\n",
    ];
    // memcached 1.6.45 swallows nothing when its tokenizer refuses a meta
    // flag (one starting with neither a letter nor a digit) and runs the data
    // block as commands; osmium swallows it: a deliberate difference.
    let osmium_only: Vec<String> = vec!["ms k 9 !x\r\nflush_all\r\n".into()];
    for (kind, bin) in servers() {
        let srv = start(&bin, &[]);
        let mut c = srv.connect();
        assert_eq!(
            roundtrip(&mut c, b"set keep 0 0 4\r\ndata\r\n", b"\r\n"),
            b"STORED\r\n"
        );
        let extra = if kind == "osmium" {
            &osmium_only[..]
        } else {
            &[]
        };
        for req in refused.iter().chain(extra) {
            let reply = exchange(&mut c, req.as_bytes());
            let text = String::from_utf8_lossy(&reply);
            assert!(
                !text.contains("OK")
                    && !text.contains("DELETED")
                    && !text.contains("ERROR\r\nERROR"),
                "{kind}: the data block of {:?} ran as a command: {text:?}",
                &req[..req.len().min(40)]
            );
            assert_eq!(
                roundtrip(&mut c, b"get keep\r\n", b"END\r\n"),
                b"VALUE keep 0 4\r\ndata\r\nEND\r\n",
                "{kind}: after {:?}",
                &req[..req.len().min(40)]
            );
        }
    }
}

#[test]
fn keys_are_bytes_up_to_a_space_nul_included() {
    for (kind, bin) in servers() {
        let srv = start(&bin, &[]);
        let mut c = srv.connect();
        assert_eq!(
            roundtrip(&mut c, b"set a 0 0 1\r\nA\r\n", b"\r\n"),
            b"STORED\r\n"
        );
        assert_eq!(
            roundtrip(&mut c, b"set a\0b 0 0 1\r\nB\r\n", b"\r\n"),
            b"STORED\r\n",
            "{kind}"
        );
        assert_eq!(
            roundtrip(&mut c, b"get a\0b\r\n", b"END\r\n"),
            b"VALUE a\0b 0 1\r\nB\r\nEND\r\n",
            "{kind}: a NUL is part of the key"
        );
        assert_eq!(
            roundtrip(&mut c, b"delete a\0b\r\n", b"\r\n"),
            b"DELETED\r\n",
            "{kind}"
        );
        assert_eq!(
            roundtrip(&mut c, b"get a\r\n", b"END\r\n"),
            b"VALUE a 0 1\r\nA\r\nEND\r\n",
            "{kind}: deleting a\\0b left a alone"
        );
        assert_eq!(
            roundtrip(&mut c, b"get a\0b\r\n", b"END\r\n"),
            b"END\r\n",
            "{kind}"
        );
    }
}

#[test]
fn signals_stop_the_server_as_memcached_does() {
    for (kind, bin) in servers() {
        // SIGHUP does not kill.
        let mut srv = start(&bin, &[]);
        srv.send_signal(libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            srv.child().try_wait().unwrap().is_none(),
            "{kind}: SIGHUP killed it"
        );
        let mut c = srv.connect();
        assert_eq!(
            roundtrip(&mut c, b"version\r\n", b"\r\n")[..8],
            *b"VERSION "
        );
        // SIGUSR1, SIGTERM and SIGINT stop it with exit status 0.
        for sig in [libc::SIGUSR1, libc::SIGTERM, libc::SIGINT] {
            let mut srv = start(&bin, &[]);
            let mut c = srv.connect();
            assert_eq!(
                roundtrip(&mut c, b"set k 0 0 1\r\nv\r\n", b"\r\n"),
                b"STORED\r\n"
            );
            srv.send_signal(sig);
            let status = srv.wait_exit();
            assert_eq!(status.code(), Some(0), "{kind}: signal {sig}: {status:?}");
            if sig == libc::SIGUSR1 {
                let err = srv.stderr_text();
                assert!(err.contains("Gracefully stopping"), "{kind}: {err:?}");
            }
        }
        srv.send_signal(libc::SIGTERM);
        assert_eq!(srv.wait_exit().code(), Some(0));
    }
}

#[test]
fn a_connection_limit_above_the_open_file_limit_is_refused_at_start() {
    for (kind, bin) in servers() {
        // More than the kernel allows any process (fs.nr_open), root or not.
        let out = common::osmium()
            .bin(&bin)
            .args(["-c", "2000000"])
            .run_to_exit();
        assert_eq!(out.code(), Some(71), "{kind}");
        let err = out.stderr;
        assert!(
            err.contains("failed to set rlimit for open files"),
            "{kind}: {err:?}"
        );
    }
}

/// memcached's refusal, word for word.
const ROOT_REFUSAL: &str = "must add '-u root' to start as root\n";

#[test]
fn root_without_a_user_is_refused_before_any_socket_opens() {
    let root = osmium_test_harness::running_as_root();
    if !root {
        eprintln!("SKIP the refusal half: not running as root (-u matters only to root)");
    }
    let dir = std::env::temp_dir();
    let id = std::process::id();
    for (kind, bin) in servers() {
        if root {
            // The TCP port is taken: a server that bound it before refusing
            // would fail to listen instead. The unix socket must not appear;
            // the authentication file is read only after the refusal.
            let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = taken.local_addr().unwrap().port().to_string();
            let sock = dir.join(format!("osmium-root-refusal-{id}-{kind}.sock"));
            let authfile = dir.join(format!("osmium-root-refusal-{id}-{kind}.missing"));
            let _ = std::fs::remove_file(&sock);
            let sock = sock.to_str().unwrap();
            let authfile = authfile.to_str().unwrap();
            for extra in [
                &[][..],
                &["-u", ""],
                &["-Y", authfile],
                &["-s", sock],
                &["-d"],
            ] {
                let out = std::process::Command::new(&bin)
                    .args(["-p", &port, "-U", "0", "-l", "127.0.0.1"])
                    .args(extra)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .output()
                    .unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(64), "{kind} {extra:?}: {err:?}");
                assert_eq!(err, ROOT_REFUSAL, "{kind} {extra:?}");
                assert!(
                    !std::path::Path::new(sock).exists(),
                    "{kind} {extra:?}: made {sock}"
                );
            }
            drop(taken);
        }
        // `-u root` keeps root (and is ignored by anyone else): it serves.
        // (The builder gives `-u root` when the tests run as root.)
        let srv = start(&bin, &[]);
        let mut c = srv.connect();
        assert_eq!(
            roundtrip(&mut c, b"version\r\n", b"\r\n")[..8],
            *b"VERSION ",
            "{kind}"
        );
    }
}

#[test]
fn idle_timeout_closes_connections_that_sent_nothing() {
    for (kind, bin) in servers() {
        let srv = start(&bin, &["-o", "idle_timeout=1"]);
        let mut idle = srv.connect();
        let mut busy = srv.connect();
        idle.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let start = std::time::Instant::now();
        // The busy one keeps talking; the idle one must be closed.
        let mut buf = [0u8; 16];
        let closed = std::thread::spawn(move || matches!(idle.read(&mut buf), Ok(0) | Err(_)));
        while start.elapsed() < Duration::from_secs(4) {
            assert_eq!(
                roundtrip(&mut busy, b"version\r\n", b"\r\n")[..8],
                *b"VERSION ",
                "{kind}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            closed.join().unwrap(),
            "{kind}: the idle connection was not closed"
        );
        // memcached's t/idle-timeout.t: counted in idle_kicks.
        let stats = roundtrip(&mut busy, b"stats\r\n", b"END\r\n");
        let stats = String::from_utf8_lossy(&stats);
        assert!(
            stats.contains("\r\nSTAT idle_kicks 1\r\n"),
            "{kind}: {stats}"
        );
    }
    // Without the timeout there is no such row.
    for (kind, bin) in servers() {
        let srv = start(&bin, &[]);
        let stats = roundtrip(&mut srv.connect(), b"stats\r\n", b"END\r\n");
        assert!(
            !String::from_utf8_lossy(&stats).contains("idle_kicks"),
            "{kind}"
        );
    }
}

#[test]
fn stats_settings_inter_is_the_dash_l_values_as_given() {
    for (kind, bin) in servers() {
        // (`start` gives `-l 127.0.0.1` first.)
        let other = common::free_port();
        let second = format!("127.0.0.1:{other}");
        let srv = start(&bin, &["-l", &second]);
        let out = roundtrip(&mut srv.connect(), b"stats settings\r\n", b"END\r\n");
        let out = String::from_utf8_lossy(&out);
        assert!(
            out.contains(&format!("\r\nSTAT inter 127.0.0.1,{second}\r\n")),
            "{kind}: {out}"
        );
        // Both listen.
        let mut c = TcpStream::connect(("127.0.0.1", other)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(
            roundtrip(&mut c, b"version\r\n", b"\r\n")[..8],
            *b"VERSION "
        );
    }
}

#[test]
fn read_buffer_limit_closes_connections_beyond_it() {
    for (kind, bin) in servers() {
        // One worker, 1 MiB of read buffers: 64 buffers of 16 KiB.
        let srv = start(&bin, &["-t", "1", "-o", "read_buf_mem_limit=1"]);
        // Each connection holds a buffer: its request line is incomplete.
        let conns: Vec<TcpStream> = (0..100)
            .map(|_| {
                let mut c = srv.connect();
                c.write_all(b"get partial").unwrap();
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let mut closed = 0;
        for mut c in conns {
            c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let mut b = [0u8; 8];
            // Closed with its request unread: a reset, or the end.
            match c.read(&mut b) {
                Ok(0) => closed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
                _ => {}
            }
        }
        assert!(closed >= 20, "{kind}: {closed} connections closed");
        let mut c = srv.connect();
        let stats = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
        let oom: u64 = stats
            .lines()
            .find_map(|l| l.strip_prefix("STAT read_buf_oom "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        assert!(oom > 0, "{kind}: read_buf_oom {oom}");
    }
}

#[test]
fn stats_conns_lists_every_connection() {
    for (kind, bin) in servers() {
        let srv = start(&bin, &[]);
        let others: Vec<TcpStream> = (0..3).map(|_| srv.connect()).collect();
        let mut me = srv.connect();
        std::thread::sleep(Duration::from_millis(100));
        let local: Vec<u16> = others
            .iter()
            .map(|c| c.local_addr().unwrap().port())
            .collect();
        let stats = String::from_utf8(roundtrip(&mut me, b"stats conns\r\n", b"END\r\n")).unwrap();
        for port in local {
            assert!(
                stats.contains(&format!("addr tcp:127.0.0.1:{port}\r\n")),
                "{kind}: connection from port {port} missing in {stats}"
            );
        }
        assert!(stats.contains("state conn_listening"), "{kind}: {stats}");
        assert!(stats.contains("state conn_parse_cmd"), "{kind}: {stats}");
    }
}

#[test]
fn the_listener_survives_a_burst_of_clients() {
    for (_, bin) in servers() {
        let srv = start(&bin, &["-c", "2000"]);
        let conns: Vec<TcpStream> = (0..500).map(|_| srv.connect()).collect();
        wait_until("connections counted", || {
            let mut c = srv.connect();
            let s = String::from_utf8(roundtrip(&mut c, b"stats\r\n", b"END\r\n")).unwrap();
            s.lines()
                .find_map(|l| l.strip_prefix("STAT curr_connections "))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .is_some_and(|n| n >= 500)
        });
        drop(conns);
    }
}
