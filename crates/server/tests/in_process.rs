//! Servers inside the test's own process (`osmium_server::Server::start`):
//! two at once on ports the system picks (`-l 127.0.0.1:0`), each with its
//! own store, reached over real sockets; stopped, they leave no thread
//! running and their ports free. And the options that would act on the
//! whole process are refused.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use osmium_server::{Config, RunningServer, Server};

fn start(extra: &[&str]) -> RunningServer {
    let mut args = vec!["-l", "127.0.0.1:0", "-m", "16", "-t", "2"];
    args.extend_from_slice(extra);
    let config = Config::from_args(args).expect("a valid command line");
    Server::start(config).expect("an in-process server starts")
}

/// Sends `request` and reads until the reply ends with `end`.
fn exchange(conn: &mut TcpStream, request: &str, end: &str) -> String {
    conn.write_all(request.as_bytes()).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(end.as_bytes()) {
        let n = conn
            .read(&mut buf)
            .expect("a reply before the read timeout");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(reply).unwrap()
}

fn connect(addr: SocketAddr) -> TcpStream {
    let conn = TcpStream::connect(addr).expect("connect to the in-process server");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn
}

/// The names of this process's threads that the servers started.
fn server_threads() -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(name) = std::fs::read_to_string(task.path().join("comm")) {
            if name.starts_with("osmium-") {
                names.push(name.trim_end().to_string());
            }
        }
    }
    names
}

/// Nothing listens on `addr` any more: a listener binds it (std sets
/// `SO_REUSEADDR`, as the server does, so only a listening socket there
/// could refuse it).
fn assert_free(addr: SocketAddr) {
    match TcpListener::bind(addr) {
        Ok(l) => drop(l),
        Err(e) => panic!("{addr} still taken after the stop: {e}"),
    }
}

#[test]
fn two_servers_in_one_process_serve_and_stop() {
    let a = start(&["--metrics-addr", "127.0.0.1:0"]);
    let b = start(&[]);
    let (a_addr, b_addr) = (a.tcp_addrs()[0], b.tcp_addrs()[0]);
    assert_eq!(a.tcp_addrs().len(), 1);
    assert_ne!(a_addr.port(), 0);
    assert_ne!(a_addr, b_addr);
    let metrics = a.metrics_addr().expect("the metrics endpoint's address");
    assert!(b.metrics_addr().is_none());
    assert!(a.is_running() && b.is_running());

    let mut to_a = connect(a_addr);
    let mut to_b = connect(b_addr);
    let set = |key: &str, value: &str| format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
    assert_eq!(
        exchange(&mut to_a, &set("k", "from-a"), "\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        exchange(&mut to_b, &set("k", "from-b"), "\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        exchange(&mut to_a, "get k\r\n", "END\r\n"),
        "VALUE k 0 6\r\nfrom-a\r\nEND\r\n"
    );
    assert_eq!(
        exchange(&mut to_b, "get k\r\n", "END\r\n"),
        "VALUE k 0 6\r\nfrom-b\r\nEND\r\n"
    );
    // Each has its own store.
    assert_eq!(
        exchange(&mut to_a, &set("only-a", "1"), "\r\n"),
        "STORED\r\n"
    );
    assert_eq!(exchange(&mut to_b, "get only-a\r\n", "END\r\n"), "END\r\n");
    // The metrics endpoint answers too (and closes: one request a
    // connection).
    let mut scrape = connect(metrics);
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut page = String::new();
    scrape.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("memcached_current_items 2"), "{page}");

    let running = server_threads();
    assert!(
        running
            .iter()
            .filter(|n| n.as_str() == "osmium-acceptor")
            .count()
            == 2,
        "{running:?}"
    );
    // The clients close first: no connection of the servers' ports is
    // left in TIME_WAIT on their side.
    drop(to_a);
    drop(to_b);
    a.stop().expect("a stops");
    b.stop().expect("b stops");

    // Joined by the stop; only a metrics client's thread ends on its
    // own, once its reply is out (already read above).
    let left = server_threads();
    let client = "osmium-metrics-"; // "osmium-metrics-client", as comm cuts it
    assert!(
        left.iter().all(|n| n == client),
        "threads still running: {left:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !server_threads().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            server_threads()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_free(a_addr);
    assert_free(b_addr);
    assert_free(metrics);
}

/// A port taken is `AddrInUse`, in the binary's words.
#[test]
fn a_port_in_use_is_said_as_the_binary_says_it() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let config = Config::from_args(["-l", &addr, "-m", "16"]).unwrap();
    let failed = Server::start(config).err().expect("the port is taken");
    assert_eq!(failed.kind(), std::io::ErrorKind::AddrInUse);
    assert_eq!(
        failed.to_string(),
        format!("failed to listen on one of interface(s) {addr}: Address already in use")
    );
}

#[test]
fn options_acting_on_the_whole_process_are_refused() {
    let socket =
        std::env::temp_dir().join(format!("osmium-in-process-{}.sock", std::process::id()));
    let socket = socket.to_str().unwrap();
    for option in [
        &["-d"][..],
        &["-u", "nobody"],
        &["-k"],
        &["-r"],
        &["-s", socket],
    ] {
        let config = Config::from_args(option.iter().copied()).unwrap();
        let refused = Server::start(config).err().expect("refused");
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
        let said = refused.to_string();
        assert!(said.contains(option[0]), "{option:?}: {said}");
    }
    assert!(!std::path::Path::new(socket).exists());
}
