//! Server reply framing, as osmium-proxy uses it: how long the reply at
//! the front of a server connection's read buffer is, for what the request
//! expects ([`Expect`]); the pieces of a text get's reply a multi-key get
//! is merged from; a stat of a probe's `stats` reply. The framer is the
//! shared client-side codec's (`osmium_protocol::client::reply`).

pub use osmium_protocol::client::reply::{reply_len, stat, values, Desync, Expect};
