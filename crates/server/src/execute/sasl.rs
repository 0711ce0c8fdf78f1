//! Binary-protocol SASL (`-S`): LIST MECHS and AUTH/STEP, answered as
//! memcached with Cyrus SASL's PLAIN answers them (see `auth` for the
//! password check). A connection's exchange state lives in its session.

use osmium_protocol::binary::{status, SASL_MECHANISM_MAX_LENGTH};
use osmium_protocol::request::{BinaryReply, Reply};

use super::Done;
use crate::auth::{self, SaslOutcome};
use crate::compose::binary;
use crate::compose::output::Output;
use crate::context::WorkerCtx;

pub use crate::auth::SaslState;

pub fn list_mechs(ctx: &WorkerCtx, reply: &Reply<'_>, out: &mut Output) -> Done {
    let Reply::Binary(r) = reply else {
        return Done::CONTINUE;
    };
    if !ctx.shared.auth.sasl_enabled() {
        binary::error(out, r, status::UNKNOWN_COMMAND);
        return Done::FLUSH;
    }
    binary::always(out, r, 0, auth::SASL_MECHANISMS);
    Done::CONTINUE
}

/// Before an AUTH/STEP's data arrives: false when it was answered and its
/// data must be swallowed (SASL off, a mechanism name too long, data that
/// could never fit in an item, where memcached reads it).
pub fn admit_sasl(
    ctx: &WorkerCtx,
    mechanism: &[u8],
    value_len: usize,
    r: &BinaryReply,
    out: &mut Output,
) -> bool {
    let code = if !ctx.shared.auth.sasl_enabled() {
        status::UNKNOWN_COMMAND
    } else if mechanism.len() > SASL_MECHANISM_MAX_LENGTH {
        status::INVALID_ARGUMENTS
    } else if ctx.store().too_large(mechanism.len(), 0, value_len) {
        status::OUT_OF_MEMORY
    } else {
        return true;
    };
    binary::error(out, r, code);
    false
}

/// Where a connection's authentication stands.
#[derive(Debug, Default)]
pub struct AuthState {
    pub authenticated: bool,
    pub sasl: SaslState,
}

/// SASL AUTH (`step` false) or STEP, once its data is in.
pub fn execute_sasl(
    ctx: &WorkerCtx,
    step: bool,
    mechanism: &[u8],
    data: &[u8],
    state: &mut AuthState,
    r: &BinaryReply,
    out: &mut Output,
) -> Done {
    let stats = &ctx.stats;
    let outcome = auth::sasl_exchange(
        &ctx.shared.auth,
        &mut state.sasl,
        &mut state.authenticated,
        step,
        mechanism,
        data,
    );
    match outcome {
        SaslOutcome::Authenticated => {
            stats.auth_cmds.incr();
            binary::always(out, r, 0, b"Authenticated");
            Done::CONTINUE
        }
        SaslOutcome::Continue => {
            binary::status_only(out, r, status::AUTH_CONTINUE);
            Done::FLUSH
        }
        SaslOutcome::Failed => {
            stats.auth_cmds.incr();
            stats.auth_errors.incr();
            binary::error(out, r, status::AUTH_ERROR);
            Done::FLUSH
        }
    }
}
