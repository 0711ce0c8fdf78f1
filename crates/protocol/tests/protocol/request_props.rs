//! Properties of the client-side codec's request framing (what
//! osmium-proxy forwards), over generated streams of well-formed text and
//! meta requests (with and without `noreply` / `q`):
//! a stream frames into exactly its requests, each forwarded as itself
//! minus what hides its reply, which frames again as one request; any
//! prefix of the stream frames into the requests it holds whole and
//! nothing more (a request cut short waits, it is never forwarded in
//! part).

use osmium_protocol::client::frame::{frame, Action, Quiet};
use proptest::prelude::*;

/// One generated request: its bytes, what the proxy must forward, and
/// whether the client asked not to see the reply.
#[derive(Clone, Debug)]
struct Req {
    bytes: Vec<u8>,
    /// The wire expected (None: not a single-key forward).
    wire: Option<Vec<u8>>,
    hidden: bool,
}

fn key() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_:.-]{1,40}"
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    // Values may hold anything, line ends and command text included.
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        Just(b"\r\nget x\r\nset y 0 0 1\r\n".to_vec()),
    ]
}

fn request() -> impl Strategy<Value = Req> {
    let storage = (
        prop_oneof![
            Just("set"),
            Just("add"),
            Just("replace"),
            Just("append"),
            Just("prepend")
        ],
        key(),
        any::<u16>(),
        0u32..100_000,
        value(),
        any::<bool>(),
    )
        .prop_map(|(cmd, k, flags, exp, v, noreply)| {
            let head = format!("{cmd} {k} {flags} {exp} {}", v.len());
            let mut bytes = head.clone().into_bytes();
            if noreply {
                bytes.extend_from_slice(b" noreply");
            }
            bytes.extend_from_slice(b"\r\n");
            bytes.extend_from_slice(&v);
            bytes.extend_from_slice(b"\r\n");
            let mut wire = format!("{head}\r\n").into_bytes();
            wire.extend_from_slice(&v);
            wire.extend_from_slice(b"\r\n");
            Req {
                bytes,
                wire: Some(wire),
                hidden: noreply,
            }
        });
    let keyed = (
        prop_oneof![
            Just("delete"),
            Just("incr"),
            Just("decr"),
            Just("touch"),
            Just("get"),
            Just("gets")
        ],
        key(),
        0u32..1000,
        any::<bool>(),
    )
        .prop_map(|(cmd, k, n, noreply)| {
            let head = match cmd {
                "delete" | "get" | "gets" => format!("{cmd} {k}"),
                _ => format!("{cmd} {k} {n}"),
            };
            let noreply = noreply && !cmd.starts_with("get");
            let tail = if noreply { " noreply" } else { "" };
            Req {
                bytes: format!("{head}{tail}\r\n").into_bytes(),
                wire: Some(format!("{head}\r\n").into_bytes()),
                hidden: noreply,
            }
        });
    let meta = (
        prop_oneof![Just("mg"), Just("md"), Just("ma")],
        key(),
        prop_oneof![Just(""), Just(" v"), Just(" v t f"), Just(" N30 T10")],
        any::<bool>(),
    )
        .prop_map(|(cmd, k, flags, q)| {
            let flags = if cmd == "mg" { flags } else { "" };
            let quiet = if q { " q" } else { "" };
            Req {
                bytes: format!("{cmd} {k}{flags}{quiet}\r\n").into_bytes(),
                wire: Some(format!("{cmd} {k}{flags}\r\n").into_bytes()),
                hidden: q,
            }
        });
    let meta_set = (key(), value(), any::<bool>()).prop_map(|(k, v, q)| {
        let quiet = if q { " q" } else { "" };
        let mut bytes = format!("ms {k} {} T0{quiet}\r\n", v.len()).into_bytes();
        bytes.extend_from_slice(&v);
        bytes.extend_from_slice(b"\r\n");
        let mut wire = format!("ms {k} {} T0\r\n", v.len()).into_bytes();
        wire.extend_from_slice(&v);
        wire.extend_from_slice(b"\r\n");
        Req {
            bytes,
            wire: Some(wire),
            hidden: q,
        }
    });
    let multi = proptest::collection::vec(key(), 2..6).prop_map(|keys| Req {
        bytes: format!("get {}\r\n", keys.join(" ")).into_bytes(),
        wire: None,
        hidden: false,
    });
    prop_oneof![storage, keyed, meta, meta_set, multi]
}

/// Frames `buf` as a connection does; the lengths of the requests framed.
fn frame_all(mut buf: &[u8]) -> Vec<usize> {
    let mut lens = Vec::new();
    while let Some(f) = frame(buf, false) {
        lens.push(f.len);
        buf = &buf[f.len..];
    }
    lens
}

proptest! {
    #[test]
    fn a_stream_frames_into_exactly_its_requests(reqs in proptest::collection::vec(request(), 1..20)) {
        let stream: Vec<u8> = reqs.iter().flat_map(|r| r.bytes.clone()).collect();
        let mut buf = &stream[..];
        for r in &reqs {
            let f = frame(buf, false).expect("a whole request frames");
            prop_assert_eq!(f.len, r.bytes.len());
            match (&f.action, &r.wire) {
                (Action::Forward { wire, quiet, .. }, Some(want)) => {
                    prop_assert_eq!(&**wire, &want[..]);
                    prop_assert_eq!(*quiet != Quiet::No, r.hidden);
                    let again = frame(wire, false).expect("the wire frames");
                    prop_assert_eq!(again.len, wire.len());
                    let is_forward = matches!(again.action, Action::Forward { quiet: Quiet::No, .. });
                    prop_assert!(is_forward);
                }
                (Action::MultiGet { keys, .. }, None) => prop_assert!(keys.len() >= 2),
                (other, _) => prop_assert!(false, "unexpected {:?} for {:?}", other, String::from_utf8_lossy(&r.bytes)),
            }
            buf = &buf[f.len..];
        }
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn a_prefix_frames_only_whole_requests(reqs in proptest::collection::vec(request(), 1..10), cut in any::<proptest::sample::Index>()) {
        let stream: Vec<u8> = reqs.iter().flat_map(|r| r.bytes.clone()).collect();
        let cut = cut.index(stream.len() + 1);
        let whole = frame_all(&stream);
        let part = frame_all(&stream[..cut]);
        // The prefix frames the requests it holds whole, the same ones.
        let mut ends = 0;
        let held = whole.iter().take_while(|&&l| { ends += l; ends <= cut }).count();
        prop_assert_eq!(&part[..], &whole[..held]);
    }
}
