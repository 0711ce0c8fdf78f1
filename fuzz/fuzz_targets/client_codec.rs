//! Feeds arbitrary bytes through the client-side codec of osmium-protocol
//! (`osmium_protocol::client`): request framing, incrementally (every
//! prefix frames the same requests as the whole, as far as they have
//! arrived), the prefetch peek, reply framing for every reply shape and
//! what is read out of a reply (outcome, values, meta flags, stats); and
//! requests encoded from the fuzzer's bytes, which must frame back whole.
//! Any panic is a bug, and so is a frame longer than its buffer.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_protocol::client::frame::{frame, Action};
use osmium_protocol::client::reply::{self, Expect};
use osmium_protocol::client::{encode, peek};

/// The frame lengths of `buf`, up to the first that is fatal.
fn lengths(buf: &[u8], binary: bool) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(f) = frame(&buf[at..], binary) {
        assert!(f.len > 0 && at + f.len <= buf.len(), "a frame within the buffer");
        if matches!(f.action, Action::Fatal) {
            break;
        }
        at += f.len;
        out.push(at);
    }
    out
}

fn requests(buf: &[u8], binary: bool, cut: usize) {
    let whole = lengths(buf, binary);
    let cut = cut % (buf.len() + 1);
    // Requests complete within the first `cut` bytes frame alike there.
    let part = lengths(&buf[..cut], binary);
    let arrived: Vec<usize> = whole.iter().copied().take_while(|&end| end <= cut).collect();
    assert_eq!(part, arrived, "a buffer cut at {cut} frames what has arrived");
    let _ = peek::first_key(buf);
    for k in peek::keys(buf) {
        assert!(!k.is_empty());
    }
}

fn replies(buf: &[u8]) {
    for expect in [
        Expect::Line,
        Expect::Values,
        Expect::MetaValue,
        Expect::Binary,
        Expect::Stats,
    ] {
        if let Ok(Some((n, _))) = reply::frame_reply(buf, expect) {
            assert!(n > 0 && n <= buf.len());
            let r = &buf[..n];
            let _ = reply::value(r);
            let _ = reply::meta_value(r).map(|(d, f)| (d.len(), f.count()));
            let _ = reply::meta_flag(r, b'c');
            let _ = reply::binary_value(r);
            let _ = reply::stats(r).count();
            if let Some(blocks) = reply::values(r) {
                for (key, block) in blocks {
                    assert!(block.starts_with(b"VALUE ") && !key.is_empty());
                }
            }
        }
    }
}

/// Requests encoded from the fuzzer's bytes frame back whole, with their key.
fn encoded(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let split = (n as usize).min(rest.len()).min(186);
    let (key, value) = rest.split_at(split);
    if key.is_empty() {
        return;
    }
    let mut out = Vec::new();
    encode::meta(&mut out, b"ms", key, Some(value.len()), false)
        .num(b'F', 1)
        .data(value);
    encode::meta(&mut out, b"mg", key, None, false).flag(b'v').end();
    let mut at = 0;
    for _ in 0..2 {
        let f = frame(&out[at..], false).expect("an encoded request frames whole");
        let Action::Forward { key: k, .. } = f.action else {
            panic!("an encoded request frames as {:?}", f.action);
        };
        assert_eq!(&*k, key);
        at += f.len;
    }
    assert_eq!(at, out.len());
    out.clear();
    encode::binary(&mut out, 0x01, key, &encode::binary_store_extras(0, 0), value, 0, 0);
    let f = frame(&out, true).expect("a binary request frames whole");
    assert_eq!(f.len, out.len());
    assert!(matches!(f.action, Action::Forward { key: ref k, .. } if **k == *key));
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let cut = rest.len() / 2 + usize::from(pick);
    match pick % 4 {
        0 => requests(rest, false, cut),
        1 => {
            let mut bin = vec![0x80];
            bin.extend_from_slice(rest);
            requests(&bin, true, cut)
        }
        2 => replies(rest),
        _ => encoded(rest),
    }
});
