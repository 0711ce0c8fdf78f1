//! Feeds arbitrary bytes to the 1.6.45 meta-command parser: every line is
//! parsed as it comes and again behind each meta command (so arbitrary
//! bytes reach the flag parser, the base64 key decoder and every mode
//! switch). Also round-trips memcached's base64. Any panic is a bug.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_protocol::ascii::meta::opaque_too_long;
use osmium_protocol::ascii::parse_line;
use osmium_protocol::base64::{base64_decode, base64_encode};
use osmium_protocol::request::{Command, KeyBuffer, Reply, KEY_MAX_LENGTH};

fn check(line: &[u8]) {
    let mut keys = KeyBuffer::new();
    let request = parse_line(line, &mut keys);
    if let Reply::Meta(m) = request.reply {
        let _ = opaque_too_long(&m);
        assert!(m.first_flag == 2 || m.first_flag == 3);
        for flag in m.flags() {
            assert!(!flag.is_empty() && !flag.contains(&b' '));
        }
    }
    match request.command {
        Command::Store(s) => assert!(s.key.len() <= KEY_MAX_LENGTH),
        Command::MetaGet(g) => assert!(g.key.len() <= KEY_MAX_LENGTH),
        Command::Delete(d) => assert!(d.key.len() <= KEY_MAX_LENGTH),
        Command::Arith(a) => assert!(a.key.len() <= KEY_MAX_LENGTH),
        Command::MetaDebug { key, .. } => assert!(key.len() <= KEY_MAX_LENGTH),
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    for line in data.split_inclusive(|&b| b == b'\n') {
        check(line);
        for prefix in [&b"mg "[..], b"ms ", b"md ", b"ma ", b"me ", b"ms k 1 ", b"mg k "] {
            let mut forced = Vec::with_capacity(prefix.len() + line.len() + 2);
            forced.extend_from_slice(prefix);
            forced.extend_from_slice(line);
            if !forced.ends_with(b"\n") {
                forced.extend_from_slice(b"\r\n");
            }
            check(&forced);
        }
    }
    let mut encoded = Vec::new();
    base64_encode(data, &mut encoded);
    let mut decoded = vec![0u8; data.len() + 3];
    match base64_decode(&encoded, &mut decoded) {
        Some(n) => assert_eq!(&decoded[..n], data),
        None => assert!(data.is_empty()),
    }
});
