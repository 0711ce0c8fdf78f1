//! Keys and values of the network benchmarks: fixed-width decimal keys
//! (`k%015d` for 16-byte keys; against a server this tool did not start,
//! after the prefix `osmium-bench:`), item-specific values derived from the key
//! (so no two items can share storage), and the fixed pseudo-random
//! rank → key permutation used by `hitratio`.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Longest key the benchmarks make (memcached's limit is 250).
pub(crate) const MAX_KEY: usize = 250;

/// Checks that `count` ids (0..count) fit in keys of `key_size` bytes: a
/// one-byte prefix then the zero-padded decimal id.
pub(crate) fn check_key_size(key_size: usize, count: u64) -> Result<(), String> {
    if !(2..=MAX_KEY).contains(&key_size) {
        return Err(format!("key size {key_size} is not in 2..={MAX_KEY}"));
    }
    let digits = key_size - 1;
    let fits = digits >= 20 || count.saturating_sub(1) < 10u64.pow(digits as u32);
    if fits {
        Ok(())
    } else {
        Err(format!(
            "{count} ids do not fit in {digits}-digit keys (--key-size {key_size})"
        ))
    }
}

/// Writes `prefix` then `n` zero-padded to the rest of `out` (`%c%0*d`);
/// `out.len()` is the key size. Leading digits that do not fit are dropped,
/// which [`check_key_size`] rules out.
#[inline]
pub(crate) fn write_key(out: &mut [u8], prefix: u8, mut n: u64) {
    out[0] = prefix;
    for b in out[1..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// A key in a fixed buffer (no allocation per request).
#[derive(Clone, Copy)]
pub(crate) struct Key {
    buf: [u8; MAX_KEY],
    len: usize,
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Key {
    #[inline]
    pub(crate) fn new(prefix: u8, n: u64, key_size: usize) -> Key {
        let mut k = Key {
            buf: [0; MAX_KEY],
            len: key_size,
        };
        write_key(&mut k.buf[..key_size], prefix, n);
        k
    }

    /// `prefix` then the key [`Key::new`] makes (`prefix` and `key_size`
    /// together at most [`MAX_KEY`]: longer is cut).
    #[inline]
    pub(crate) fn prefixed(prefix: &[u8], c: u8, n: u64, key_size: usize) -> Key {
        let p = prefix.len().min(MAX_KEY - key_size.min(MAX_KEY));
        let mut k = Key {
            buf: [0; MAX_KEY],
            len: p + key_size,
        };
        k.buf[..p].copy_from_slice(&prefix[..p]);
        write_key(&mut k.buf[p..p + key_size], c, n);
        k
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The value stored under `key`: the key repeated and cut to `size` bytes,
/// so every item's value is its own. Appended to `out`.
#[inline]
pub(crate) fn append_value(out: &mut Vec<u8>, key: &[u8], size: usize) {
    let mut left = size;
    while left > 0 {
        let n = left.min(key.len());
        out.extend_from_slice(&key[..n]);
        left -= n;
    }
}

/// Is `value` the one [`append_value`] makes for `key`?
pub(crate) fn value_matches(value: &[u8], key: &[u8]) -> bool {
    value
        .chunks(key.len())
        .all(|chunk| chunk == &key[..chunk.len()])
}

/// A fixed pseudo-random permutation of `0..n` (Fisher–Yates with a seeded
/// generator): rank `r` (0-based) of the popularity distribution is key
/// `perm[r]`, so hot keys are scattered over the key space instead of being
/// `k000…000`, `k000…001`, …
pub(crate) fn permutation(n: u32, seed: u64) -> Vec<u32> {
    let mut perm: Vec<u32> = (0..n).collect();
    let mut rng = SmallRng::seed_from_u64(seed);
    for i in (1..perm.len()).rev() {
        let j = rng.gen_range(0..=i);
        perm.swap(i, j);
    }
    perm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fixed_width() {
        assert_eq!(Key::new(b'k', 42, 16).as_bytes(), b"k000000000000042");
        assert_eq!(Key::new(b's', 0, 4).as_bytes(), b"s000");
        assert!(check_key_size(16, 1_000_000_000_000_000).is_ok());
        assert!(check_key_size(4, 1000).is_ok());
        assert!(check_key_size(4, 1001).is_err());
    }

    #[test]
    fn prefixed_keys() {
        let k = Key::prefixed(b"osmium-bench:", b'k', 42, 16);
        assert_eq!(k.as_bytes(), b"osmium-bench:k000000000000042");
        assert_eq!(
            Key::prefixed(b"", b'k', 42, 16).as_bytes(),
            Key::new(b'k', 42, 16).as_bytes()
        );
    }

    #[test]
    fn values_are_derived_from_keys() {
        let k = Key::new(b'k', 7, 16);
        let mut v = Vec::new();
        append_value(&mut v, k.as_bytes(), 40);
        assert_eq!(v.len(), 40);
        assert!(value_matches(&v, k.as_bytes()));
        assert!(!value_matches(&v, Key::new(b'k', 8, 16).as_bytes()));
    }

    #[test]
    fn permutation_is_a_permutation() {
        let mut p = permutation(1000, 1);
        assert_ne!(p[..10], (0..10).collect::<Vec<u32>>()[..]);
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<u32>>());
    }
}
