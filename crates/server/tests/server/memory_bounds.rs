//! Memory outside `-m` stays bounded and is given back: osmium's resident
//! size stays under 1.1 x `-m` + 64 MB with a full cache and 5,000
//! clients (and after they leave), under a `get` line without a newline
//! longer than that bound (160 MB; 300 MB with `OSMIUM_LONG_TESTS=1`), and
//! with clients that do not read replies that add up to more than the bound
//! (100 clients asking for 2 MB each; 300 asking for 3 MB with
//! `OSMIUM_LONG_TESTS=1`). (memcached
//! 1.6.45 buffers such a get line whole, and a slow reader's replies hold
//! its items, so these bounds are osmium's own and are checked on osmium
//! only.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common;
use osmium_test_harness::Running;

const MEMORY_MB: u64 = 64;
/// 1.1 x -m + 64 MB.
const RSS_LIMIT_KB: u64 = (MEMORY_MB * 1024 * 11 / 10) + 64 * 1024;
const VALUE: usize = 10 * 1024;
/// Enough 10 KiB items to fill -m 64 (and evict).
const ITEMS: usize = 7_500;

/// osmium with `-m MEMORY_MB`, and what these tests measure of it.
struct Server(Running);

impl std::ops::Deref for Server {
    type Target = Running;

    fn deref(&self) -> &Running {
        &self.0
    }
}

impl Server {
    fn start(args: &[&str]) -> Server {
        Server(
            common::osmium()
                .memory(MEMORY_MB as u32)
                .args(["-c", "12000"])
                .args(args)
                .start(),
        )
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Resident set size in KiB.
    fn rss_kb(&self) -> u64 {
        rss_kb(self.pid())
    }

    fn assert_rss(&self, when: &str) -> u64 {
        let rss = self.rss_kb();
        assert!(
            rss <= RSS_LIMIT_KB,
            "{when}: RSS {rss} KiB over the bound {RSS_LIMIT_KB} KiB"
        );
        eprintln!("{when}: RSS {} MiB", rss / 1024);
        rss
    }

    /// RSS once the server has given memory back (it trims after a burst).
    fn settled_rss(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let rss = self.rss_kb();
            if rss <= RSS_LIMIT_KB || Instant::now() > deadline {
                return rss;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Fills the cache with `ITEMS` values of 10 KiB.
    fn fill(&self) {
        let mut c = self.connect();
        let value = vec![b'v'; VALUE];
        for i in 0..ITEMS {
            let mut req = format!("set key{i} 0 0 {VALUE} noreply\r\n").into_bytes();
            req.extend_from_slice(&value);
            req.extend_from_slice(b"\r\n");
            c.write_all(&req).unwrap();
        }
        c.write_all(b"version\r\n").unwrap();
        read_until(&mut c, b"\r\n");
    }
}

/// Samples a process's RSS every 10 ms in the background; `stop` returns
/// the highest value seen.
struct PeakRss {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl PeakRss {
    fn start(pid: u32) -> PeakRss {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(rss_kb(pid));
                std::thread::sleep(Duration::from_millis(10));
            }
            peak.max(rss_kb(pid))
        });
        PeakRss { stop, thread }
    }

    /// The peak, checked against the bound.
    fn check(self, when: &str) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let peak = self.thread.join().unwrap();
        assert!(
            peak <= RSS_LIMIT_KB,
            "{when}: peak RSS {peak} KiB over the bound {RSS_LIMIT_KB} KiB"
        );
        eprintln!("{when}: peak RSS {} MiB", peak / 1024);
        peak
    }
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while !out.ends_with(end) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read failed: {e}"),
        }
    }
    out
}

/// Room for thousands of client sockets in this test process.
fn raise_open_files(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on structs this function owns.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_cur < n {
            let raised = libc::rlimit {
                rlim_cur: n.min(lim.rlim_max.max(n)),
                rlim_max: lim.rlim_max.max(n),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                let soft = libc::rlimit {
                    rlim_cur: lim.rlim_max,
                    rlim_max: lim.rlim_max,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
            }
        }
    }
}

#[test]
fn five_thousand_clients_on_a_full_cache() {
    raise_open_files(12_000);
    let srv = Server::start(&[]);
    srv.fill();
    srv.assert_rss("full cache");
    let peak = PeakRss::start(srv.pid());
    let mut conns: Vec<TcpStream> = (0..5_000).map(|_| srv.connect()).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(format!("get key{}\r\n", ITEMS - 1 - (i % 3000)).as_bytes())
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(1000));
    let mut hits = 0;
    for c in &mut conns {
        let reply = read_until(c, b"END\r\n");
        hits += usize::from(reply.starts_with(b"VALUE "));
    }
    assert!(hits > 2_000, "{hits} hits");
    peak.check("5,000 clients connecting, asking, reading");
    drop(conns);
    let rss = srv.settled_rss();
    assert!(rss <= RSS_LIMIT_KB, "after they closed: RSS {rss} KiB");
    eprintln!("after they closed: RSS {} MiB", rss / 1024);
}

#[test]
fn a_get_line_longer_than_the_bound_without_a_newline() {
    // MiB sent: over RSS_LIMIT_KB, so a server that buffered the line whole
    // would break the bound.
    let mib = osmium_test_harness::sized(160, 300);
    assert!(mib * 1024 > RSS_LIMIT_KB);
    let srv = Server::start(&[]);
    srv.fill();
    let chunk_keys: Vec<u8> = (0..(1 << 20) / 8)
        .flat_map(|i| format!("k{:06} ", i % 1_000_000).into_bytes())
        .collect();
    let one_key = vec![b'k'; 1 << 20];
    for (what, chunk) in [("many keys", &chunk_keys), ("one endless key", &one_key)] {
        let peak = PeakRss::start(srv.pid());
        let mut c = srv.connect();
        c.write_all(b"get ").unwrap();
        for _ in 0..mib {
            c.write_all(chunk).unwrap();
        }
        c.write_all(b"\r\n").unwrap();
        match what {
            "many keys" => assert_eq!(read_until(&mut c, b"\r\n"), b"END\r\n"),
            // memcached's answer to a key over 250 bytes in a get.
            _ => assert_eq!(
                read_until(&mut c, b"\r\n\r\n"),
                b"CLIENT_ERROR bad command line format\r\n\r\n"
            ),
        }
        assert_eq!(
            read_until_reply(&mut c, b"version\r\n")[..8],
            *b"VERSION ",
            "{what}: the connection goes on"
        );
        peak.check(&format!("{what}: {mib} MiB without a newline"));
        drop(c);
        let rss = srv.settled_rss();
        assert!(rss <= RSS_LIMIT_KB, "{what}: after: RSS {rss} KiB");
    }
}

fn read_until_reply(c: &mut TcpStream, req: &[u8]) -> Vec<u8> {
    c.write_all(req).unwrap();
    read_until(c, b"\r\n")
}

#[test]
fn clients_that_do_not_read_their_replies() {
    raise_open_files(12_000);
    let srv = Server::start(&[]);
    srv.fill();
    // Clients each ask for 2 MB of replies (3 MB with OSMIUM_LONG_TESTS=1)
    // and read nothing yet; their receive buffers are small, so the replies
    // wait in the server: more than the bound, were they copied.
    let (clients, per_client) = osmium_test_harness::sized((100, 200), (300, 300));
    assert!((clients * per_client * VALUE / 1024) as u64 > RSS_LIMIT_KB);
    let gets: Vec<u8> = (0..per_client)
        .flat_map(|i| format!("get key{}\r\n", ITEMS - 1 - i).into_bytes())
        .collect();
    let peak = PeakRss::start(srv.pid());
    let mut conns = Vec::new();
    for _ in 0..clients {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let addr: std::net::SocketAddr = format!("127.0.0.1:{}", srv.port()).parse().unwrap();
        sock.connect(&addr.into()).unwrap();
        let mut c: TcpStream = sock.into();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c.write_all(&gets).unwrap();
        conns.push(c);
    }
    std::thread::sleep(Duration::from_millis(1500));
    // Every reply arrives once they read: all clients read at once (one
    // after another, each waits on its small receive window alone).
    std::thread::scope(|scope| {
        for c in &mut conns {
            scope.spawn(move || {
                let mut ends = 0;
                let mut tail = Vec::new();
                let mut buf = vec![0u8; 1 << 16];
                while ends < per_client {
                    let n = c.read(&mut buf).unwrap();
                    assert!(n > 0, "closed early");
                    tail.extend_from_slice(&buf[..n]);
                    ends += tail.windows(5).filter(|w| *w == b"END\r\n").count();
                    let keep = tail.len().saturating_sub(4);
                    tail.drain(..keep);
                }
            });
        }
    });
    peak.check(&format!(
        "{clients} clients asking for {per_client} replies of 10 KiB each and reading them late"
    ));
    drop(conns);
    let rss = srv.settled_rss();
    assert!(rss <= RSS_LIMIT_KB, "after they closed: RSS {rss} KiB");
}

/// The memory a worker counts as held by unsent replies (`stats
/// response_obj_bytes`) returns to nothing once every reply is sent, however
/// many requests came before: a drift there would push busy connections over
/// the worker's output budget and make them yield after every request.
#[test]
fn reply_memory_is_counted_back_when_replies_are_sent() {
    let srv = Server::start(&["-t", "1"]);
    let mut c = srv.connect();
    assert_eq!(
        read_until_reply(&mut c, b"set k 0 0 1\r\nv\r\n"),
        b"STORED\r\n"
    );
    for _ in 0..2_000 {
        c.write_all(b"get k\r\n").unwrap();
        read_until(&mut c, b"END\r\n");
    }
    drop(c);
    let mut s = srv.connect();
    s.write_all(b"stats\r\n").unwrap();
    let stats = String::from_utf8(read_until(&mut s, b"END\r\n")).unwrap();
    let held: usize = stats
        .lines()
        .find_map(|l| l.strip_prefix("STAT response_obj_bytes "))
        .expect("response_obj_bytes")
        .trim()
        .parse()
        .unwrap();
    assert!(
        held <= 64 * 1024,
        "response_obj_bytes {held} after 2,000 replies"
    );
}
