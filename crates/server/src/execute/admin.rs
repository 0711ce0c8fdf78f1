//! Commands about the server rather than items: flush_all, version,
//! verbosity, quit, noop (mn, binary NOOP), shutdown, cache_memlimit, the
//! errors and closes a parser decided on, memcached's slab/LRU/extstore
//! tuning commands (`tuning`) and replication's private commands
//! (`replica`).

use std::sync::atomic::Ordering;

use osmium_protocol::binary::status;
use osmium_protocol::request::{Command, Reply, Request, ShutdownMode};

use super::{replica, tuning, ConnView, Done, Next};
use crate::compose::output::Output;
use crate::compose::{binary, text};
use crate::context::{StopRequest, WorkerCtx};
use crate::settings::VERSION;

/// memcached's highest verbosity level.
const MAX_VERBOSITY: u32 = 2;

pub fn admin(ctx: &WorkerCtx, conn: ConnView, req: &Request<'_>, out: &mut Output) -> Done {
    let shared = &ctx.shared;
    let noreply = matches!(req.reply, Reply::Text { noreply: true });
    match (req.command, &req.reply) {
        (Command::FlushAll { delay }, reply) => {
            ctx.stats.flush_cmds.incr();
            if !shared.settings.flush_enabled {
                return match reply {
                    // memcached answers a refused binary flush with "auth
                    // failure".
                    Reply::Binary(r) => {
                        binary::error(out, r, status::AUTH_ERROR);
                        Done::FLUSH
                    }
                    _ => {
                        text::line(out, noreply, "CLIENT_ERROR flush_all not allowed");
                        Done::CONTINUE
                    }
                };
            }
            let Some(delay) = delay else {
                text::line(out, noreply, "CLIENT_ERROR invalid exptime argument");
                return Done::CONTINUE;
            };
            ctx.store().flush_all_after(delay);
            match reply {
                Reply::Binary(r) => binary::ok(out, r, 0, &[]),
                _ => text::line(out, noreply, "OK"),
            }
            Done::CONTINUE
        }
        (Command::Version, Reply::Binary(r)) => {
            binary::always(out, r, 0, VERSION.as_bytes());
            Done::CONTINUE
        }
        (Command::Version, _) => {
            let buf = out.buf();
            buf.extend_from_slice(b"VERSION ");
            buf.extend_from_slice(VERSION.as_bytes());
            buf.extend_from_slice(b"\r\n");
            Done::CONTINUE
        }
        (Command::Verbosity { level }, reply) => {
            shared
                .verbosity
                .store(level.min(MAX_VERBOSITY), Ordering::Relaxed);
            match reply {
                Reply::Binary(r) => binary::always(out, r, 0, &[]),
                _ => text::line(out, noreply, "OK"),
            }
            Done::CONTINUE
        }
        (Command::Quit, Reply::Binary(r)) => {
            binary::ok(out, r, 0, &[]);
            Done::then(Next::CloseAfterWrite)
        }
        (Command::Quit, _) => Done::then(Next::CloseAfterWrite),
        (Command::Noop, Reply::Binary(r)) => {
            binary::always(out, r, 0, &[]);
            Done::FLUSH
        }
        (Command::Noop, _) => {
            out.buf().extend_from_slice(b"MN\r\n");
            Done::FLUSH
        }
        (Command::Shutdown { mode }, _) => {
            if !shared.settings.shutdown_enabled {
                text::line(out, noreply, "SERVER_ERROR: shutdown not enabled");
                return Done::CONTINUE;
            }
            let how = match mode {
                ShutdownMode::Immediate => StopRequest::Exit,
                ShutdownMode::Graceful => StopRequest::Graceful,
                ShutdownMode::Invalid => {
                    text::line(out, noreply, "CLIENT_ERROR invalid shutdown mode");
                    return Done::CONTINUE;
                }
            };
            shared.request_stop(how);
            Done::then(Next::CloseNow)
        }
        (Command::CacheMemlimit { megabytes }, _) => {
            let msg = if megabytes < 8 {
                "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m"
            } else if megabytes > 1_000_000_000 {
                "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes"
            } else if ctx.store().set_memory_limit(megabytes as usize * (1 << 20)) {
                if shared.verbose() > 0 {
                    eprintln!("maxbytes adjusted to {megabytes}m");
                }
                "OK"
            } else {
                "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust"
            };
            text::line(out, noreply, msg);
            Done::CONTINUE
        }
        (Command::Admin { tokens }, _) if tokens.get(0).starts_with(b"replica_") => {
            replica::command(ctx, conn, tokens, noreply, out)
        }
        (Command::Admin { tokens }, _) => {
            tuning::tuning(ctx, tokens, noreply, out);
            Done::CONTINUE
        }
        (Command::Error { message, .. }, reply) => {
            super::error_line(out, reply, message);
            Done::CONTINUE
        }
        (Command::Close, _) => Done::then(Next::CloseNow),
        _ => Done::CONTINUE,
    }
}
