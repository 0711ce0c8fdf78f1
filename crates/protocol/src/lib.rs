//! osmium-protocol: the memcached wire protocols as pure functions, the
//! "parse" stage of osmium's pipeline (transport → session framing →
//! **parse** → execute → compose). It turns bytes into one
//! protocol-neutral request type, with no I/O, no allocation on the parse
//! path and no knowledge of storage; the server's reply encoders use its
//! wire encoders.
//!
//! * [`request`]: the protocol-neutral request every parser produces;
//! * [`ascii`]: memcached 1.6.45's text and meta protocols: framing, the
//!   tokenizer, number rules, every command's validation, streamed
//!   multi-gets;
//! * [`binary`]: the binary protocol: 24-byte header framing, per-opcode
//!   validation, the neutral request, response packets;
//! * [`base64`]: memcached's base64 codec (meta binary keys);
//! * [`client`]: the client-side codec (request framing and encoding,
//!   reply framing) that osmium-proxy, replication, osmium-bench and
//!   osmium-tool share; all memcached framing outside the server's parser
//!   lives there;
//! * [`peek`] (in [`client`]): the keys of waiting requests, for
//!   prefetching before parsing;
//! * [`encode`]: text reply pieces written into an output buffer;
//! * `replication_link` (feature `replication-link`): the replication
//!   links' Noise handshake with a pre-shared key, their transport frames
//!   and a blocking stream of them, and the secret's file and rules (the
//!   one part here that does I/O).

pub mod ascii;
pub mod base64;
pub mod binary;
pub mod client;
pub mod encode;
#[cfg(feature = "replication-link")]
pub mod replication_link;
pub mod request;

pub use client::peek;
