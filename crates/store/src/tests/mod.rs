//! Unit tests of the engine's semantics, eviction and concurrency, one
//! module per concern; the helpers here build stores and items.

mod compact;
mod concurrency;
mod counter;
mod dicts;
mod dump;
mod evict;
mod flash;
mod flash_pack;
mod flush;
mod handover;
mod kept_pins;
mod pack;
mod packed;
mod promote;
mod read;
mod remove;
mod restart;
mod write;

pub(super) use crate::index::{hash_key, shard_of};
pub(super) use crate::item::ItemView;
pub(super) use crate::*;
pub(super) use std::sync::atomic::Ordering;
pub(super) use std::sync::Arc;

/// `Store::store` with positional arguments, for brevity.
#[allow(clippy::too_many_arguments)]
fn put(
    s: &Store,
    head: usize,
    mode: StoreMode,
    key: &[u8],
    flags: u32,
    exptime: u32,
    value: &[u8],
    cas: u64,
) -> (StoreStatus, u64) {
    s.store(
        head,
        &Write {
            mode,
            key,
            flags,
            exptime,
            value,
            cas,
            ..Write::default()
        },
    )
}

fn store() -> Store {
    Store::new(StoreConfig::default())
}

/// A store of `memory_limit` bytes with `heads` write heads, to share
/// between threads.
fn shared_store(memory_limit: usize, heads: usize) -> Arc<Store> {
    Arc::new(Store::new(StoreConfig {
        memory_limit,
        write_heads: heads,
        ..StoreConfig::default()
    }))
}

fn get(s: &Store, key: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    match s.get(key, None, |it| {
        (it.value().to_vec().unwrap(), it.flags(), it.cas())
    }) {
        Lookup::Hit(v) => Some(v),
        _ => None,
    }
}

fn set(s: &Store, mode: StoreMode, key: &[u8], value: &[u8], cas: u64) -> StoreStatus {
    put(s, 0, mode, key, 0, 0, value, cas).0
}

/// Sets `{prefix}0` .. `{prefix}{n-1}` to `value` through head 0, each
/// of which must be stored.
fn fill(s: &Store, prefix: &str, n: u32, exptime: u32, value: &[u8]) {
    for i in 0..n {
        let key = format!("{prefix}{i}");
        let (status, _) = put(s, 0, StoreMode::Set, key.as_bytes(), 0, exptime, value, 0);
        assert_eq!(status, StoreStatus::Stored, "{key}");
    }
}

/// Stores `k0` .. `k{n-1}`, key `ki` with flags `i` and the value
/// `ki-i-` followed by `i` bytes of `y` (the shape the concurrency tests
/// check what they read against).
fn preload_numbered(s: &Store, n: u32) {
    for i in 0..n {
        let key = format!("k{i}");
        let value = format!("{key}-{i}-{}", "y".repeat(i as usize));
        put(
            s,
            0,
            StoreMode::Set,
            key.as_bytes(),
            i,
            0,
            value.as_bytes(),
            0,
        );
    }
}
