//! What osmium-proxy writes to its log at the default level: an ejected
//! server is said (an operator must know that keys moved), and no ANSI
//! colour codes reach a log that is not a terminal.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common;
use common::{backend, connect, free_port, proxy};

#[test]
fn an_ejection_is_logged_at_the_default_level_without_colour_codes() {
    let live = backend(0);
    let port = free_port();
    // A port nobody listens on, out of the ephemeral range (a free
    // ephemeral port can be taken meanwhile, or connect to itself): the
    // server there fails at once.
    let dead = (1..1024u16)
        .find(|&p| {
            TcpStream::connect(("127.0.0.1", p))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        })
        .expect("a privileged port nobody listens on");
    let yaml = format!(
        "p:\n  listen: 127.0.0.1:{port}\n  auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 60000\n  timeout: 1000\n  servers:\n   - 127.0.0.1:{dead}:1\n   - 127.0.0.1:{}:1\n",
        live.port()
    );
    let mut px = proxy(&yaml, port);
    // (Moved to another port if that one was taken meanwhile.)
    let port = px.port();
    // Keys until one reaches the dead server (the proxy's stats count the
    // ejection): how many keys the live one takes first depends on both
    // servers' names on the ring, i.e. on the ports.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = connect(port);
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut replies = Vec::new();
    let mut i = 0;
    while Instant::now() < deadline && i < 5000 && !ejected(px.stats_port()) {
        for _ in 0..25 {
            let _ = c.write_all(format!("get k{i}\r\n").as_bytes());
            i += 1;
            let mut buf = [0u8; 256];
            let n = c.read(&mut buf).unwrap_or(0);
            replies.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            if n == 0 {
                c = connect(port);
                c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            }
        }
    }
    replies.dedup();
    px.stop();
    let log = px.stderr_text();
    assert!(
        log.contains(&format!("ejecting server 127.0.0.1:{dead} of pool p")),
        "no ejection of {dead} (live {}, proxy {port}) in the log:\n{log}\nreplies: {replies:?}",
        live.port()
    );
    assert!(
        !log.contains("\x1b["),
        "ANSI codes in a piped log:\n{log:?}"
    );
}

/// Whether the proxy's stats (nutcracker's JSON on its stats port) count
/// an ejection.
fn ejected(stats_port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", stats_port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let mut json = String::new();
    let _ = s.read_to_string(&mut json);
    json.split("\"server_ejects\":").skip(1).any(|rest| {
        rest.trim_start()
            .starts_with(|c: char| ('1'..='9').contains(&c))
    })
}
