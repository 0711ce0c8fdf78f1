//! Integration tests for the UDP transport (`-U`) and unix-domain sockets
//! (`-s`, `-a`): start a real server on loopback (or a socket under a
//! temporary directory) and check the bytes genuine memcached sends.
//!
//! Every assertion here holds for genuine memcached too: each test runs
//! twice (`against_both!`), as `osmium::<name>` against the `osmium` binary
//! and as `memcached::<name>` against memcached 1.6.45
//! (`common::memcached_bin`: `MEMCACHED_BIN`, else the oracle built by
//! `scripts/build-memcached.sh`; as root `-u root` is added).

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common;
use common::{against_both, free_port, target_server};
use osmium_test_harness::Running;

const HEADER: usize = 8;
const MAX_DATAGRAM: usize = 1400;

/// The current target with TCP and UDP on the same free port, plus
/// `args`; the start waits until it holds both. No UDP request is sent to
/// test readiness: some tests count the server's UDP traffic from zero.
fn start_udp(args: &[&str]) -> Running {
    target_server().udp().args(args).start()
}

/// A UDP client of `srv`'s port.
fn udp_client(srv: &Running) -> UdpClient {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(("127.0.0.1", srv.port())).unwrap();
    UdpClient { socket }
}

/// A TCP connection to `srv` with a 5 s read timeout.
fn tcp(srv: &Running) -> TcpStream {
    let s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// The 8-byte frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    request_id: u16,
    sequence: u16,
    total: u16,
    reserved: u16,
}

fn header(request_id: u16, sequence: u16, total: u16) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER);
    for v in [request_id, sequence, total, 0] {
        h.extend_from_slice(&v.to_be_bytes());
    }
    h
}

fn parse_frame(d: &[u8]) -> Frame {
    assert!(d.len() >= HEADER, "datagram shorter than a header: {d:?}");
    let f = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
    Frame {
        request_id: f(0),
        sequence: f(2),
        total: f(4),
        reserved: f(6),
    }
}

struct UdpClient {
    socket: UdpSocket,
}

impl UdpClient {
    fn send_raw(&self, datagram: &[u8]) {
        self.socket.send(datagram).unwrap();
    }

    fn send(&self, request_id: u16, payload: &[u8]) {
        let mut d = header(request_id, 0, 1);
        d.extend_from_slice(payload);
        self.send_raw(&d);
    }

    /// Datagrams received until `quiet` passes without one.
    fn recv_all(&self, quiet: Duration) -> Vec<Vec<u8>> {
        self.socket.set_read_timeout(Some(quiet)).unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = self.socket.recv(&mut buf) {
            out.push(buf[..n].to_vec());
        }
        out
    }

    /// The next datagram (waiting up to 5 s).
    fn recv_one(&self) -> Vec<u8> {
        self.socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = vec![0u8; 65536];
        let n = self.socket.recv(&mut buf).expect("a reply datagram");
        buf.truncate(n);
        buf
    }

    /// Exactly `n` datagrams (waiting up to 5 s for them), then checks
    /// that no more follow shortly.
    fn recv_n(&self, n: usize) -> Vec<Vec<u8>> {
        self.socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        while out.len() < n {
            let len = self.socket.recv(&mut buf).expect("a reply datagram");
            out.push(buf[..len].to_vec());
        }
        let extra = self.recv_all(Duration::from_millis(150));
        assert!(extra.is_empty(), "unexpected extra datagrams: {extra:?}");
        out
    }

    /// One reply message that fits one datagram: its payload.
    fn request(&self, request_id: u16, payload: &[u8]) -> Vec<u8> {
        self.send(request_id, payload);
        let d = self.recv_n(1).remove(0);
        assert_eq!(
            parse_frame(&d),
            Frame {
                request_id,
                sequence: 0,
                total: 1,
                reserved: 0
            }
        );
        d[HEADER..].to_vec()
    }

    /// Reads one complete reply message (all its datagrams, checking their
    /// headers) and returns its reassembled payload.
    fn recv_message(&self, request_id: u16) -> Vec<u8> {
        self.socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = vec![0u8; 65536];
        let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
        loop {
            let n = self.socket.recv(&mut buf).expect("a reply datagram");
            assert!(n <= MAX_DATAGRAM, "datagram of {n} bytes");
            let f = parse_frame(&buf[..n]);
            assert_eq!((f.request_id, f.reserved), (request_id, 0));
            if parts.is_empty() {
                parts.resize(usize::from(f.total), None);
            }
            assert_eq!(
                usize::from(f.total),
                parts.len(),
                "same total in every header"
            );
            let slot = &mut parts[usize::from(f.sequence)];
            assert!(slot.is_none(), "sequence {} twice", f.sequence);
            *slot = Some(buf[HEADER..n].to_vec());
            if parts.iter().all(Option::is_some) {
                return parts.into_iter().flatten().flatten().collect();
            }
        }
    }
}

fn tcp_roundtrip(s: &mut TcpStream, req: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).expect("read reply");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn stat_value(stats: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(stats).lines().find_map(|l| {
        l.strip_prefix("STAT ")
            .and_then(|l| l.strip_prefix(name))
            .and_then(|l| l.strip_prefix(' '))
            .map(str::to_string)
    })
}

against_both!(
    udp_set_get_delete_and_request_id_echo,
    udp_stats_and_byte_counters,
    udp_large_values_span_numbered_datagrams,
    udp_multi_datagram_requests_and_garbage_are_dropped,
    udp_noreply_quit_and_data_block_continuation,
    udp_binary_requests,
    udp_shutdown_drops_pending_replies_and_exits,
    unix_socket_serves_and_disables_tcp_and_udp,
    unix_socket_default_mask_and_stale_file,
);

fn udp_set_get_delete_and_request_id_echo() {
    let srv = start_udp(&[]);
    let c = udp_client(&srv);
    assert_eq!(c.request(1, b"set k 3 0 5\r\nhello\r\n"), b"STORED\r\n");
    assert_eq!(
        c.request(0xfedc, b"get k\r\n"),
        b"VALUE k 3 5\r\nhello\r\nEND\r\n"
    );
    assert_eq!(c.request(7, b"delete k\r\n"), b"DELETED\r\n");
    assert_eq!(c.request(8, b"get k\r\n"), b"END\r\n");
    assert_eq!(c.request(9, b"bogus\r\n"), b"ERROR\r\n");
    // The sequence number and reserved field of a request are not looked at.
    let mut d = header(10, 5, 1);
    d[6] = 0xff;
    d.extend_from_slice(b"delete k\r\n");
    c.send_raw(&d);
    let r = c.recv_n(1).remove(0);
    assert_eq!(parse_frame(&r).request_id, 10);
    assert_eq!(&r[HEADER..], b"NOT_FOUND\r\n");
    // Several commands in one datagram: one reply message each.
    c.send(11, b"set a 0 0 1\r\nx\r\nincr a 1\r\ndelete a\r\n");
    let replies: Vec<Vec<u8>> = c
        .recv_n(3)
        .into_iter()
        .map(|d| d[HEADER..].to_vec())
        .collect();
    assert_eq!(
        replies,
        [
            &b"STORED\r\n"[..],
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            b"DELETED\r\n"
        ]
    );
}

fn udp_stats_and_byte_counters() {
    let srv = start_udp(&["-t", "2"]);
    let c = udp_client(&srv);
    assert_eq!(c.request(1, b"set s 0 0 2\r\nab\r\n"), b"STORED\r\n");
    c.send(2, b"stats\r\n");
    let stats = c.recv_message(2);
    assert!(stats.ends_with(b"END\r\n"));
    // bytes_read counts whole datagrams (headers too): 25 + 15 so far.
    assert_eq!(stat_value(&stats, "bytes_read").as_deref(), Some("40"));
    // 16 bytes written for STORED, before this reply.
    assert_eq!(stat_value(&stats, "bytes_written").as_deref(), Some("16"));
    // Each worker's UDP socket counts as a connection, as in memcached.
    let mut t = tcp(&srv);
    let general = tcp_roundtrip(&mut t, b"stats\r\n", b"END\r\n");
    assert_eq!(
        stat_value(&general, "curr_connections").as_deref(),
        Some("3")
    );
    let settings = tcp_roundtrip(&mut t, b"stats settings\r\n", b"END\r\n");
    assert_eq!(
        stat_value(&settings, "udpport"),
        Some(srv.port().to_string())
    );
    assert_eq!(
        stat_value(&settings, "num_threads_per_udp").as_deref(),
        Some("2")
    );
}

fn udp_large_values_span_numbered_datagrams() {
    let srv = start_udp(&[]);
    let value: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut t = tcp(&srv);
    let mut req = format!("set big 5 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\nset small 0 0 2\r\nhi\r\n");
    assert_eq!(
        tcp_roundtrip(&mut t, &req, b"STORED\r\nSTORED\r\n"),
        b"STORED\r\nSTORED\r\n"
    );

    let c = udp_client(&srv);
    c.send(42, b"get big\r\n");
    let mut want = format!("VALUE big 5 {}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    // 1392 payload bytes per datagram, numbered 0..n-1, n in every header.
    let n = want.len().div_ceil(MAX_DATAGRAM - HEADER);
    let datagrams = c.recv_n(n);
    let mut got = Vec::new();
    for (i, d) in datagrams.iter().enumerate() {
        let f = parse_frame(d);
        assert_eq!(
            f,
            Frame {
                request_id: 42,
                sequence: i as u16,
                total: n as u16,
                reserved: 0
            }
        );
        if i + 1 < n {
            assert_eq!(d.len(), MAX_DATAGRAM);
        }
        got.extend_from_slice(&d[HEADER..]);
    }
    assert_eq!(got, want);

    // A multi-key get: each key's value is its own message, END rides on
    // the last one; a missing first key is a bare header (count 0).
    c.send(43, b"get nokey small big small\r\n");
    assert_eq!(c.recv_one(), header(43, 0, 0));
    assert_eq!(c.recv_message(43), b"VALUE small 0 2\r\nhi\r\n");
    let mut big_alone = format!("VALUE big 5 {}\r\n", value.len()).into_bytes();
    big_alone.extend_from_slice(&value);
    big_alone.extend_from_slice(b"\r\n");
    assert_eq!(c.recv_message(43), big_alone);
    assert_eq!(c.recv_message(43), b"VALUE small 0 2\r\nhi\r\nEND\r\n");
    assert!(c.recv_all(Duration::from_millis(150)).is_empty());
}

fn udp_multi_datagram_requests_and_garbage_are_dropped() {
    let srv = start_udp(&[]);
    let c = udp_client(&srv);
    // A request announcing two datagrams gets no reply at all.
    let mut d = header(1, 0, 2);
    d.extend_from_slice(b"set m 0 0 1\r\nx\r\n");
    c.send_raw(&d);
    let mut d = header(1, 1, 2);
    d.extend_from_slice(b"get m\r\n");
    c.send_raw(&d);
    let mut d = header(2, 0, 0);
    d.extend_from_slice(b"get m\r\n");
    c.send_raw(&d);
    assert!(c.recv_all(Duration::from_millis(300)).is_empty());
    // Short datagrams: nothing.
    c.send_raw(b"");
    c.send_raw(b"abc");
    c.send_raw(&header(3, 0, 1));
    assert!(c.recv_all(Duration::from_millis(300)).is_empty());
    // Random bytes behind a valid header, text and binary: whatever the
    // reply, the server keeps serving. (Binary headers get zero key, extras
    // and body lengths: a random body length would make memcached, and so
    // osmium, read the following datagrams as that body.)
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random_byte = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as u8
    };
    for i in 0..200u16 {
        let len = 1 + usize::from(i) * 7 % 3000;
        let mut d = header(100 + i, 0, 1);
        let mut garbage: Vec<u8> = (0..len).map(|_| random_byte()).collect();
        if garbage[0] == 0x80 {
            garbage[0] = b'x';
        }
        if i % 2 == 0 {
            let mut request = [0u8; 24];
            request[0] = 0x80;
            request[1] = random_byte();
            request[12..24].iter_mut().for_each(|b| *b = random_byte());
            d.extend_from_slice(&request);
        }
        d.extend_from_slice(&garbage);
        c.send_raw(&d);
    }
    c.recv_all(Duration::from_millis(300));
    assert_eq!(c.request(999, b"get m\r\n"), b"END\r\n");
    // A line cut off by the end of its datagram is dropped; the next
    // datagram starts afresh.
    c.send(5, b"get m");
    assert!(c.recv_all(Duration::from_millis(300)).is_empty());
    assert_eq!(c.request(6, b"get m\r\n"), b"END\r\n");
    let mut t = tcp(&srv);
    assert_eq!(tcp_roundtrip(&mut t, b"get m\r\n", b"END\r\n"), b"END\r\n");
}

fn udp_noreply_quit_and_data_block_continuation() {
    // One worker: memcached keeps per-thread UDP state, so the datagram
    // after a cut-off data block must reach the same worker.
    let srv = start_udp(&["-t", "1"]);
    let c = udp_client(&srv);
    // noreply sends nothing, not even a bare header.
    c.send(1, b"set n 0 0 1 noreply\r\nx\r\n");
    assert!(c.recv_all(Duration::from_millis(300)).is_empty());
    // A data block cut off by the end of the datagram continues with the
    // next datagram, raw: its 8 header bytes are value bytes. The earlier
    // get's reply waits for the set to complete; both replies carry the
    // first id.
    c.send(2, b"get n\r\nset d 0 0 10\r\nabc");
    assert!(c.recv_all(Duration::from_millis(300)).is_empty());
    c.send_raw(b"ABCDEFG\r\nthe rest of this datagram is dropped");
    let r = c.recv_n(2);
    assert_eq!(
        r.iter()
            .map(|d| parse_frame(d).request_id)
            .collect::<Vec<_>>(),
        [2, 2]
    );
    assert_eq!(r[0][HEADER..], *b"VALUE n 0 1\r\nx\r\nEND\r\n");
    assert_eq!(&r[1][HEADER..], b"STORED\r\n");
    assert_eq!(
        c.request(3, b"get d\r\n"),
        b"VALUE d 0 10\r\nabcABCDEFG\r\nEND\r\n"
    );
    // quit sends the replies before it, then a bare header for itself when
    // it is first in line, and drops the rest of its datagram.
    c.send(4, b"quit\r\nget d\r\n");
    assert_eq!(c.recv_n(1), [header(4, 0, 0)]);
    assert_eq!(c.request(5, b"delete n\r\n"), b"DELETED\r\n");
}

/// A binary request: header, extras, key, value.
fn binary_request(opcode: u8, opaque: u32, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut r = vec![0x80, opcode];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.push(extras.len() as u8);
    r.extend_from_slice(&[0, 0, 0]); // data type, vbucket
    let body = extras.len() + key.len() + value.len();
    r.extend_from_slice(&(body as u32).to_be_bytes());
    r.extend_from_slice(&opaque.to_be_bytes());
    r.extend_from_slice(&[0; 8]); // cas
    r.extend_from_slice(extras);
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    r
}

fn udp_binary_requests() {
    let srv = start_udp(&[]);
    let c = udp_client(&srv);
    const GET: u8 = 0x00;
    const SET: u8 = 0x01;
    const GETQ: u8 = 0x09;
    const NOOP: u8 = 0x0a;
    c.send(1, &binary_request(SET, 7, &[0; 8], b"bk", b"hello"));
    let r = c.recv_n(1).remove(0);
    assert_eq!(parse_frame(&r).request_id, 1);
    assert_eq!((r[HEADER], r[HEADER + 1]), (0x81, SET));
    assert_eq!(r[HEADER + 6..HEADER + 8], [0, 0], "status: no error");
    // One message per request: a quiet miss first in line is a bare header.
    let mut d = binary_request(GETQ, 8, &[], b"missing", &[]);
    d.extend_from_slice(&binary_request(GET, 9, &[], b"bk", &[]));
    d.extend_from_slice(&binary_request(NOOP, 10, &[], &[], &[]));
    c.send(2, &d);
    let replies = c.recv_n(3);
    assert_eq!(replies[0], header(2, 0, 0));
    let get = &replies[1][HEADER..];
    assert_eq!((get[0], get[1]), (0x81, GET));
    assert_eq!(get[12..16], 9u32.to_be_bytes(), "opaque echoed");
    assert!(get.ends_with(b"hello"));
    let noop = &replies[2][HEADER..];
    assert_eq!((noop.len(), noop[1]), (24, NOOP));
}

fn udp_shutdown_drops_pending_replies_and_exits() {
    let mut srv = start_udp(&["-A", "-t", "1"]);
    let c = udp_client(&srv);
    // The replies to the get and the set, still queued, are dropped by
    // shutdown.
    c.send(1, b"get a\r\nset b 0 0 1\r\nx\r\nshutdown\r\n");
    assert!(srv.wait_exit().success());
    assert!(c.recv_all(Duration::from_millis(300)).is_empty());
}

fn unix_socket_serves_and_disables_tcp_and_udp() {
    let dir = TempDir::new("serve");
    let path = dir.path().join("mc.sock");
    let port = free_port();
    let p = port.to_string();
    let mut srv = target_server()
        .unix_socket(&path)
        .args(["-p", &p, "-U", &p, "-a", "640"])
        .start();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);

    let mut c = unix_connect(&path);
    assert_eq!(
        unix_roundtrip(&mut c, b"set u 0 0 2\r\nhi\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        unix_roundtrip(&mut c, b"get u\r\n", b"END\r\n"),
        b"VALUE u 0 2\r\nhi\r\nEND\r\n"
    );
    let settings = unix_roundtrip(&mut c, b"stats settings\r\n", b"END\r\n");
    assert_eq!(
        stat_value(&settings, "domain_socket"),
        Some(path.display().to_string())
    );
    assert_eq!(stat_value(&settings, "umask").as_deref(), Some("640"));
    let conns = unix_roundtrip(&mut c, b"stats conns\r\n", b"END\r\n");
    assert!(
        String::from_utf8_lossy(&conns).contains(&format!("listen_addr unix:{}", path.display()))
    );
    let stats = unix_roundtrip(&mut c, b"stats\r\n", b"END\r\n");
    assert_eq!(stat_value(&stats, "curr_connections").as_deref(), Some("1"));

    // With -s, neither TCP nor UDP is served.
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect(("127.0.0.1", port)).unwrap();
    let client = UdpClient { socket: udp };
    client.send(1, b"get u\r\n");
    assert!(client.recv_all(Duration::from_millis(300)).is_empty());

    // memcached leaves the socket file behind when it stops.
    srv.send_signal(libc::SIGTERM);
    srv.wait_exit();
    assert!(path.exists());
}

fn unix_socket_default_mask_and_stale_file() {
    let dir = TempDir::new("stale");
    let path = dir.path().join("mc.sock");
    // A stale socket file (left by a killed server) is replaced by a new
    // one with the default mask.
    let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
    drop(stale);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let srv = target_server().unix_socket(&path).start();
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    let mut c = unix_connect(&path);
    assert_eq!(
        unix_roundtrip(&mut c, b"get none\r\n", b"END\r\n"),
        b"END\r\n"
    );
    drop(srv);

    // Any other kind of file is left alone and the server does not start
    // (exit code 71, EX_OSERR).
    let regular = dir.path().join("regular");
    std::fs::write(&regular, b"keep me").unwrap();
    let refused = target_server().unix_socket(&regular).run_to_exit();
    assert_eq!(refused.code(), Some(71), "{:?}", refused.stderr);
    assert_eq!(std::fs::read(&regular).unwrap(), b"keep me");
}

/// A connection to the unix socket `path` with a 5 s read timeout.
fn unix_connect(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn unix_roundtrip(s: &mut UnixStream, req: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).expect("read reply");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "osmium-udp-unix-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
