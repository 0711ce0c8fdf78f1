//! Property tests for the binary protocol: framing and validation never
//! panic on any bytes, well-formed requests decode to what was encoded
//! whatever the split, and responses parse back to what was written.
use osmium_protocol::binary::{
    decode, opcode, parse_response, put_error, put_hit, put_stat, scan_request, status,
    status_message, Decoded, Request, RequestHeader, Scan, HEADER_LEN, REQUEST_MAGIC,
};
use osmium_protocol::request::StoreMode;
use proptest::prelude::*;

fn packet(op: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
    let mut out = Vec::new();
    RequestHeader {
        magic: REQUEST_MAGIC,
        opcode: op,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .encode(&mut out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// Frames and decodes the request at the front of `buf` as a connection
/// does; returns the decoded request and how many bytes it spans (header,
/// extras and key; the value is the caller's business).
fn frame(buf: &[u8]) -> Option<(Decoded<'_>, RequestHeader)> {
    match scan_request(buf) {
        Scan::Ready(h) => {
            let k = HEADER_LEN + usize::from(h.extras_len);
            Some((decode(&h, &buf[HEADER_LEN..k], &buf[k..h.prefix_len()]), h))
        }
        _ => None,
    }
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..=250)
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..400)) {
        match scan_request(&buf) {
            Scan::Incomplete { need } => prop_assert!(need > buf.len()),
            Scan::BadMagic(m) => prop_assert_ne!(m, REQUEST_MAGIC),
            Scan::Ready(h) => {
                prop_assert!(h.prefix_len() <= buf.len());
                let k = HEADER_LEN + usize::from(h.extras_len);
                let _ = decode(&h, &buf[HEADER_LEN..k], &buf[k..h.prefix_len()]);
            }
        }
        let _ = parse_response(&buf);
    }

    #[test]
    fn any_header_decodes_without_panic(
        op in any::<u8>(), extras in proptest::collection::vec(any::<u8>(), 0..32),
        key in proptest::collection::vec(any::<u8>(), 0..300), body_extra in 0u32..64,
        shrink in any::<bool>(),
    ) {
        let mut p = packet(op, &extras, &key, &[], 0, 0);
        let body = (extras.len() + key.len()) as u32;
        let body = if shrink { body.saturating_sub(body_extra) } else { body + body_extra };
        p[8..12].copy_from_slice(&body.to_be_bytes());
        let (d, h) = frame(&p).expect("header, extras and key are all there");
        if h.key_len as u32 + h.extras_len as u32 > h.body_len {
            prop_assert_eq!(d, Decoded::BadBodyLength);
        } else if key.len() > 250 {
            prop_assert_eq!(d, Decoded::InvalidArguments);
        }
        // Whatever was accepted names only buffered bytes.
        if let Decoded::Request(
            Request::Get { key: k, .. }
            | Request::Delete { key: k, .. }
            | Request::Touch { key: k, .. }
            | Request::GetAndTouch { key: k, .. }
            | Request::Arith { key: k, .. }
            | Request::Store { key: k, .. }
            | Request::Concat { key: k, .. },
        ) = d
        {
            prop_assert!(!k.is_empty() && k.len() <= 250);
            prop_assert_eq!(k, &key[..]);
        }
    }

    #[test]
    fn set_requests_roundtrip(
        k in key(), flags in any::<u32>(), exptime in any::<u32>(),
        value in proptest::collection::vec(any::<u8>(), 0..300),
        quiet in any::<bool>(), opaque in any::<u32>(), cas in any::<u64>(),
    ) {
        let mut extras = flags.to_be_bytes().to_vec();
        extras.extend_from_slice(&exptime.to_be_bytes());
        let op = if quiet { opcode::SETQ } else { opcode::SET };
        let p = packet(op, &extras, &k, &value, opaque, cas);
        let (d, h) = frame(&p).unwrap();
        prop_assert_eq!((h.opaque, h.cas, h.packet_len()), (opaque, cas, p.len()));
        prop_assert_eq!(d, Decoded::Request(Request::Store {
            mode: StoreMode::Set, key: &k, flags, exptime, value_len: value.len() as u32, quiet,
        }));
        prop_assert_eq!(&p[h.prefix_len()..h.packet_len()], &value[..]);
    }

    #[test]
    fn framing_is_split_independent(keys in proptest::collection::vec(key(), 1..20), cut in any::<prop::sample::Index>()) {
        let stream: Vec<u8> = keys
            .iter()
            .enumerate()
            .flat_map(|(i, k)| packet(opcode::GETK, &[], k, &[], i as u32, 0))
            .collect();
        let cut = cut.index(stream.len() + 1);
        // Whatever prefix arrived, every request framed is one of those sent, in order.
        let mut buf = &stream[..cut];
        let mut n = 0;
        while let Some((d, h)) = frame(buf) {
            prop_assert_eq!(h.opaque, n as u32);
            prop_assert_eq!(d, Decoded::Request(Request::Get { key: &keys[n], quiet: false, with_key: true }));
            buf = &buf[h.packet_len()..];
            n += 1;
        }
        prop_assert!(n <= keys.len());
        if cut == stream.len() {
            prop_assert_eq!(n, keys.len());
        }
    }

    #[test]
    fn responses_roundtrip(
        k in proptest::collection::vec(any::<u8>(), 0..250),
        v in proptest::collection::vec(any::<u8>(), 0..500),
        flags in any::<u32>(), opaque in any::<u32>(), cas in any::<u64>(), code in any::<u16>(),
    ) {
        let mut out = Vec::new();
        put_hit(&mut out, opcode::GETK, opaque, cas, flags, Some(&k), &v);
        put_error(&mut out, opcode::GET, code, opaque);
        put_stat(&mut out, opaque, &k, &v);
        let (r, a) = parse_response(&out).unwrap();
        prop_assert_eq!((r.opcode, r.status, r.opaque, r.cas), (opcode::GETK, status::NO_ERROR, opaque, cas));
        prop_assert_eq!((r.extras, r.key, r.value), (&flags.to_be_bytes()[..], &k[..], &v[..]));
        let (r, b) = parse_response(&out[a..]).unwrap();
        prop_assert_eq!((r.status, r.value, r.cas), (code, status_message(code).as_bytes(), 0));
        let (r, c) = parse_response(&out[a + b..]).unwrap();
        prop_assert_eq!((r.opcode, r.key, r.value), (opcode::STAT, &k[..], &v[..]));
        prop_assert_eq!(a + b + c, out.len());
        prop_assert!(parse_response(&out[..a - 1]).is_none());
    }
}
