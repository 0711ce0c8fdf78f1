//! Feeds arbitrary bytes through the binary-protocol framing and validation
//! the way a connection does: frame a request, decode it, skip its value
//! (or swallow an unknown one's body), repeat. Accepted keys are echoed
//! through the response encoder and parsed back. Any panic is a bug.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_protocol::binary::{
    decode, parse_response, put_hit, put_keyed_miss, Decoded, Request, Scan, HEADER_LEN,
};
use osmium_protocol::request::KEY_MAX_LENGTH;

fuzz_target!(|data: &[u8]| {
    // The prefetch peek reads the same bytes first; it must never panic.
    for key in osmium_protocol::peek::keys(data) {
        assert!(!key.is_empty());
    }
    let mut buf = data;
    let mut out = Vec::new();
    loop {
        let h = match osmium_protocol::binary::scan_request(buf) {
            Scan::Ready(h) => h,
            Scan::Incomplete { need } => {
                assert!(need > buf.len());
                break;
            }
            Scan::BadMagic(_) => break,
        };
        let prefix = h.prefix_len();
        assert!(prefix <= buf.len());
        let key_start = HEADER_LEN + usize::from(h.extras_len);
        let skip = match decode(&h, &buf[HEADER_LEN..key_start], &buf[key_start..prefix]) {
            Decoded::Request(r) => match r {
                Request::Get { key, with_key, .. } | Request::GetAndTouch { key, with_key, .. } => {
                    assert!(!key.is_empty() && key.len() <= KEY_MAX_LENGTH);
                    out.clear();
                    put_hit(&mut out, h.opcode, h.opaque, h.cas, 7, with_key.then_some(key), key);
                    put_keyed_miss(&mut out, h.opcode, h.opaque, key);
                    let (resp, n) = parse_response(&out).expect("own response parses");
                    assert_eq!(resp.value, key);
                    assert_eq!(parse_response(&out[n..]).expect("miss parses").0.key, key);
                    prefix
                }
                Request::Store { key, value_len, .. } | Request::Concat { key, value_len, .. } => {
                    assert!(!key.is_empty() && key.len() <= KEY_MAX_LENGTH);
                    assert_eq!(prefix + value_len as usize, h.packet_len());
                    h.packet_len()
                }
                Request::Sasl { value_len, .. } => prefix + value_len as usize,
                Request::Delete { key, .. } | Request::Arith { key, .. } => {
                    assert!(!key.is_empty() && key.len() <= KEY_MAX_LENGTH);
                    assert_eq!(prefix, h.packet_len());
                    prefix
                }
                // TOUCH and STAT leave any body past the key to be read as
                // the next request, as memcached does.
                _ => prefix,
            },
            Decoded::UnknownCommand => prefix.saturating_add(h.body_len as usize),
            // The server answers and closes.
            Decoded::InvalidArguments | Decoded::BadBodyLength => break,
        };
        if skip > buf.len() {
            break;
        }
        buf = &buf[skip..];
    }
});
