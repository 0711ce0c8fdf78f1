//! Feeds arbitrary bytes through the text-protocol framing and the 1.6.45
//! parser the way a connection does: frame a line, parse it, skip the data
//! block a storage command (or a refused one) announced, repeat; a long
//! line without a newline goes to the streaming multi-get reader. Any panic
//! is a bug.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_protocol::ascii::{frame, parse_line, partial_get, Frame};
use osmium_protocol::request::{Command, KeyBuffer, Reply, KEY_MAX_LENGTH};

fuzz_target!(|data: &[u8]| {
    // The prefetch peek reads the same bytes first; it must never panic.
    for key in osmium_protocol::peek::keys(data) {
        assert!(!key.is_empty());
    }
    let mut buf = data;
    let mut keys = KeyBuffer::new();
    loop {
        let len = match frame(buf) {
            Frame::Line(len) => len,
            Frame::Incomplete => {
                if let Some(pg) = partial_get(buf) {
                    assert!(pg.keys_start < buf.len());
                    assert_ne!(buf[pg.keys_start], b' ');
                }
                break;
            }
            Frame::Close => break,
        };
        assert!(len >= 1 && len <= buf.len() && buf[len - 1] == b'\n');
        let line = &buf[..len];
        let request = parse_line(line, &mut keys);
        if let Reply::Meta(m) = request.reply {
            for flag in m.flags() {
                assert!(!flag.is_empty() && !flag.contains(&b' '));
            }
        }
        let skip = match request.command {
            Command::Get { keys, .. } => {
                for k in keys {
                    assert!(!k.is_empty() && !k.contains(&b' ') && !k.contains(&b'\n'));
                }
                0
            }
            Command::Store(s) => {
                assert!(s.key.len() <= KEY_MAX_LENGTH);
                s.value_len + 2
            }
            Command::Error { discard, .. } => discard,
            Command::Delete(d) => {
                assert!(d.key.len() <= KEY_MAX_LENGTH);
                0
            }
            Command::Arith(a) => {
                assert!(a.key.len() <= KEY_MAX_LENGTH);
                0
            }
            Command::Touch { key, .. } | Command::MetaDebug { key, .. } => {
                assert!(key.len() <= KEY_MAX_LENGTH);
                0
            }
            Command::MetaGet(g) => {
                assert!(g.key.len() <= KEY_MAX_LENGTH);
                0
            }
            Command::Close | Command::Quit => break,
            _ => 0,
        };
        match len.checked_add(skip).and_then(|end| buf.get(end..)) {
            Some(rest) => buf = rest,
            None => break,
        }
    }
});
