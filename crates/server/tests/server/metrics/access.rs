//! The metrics endpoint's guards: the bearer token on every path, the
//! start refusals of combinations that would leak key names, and slow
//! clients from one address (cut at the request's deadline, never holding
//! the endpoint from another address). The helpers are the parent
//! module's.

use super::*;

/// A token file for `--metrics-token-file` (mode 600), in a directory
/// removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("osmium-metrics-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str, content: &str, mode: u32) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = self.0.join(name);
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const TOKEN: &str = "metrics-test-token-0123456789abcdef";

/// With `--metrics-token-file`, every path needs `Authorization: Bearer
/// <token>`: none, a wrong one, another scheme or two headers are 401 with
/// `WWW-Authenticate: Bearer` and nothing of the cache.
#[test]
fn a_token_guards_every_path() {
    let dir = TempDir::new("token");
    let token = dir.file("token", &format!("{TOKEN}\n"), 0o600);
    let auth = dir.file("auth", "alice:pw\n", 0o600);
    let args = [
        "-Y",
        auth.as_str(),
        "--metrics-hotkeys",
        "--metrics-token-file",
        token.as_str(),
        "-o",
        "hotkeys_sample=1/1",
    ];
    let s = metrics_server("flag").args(args).start();
    memcached(
        s.port(),
        b"set a 0 0 8\r\nalice pw\r\nset session:alice 0 0 1\r\nx\r\nget session:alice\r\nmn\r\n",
        b"MN\r\n",
    );
    let right = format!("Authorization: Bearer {TOKEN}\r\n");
    let refused = [
        String::new(),
        "Authorization: Bearer metrics-test-token-0123456789abcdeX\r\n".into(),
        format!("Authorization: Bearer {}\r\n", &TOKEN[..TOKEN.len() - 1]),
        format!("Authorization: Basic {TOKEN}\r\n"),
        format!("{right}Authorization: Bearer wrong-token-0123456789\r\n"),
    ];
    for path in ["/metrics", "/hotkeys", "/nothing"] {
        for headers in &refused {
            let (status, head, body) = get(metrics_port(&s), path, headers);
            assert_eq!(status, 401, "{path} {headers:?}: {head}");
            assert!(head.contains("\r\nWWW-Authenticate: Bearer"), "{head}");
            assert!(
                !body.contains("memcached") && !body.contains("alice"),
                "{body}"
            );
        }
    }
    let (status, _, body) = get(metrics_port(&s), "/metrics", &right);
    assert_eq!(status, 200);
    assert!(body.contains("memcached_up 1"));
    assert!(!body.contains("alice"));
    let (status, _, body) = get(metrics_port(&s), "/hotkeys", &right);
    assert_eq!(status, 200);
    assert!(body.starts_with("STAT hotkey 1 session%3Aalice "), "{body}");
    // The cache port's unauthenticated clients get no names either.
    let out = memcached(s.port(), b"stats hotkeys\r\n", b"\r\n");
    assert_eq!(out, b"CLIENT_ERROR unauthenticated\r\n");
}

/// Key names to any HTTP client while the cache port shows them only to
/// authenticated clients: refused at start (64), as are token files that
/// are open to others, weak, or for no endpoint.
#[test]
fn leaking_combinations_are_refused_at_start() {
    let dir = TempDir::new("refused");
    let auth = dir.file("auth", "alice:pw\n", 0o600);
    let token = dir.file("token", TOKEN, 0o600);
    let open = dir.file("open", TOKEN, 0o644);
    let weak = dir.file("weak", "short", 0o600);
    let (auth, token, open, weak) = (auth.as_str(), token.as_str(), open.as_str(), weak.as_str());
    let with_addr = ["--metrics-addr", "127.0.0.1:0"];
    let cases: [(&[&str], &[&str], &str); 9] = [
        (
            &with_addr,
            &["-Y", auth, "--metrics-hotkeys"],
            "-Y guards the cache port",
        ),
        (
            &with_addr,
            &["-S", "--sasl-pwdb", auth, "--metrics-hotkeys"],
            "-S guards",
        ),
        (
            &with_addr,
            &["-Z", "-o", "ssl_verify_mode=2", "--metrics-hotkeys"],
            "client certificates",
        ),
        (
            &with_addr,
            &["-Z", "-l", "mtls:127.0.0.1", "--metrics-hotkeys"],
            "client certificates",
        ),
        (&with_addr, &["--metrics-token-file", open], "chmod 600"),
        (
            &with_addr,
            &["--metrics-token-file", weak],
            "printable ASCII",
        ),
        (
            &with_addr,
            &[
                "-Y",
                auth,
                "--metrics-hotkeys",
                "--metrics-token-file",
                open,
            ],
            "chmod 600",
        ),
        (
            &[],
            &["--metrics-hotkeys"],
            "--metrics-hotkeys needs --metrics-addr",
        ),
        (
            &[],
            &["--metrics-token-file", token],
            "--metrics-token-file needs --metrics-addr",
        ),
    ];
    for (addr, args, said) in cases {
        // Were it to start, it is stopped: a failure, not a hang.
        let out = common::osmium().args(addr).args(args).run_to_exit();
        assert_eq!(out.code(), Some(64), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(said), "{args:?}: {}", out.stderr);
    }
}

/// A connection from the loopback address `from` (127.0.0.2 is another
/// client than 127.0.0.1).
fn connect_from(from: &str, port: u16) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let local: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    sock.bind(&local.into()).unwrap();
    let remote: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    sock.connect(&remote.into()).unwrap();
    sock.into()
}

/// Eight slow-loris clients from one address, each sending a byte every
/// 500 ms: two are served (the per-address cap) and cut at the request's
/// deadline (5 s for head and reply together, however often they send),
/// the others answered 503 at once; meanwhile another address scrapes
/// within a second, again and again.
#[test]
fn slow_clients_from_one_address_do_not_hold_the_endpoint() {
    let s = metrics_server("flag").start();
    let started = Instant::now();
    let slow: Vec<std::thread::JoinHandle<(u16, Duration)>> = (0..8)
        .map(|_| {
            let mut c = connect_from("127.0.0.1", metrics_port(&s));
            c.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
            std::thread::spawn(move || {
                let mut reader = c.try_clone().unwrap();
                let dribble = std::thread::spawn(move || {
                    // The attack's own pace: a header byte every 500 ms.
                    while started.elapsed() < Duration::from_secs(12) {
                        std::thread::sleep(Duration::from_millis(500));
                        if c.write_all(b"X").is_err() {
                            break;
                        }
                    }
                });
                reader
                    .set_read_timeout(Some(Duration::from_secs(15)))
                    .unwrap();
                let mut out = Vec::new();
                let _ = reader.read_to_end(&mut out);
                let ended = started.elapsed();
                let _ = reader.shutdown(std::net::Shutdown::Both);
                let _ = dribble.join();
                (split(&String::from_utf8_lossy(&out)).0, ended)
            })
        })
        .collect();
    for _ in 0..5 {
        let t = Instant::now();
        let mut c = connect_from("127.0.0.2", metrics_port(&s));
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        let (status, head, _) = split(&String::from_utf8_lossy(&out));
        assert_eq!(status, 200, "{head}");
        // Served while the slow clients hold their places (loose: a loaded
        // machine is slow; a held endpoint answers after the 5 s deadline).
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        std::thread::sleep(Duration::from_millis(300));
    }
    // Whether a cut connection shows its 408 or a reset depends on what
    // it sent last: its time is the proof.
    let ends: Vec<(u16, Duration)> = slow.into_iter().map(|h| h.join().unwrap()).collect();
    // Cut at the 5 s deadline (a per-read limit would keep them to the
    // attack's end, 12 s); refused well before it.
    let cut = Duration::from_millis(4500)..Duration::from_secs(11);
    let served = ends.iter().filter(|(_, t)| cut.contains(t)).count();
    let refused = ends
        .iter()
        .filter(|(_, t)| *t < Duration::from_secs(4))
        .count();
    assert_eq!((served, refused), (2, 6), "{ends:?}");
    assert!(
        ends.iter()
            .all(|(status, _)| [0, 408, 503].contains(status)),
        "{ends:?}"
    );
}
