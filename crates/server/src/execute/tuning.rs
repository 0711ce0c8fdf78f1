//! memcached's tuning commands for internals osmium does not have, answered
//! as memcached answers them (arguments checked the same way) without
//! effect: `slabs reassign` (slab reassignment is off), `slabs automove`,
//! `lru tune|mode|temp_ttl` (no LRU maintainer thread), `extstore ...`
//! (settings for a flash tier); and
//! `refresh_certs`, which loads the TLS certificates again. Each answers
//! with a fixed [`Status`].

use osmium_protocol::ascii::prefix_matches;
use osmium_protocol::request::Tokens;

use crate::compose::outcome::Status;
use crate::context::WorkerCtx;

/// A tuning command's answer.
pub(crate) enum Answer {
    Status(Status),
    /// Sent whatever noreply says (memcached's `refresh_certs` errors).
    Loud(Status),
    /// `refresh_certs`: done, or why not (memcached's text).
    Refreshed(Result<(), String>),
}

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

pub(crate) fn tuning(ctx: &WorkerCtx, t: Tokens<'_>) -> Answer {
    let n = t.count();
    let sub = t.get(1);
    let status = match t.get(0) {
        b"slabs" => {
            if n == 4 && prefix_matches(sub, b"reassign") {
                Status::SlabReassignDisabled
            } else if n >= 3 && prefix_matches(sub, b"automove") {
                slabs_automove(&t)
            } else {
                Status::Error
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
                        Status::HotWarmPercents
                    } else if factor <= 0.0 || hot_factor <= 0.0 {
                        Status::AgeFactors
                    } else {
                        Status::Ok
                    }
                }
                _ => Status::Error,
            }
        }
        // `lru mode` and `lru temp_ttl` need memcached's LRU maintainer thread.
        b"lru" => Status::Error,
        b"extstore" => extstore(&t),
        b"refresh_certs" => return refresh_certs(ctx),
        _ => Status::Error,
    };
    Answer::Status(status)
}

/// `refresh_certs`: done, or memcached's error (the certificates in use
/// then stay).
fn refresh_certs(ctx: &WorkerCtx) -> Answer {
    match &ctx.shared.tls {
        None => Answer::Loud(Status::TlsNotEnabled),
        Some(tls) => Answer::Refreshed(tls.refresh()),
    }
}

fn slabs_automove(t: &Tokens<'_>) -> Status {
    let sub = t.get(2);
    let n = t.count();
    if sub.is_empty() {
        return Status::BadFormat;
    }
    if prefix_matches(sub, b"ratio") || prefix_matches(sub, b"freeratio") {
        if n < 4 || f64_arg(t, 3).is_none() {
            return Status::Error;
        }
    } else if prefix_matches(sub, b"window") {
        match u32_arg(t, 3) {
            Some(w) if n >= 4 => {
                if !(3..=1800).contains(&w) {
                    return Status::AutomoveWindow;
                }
            }
            _ => return Status::BadFormat,
        }
    } else {
        match u32_arg(t, 2) {
            Some(0..=2) => {}
            Some(_) => return Status::Error,
            None => return Status::BadFormat,
        }
    }
    Status::Ok
}

fn extstore(t: &Tokens<'_>) -> Status {
    let sub = t.get(1);
    let n = t.count();
    if n < 3 || sub.is_empty() {
        return Status::Error;
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
        Status::Ok
    } else {
        Status::Error
    }
}
