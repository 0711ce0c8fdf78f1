//! Replication's private commands (see `replication`; which runs on
//! which connection: `replication::rights`). On a client connection
//! (`PEER_NONE`) all but `replica_hello` are answered as memcached
//! answers a command it does not know (`ERROR`, the connection
//! unchanged), unless, under `-Z` without a secret, its certificate names
//! a peer (`-o replication_peers` / `replication_ca`). Without a secret
//! `replica_hello` is unknown too.
//!
//! - `replica_hello <role> <message 1>` runs the link handshake
//!   (`replication::auth`): `REPLICA_HELLO <message 2>` and the
//!   connection is a peer of that role (on plain TCP, Noise frames from
//!   then on); a hello that fails the handshake closes the connection
//!   (counted in `replica_auth_failures`); a malformed one is `ERROR`;
//! - `replica_link <name>` (target links, proxy peers) is answered `OK`:
//!   the writes that follow are applied, not forwarded;
//! - `replica_follow [seconds]` (followers) turns this connection into a
//!   feed of this server's writes (after a full copy, for that long;
//!   default `--replica-follow-seconds`); refused under `-X` as a dump
//!   is, since its full copy is one;
//! - `replica_copy on` says the `ms`/`md` that follow are a full copy's
//!   items (the first opens a copy on this connection), `replica_copy off`
//!   that they are writes again (`replication::fresh_writes`: a copy's
//!   item never replaces a write made since the copy began); nothing is
//!   answered (target links and this server's own follow links);
//! - `replica_synced` ends a full copy (target links, and this server's
//!   own follow link: its catch-up pull is over);
//! - `replica_targets <HOST:PORT>[,<HOST:PORT>...]` (or `-` for none;
//!   proxy peers) makes those this server's replication targets, as a
//!   reload of `--replicate-to` does (`replication::targets`), until the
//!   next SIGHUP re-reads the config file: `OK`, `CLIENT_ERROR <why>` for
//!   a bad list, `SERVER_ERROR <why>` when refused.
//!
//! All but `replica_hello` and `replica_targets` change nothing but the
//! connection that sends them.

use osmium_protocol::replication_link::{Refusal, Role};
use osmium_protocol::request::Tokens;

use super::{ConnView, Done, Next};
use crate::compose::replies::Replies;
use crate::context::WorkerCtx;
use crate::replication::auth::{self, HelloRefused};
use crate::replication::{
    COPY_ITEMS, COPY_OPEN, PEER_FOLLOW, PEER_FOLLOWER, PEER_LINK, PEER_NONE, PEER_PROXY,
};

pub(crate) fn command(
    ctx: &WorkerCtx,
    conn: ConnView,
    tokens: Tokens<'_>,
    noreply: bool,
    out: &mut Replies<'_>,
) -> Done {
    let peer = ctx.peer.get();
    let by_cert = peer == PEER_NONE && cert_peer(ctx);
    match tokens.get(0) {
        b"replica_hello" if peer == PEER_NONE => return hello(ctx, conn, tokens, noreply, out),
        b"replica_link" if peer == PEER_LINK || peer == PEER_PROXY => {
            super::text_line(out, false, "OK");
        }
        b"replica_link" if by_cert => {
            ctx.peer.set(PEER_LINK);
            super::text_line(out, false, "OK");
        }
        // A follow link starts with a full copy: a dump, which -X forbids
        // (memcached's answer to `lru_crawler metadump` under -X).
        b"replica_follow" if (peer == PEER_FOLLOWER || by_cert) && !dumps(ctx) => {
            super::text_line(out, false, "ERROR metadump not allowed");
        }
        b"replica_follow" if peer == PEER_FOLLOWER || by_cert => {
            let secs = std::str::from_utf8(tokens.get(1)).ok();
            let secs = secs.and_then(|s| s.parse().ok());
            ctx.handover.set(Some(
                secs.unwrap_or(ctx.shared.settings.replica_follow_seconds),
            ));
        }
        b"replica_copy" if peer == PEER_LINK || peer >= PEER_FOLLOW => {
            copy_mode(ctx, tokens.get(1) == b"on")
        }
        b"replica_synced" if peer == PEER_LINK || peer >= PEER_FOLLOW => {
            copy_ended(ctx);
            ctx.shared.replication.synced_from(peer);
        }
        b"replica_targets" if peer == PEER_PROXY || by_cert => set_targets(ctx, tokens, out),
        _ => return unknown(tokens, noreply, out),
    }
    Done::CONTINUE
}

fn dumps(ctx: &WorkerCtx) -> bool {
    ctx.shared.settings.dump_enabled
}

/// Under `-Z` without a secret: a client certificate that
/// `replication_peers` / `replication_ca` names makes a peer.
fn cert_peer(ctx: &WorkerCtx) -> bool {
    let repl = &ctx.shared.replication;
    repl.secret().is_none() && repl.names_required() && ctx.peer_auth.borrow().cert_named()
}

/// `replica_hello <role> <hex>`: the link handshake's listening end.
fn hello(
    ctx: &WorkerCtx,
    conn: ConnView,
    tokens: Tokens<'_>,
    noreply: bool,
    out: &mut Replies<'_>,
) -> Done {
    let repl = &ctx.shared.replication;
    let Some(secret) = repl.secret() else {
        return unknown(tokens, noreply, out);
    };
    if tokens.count() != 3 {
        return unknown(tokens, noreply, out);
    }
    let attempt = auth::hello(
        &ctx.peer_auth.borrow(),
        secret,
        tokens.get(1),
        tokens.get(2),
        repl.names_required(),
    );
    let h = match attempt {
        Ok(h) => h,
        // Not a handshake at all: as any line the server does not know.
        Err(HelloRefused::Handshake(Refusal::Malformed)) => return unknown(tokens, noreply, out),
        Err(why) => {
            repl.auth_failed(&format!("{why} from {}", ctx.shared.conns.remote(conn.fd)));
            return Done::then(Next::CloseNow);
        }
    };
    ctx.peer.set(match h.role {
        Role::TargetLink => PEER_LINK,
        Role::ProxyPeer => PEER_PROXY,
        Role::FollowLink => PEER_FOLLOWER,
    });
    super::text_line(out, false, &h.answer);
    if ctx.peer_auth.borrow().in_tls() {
        // TLS carries the link on (the handshake is bound to it).
        return Done::CONTINUE;
    }
    // Plain TCP: the answer leaves in clear, then every byte is a Noise
    // frame. Nothing after the hello runs in clear: the worker turns the
    // stream once the answer is out (and closes it if anything else
    // came with the hello).
    ctx.noise_upgrade.replace(Some(h.transport));
    Done::then(Next::CloseAfterWrite)
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
fn set_targets(ctx: &WorkerCtx, tokens: Tokens<'_>, out: &mut Replies<'_>) {
    let list = match (tokens.count(), std::str::from_utf8(tokens.get(1))) {
        (2, Ok(list)) => list,
        _ => return super::text_line(out, false, "CLIENT_ERROR bad command line format"),
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
        return super::text_line(out, false, &format!("CLIENT_ERROR {e}"));
    }
    if new.len() > crate::settings::MAX_REPLICA_TARGETS {
        let e = format!(
            "CLIENT_ERROR at most {} targets",
            crate::settings::MAX_REPLICA_TARGETS
        );
        return super::text_line(out, false, &e);
    }
    match ctx.shared.replication.set_targets(&new, "command") {
        Ok(_) => super::text_line(out, false, "OK"),
        Err(e) => super::text_line(out, false, &format!("SERVER_ERROR {e}")),
    }
}

/// What memcached does with a command it does not know (the parser's
/// `unknown`): a line ending in an `HTTP/` token closes the connection,
/// anything else is answered `ERROR` (nothing with `noreply`).
fn unknown(tokens: Tokens<'_>, noreply: bool, out: &mut Replies<'_>) -> Done {
    let n = tokens.count();
    if n > 1 && tokens.get(n - 1).starts_with(b"HTTP/") {
        return Done::then(Next::CloseNow);
    }
    super::text_line(out, noreply, "ERROR");
    Done::CONTINUE
}
