//! Client-library compatibility over TLS: the Rust `memcache` crate
//! (crates.io, its `tls` feature: OpenSSL) against genuine memcached and the
//! osmium binary, both started with `-Z` and an `mtls:` listener, each case
//! over the binary protocol (the crate's default) and ascii
//! (`?protocol=ascii`).
//!
//! The certificates are made at test time with the `openssl` command: a CA,
//! a server certificate for `IP:127.0.0.1,DNS:localhost`, a client
//! certificate. The crate connects with `memcache+tls://127.0.0.1:PORT?
//! ca_path=..` (and `cert_path`/`key_path` on the `mtls:` listener, or
//! `verify_mode=none`). As in `crates/server/tests/server/rust_memcache_client.rs`,
//! every test starts one server of each kind and runs its case against the
//! four (server, protocol) combinations in parallel threads, failing with
//! the list of combinations that failed.
//!
//! The osmium binary is `OSMIUM_BIN` if set, else the `osmium` that cargo
//! built beside this test (`target/<profile>/osmium`): `cargo test
//! --workspace` builds it; alone, run `cargo build -p osmium-server` (with
//! the same `--release` or not) first. This crate is apart from
//! `osmium-server` so that the crate's OpenSSL never reaches the server.
//!
//! Environment (as for tests/clients):
//!   CLIENT_TEST_SERVERS  comma-separated subset of "memcached,osmium" (default both)
//!   MEMCACHED_BIN        genuine memcached (default: the oracle built by
//!                        scripts/build-memcached.sh, .oracle/memcached-1.6.45/memcached)

use std::collections::HashMap;
use std::time::Duration;

#[path = "../../server/tests/server/common/mod.rs"]
mod common;
use common::memcached_bin;
use osmium_test_harness::{Certs, Osmium, Running};

use memcache::Client;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Proto {
    Binary,
    Ascii,
}

const PROTOS: [Proto; 2] = [Proto::Binary, Proto::Ascii];

const ALL_KINDS: [&str; 2] = ["memcached", "osmium"];

/// One server process with `-Z` on its port and an `mtls:` listener on
/// its first extra port, killed and reaped on drop.
struct ServerProc {
    kind: &'static str,
    server: Running,
}

/// The server kinds to test: CLIENT_TEST_SERVERS, minus memcached when its
/// binary is missing (a failure under CI=true).
fn kinds() -> Vec<&'static str> {
    let wanted = std::env::var("CLIENT_TEST_SERVERS").unwrap_or_else(|_| "memcached,osmium".into());
    let mut kinds: Vec<&'static str> = ALL_KINDS
        .into_iter()
        .filter(|k| wanted.split(',').any(|w| w.trim() == *k))
        .collect();
    if kinds.contains(&"memcached") && memcached_bin().is_none() {
        kinds.retain(|k| *k != "memcached");
    }
    kinds
}

fn start(kind: &'static str, certs: &Certs) -> ServerProc {
    let builder = if kind == "memcached" {
        common::memcached()
    } else {
        // OSMIUM_BIN, else the osmium beside this test's binary.
        Osmium::new()
    };
    let server = builder
        .extra_listener("mtls:")
        .memory(64)
        .threads(2)
        .args(certs.server_args("server", Some("ca"), &[]))
        .start();
    ServerProc { kind, server }
}

/// How the client speaks TLS.
#[derive(Clone, Copy)]
enum ClientTls<'a> {
    /// Verifies the server against the test CA; with a client certificate
    /// when `cert` is set.
    Verify { certs: &'a Certs, cert: bool },
    /// `verify_mode=none`: takes any server certificate.
    NoVerify,
    /// Verifies the server against a CA file that signed nothing the server
    /// presents (the client certificate, which is no CA).
    Untrusted(&'a Certs),
}

fn connect(port: u16, proto: Proto, tls: ClientTls) -> Result<Client, memcache::MemcacheError> {
    let mut url = format!("memcache+tls://127.0.0.1:{port}?");
    match tls {
        ClientTls::Verify { certs, cert } => {
            url += &format!("ca_path={}", certs.path("ca.pem"));
            if cert {
                url += &format!(
                    "&cert_path={}&key_path={}",
                    certs.path("client.pem"),
                    certs.path("client.key")
                );
            }
        }
        ClientTls::NoVerify => url += "verify_mode=none",
        ClientTls::Untrusted(certs) => url += &format!("ca_path={}", certs.path("client.pem")),
    }
    if proto == Proto::Ascii {
        url += "&protocol=ascii";
    }
    Client::builder()
        .add_server(url)?
        // how long the connection pool waits for a usable connection
        .with_connection_timeout(Duration::from_secs(3))
        .with_read_timeout(Duration::from_secs(5))
        .with_write_timeout(Duration::from_secs(5))
        .build()
}

/// What a case gets: a client for one (server, protocol) combination,
/// verifying the server, on the `-Z` listener.
struct Ctx<'a> {
    client: Client,
    proto: Proto,
    kind: &'static str,
    port: u16,
    mtls_port: u16,
    certs: &'a Certs,
}

impl Ctx<'_> {
    fn binary(&self) -> bool {
        self.proto == Proto::Binary
    }

    /// This combination's key for `name`: the binary and ascii runs share a server.
    fn k(&self, name: &str) -> String {
        let p = if self.binary() { "b" } else { "a" };
        format!("rstls{p}_{name}")
    }

    fn set(&self, key: &str, value: &[u8]) {
        self.client
            .set(key, value, 0)
            .unwrap_or_else(|e| panic!("set {key}: {e:?}"));
    }

    fn want(&self, key: &str, value: &[u8]) {
        want(&self.client, key, value);
    }

    fn want_miss(&self, key: &str) {
        let got = self
            .client
            .get::<Vec<u8>>(key)
            .unwrap_or_else(|e| panic!("get {key}: {e:?}"));
        assert_eq!(got, None, "get {key} should miss");
    }

    /// The server still serves a verified client on its `-Z` listener.
    fn still_serving(&self, name: &str) {
        let client = connect(
            self.port,
            self.proto,
            ClientTls::Verify {
                certs: self.certs,
                cert: false,
            },
        )
        .unwrap_or_else(|e| panic!("{} no longer takes TLS clients: {e:?}", self.kind));
        client.set(&self.k(name), "alive", 0).unwrap();
        want(&client, &self.k(name), b"alive");
    }
}

fn want(client: &Client, key: &str, value: &[u8]) {
    match client.get::<Vec<u8>>(key) {
        Ok(Some(v)) => assert!(
            v == value,
            "get {key}: {:?} (len {}), want {:?} (len {})",
            String::from_utf8_lossy(&v[..v.len().min(64)]),
            v.len(),
            String::from_utf8_lossy(&value[..value.len().min(64)]),
            value.len()
        ),
        other => panic!("get {key}: {other:?}"),
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".into()
    }
}

/// Run `case` against every (server kind, protocol) combination, in parallel;
/// fail listing each combination that failed.
fn run(name: &str, case: fn(&Ctx)) {
    let certs = Certs::new();
    let servers: Vec<ServerProc> = kinds().into_iter().map(|k| start(k, &certs)).collect();
    let mut failures = Vec::new();
    let mut passed = Vec::new();
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for srv in &servers {
            for proto in PROTOS {
                let (kind, port, mtls_port, certs) = (
                    srv.kind,
                    srv.server.port(),
                    srv.server.extra_ports()[0],
                    &certs,
                );
                let h = scope.spawn(move || {
                    let tls = ClientTls::Verify { certs, cert: false };
                    let client = connect(port, proto, tls)
                        .unwrap_or_else(|e| panic!("connect over TLS: {e:?}"));
                    case(&Ctx {
                        client,
                        proto,
                        kind,
                        port,
                        mtls_port,
                        certs,
                    });
                });
                handles.push((format!("{kind}/{proto:?}"), h));
            }
        }
        for (combo, h) in handles {
            match h.join() {
                Ok(()) => passed.push(combo),
                Err(p) => failures.push(format!("{combo}: {}", panic_text(p))),
            }
        }
    });
    for mut srv in servers {
        if let Ok(Some(status)) = srv.server.child().try_wait() {
            failures.push(format!("{} exited during the test: {status}", srv.kind));
        }
    }
    println!("{name}: passed for {passed:?}");
    assert!(
        failures.is_empty(),
        "{name} failed for {} of {} combinations:\n  {}",
        failures.len(),
        failures.len() + passed.len(),
        failures.join("\n  ")
    );
}

#[test]
fn set_get_over_tls() {
    run("set_get", |c| {
        c.set(&c.k("a"), b"hello");
        c.want(&c.k("a"), b"hello");
        c.client.set(&c.k("a"), "world", 0).unwrap();
        assert_eq!(
            c.client.get::<String>(&c.k("a")).unwrap().as_deref(),
            Some("world")
        );
        c.want_miss(&c.k("missing"));
        c.set(&c.k("empty"), b"");
        c.want(&c.k("empty"), b"");
        let all: Vec<u8> = (0..=255u8).collect();
        c.set(&c.k("bytes"), &all);
        c.want(&c.k("bytes"), &all);
    });
}

#[test]
fn multi_get_over_tls() {
    run("multi_get", |c| {
        let mut want = HashMap::new();
        for i in 0..100 {
            let value = format!("value-{i}").repeat(i + 1).into_bytes();
            let key = c.k(&format!("multi_{i:03}"));
            c.set(&key, &value);
            want.insert(key, value);
        }
        let mut keys: Vec<String> = want.keys().cloned().collect();
        keys.push(c.k("multi_missing_1"));
        keys.push(c.k("multi_missing_2"));
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let got: HashMap<String, Vec<u8>> = c.client.gets(&refs).unwrap();
        assert_eq!(got, want);
    });
}

#[test]
fn incr_decr_over_tls() {
    run("incr_decr", |c| {
        let cl = &c.client;
        let key = c.k("num");
        c.set(&key, b"10");
        assert_eq!(cl.increment(&key, 5).unwrap(), 15);
        assert_eq!(cl.decrement(&key, 3).unwrap(), 12);
        c.want(&key, b"12");
        // wrap at 2^64, clamp at 0
        c.set(&c.k("wrap"), b"18446744073709551615");
        assert_eq!(cl.increment(&c.k("wrap"), 1).unwrap(), 0);
        c.set(&c.k("clamp"), b"5");
        assert_eq!(cl.decrement(&c.k("clamp"), 10).unwrap(), 0);
        // a non-numeric value is refused and the connection stays in sync
        c.set(&c.k("nan"), b"abc");
        assert!(cl.increment(&c.k("nan"), 1).is_err());
        c.want(&c.k("nan"), b"abc");
        c.set(&c.k("after"), b"1");
        c.want(&c.k("after"), b"1");
    });
}

#[test]
fn delete_over_tls() {
    run("delete", |c| {
        c.set(&c.k("del"), b"x");
        assert!(c.client.delete(&c.k("del")).unwrap());
        c.want_miss(&c.k("del"));
        assert!(!c.client.delete(&c.k("del")).unwrap());
    });
}

/// 512 KiB: many TLS records each way (16 KiB of plaintext per record).
#[test]
fn large_value_over_tls() {
    run("large_value", |c| {
        let value: Vec<u8> = (0..512 * 1024u32).map(|i| (i % 251) as u8).collect();
        c.set(&c.k("big"), &value);
        c.want(&c.k("big"), &value);
        c.set(&c.k("small"), b"s");
        let keys = [c.k("big"), c.k("small")];
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let got: HashMap<String, Vec<u8>> = c.client.gets(&refs).unwrap();
        assert_eq!(got.len(), 2);
        assert!(
            got[&c.k("big")] == value,
            "the 512 KiB value in a multi-get"
        );
        assert_eq!(got[&c.k("small")], b"s");
    });
}

/// The `mtls:` listener takes a client with a certificate the CA signed and
/// refuses one without (at the handshake, or with TLS 1.3 at the first
/// request: the server checks the certificate after the client's
/// handshake is done).
#[test]
fn client_certificate_on_mtls_listener() {
    run("mtls", |c| {
        let with_cert = ClientTls::Verify {
            certs: c.certs,
            cert: true,
        };
        let client = connect(c.mtls_port, c.proto, with_cert)
            .unwrap_or_else(|e| panic!("connect with a client certificate: {e:?}"));
        client.set(&c.k("mtls"), "peer", 0).unwrap();
        want(&client, &c.k("mtls"), b"peer");
        assert!(client.version().is_ok());

        let without = ClientTls::Verify {
            certs: c.certs,
            cert: false,
        };
        if let Ok(anon) = connect(c.mtls_port, c.proto, without) {
            assert!(
                anon.set(&c.k("anon"), "x", 0).is_err(),
                "a set without a client certificate on an mtls: listener succeeded"
            );
        }
        c.want_miss(&c.k("anon"));
        want(&client, &c.k("mtls"), b"peer");
        c.still_serving("mtls_alive");
    });
}

/// A client that checks the server against a CA that did not sign its
/// certificate fails to connect; the server keeps serving.
#[test]
fn untrusted_server_certificate_is_refused() {
    run("untrusted", |c| {
        match connect(c.port, c.proto, ClientTls::Untrusted(c.certs)) {
            Err(_) => {}
            Ok(client) => assert!(
                client.version().is_err(),
                "a client that does not trust the server's certificate got an answer"
            ),
        }
        c.still_serving("untrusted_alive");
    });
}

/// `verify_mode=none`: encrypted, the server's certificate not checked.
#[test]
fn verify_mode_none() {
    run("verify_none", |c| {
        let client = connect(c.port, c.proto, ClientTls::NoVerify)
            .unwrap_or_else(|e| panic!("connect with verify_mode=none: {e:?}"));
        client.set(&c.k("nv"), "v", 0).unwrap();
        want(&client, &c.k("nv"), b"v");
        c.want(&c.k("nv"), b"v");
    });
}
