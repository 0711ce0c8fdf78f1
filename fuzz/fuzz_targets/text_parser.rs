//! Feeds arbitrary bytes through the text-protocol framing and parser the
//! way a connection does: find a line, parse it, skip a storage command's
//! data block, repeat. Any panic is a bug.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_protocol::text::{parse_command, scan_line, Command, LineScan, KEY_MAX_LENGTH};

fuzz_target!(|data: &[u8]| {
    // The prefetch peek reads the same bytes first; it must never panic.
    for key in osmium_protocol::peek::keys(data) {
        assert!(!key.is_empty());
    }
    let mut buf = data;
    loop {
        let (line_len, consumed) = match scan_line(buf) {
            LineScan::Line { line_len, consumed } => (line_len, consumed),
            LineScan::Incomplete | LineScan::TooLong => break,
        };
        assert!(line_len <= consumed && consumed <= buf.len());
        match parse_command(&buf[..line_len]) {
            Command::Get { keys, .. } => {
                for k in keys {
                    assert!(!k.is_empty() && !k.contains(&b' '));
                }
            }
            Command::Store(req) => {
                assert!(req.key.len() <= KEY_MAX_LENGTH);
                let skip = consumed.saturating_add(req.value_len as usize + 2);
                if skip > buf.len() {
                    break;
                }
                buf = &buf[skip..];
                continue;
            }
            Command::Delete { key, .. } | Command::Arith { key, .. } | Command::Touch { key, .. } => {
                assert!(key.len() <= KEY_MAX_LENGTH);
            }
            _ => {}
        }
        buf = &buf[consumed..];
    }
});
