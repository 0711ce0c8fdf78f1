//! Feeds arbitrary bytes through osmium-proxy's parsers: the client
//! request framing (text and binary, as a connection does: frame, act,
//! repeat), the server reply framing for every reply shape, the multi-get
//! reply splitter, and the nutcracker YAML reader. The first byte picks
//! the parser. Any panic is a bug, and so is a forwarded request that is
//! not exactly one request: each wire the proxy would send a server must
//! frame again, whole, as a request with nothing hidden (`noreply`, `q`
//! and quiet opcodes are stripped before forwarding).
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_proxy::reply::{reply_len, values, Expect};
use osmium_proxy::request::{frame, is_plain_read, Action, Quiet, KEY_MAX};

fn check_wire(wire: &[u8], binary: bool) {
    assert!(!wire.is_empty());
    let again = frame(wire, binary).expect("a forwarded request frames whole");
    assert_eq!(again.len, wire.len(), "one request, all of it");
    match again.action {
        Action::Forward { wire: w, quiet, .. } => {
            assert_eq!(&*w, wire, "forwarded unchanged the second time");
            assert_eq!(quiet, Quiet::No, "nothing hidden is forwarded");
        }
        Action::MultiGet { .. } => assert!(!binary),
        other => panic!("a forwarded request frames as {other:?}"),
    }
    let _ = is_plain_read(wire);
}

fn requests(mut buf: &[u8], binary: bool) {
    while let Some(f) = frame(buf, binary) {
        assert!(f.len > 0 && f.len <= buf.len());
        match &f.action {
            Action::Forward { key, wire, .. } => {
                assert!(key.len() <= KEY_MAX);
                check_wire(wire, binary);
            }
            Action::MultiGet { prefix, keys } => {
                assert!(keys.len() > 1 && !binary);
                let mut wire = prefix.clone();
                for k in keys {
                    assert!(!k.is_empty() && k.len() <= KEY_MAX);
                    wire.push(b' ');
                    wire.extend_from_slice(k);
                }
                wire.extend_from_slice(b"\r\n");
                check_wire(&wire, false);
            }
            Action::Broadcast { wire, .. } => assert!(!wire.is_empty()),
            Action::Fatal => break,
            Action::Local(_) | Action::Quit(_) => {}
        }
        buf = &buf[f.len..];
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 4 {
        0 => requests(rest, false),
        1 => {
            let mut bin = vec![0x80];
            bin.extend_from_slice(rest);
            requests(&bin, true)
        }
        2 => {
            for expect in [
                Expect::Line,
                Expect::Values,
                Expect::MetaValue,
                Expect::Binary,
                Expect::Stats,
            ] {
                if let Ok(Some(n)) = reply_len(rest, expect) {
                    assert!(n > 0 && n <= rest.len());
                }
            }
            if let Some(blocks) = values(rest) {
                for (key, block) in blocks {
                    assert!(block.starts_with(b"VALUE ") && !key.is_empty());
                }
            }
        }
        _ => {
            if let Ok(text) = std::str::from_utf8(rest) {
                let _ = osmium_proxy::Config::parse(text);
            }
        }
    }
});
