//! osmium-placement: which server of a pool a key belongs to, exactly as
//! nutcracker 0.5.0 and libmemcached place it. `hash`: nutcracker's key
//! hash functions; `ring`: a pool's placement (`Ring`) built from its
//! distribution, hash, hash tag and servers (`PoolSpec`), and what a ring
//! change moves (`ring::moved_ranges`); `filter`: the key filter of
//! osmium's `lru_crawler mgdump`, parsed for the server and written for
//! the proxy (`filter::filter_commands`). It knows no
//! configuration file and no network: osmium-proxy converts its YAML pools
//! into a `PoolSpec`, osmium-bench builds libmemcached continuums, and the
//! osmium server hashes keys with the same functions for the range-filtered
//! dump.

pub mod filter;
pub mod hash;
pub mod ring;
