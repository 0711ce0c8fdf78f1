//! Feeds arbitrary bytes to the meta-command parser as a connection does:
//! find a line, tokenize it, parse it as a meta command if memcached would,
//! skip an ms data block, repeat. Also round-trips memcached's base64.
//! Any panic is a bug.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_protocol::meta::{base64_decode, base64_encode, parse_meta, MetaCommand, MetaParse};
use osmium_protocol::text::{is_meta, scan_line, LineScan, Tokens, KEY_MAX_LENGTH};

fuzz_target!(|data: &[u8]| {
    let mut buf = data;
    loop {
        let (line_len, consumed) = match scan_line(buf) {
            LineScan::Line { line_len, consumed } => (line_len, consumed),
            LineScan::Incomplete | LineScan::TooLong => break,
        };
        let line = &buf[..line_len];
        // Force the meta dispatch on every line too, not just `m?` ones.
        let mut forced = Vec::with_capacity(line.len() + 3);
        forced.extend_from_slice(b"mg ");
        forced.extend_from_slice(line);
        let _ = parse_meta(Tokens::new(&forced));
        let tokens = Tokens::new(line);
        if is_meta(&tokens) {
            match parse_meta(tokens) {
                MetaParse::Request(req) => {
                    assert!(req.key().len() <= KEY_MAX_LENGTH);
                    let _ = req.flag_tokens().count();
                    if req.command == MetaCommand::Set {
                        let skip = consumed.saturating_add(req.data_len + 2);
                        if skip > buf.len() {
                            break;
                        }
                        buf = &buf[skip..];
                        continue;
                    }
                }
                MetaParse::Error { swallow: Some(n), .. } => {
                    let skip = consumed.saturating_add(n);
                    if skip > buf.len() {
                        break;
                    }
                    buf = &buf[skip..];
                    continue;
                }
                _ => {}
            }
        }
        buf = &buf[consumed..];
    }
    let mut encoded = Vec::new();
    base64_encode(data, &mut encoded);
    let mut decoded = vec![0u8; data.len() + 3];
    match base64_decode(&encoded, &mut decoded) {
        Some(n) => assert_eq!(&decoded[..n], data),
        None => assert!(data.is_empty()),
    }
});
