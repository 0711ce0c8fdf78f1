//! The replication link's handshake over loopback (`--replication-secret`,
//! the Noise handshake of `osmium_protocol::replication_link`): the
//! private replication commands (`replica_link`, `replica_follow`,
//! `replica_synced`, `replica_targets`) are `ERROR`, the connection
//! unchanged and nothing sent, on every connection that did not complete
//! the handshake; a hello under another secret, or the server's own
//! (reflected), closes the connection unanswered and is counted; a
//! malformed one is `ERROR`; a server without a secret knows no such
//! command; each role runs only its column of `replication::rights` (a
//! follow link this server pulled cannot change its targets, shut it
//! down, or run anything but the feed's data); a frame that fails to
//! authenticate closes the link; `-X` refuses `replica_follow` even to a
//! follower; servers with different secrets do not link and a fake
//! target learns nothing; the start is refused for a secret file open to
//! others, an empty one, a weak one, and replication without a secret;
//! `--gen-secret` makes a good one; two servers with the secret
//! replicate both ways.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use osmium_protocol::replication_link::{respond, HandshakeError, NoiseStream, Role};

use crate::common;
use crate::replication_support;
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

/// The private commands, refused as unknown commands.
fn private_commands_refused(c: &mut Client) {
    assert_eq!(c.call(b"replica_follow 3600\r\n"), "ERROR");
    assert_eq!(c.call(b"replica_link intruder\r\n"), "ERROR");
    assert_eq!(c.call(b"replica_synced\r\n"), "ERROR");
    assert_eq!(c.call(b"replica_targets 127.0.0.1:1\r\n"), "ERROR");
    // noreply hides the ERROR, as memcached's for an unknown command.
    c.send(b"replica_follow 3600 noreply\r\n");
    assert!(c.call(b"version\r\n").starts_with("VERSION "));
}

fn failures(c: &mut Client) -> u64 {
    c.stat("replica_auth_failures").parse().unwrap()
}

/// Whether the server closed `s` without a word.
fn closed_unanswered(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut rest = Vec::new();
    matches!(s.read_to_end(&mut rest), Ok(0)) || rest.is_empty()
}

/// A hello line for `role` made with `content` as another process would.
fn hello_line(content: &[u8], role: Role) -> String {
    let (_, line) =
        osmium_protocol::replication_link::Initiator::start(&secret(content), role, None).unwrap();
    line
}

#[test]
fn private_commands_need_the_handshake() {
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
    assert_eq!(ca.stat("replica_0_addr"), format!("127.0.0.1:{pb}"));
    // Its replica_link did not make it a peer: its writes are forwarded.
    assert_eq!(c.call(b"set after 0 0 2\r\nok\r\n"), "STORED");
    wait("forwarded", || cb.mg("after").is_some());
    // Malformed hellos are lines the server does not know.
    for junk in [
        "replica_hello\r\n",
        "replica_hello target\r\n",
        "replica_hello leader 00\r\n",
        "replica_hello target zz\r\n",
        "replica_hello target 0011\r\n",
        "replica_hello target 00 11\r\n",
    ] {
        assert_eq!(c.call(junk.as_bytes()), "ERROR", "{junk}");
    }
    private_commands_refused(&mut c);
    still_serves(&mut c, "secret", "value1");
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
    assert!(!settings.contains("5f0c2a9e"), "{settings}");
    // A line ending in an HTTP/ token closes, as for any unknown command.
    let mut h = a.client();
    h.send(b"replica_follow 1 HTTP/1.1\r\n");
    let mut rest = Vec::new();
    let _ = h.r.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
}

#[test]
fn a_follower_gets_the_copy_over_noise_frames() {
    let a = Node::start(free_port(), &[]);
    let mut ca = a.client();
    assert_eq!(ca.call(b"set k1 3 0 2\r\nv1\r\n"), "STORED");
    let mut c = hello(a.port, Role::FollowLink, SECRET).expect("handshake");
    // A follower runs nothing but replica_follow: anything else ends it.
    let mut probe = hello(a.port, Role::FollowLink, SECRET).expect("handshake");
    assert_eq!(probe.call(b"get k1\r\n"), "ERROR");
    let mut rest = Vec::new();
    assert!(probe.r.read_to_end(&mut rest).map_or(true, |n| n == 0));
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
fn a_hello_under_another_secret_is_closed_unanswered_and_counted() {
    let a = Node::start(free_port(), &[]);
    let mut ca = a.client();
    assert_eq!(ca.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    match hello(a.port, Role::TargetLink, OTHER_SECRET) {
        Err(HandshakeError::Closed) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a hello under another secret was answered"),
    }
    assert_eq!(failures(&mut ca), 1);
    // The same with commands queued behind the hello: none of them runs.
    let mut s = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let mut lines = hello_line(OTHER_SECRET, Role::ProxyPeer);
    lines.push_str("set injected 0 0 1\r\nx\r\nreplica_targets 127.0.0.1:1\r\n");
    s.write_all(lines.as_bytes()).unwrap();
    assert!(closed_unanswered(&mut s));
    assert_eq!(failures(&mut ca), 2);
    assert!(ca.mg("injected").is_none());
    let log = a.stderr();
    assert_eq!(
        log.matches("does not prove the replication secret").count(),
        2,
        "{log}"
    );
    // The right secret with commands behind the hello, before its
    // answer: they cannot be frames yet, so the link is closed.
    let mut s = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let mut lines = hello_line(SECRET, Role::ProxyPeer);
    lines.push_str("set injected 0 0 1\r\nx\r\n");
    s.write_all(lines.as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let mut answer = String::new();
    r.read_line(&mut answer).unwrap();
    assert!(answer.starts_with("REPLICA_HELLO "), "{answer}");
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
    assert!(ca.mg("injected").is_none());
}

#[test]
fn a_replayed_hello_and_its_frames_store_nothing() {
    let a = Node::start(free_port(), &[]);
    let mut ca = a.client();
    // A real proxy peer's connection, recorded: its hello, then a write.
    let mut s = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    let line = hello_line(SECRET, Role::ProxyPeer);
    s.write_all(line.as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut answer = String::new();
    r.read_line(&mut answer).unwrap();
    assert!(answer.starts_with("REPLICA_HELLO "), "{answer}");
    // (The recorded frames: what a peer with the keys would send. The
    // replay below has only the hello line, as a recording would.)
    drop(r);
    drop(s);
    // Replayed on a new connection: the server answers (message 1 is
    // good), but the replayer cannot make a frame under the new keys.
    let mut s = TcpStream::connect(("127.0.0.1", a.port)).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut answer2 = String::new();
    r.read_line(&mut answer2).unwrap();
    assert_ne!(answer, answer2, "a new answer for every hello");
    // Bytes that are not frames under the new keys end the link.
    let payload = b"ms replayed 1 T0\r\nx\r\nmn\r\n0123456789abcdef0123456789abcdef";
    let mut frame = (payload.len() as u16).to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&frame).unwrap();
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{rest:?}");
    wait("the bad frame counted", || failures(&mut ca) == 1);
    assert!(ca.mg("replayed").is_none());
    assert!(a.stderr().contains("frame failed to authenticate"));
}

#[test]
fn a_server_without_a_secret_knows_no_replica_command() {
    let a = Node::start_bare(free_port(), &[]);
    let mut c = a.client();
    assert_eq!(c.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    let line = hello_line(SECRET, Role::TargetLink);
    assert_eq!(c.call(line.as_bytes()), "ERROR");
    private_commands_refused(&mut c);
    still_serves(&mut c, "k", "x");
    let stats = c.stats();
    assert!(!stats.keys().any(|k| k.starts_with("replica")), "{stats:?}");
}

#[test]
fn dumps_disabled_refuse_replica_follow_to_a_follower() {
    let a = Node::start(free_port(), &["-X".to_string()]);
    let mut ca = a.client();
    assert_eq!(ca.call(b"set k 0 0 1\r\nx\r\n"), "STORED");
    let mut c = hello(a.port, Role::FollowLink, SECRET).expect("handshake");
    // memcached's answer to `lru_crawler metadump` under -X.
    assert_eq!(
        c.call(b"replica_follow 3600\r\n"),
        "ERROR metadump not allowed"
    );
    assert_eq!(ca.stat("replica_follow_links"), "0");
}

#[test]
fn servers_with_different_secrets_do_not_link() {
    let mut content = OTHER_SECRET.to_vec();
    content.push(b'\n');
    let other = SecretFile::new(&content, 0o600);
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
    // B refused A's hellos: it never answered one.
    assert!(failures(&mut cb) >= 1);
    assert!(
        a.stderr()
            .contains("closed the connection at the handshake"),
        "{}",
        a.stderr()
    );
}

/// A fake target that answers a hello with a made-up message 2 gets no
/// `replica_link`, and none of the writes.
#[test]
fn a_fake_target_collects_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heard = Arc::new(Mutex::new(Vec::<u8>::new()));
    {
        let heard = heard.clone();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { return };
                let heard = heard.clone();
                std::thread::spawn(move || fake_target(s, &heard));
            }
        });
    }
    let a = Node::start(free_port(), &to(port));
    let mut ca = a.client();
    assert_eq!(ca.call(b"set private 0 0 6\r\nhidden\r\n"), "STORED");
    wait("A refused the fake", || failures(&mut ca) >= 2);
    std::thread::sleep(Duration::from_millis(300));
    let heard = String::from_utf8_lossy(&heard.lock().unwrap()).into_owned();
    assert!(heard.contains("replica_hello "), "{heard}");
    for word in ["replica_link", "replica_follow", "hidden", "private"] {
        assert!(
            !heard.contains(word),
            "the fake target heard {word}: {heard}"
        );
    }
    assert_eq!(ca.stat("replica_0_link"), "down");
    assert!(a.stderr().contains("does not hold the replication secret"));
}

fn fake_target(s: TcpStream, heard: &Mutex<Vec<u8>>) {
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut line = Vec::new();
    while r.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
        heard.lock().unwrap().extend_from_slice(&line);
        if line.starts_with(b"replica_hello ") {
            let answer = format!("REPLICA_HELLO {}\r\n", "ab".repeat(64));
            let _ = w.write_all(answer.as_bytes());
        } else {
            let _ = w.write_all(b"OK\r\n");
        }
        line.clear();
    }
}

/// A stand-in target that holds the secret (a peer gone bad, the worst
/// case): on the follow link the server pulls from it, what a feed does
/// not send is refused, the link closed, nothing of it run; the feed's
/// own data goes through.
#[test]
fn a_follow_link_runs_only_what_a_feed_sends() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel::<(Role, BufReader<NoiseStream<TcpStream>>)>();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(s) = s else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                if let Some(link) = accept_as_target(s) {
                    let _ = tx.send(link);
                }
            });
        }
    });
    let a = Node::start(free_port(), &[to(port), vec!["-A".into()]].concat());
    let mut ca = a.client();
    let follow = || loop {
        let (role, mut link) = rx.recv_timeout(Duration::from_secs(10)).expect("a link");
        if role == Role::FollowLink {
            let mut l = String::new();
            link.read_line(&mut l).unwrap();
            assert_eq!(l, "replica_follow 60\r\n");
            link.get_mut().write_all(b"OK\r\n").unwrap();
            return link;
        }
        // The target link: kept open, as a target's would be.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = link.read_to_end(&mut sink);
        });
    };
    // Each refused: ERROR, then the server closes the link (and pulls
    // again on a new one).
    for attack in [
        "replica_targets 127.0.0.1:1\r\n",
        "shutdown\r\n",
        "verbosity 1\r\n",
        "stats reset\r\n",
        "set injected 0 0 1\r\nx\r\n",
        "replica_follow 1\r\n",
        "lru_crawler metadump all\r\n",
    ] {
        let mut link = follow();
        link.get_mut().write_all(attack.as_bytes()).unwrap();
        let mut answer = String::new();
        link.read_line(&mut answer).unwrap();
        assert_eq!(answer, "ERROR\r\n", "{attack}");
        let mut rest = Vec::new();
        let _ = link.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{attack}: {rest:?}");
    }
    assert_eq!(ca.stat("replica_0_addr"), format!("127.0.0.1:{port}"));
    assert!(ca.mg("injected").is_none());
    assert!(ca.call(b"version\r\n").starts_with("VERSION "));
    // The feed's data runs.
    let mut link = follow();
    link.get_mut()
        .write_all(b"ms fed 2 T0 q\r\nok\r\nreplica_synced\r\nmn\r\n")
        .unwrap();
    let mut answer = String::new();
    link.read_line(&mut answer).unwrap();
    assert_eq!(answer, "MN\r\n");
    assert_eq!(ca.mg("fed").unwrap().value, b"ok");
    wait("caught up", || ca.stat("replication_catchup") == "done");
    assert!(a.stderr().contains("a follow link sent \"replica_targets"));
}

/// The listening end of a hello with the tests' secret (this test process
/// is not the server: its instance id differs), then `replica_link`'s OK
/// for a target link.
fn accept_as_target(s: TcpStream) -> Option<(Role, BufReader<NoiseStream<TcpStream>>)> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let w: Vec<&str> = line.trim_end().split(' ').collect();
    let (role, answer, t) =
        respond(&secret(SECRET), w[1].as_bytes(), w[2].as_bytes(), None).ok()?;
    let mut s = s;
    s.write_all(format!("{answer}\r\n").as_bytes()).ok()?;
    let mut link = BufReader::new(NoiseStream::new(s, t));
    if role == Role::TargetLink {
        let mut l = String::new();
        link.read_line(&mut l).ok()?;
        assert!(l.starts_with("replica_link "), "{l}");
        link.get_mut().write_all(b"OK\r\n").ok()?;
    }
    Some((role, link))
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
    let open = SecretFile::new(b"5f0c2a9e4d7b1386a0f3c5e7d9b2a4c6\n", 0o640);
    let (status, err) = start_refused(&secret_args(&open.path()));
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(err.contains("open to group or others (mode 640)"), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    let world = SecretFile::new(b"5f0c2a9e4d7b1386a0f3c5e7d9b2a4c6\n", 0o604);
    assert_eq!(
        start_refused(&secret_args(&world.path())).0.code(),
        Some(64)
    );

    let empty = SecretFile::new(b"\n", 0o600);
    let (status, err) = start_refused(&secret_args(&empty.path()));
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(err.contains("empty"), "{err}");

    for weak in [
        &b"winter2024\n"[..],
        b"0123456789abcdef\n",
        b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
    ] {
        let file = SecretFile::new(weak, 0o600);
        let (status, err) = start_refused(&secret_args(&file.path()));
        assert_eq!(status.code(), Some(64), "{err}");
        assert!(err.contains("at least 128 random bits"), "{err}");
        assert!(err.contains("osmium --gen-secret FILE"), "{err}");
    }

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
