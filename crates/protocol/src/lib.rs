//! osmium-protocol: the memcached wire protocol as pure functions.
//!
//! This crate is the "request parser" and "response formatter" stages of the
//! pipeline (seed 001): it turns bytes into commands and results into bytes,
//! with no I/O, no allocation on the parse path and no knowledge of storage.
//!
//! * [`ascii`]: memcached 1.6.45's text and meta protocols, parsed into the
//!   protocol-neutral [`request::Request`]; framing and streamed multi-gets;
//! * [`request`]: the protocol-neutral request every parser produces;
//! * [`base64`]: memcached's base64 codec (meta binary keys);
//! * [`text`]: the classic text protocol (get/set/...); request framing,
//!   memcached's tokenizer and its validation order;
//! * [`meta`]: the meta commands (mg/ms/md/ma/mn/me) and memcached's base64;
//! * [`binary`]: the binary protocol: 24-byte header framing, per-opcode
//!   validation, response packets;
//! * [`numbers`]: memcached's `safe_strto*` number parsing, quirks included;
//! * [`peek`]: the first request's key, for prefetching before parsing;
//! * [`encode`]: writing replies into an output buffer.

pub mod ascii;
pub mod base64;
pub mod binary;
pub mod encode;
pub mod meta;
pub mod numbers;
pub mod peek;
pub mod request;
pub mod text;

pub use text::{parse_command, scan_line, Command, Keys, LineScan, StoreMode, StoreRequest};
