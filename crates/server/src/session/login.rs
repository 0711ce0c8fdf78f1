//! `-Y` text-protocol login, as memcached's `try_read_command_asciiauth`:
//! until a connection authenticates, the only request is
//!
//! ```text
//!   set <any key> <any flags> <any exptime> <size>\r\n<user> <password>\r\n
//! ```
//!
//! answered `STORED` when the pair is in the authfile; every other line gets
//! `CLIENT_ERROR unauthenticated`. memcached's quirks are kept: the line is
//! tokenized without its `\n`, so its last byte is taken for a terminator
//! (a size must be followed by `\r`); a line under 6 bytes or with no `\n`
//! in 2048 bytes closes the connection; and one response object serves a
//! whole batch of pipelined requests, so only the last reply of a batch is
//! sent.

use osmium_protocol::ascii::numbers::tokto_u32;
use osmium_protocol::ascii::tokens::tokenize;

use super::{Flow, Session};
use crate::auth::TEXT_AUTH_MAX_DATA;
use crate::context::WorkerCtx;

/// The shortest login line memcached considers.
const MIN_LINE: usize = 6;

/// Where a connection's login stands.
#[derive(Debug, Default)]
pub(crate) struct Login {
    /// The login line was read; its data block (size + 2 bytes) is awaited.
    pub(super) pending: Option<usize>,
}

/// Runs the session's requests until it authenticates (None: go on with the
/// ordinary text protocol) or must stop (Some(flow)).
pub(crate) fn process(s: &mut Session, ctx: &WorkerCtx) -> Option<Flow> {
    let authfile = ctx.shared.auth.ascii.as_ref()?;
    let mut last_reply: Option<usize> = None;
    let mut done = 0;
    let reply = |s: &mut Session, last: &mut Option<usize>, msg: &[u8]| {
        let out = &mut s.output;
        if let Some(start) = *last {
            out.truncate(start);
        }
        *last = Some(out.len());
        let buf = out.buf();
        buf.extend_from_slice(msg);
        buf.extend_from_slice(b"\r\n");
    };
    loop {
        if s.must_yield(ctx, done) {
            return Some(Flow::Yield);
        }
        let data_len = match s.login.pending {
            Some(n) => n,
            None => {
                let buf = s.input.input();
                if buf.len() < 3 {
                    return Some(Flow::Wait);
                }
                let Some(nl) = memchr::memchr(b'\n', buf) else {
                    return Some(if buf.len() > 2048 {
                        Flow::Close
                    } else {
                        Flow::Wait
                    });
                };
                if nl < MIN_LINE {
                    return Some(Flow::Close);
                }
                let Some(tokens) = tokenize(&buf[..nl], 255) else {
                    return Some(Flow::Close);
                };
                done += 1;
                let size = if tokens.count() >= 5 && buf.starts_with(b"set") {
                    tokto_u32(tokens.get(4))
                } else {
                    None
                };
                s.input.consume(nl + 1);
                let Some(size) = size else {
                    reply(s, &mut last_reply, b"CLIENT_ERROR unauthenticated");
                    continue;
                };
                if u64::from(size) > TEXT_AUTH_MAX_DATA {
                    reply(s, &mut last_reply, b"CLIENT_ERROR auth token too long");
                    continue;
                }
                let n = size as usize + 2;
                s.login.pending = Some(n);
                n
            }
        };
        if s.input.len() < data_len {
            s.need = data_len;
            return Some(Flow::Wait);
        }
        s.need = 0;
        s.login.pending = None;
        let data = &s.input.input()[..data_len];
        let msg: &[u8] = if !data.ends_with(b"\r\n") {
            b"CLIENT_ERROR bad command line termination"
        } else {
            match memchr::memchr(b' ', data) {
                None => b"CLIENT_ERROR bad authentication token format",
                Some(mid) => {
                    let user = &data[..mid];
                    let pass = &data[mid + 1..data_len - 2];
                    ctx.stats.auth_cmds.incr();
                    if authfile.check(user, pass) {
                        s.auth.authenticated = true;
                        b"STORED"
                    } else {
                        ctx.stats.auth_errors.incr();
                        b"CLIENT_ERROR authentication failure"
                    }
                }
            }
        };
        s.input.consume(data_len);
        reply(s, &mut last_reply, msg);
        if s.auth.authenticated {
            return None;
        }
    }
}
