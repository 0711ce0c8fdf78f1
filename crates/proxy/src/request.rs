//! Client request framing, as osmium-proxy uses it: the next complete
//! request in a client's read buffer, text, meta or binary, turned into
//! what the proxy does with it ([`Action`]). The framer is the shared
//! client-side codec's (`osmium_protocol::client::frame`); this module
//! keeps the proxy's names for it.

pub use osmium_protocol::client::frame::{
    binary_reply, frame, is_plain_read, Action, Framed, Quiet, Style, BIN_HEADER, BIN_REQ, BIN_RES,
    KEY_MAX, LINE_MAX, ST_INTERNAL, ST_KEY_ENOENT, ST_NOT_SUPPORTED, ST_UNKNOWN,
};
