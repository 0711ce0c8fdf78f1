//! The client-side codec: everything a memcached client, or an
//! intermediary between clients and servers, needs to speak the wire
//! protocols without parsing them for execution. All of osmium's
//! hand-written memcached framing lives here (the server's own parser is
//! [`crate::ascii`] and [`crate::binary`]); osmium-proxy, replication,
//! osmium-bench and osmium-tool call it.
//!
//! * [`frame`]: a request a client sent: complete or not, its length, key,
//!   data block, `noreply`/`q`/quiet opcode, and what a proxy does with it;
//! * [`peek`]: the keys of waiting requests without framing them whole
//!   (the server's prefetch, on its GET path);
//! * [`encode`]: text, meta and binary requests written into a buffer;
//! * [`reply`]: a reply's length given what was asked, what it says, and
//!   the values, meta flags and stats it carries.

pub mod binary_head;
pub mod encode;
pub mod frame;
pub mod peek;
pub mod reply;

#[cfg(test)]
mod props;
