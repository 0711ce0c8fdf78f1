//! A stream session carried across a binary upgrade (`upgrade`'s
//! `ConnRec`): what a session holds between two requests, taken out of it
//! in the old image ([`Session::carry`]) and put into a new one in the
//! image that starts ([`Session::restore`]).
//!
//! Carried: the protocol, the authentication (`-S`: authenticated and
//! where a SASL exchange stands; `-Y`: a login line whose data block is
//! awaited), the bytes of a refused data block still to swallow, `quit`
//! (close once the output is sent), the bytes read and not yet run
//! (complete requests and a partial one: a request is parsed again from
//! its first byte, so a partial one needs nothing else) and the composed
//! replies not yet sent. Not carried (the connection is closed, as a stop
//! closes it): a session reading a large value straight into its item, a
//! huge multi-get streaming its keys, a dump, and one whose input or
//! output is over [`CARRY_LIMIT`].

use osmium_upgrade::ConnRec;

use super::{Protocol, Session};
use crate::auth::SaslState;
use crate::context::WorkerCtx;

/// The most input, and the most output, a carried session holds (the
/// state document stays bounded: at most this much per connection).
pub(crate) const CARRY_LIMIT: usize = 1 << 20;

/// The record's numbering of protocols.
const NEGOTIATING: u8 = 0;
const TEXT: u8 = 1;
const BINARY: u8 = 2;

/// The record's numbering of SASL states.
const SASL_IDLE: u8 = 0;
const SASL_AWAITING_PLAIN: u8 = 1;

impl Session {
    /// The session as a record (its fd, peer and activity left for the
    /// caller to fill), or None when it cannot be carried (module
    /// comment). Its output's values must have been sent (always so
    /// between two runs).
    pub(crate) fn carry(&self) -> Option<ConnRec> {
        if self.incoming.is_some()
            || self.streaming.is_some()
            || self.dump.is_some()
            || self.datagram.is_some()
            || self.output.has_refs()
            || self.input.len() > CARRY_LIMIT
            || self.output.queued() > CARRY_LIMIT
        {
            return None;
        }
        Some(ConnRec {
            fd: self.fd,
            unix: false,
            peer: String::new(),
            protocol: match self.protocol {
                Protocol::Negotiating => NEGOTIATING,
                Protocol::Text => TEXT,
                Protocol::Binary => BINARY,
            },
            authenticated: self.auth.authenticated,
            sasl: match self.auth.sasl {
                SaslState::Idle => SASL_IDLE,
                SaslState::AwaitingPlainResponse => SASL_AWAITING_PLAIN,
            },
            login_pending: self.login.pending.map(|n| n as u32),
            swallow: self.swallow as u64,
            close_after_write: self.close_after_write,
            repl_peer: 0,
            last_active: 0,
            input: self.input.input().to_vec(),
            output: self.output.pending().to_vec(),
            proxy: None,
        })
    }

    /// Puts what `rec` carried into this new session: its input and
    /// output in buffers of the worker's pool. False when it cannot (a
    /// record this build does not know, no buffer): the connection is
    /// then closed.
    pub(crate) fn restore(&mut self, rec: &ConnRec, ctx: &WorkerCtx) -> bool {
        self.protocol = match rec.protocol {
            NEGOTIATING => Protocol::Negotiating,
            TEXT => Protocol::Text,
            BINARY => Protocol::Binary,
            _ => return false,
        };
        self.auth.sasl = match rec.sasl {
            SASL_IDLE => SaslState::Idle,
            SASL_AWAITING_PLAIN => SaslState::AwaitingPlainResponse,
            _ => return false,
        };
        if rec.input.len() > CARRY_LIMIT || rec.output.len() > CARRY_LIMIT {
            return false;
        }
        self.auth.authenticated = rec.authenticated;
        self.login.pending = rec.login_pending.map(|n| n as usize);
        self.swallow = rec.swallow as usize;
        self.close_after_write = rec.close_after_write;
        let mut input = &rec.input[..];
        while !input.is_empty() {
            let Ok(space) = self.input.space(&ctx.pool, input.len()) else {
                return false;
            };
            let n = space.len().min(input.len());
            space[..n].copy_from_slice(&input[..n]);
            self.input.received(n);
            input = &input[n..];
        }
        if !rec.output.is_empty() {
            if self.output.acquire(&ctx.pool).is_err() {
                return false;
            }
            self.output.buf().extend_from_slice(&rec.output);
            self.output.commit();
        }
        true
    }
}
