//! `stats [group ...]` (text) and STAT (binary), dispatched as memcached's
//! `process_stat` and `process_bin_stat` do.
//!
//! The text groups are matched memcached's way, `strncmp(token, name,
//! len)`: a token that is a prefix of a group's name picks it, tried in
//! memcached's order (reset, detail, settings, cachedump, conns, extstore,
//! then items/slabs/sizes exactly), so `stats s` is `stats settings`.
//! Binary STAT matches "reset", "settings" and "detail ..." as prefixes of
//! the key and other groups exactly; its reply is the text reply repacked
//! as one packet per `STAT name value` line.

use osmium_protocol::ascii::prefix_matches;
use osmium_protocol::binary::{opcode, status};
use osmium_protocol::encode::{self, stat};
use osmium_protocol::request::{Reply, Tokens};

use super::report;
use super::{dump, ConnView, Done};
use crate::compose::output::Output;
use crate::compose::{binary, text};
use crate::context::WorkerCtx;

pub fn stats(
    ctx: &WorkerCtx,
    conn: ConnView,
    group: Option<&[u8]>,
    tokens: Tokens<'_>,
    reply: &Reply<'_>,
    out: &mut Output,
) -> Done {
    if let Reply::Binary(r) = reply {
        return binary_stats(ctx, group.unwrap_or_default(), r.opaque, out);
    }
    let sh = &*ctx.shared;
    let n = tokens.count();
    let Some(sub) = group.filter(|_| n > 1) else {
        report::general(sh, out.buf());
        text::end(out);
        return Done::CONTINUE;
    };
    let buf = out.buf();
    if prefix_matches(sub, b"reset") {
        report::reset(sh);
        encode::line(buf, b"RESET");
    } else if prefix_matches(sub, b"detail") {
        if !sh.settings.dump_enabled {
            encode::line(buf, b"CLIENT_ERROR stats detail not allowed");
            return Done::CONTINUE;
        }
        // With no argument memcached looks at token 0 ("stats").
        let arg = tokens.get(if n < 3 { 0 } else { 2 });
        if prefix_matches(arg, b"on") {
            sh.prefix.set_enabled(true);
            encode::line(buf, b"OK");
        } else if prefix_matches(arg, b"off") {
            sh.prefix.set_enabled(false);
            encode::line(buf, b"OK");
        } else if prefix_matches(arg, b"dump") {
            sh.prefix.dump(buf);
        } else {
            encode::line(buf, b"CLIENT_ERROR usage: stats detail on|off|dump");
        }
    } else if prefix_matches(sub, b"settings") {
        report::settings(sh, buf);
        text::end(out);
    } else if prefix_matches(sub, b"cachedump") {
        dump::cachedump(ctx, &tokens, out);
    } else if prefix_matches(sub, b"conns") {
        let now = ctx.store().clock().now();
        sh.conns
            .write_stats(now, conn.fd, sh.settings.unix_socket.as_deref(), buf);
        text::end(out);
    } else if prefix_matches(sub, b"extstore") {
        // No flash tier: no pages to describe.
        text::end(out);
    } else {
        match sub {
            b"items" => report::items(sh, buf),
            b"slabs" => report::slabs(sh, buf),
            b"sizes" => stat(buf, "sizes_status", "disabled"),
            _ => {
                encode::line(buf, b"ERROR");
                return Done::CONTINUE;
            }
        }
        text::end(out);
    }
    Done::CONTINUE
}

/// Binary STAT with `group` as its key.
fn binary_stats(ctx: &WorkerCtx, group: &[u8], opaque: u32, out: &mut Output) -> Done {
    let sh = &*ctx.shared;
    let r = osmium_protocol::request::BinaryReply {
        opcode: opcode::STAT,
        opaque,
        quiet: false,
        with_key: false,
    };
    let mut text = Vec::new();
    if group.is_empty() {
        report::general(sh, &mut text);
    } else if group.starts_with(b"reset") {
        report::reset(sh);
    } else if group.starts_with(b"settings") {
        report::settings(sh, &mut text);
    } else if let Some(detail) = group.strip_prefix(b"detail") {
        if detail.starts_with(b" dump") {
            let mut dump = Vec::new();
            sh.prefix.dump(&mut dump);
            osmium_protocol::binary::put_stat(out.buf(), opaque, b"detailed", &dump);
        } else if detail.starts_with(b" on") {
            sh.prefix.set_enabled(true);
        } else if detail.starts_with(b" off") {
            sh.prefix.set_enabled(false);
        } else {
            binary::error(out, &r, status::KEY_NOT_FOUND);
            return Done::FLUSH;
        }
    } else {
        match group {
            b"items" => report::items(sh, &mut text),
            b"slabs" => report::slabs(sh, &mut text),
            b"sizes" => text.extend_from_slice(b"STAT sizes_status disabled\r\n"),
            _ => {
                binary::error(out, &r, status::KEY_NOT_FOUND);
                return Done::FLUSH;
            }
        }
    }
    binary::stats(out, opaque, &text);
    Done::CONTINUE
}
