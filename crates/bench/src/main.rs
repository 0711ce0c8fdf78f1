//! `osmium-bench`: the command line of the issue-4 ("a denser engine")
//! network benchmarks, which compare osmium with genuine memcached started by
//! this tool in the same run on loopback ports:
//!
//! * `memory`, `retained`: RSS growth per item over a load; items kept when
//!   the load does not fit in `-m` ([`memory`]);
//! * `hitratio`: cache-aside miss ratio under zipf, with and without
//!   one-time scans ([`hitratio`]);
//! * `floor`: the floor server, every get answered with the same value,
//!   nothing cached: the network stack's own cost (issue 5, [`floor`]);
//!   `--io-uring` runs the same answers on an io_uring loop ([`floor_uring`]);
//! * `load`: a load generator, closed loop (connections × threads ×
//!   pipeline depth) or open loop at a fixed rate (`--rate`), reporting
//!   ops/s, latency percentiles and the server's CPU time per request;
//!   `--vs` runs it on memcached, osmium and the floor server in turn, and
//!   `--sla` finds the highest rate within a latency SLA; also the meta
//!   protocol, cache-aside, value-size sweeps and several servers placed
//!   by ketama ([`load`], [`report`], [`ketama`]);
//! * `closed`: a closed-loop sweep of connection counts ([`closed`]);
//! * `ketama`: prints the server libmemcached's ketama puts each key on;
//! * `restart`: warm restart from a memory file (`-e`): restart time and
//!   items back after a graceful stop and after kill -9 ([`restart`]);
//! * `flash`: the flash tier (`-o ext_path=FILE:SIZE`) against memcached's
//!   extstore: items kept and RAM per item, cache-aside miss ratio, GETs
//!   served from flash, per value size ([`flash`]);
//! * `churn`: overwrites with new sizes and deletes: live items kept,
//!   miss ratio and CPU per request while the engine cleans ([`churn`]);
//! * `tls`: against memcached `-Z`, full and resumed handshakes per
//!   core-second and the RAM of an idle TLS connection; `load --tls` runs
//!   the load generator over TLS ([`tls`]);
//! * `hotkeys`: the accuracy of osmium's `stats hotkeys` ([`hotkeys`]);
//! * `density`: items held at the same `-m` (and per flash GB) with
//!   values cut out of the machine's files ([`density`]).
//!
//! Servers: [`servers`]; keys and values: [`keys`]; control connections:
//! [`conn`]; the storage-only criterion benchmarks: `benches/storage.rs`.

mod numbers;
pub use numbers::{median, mib};
mod churn;
mod closed;
mod cluster;
mod conn;
mod density;
mod flash;
mod floor;
mod floor_uring;
mod foreign;
mod hitratio;
mod hotkeys;
mod ketama;
mod keys;
mod load;
mod man;
mod memory;
mod plot;
mod replica_copy;
mod report;
mod resize;
mod restart;
mod servers;
mod targets;
mod tls;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use servers::{Binaries, Kind};

#[derive(Parser)]
#[command(
    name = "osmium-bench",
    about = "osmium benchmarks: osmium against memcached, same run, loopback only; and the floor server"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Resident memory per item: RSS growth over a load of N items.
    Memory(MemoryArgs),
    /// Items retained: load more than fits in -m, count what is kept.
    Retained(RetainedArgs),
    /// Cache-aside miss ratio under zipf, with and without one-time scans.
    Hitratio(HitRatioArgs),
    /// Runs the floor server on 127.0.0.1 (every get answered with the same
    /// value, nothing cached) until killed.
    Floor(floor::FloorArgs),
    /// Load: ops/s, latency percentiles, server CPU per request (closed
    /// loop, or open loop with --rate); --vs compares servers, --sla finds
    /// the highest rate within the SLA.
    Load(Box<LoadArgs>),
    /// Prints which of --targets each key goes to under libmemcached's
    /// ketama (`KEY HOST:PORT` per line).
    Ketama(KetamaArgs),
    /// Warm restart from a memory file (-e): restart time and items back
    /// after a graceful stop (SIGUSR1) and after kill -9.
    Restart(RestartArgs),
    /// Flash tier against memcached's extstore (`-o ext_path=FILE:SIZE`):
    /// items kept and RAM per item, cache-aside miss ratio, GETs served
    /// from flash (throughput, latency, CPU), per value size.
    Flash(Box<FlashArgs>),
    /// osmium-proxy against nutcracker (proxy CPU per request), the cost
    /// of a replicated write (async, sync), the SLA of a three-server ring
    /// behind osmium-proxy against memcached behind nutcracker, and
    /// growing and shrinking a pool under a cache-aside load (resize).
    Cluster(Box<cluster::ClusterArgs>),
    /// Churn (overwrites with new sizes, deletes): live items kept and
    /// evictions, miss ratio over-full, CPU per SET/GET while cleaning.
    Churn(Box<churn::ChurnArgs>),
    Closed(Box<closed::ClosedArgs>), // its help is ClosedArgs' doc comment
    Tls(Box<tls::TlsArgs>),          // its help is TlsArgs' doc comment
    Hotkeys(Box<hotkeys::HotkeysArgs>), // its help is HotkeysArgs' doc comment
    Density(Box<density::DensityArgs>), // its help is DensityArgs' doc comment
}

#[derive(Args)]
struct FlashArgs {
    #[command(flatten)]
    common: Common,
    /// Modes, comma separated (run in this order: density, hitratio,
    /// reads, sizes).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "density,hitratio,reads,sizes"
    )]
    mode: Vec<flash::Mode>,
    /// Memory limit of every server, MB (`-m`).
    #[arg(short = 'm', long, default_value_t = 64)]
    memory: u64,
    /// Size of every server's flash file, memcached's syntax (a whole
    /// number and M, G or T, binary units).
    #[arg(long, default_value = "8G")]
    flash_size: String,
    /// Directory of the flash files, on a disk (not tmpfs) [default: a
    /// fresh directory under /tmp, removed at the end].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// More `-o` options for every server with flash, comma separated
    /// (e.g. `ext_item_size=64,ext_threads=2`).
    #[arg(long, value_delimiter = ',')]
    ext_opts: Vec<String>,
    /// Rounds (the server order alternates; medians are reported).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Item data of density, hitratio and reads, as a multiple of -m.
    #[arg(long, default_value_t = 40.0)]
    data_ratio: f64,
    /// Item data of every size of `sizes`, as a multiple of -m.
    #[arg(long, default_value_t = 8.0)]
    sizes_ratio: f64,
    /// Value sizes of density and sizes, bytes [default: density
    /// 100,1024,4096; sizes 64 B to 1 MiB, doubling].
    #[arg(long, value_delimiter = ',')]
    value_sizes: Vec<usize>,
    /// Pace of every load, MB/s of item data (0: as fast as the server
    /// takes it).
    #[arg(long, default_value_t = 40.0)]
    load_mbps: f64,
    /// Connections of the density sweep.
    #[arg(long, default_value_t = 4)]
    sweep_conns: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// hitratio: keys requested, uniform, zipf:S or hotspot:FRACTION:SHARE.
    #[arg(long, default_value = "zipf:0.99")]
    dist: load::KeyDist,
    /// hitratio: smallest value (sizes log-uniform, one per key).
    #[arg(long, default_value_t = 100)]
    min_value: usize,
    /// hitratio: largest value.
    #[arg(long, default_value_t = 4096)]
    max_value: usize,
    /// hitratio: gets of the warm-up (not measured).
    #[arg(long, default_value_t = 5_000_000)]
    warmup_requests: u64,
    /// hitratio: gets measured.
    #[arg(long, default_value_t = 5_000_000)]
    requests: u64,
    /// hitratio: connections, one thread each.
    #[arg(long, default_value_t = 4)]
    hitratio_conns: usize,
    /// hitratio: gets per pipelined batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// hitratio: gets per second in all, paced per batch (0: as fast as
    /// the server answers).
    #[arg(long, default_value_t = 100_000.0)]
    hitratio_rate: f64,
    /// reads: value size.
    #[arg(long, default_value_t = 4096)]
    read_value_size: usize,
    /// reads, sizes: connections (depth 1 each).
    #[arg(long, default_value_t = 16)]
    read_conns: usize,
    /// reads, sizes: measured seconds per run.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// reads, sizes: unmeasured seconds before each run (after the page
    /// cache is dropped).
    #[arg(long, default_value_t = 0.0)]
    read_warmup: f64,
    /// reads, sizes: how the flash file's page cache is dropped before
    /// each run.
    #[arg(long, value_enum, default_value_t = flash::DropCache::Auto)]
    drop_cache: flash::DropCache,
}

#[derive(Args)]
struct RestartArgs {
    #[command(flatten)]
    common: Common,
    /// Items to load.
    #[arg(long, default_value_t = 1_000_000)]
    items: u64,
    /// Fraction of the items whose value is log-uniform 1 KiB–64 KiB (the
    /// others: log-uniform 16 B–4 KiB).
    #[arg(long, default_value_t = 0.01)]
    large_fraction: f64,
    /// Seed of the value sizes and bytes (the same items for every server).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Memory limit of each server, MB (`-m`) [default: 2048, or more when
    /// the items need it].
    #[arg(short = 'm', long)]
    memory: Option<u64>,
    /// Directory of the memory files (`-e DIR/<server>-<pid>.mem`); memcached
    /// wants tmpfs.
    #[arg(long, default_value = "/dev/shm")]
    dir: PathBuf,
    /// Rounds (each: every server in --servers order, one at a time).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Loader and sweep connections.
    #[arg(long, default_value_t = 4)]
    conns: usize,
}

#[derive(Args)]
struct KetamaArgs {
    /// The servers, in the order the client is given them.
    #[arg(
        long,
        value_name = "HOST:PORT,...",
        value_delimiter = ',',
        required = true
    )]
    targets: Vec<String>,
    #[arg(long, value_enum, default_value_t = ketama::Variant::Default)]
    ketama: ketama::Variant,
    /// The keys.
    keys: Vec<String>,
}

/// The servers of a `load` without --vs: --targets, else --addr.
fn load_targets(a: &LoadArgs) -> Result<load::Targets, String> {
    if !a.targets.is_empty() {
        let servers = targets::resolve(&a.targets)?;
        return Ok(load::Targets::ketama(&servers, a.pids.clone(), a.ketama));
    }
    let addr = a.addr.ok_or("--addr, --targets or --vs is needed")?;
    Ok(load::Targets::one(addr, a.pid))
}

#[derive(Args)]
struct LoadArgs {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    tls: tls::LoadTlsArgs,
    #[command(flatten)]
    foreign: foreign::ForeignArgs,
    /// Start the servers of --servers (add `floor` for the floor server)
    /// and compare them, alternating runs; without it, load --addr.
    #[arg(long)]
    vs: bool,
    /// A running server to load (without --vs).
    #[arg(long, value_name = "HOST:PORT", required_unless_present_any = ["vs", "targets"])]
    addr: Option<std::net::SocketAddr>,
    /// Its PID, for its CPU time per request (without --vs).
    #[arg(long)]
    pid: Option<u32>,
    /// Several running servers: keys spread over them as libmemcached's
    /// ketama does (see --ketama); instead of --addr.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',', conflicts_with_all = ["addr", "vs"])]
    targets: Vec<String>,
    /// Their PIDs, for their CPU time per request (summed).
    #[arg(long, value_delimiter = ',')]
    pids: Vec<u32>,
    /// The libmemcached ketama flavour of --targets.
    #[arg(long, value_enum, default_value_t = ketama::Variant::Default)]
    ketama: ketama::Variant,
    /// Client connections.
    #[arg(long, default_value_t = 8)]
    conns: usize,
    /// Generator threads (each a poll loop over its connections).
    #[arg(long, default_value_t = 1)]
    gen_threads: usize,
    /// Requests in flight per connection, sent in one write.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Unmeasured seconds before each run.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Servers of each kind --vs starts (each with --memory); a run spreads
    /// the keys over them with ketama, as --targets does.
    #[arg(long, default_value_t = 1)]
    instances: usize,
    /// Rounds of --vs (the order alternates; medians are reported).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Distinct keys (drawn by --dist).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    #[arg(long, default_value_t = 64)]
    value_size: usize,
    /// Run once per value size (bytes, comma separated), one table with a
    /// row per size (and server); keys are cut to what fits in half of
    /// --memory.
    #[arg(long, value_delimiter = ',', conflicts_with = "sweep")]
    value_sizes: Vec<usize>,
    /// --value-sizes 64,128,...,1048576 (64 B to 1 MiB, doubling).
    #[arg(long)]
    sweep: bool,
    /// Fraction of requests that are gets (the rest are sets).
    #[arg(long, default_value_t = 1.0)]
    get_ratio: f64,
    #[arg(long, value_enum, default_value_t = load::Protocol::Text)]
    protocol: load::Protocol,
    /// Set every key before measuring (so gets hit); not with
    /// --cache-aside, which starts from an empty cache.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    preload: bool,
    /// Cache-aside: every get that misses is followed by a set of its key
    /// (as an application fills its cache); reports the client's miss
    /// ratio. The cache starts empty (no preload).
    #[arg(long)]
    cache_aside: bool,
    /// Open loop (--rate, --rates, --sla): spin on the poll instead of
    /// sleeping on a timerfd between sends (one core per generator thread;
    /// sends leave on schedule, without the generator's wake-up latency).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    busy_poll: bool,
    /// Closed loop: send a connection's next requests only after every
    /// reply of the generator's poll is read, as libevent's bufferevents
    /// do (memtier_benchmark, memaslap), instead of as soon as its reply
    /// is in: the generator writes in bursts.
    #[arg(long)]
    deferred_sends: bool,
    /// Memory limit of each server, MB (`-m`, with --vs).
    #[arg(long, default_value_t = 1024)]
    memory: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keys requested: uniform, zipf:S or hotspot:FRACTION:SHARE.
    #[arg(long, default_value = "uniform")]
    dist: load::KeyDist,
    /// Open loop at this many requests per second in all (latency from
    /// each request's intended send time); without it, closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Open loop: evenly spaced requests (each connection every
    /// conns/rate seconds), or a Poisson process of the offered rate.
    #[arg(long, value_enum, default_value_t = load::Arrivals::Uniform)]
    arrivals: load::Arrivals,
    /// Open loop at each of these rates in turn (req/s, comma separated):
    /// a row per rate; with --plot, throughput and p99 against offered
    /// rate.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["rate", "sla", "sweep", "value_sizes"])]
    rates: Vec<f64>,
    /// With --vs: server CPU per request against offered rate. A closed-loop
    /// run finds every server's saturation (the first server's median is
    /// the reference), then every server runs open loop (--arrivals) at
    /// each of these percentages of it (comma separated), alternated; with
    /// --plot, DIR/cpu-sweep.svg.
    #[arg(long, value_delimiter = ',', requires = "vs", conflicts_with_all = ["rate", "rates", "sla", "sweep", "value_sizes"])]
    cpu_sweep: Vec<f64>,
    /// Write SVG charts into this directory: the latency CDF of every
    /// server (latency-cdf.svg; per size with a sweep) and, with --rates,
    /// throughput and p99 against offered rate (rates.svg); with --sla,
    /// the same for its bisection steps (sla.svg).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Find the highest rate within the SLA, for random keys (--dist) and
    /// hot keys (--hot), and print Overall = 0.8 x random + 0.2 x hot.
    #[arg(long)]
    sla: bool,
    /// SLA latency bound, microseconds.
    #[arg(long, default_value_t = 1000.0)]
    sla_bound_us: f64,
    /// SLA fraction of requests within the bound.
    #[arg(long, default_value_t = 0.995)]
    sla_fraction: f64,
    /// Hot-key distribution of --sla.
    #[arg(long, default_value = "hotspot:0.001:0.9")]
    hot: load::KeyDist,
    /// Steps of each --sla search (more when its growth needed them).
    #[arg(long, default_value_t = 7)]
    sla_steps: usize,
    /// Measured seconds per --sla step.
    #[arg(long, default_value_t = 2.0)]
    sla_step_duration: f64,
    /// With --vs: start every server pinned to one CPU with -t 1 (whatever
    /// --threads says) and pin the generator to another (the first and
    /// second CPU this process may use), so that each has a core of its
    /// own: `load --vs --sla --pin` is the pinned SLA comparison.
    #[arg(long, requires = "vs")]
    pin: bool,
    /// Times an --sla step that went over the bound is run again before
    /// the rate counts as over (a pause of the machine, not of the server,
    /// must not decide the search; both servers get the same retries).
    #[arg(long, default_value_t = 1)]
    sla_retries: usize,
}

/// Options every subcommand has.
#[derive(Args, Clone)]
struct Common {
    /// The osmium binary [default: osmium beside this executable, else
    /// target/release/osmium].
    #[arg(long, value_name = "PATH")]
    osmium: Option<PathBuf>,
    /// A second osmium binary, run as the server `osmium-b` (`--servers
    /// osmium,osmium-b`: two builds compared in one alternated run).
    #[arg(long, value_name = "PATH")]
    osmium_b: Option<PathBuf>,
    /// More arguments for the `osmium-b` server, split at spaces (e.g.
    /// `--osmium-b-args "-e /dev/shm/b.mem"` with `--osmium-b` the same
    /// binary: one build with and without a memory file).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    osmium_b_args: Option<String>,
    /// The memcached binary [default: the repository's
    /// .oracle/memcached-1.6.45/memcached if built, else /usr/bin/memcached].
    #[arg(long, value_name = "PATH")]
    memcached: Option<PathBuf>,
    /// Which servers to run, in this order.
    #[arg(long, value_delimiter = ',', default_value = "memcached,osmium")]
    servers: Vec<ServerArg>,
    /// Worker threads of each server (`-t`).
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ServerArg {
    Memcached,
    Osmium,
    /// The osmium binary of --osmium-b.
    OsmiumB,
    /// The floor server (`load --vs` only).
    Floor,
    /// The floor server on io_uring (`floor --io-uring`; `load --vs` only).
    FloorUring,
    /// The same with a submission-queue polling thread (`floor --io-uring
    /// --sqpoll`; `load --vs` only).
    FloorUringSqpoll,
    /// The floor server on io_uring with multishot recv (`floor --io-uring
    /// --recv-multishot`; `load --vs` only).
    FloorUringMs,
}

impl From<ServerArg> for Kind {
    fn from(s: ServerArg) -> Kind {
        match s {
            ServerArg::Memcached => Kind::Memcached,
            ServerArg::Osmium => Kind::Osmium,
            ServerArg::OsmiumB => Kind::OsmiumB,
            ServerArg::Floor => Kind::Floor,
            ServerArg::FloorUring => Kind::FloorUring,
            ServerArg::FloorUringSqpoll => Kind::FloorUringSqpoll,
            ServerArg::FloorUringMs => Kind::FloorUringMs,
        }
    }
}

#[derive(Args)]
struct MemoryArgs {
    #[command(flatten)]
    common: Common,
    /// Items to load.
    #[arg(long, default_value_t = 1_000_000)]
    items: u64,
    /// Memory limit of each server, MB (`-m`).
    #[arg(long, default_value_t = 1024)]
    memory: u64,
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    #[arg(long, default_value_t = 64)]
    value_size: usize,
    /// Rounds; the order of the servers alternates (A B, B A, …) and the
    /// median ratio is reported.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Loader connections.
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// Sets per write on a connection.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
}

#[derive(Args)]
struct RetainedArgs {
    #[command(flatten)]
    common: Common,
    /// Items to load.
    #[arg(long, default_value_t = 5_000_000)]
    items: u64,
    /// Memory limit of each server, MB (`-m`).
    #[arg(long, default_value_t = 256)]
    memory: u64,
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    #[arg(long, default_value_t = 64)]
    value_size: usize,
    /// Keys (spread evenly over all items) fetched after the load to
    /// estimate what is retained; 0 to skip.
    #[arg(long, default_value_t = 100_000)]
    sample: u64,
    /// Loader connections.
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// Sets per write on a connection.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ScanArg {
    Both,
    On,
    Off,
}

#[derive(Args)]
struct HitRatioArgs {
    #[command(flatten)]
    common: Common,
    /// Distinct keys of the zipf distribution.
    #[arg(long, default_value_t = 10_000_000)]
    keys: u64,
    /// Zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    alpha: f64,
    /// Memory limits to run, MB (`-m`), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    memory: Vec<u64>,
    /// Variants: without scans (off), with scans (on), or both.
    #[arg(long, value_enum, default_value_t = ScanArg::Both)]
    scan: ScanArg,
    /// Keys per one-time scan.
    #[arg(long, default_value_t = 1_000_000)]
    scan_len: u64,
    /// Zipf requests per scan in the measured phase (a scan starts after
    /// every this many, the first after half of it).
    #[arg(long, default_value_t = 5_000_000)]
    scan_every: u64,
    /// Warm-up requests (zipf only), not measured. The default fills and
    /// churns both caches at -m 256 (10M requests reach only ~2.05M
    /// distinct keys, fewer than osmium holds there).
    #[arg(long, default_value_t = 50_000_000)]
    warmup: u64,
    /// Measured zipf requests (scan requests come on top).
    #[arg(long, default_value_t = 10_000_000)]
    requests: u64,
    /// Client connections, one thread each.
    #[arg(long, default_value_t = 4)]
    conns: usize,
    /// Gets per pipelined batch.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Seed of the rank permutation and of every connection's generator
    /// (the same for every server).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    #[arg(long, default_value_t = 64)]
    value_size: usize,
}

/// The binaries of the requested servers; fails before anything runs if
/// one is missing.
fn binaries(c: &Common) -> Result<Binaries, String> {
    let mut bins = Binaries::resolve(c.osmium.clone(), c.memcached.clone());
    bins.osmium_b = c.osmium_b.clone();
    bins.osmium_b_args = c
        .osmium_b_args
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(String::from)
        .collect();
    for kind in kinds(c) {
        bins.check(kind)?;
        eprintln!("{kind}: {}", bins.path(kind).display());
    }
    Ok(bins)
}

/// The servers of a memory or hit-ratio benchmark (not the floor server,
/// which stores nothing).
fn cache_kinds(c: &Common) -> Result<Vec<Kind>, String> {
    let k = kinds(c);
    if k.iter().any(|k| k.is_floor()) {
        return Err("the floor server stores nothing: it is only for `load --vs`".into());
    }
    Ok(k)
}

fn kinds(c: &Common) -> Vec<Kind> {
    let mut out: Vec<Kind> = Vec::new();
    for &s in &c.servers {
        let k = Kind::from(s);
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

fn run(cli: Cli) -> Result<bool, String> {
    if let Cmd::Floor(a) = &cli.command {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], a.port));
        return if a.io_uring {
            floor_uring::run(addr, a.value_size, a.sqpoll, a.recv_multishot)
        } else {
            floor::run(addr, a.value_size)
        }
        .map(|()| true);
    }
    if let Cmd::Ketama(a) = &cli.command {
        let servers = targets::resolve(&a.targets)?;
        let names: Vec<(String, u16)> = servers.iter().map(|(h, p, _)| (h.clone(), *p)).collect();
        let continuum = a.ketama.continuum(&names);
        for key in &a.keys {
            let (host, port, _) = &servers[continuum.server_of(key.as_bytes())];
            println!("{key} {host}:{port}");
        }
        return Ok(true);
    }
    servers::install_signal_handler()?;
    match cli.command {
        Cmd::Floor(_) | Cmd::Ketama(_) => unreachable!("handled above"),
        Cmd::Flash(a) => {
            let bins = binaries(&a.common)?;
            let flash_bytes = flash::parse_flash_size(&a.flash_size)?;
            let sizes = |default: Vec<usize>| {
                if a.value_sizes.is_empty() {
                    default
                } else {
                    a.value_sizes.clone()
                }
            };
            flash::run(
                &bins,
                &flash::FlashOpts {
                    modes: a.mode.clone(),
                    servers: cache_kinds(&a.common)?,
                    threads: a.common.threads,
                    memory_mb: a.memory,
                    flash_size: a.flash_size.clone(),
                    flash_bytes,
                    dir: a.dir.clone(),
                    ext_opts: a.ext_opts.clone(),
                    rounds: a.rounds,
                    data_ratio: a.data_ratio,
                    sizes_ratio: a.sizes_ratio,
                    density_sizes: sizes(vec![100, 1024, 4096]),
                    sweep_sizes: sizes(load::sweep_sizes()),
                    load_mbps: a.load_mbps.max(0.0),
                    sweep_conns: a.sweep_conns.max(1),
                    seed: a.seed,
                    dist: a.dist,
                    min_value: a.min_value,
                    max_value: a.max_value,
                    warmup_requests: a.warmup_requests,
                    requests: a.requests,
                    hr_conns: a.hitratio_conns.max(1),
                    batch: a.batch.max(1),
                    hr_rate: a.hitratio_rate.max(0.0),
                    read_size: a.read_value_size,
                    read_conns: a.read_conns.max(1),
                    duration: a.duration,
                    warmup: a.read_warmup,
                    drop_cache: a.drop_cache,
                    json: a.common.json,
                },
            )
        }
        Cmd::Cluster(a) => cluster::run(&a),
        Cmd::Churn(a) => churn::run(&a),
        Cmd::Closed(a) => closed::run(&a),
        Cmd::Tls(a) => tls::run(&a),
        Cmd::Hotkeys(a) => hotkeys::run(&a),
        Cmd::Density(a) => density::run(&a),
        Cmd::Restart(a) => {
            let bins = binaries(&a.common)?;
            restart::run(
                &bins,
                &restart::RestartOpts {
                    items: a.items,
                    large_fraction: a.large_fraction,
                    seed: a.seed,
                    memory_mb: a.memory,
                    threads: a.common.threads,
                    rounds: a.rounds.max(1),
                    dir: a.dir,
                    conns: a.conns.max(1),
                    servers: cache_kinds(&a.common)?,
                    json: a.common.json,
                },
            )
        }
        Cmd::Load(a) => {
            let tls = tls::LoadTls::setup(&a.tls, &kinds(&a.common), a.vs)?;
            let w = load::Workload {
                conns: a.conns.max(1),
                threads: a.gen_threads.max(1),
                depth: a.depth.max(1),
                duration: std::time::Duration::from_secs_f64(a.duration.max(0.1)),
                warmup: std::time::Duration::from_secs_f64(a.warmup.max(0.0)),
                keys: a.keys.max(1),
                key_size: a.key_size,
                value_size: a.value_size,
                get_ratio: a.get_ratio,
                protocol: a.protocol,
                seed: a.seed,
                dist: a.dist,
                rate: a.rate,
                arrivals: a.arrivals,
                quantile: a.sla_fraction.clamp(0.0, 1.0),
                cache_aside: a.cache_aside,
                busy_poll: a.busy_poll,
                deferred_sends: a.deferred_sends,
                tls: tls.client.clone(),
                key_prefix: a.foreign.key_prefix(!a.vs),
            };
            let preload = a.preload && !a.cache_aside;
            if !a.vs && (preload || a.cache_aside || a.get_ratio < 1.0) {
                let servers = load_targets(&a)?.name();
                a.foreign.confirm(&servers, w.keys, &w.key_prefix)?;
            }
            let sla = load::SlaOpts {
                bound_us: a.sla_bound_us,
                hot: a.hot,
                steps: a.sla_steps,
                step_duration: std::time::Duration::from_secs_f64(a.sla_step_duration.max(0.1)),
                retries: a.sla_retries,
            };
            let pin = if a.pin {
                let p = load::Pin::apply()?;
                eprintln!(
                    "--pin: servers on CPU {} with -t 1, generator on CPU {}",
                    p.server, p.generator
                );
                Some(p)
            } else {
                None
            };
            let vs = load::VsOpts {
                memory_mb: a.memory,
                threads: if pin.is_some() { 1 } else { a.common.threads },
                pin,
                rounds: a.rounds.max(1),
                preload,
                json: a.common.json,
                plot: a.plot.clone(),
                instances: a.instances.max(1),
                server_args: tls.server_args.clone(),
            };
            let sizes = if a.sweep {
                load::sweep_sizes()
            } else {
                a.value_sizes.clone()
            };
            if !sizes.is_empty() && a.sla {
                return Err("--sla does not sweep value sizes".into());
            }
            if !sizes.is_empty() && a.vs {
                let bins = binaries(&a.common)?;
                load::run_sweep_vs(&bins, &kinds(&a.common), &w, &vs, &sizes)
            } else if !sizes.is_empty() {
                let target = load_targets(&a)?;
                load::run_sweep(
                    &target,
                    &w,
                    &sizes,
                    a.memory,
                    preload,
                    a.common.json,
                    a.plot.as_deref(),
                )
            } else if !a.cpu_sweep.is_empty() {
                let bins = binaries(&a.common)?;
                load::run_cpu_sweep_vs(&bins, &kinds(&a.common), &w, &vs, &a.cpu_sweep)
            } else if !a.rates.is_empty() && a.vs {
                let bins = binaries(&a.common)?;
                load::run_rates_vs(&bins, &kinds(&a.common), &w, &vs, &a.rates)
            } else if !a.rates.is_empty() {
                let target = load_targets(&a)?;
                if preload {
                    load::preload(&target, &w)?;
                }
                load::run_rates(&target, &w, &a.rates, a.common.json, a.plot.as_deref())
            } else if a.sla && a.vs {
                let bins = binaries(&a.common)?;
                load::run_sla(&bins, &kinds(&a.common), &w, &vs, &sla)
            } else if a.sla {
                let target = load_targets(&a)?;
                if preload {
                    load::preload(&target, &w)?;
                }
                let random_search = load::sla_rate(&target, &w, &sla)?;
                let hot_w = load::Workload {
                    dist: a.hot,
                    ..w.clone()
                };
                let hot_search = load::sla_rate(&target, &hot_w, &sla)?;
                load::plot_sla(
                    a.plot.as_deref(),
                    &format!("SLA steps: {}", target.name()),
                    &[
                        ("random".to_string(), &random_search),
                        ("hot".to_string(), &hot_search),
                    ],
                )?;
                let (random, hot) = (random_search.rate, hot_search.rate);
                let overall = 0.8 * random + 0.2 * hot;
                if a.common.json {
                    let row = load::sla_json(
                        &target.name(),
                        random,
                        hot,
                        None,
                        random_search.best.as_ref(),
                    );
                    println!("{}", serde_json::Value::Array(vec![row]));
                } else {
                    println!("random {random:.0} req/s  hot {hot:.0} req/s  overall {overall:.0}");
                }
                Ok(true)
            } else if a.vs {
                let bins = binaries(&a.common)?;
                load::run_vs(&bins, &kinds(&a.common), &w, &vs)
            } else {
                let target = load_targets(&a)?;
                if preload {
                    load::preload(&target, &w)?;
                }
                let o = load::run(&target, &w)?;
                let summary = report::Summary::of(&target.name(), std::slice::from_ref(&o));
                load::plot_cdf(
                    a.plot.as_deref(),
                    "latency-cdf.svg",
                    &format!(
                        "{} connections, depth {}, {:?} protocol",
                        w.conns, w.depth, w.protocol
                    ),
                    std::slice::from_ref(&summary),
                )?;
                if a.common.json {
                    let mut row = summary.json(None, None);
                    if let Some(rate) = w.rate {
                        row.insert("offered_rps".into(), rate.into());
                    }
                    println!("{}", serde_json::Value::Array(vec![row.into()]));
                    return Ok(true);
                }
                println!(
                    "{:.0} ops/s  p50 {:.1} us  p99 {:.1} us  p99.9 {:.1} us  cpu {} us/req  misses {} of {} gets  miss ratio {:.4}  fills {}",
                    o.ops_per_sec(),
                    o.p50_us,
                    o.p99_us,
                    o.p999_us,
                    o.cpu_us_per_req.map_or("-".into(), |c| format!("{c:.2}")),
                    o.misses,
                    o.gets,
                    o.miss_ratio(),
                    o.fills
                );
                Ok(true)
            }
        }
        Cmd::Memory(a) => {
            let bins = binaries(&a.common)?;
            memory::run_memory(
                &bins,
                &memory::MemoryOpts {
                    spec: memory::LoadSpec {
                        items: a.items,
                        key_size: a.key_size,
                        value_size: a.value_size,
                        conns: a.conns.max(1),
                        batch: a.batch.max(1),
                    },
                    memory_mb: a.memory,
                    threads: a.common.threads,
                    rounds: a.rounds.max(1),
                    servers: cache_kinds(&a.common)?,
                    json: a.common.json,
                },
            )
        }
        Cmd::Retained(a) => {
            let bins = binaries(&a.common)?;
            memory::run_retained(
                &bins,
                &memory::RetainedOpts {
                    spec: memory::LoadSpec {
                        items: a.items,
                        key_size: a.key_size,
                        value_size: a.value_size,
                        conns: a.conns.max(1),
                        batch: a.batch.max(1),
                    },
                    memory_mb: a.memory,
                    threads: a.common.threads,
                    sample: a.sample,
                    servers: cache_kinds(&a.common)?,
                    json: a.common.json,
                },
            )
        }
        Cmd::Hitratio(a) => {
            let bins = binaries(&a.common)?;
            let variants = match a.scan {
                ScanArg::Both => vec![hitratio::Variant::Zipf, hitratio::Variant::Scan],
                ScanArg::On => vec![hitratio::Variant::Scan],
                ScanArg::Off => vec![hitratio::Variant::Zipf],
            };
            hitratio::run(
                &bins,
                &hitratio::HitRatioOpts {
                    keys: a.keys,
                    alpha: a.alpha,
                    memory_mb: a.memory,
                    variants,
                    scan_len: a.scan_len,
                    scan_every: a.scan_every,
                    warmup: a.warmup,
                    requests: a.requests,
                    conns: a.conns,
                    batch: a.batch,
                    seed: a.seed,
                    key_size: a.key_size,
                    value_size: a.value_size,
                    threads: a.common.threads,
                    servers: cache_kinds(&a.common)?,
                    json: a.common.json,
                },
            )
        }
    }
}

/// Exit status: 0 when every server was measured and behaved, 1 when a
/// server returned wrong data or lost items it should have kept, 2 on an
/// error (a server would not start, died, or a connection failed).
fn main() -> ExitCode {
    if let Some(code) = man::generate::<Cli>() {
        return code;
    }
    let result = run(Cli::parse());
    // A run cut short by Ctrl-C ends as the signal handler says.
    servers::wait_if_signalled();
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("osmium-bench: a server misbehaved (see the report)");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("osmium-bench: {e}");
            ExitCode::from(2)
        }
    }
}
