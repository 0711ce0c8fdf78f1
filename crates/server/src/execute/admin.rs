//! Commands about the server rather than items: flush_all, version,
//! verbosity, quit, noop (mn, binary NOOP), shutdown, cache_memlimit, the
//! errors and closes a parser decided on, memcached's slab/LRU/extstore
//! tuning commands (`tuning`), `watch` (`watch`) and replication's
//! private commands (`replica`).

use std::sync::atomic::Ordering;

use osmium_protocol::request::{Command, Reply, Request, ShutdownMode};

use super::{answer, replica, tuning, ConnView, Done, Next};
use crate::compose::outcome::{Outcome, Status};
use crate::compose::replies::Replies;
use crate::context::{StopRequest, WorkerCtx};

/// memcached's highest verbosity level.
const MAX_VERBOSITY: u32 = 2;

pub(crate) fn admin(
    ctx: &WorkerCtx,
    conn: ConnView,
    req: &Request<'_>,
    out: &mut Replies<'_>,
) -> Done {
    let shared = &ctx.shared;
    let reply = &req.reply;
    let say = |out: &mut Replies<'_>, o: Outcome<'_>| answer(out, reply, o);
    match req.command {
        Command::FlushAll { delay } => {
            ctx.stats.flush_cmds.incr();
            if !shared.settings.flush_enabled {
                return say(out, Outcome::Status(Status::FlushNotAllowed));
            }
            let Some(delay) = delay else {
                return say(out, Outcome::Status(Status::InvalidExptime));
            };
            ctx.store().flush_all_after(delay);
            say(out, Outcome::Status(Status::Ok))
        }
        Command::Version => say(out, Outcome::Version),
        Command::Verbosity { level } => {
            shared
                .verbosity
                .store(level.min(MAX_VERBOSITY), Ordering::Relaxed);
            say(out, Outcome::Verbosity)
        }
        Command::Quit => {
            let _ = say(out, Outcome::Quit);
            Done::then(Next::CloseAfterWrite)
        }
        Command::Noop => {
            let _ = say(out, Outcome::Noop);
            Done::FLUSH
        }
        Command::Shutdown { mode } => {
            if !shared.settings.shutdown_enabled {
                return say(out, Outcome::Status(Status::ShutdownDisabled));
            }
            let how = match mode {
                ShutdownMode::Immediate => StopRequest::Exit,
                ShutdownMode::Graceful => StopRequest::Graceful,
                ShutdownMode::Invalid => {
                    return say(out, Outcome::Status(Status::InvalidShutdownMode));
                }
            };
            shared.request_stop(how);
            Done::then(Next::Shutdown)
        }
        Command::CacheMemlimit { megabytes } => {
            let status = if megabytes < 8 {
                Status::MemlimitTooSmall
            } else if megabytes > 1_000_000_000 {
                Status::MemlimitNotBytes
            } else if ctx.store().set_memory_limit(megabytes as usize * (1 << 20)) {
                if shared.verbose() > 0 {
                    tracing::info!("maxbytes adjusted to {megabytes}m");
                }
                Status::Ok
            } else {
                Status::MemlimitFailed
            };
            say(out, Outcome::Status(status))
        }
        Command::Admin { tokens } if tokens.get(0) == b"watch" => {
            super::watch::command(ctx, conn, tokens, out)
        }
        Command::Admin { tokens } if tokens.get(0).starts_with(b"replica_") => {
            let noreply = matches!(reply, Reply::Text { noreply: true });
            replica::command(ctx, conn, tokens, noreply, out)
        }
        Command::Admin { tokens } => {
            let refreshed;
            let outcome = match tuning::tuning(ctx, tokens) {
                tuning::Answer::Status(s) => Outcome::Status(s),
                tuning::Answer::Loud(s) => Outcome::Loud(s),
                tuning::Answer::Refreshed(r) => {
                    refreshed = r;
                    match &refreshed {
                        Ok(()) => Outcome::Status(Status::Ok),
                        // memcached writes the error whatever noreply says.
                        Err(e) => Outcome::LoudMessage(e),
                    }
                }
            };
            let _ = say(out, outcome);
            Done::CONTINUE
        }
        Command::Error { message, .. } => {
            let _ = say(out, Outcome::Message(message));
            Done::CONTINUE
        }
        Command::Close => Done::then(Next::CloseNow),
        _ => Done::CONTINUE,
    }
}
