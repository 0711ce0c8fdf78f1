//! memcached's tuning commands for internals osmium does not have, answered
//! as memcached answers them (arguments checked the same way) without
//! effect: `slabs reassign` (slab reassignment is off), `slabs automove`,
//! `lru tune|mode|temp_ttl` (no LRU maintainer thread), `extstore ...`
//! (settings for a flash tier) and `watch` (no log watchers yet); and
//! `refresh_certs`, which loads the TLS certificates again.

use osmium_protocol::ascii::prefix_matches;
use osmium_protocol::request::Tokens;

use crate::compose::output::Output;
use crate::compose::text;
use crate::context::WorkerCtx;

fn u32_arg(t: &Tokens<'_>, i: usize) -> Option<u32> {
    osmium_protocol::ascii::numbers::tokto_u32(t.get(i))
}

/// memcached's `mc_toktod` (`strtod` on the token).
fn f64_arg(t: &Tokens<'_>, i: usize) -> Option<f64> {
    let s = std::str::from_utf8(t.get(i)).ok()?;
    if s.is_empty() || s.len() > 31 {
        return None;
    }
    s.parse().ok()
}

pub fn tuning(ctx: &WorkerCtx, t: Tokens<'_>, noreply: bool, out: &mut Output) {
    let n = t.count();
    let sub = t.get(1);
    let msg = match t.get(0) {
        b"slabs" => {
            if n == 4 && prefix_matches(sub, b"reassign") {
                "CLIENT_ERROR slab reassignment disabled"
            } else if n >= 3 && prefix_matches(sub, b"automove") {
                slabs_automove(&t)
            } else {
                "ERROR"
            }
        }
        b"lru" if prefix_matches(sub, b"tune") && n >= 6 => {
            match (
                u32_arg(&t, 2),
                u32_arg(&t, 3),
                f64_arg(&t, 4),
                f64_arg(&t, 5),
            ) {
                (Some(hot), Some(warm), Some(hot_factor), Some(factor)) => {
                    if hot.saturating_add(warm) > 80 {
                        "ERROR hot and warm pcts must not exceed 80"
                    } else if factor <= 0.0 || hot_factor <= 0.0 {
                        "ERROR hot/warm age factors must be greater than 0"
                    } else {
                        "OK"
                    }
                }
                _ => "ERROR",
            }
        }
        // `lru mode` and `lru temp_ttl` need memcached's LRU maintainer thread.
        b"lru" => "ERROR",
        b"extstore" => extstore(&t),
        b"watch" => "CLIENT_ERROR watch commands not allowed",
        b"refresh_certs" => return refresh_certs(ctx, noreply, out),
        _ => "ERROR",
    };
    text::line(out, noreply, msg);
}

/// `refresh_certs`: `OK`, or memcached's error line (the certificates in
/// use then stay).
fn refresh_certs(ctx: &WorkerCtx, noreply: bool, out: &mut Output) {
    let result = match &ctx.shared.tls {
        None => Err("Error TLS not enabled".to_string()),
        Some(tls) => tls.refresh(),
    };
    match result {
        Ok(()) => text::line(out, noreply, "OK"),
        // memcached writes the error whatever noreply says.
        Err(e) => text::line(out, false, &e),
    }
}

fn slabs_automove(t: &Tokens<'_>) -> &'static str {
    let sub = t.get(2);
    let n = t.count();
    if sub.is_empty() {
        return "CLIENT_ERROR bad command line format";
    }
    if prefix_matches(sub, b"ratio") || prefix_matches(sub, b"freeratio") {
        if n < 4 || f64_arg(t, 3).is_none() {
            return "ERROR";
        }
    } else if prefix_matches(sub, b"window") {
        match u32_arg(t, 3) {
            Some(w) if n >= 4 => {
                if !(3..=1800).contains(&w) {
                    return "CLIENT_ERROR automove window too low or too high";
                }
            }
            _ => return "CLIENT_ERROR bad command line format",
        }
    } else {
        match u32_arg(t, 2) {
            Some(0..=2) => {}
            Some(_) => return "ERROR",
            None => return "CLIENT_ERROR bad command line format",
        }
    }
    "OK"
}

fn extstore(t: &Tokens<'_>) -> &'static str {
    let sub = t.get(1);
    let n = t.count();
    if n < 3 || sub.is_empty() {
        return "ERROR";
    }
    // memcached tries the names in this order, each matching any prefix.
    let ok = if prefix_matches(sub, b"free_memchunks") && n > 3 {
        matches!((u32_arg(t, 2), u32_arg(t, 3)), (Some(c), Some(_)) if c < 64)
    } else {
        const NAMES: [(&str, bool); 9] = [
            ("item_size", false),
            ("item_age", false),
            ("low_ttl", false),
            ("recache_rate", false),
            ("compact_under", false),
            ("drop_under", false),
            ("max_sleep", false),
            ("max_frag", true),
            ("drop_unread", false),
        ];
        match NAMES
            .iter()
            .find(|(name, _)| prefix_matches(sub, name.as_bytes()))
        {
            Some((_, true)) => f64_arg(t, 2).is_some(),
            Some((_, false)) => u32_arg(t, 2).is_some(),
            None => false,
        }
    };
    if ok {
        "OK"
    } else {
        "ERROR"
    }
}
