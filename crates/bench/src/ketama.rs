//! The libmemcached ketama flavours `--ketama` names; the placement itself
//! is osmium-placement's (`osmium_placement::ring::libmemcached`), which
//! osmium-proxy's `distribution: libmemcached` uses too.

pub(crate) use osmium_placement::ring::libmemcached::{Continuum, KeyHash};

/// Which of libmemcached's ketama flavours (`load --ketama`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Variant {
    /// `MEMCACHED_BEHAVIOR_KETAMA` alone (pylibmc `{"ketama": True}`):
    /// one-at-a-time hashes, 100 points per server.
    Default,
    /// `MEMCACHED_BEHAVIOR_KETAMA` with `MEMCACHED_BEHAVIOR_HASH` MD5
    /// (pylibmc `{"ketama": True, "hash": "md5"}`).
    Md5,
    /// `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED` (pylibmc
    /// `{"ketama_weighted": True}`), equal weights.
    Weighted,
}

impl Variant {
    /// The continuum of this flavour over `servers`.
    pub(crate) fn continuum(self, servers: &[(String, u16)]) -> Continuum {
        match self {
            Variant::Default => Continuum::new(servers, KeyHash::OneAtATime),
            Variant::Md5 => Continuum::new(servers, KeyHash::Md5),
            Variant::Weighted => Continuum::weighted(servers),
        }
    }
}
