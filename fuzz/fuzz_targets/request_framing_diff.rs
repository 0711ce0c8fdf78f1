//! A request smuggling check: the same bytes read by the server's request
//! parser (`ascii::frame`, `parse_line` and the data block after a storage
//! line) and by osmium-proxy's request framer (`client::frame::frame`),
//! request by request, must agree on where each request ends (or that
//! more is needed), on whether the client gets a reply, and, for requests
//! both accept, on the command and its keys; each request the proxy
//! forwards must be, to a server, exactly one whole request with nothing
//! hidden. The rules, and the only differences allowed, are written once
//! in `crates/protocol/tests/framing_diff/mod.rs` (shared with the
//! `request_framing_diff` proptest, which runs under `cargo test`).
//!
//! The input's first two bytes pick a cut point: the stream is checked
//! whole and cut there, and the cut stream must read as the whole one's
//! first requests (a request cut short waits; it is never taken for
//! another).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/protocol/tests/framing_diff/mod.rs"]
mod framing_diff;

fuzz_target!(|data: &[u8]| {
    let (cut, stream) = match data {
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
        _ => return,
    };
    if let Err(disagreement) = framing_diff::check(stream, cut % (stream.len() + 1)) {
        panic!("{disagreement}");
    }
});
