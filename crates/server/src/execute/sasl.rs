//! Binary-protocol SASL (`-S`): LIST MECHS and AUTH/STEP, answered as
//! memcached with Cyrus SASL's PLAIN answers them (see `auth` for the
//! password check). A connection's exchange state lives in its session.

use osmium_protocol::binary::SASL_MECHANISM_MAX_LENGTH;
use osmium_protocol::request::{BinaryReply, Reply};

use super::{answer, Done};
use crate::auth::{self, SaslOutcome};
use crate::compose::outcome::{Auth, Outcome};
use crate::compose::replies::Replies;
use crate::context::WorkerCtx;

pub(crate) use crate::auth::SaslState;

/// Has the binary composer say a SASL step (the commands exist only in the
/// binary protocol).
fn say(out: &mut Replies<'_>, r: &BinaryReply, a: Auth) -> Done {
    Done::flush_if(out.say(&Reply::Binary(*r), &Outcome::Auth(a)))
}

pub(crate) fn list_mechs(ctx: &WorkerCtx, reply: &Reply<'_>, out: &mut Replies<'_>) -> Done {
    let step = if ctx.shared.auth.sasl_enabled() {
        Auth::Mechanisms
    } else {
        Auth::Disabled
    };
    answer(out, reply, Outcome::Auth(step))
}

/// Before an AUTH/STEP's data arrives: false when it was answered and its
/// data must be swallowed (SASL off, a mechanism name too long, data that
/// could never fit in an item, where memcached reads it).
pub(crate) fn admit_sasl(
    ctx: &WorkerCtx,
    mechanism: &[u8],
    value_len: usize,
    r: &BinaryReply,
    out: &mut Replies<'_>,
) -> bool {
    let refusal = if !ctx.shared.auth.sasl_enabled() {
        Auth::Disabled
    } else if mechanism.len() > SASL_MECHANISM_MAX_LENGTH {
        Auth::MechanismTooLong
    } else if ctx.store().too_large(mechanism.len(), 0, value_len) {
        Auth::TooLarge
    } else {
        return true;
    };
    let _ = say(out, r, refusal);
    false
}

/// Where a connection's authentication stands.
#[derive(Debug, Default)]
pub(crate) struct AuthState {
    pub authenticated: bool,
    pub sasl: SaslState,
}

/// SASL AUTH (`step` false) or STEP, once its data is in.
pub(crate) fn execute_sasl(
    ctx: &WorkerCtx,
    step: bool,
    mechanism: &[u8],
    data: &[u8],
    state: &mut AuthState,
    r: &BinaryReply,
    out: &mut Replies<'_>,
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
    let said = match outcome {
        SaslOutcome::Authenticated => {
            stats.auth_cmds.incr();
            Auth::Authenticated
        }
        SaslOutcome::Continue => Auth::Continue,
        SaslOutcome::Failed => {
            stats.auth_cmds.incr();
            stats.auth_errors.incr();
            Auth::Failed
        }
    };
    say(out, r, said)
}
