//! Properties of the client-side codec: every request the encoders write
//! frames back whole, with its key, as one forwarded request; framing
//! arbitrary bytes never panics and never takes more than the buffer;
//! framing is incremental (a buffer cut anywhere frames the same requests,
//! once their bytes have arrived); replies likewise.

use proptest::prelude::*;

use super::encode;
use super::frame::{frame, Action, Quiet, KEY_MAX};
use super::reply::{frame_reply, reply_len, Expect, Outcome};

/// One request shape, as the encoders write it.
#[derive(Clone, Debug)]
enum Shape {
    Get(Vec<u8>),
    Gets(Vec<u8>),
    Set(Vec<u8>, u32, i64, Vec<u8>, bool),
    Cas(Vec<u8>, u64, Vec<u8>),
    Keyed(&'static [u8], Vec<u8>, Option<i64>, bool),
    Mg(Vec<u8>, bool, bool),
    Ms(Vec<u8>, Vec<u8>, u32, bool),
    Md(Vec<u8>, bool),
    BinGet(Vec<u8>, u32),
    BinSet(Vec<u8>, Vec<u8>, u32),
}

fn text_key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0x21u8..0x7f, 1..=KEY_MAX)
}

/// Any bytes: base64-encoded when a text line cannot carry them, so no
/// longer than a 250-character base64 token holds.
fn any_key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 1..=KEY_MAX / 4 * 3)
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..300)
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        text_key().prop_map(Shape::Get),
        text_key().prop_map(Shape::Gets),
        (
            text_key(),
            any::<u32>(),
            -1i64..1_000_000,
            data(),
            any::<bool>()
        )
            .prop_map(|(k, f, e, d, n)| Shape::Set(k, f, e, d, n)),
        (text_key(), any::<u64>(), data()).prop_map(|(k, c, d)| Shape::Cas(k, c, d)),
        (
            prop_oneof![
                Just(&b"delete"[..]),
                Just(&b"incr"[..]),
                Just(&b"decr"[..]),
                Just(&b"touch"[..])
            ],
            text_key(),
            any::<bool>()
        )
            .prop_map(|(c, k, n)| {
                let arg = (c != b"delete").then_some(1);
                Shape::Keyed(c, k, arg, n)
            }),
        (any_key(), any::<bool>(), any::<bool>()).prop_map(|(k, b, q)| Shape::Mg(k, b, q)),
        (any_key(), data(), any::<u32>(), any::<bool>())
            .prop_map(|(k, d, f, q)| Shape::Ms(k, d, f, q)),
        (any_key(), any::<bool>()).prop_map(|(k, q)| Shape::Md(k, q)),
        (any_key(), any::<u32>()).prop_map(|(k, o)| Shape::BinGet(k, o)),
        (any_key(), data(), any::<u32>()).prop_map(|(k, d, o)| Shape::BinSet(k, d, o)),
    ]
}

impl Shape {
    fn binary(&self) -> bool {
        matches!(self, Shape::BinGet(..) | Shape::BinSet(..))
    }

    fn key(&self) -> &[u8] {
        match self {
            Shape::Get(k) | Shape::Gets(k) | Shape::Set(k, ..) | Shape::Cas(k, ..) => k,
            Shape::Keyed(_, k, ..) | Shape::Mg(k, ..) | Shape::Ms(k, ..) | Shape::Md(k, _) => k,
            Shape::BinGet(k, _) | Shape::BinSet(k, ..) => k,
        }
    }

    /// Whether the client asked not to see (some of) the reply.
    fn quiet(&self) -> bool {
        match self {
            Shape::Set(.., n) | Shape::Keyed(.., n) => *n,
            Shape::Mg(_, _, q) | Shape::Ms(.., q) | Shape::Md(_, q) => *q,
            _ => false,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Shape::Get(k) => encode::get(out, b"get", [&k[..]]),
            Shape::Gets(k) => encode::get(out, b"gets", [&k[..]]),
            Shape::Set(k, f, e, d, n) => encode::set(out, k, *f, *e, d, *n),
            Shape::Cas(k, c, d) => encode::storage(out, b"cas", k, 0, 0, d, Some(*c), false),
            Shape::Keyed(c, k, a, n) => encode::keyed(out, c, k, *a, *n),
            Shape::Mg(k, b, q) => {
                let m = encode::meta(out, b"mg", k, None, *b).flag(b'v').flag(b'f');
                if *q { m.flag(b'q') } else { m }.end()
            }
            Shape::Ms(k, d, f, q) => {
                let m = encode::meta(out, b"ms", k, Some(d.len()), false).num(b'F', *f);
                if *q { m.flag(b'q') } else { m }.data(d)
            }
            Shape::Md(k, q) => {
                let m = encode::meta(out, b"md", k, None, false);
                if *q { m.flag(b'q') } else { m }.end()
            }
            Shape::BinGet(k, o) => encode::binary(out, 0x00, k, &[], &[], *o, 0),
            Shape::BinSet(k, d, o) => {
                let extras = encode::binary_store_extras(1, 0);
                encode::binary(out, 0x01, k, &extras, d, *o, 0)
            }
        }
    }
}

/// Where each request framed in `buf` ends, up to the first fatal one;
/// panics on a frame that is empty or longer than what is left.
fn ends(buf: &[u8], binary: bool) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(f) = frame(&buf[at..], binary) {
        assert!(f.len > 0 && at + f.len <= buf.len());
        if matches!(f.action, Action::Fatal) {
            break;
        }
        at += f.len;
        out.push(at);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encoded_requests_frame_back_whole(s in shape()) {
        let mut wire = Vec::new();
        s.encode(&mut wire);
        let f = frame(&wire, s.binary()).expect("complete");
        prop_assert_eq!(f.len, wire.len());
        let Action::Forward { key, wire: fwd, quiet, .. } = f.action else {
            return Err(TestCaseError::fail(format!("{:?}", f.action)));
        };
        prop_assert_eq!(&*key, s.key());
        prop_assert_eq!(quiet != Quiet::No, s.quiet());
        if !s.quiet() {
            prop_assert_eq!(&*fwd, &wire[..], "forwarded as it came");
        }
        // What is forwarded frames again, unchanged, with nothing hidden.
        let again = frame(&fwd, s.binary()).expect("whole");
        prop_assert_eq!(again.len, fwd.len());
        let Action::Forward { wire: w2, quiet: q2, .. } = again.action else {
            return Err(TestCaseError::fail("forwarded wire does not forward"));
        };
        prop_assert_eq!(&*w2, &*fwd);
        prop_assert_eq!(q2, Quiet::No);
    }

    #[test]
    fn framing_is_incremental(shapes in proptest::collection::vec(shape(), 1..5), cut in any::<prop::sample::Index>()) {
        let binary = shapes[0].binary();
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        for s in shapes.iter().filter(|s| s.binary() == binary) {
            s.encode(&mut buf);
            ends.push(buf.len());
        }
        let cut = cut.index(buf.len() + 1);
        let mut at = 0;
        for end in ends {
            match frame(&buf[at..cut], binary) {
                Some(f) => {
                    prop_assert_eq!(at + f.len, end);
                    at = end;
                }
                None => {
                    prop_assert!(end > cut, "a complete request is framed");
                    break;
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_frame_within_the_buffer(bytes in proptest::collection::vec(any::<u8>(), 0..600), binary in any::<bool>(), cut in any::<prop::sample::Index>()) {
        let whole = ends(&bytes, binary);
        let cut = cut.index(bytes.len() + 1);
        let arrived: Vec<usize> = whole.iter().copied().take_while(|&e| e <= cut).collect();
        prop_assert_eq!(ends(&bytes[..cut], binary), arrived);
        for expect in [Expect::Line, Expect::Values, Expect::MetaValue, Expect::Binary, Expect::Stats] {
            if let Ok(Some(n)) = reply_len(&bytes, expect) {
                prop_assert!(n > 0 && n <= bytes.len());
            }
        }
    }

    #[test]
    fn replies_frame_incrementally(values in proptest::collection::vec((text_key(), data()), 0..4), cut in any::<prop::sample::Index>()) {
        let mut reply = Vec::new();
        for (k, v) in &values {
            crate::encode::value_header(&mut reply, k, 0, v.len(), None);
            reply.extend_from_slice(v);
            reply.extend_from_slice(b"\r\n");
        }
        reply.extend_from_slice(b"END\r\n");
        let whole = frame_reply(&reply, Expect::Values).unwrap().unwrap();
        prop_assert_eq!(whole.0, reply.len());
        prop_assert_eq!(whole.1, if values.is_empty() { Outcome::Miss } else { Outcome::Value });
        let blocks = super::reply::values(&reply).unwrap();
        prop_assert_eq!(blocks.len(), values.len());
        let cut = cut.index(reply.len());
        prop_assert_eq!(reply_len(&reply[..cut], Expect::Values), Ok(None));
    }
}
