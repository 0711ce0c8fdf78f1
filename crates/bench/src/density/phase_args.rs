//! The flags of `osmium-bench density --phases` ([`PhaseArgs`]): which
//! phases run after each fill and how long each is.

/// A phase of `--phases`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Phase {
    /// A zipf cache-aside replay over the keys the fill sent: miss ratio.
    Replay,
    /// Closed-loop GETs of hot and of cold (packed) keys: latency, CPU.
    Gets,
    /// The fill's CPU per SET; depth-1 SETs: latency, CPU.
    Sets,
}

/// The phases' flags.
#[derive(clap::Args, Clone)]
pub(crate) struct PhaseArgs {
    /// Phases after each fill, comma separated: replay (a zipf cache-aside
    /// replay over the keys the fill sent, streams drawn once and
    /// replayed to every server: miss ratio), gets (closed-loop GETs, one
    /// at a time, of hot keys, the last 1 % written, and of as many cold
    /// ones, the oldest held with text values, packed with
    /// compression=cold: p50/p99/p999 and the server's CPU per GET), sets
    /// (the server's CPU per SET of the fill, the cleaner's packing
    /// included; then depth-1 SETs of the hot keys: latency and CPU).
    #[arg(long, value_delimiter = ',')]
    pub phases: Vec<Phase>,
    /// replay: measured requests (gets, and a set for each miss).
    #[arg(long, default_value_t = 1_000_000)]
    pub replay_requests: u64,
    /// replay: warm-up requests before them, not measured.
    #[arg(long, default_value_t = 500_000)]
    pub replay_warmup: u64,
    /// replay: connections, one thread each.
    #[arg(long, default_value_t = 4)]
    pub replay_conns: usize,
    /// replay: the zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    pub replay_alpha: f64,
    /// replay: requests per second over all connections, each
    /// connection's batches evenly spaced (as a cache-aside's misses come
    /// at the database's speed); 0: as fast as the server answers.
    #[arg(long, default_value_t = 0)]
    pub replay_rate: u64,
    /// gets: GETs measured on each key set (hot, cold).
    #[arg(long, default_value_t = 200_000)]
    pub gets: u64,
    /// sets: depth-1 SETs measured (0: only the fill's CPU per SET).
    #[arg(long, default_value_t = 20_000)]
    pub sets: u64,
}

impl PhaseArgs {
    pub(super) fn has(&self, p: Phase) -> bool {
        self.phases.contains(&p)
    }
}
