//! Feeds arbitrary bytes to a replication link's receiving side
//! (`osmium_protocol::replication_link::frame::Inbound`), in chunks the
//! fuzzer chooses, and frames the fuzzer's plaintext through a real
//! link's keys with one byte changed (or none): a frame that does not
//! open is an error for good, nothing of it or after it is ever read out;
//! what is read is always a prefix of what was sealed, and all of it when
//! nothing was changed. Any panic is a bug.
#![no_main]
use std::io::{self, Read};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use osmium_protocol::replication_link::handshake::respond_as;
use osmium_protocol::replication_link::{Initiator, Role, Secret, Transport};

/// One handshake's keys, made once: (the sending end's, the receiving end's).
fn keys() -> &'static (Transport, Transport) {
    static KEYS: OnceLock<(Transport, Transport)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let secret = Secret::new(b"0f1e2d3c4b5a69788796a5b4c3d2e1f0").unwrap();
        let (i, hello) = Initiator::start(&secret, Role::TargetLink, None).unwrap();
        let w: Vec<&str> = hello.trim_end().split(' ').collect();
        let (_, answer, responder) =
            respond_as(&secret, w[1].as_bytes(), w[2].as_bytes(), None, &[7; 16]).unwrap();
        (i.finish(&answer).unwrap(), responder)
    })
}

/// A socket that gives `data` in chunks of the sizes `steps` cycles.
struct Chunks<'a> {
    data: &'a [u8],
    steps: &'a [u8],
    n: usize,
}

impl Read for Chunks<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.data.is_empty() {
            return Ok(0);
        }
        let step = self
            .steps
            .get(self.n % self.steps.len().max(1))
            .copied()
            .unwrap_or(255);
        self.n += 1;
        let k = (usize::from(step) * 97 + 1)
            .min(buf.len())
            .min(self.data.len());
        buf[..k].copy_from_slice(&self.data[..k]);
        self.data = &self.data[k..];
        Ok(k)
    }
}

/// Everything readable from `wire`, and whether it ended in an error.
fn read_all(wire: &[u8], steps: &[u8], out_chunk: usize) -> (Vec<u8>, bool) {
    let (_, receiver) = keys();
    let (_, mut inbound) = receiver.clone().split();
    let mut sock = Chunks {
        data: wire,
        steps,
        n: 0,
    };
    let mut got = Vec::new();
    let mut buf = vec![0u8; out_chunk.max(1)];
    loop {
        match inbound.read_from(&mut sock, &mut buf) {
            Ok(0) => return (got, false),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (got, true),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (mode, steps_len, out_chunk) = (
        data[0],
        usize::from(data[1] % 16),
        usize::from(data[2]) * 31,
    );
    let rest = &data[3..];
    let steps = &rest[..steps_len.min(rest.len())];
    let body = &rest[steps.len()..];
    if mode % 2 == 0 {
        // Bytes off the wire as they are: no key, so nothing opens.
        let (got, _) = read_all(body, steps, out_chunk);
        assert!(got.is_empty(), "forged bytes were read out");
        return;
    }
    // Plaintext in pieces (split at 0xff bytes), sealed under the link's keys.
    let (sender, _) = keys();
    let (mut outbound, _) = sender.clone().split();
    let mut plain = Vec::new();
    for piece in body.split(|&b| b == 0xff) {
        outbound.seal(piece).unwrap();
        plain.extend_from_slice(piece);
    }
    let mut wire = Vec::new();
    assert!(outbound.flush_to(&mut wire).unwrap());
    let (got, failed) = read_all(&wire, steps, out_chunk);
    assert_eq!(got, plain);
    assert!(!failed);
    if wire.is_empty() {
        return;
    }
    // One byte changed (every frame carries at least one byte): what is
    // read is a strict prefix, then an error.
    let at = (usize::from(data[2]) * 257 + usize::from(data[1])) % wire.len();
    wire[at] ^= data[0] | 1;
    let (got, failed) = read_all(&wire, steps, out_chunk);
    assert!(failed, "a changed frame was not refused");
    assert!(
        got.len() < plain.len() && plain.starts_with(&got),
        "a changed frame was read out"
    );
});
