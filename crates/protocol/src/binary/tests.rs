//! Unit tests of the binary protocol's framing, checks and packets.

use super::*;

fn request(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    RequestHeader {
        magic: REQUEST_MAGIC,
        opcode: op,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque: 0xdead_beef,
        cas: 7,
    }
    .encode(&mut out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

fn decode_packet(p: &[u8]) -> Decoded<'_> {
    match scan_request(p) {
        Scan::Ready(h) => {
            let e = 24 + usize::from(h.extras_len);
            decode_owned(&h, &p[24..e], &p[e..h.prefix_len()])
        }
        other => panic!("{other:?}"),
    }
}

fn decode_owned<'a>(h: &RequestHeader, e: &'a [u8], k: &'a [u8]) -> Decoded<'a> {
    decode(h, e, k)
}

#[test]
fn header_roundtrip_and_framing() {
    let p = request(opcode::SET, &[0, 0, 0, 1, 0, 0, 0, 2], b"key", b"value");
    let h = RequestHeader::parse(&p).unwrap();
    assert_eq!(
        (h.opcode, h.key_len, h.extras_len, h.body_len),
        (1, 3, 8, 16)
    );
    assert_eq!(
        (h.opaque, h.cas, h.prefix_len(), h.value_len()),
        (0xdead_beef, 7, 35, 5)
    );
    assert_eq!(scan_request(&p[..23]), Scan::Incomplete { need: 24 });
    assert_eq!(scan_request(&p[..34]), Scan::Incomplete { need: 35 });
    assert_eq!(scan_request(&p[..35]), Scan::Ready(h));
    let mut bad = p.clone();
    bad[0] = 0x81;
    assert_eq!(scan_request(&bad), Scan::BadMagic(0x81));
    assert_eq!(
        decode_packet(&p),
        Decoded::Request(Request::Store {
            mode: StoreMode::Set,
            key: b"key",
            flags: 1,
            exptime: 2,
            value_len: 5,
            quiet: false
        })
    );
}

#[test]
fn memcached_validation() {
    use Decoded::*;
    assert_eq!(
        decode_packet(&request(opcode::GET, &[], b"", b"")),
        InvalidArguments
    );
    assert_eq!(
        decode_packet(&request(opcode::GET, &[], b"k", b"v")),
        InvalidArguments
    );
    assert_eq!(
        decode_packet(&request(opcode::GETKQ, &[], b"k", b"")),
        Request(super::Request::Get {
            key: b"k",
            quiet: true,
            with_key: true
        })
    );
    assert_eq!(
        decode_packet(&request(opcode::SET, &[0; 4], b"k", b"v")),
        InvalidArguments
    );
    assert_eq!(
        decode_packet(&request(opcode::SET, &[0; 8], b"", b"v")),
        InvalidArguments
    );
    assert_eq!(
        decode_packet(&request(opcode::NOOP, &[1], b"", b"")),
        InvalidArguments
    );
    assert_eq!(
        decode_packet(&request(opcode::FLUSH, &[0; 8], b"", b"")),
        InvalidArguments
    );
    assert_eq!(
        decode_packet(&request(opcode::FLUSHQ, &[0, 0, 0, 9], b"", b"")),
        Request(super::Request::Flush {
            delay: 9,
            quiet: true
        })
    );
    assert_eq!(
        decode_packet(&request(opcode::TOUCH, &[], b"k", b"")),
        InvalidArguments
    );
    assert_eq!(
        decode_packet(&request(opcode::INCREMENT, &[0; 20], b"k", b"x")),
        InvalidArguments
    );
    assert_eq!(
        decode_packet(&request(opcode::VERBOSITY, &[0; 4], b"", b"")),
        UnknownCommand
    );
    assert_eq!(decode_packet(&request(0x38, &[], b"", b"")), UnknownCommand);
    assert_eq!(
        decode_packet(&request(0x50, &[], &[b'x'; 251], b"")),
        InvalidArguments
    );
    // STAT ignores body bytes past the key.
    assert_eq!(
        decode_packet(&request(opcode::STAT, &[], b"items", b"junk")),
        Request(super::Request::Stat { group: b"items" })
    );
    let mut p = request(opcode::GET, &[], b"abc", b"");
    p[11] = 2; // body shorter than the key
    assert_eq!(decode_packet(&p), BadBodyLength);
}

#[test]
fn arith_extras() {
    let mut extras = Vec::new();
    extras.extend_from_slice(&5u64.to_be_bytes());
    extras.extend_from_slice(&10u64.to_be_bytes());
    extras.extend_from_slice(&ARITH_DO_NOT_CREATE.to_be_bytes());
    assert_eq!(
        decode_packet(&request(opcode::DECREMENTQ, &extras, b"c", b"")),
        Decoded::Request(Request::Arith {
            incr: false,
            key: b"c",
            delta: 5,
            initial: 10,
            exptime: ARITH_DO_NOT_CREATE,
            quiet: true
        })
    );
}

#[test]
fn responses() {
    let mut out = Vec::new();
    put_error(&mut out, opcode::GET, status::KEY_NOT_FOUND, 9);
    put_hit(&mut out, opcode::GETK, 1, 42, 0xdead_beef, Some(b"k"), b"v");
    put_stat(&mut out, 3, b"", b"");
    let (r, n) = parse_response(&out).unwrap();
    assert_eq!(
        (r.opcode, r.status, r.opaque, r.value),
        (0, 1, 9, &b"Not found"[..])
    );
    let (r, m) = parse_response(&out[n..]).unwrap();
    assert_eq!(r.extras, &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!((r.key, r.value, r.cas), (&b"k"[..], &b"v"[..], 42));
    let (r, k) = parse_response(&out[n + m..]).unwrap();
    assert_eq!((r.opcode, k), (opcode::STAT, 24));
    assert_eq!(
        &out[..24],
        &[0x81, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}
