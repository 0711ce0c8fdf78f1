//! `stats [group ...]` (text) and STAT (binary), dispatched as memcached's
//! `process_stat` and `process_bin_stat` do.
//!
//! The text groups are matched memcached's way, `strncmp(token, name,
//! len)`: a token that is a prefix of a group's name picks it, tried in
//! memcached's order (reset, detail, settings, cachedump, conns, extstore,
//! then items/slabs/sizes exactly), so `stats s` is `stats settings`.
//! Binary STAT matches "reset", "settings" and "detail ..." as prefixes of
//! the key and other groups exactly; its reply is the text reply repacked
//! as one packet per `STAT name value` line. `stats hotkeys` and `stats
//! upgrade` are osmium's own (`crate::hotkeys`, `report::upgrade`).

use osmium_protocol::ascii::prefix_matches;
use osmium_protocol::request::{Reply, Tokens};

use super::report;
use super::{answer, dump, ConnView, Done};
use crate::compose::outcome::{Outcome, Status};
use crate::compose::replies::Replies;
use crate::compose::stat_rows::StatRows;
use crate::context::WorkerCtx;

pub(crate) fn stats(
    ctx: &WorkerCtx,
    conn: ConnView,
    group: Option<&[u8]>,
    tokens: Tokens<'_>,
    reply: &Reply<'_>,
    out: &mut Replies<'_>,
) -> Done {
    // memcached matches a binary STAT's groups its own way.
    let binary = matches!(reply, Reply::Binary(_));
    let mut found = Found::default();
    let outcome = if binary {
        binary_stats(ctx, group.unwrap_or_default(), &mut found)
    } else {
        text_stats(ctx, conn, group, tokens, &mut found, out)
    };
    match outcome {
        Some(o) => answer(out, reply, o.with(&found)),
        None => Done::CONTINUE,
    }
}

/// What a stats group gathered: rows, or the prefix report.
#[derive(Default)]
struct Found {
    rows: StatRows,
    prefix_report: Vec<u8>,
}

/// What a stats group answers: its rows (gathered in the caller's
/// `Found`), the prefix report, or a fixed answer.
enum Answer {
    Rows,
    PrefixDump,
    Said(Outcome<'static>),
}

impl Answer {
    fn with(self, found: &Found) -> Outcome<'_> {
        match self {
            Answer::Rows => Outcome::Stats(&found.rows),
            Answer::PrefixDump => Outcome::PrefixDump(&found.prefix_report),
            Answer::Said(o) => o,
        }
    }
}

/// `stats [group ...]`, as memcached's `process_stat`; None when the reply
/// was written (`stats cachedump`).
fn text_stats(
    ctx: &WorkerCtx,
    conn: ConnView,
    group: Option<&[u8]>,
    tokens: Tokens<'_>,
    found: &mut Found,
    out: &mut Replies<'_>,
) -> Option<Answer> {
    let rows = &mut found.rows;
    let sh = &*ctx.shared;
    let n = tokens.count();
    let loud = |s: Status| Some(Answer::Said(Outcome::Loud(s)));
    let Some(sub) = group.filter(|_| n > 1) else {
        report::general(sh, rows);
        return Some(Answer::Rows);
    };
    if prefix_matches(sub, b"reset") {
        report::reset(sh);
        loud(Status::Reset)
    } else if prefix_matches(sub, b"detail") {
        if !sh.settings.dump_enabled {
            return loud(Status::DetailNotAllowed);
        }
        // With no argument memcached looks at token 0 ("stats").
        let arg = tokens.get(if n < 3 { 0 } else { 2 });
        if prefix_matches(arg, b"on") {
            sh.prefix.set_enabled(true);
            loud(Status::Ok)
        } else if prefix_matches(arg, b"off") {
            sh.prefix.set_enabled(false);
            loud(Status::Ok)
        } else if prefix_matches(arg, b"dump") {
            sh.prefix.dump(&mut found.prefix_report);
            Some(Answer::PrefixDump)
        } else {
            loud(Status::DetailUsage)
        }
    } else if prefix_matches(sub, b"settings") {
        report::settings(sh, rows);
        Some(Answer::Rows)
    } else if prefix_matches(sub, b"cachedump") {
        match dump::cachedump(ctx, &tokens, out.dump_stream()) {
            Ok(()) => None,
            Err(s) => loud(s),
        }
    } else if prefix_matches(sub, b"conns") {
        let now = ctx.store().clock().now();
        sh.conns
            .write_stats(now, conn.fd, sh.settings.unix_socket.as_deref(), rows);
        Some(Answer::Rows)
    } else if prefix_matches(sub, b"extstore") {
        report::extstore(sh, rows);
        Some(Answer::Rows)
    } else {
        match sub {
            b"items" => report::items(sh, rows),
            b"slabs" => report::slabs(sh, rows),
            b"sizes" => report::sizes(rows),
            // osmium's own: `stats hotkeys [N]`.
            b"hotkeys" => {
                let limit = if n > 2 {
                    match std::str::from_utf8(tokens.get(2))
                        .ok()
                        .and_then(|t| t.parse::<usize>().ok())
                    {
                        Some(limit) => Some(limit),
                        None => return loud(Status::Error),
                    }
                } else {
                    None
                };
                crate::hotkeys::stats_rows(sh.hotkeys.as_deref(), limit, rows)
            }
            // osmium's own: the binary upgrades and the last failure's reason.
            b"upgrade" => report::upgrade(rows),
            _ => return loud(Status::Error),
        }
        Some(Answer::Rows)
    }
}

/// Binary STAT with `group` as its key, as memcached's `process_bin_stat`.
fn binary_stats(ctx: &WorkerCtx, group: &[u8], found: &mut Found) -> Option<Answer> {
    let rows = &mut found.rows;
    let sh = &*ctx.shared;
    let not_found = Some(Answer::Said(Outcome::Status(Status::NotFound)));
    if group.is_empty() {
        report::general(sh, rows);
    } else if group.starts_with(b"reset") {
        report::reset(sh);
    } else if group.starts_with(b"settings") {
        report::settings(sh, rows);
    } else if let Some(detail) = group.strip_prefix(b"detail") {
        if detail.starts_with(b" dump") {
            sh.prefix.dump(&mut found.prefix_report);
            return Some(Answer::PrefixDump);
        } else if detail.starts_with(b" on") {
            sh.prefix.set_enabled(true);
        } else if detail.starts_with(b" off") {
            sh.prefix.set_enabled(false);
        } else {
            return not_found;
        }
    } else {
        match group {
            b"items" => report::items(sh, rows),
            b"slabs" => report::slabs(sh, rows),
            b"sizes" => report::sizes(rows),
            b"hotkeys" => crate::hotkeys::stats_rows(sh.hotkeys.as_deref(), None, rows),
            b"upgrade" => report::upgrade(rows),
            _ => return not_found,
        }
    }
    Some(Answer::Rows)
}
