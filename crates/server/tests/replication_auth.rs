//! Authenticated replication links over loopback (`--replication-secret`):
//! the private replication commands (`replica_link`, `replica_follow`,
//! `replica_synced`) are refused with `ERROR`, the connection unchanged and
//! nothing sent, on every connection that did not prove it holds the
//! secret: without the exchange, with a proof but no challenge, with
//! another secret, with a proof replayed from another connection, on a
//! server without a secret; `-X` refuses `replica_follow` even to a peer;
//! a server that cannot prove the secret gets nothing from a link; the
//! start is refused for a secret file open to others, an empty one, and
//! replication without a secret; two servers replicating in a ring with
//! the secret replicate. The exchange is written here from its
//! description (`osmium_protocol::replication_auth`), with aws-lc-rs's HMAC.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;
mod replication_support;
use common::free_port;
use replication_support::*;

/// The connection still serves: a get of `key` answers `value`, and
/// nothing else was waiting before it (no copy was streamed).
fn still_serves(c: &mut Client, key: &str, value: &str) {
    c.send(format!("mn\r\nget {key}\r\n").as_bytes());
    assert_eq!(c.line(), "MN", "something was sent before mn's answer");
    assert_eq!(c.line(), format!("VALUE {key} 0 {}", value.len()));
    assert_eq!(c.line(), value);
    assert_eq!(c.line(), "END");
}

/// The three private commands, refused as unknown commands.
fn private_commands_refused(c: &mut Client) {
    assert_eq!(c.call(b"replica_follow 3600\r\n"), "ERROR");
    assert_eq!(c.call(b"replica_link intruder\r\n"), "ERROR");
    assert_eq!(c.call(b"replica_synced\r\n"), "ERROR");
    // noreply hides the ERROR, as memcached's for an unknown command.
    c.send(b"replica_follow 3600 noreply\r\n");
    assert!(c.call(b"version\r\n").starts_with("VERSION "));
}

fn failures(c: &mut Client) -> u64 {
    c.stat("replica_auth_failures").parse().unwrap()
}

#[test]
fn private_commands_need_the_exchange() {
    let (pa, pb) = (free_port(), free_port());
    let b = Node::start(pb, &[]);
    let a = Node::start(pa, &to(pb));
    let (mut ca, mut cb) = (a.client(), b.client());
    wait("link up", || ca.stat("replica_0_link") == "up");
    assert_eq!(ca.call(b"set secret 0 0 6\r\nvalue1\r\n"), "STORED");

    // A client that asks for the stream gets ERROR and no data, and goes on.
    let mut c = a.client();
    private_commands_refused(&mut c);
    still_serves(&mut c, "secret", "value1");
    assert_eq!(ca.stat("replica_follow_links"), "0");
    // Its replica_link did not make it a peer: its writes are forwarded.
    assert_eq!(c.call(b"set after 0 0 2\r\nok\r\n"), "STORED");
    wait("forwarded", || cb.mg("after").is_some());
    assert_eq!(failures(&mut ca), 0);
    // Nothing says whether the secret is, beyond that one is set.
    let settings = {
        ca.send(b"stats settings\r\n");
        let mut s = String::new();
        loop {
            let l = ca.line();
            if l == "END" {
                break s;
            }
            s.push_str(&l);
            s.push('\n');
        }
    };
    assert!(
        settings.contains("STAT replication_secret yes\n"),
        "{settings}"
    );
    assert!(!settings.contains("shared secret"), "{settings}");
    // A line ending in an HTTP/ token closes, as for any unknown command.
    let mut h = a.client();
    h.send(b"replica_follow 1 HTTP/1.1\r\n");
    let mut rest = Vec::new();
    let _ = h.r.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn an_authenticated_peer_may_follow() {
    let a = Node::start(free_port(), &[]);
    let mut ca = a.client();
    assert_eq!(ca.call(b"set k1 3 0 2\r\nv1\r\n"), "STORED");
    let mut c = a.client();
    let (server_ok, _, answer) = exchange(&mut c, SECRET, &[9; 32]);
    assert!(server_ok, "the server did not prove the secret");
    assert_eq!(answer, "OK");
    assert_eq!(c.call(b"replica_follow 0\r\n"), "OK");
    // Its full copy follows.
    let mut copy = String::new();
    while !copy.contains("replica_synced") {
        copy.push_str(&c.line());
        copy.push('\n');
    }
    assert!(copy.contains("ms k1 2 F3"), "{copy}");
    assert_eq!(failures(&mut ca), 0);
}

#[test]
fn a_proof_without_a_challenge_is_refused() {
    let a = Node::start(free_port(), &[]);
    let mut c = a.client();
    assert_eq!(c.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    let proof = hex(&[0x5a; 32]);
    assert_eq!(
        c.call(format!("replica_proof {proof}\r\n").as_bytes()),
        "ERROR"
    );
    private_commands_refused(&mut c);
    still_serves(&mut c, "k", "x");
    assert_eq!(failures(&mut c), 1);
    assert!(
        a.stderr()
            .contains("replica_proof without replica_auth from 127.0.0.1:"),
        "{}",
        a.stderr()
    );
}

#[test]
fn a_wrong_secret_is_refused() {
    let a = Node::start(free_port(), &[]);
    let mut c = a.client();
    assert_eq!(c.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    let (server_ok, _, answer) = exchange(&mut c, b"another secret", &[1; 32]);
    assert!(!server_ok, "a server proof checked with the wrong secret");
    assert_eq!(answer, "ERROR");
    private_commands_refused(&mut c);
    still_serves(&mut c, "k", "x");
    assert_eq!(failures(&mut c), 1);
    let log = a.stderr();
    assert_eq!(
        log.matches("wrong replica_proof from 127.0.0.1:").count(),
        1,
        "{log}"
    );

    // A refused proof uses its challenge up: the right proof for it comes
    // too late.
    let client = [2u8; 32];
    let line = c.call(format!("replica_auth {}\r\n", hex(&client)).as_bytes());
    let server = unhex(line.split(' ').nth(1).unwrap());
    let wrong = hex(&mac(b"another secret", CLIENT_LABEL, &client, &server));
    let right = hex(&mac(SECRET, CLIENT_LABEL, &client, &server));
    assert_eq!(
        c.call(format!("replica_proof {wrong}\r\n").as_bytes()),
        "ERROR"
    );
    assert_eq!(
        c.call(format!("replica_proof {right}\r\n").as_bytes()),
        "ERROR"
    );
    private_commands_refused(&mut c);
    // The client's proof is not the server's (another label).
    let server_proof = unhex(line.split(' ').nth(2).unwrap());
    assert_eq!(server_proof, mac(SECRET, SERVER_LABEL, &client, &server));
    assert_ne!(server_proof, unhex(&right));
    assert_eq!(failures(&mut c), 3);

    // A malformed nonce starts nothing.
    assert_eq!(
        c.call(b"replica_auth 00ff\r\n"),
        "CLIENT_ERROR bad command line format"
    );
    assert_eq!(c.call(b"replica_follow 1\r\n"), "ERROR");
    still_serves(&mut c, "k", "x");
}

#[test]
fn a_replayed_proof_is_refused() {
    let a = Node::start(free_port(), &[]);
    let nonce = [7u8; 32];
    // A good exchange, recorded.
    let mut good = a.client();
    let (server_ok, proof, answer) = exchange(&mut good, SECRET, &nonce);
    assert!(server_ok && answer == "OK");
    assert_eq!(good.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    // Replayed on another connection with the same client nonce: the
    // server's nonce is new, so the recorded proof is wrong.
    let mut c = a.client();
    let line = c.call(format!("replica_auth {}\r\n", hex(&nonce)).as_bytes());
    assert!(line.starts_with("REPLICA_CHALLENGE "), "{line}");
    assert_eq!(
        c.call(format!("replica_proof {proof}\r\n").as_bytes()),
        "ERROR"
    );
    private_commands_refused(&mut c);
    still_serves(&mut c, "k", "x");
    // And on the connection that made it, once used, it is used up.
    assert_eq!(
        good.call(format!("replica_proof {proof}\r\n").as_bytes()),
        "ERROR"
    );
    assert_eq!(failures(&mut c), 2);
}

#[test]
fn a_server_without_a_secret_knows_no_replica_command() {
    let a = Node::start_bare(free_port(), &[]);
    let mut c = a.client();
    assert_eq!(c.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    let nonce = hex(&[3; 32]);
    assert_eq!(
        c.call(format!("replica_auth {nonce}\r\n").as_bytes()),
        "ERROR"
    );
    assert_eq!(
        c.call(format!("replica_proof {nonce}\r\n").as_bytes()),
        "ERROR"
    );
    private_commands_refused(&mut c);
    still_serves(&mut c, "k", "x");
    let stats = c.stats();
    assert!(!stats.keys().any(|k| k.starts_with("replica")), "{stats:?}");
}

#[test]
fn dumps_disabled_refuse_replica_follow_to_a_peer() {
    let a = Node::start(free_port(), &["-X".to_string()]);
    let mut c = a.client();
    assert_eq!(c.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    let (server_ok, _, answer) = exchange(&mut c, SECRET, &[5; 32]);
    assert!(server_ok && answer == "OK");
    // memcached's answer to `lru_crawler metadump` under -X.
    assert_eq!(
        c.call(b"replica_follow 3600\r\n"),
        "ERROR metadump not allowed"
    );
    assert_eq!(
        c.call(b"lru_crawler metadump all\r\n"),
        "ERROR metadump not allowed"
    );
    still_serves(&mut c, "k", "x");
    assert_eq!(c.stat("replica_follow_links"), "0");
}

#[test]
fn servers_with_different_secrets_do_not_link() {
    let other = SecretFile::new(b"not the same secret\n", 0o600);
    let (pa, pb) = (free_port(), free_port());
    let b = Node::start_bare(pb, &secret_args(&other.path()));
    let a = Node::start(pa, &to(pb));
    let (mut ca, mut cb) = (a.client(), b.client());
    assert_eq!(ca.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    wait("A saw B fail", || failures(&mut ca) >= 1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ca.stat("replica_0_link"), "down");
    assert_eq!(ca.stat("replication_catchup"), "pulling");
    assert!(
        cb.mg("k").is_none(),
        "replicated to a server without the secret"
    );
    // A stops at B's proof: B never sees a proof of A's to refuse.
    assert_eq!(failures(&mut cb), 0);
    assert!(
        a.stderr()
            .contains("failed to prove it holds the replication secret"),
        "{}",
        a.stderr()
    );
}

/// A fake server that answers `replica_auth` with a made-up challenge
/// gets no proof, no `replica_link`, and none of the writes.
#[test]
fn a_fake_server_collects_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heard = Arc::new(Mutex::new(Vec::<u8>::new()));
    {
        let heard = heard.clone();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { return };
                let heard = heard.clone();
                std::thread::spawn(move || fake_peer(s, &heard));
            }
        });
    }
    let a = Node::start(free_port(), &to(port));
    let mut ca = a.client();
    assert_eq!(ca.call(b"set private 0 0 6\r\nhidden\r\n"), "STORED");
    wait("A refused the fake", || failures(&mut ca) >= 2);
    std::thread::sleep(Duration::from_millis(300));
    let heard = String::from_utf8_lossy(&heard.lock().unwrap()).into_owned();
    assert!(heard.contains("replica_auth "), "{heard}");
    for word in [
        "replica_proof",
        "replica_link",
        "replica_follow",
        "hidden",
        "private",
    ] {
        assert!(
            !heard.contains(word),
            "the fake server heard {word}: {heard}"
        );
    }
    assert_eq!(ca.stat("replica_0_link"), "down");
}

fn fake_peer(s: TcpStream, heard: &Mutex<Vec<u8>>) {
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut line = Vec::new();
    while r.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
        heard.lock().unwrap().extend_from_slice(&line);
        if line.starts_with(b"replica_auth ") {
            let answer = format!("REPLICA_CHALLENGE {} {}\r\n", hex(&[1; 32]), hex(&[2; 32]));
            let _ = w.write_all(answer.as_bytes());
        } else {
            let _ = w.write_all(b"OK\r\n");
        }
        line.clear();
    }
}

#[test]
fn two_servers_with_the_secret_replicate_both_ways() {
    let (pa, pb) = (free_port(), free_port());
    let a = Node::start(pa, &to(pb));
    let b = Node::start(pb, &to(pa));
    let (mut ca, mut cb) = (a.client(), b.client());
    wait("links up", || {
        ca.stat("replica_0_link") == "up" && cb.stat("replica_0_link") == "up"
    });
    assert_eq!(ca.call(b"set from_a 1 0 3\r\naaa\r\n"), "STORED");
    assert_eq!(cb.call(b"set from_b 2 0 3\r\nbbb\r\n"), "STORED");
    wait("a to b", || {
        cb.mg("from_a").is_some_and(|i| i.value == b"aaa")
    });
    wait("b to a", || {
        ca.mg("from_b").is_some_and(|i| i.value == b"bbb")
    });
    wait("caught up", || {
        ca.stat("replication_catchup") == "done" && cb.stat("replication_catchup") == "done"
    });
    assert_eq!((failures(&mut ca), failures(&mut cb)), (0, 0));
}

#[test]
fn start_is_refused_without_a_usable_secret() {
    let open = SecretFile::new(b"secret\n", 0o640);
    let (status, err) = start_refused(&secret_args(&open.path()));
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(err.contains("open to group or others (mode 640)"), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    let world = SecretFile::new(b"secret\n", 0o604);
    assert_eq!(
        start_refused(&secret_args(&world.path())).0.code(),
        Some(64)
    );

    let empty = SecretFile::new(b"\n", 0o600);
    let (status, err) = start_refused(&secret_args(&empty.path()));
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(err.contains("empty"), "{err}");

    let (status, err) = start_refused(&secret_args("/nonexistent/osmium-secret"));
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(err.contains("cannot read it"), "{err}");

    let (status, err) = start_refused(&to(free_port()));
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(
        err.contains("--replicate-to needs --replication-secret"),
        "{err}"
    );
}
