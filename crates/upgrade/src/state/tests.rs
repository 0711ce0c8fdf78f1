//! The state document's round trip, and its refusals: every truncation,
//! every flipped bit, unknown records, missing and repeated ones.

use super::*;

fn full() -> State {
    let mut s = State::new(
        Origin {
            version: "0.1.0".into(),
            exe: (2049, 5423411),
            pid: 26526,
            first_start: 1_796_000_000,
            upgrades: 3,
            failures: 1,
            failed: Some("the new image refused".into()),
        },
        CommandLine {
            argv: vec!["osmium".into(), "-m".into(), "64".into()],
            expanded: vec![
                "osmium".into(),
                "-m".into(),
                "64".into(),
                "-t".into(),
                "2".into(),
            ],
            store_fingerprint: 0x1234_5678_9abc_def0,
        },
        9,
    );
    s.memory = Some(MemoryRec {
        fd: 5,
        path: None,
        consistent: true,
    });
    s.flash_meta = Some(MemoryRec {
        fd: 6,
        path: Some("/var/lib/osmium/cache.flash".into()),
        consistent: false,
    });
    s.listeners = vec![
        ListenerRec {
            fd: 3,
            kind: ListenerKind::Tcp,
            local: "127.0.0.1:11211".into(),
        },
        ListenerRec {
            fd: 4,
            kind: ListenerKind::Tls { mode: 2 },
            local: "[::1]:11212".into(),
        },
        ListenerRec {
            fd: 7,
            kind: ListenerKind::Unix {
                path: "/run/osmium.sock".into(),
            },
            local: "/run/osmium.sock".into(),
        },
        ListenerRec {
            fd: 8,
            kind: ListenerKind::Udp,
            local: "127.0.0.1:11211".into(),
        },
        ListenerRec {
            fd: 10,
            kind: ListenerKind::Metrics,
            local: "127.0.0.1:9150".into(),
        },
        ListenerRec {
            fd: 11,
            kind: ListenerKind::ProxyPool {
                pool: "alpha".into(),
            },
            local: "127.0.0.1:22121".into(),
        },
        ListenerRec {
            fd: 12,
            kind: ListenerKind::ProxyStats,
            local: "127.0.0.1:22222".into(),
        },
    ];
    s.conns = vec![
        ConnRec {
            fd: 20,
            unix: false,
            peer: "127.0.0.1:40000".into(),
            protocol: 1,
            authenticated: true,
            sasl: 2,
            login_pending: Some(17),
            swallow: 5,
            close_after_write: false,
            repl_peer: 0,
            last_active: 99,
            input: b"set k 0 0 10\r\n01234".to_vec(),
            output: b"STORED\r\n".to_vec(),
            proxy: None,
        },
        ConnRec {
            fd: 21,
            unix: true,
            peer: String::new(),
            protocol: 2,
            authenticated: false,
            sasl: 0,
            login_pending: None,
            swallow: 0,
            close_after_write: true,
            repl_peer: 3,
            last_active: 0,
            input: Vec::new(),
            output: vec![0x81, 0, 0, 0],
            proxy: Some(ProxyConnRec {
                pool: "alpha".into(),
                binary: true,
                closing: false,
                quit: true,
                eof: false,
            }),
        },
    ];
    s.watchers = vec![WatcherRec {
        fd: 22,
        unix: false,
        flags: 0x41,
    }];
    s.repl = vec![ReplQueueRec {
        target: "10.0.0.2:11211".into(),
        keys: vec![b"a".to_vec(), b"bb".to_vec(), Vec::new()],
    }];
    s.counters = vec![("cmd_get".into(), 10), ("total_items".into(), 4)];
    s.secrets = vec![("/etc/osmium/key.pem".into(), b"-----BEGIN".to_vec())];
    s.live = vec![("verbosity".into(), "2".into())];
    s.extra = vec![RawRecord {
        tag: 300,
        flags: SKIPPABLE,
        bytes: b"from a newer build".to_vec(),
    }];
    s
}

#[test]
fn every_record_round_trips() {
    let s = full();
    assert_eq!(State::decode(&s.encode()), Ok(s));
}

#[test]
fn the_smallest_state_round_trips() {
    let s = State::new(placeholder_origin(), placeholder_command_line(), 0);
    assert_eq!(State::decode(&s.encode()), Ok(s));
}

#[test]
fn every_truncation_is_refused() {
    let doc = full().encode();
    for len in 0..doc.len() {
        assert!(State::decode(&doc[..len]).is_err(), "cut at {len}");
    }
    let mut longer = doc.clone();
    longer.push(0);
    assert_eq!(State::decode(&longer), Err(StateError::Damaged));
}

#[test]
fn every_bit_flip_is_refused() {
    let doc = full().encode();
    for at in 0..doc.len() {
        for bit in 0..8 {
            let mut bad = doc.clone();
            bad[at] ^= 1 << bit;
            assert!(State::decode(&bad).is_err(), "bit {bit} of byte {at}");
        }
    }
}

/// A document with these records after the mandatory ones.
fn with_records(extra: &[(u16, u16, &[u8])]) -> Vec<u8> {
    let s = State::new(placeholder_origin(), placeholder_command_line(), 3);
    let doc = s.encode();
    let mut body = tlv::open(&doc).unwrap().to_vec();
    let mut w = Writer::default();
    for (tag, flags, bytes) in extra {
        w.raw(*tag, *flags, bytes);
    }
    body.extend_from_slice(&w.finish());
    tlv::seal(crate::FORMAT, 1, &body)
}

#[test]
fn unknown_records_are_refused_unless_skippable_and_then_passed_on() {
    let refused = State::decode(&with_records(&[(77, 0, b"x")]));
    assert!(matches!(refused, Err(StateError::Record { tag: 77, .. })));

    let s = State::decode(&with_records(&[(77, SKIPPABLE, b"x"), (78, 3, b"")])).unwrap();
    assert_eq!(s.extra.len(), 2);
    assert_eq!((s.extra[0].tag, &s.extra[0].bytes[..]), (77, &b"x"[..]));
    // Written again as they came, so the next build sees them too.
    assert_eq!(State::decode(&s.encode()).unwrap().extra, s.extra);
}

#[test]
fn missing_and_repeated_records_are_refused() {
    let twice = with_records(&[(OLD_EXE, 0, &4i32.to_le_bytes())]);
    assert!(matches!(
        State::decode(&twice),
        Err(StateError::Record { tag: OLD_EXE, .. })
    ));
    // A body of Origin and CommandLine only: no OldExe.
    let s = State::new(placeholder_origin(), placeholder_command_line(), 3);
    let doc = s.encode();
    let body = tlv::open(&doc).unwrap();
    let without: Vec<u8> = tlv::records(body)
        .map(Result::unwrap)
        .filter(|r| r.tag != OLD_EXE)
        .flat_map(|r| {
            let mut w = Writer::default();
            w.raw(r.tag, r.flags, r.bytes);
            w.finish()
        })
        .collect();
    assert!(matches!(
        State::decode(&tlv::seal(crate::FORMAT, 1, &without)),
        Err(StateError::Record { tag: OLD_EXE, .. })
    ));
    // A known record with a byte too many.
    let long = with_records(&[(WATCHER, 0, &[1, 0, 0, 0, 0, 0, 0, 9])]);
    assert!(matches!(
        State::decode(&long),
        Err(StateError::Record { tag: WATCHER, .. })
    ));
}

#[test]
fn a_written_state_is_sealed_kept_across_exec_and_read_again() {
    let s = full();
    let fd = s.write().unwrap();
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl queries of an fd we own.
    let (fd_flags, seals) = unsafe {
        (
            libc::fcntl(raw, libc::F_GETFD),
            libc::fcntl(raw, libc::F_GET_SEALS),
        )
    };
    assert_eq!(fd_flags & libc::FD_CLOEXEC, 0, "kept across an exec");
    let all = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    assert_eq!(seals & all, all);
    // SAFETY: write to an fd we own, from a buffer we own.
    let wrote = unsafe { libc::write(raw, b"x".as_ptr().cast(), 1) };
    assert_eq!(wrote, -1, "sealed against writes");
    assert_eq!(State::read(raw), Ok(s.clone()));
    assert_eq!(State::read(raw), Ok(s), "read again from the start");
}

#[test]
fn an_fd_that_is_not_a_state_is_refused() {
    let file = std::fs::File::open("/proc/self/cmdline").unwrap();
    assert!(State::read(file.as_raw_fd()).is_err());
    assert_eq!(State::read(-1), Err(StateError::NotState));
}
