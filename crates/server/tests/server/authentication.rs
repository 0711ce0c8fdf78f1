//! SASL (`-S`) over the binary protocol and text authentication (`-Y`)
//! over real loopback sockets. `text_protocol_authentication` runs against
//! osmium and memcached 1.6.45 (`against_both!`); the SASL tests need
//! osmium's own `--sasl-pwdb` and run against osmium only.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::binary_wire;
use crate::common;
use binary_wire::*;
use common::against_both;

against_both!(text_protocol_authentication);

/// A file of its own for each call (tests run in parallel threads).
fn temp_file(name: &str, content: &[u8]) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("osmium-test-{}-{n}-{name}", std::process::id()));
    std::fs::write(&path, content).unwrap();
    path
}

fn sasl_auth(user_pass: &[u8]) -> Req {
    Req::new(SASL_AUTH).key(b"PLAIN").value(user_pass)
}

#[test]
fn sasl_plain_authentication() {
    let pwdb = temp_file("pwdb", b"alice:secret\nbob:pw2\n");
    let srv = Server::start(&["-S", "--sasl-pwdb", pwdb.to_str().unwrap()]);
    let mut c = srv.connect();
    let settings_before_auth = one(&mut c, Req::new(SASL_LIST).opaque(3));
    assert_eq!(
        (settings_before_auth.status, settings_before_auth.opaque),
        (0, 3)
    );
    assert_eq!(settings_before_auth.value, b"PLAIN");
    // VERSION is allowed before authentication; anything else closes.
    assert_eq!(one(&mut c, Req::new(VERSION)).status, 0);
    c.write_all(&pipeline(&[Req::new(GET).key(b"k"), Req::new(NOOP)]))
        .unwrap();
    let got = parse(&read_to_close(&mut c));
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].op, got[0].status, got[0].text().as_str()),
        (GET, AUTH_ERROR, "Auth failure.")
    );
    // Wrong password, unknown user, unknown mechanism: failure, still open.
    let mut c = srv.connect();
    for bad in [
        sasl_auth(b"\0alice\0wrong"),
        sasl_auth(b"\0carol\0secret"),
        sasl_auth(b"bob\0alice\0secret"),
        Req::new(SASL_AUTH).key(b"CRAM-MD5").value(b"x"),
        Req::new(SASL_STEP).key(b"PLAIN").value(b"\0alice\0secret"),
    ] {
        let r = one(&mut c, bad);
        assert_eq!((r.status, r.text().as_str()), (AUTH_ERROR, "Auth failure."));
    }
    let r = one(&mut c, sasl_auth(b"\0alice\0secret").opaque(9));
    assert_eq!(
        (r.status, r.opaque, r.text().as_str()),
        (0, 9, "Authenticated")
    );
    let got = exchange(&mut c, &[set(b"k", 0, 0, b"v"), Req::new(GET).key(b"k")], 2);
    assert_eq!(got[1].value, b"v");
    let all = stats(&mut c, b"");
    assert_eq!(
        (stat(&all, "auth_cmds"), stat(&all, "auth_errors")),
        ("6".into(), "5".into())
    );
    let settings = stats(&mut c, b"settings");
    assert_eq!(stat(&settings, "auth_enabled_sasl"), "yes");
    assert_eq!(stat(&settings, "binding_protocol"), "binary");
    // Authentication in two steps: AUTH without data asks to continue.
    let mut c = srv.connect();
    let r = one(&mut c, Req::new(SASL_AUTH).key(b"plain"));
    assert_eq!((r.status, r.value.len()), (AUTH_CONTINUE, 0));
    let r = one(
        &mut c,
        Req::new(SASL_STEP).key(b"PLAIN").value(b"bob\0bob\0pw2"),
    );
    assert_eq!(r.status, 0);
    assert_eq!(one(&mut c, Req::new(NOOP)).status, 0);
    // A failed new attempt drops the authentication.
    c.write_all(&pipeline(&[sasl_auth(b"\0bob\0nope"), Req::new(NOOP)]))
        .unwrap();
    let got = parse(&read_to_close(&mut c));
    assert_eq!(
        got.iter().map(|r| r.status).collect::<Vec<_>>(),
        [AUTH_ERROR, AUTH_ERROR]
    );
    // -S is binary only: text is treated as a bad binary packet.
    let mut c = srv.connect();
    c.write_all(b"set k 0 0 1\r\nv\r\nget k\r\nversion\r\n")
        .unwrap();
    assert!(read_to_close(&mut c).is_empty());
    std::fs::remove_file(pwdb).unwrap();
}

#[test]
fn sasl_password_file_from_the_environment() {
    let pwdb = temp_file("envpwdb", b"user:pass\n");
    let srv = Server::start_with_env(&["-S"], &[("MEMCACHED_SASL_PWDB", pwdb.to_str().unwrap())]);
    let mut c = srv.connect();
    assert_eq!(one(&mut c, sasl_auth(b"\0user\0pass")).status, 0);
    std::fs::remove_file(pwdb).unwrap();
}

#[test]
fn sasl_and_auth_file_option_errors() {
    let run = |args: &[&str]| {
        common::osmium()
            .args(args)
            .env_remove("MEMCACHED_SASL_PWDB")
            .run_to_exit()
    };
    let out = run(&["-S"]);
    assert_eq!(out.code(), Some(1));
    assert!(out.stderr.contains("MEMCACHED_SASL_PWDB"));
    let out = run(&["-S", "-B", "ascii", "--sasl-pwdb", "/x"]);
    assert_eq!(out.code(), Some(64));
    let out = run(&["-Y", "/nonexistent/authfile"]);
    assert_eq!(out.code(), Some(1));
    let bad = temp_file("badauth", b"user-without-colon\n");
    let out = run(&["-Y", bad.to_str().unwrap()]);
    assert_eq!(out.code(), Some(1));
    assert!(out.stderr.contains("malformed"));
    let out = run(&["-Y", bad.to_str().unwrap(), "-B", "binary"]);
    assert_eq!(out.code(), Some(64));
    std::fs::remove_file(bad).unwrap();
}

fn text_roundtrip(s: &mut TcpStream, req: &[u8], end: &[u8]) -> String {
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while !out.ends_with(end) {
        let k = s.read(&mut chunk).unwrap();
        assert!(k > 0, "closed after {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&chunk[..k]);
    }
    String::from_utf8(out).unwrap()
}

fn text_protocol_authentication() {
    let authfile = temp_file("authfile", b"alice:secret\nbob:pw2\n");
    let path = authfile.to_str().unwrap();
    let srv = Server::start(&["-Y", path]);
    let mut c = srv.connect();
    assert_eq!(
        text_roundtrip(&mut c, b"get foo\r\n", b"\r\n"),
        "CLIENT_ERROR unauthenticated\r\n"
    );
    assert_eq!(
        text_roundtrip(&mut c, b"version\r\n", b"\r\n"),
        "CLIENT_ERROR unauthenticated\r\n"
    );
    assert_eq!(
        text_roundtrip(&mut c, b"set x 0 0 12\r\nalice secreX\r\n", b"\r\n"),
        "CLIENT_ERROR authentication failure\r\n"
    );
    assert_eq!(
        text_roundtrip(&mut c, b"set x 0 0 5\r\nalice\r\n", b"\r\n"),
        "CLIENT_ERROR bad authentication token format\r\n"
    );
    assert_eq!(
        text_roundtrip(&mut c, b"set x 0 0 12\r\nalice secretXX", b"\r\n"),
        "CLIENT_ERROR bad command line termination\r\n"
    );
    assert_eq!(
        text_roundtrip(&mut c, b"set anykey 0 0 12\r\nalice secret\r\n", b"\r\n"),
        "STORED\r\n"
    );
    // Authenticated: the ordinary text protocol from here on.
    assert_eq!(
        text_roundtrip(&mut c, b"set foo 0 0 1\r\na\r\nget foo\r\n", b"END\r\n"),
        "STORED\r\nVALUE foo 0 1\r\na\r\nEND\r\n"
    );
    let stats = text_roundtrip(&mut c, b"stats\r\n", b"END\r\n");
    assert!(stats.contains("STAT auth_cmds 2\r\n"), "{stats}");
    assert!(stats.contains("STAT auth_errors 1\r\n"), "{stats}");
    let settings = text_roundtrip(&mut c, b"stats settings\r\n", b"END\r\n");
    assert!(settings.contains(&format!("STAT auth_enabled_ascii {path}\r\n")));
    assert!(settings.contains("STAT binding_protocol ascii\r\n"));
    // A login split across writes, and the second user.
    let mut c = srv.connect();
    c.write_all(b"set k 0 0 7\r\nbob").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(text_roundtrip(&mut c, b" pw2\r\n", b"\r\n"), "STORED\r\n");
    // Pipelined replies before login: memcached sends only the last one.
    let mut c = srv.connect();
    c.write_all(b"get a\r\nget b\r\nset x 0 0 12\r\nalice secret\r\nversion\r\n")
        .unwrap();
    let got = text_roundtrip(&mut c, b"", b"\r\n");
    let got = if got == "STORED\r\n" {
        got + &text_roundtrip(&mut c, b"", b"\r\n")
    } else {
        got
    };
    assert!(got.starts_with("STORED\r\nVERSION 1.6."), "{got:?}");
    // A line without a newline within 2048 bytes closes the connection.
    let mut c = srv.connect();
    c.write_all(&[b'x'; 3000]).unwrap();
    assert!(read_to_close(&mut c).is_empty());
    std::fs::remove_file(authfile).unwrap();
}
