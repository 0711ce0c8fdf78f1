//! Counters: incr/decr of a stored decimal value with memcached's rules
//! ([`Store::arith`], and [`Store::counter`] with a CAS condition, an
//! explicit new CAS unique, an expiry update and creation on a miss), and
//! how a stored value reads as a number.

use crate::index::hash_key;
use crate::item;
use crate::store::Store;
use crate::types::{ArithResult, CounterResult, CounterUpdate, StoreMode, StoreStatus, Write};

impl Store {
    /// incr/decr with memcached's rules: 64-bit wrap on incr, clamp at 0 on
    /// decr, values of 1..=23 decimal bytes only; a shorter result is space
    /// padded to the old length, as memcached's in-place update.
    pub fn arith(&self, head: usize, key: &[u8], incr: bool, delta: u64) -> ArithResult {
        match self.counter(head, key, incr, delta, &CounterUpdate::default()) {
            CounterResult::Done { value, .. } => ArithResult::Value(value),
            CounterResult::NotFound | CounterResult::Exists | CounterResult::NotStored => {
                ArithResult::NotFound
            }
            CounterResult::NonNumeric => ArithResult::NonNumeric,
            CounterResult::OutOfMemory => ArithResult::OutOfMemory,
        }
    }

    /// incr/decr with a CAS check, an explicit new CAS, an expiry update
    /// and creation on a miss (memcached's `do_add_delta` plus the meta
    /// protocol's extras). The result is always a new item (a new CAS
    /// unique).
    pub fn counter(
        &self,
        head: usize,
        key: &[u8],
        incr: bool,
        delta: u64,
        m: &CounterUpdate,
    ) -> CounterResult {
        let hash = hash_key(key);
        self.flush_due(self.clock.now());
        self.promote(key, hash);
        let mut forced = None;
        loop {
            let (value, width, old_loc, spec, in_place, lane) = {
                let mut table = self.shard(hash).write();
                let Some(f) = self.find_live(&mut table, key, hash) else {
                    drop(table);
                    return match m.create {
                        Some((initial, exptime)) => {
                            self.counter_create(head, key, initial, exptime, m)
                        }
                        None => CounterResult::NotFound,
                    };
                };
                // memcached's do_add_delta: an empty value, then the CAS,
                // then the number (a CAS mismatch wins over a value too
                // long to be a number). Lengths are the client's: a packed
                // value (never under 64 bytes) is too long without being
                // decoded.
                let cur_len = f.item.value_len();
                if cur_len == 0 {
                    return CounterResult::NonNumeric;
                }
                if m.if_cas != 0 && self.cas_of(f.loc, f.item) != m.if_cas {
                    return CounterResult::Exists;
                }
                if cur_len >= 24 || f.item.packed().is_some() {
                    return CounterResult::NonNumeric;
                }
                let cur = f.item.stored_value();
                let Some(n) = stored_number(cur) else {
                    return CounterResult::NonNumeric;
                };
                let value = if incr {
                    n.wrapping_add(delta)
                } else {
                    n.saturating_sub(delta)
                };
                let len = itoa::Buffer::new().format(value).len();
                // memcached updates in place (space padded) when the result
                // fits; that is also when the expiry update applies.
                let in_place = len <= cur.len();
                let width = len.max(cur.len() * usize::from(in_place));
                let spec = item::ItemSpec {
                    cas: self.explicit(m.new_cas).or(forced),
                    exptime_field: f.item.has_exptime_field() || (in_place && m.exptime.is_some()),
                    ..f.item.spec().with_raw_value(width)
                };
                (
                    value,
                    width,
                    f.loc,
                    spec,
                    in_place,
                    self.update_head(head, &f),
                )
            };
            let Some(slot) = self.reserve(lane, &spec) else {
                return CounterResult::OutOfMemory;
            };
            let Some((mut table, old)) = self.relock_at(key, hash, old_loc) else {
                // Changed while we reserved: start over.
                self.abandon(slot);
                continue;
            };
            let exptime = old.item.exptime();
            let new_exptime = match m.exptime {
                Some(e) if in_place => e,
                _ => exptime,
            };
            let spec = item::ItemSpec {
                exptime: new_exptime,
                ..spec
            };
            let mut buf = itoa::Buffer::new();
            let text = buf.format(value).as_bytes();
            let pad = [b' '; 24];
            let parts: [&[u8]; 2] = [text, &pad[..width - text.len()]];
            // In place, memcached keeps the item's state; a new item has
            // none but its key's encoding.
            let state = old.item.state()
                & if in_place {
                    item::STATE_BINARY_KEY
                        | item::STATE_FETCHED
                        | item::STATE_STALE
                        | item::STATE_TOKEN_SENT
                } else {
                    item::STATE_BINARY_KEY
                };
            self.write_item(&slot, &spec, key, &parts, state);
            if let Some(c) = self.cas_conflict(&slot, spec.cas.is_some(), Some(&old)) {
                forced = Some(c);
                drop(table);
                self.abandon(slot);
                continue;
            }
            self.link_counted(&mut table, hash, &slot, Some(&old), !in_place);
            let cas = self.slot_cas(&slot);
            drop(table);
            self.arena.finish_write(slot.seg);
            return CounterResult::Done {
                value,
                cas,
                exptime,
                created: false,
            };
        }
    }

    /// A counter's miss with `create`: add the initial value.
    fn counter_create(
        &self,
        head: usize,
        key: &[u8],
        initial: u64,
        exptime: u32,
        m: &CounterUpdate,
    ) -> CounterResult {
        let mut buf = itoa::Buffer::new();
        let text = buf.format(initial).as_bytes();
        let w = Write {
            mode: StoreMode::Add,
            key,
            exptime,
            value: text,
            new_cas: m.new_cas,
            ..Write::default()
        };
        match self.store(head, &w) {
            (StoreStatus::Stored, cas) => CounterResult::Done {
                value: initial,
                cas,
                exptime: 0,
                created: true,
            },
            (StoreStatus::OutOfMemory, _) => CounterResult::OutOfMemory,
            _ => CounterResult::NotStored,
        }
    }
}

/// A stored value read as a counter, as memcached's `do_add_delta` reads
/// it: the item data up to its first NUL byte, parsed by `safe_strtoull`.
/// None if it is not a number.
fn stored_number(value: &[u8]) -> Option<u64> {
    let digits = match value.iter().position(|&c| c == 0) {
        Some(p) => &value[..p],
        None => value,
    };
    safe_strtoull(digits)
}

/// C `isspace` in the "C" locale.
#[inline]
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// memcached's `safe_strtoull` (util.c), which wraps glibc's `strtoull`:
///
/// * leading C white space is skipped and an optional `+` or `-` sign is
///   accepted;
/// * the digits must be followed by the end, C white space or a NUL byte
///   (`"5 "` is 5, `"5x"` is not a number);
/// * a 64-bit overflow is an error (`ERANGE`);
/// * a negative number is rejected only when the wrapped result looks
///   negative as a signed 64-bit value (`"-0"` is 0, and `"-1"` is an
///   error, but `"-18446744073709551615"` wraps to 1).
fn safe_strtoull(tok: &[u8]) -> Option<u64> {
    let mut i = 0;
    while i < tok.len() && is_c_space(tok[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < tok.len() && (tok[i] == b'+' || tok[i] == b'-') {
        negative = tok[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut magnitude: u64 = 0;
    let mut overflow = false;
    while i < tok.len() && tok[i].is_ascii_digit() {
        let d = u64::from(tok[i] - b'0');
        match magnitude.checked_mul(10).and_then(|m| m.checked_add(d)) {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
        i += 1;
    }
    let ends_cleanly = i == tok.len() || is_c_space(tok[i]) || tok[i] == 0;
    if i == start || overflow || !ends_cleanly {
        return None;
    }
    let value = if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    if (value as i64) < 0 && tok.contains(&b'-') {
        return None;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_strtoull_reads_like_memcached() {
        assert_eq!(safe_strtoull(b"0"), Some(0));
        assert_eq!(safe_strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(safe_strtoull(b"18446744073709551616"), None);
        assert_eq!(safe_strtoull(b"-1"), None);
        assert_eq!(safe_strtoull(b"-0"), Some(0));
        assert_eq!(safe_strtoull(b"-18446744073709551615"), Some(1));
        assert_eq!(safe_strtoull(b"-9223372036854775808"), None);
        assert_eq!(
            safe_strtoull(b"-9223372036854775809"),
            Some(9223372036854775807)
        );
        assert_eq!(safe_strtoull(b"+7"), Some(7));
        assert_eq!(safe_strtoull(b"\t7"), Some(7));
        assert_eq!(safe_strtoull(b" \n\x0b\x0c\r7"), Some(7));
        assert_eq!(safe_strtoull(b"7\r"), Some(7));
        assert_eq!(safe_strtoull(b"7 x"), Some(7));
        assert_eq!(safe_strtoull(b"7\0x"), Some(7));
        assert_eq!(safe_strtoull(b"7x"), None);
        assert_eq!(safe_strtoull(b""), None);
        assert_eq!(safe_strtoull(b"   "), None);
        assert_eq!(safe_strtoull(b"-"), None);
        assert_eq!(safe_strtoull(b"+-1"), None);
        assert_eq!(safe_strtoull(b"- 1"), None);
        assert_eq!(safe_strtoull(b"abc"), None);
        assert_eq!(safe_strtoull(b"0x10"), None);
    }

    #[test]
    fn a_stored_value_is_read_up_to_its_first_nul() {
        // The space padding of an in-place decrement reads back.
        assert_eq!(stored_number(b"99 "), Some(99));
        assert_eq!(stored_number(b"12\0garbage"), Some(12));
        assert_eq!(stored_number(b"\0"), None);
        assert_eq!(stored_number(b"12 \0x"), Some(12));
        assert_eq!(stored_number(b"12x\0"), None);
        assert_eq!(stored_number(b"-5"), None);
    }
}
