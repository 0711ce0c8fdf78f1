//! Replication's private commands (see `replication`). `replica_auth` and
//! `replica_proof` are the exchange by which a connection proves it is a
//! peer (`replication::auth`); `replica_link`, `replica_follow` and
//! `replica_synced` run only on a connection that did, and are answered
//! everywhere else as memcached answers a command it does not know
//! (`ERROR`, the connection unchanged). A connection proves it is a peer
//! by the exchange (with `--replication-secret`) or by a TLS client
//! certificate verified against `ssl_ca_cert`. Without a secret the
//! exchange's commands are unknown too.
//!
//! - `replica_link <name>` marks this connection as a peer's target link
//!   (its writes are applied, not forwarded) and is answered `OK`;
//! - `replica_follow [seconds]` turns this connection into a feed of this
//!   server's writes (after a full copy, for that long; default
//!   `--replica-follow-seconds`); refused under `-X` as a dump is, since
//!   its full copy is one;
//! - `replica_copy on` says the `ms`/`md` that follow are a full copy's
//!   items (the first opens a copy on this connection), `replica_copy off`
//!   that they are writes again (`replication::fresh_writes`: a copy's
//!   item never replaces a write made since the copy began); nothing is
//!   answered;
//! - `replica_synced` ends a full copy (on this server's follow link, the
//!   catch-up pull's);
//! - `replica_targets <HOST:PORT>[,<HOST:PORT>...]` (or `-` for none)
//!   makes those this server's replication targets, as a reload of
//!   `--replicate-to` does (`replication::targets`), until the next
//!   SIGHUP re-reads the config file: `OK`, `CLIENT_ERROR <why>` for a
//!   bad list, `SERVER_ERROR <why>` when refused.
//!
//! All but `replica_targets` change nothing but the connection that sends
//! them.

use osmium_protocol::request::Tokens;

use super::{ConnView, Done, Next};
use crate::compose::output::Output;
use crate::compose::text;
use crate::context::WorkerCtx;
use crate::replication::auth::Proof;
use crate::replication::{COPY_ITEMS, COPY_OPEN, PEER_LINK, PEER_NONE};

pub fn command(
    ctx: &WorkerCtx,
    conn: ConnView,
    tokens: Tokens<'_>,
    noreply: bool,
    out: &mut Output,
) -> Done {
    let repl = &ctx.shared.replication;
    match tokens.get(0) {
        b"replica_auth" | b"replica_proof" => {
            // Without a secret the exchange does not exist (a verified TLS
            // client certificate is the only proof then).
            let Some(secret) = repl.secret() else {
                return unknown(tokens, noreply, out);
            };
            exchange(ctx, conn, secret, tokens, out);
        }
        _ if !repl.is_peer(&ctx.peer_auth.borrow()) => return unknown(tokens, noreply, out),
        b"replica_link" => {
            if ctx.peer.get() == PEER_NONE {
                ctx.peer.set(PEER_LINK);
            }
            text::line(out, false, "OK");
        }
        // A follow link starts with a full copy: a dump, which -X forbids
        // (memcached's answer to `lru_crawler metadump` under -X).
        b"replica_follow" if !ctx.shared.settings.dump_enabled => {
            text::line(out, false, "ERROR metadump not allowed");
        }
        b"replica_follow" if ctx.peer.get() == PEER_NONE => {
            let secs = std::str::from_utf8(tokens.get(1)).ok();
            let secs = secs.and_then(|s| s.parse().ok());
            ctx.handover.set(Some(
                secs.unwrap_or(ctx.shared.settings.replica_follow_seconds),
            ));
        }
        b"replica_follow" => text::line(out, false, "CLIENT_ERROR already a replication link"),
        b"replica_copy" => copy_mode(ctx, tokens.get(1) == b"on"),
        b"replica_synced" => {
            copy_ended(ctx);
            ctx.shared.replication.synced_from(ctx.peer.get());
        }
        b"replica_targets" => set_targets(ctx, tokens, out),
        _ => return unknown(tokens, noreply, out),
    }
    Done::CONTINUE
}

/// `replica_copy on|off`: what the `ms`/`md` after it are.
fn copy_mode(ctx: &WorkerCtx, items: bool) {
    let state = ctx.copy.get();
    if items && state & COPY_OPEN == 0 {
        ctx.shared.replication.copy_started();
    }
    ctx.copy.set(if items {
        COPY_OPEN | COPY_ITEMS
    } else {
        state & !COPY_ITEMS
    });
}

/// The connection's full copy ended (`replica_synced`).
fn copy_ended(ctx: &WorkerCtx) {
    if ctx.copy.replace(0) & COPY_OPEN != 0 {
        ctx.shared.replication.copy_ended();
    }
}

/// `replica_targets <HOST:PORT>[,<HOST:PORT>...]|-`.
fn set_targets(ctx: &WorkerCtx, tokens: Tokens<'_>, out: &mut Output) {
    let list = match (tokens.count(), std::str::from_utf8(tokens.get(1))) {
        (2, Ok(list)) => list,
        _ => return text::line(out, false, "CLIENT_ERROR bad command line format"),
    };
    let new: Vec<String> = if list == "-" {
        Vec::new()
    } else {
        list.split(',').map(str::to_string).collect()
    };
    if let Some(e) = new
        .iter()
        .find_map(|t| crate::settings::check_target(t).err())
    {
        return text::line(out, false, &format!("CLIENT_ERROR {e}"));
    }
    if new.len() > crate::settings::MAX_REPLICA_TARGETS {
        let e = format!(
            "CLIENT_ERROR at most {} targets",
            crate::settings::MAX_REPLICA_TARGETS
        );
        return text::line(out, false, &e);
    }
    match ctx.shared.replication.set_targets(&new, "command") {
        Ok(_) => text::line(out, false, "OK"),
        Err(e) => text::line(out, false, &format!("SERVER_ERROR {e}")),
    }
}

/// What memcached does with a command it does not know (the parser's
/// `unknown`): a line ending in an `HTTP/` token closes the connection,
/// anything else is answered `ERROR` (nothing with `noreply`).
fn unknown(tokens: Tokens<'_>, noreply: bool, out: &mut Output) -> Done {
    let n = tokens.count();
    if n > 1 && tokens.get(n - 1).starts_with(b"HTTP/") {
        return Done::then(Next::CloseNow);
    }
    text::line(out, noreply, "ERROR");
    Done::CONTINUE
}

/// `replica_auth` and `replica_proof`: the secret's challenge-response
/// (`replication::auth`).
fn exchange(
    ctx: &WorkerCtx,
    conn: ConnView,
    secret: &crate::replication::auth::Secret,
    tokens: Tokens<'_>,
    out: &mut Output,
) {
    let repl = &ctx.shared.replication;
    if tokens.get(0) == b"replica_auth" {
        let answer = if tokens.count() == 2 {
            ctx.peer_auth.borrow_mut().challenge(secret, tokens.get(1))
        } else {
            Ok(None)
        };
        match answer {
            Ok(Some(challenge)) => text::line(out, false, &challenge),
            Ok(None) => text::line(out, false, "CLIENT_ERROR bad command line format"),
            Err(_) => text::line(out, false, "SERVER_ERROR out of random bytes"),
        }
        return;
    }
    let failed = match ctx.peer_auth.borrow_mut().prove(secret, tokens.get(1)) {
        Proof::Accepted => return text::line(out, false, "OK"),
        Proof::NoChallenge => "replica_proof without replica_auth",
        Proof::Wrong => "wrong replica_proof",
    };
    repl.auth_failed(&format!(
        "{failed} from {}",
        ctx.shared.conns.remote(conn.fd)
    ));
    text::line(out, false, "ERROR");
}
