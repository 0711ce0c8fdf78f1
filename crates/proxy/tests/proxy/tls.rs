//! osmium-proxy over TLS, over real sockets: TLS clients in front of plain
//! osmium servers; TLS to osmium servers started with `-Z` (a client
//! certificate for their `mtls:` listeners); both sides at once with client
//! certificates required; a server whose certificate does not verify is
//! never sent a request (the client gets `SERVER_ERROR`, the server is
//! ejected, the proxy serves on); clients without a certificate, with an
//! untrusted one, or speaking plaintext, refused while others are served;
//! `tls:` settings and files checked by `-t` and at start; memcached 1.6.45
//! `-Z` as a server; the proxy as a replication peer over TLS (the link
//! handshake with the secret inside TLS, bound to the session), by
//! `connect_peer_with` and by a reload that tells a `tls.servers` pool's
//! servers their targets. Certificates are made by `osmium_test_harness::Certs`.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use osmium_proxy::peer::{connect_peer_with, PeerTls, Secret};
use osmium_test_harness::{memcached_bin, osmium_bin, KeyType, Proxy, Role};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Test certificates, made once per run: a CA, a server certificate for
/// 127.0.0.1/localhost and a client certificate signed by it; an untrusted
/// CA with a server and a client certificate of its own. Under Cargo's
/// target tmp directory: a static is never dropped.
struct Certs(osmium_test_harness::Certs);

impl Certs {
    fn make() -> Certs {
        let under = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let mut c = osmium_test_harness::Certs::empty_under(&under, KeyType::EcdsaP256);
        c.ca("ca")
            .issue("ca", "server", Role::Server)
            .issue("ca", "client", Role::Client)
            .ca("rogue-ca")
            .issue("rogue-ca", "rogue-server", Role::Server)
            .issue("rogue-ca", "rogue-client", Role::Client);
        Certs(c)
    }

    fn path(&self, name: &str) -> String {
        self.0.path(name)
    }

    /// A server's `-Z` arguments with certificate `name` (`ca`: client
    /// certificates are verified against the test CA, for `mtls:`).
    fn server_args(&self, name: &str, ca: bool) -> Vec<String> {
        let mut o = format!(
            "ssl_chain_cert={},ssl_key={}",
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key"))
        );
        if ca {
            o.push_str(&format!(",ssl_ca_cert={}", self.path("ca.pem")));
        }
        vec!["-Z".into(), "-o".into(), o]
    }

    /// A TLS client trusting the test CA, presenting certificate `cert`.
    fn client(&self, port: u16, cert: Option<&str>) -> Tls {
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let conn = ClientConnection::new(self.client_config(cert), name).unwrap();
        StreamOwned::new(conn, connect(port))
    }

    /// The configuration of [`Certs::client`].
    fn client_config(&self, cert: Option<&str>) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.path("ca.pem")).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let b = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match cert {
            Some(c) => {
                let chain = CertificateDer::pem_file_iter(self.path(&format!("{c}.pem")))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let key = PrivateKeyDer::from_pem_file(self.path(&format!("{c}.key"))).unwrap();
                b.with_client_auth_cert(chain, key).unwrap()
            }
            None => b.with_no_client_auth(),
        };
        Arc::new(config)
    }
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn certs() -> &'static Certs {
    static CERTS: OnceLock<Certs> = OnceLock::new();
    CERTS.get_or_init(Certs::make)
}

/// A cache server `bin` listening on `listen` (memcached's `-l` list),
/// waited for until it listens on `port` (tried again on the same ports
/// if one was taken: `osmium_test_harness::Start::only_port`).
fn server(bin: &Path, listen: &str, port: u16, extra: &[String]) -> Proc {
    let server = osmium_test_harness::Osmium::new()
        .bin(bin)
        .listen(listen)
        .memory(64)
        .args(extra)
        .only_port(port)
        .start();
    // The connection the start check always made (connection counts).
    drop(std::net::TcpStream::connect(("127.0.0.1", port)));
    server
}

/// A plain osmium server.
fn plain_osmium() -> Proc {
    let port = free_port();
    server(&osmium_bin(), &format!("127.0.0.1:{port}"), port, &[])
}

/// One pool `name` listening on `port` over `servers`, with `tls` (the
/// lines under `tls:`, indented by four) and `extra` directives.
fn pool(name: &str, port: u16, servers: &[u16], extra: &str, tls: &str) -> String {
    let mut y = format!(
        "{name}:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 3000\n{extra}  servers:\n"
    );
    // Named: pools over the same servers' different listeners place keys
    // alike.
    for (i, p) in servers.iter().enumerate() {
        y.push_str(&format!("   - 127.0.0.1:{p}:1 s{i}\n"));
    }
    if !tls.is_empty() {
        y.push_str("  tls:\n");
        y.push_str(tls);
    }
    y
}

fn tls_listen(ca: Option<&str>) -> String {
    let c = certs();
    let mut y = format!(
        "    listen:\n      cert: {}\n      key: {}\n",
        c.path("server.pem"),
        c.path("server.key")
    );
    if let Some(mode) = ca {
        y.push_str(&format!(
            "      ca: {}\n      verify_clients: {mode}\n",
            c.path("ca.pem")
        ));
    }
    y
}

fn tls_servers(client_cert: bool) -> String {
    let c = certs();
    let mut y = format!("    servers:\n      ca: {}\n", c.path("ca.pem"));
    if client_cert {
        y.push_str(&format!(
            "      cert: {}\n      key: {}\n",
            c.path("client.pem"),
            c.path("client.key")
        ));
    }
    y
}

fn read_until(s: &mut impl Read, end: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(end) {
        let n = s.read(&mut buf).expect("read reply");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

fn ask(s: &mut (impl Read + Write), req: &[u8], end: &[u8]) -> String {
    s.write_all(req).unwrap();
    s.flush().unwrap();
    String::from_utf8(read_until(s, end)).unwrap()
}

/// Pipelined sets over every server, a multi-get in key order, a meta
/// get, and a value larger than many TLS records, both ways.
fn exercise(s: &mut (impl Read + Write), tag: &str) {
    let mut req = String::new();
    for i in 0..50 {
        req.push_str(&format!("set {tag}:{i} {i} 0 5\r\nv{i:04}\r\n"));
    }
    req.push_str("mn\r\n");
    let want = format!("{}MN\r\n", "STORED\r\n".repeat(50));
    assert_eq!(ask(s, req.as_bytes(), b"MN\r\n"), want);
    let mut get = String::from("get");
    let mut want = String::new();
    for i in (0..50).rev() {
        get.push_str(&format!(" {tag}:{i} {tag}:missing{i}"));
        want.push_str(&format!("VALUE {tag}:{i} {i} 5\r\nv{i:04}\r\n"));
    }
    get.push_str("\r\n");
    want.push_str("END\r\n");
    assert_eq!(ask(s, get.as_bytes(), b"END\r\n"), want);
    let r = ask(s, format!("mg {tag}:7 v f\r\nmn\r\n").as_bytes(), b"MN\r\n");
    assert_eq!(r, "VA 5 f7\r\nv0007\r\nMN\r\n");
    let big: String = (0..400_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let req = format!(
        "set {tag}:big 0 0 {}\r\n{big}\r\nget {tag}:big\r\n",
        big.len()
    );
    let want = format!(
        "STORED\r\nVALUE {tag}:big 0 {}\r\n{big}\r\nEND\r\n",
        big.len()
    );
    assert_eq!(ask(s, req.as_bytes(), b"END\r\n"), want);
}

/// 20 MB of pipelined sets, then a 2 MB multi-get: many TLS records
/// each way, sockets full on both sides of the proxy.
fn bulk(s: &mut (impl Read + Write)) {
    let value: String = (0..10_000)
        .map(|i| (b'A' + (i % 26) as u8) as char)
        .collect();
    let mut req = String::new();
    for i in 0..2000 {
        req.push_str(&format!("set bulk:{i} 0 0 {}\r\n{value}\r\n", value.len()));
    }
    req.push_str("mn\r\n");
    let want = format!("{}MN\r\n", "STORED\r\n".repeat(2000));
    assert!(ask(s, req.as_bytes(), b"MN\r\n") == want, "2000 sets");
    let keys: Vec<String> = (0..200).map(|i| format!("bulk:{}", i * 7)).collect();
    let r = ask(
        s,
        format!("get {}\r\n", keys.join(" ")).as_bytes(),
        b"END\r\n",
    );
    let mut want = String::new();
    for k in &keys {
        want.push_str(&format!("VALUE {k} 0 {}\r\n{value}\r\n", value.len()));
    }
    want.push_str("END\r\n");
    assert!(r == want, "a 2 MB multi-get ({} bytes back)", r.len());
}

/// What a refused client gets after sending a request: no reply, then
/// the end of the connection (reading fails, or ends).
fn assert_refused(s: &mut (impl Read + Write), what: &str) {
    let _ = s.write_all(b"get refused\r\n").and_then(|_| s.flush());
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: not closed"
        );
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        !text.contains("END") && !text.contains("ERROR"),
        "{what}: got a reply {text:?}"
    );
}

/// A plain client of `port` is served.
fn plain_served(port: u16, tag: &str) {
    let mut s = connect(port);
    assert_eq!(
        ask(
            &mut s,
            format!("set {tag} 0 0 2\r\nok\r\nget {tag}\r\n").as_bytes(),
            b"END\r\n"
        ),
        format!("STORED\r\nVALUE {tag} 0 2\r\nok\r\nEND\r\n")
    );
}

/// Stops `p` and returns what it wrote to stderr.
fn stderr_of(p: &mut Proc) -> String {
    p.stop();
    p.stderr_text()
}

#[test]
fn tls_clients_in_front_of_plain_osmium() {
    let b: Vec<Proc> = (0..2).map(|_| plain_osmium()).collect();
    let port = free_port();
    let y = pool(
        "alpha",
        port,
        &[b[0].port(), b[1].port()],
        "",
        &tls_listen(None),
    );
    let mut px = proxy(&y, port);
    let c = certs();
    let mut s = c.client(port, None);
    exercise(&mut s, "front");

    // A plaintext client is refused; the TLS client is served on, and new
    // ones too.
    let mut plain = connect(port);
    assert_refused(&mut plain, "a plaintext client");
    assert_eq!(
        ask(&mut s, b"get front:3\r\n", b"END\r\n"),
        "VALUE front:3 3 5\r\nv0003\r\nEND\r\n"
    );
    let mut again = c.client(port, Some("client"));
    assert_eq!(
        ask(&mut again, b"get front:4\r\n", b"END\r\n"),
        "VALUE front:4 4 5\r\nv0004\r\nEND\r\n"
    );
    // The values reached the plain servers.
    let held: usize = b.iter().map(|b| keys_of(b.port()).len()).sum();
    assert_eq!(held, 51);
    assert!(
        px.child().try_wait().unwrap().is_none(),
        "the proxy is running"
    );
    let _ = stderr_of(&mut px);
}

#[test]
fn tls_to_osmium_servers_with_and_without_client_certificates() {
    let c = certs();
    // Two -Z servers: a default TLS listener (no client certificate
    // asked) and an mtls: one each.
    let mut servers = Vec::new();
    let mut mtls = Vec::new();
    for _ in 0..2 {
        let (p, m) = (free_port(), free_port());
        let listen = format!("127.0.0.1:{p},mtls:127.0.0.1:{m}");
        servers.push(server(
            &osmium_bin(),
            &listen,
            p,
            &c.server_args("server", true),
        ));
        mtls.push(m);
    }
    let ports: Vec<u16> = servers.iter().map(|s| s.port()).collect();
    let (a, b, n) = (free_port(), free_port(), free_port());
    let y = pool("btls", a, &ports, "", &tls_servers(false))
        + &pool("mtls", b, &mtls, "", &tls_servers(true))
        + &pool("nocert", n, &mtls[..1], "", &tls_servers(false));
    // The name verified: the certificate's DNS name instead of the IP
    // address, or one it does not carry.
    let (d, w) = (free_port(), free_port());
    let named = |name: &str| format!("{}      server_name: {name}\n", tls_servers(false));
    let y = y
        + &pool("dns", d, &ports, "", &named("localhost"))
        + &pool("wrong", w, &ports, "", &named("other.example"));
    let mut px = proxy(&y, a);
    let mut s = connect(a);
    exercise(&mut s, "btls");
    let mut s = connect(b);
    exercise(&mut s, "mtls");
    // The same servers: what one pool stored, the other reads.
    let r = ask(&mut s, b"get btls:9\r\n", b"END\r\n");
    assert_eq!(r, "VALUE btls:9 9 5\r\nv0009\r\nEND\r\n");
    // Without a client certificate an mtls: listener refuses the proxy.
    let r = ask(&mut connect(n), b"get btls:1\r\n", b"\r\n");
    assert!(r.starts_with("SERVER_ERROR "), "{r}");
    let r = ask(&mut connect(d), b"get btls:11\r\n", b"END\r\n");
    assert_eq!(r, "VALUE btls:11 11 5\r\nv0011\r\nEND\r\n");
    let r = ask(&mut connect(w), b"get btls:11\r\n", b"\r\n");
    assert!(r.starts_with("SERVER_ERROR "), "{r}");
    assert!(
        px.child().try_wait().unwrap().is_none(),
        "the proxy is running"
    );
    let log = stderr_of(&mut px);
    assert!(
        log.contains("not valid for name \"other.example\""),
        "{log}"
    );
}

#[test]
fn tls_on_both_sides_with_client_certificates_required() {
    let c = certs();
    let (p, m) = (free_port(), free_port());
    let listen = format!("127.0.0.1:{p},mtls:127.0.0.1:{m}");
    let _srv = server(&osmium_bin(), &listen, p, &c.server_args("server", true));
    let (a, o) = (free_port(), free_port());
    let y = pool(
        "alpha",
        a,
        &[m],
        "",
        &(tls_listen(Some("required")) + &tls_servers(true)),
    ) + &pool(
        "beta",
        o,
        &[m],
        "",
        &(tls_listen(Some("optional")) + &tls_servers(true)),
    );
    let mut px = proxy(&y, a);
    let mut s = c.client(a, Some("client"));
    exercise(&mut s, "both");
    bulk(&mut s);

    // Required: no certificate, or one from another CA, is refused.
    assert_refused(&mut c.client(a, None), "a client without a certificate");
    assert_refused(
        &mut c.client(a, Some("rogue-client")),
        "an untrusted certificate",
    );
    assert_refused(&mut connect(a), "a plaintext client");
    let r = ask(&mut s, b"get both:2\r\n", b"END\r\n");
    assert_eq!(r, "VALUE both:2 2 5\r\nv0002\r\nEND\r\n");
    // Optional: served without one, refused with an untrusted one.
    let r = ask(&mut c.client(o, None), b"get both:5\r\n", b"END\r\n");
    assert_eq!(r, "VALUE both:5 5 5\r\nv0005\r\nEND\r\n");
    assert_refused(
        &mut c.client(o, Some("rogue-client")),
        "an untrusted certificate",
    );
    let r = ask(
        &mut c.client(o, Some("client")),
        b"get both:6\r\n",
        b"END\r\n",
    );
    assert_eq!(r, "VALUE both:6 6 5\r\nv0006\r\nEND\r\n");
    assert!(
        px.child().try_wait().unwrap().is_none(),
        "the proxy is running"
    );
    let _ = stderr_of(&mut px);
}

/// A server's `stats` (over its plaintext listener) as `name value` pairs.
fn server_stats(port: u16) -> Vec<(String, String)> {
    let r = ask(&mut connect(port), b"stats\r\n", b"END\r\n");
    r.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn stat(stats: &[(String, String)], name: &str) -> u64 {
    let v = stats.iter().find(|(k, _)| k == name);
    v.unwrap_or_else(|| panic!("no {name}: {stats:?}"))
        .1
        .parse()
        .unwrap()
}

#[test]
fn a_server_whose_certificate_does_not_verify_is_never_sent_a_request() {
    let c = certs();
    // A server with a certificate of another CA, with a plaintext
    // listener for its stats; and a good one.
    let (p, q) = (free_port(), free_port());
    let listen = format!("127.0.0.1:{p},notls:127.0.0.1:{q}");
    let _rogue = server(
        &osmium_bin(),
        &listen,
        p,
        &c.server_args("rogue-server", false),
    );
    let g = free_port();
    let _good = server(
        &osmium_bin(),
        &format!("127.0.0.1:{g}"),
        g,
        &c.server_args("server", false),
    );
    let (a, b) = (free_port(), free_port());
    let eject =
        "  auto_eject_hosts: true\n  server_failure_limit: 1\n  server_retry_timeout: 200\n";
    let y = pool("alpha", a, &[p], eject, &tls_servers(false))
        + &pool("beta", b, &[g], eject, &tls_servers(false));
    let mut px = proxy(&y, a);

    let mut s = connect(a);
    let r = ask(&mut s, b"set k 0 0 5\r\nvalue\r\n", b"\r\n");
    assert!(r.starts_with("SERVER_ERROR "), "{r}");
    let r = ask(&mut s, b"get k\r\n", b"\r\n");
    assert!(r.starts_with("SERVER_ERROR "), "{r}");
    // Ejected, retried (the retry fails the same way), and the client is
    // still answered.
    std::thread::sleep(Duration::from_millis(700));
    let r = ask(&mut s, b"get k\r\n", b"\r\n");
    assert!(r.starts_with("SERVER_ERROR "), "{r}");
    plain_served(b, "beta-key");

    let st = server_stats(q);
    assert_eq!(stat(&st, "cmd_get"), 0, "{st:?}");
    assert_eq!(stat(&st, "cmd_set"), 0, "{st:?}");
    assert_eq!(stat(&st, "curr_items"), 0, "{st:?}");
    assert!(stat(&st, "ssl_handshake_errors") >= 2, "{st:?}");
    let doc = stats_doc(px.stats_port());
    let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert!(v["alpha"]["server_ejects"].as_u64().unwrap() >= 1, "{doc}");
    assert!(
        px.child().try_wait().unwrap().is_none(),
        "the proxy is running"
    );
    let log = stderr_of(&mut px);
    assert!(
        log.contains(&format!(
            "server 127.0.0.1:{p} of pool alpha: TLS handshake failed: invalid peer certificate"
        )),
        "{log}"
    );
}

/// `osmium-proxy -t -c` a configuration; its exit status and output.
fn check(name: &str, yaml: &str) -> (bool, String) {
    let conf = write_conf(name, yaml);
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-proxy"))
        .args(["-t", "-c", conf.to_str().unwrap()])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn tls_settings_and_files_are_checked_by_t_and_at_start() {
    let c = certs();
    let port = free_port();
    let good = pool(
        "alpha",
        port,
        &[11211],
        "",
        &(tls_listen(Some("required")) + &tls_servers(true)),
    );
    let (ok, out) = check("tls-good.yml", &good);
    assert!(ok && out.contains("syntax is ok"), "{out}");
    let plain = pool("alpha", port, &[11211], "", "");
    assert!(check("tls-none.yml", &plain).0);

    let cases = [
        (
            good.replace("verify_clients:", "verify_client:"),
            "\"tls.listen.verify_client\" is unknown",
        ),
        (
            good.replace("    servers:", "    backends:"),
            "\"tls.backends\" is unknown",
        ),
        (
            good.replace(&c.path("server.pem"), "/nonexistent/server.pem"),
            "tls.listen.cert: cannot load certificates from '/nonexistent/server.pem'",
        ),
        (
            good.replace(&c.path("server.key"), &c.path("client.key")),
            "tls.listen.cert",
        ),
        (
            good.replace(&c.path("client.key"), &c.path("server.key")),
            "tls.servers.cert",
        ),
        (
            good.replace(
                &format!("ca: {}", c.path("ca.pem")),
                // A PEM file holding no certificate (a key).
                &format!("ca: {}", c.path("ca.key")),
            ),
            "no certificate found",
        ),
        (
            good.replace(&c.path("server.key"), &c.path("ca.pem")),
            "tls.listen.key: cannot load a private key",
        ),
    ];
    for (i, (yaml, why)) in cases.iter().enumerate() {
        assert_ne!(yaml, &good, "case {i} changed nothing");
        let (ok, out) = check(&format!("tls-bad-{i}.yml"), yaml);
        assert!(!ok, "case {i} passed -t: {out}");
        assert!(
            out.contains(why) && out.contains("pool 'alpha'"),
            "case {i}: {out}"
        );
        // Started, it refuses with the same message and listens on nothing.
        let out = Proxy::new(yaml, port)
            .bin(env!("CARGO_BIN_EXE_osmium-proxy"))
            .run_to_exit();
        assert!(
            !out.status.success() && out.stderr.contains(why),
            "case {i} started: {}",
            out.stderr
        );
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}

#[test]
fn memcached_with_tls_as_a_server() {
    let Some(bin) = memcached_bin() else {
        return;
    };
    let c = certs();
    let (p, m) = (free_port(), free_port());
    let listen = format!("127.0.0.1:{p},mtls:127.0.0.1:{m}");
    let _mc = server(&bin, &listen, p, &c.server_args("server", true));
    let (a, b) = (free_port(), free_port());
    let y = pool(
        "btls",
        a,
        &[p],
        "",
        &(tls_listen(None) + &tls_servers(false)),
    ) + &pool("mtls", b, &[m], "", &tls_servers(true));
    let mut px = proxy(&y, a);
    exercise(&mut c.client(a, None), "mc-btls");
    exercise(&mut connect(b), "mc-mtls");
    let r = ask(&mut connect(b), b"get mc-btls:8\r\n", b"END\r\n");
    assert_eq!(r, "VALUE mc-btls:8 8 5\r\nv0008\r\nEND\r\n");
    assert!(
        px.child().try_wait().unwrap().is_none(),
        "the proxy is running"
    );
    let _ = stderr_of(&mut px);
}

/// The tests' replication secret, in a mode 0600 file.
fn secret_file() -> String {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("osmium-proxy-tls-{}", std::process::id()))
        .join("replication.secret");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn the_proxy_is_a_replication_peer_over_tls() {
    let c = certs();
    let secret = secret_file();
    let mut servers = Vec::new();
    let mut mtls = Vec::new();
    for _ in 0..2 {
        let (p, m) = (free_port(), free_port());
        let mut args = c.server_args("server", true);
        args.extend(["--replication-secret".to_string(), secret.clone()]);
        let listen = format!("127.0.0.1:{p},mtls:127.0.0.1:{m}");
        servers.push(server(&osmium_bin(), &listen, p, &args));
        mtls.push(m);
    }
    let t = Duration::from_secs(5);
    let key = Secret::new(b"7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d").unwrap();
    let tls = PeerTls {
        config: c.client_config(Some("client")),
        name: ServerName::try_from("127.0.0.1").unwrap(),
    };
    // On the mtls: listener, with the client certificate: a peer (its
    // replica_targets is answered, not ERROR).
    let mut peer = connect_peer_with(&format!("127.0.0.1:{}", mtls[0]), &key, t, Some(&tls))
        .expect("a TLS peer");
    let r = peer.command("replica_targets 127.0.0.1:1").unwrap();
    assert!(r.contains("started without --replicate-to"), "{r}");
    // Where no client certificate is verified, the handshake inside TLS
    // (bound to the session) is the proof: without replication_peers the
    // certificate names nothing more.
    let mut peer = connect_peer_with(
        &format!("127.0.0.1:{}", servers[0].port()),
        &key,
        t,
        Some(&tls),
    )
    .expect("a TLS peer by the secret");
    let r = peer.command("replica_targets 127.0.0.1:1").unwrap();
    assert!(r.contains("started without --replicate-to"), "{r}");
    // Another secret: refused.
    let other = Secret::new(b"ffeeddccbbaa99887766554433221100").unwrap();
    let e = connect_peer_with(&format!("127.0.0.1:{}", mtls[0]), &other, t, Some(&tls))
        .err()
        .expect("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");

    // A reload of a tls.servers pool tells its servers over TLS: they
    // were started without --replicate-to, so each refuses, as a peer.
    let port = free_port();
    let more = format!("  failover: replica\n  replication_secret: {secret}\n");
    let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("osmium-proxy-tls-{}", std::process::id()))
        .join("peer-proxy.log");
    let _ = std::fs::remove_file(&log);
    let px = proxy_with(
        &pool("ring", port, &mtls[..1], &more, &tls_servers(true)),
        port,
        &["-o", log.to_str().unwrap()],
    );
    rewrite_conf(
        &px,
        &pool("ring", px.port(), &mtls, &more, &tls_servers(true)),
    );
    reload(&px);
    let refused = |from: u16, to: u16| {
        format!(
            "could not make server 127.0.0.1:{from} replicate to 127.0.0.1:{to}: it answered \"SERVER_ERROR the server was started without --replicate-to"
        )
    };
    let (first, then) = (refused(mtls[1], mtls[0]), refused(mtls[0], mtls[1]));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&first) && text.contains(&then) {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A warm move of a `tls.servers` pool: three servers with `mtls:`
/// listeners (the proxy's client certificate required), the third added
/// by a reload, then removed again: the migration's connections speak TLS
/// with the pool's settings, every key is copied over and back, and the
/// moved keys are served throughout.
fn warm_move_over_tls(bin: &Path, tag: &str) {
    let c = certs();
    let mut servers = Vec::new();
    let mut mtls = Vec::new();
    for _ in 0..3 {
        let (p, m) = (free_port(), free_port());
        let listen = format!("127.0.0.1:{p},mtls:127.0.0.1:{m}");
        servers.push(server(bin, &listen, p, &c.server_args("server", true)));
        mtls.push(m);
    }
    let a = free_port();
    let mut px = proxy(&pool("moving", a, &mtls[..2], "", &tls_servers(true)), a);
    let a = px.port();
    let keys: Vec<String> = (0..600).map(|i| format!("{tag}:{i}")).collect();
    let mut s = connect(a);
    let mut sets = Vec::new();
    for k in &keys {
        sets.extend_from_slice(format!("set {k} 3 0 {}\r\n{k}\r\n", k.len()).as_bytes());
    }
    s.write_all(&sets).unwrap();
    let stored = "STORED\r\n".repeat(keys.len());
    assert_eq!(
        String::from_utf8(read_until(&mut s, stored.as_bytes())).unwrap(),
        stored
    );
    let moved = |px: &Proc| {
        let start = Instant::now();
        loop {
            let doc = stats_doc(px.stats_port());
            if pool_stat(&doc, "migrating") == 0 {
                return pool_stat(&doc, "moved_keys");
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "move not done: {doc}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let all_there = |s: &mut TcpStream| {
        for k in &keys {
            let want = format!("VALUE {k} 3 {}\r\n{k}\r\nEND\r\n", k.len());
            assert_eq!(ask(s, format!("get {k}\r\n").as_bytes(), b"END\r\n"), want);
        }
    };
    rewrite_conf(&px, &pool("moving", a, &mtls, "", &tls_servers(true)));
    reload(&px);
    let out = moved(&px);
    if out < 100 {
        panic!("{out} keys copied over TLS: {}", stderr_of(&mut px));
    }
    all_there(&mut s);
    rewrite_conf(&px, &pool("moving", a, &mtls[..2], "", &tls_servers(true)));
    reload(&px);
    let back = moved(&px) - out;
    assert_eq!(back, out, "every key copied back from the removed server");
    all_there(&mut s);
}

#[test]
fn a_warm_move_speaks_tls_to_the_servers() {
    warm_move_over_tls(&osmium_bin(), "tlsmove");
    if let Some(bin) = memcached_bin() {
        warm_move_over_tls(&bin, "mctlsmove");
    }
}
