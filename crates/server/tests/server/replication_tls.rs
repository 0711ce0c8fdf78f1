//! Replication over TLS (`-Z`): the links, the catch-up pull and the
//! follow links a server serves are TLS, each end's certificate verified
//! against `ssl_ca_cert`, the peers named by `-o replication_peers` (the
//! nodes' SAN) or `-o replication_ca`. Every write kind reaches the
//! replica (read back by a TLS client; the ports take no plain text); a
//! sync replica of a ring of three killed under load loses no
//! acknowledged write; a restarted server pulls its target's copy through
//! a TLS follow link. Refused as a peer: a TLS client without a
//! certificate, an ordinary client certificate from `ssl_ca_cert` that
//! `replication_peers` does not name, one whose certificate another CA
//! signed, one on a listener that does not ask for certificates, a named
//! certificate without the handshake when there is a secret, a handshake
//! bound to no TLS session (a relay). A target whose certificate does not
//! verify, one not named by `replication_peers`, one that refuses this
//! server's, and one that does not take it as a peer are never sent data
//! (counted in `replica_auth_failures`). `-X` refuses `replica_follow`
//! over TLS. The start is refused for `-Z` replication without named
//! peers or a secret, or without `ssl_ca_cert`. Certificates are made at
//! test time with the `openssl` command.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use osmium_protocol::replication_link::Role;

use crate::common;
use crate::replication_support;
use common::free_port;
use replication_support::tls::{refused, Certs};
use replication_support::*;

/// A node with `-Z` (the tests' usual certificate and CA, its peers
/// named by their SAN), no secret; its clients speak TLS.
fn tls_node(port: u16, args: &[String]) -> Node {
    let c = Certs::get();
    Node::start_bare(port, &[c.node_args(), args.to_vec()].concat()).over_tls(c.client())
}

/// A node with `-Z` and the tests' secret (a peer needs both).
fn tls_node_with_secret(port: u16, args: &[String]) -> Node {
    let c = Certs::get();
    Node::start(port, &[c.node_args(), args.to_vec()].concat()).over_tls(c.client())
}

/// A plain-text request to `port` gets no memcached answer: the port
/// speaks TLS only.
fn plain_text_is_refused(port: u16) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"version\r\nset k 0 0 1\r\nx\r\n").unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        !got.windows(7).any(|w| w == b"VERSION" || w == b"STORED\r"),
        "{got:?}"
    );
}

fn stat_u64(c: &mut Client, name: &str) -> u64 {
    c.stat(name).parse().unwrap_or_else(|_| panic!("no {name}"))
}

#[test]
fn every_write_kind_reaches_the_replica_over_tls() {
    let (pa, pb) = (free_port(), free_port());
    let b = tls_node(pb, &[]);
    let a = tls_node(pa, &to(pb));
    scenarios::every_write_kind_reaches_the_replica(&a, &b);
    let mut ca = a.client();
    // The pull from B (a follow link over TLS) ended its copy too.
    wait("catch-up", || ca.stat("replication_catchup") == "done");
    let st = ca.stats();
    assert_eq!(st["replica_auth_failures"], "0");
    assert_eq!(st["replica_ssl_handshake_errors"], "0");
    plain_text_is_refused(pb);
    plain_text_is_refused(pa);
}

#[test]
fn kill_a_sync_replica_of_a_ring_of_three_under_load_over_tls() {
    scenarios::kill_a_sync_replica_under_load(&tls_node_with_secret, true);
}

/// Only the pull can bring back what A lost: B replicates nowhere. Both
/// ends of the follow link hand a TLS session over (B's worker to its
/// feed thread, A's pull thread to a worker).
#[test]
fn a_restarted_server_pulls_from_its_target_over_tls() {
    let (pa, pb) = (free_port(), free_port());
    // -v: B logs its follow links closing.
    let b = tls_node(pb, &["-v".into()]);
    let mut a = tls_node(pa, &to(pb));
    let (mut ca, mut cb) = (a.client(), b.client());
    wait("link", || ca.stat("replica_0_link") == "up");
    for k in 0..30 {
        let req = format!("set p{k} 1 0 1\r\nx\r\n");
        assert_eq!(ca.call(req.as_bytes()), "STORED");
    }
    wait("on B", || cb.mg("p29").is_some());
    a.kill();
    let big = "v".repeat(100_000);
    for k in 30..40 {
        let req = format!("set p{k} 2 0 {}\r\n{big}\r\n", big.len());
        assert_eq!(cb.call(req.as_bytes()), "STORED");
    }
    let a = tls_node(pa, &with(to(pb), &["--replica-follow-seconds", "1"]));
    let mut ca = a.client();
    wait("catch-up done", || ca.stat("replication_catchup") == "done");
    for k in 0..40 {
        let item = ca.mg(&format!("p{k}"));
        assert!(item.is_some(), "p{k} back on A");
        if k >= 30 {
            assert_eq!(item.unwrap().value, big.as_bytes(), "p{k}");
        }
    }
    // The follow links close: the first A's when it was killed, the
    // second A's once its follow time is over after the copy (B has no
    // targets of its own).
    wait("follow link closed", || {
        let log = b.stderr();
        log.matches("follow link to").count() == 2 && log.contains("(follow time over)")
    });
    // (Named peers let B serve follow links: its stats count them.)
    assert_eq!(cb.stat("replica_follow_links"), "0");
    assert_eq!(stat_u64(&mut ca, "replica_ssl_handshake_errors"), 0);
    assert_eq!(stat_u64(&mut ca, "replica_auth_failures"), 0);
}

#[test]
fn private_commands_over_tls_need_a_named_client_certificate() {
    let c = Certs::get();
    let (p, mtls, btls) = (free_port(), free_port(), free_port());
    let listeners = [
        "-l".to_string(),
        format!("mtls:127.0.0.1:{mtls}"),
        "-l".into(),
        format!("btls:127.0.0.1:{btls}"),
    ];
    let n = tls_node(p, &listeners);
    let mut owner = n.client();
    assert_eq!(owner.call(b"set secret 0 0 6\r\nhunter\r\n"), "STORED");
    let not_a_peer = |cl: &mut Client| {
        for cmd in [
            &b"replica_follow 2\r\n"[..],
            b"replica_link intruder\r\n",
            b"replica_synced\r\n",
            b"replica_targets 127.0.0.1:1\r\n",
            b"replica_hello target 00\r\n",
        ] {
            assert_eq!(cl.call(cmd), "ERROR", "{}", String::from_utf8_lossy(cmd));
        }
        assert!(cl.call(b"version\r\n").starts_with("VERSION "));
    };
    // No certificate: a client, not a peer.
    not_a_peer(&mut n.client());
    // An ordinary client certificate from ssl_ca_cert, verified, but not
    // one replication_peers names: a client, on every listener.
    for port in [p, mtls, btls] {
        let mut m = tls_client(port, c.client_config("ca", Some("client")));
        not_a_peer(&mut m);
    }
    // A certificate the listener does not ask for (btls:) is not shown.
    let on = |port: u16, cert: &str| {
        let mut m = tls_client(port, c.client_config("ca", Some(cert)));
        m.call(b"replica_link x\r\n")
    };
    assert_eq!(on(btls, "node"), "ERROR");
    // Signed by another CA: no handshake where certificates are asked for.
    for port in [p, mtls] {
        let other = c.client_config("ca", Some("other-client"));
        assert!(refused(port, other), "port {port}");
    }
    assert!(refused(mtls, c.client()), "mtls: without one");
    assert!(!refused(p, c.client()) && !refused(mtls, c.client_config("ca", Some("client"))));
    // Named (SAN 127.0.0.1): a peer, on the -Z listener
    // (ssl_verify_mode=1) and mtls:.
    assert_eq!(on(p, "node"), "OK");
    assert_eq!(on(mtls, "node"), "OK");
    plain_text_is_refused(p);
}

#[test]
fn a_certificate_replication_ca_issued_names_a_peer() {
    let c = Certs::get();
    let p = free_port();
    let ca = format!("replication_ca={}", c.path("other-ca.pem"));
    let args = c.server_args("node", Some("ca"), &["ssl_verify_mode=1", &ca]);
    let n = Node::start_bare(p, &args).over_tls(c.client());
    // other-ca's client: it verifies (replication_ca is trusted too) and
    // is a peer.
    let mut peer = tls_client(p, c.client_config("ca", Some("other-client")));
    assert_eq!(peer.call(b"replica_link x\r\n"), "OK");
    // ssl_ca_cert's ordinary client: not a peer.
    let mut client = tls_client(p, c.client_config("ca", Some("client")));
    assert_eq!(client.call(b"replica_follow 2\r\n"), "ERROR");
    let settings = {
        let mut o = n.client();
        o.send(b"stats settings\r\n");
        let mut s = String::new();
        loop {
            let l = o.line();
            if l == "END" {
                break s;
            }
            s.push_str(&l);
            s.push('\n');
        }
    };
    assert!(settings.contains("STAT replication_ca "), "{settings}");
}

#[test]
fn with_a_secret_a_tls_peer_needs_the_handshake_bound_to_its_session() {
    let (p, plain) = (free_port(), free_port());
    let n = tls_node_with_secret(p, &["-l".into(), format!("notls:127.0.0.1:{plain}")]);
    let c = Certs::get();
    // A named certificate without the handshake: not a peer.
    let mut peer = tls_client(p, c.client_config("ca", Some("node")));
    assert_eq!(peer.call(b"replica_link x\r\n"), "ERROR");
    // The handshake inside TLS, bound to the session: a peer.
    let config = c.client_config("ca", Some("node"));
    let mut peer = hello_tls(p, config.clone(), Role::TargetLink, SECRET, true).expect("hello");
    assert_eq!(peer.call(b"replica_link x\r\n"), "OK");
    // Bound to no session (a hello relayed from elsewhere): refused.
    assert!(hello_tls(p, config.clone(), Role::TargetLink, SECRET, false).is_err());
    // A certificate replication_peers does not name: refused, even with
    // the secret.
    let ordinary = c.client_config("ca", Some("client"));
    assert!(hello_tls(p, ordinary, Role::TargetLink, SECRET, true).is_err());
    let mut o = n.client();
    assert_eq!(stat_u64(&mut o, "replica_auth_failures"), 2);
    // On plain TCP (a notls: listener) the handshake makes a Noise link.
    let mut bare = hello(plain, Role::TargetLink, SECRET).expect("hello");
    assert_eq!(bare.call(b"replica_link x\r\n"), "OK");
    // Without it, plain text is a client's.
    assert_eq!(plain_client(plain).call(b"replica_follow 2\r\n"), "ERROR");
}

/// A target `t` that `a` must not feed: after a while `a` counts failed
/// proofs (and its log says `why`), its link is down, and `t` holds
/// nothing.
fn never_fed(a: &Node, t: &mut Client, why: &str) {
    let mut ca = a.client();
    for k in 0..20 {
        let req = format!("set n{k} 0 0 1\r\nx\r\n");
        assert_eq!(ca.call(req.as_bytes()), "STORED");
    }
    wait("failures counted", || {
        stat_u64(&mut ca, "replica_auth_failures") >= 2
    });
    assert_eq!(ca.stat("replica_0_link"), "down");
    assert_eq!(ca.stat("replication_catchup"), "pulling");
    assert!(a.stderr().contains(why), "{}", a.stderr());
    std::thread::sleep(Duration::from_millis(300));
    let st = t.stats();
    assert_eq!(
        (st["curr_items"].as_str(), st["cmd_set"].as_str()),
        ("0", "0")
    );
    assert!(t.mg("n0").is_none());
}

#[test]
fn a_target_whose_certificate_does_not_verify_is_never_sent_data() {
    let c = Certs::get();
    let (pa, pt) = (free_port(), free_port());
    let t_args = c.server_args(
        "other-node",
        Some("other-ca"),
        &["ssl_verify_mode=1", "replication_peers=127.0.0.1"],
    );
    let t = Node::start_bare(pt, &t_args).over_tls(c.client_config("other-ca", None));
    let a = tls_node(pa, &to(pt));
    never_fed(&a, &mut t.client(), "did not verify against ssl_ca_cert");
    let mut ca = a.client();
    assert!(stat_u64(&mut ca, "replica_ssl_handshake_errors") >= 2);
}

#[test]
fn a_target_replication_peers_does_not_name_is_never_sent_data() {
    let c = Certs::get();
    let (pa, pt) = (free_port(), free_port());
    let t = tls_node(pt, &[]);
    // Its certificate verifies (ca, IP 127.0.0.1), but A names another peer.
    let a_args = c.server_args(
        "node",
        Some("ca"),
        &["ssl_verify_mode=1", "replication_peers=cache-9.example"],
    );
    let a = Node::start_bare(pa, &[a_args, to(pt)].concat()).over_tls(c.client());
    never_fed(&a, &mut t.client(), "not one replication_peers names");
}

#[test]
fn a_target_that_refuses_this_servers_certificate_is_never_sent_data() {
    let c = Certs::get();
    let (pa, pt) = (free_port(), free_port());
    // Its own certificate verifies, but it trusts another CA only.
    let t_args = c.server_args(
        "node",
        Some("other-ca"),
        &["ssl_verify_mode=1", "replication_peers=127.0.0.1"],
    );
    let t = Node::start_bare(pt, &t_args).over_tls(c.client());
    let a = tls_node(pa, &to(pt));
    never_fed(&a, &mut t.client(), "refused this server's TLS certificate");
}

#[test]
fn a_target_that_does_not_ask_for_certificates_is_never_sent_data() {
    let c = Certs::get();
    let (pa, pt) = (free_port(), free_port());
    // ssl_verify_mode=0: it never sees a client certificate.
    let t_args = c.server_args("node", Some("ca"), &["replication_peers=127.0.0.1"]);
    let t = Node::start_bare(pt, &t_args).over_tls(c.client());
    let a = tls_node(pa, &to(pt));
    never_fed(&a, &mut t.client(), "does not take this server as a peer");
}

#[test]
fn dumps_disabled_refuse_replica_follow_over_tls() {
    let c = Certs::get();
    let n = tls_node(free_port(), &["-X".into()]);
    let mut peer = tls_client(n.port, c.client_config("ca", Some("node")));
    assert_eq!(peer.call(b"set secret 0 0 6\r\nhunter\r\n"), "STORED");
    assert_eq!(
        peer.call(b"replica_follow 2\r\n"),
        "ERROR metadump not allowed"
    );
    assert_eq!(peer.call(b"replica_link x\r\n"), "OK");
}

#[test]
fn tls_replication_needs_named_peers_and_a_ca_to_start() {
    let c = Certs::get();
    // An ordinary client certificate names no peer: --replicate-to under
    // -Z needs replication_peers, replication_ca or a secret.
    let (status, err) =
        start_refused(&[c.server_args("node", Some("ca"), &[]), to(free_port())].concat());
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(err.contains("-o replication_peers=NAME"), "{err}");
    // And ssl_ca_cert, to verify the target.
    let named = c.server_args("node", None, &["replication_peers=127.0.0.1"]);
    for more in [
        to(free_port()),
        [to(free_port()), secret_args(default_secret())].concat(),
    ] {
        let (status, err) = start_refused(&[named.clone(), more].concat());
        assert_eq!(status.code(), Some(64), "{err}");
        assert!(err.contains("needs -o ssl_ca_cert=FILE"), "{err}");
    }
    // The names without -Z mean nothing: refused.
    let (status, err) = start_refused(&["-o".into(), "replication_peers=127.0.0.1".into()]);
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(err.contains("need -Z"), "{err}");
    // Named peers, and a server that cannot accept links (no listener
    // asks for certificates) says so.
    let t = free_port();
    let quiet = Node::start_bare(
        free_port(),
        &[
            c.server_args("node", Some("ca"), &["replication_peers=127.0.0.1"]),
            to(t),
        ]
        .concat(),
    );
    assert!(
        quiet
            .stderr()
            .contains("this server accepts no replication link"),
        "{}",
        quiet.stderr()
    );
}
