//! `cluster`: osmium's cluster parts against what the field runs today,
//! in one run, alternated:
//!
//! * `proxy`: osmium-proxy against nutcracker (twemproxy), the same
//!   nutcracker YAML (`distribution: ketama`) in front of the same three
//!   osmium servers: the proxy's own CPU per request (from `/proc`), text,
//!   at depth 1 and 16;
//! * `replication`: what a replicated write costs: SETs to a server with
//!   `--replicate-to` a second one, `--replication async` and `sync`,
//!   against an unreplicated server (the writer's CPU and the replica's,
//!   per write, and the latency a client sees); over plain links (Noise
//!   frames) and TLS links (`--links plain,tls`: `-Z`, the clients on a
//!   `notls:` listener), and for a second osmium build alongside
//!   (`--osmium-b`), every variant alternated round by round;
//! * `sla`: seed 002's metric, the highest GET rate with 99.5 % of requests
//!   within 1 ms (random and hot keys, Overall = 0.8 × random + 0.2 × hot),
//!   for three osmium servers replicating in a ring behind osmium-proxy
//!   against three memcached 1.6.45 servers behind nutcracker;
//! * `copy`: what sync writes wait while a returning replica gets its full
//!   copy (`replica_copy`);
//! * `resize`: a pool grown by a server then shrunk by one under a
//!   cache-aside load, osmium-proxy's reload with and without warm moves
//!   against a restarted nutcracker ([`crate::resize`]).
//!
//! ```text
//!   generator ──▶ proxy (osmium-proxy | nutcracker) ──▶ server 0, 1, 2
//!                   (its CPU measured)                    (ring: 0 → 1 → 2 → 0)
//! ```

use std::path::PathBuf;
use std::time::Duration;

use osmium_test_harness::{free_port, Nutcracker, Proxy, Running};

use crate::load::{self, KeyDist, Protocol, SlaOpts, Targets, Workload};
use crate::servers::{cache_server, Binaries};

/// A replication link's kind (`--links`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LinkKind {
    Plain,
    Tls,
}

/// What `cluster` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    Proxy,
    Replication,
    Sla,
    Copy,
    Resize,
}

#[derive(clap::Args)]
pub(crate) struct ClusterArgs {
    /// Modes, comma separated, run in this order (`copy` and `resize` only
    /// when asked).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "proxy,replication,sla"
    )]
    mode: Vec<Mode>,
    /// The osmium binary [default: osmium beside this executable].
    #[arg(long, value_name = "PATH")]
    osmium: Option<PathBuf>,
    /// The osmium-proxy binary [default: osmium-proxy beside this
    /// executable].
    #[arg(long, value_name = "PATH")]
    proxy: Option<PathBuf>,
    /// nutcracker (twemproxy) [default: `nutcracker` on PATH; Debian's
    /// package].
    #[arg(long, value_name = "PATH", default_value = "nutcracker")]
    nutcracker: PathBuf,
    /// memcached, for `sla` [default: the repository's 1.6.45 oracle].
    #[arg(long, value_name = "PATH")]
    memcached: Option<PathBuf>,
    /// Rounds of every comparison (the order alternates; medians)
    /// [default: 3; resize: 1].
    #[arg(long)]
    rounds: Option<usize>,
    /// Measured seconds of a run.
    #[arg(long, default_value_t = 4.0)]
    duration: f64,
    /// `-t` of every server.
    #[arg(long, default_value_t = 2)]
    threads: u32,
    /// `-m` of every server, MB.
    #[arg(long, default_value_t = 256)]
    memory: u64,
    /// Keys [default: 100,000; resize: 200,000, --quick 20,000].
    #[arg(long)]
    keys: Option<u64>,
    /// Value size, bytes [default: 64; resize: 512].
    #[arg(long)]
    value_size: Option<usize>,
    /// Client connections.
    #[arg(long, default_value_t = 8)]
    conns: usize,
    /// Depths of `proxy` and `replication`.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    depths: Vec<usize>,
    /// `replication`: the link kinds measured: `plain` (TCP; Noise frames
    /// since the link handshake), `tls` (`-Z`, both ends holding the
    /// secret; the clients on a `notls:` listener).
    #[arg(long, value_delimiter = ',', default_value = "plain")]
    links: Vec<LinkKind>,
    /// `replication`: the variants measured (`none`: not replicating).
    #[arg(long, value_delimiter = ',', default_value = "none,async,sync")]
    replication_modes: Vec<String>,
    /// `replication`: a second osmium build measured alongside (`b`),
    /// each of its rows compared with the first build's (`a`).
    #[arg(long, value_name = "PATH")]
    osmium_b: Option<PathBuf>,
    /// Items the writer holds when its replica returns (`copy`).
    #[arg(long, default_value_t = 1_000_000)]
    copy_items: u64,
    #[command(flatten)]
    resize: crate::resize::ResizeArgs,
}

impl ClusterArgs {
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(3)
    }

    fn keys(&self) -> u64 {
        self.keys.unwrap_or(100_000)
    }

    fn value_size(&self) -> usize {
        self.value_size.unwrap_or(64)
    }
}

/// Runs the modes asked for, printing a table per mode; `false` when a
/// contender of `resize` lost a key or served an older version.
pub(crate) fn run(a: &ClusterArgs) -> Result<bool, String> {
    let bins = Binaries::resolve(a.osmium.clone(), a.memcached.clone());
    let proxy = a.proxy.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("osmium-proxy")))
            .unwrap_or_else(|| PathBuf::from("target/release/osmium-proxy"))
    });
    let mut good = true;
    let result = a.mode.iter().try_for_each(|mode| match mode {
        Mode::Proxy => proxies(a, &bins, &proxy),
        Mode::Replication => replication(a, &bins),
        Mode::Sla => sla(a, &bins, &proxy),
        Mode::Resize => crate::resize::run(&crate::resize::Setup {
            bins: &bins,
            proxy: &proxy,
            nutcracker: &a.nutcracker,
            threads: a.threads,
            rounds: a.rounds.unwrap_or(1),
            keys: a.keys,
            value_size: a.value_size,
            args: &a.resize,
        })
        .map(|ok| good &= ok),
        Mode::Copy => crate::replica_copy::run(&crate::replica_copy::CopyRun {
            rounds: a.rounds(),
            items: a.copy_items,
            value_size: a.value_size(),
            start: &|port, extra| {
                let mut args = secret_args()?;
                args.extend_from_slice(extra);
                server(&bins, false, Some(port), a, &args)
            },
        }),
    });
    if let Some(Ok(path)) = SECRET.get() {
        let _ = std::fs::remove_file(path);
        crate::servers::forget_on_signal(path);
    }
    result.map(|()| good)
}

fn workload(a: &ClusterArgs, depth: usize, get_ratio: f64) -> Workload {
    Workload {
        conns: a.conns.max(1),
        threads: 1,
        depth: depth.max(1),
        duration: Duration::from_secs_f64(a.duration.max(0.5)),
        warmup: Duration::from_secs(1),
        keys: a.keys().max(1),
        key_size: 16,
        value_size: a.value_size(),
        get_ratio,
        protocol: Protocol::Text,
        seed: 1,
        dist: KeyDist::Uniform,
        rate: None,
        arrivals: Default::default(),
        quantile: 0.995,
        cache_aside: false,
        busy_poll: true,
        deferred_sends: false,
        tls: None,
        key_prefix: Vec::new(),
    }
}

/// An osmium or memcached server with `extra` arguments, on `port` when
/// given (a port others were told already), else on a free one.
fn server(
    bins: &Binaries,
    memcached: bool,
    port: Option<u16>,
    a: &ClusterArgs,
    extra: &[String],
) -> Result<Running, String> {
    let (path, name) = if memcached {
        (&bins.memcached, "memcached")
    } else {
        (&bins.osmium, "osmium")
    };
    let mut server = cache_server(path, name, a.memory, a.threads).args(extra);
    if let Some(port) = port {
        server = server.only_port(port);
    }
    server.try_start()
}

/// Where the run's replication secret is, once made.
static SECRET: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();

/// `--replication-secret FILE` with the run's secret: replication links
/// are authenticated, so every osmium that replicates, or is replicated
/// to, holds the same secret (a file readable by its owner only: osmium
/// refuses any other). Made at the first use, removed at the end of `run`.
fn secret_args() -> Result<Vec<String>, String> {
    let path = replication_secret()?;
    Ok(vec![
        "--replication-secret".into(),
        path.display().to_string(),
    ])
}

fn replication_secret() -> Result<PathBuf, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    SECRET
        .get_or_init(|| {
            let path = std::env::temp_dir().join(format!(
                "osmium-bench-{}-replication-secret",
                std::process::id()
            ));
            let hex: String = rand::random::<[u8; 32]>()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| f.write_all(format!("{hex}\n").as_bytes()))
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            crate::servers::remove_on_signal(&path);
            Ok(path)
        })
        .clone()
}

/// Three servers; with `ring`, each started `--replicate-to` the next
/// (on ports chosen before the first starts).
fn three(
    bins: &Binaries,
    memcached: bool,
    ring: bool,
    a: &ClusterArgs,
) -> Result<Vec<Running>, String> {
    let ports = [free_port(), free_port(), free_port()];
    let mut out = Vec::new();
    for i in 0..3 {
        let (extra, port): (Vec<String>, _) = if ring {
            let mut extra = secret_args()?;
            extra.push("--replicate-to".into());
            extra.push(format!("127.0.0.1:{}", ports[(i + 1) % 3]));
            (extra, Some(ports[i]))
        } else {
            (Vec::new(), None)
        };
        out.push(server(bins, memcached, port, a, &extra)?);
    }
    Ok(out)
}

/// A nutcracker YAML pool listening on `port` over `servers`.
fn yaml(port: u16, servers: &[Running]) -> String {
    let mut y = format!(
        "bench:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n  distribution: ketama\n  \
         timeout: 30000\n  auto_eject_hosts: false\n  server_retry_timeout: 2000\n  \
         server_failure_limit: 2\n  servers:\n"
    );
    for s in servers {
        y.push_str(&format!("   - 127.0.0.1:{}:1\n", s.port()));
    }
    y
}

/// nutcracker or osmium-proxy at `path` with the YAML `yaml_of(port)`,
/// on a free port; both serve a stats port on 127.0.0.1, a free one (away
/// from the default 0.0.0.0:22222 another proxy may hold).
fn start_proxy(
    nutcracker: bool,
    path: &std::path::Path,
    yaml_of: impl Fn(u16) -> String,
) -> Result<Running, String> {
    let port = free_port();
    if nutcracker {
        Nutcracker::at(path, &yaml_of(port), port).try_start()
    } else {
        Proxy::new(&yaml_of(port), port).bin(path).try_start()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One measured run's figures.
#[derive(Clone, Copy, Default)]
struct Figures {
    ops: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    cpu: f64,
    /// Other processes' CPU per request (the replica, the servers).
    other_cpu: f64,
}

/// Runs `w` against `addr`, charging the CPU of `pid` and of `others`.
fn measure(
    addr: std::net::SocketAddr,
    pid: u32,
    others: &[u32],
    w: &Workload,
) -> Result<Figures, String> {
    let before: Vec<Duration> = others
        .iter()
        .map(|&p| load::cpu_time(p))
        .collect::<Result<_, _>>()?;
    let t = Targets::one(addr, Some(pid));
    let out = load::run(&t, w)?;
    let after: Vec<Duration> = others
        .iter()
        .map(|&p| load::cpu_time(p))
        .collect::<Result<_, _>>()?;
    let other: Duration = after.iter().zip(&before).map(|(a, b)| *a - *b).sum();
    // The others ran through the warm-up too: charge them per request of
    // the whole run, warm-up included, at the measured rate.
    let whole = out.ops_per_sec() * (w.duration + w.warmup).as_secs_f64();
    Ok(Figures {
        ops: out.ops_per_sec(),
        p50: out.p50_us,
        p99: out.p99_us,
        p999: out.p999_us,
        cpu: out.cpu_us_per_req.unwrap_or(f64::NAN),
        other_cpu: if others.is_empty() {
            0.0
        } else {
            other.as_secs_f64() * 1e6 / whole
        },
    })
}

fn med(runs: &[Figures]) -> Figures {
    let m = |f: fn(&Figures) -> f64| median(runs.iter().map(f).collect());
    Figures {
        ops: m(|f| f.ops),
        p50: m(|f| f.p50),
        p99: m(|f| f.p99),
        p999: m(|f| f.p999),
        cpu: m(|f| f.cpu),
        other_cpu: m(|f| f.other_cpu),
    }
}

fn proxies(a: &ClusterArgs, bins: &Binaries, proxy: &std::path::Path) -> Result<(), String> {
    let backends = three(bins, false, false, a)?;
    let nut = start_proxy(true, &a.nutcracker, |port| yaml(port, &backends))?;
    let osm = start_proxy(false, proxy, |port| yaml(port, &backends))?;
    let pre = workload(a, 1, 1.0);
    load::preload(&Targets::one(osm.addr(), None), &pre)?;
    println!(
        "cluster proxy: {} connections, text GETs of {} keys ({} B values), 3 osmium servers -t {} behind each proxy (same YAML: ketama, fnv1a_64); proxy CPU from /proc; median of {} rounds",
        a.conns, a.keys(), a.value_size(), a.threads, a.rounds()
    );
    println!(" depth proxy          ops/s   p50 us   p99 us  p99.9 us  proxy cpu us/req  servers us/req  cpu/nutcracker");
    for &depth in &a.depths {
        let w = workload(a, depth, 1.0);
        let pids: Vec<u32> = backends.iter().map(|b| b.pid()).collect();
        let (mut n_runs, mut o_runs) = (Vec::new(), Vec::new());
        for round in 0..a.rounds().max(1) {
            let order: [bool; 2] = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for is_nut in order {
                let p = if is_nut { &nut } else { &osm };
                let f = measure(p.addr(), p.pid(), &pids, &w)?;
                p.check_running()?;
                eprintln!(
                    "cluster proxy: depth {depth} round {} {:>12}: {:>9.0} ops/s p99 {:>8.1} us cpu {:>6.2} us/req",
                    round + 1,
                    p.name(),
                    f.ops,
                    f.p99,
                    f.cpu
                );
                if is_nut {
                    n_runs.push(f)
                } else {
                    o_runs.push(f)
                }
            }
        }
        let (n, o) = (med(&n_runs), med(&o_runs));
        for (name, f) in [("nutcracker", n), ("osmium-proxy", o)] {
            println!(
                "{depth:>6} {name:<12} {:>9.0} {:>8.1} {:>8.1} {:>9.1} {:>17.2} {:>15.2} {:>15.3}",
                f.ops,
                f.p50,
                f.p99,
                f.p999,
                f.cpu,
                f.other_cpu,
                f.cpu / n.cpu
            );
        }
    }
    println!();
    Ok(())
}

/// One measured replication setup: a writer and its replica.
struct ReplicationPair {
    build: &'static str,
    link: LinkKind,
    mode: String,
    writer: Running,
    /// Where the clients connect (a `notls:` listener under TLS).
    client_addr: std::net::SocketAddr,
    replica: Running,
}

/// A server of `binary` on a free port: under TLS with the run's
/// certificates (client certificates asked for and verified, as a
/// replication peer's) and a plain listener for clients (`notls:`, its
/// port the first of [`Running::extra_ports`]).
fn link_server(
    binary: &std::path::Path,
    a: &ClusterArgs,
    tls: Option<&crate::tls::certs::Certs>,
    extra: &[String],
) -> Result<Running, String> {
    let mut server = cache_server(binary, "osmium", a.memory, a.threads);
    if let Some(c) = tls {
        server = server.args(c.server_args(false)).args([
            "-o".to_string(),
            format!("ssl_ca_cert={},ssl_verify_mode=1", c.ca.display()),
        ]);
    }
    server = server.args(secret_args()?).args(extra);
    if tls.is_some() {
        server = server.extra_listener("notls:");
    }
    server.try_start()
}

fn replication(a: &ClusterArgs, bins: &Binaries) -> Result<(), String> {
    let certs = if a.links.contains(&LinkKind::Tls) {
        Some(crate::tls::certs::Certs::make(
            crate::tls::certs::KeyType::EcdsaP256,
        )?)
    } else {
        None
    };
    let mut builds: Vec<(&'static str, PathBuf)> = vec![("a", bins.osmium.clone())];
    if let Some(b) = &a.osmium_b {
        builds.push(("b", b.clone()));
    }
    let mut pairs = Vec::new();
    for &link in &a.links {
        for mode in &a.replication_modes {
            if !matches!(mode.as_str(), "none" | "async" | "sync") {
                return Err(format!(
                    "--replication-modes: none, async or sync, not {mode}"
                ));
            }
            for (build, binary) in &builds {
                let tls = (link == LinkKind::Tls).then_some(certs.as_ref()).flatten();
                // Every server holds the secret, so that only the
                // replication differs.
                let replica = link_server(binary, a, tls, &[])?;
                let mut extra = Vec::new();
                if mode != "none" {
                    extra.extend([
                        "--replicate-to".to_string(),
                        format!("127.0.0.1:{}", replica.port()),
                        "--replication".into(),
                        mode.clone(),
                    ]);
                }
                let writer = link_server(binary, a, tls, &extra)?;
                let client_port = writer.extra_ports().first().copied();
                let client_addr = std::net::SocketAddr::from((
                    [127, 0, 0, 1],
                    client_port.unwrap_or(writer.port()),
                ));
                pairs.push(ReplicationPair {
                    build,
                    link,
                    mode: mode.clone(),
                    writer,
                    client_addr,
                    replica,
                });
            }
        }
    }
    println!(
        "cluster replication: {} connections, text SETs of {} keys ({} B values) to a server -t {}, replicating to a second one (none: not replicating); links {:?}; builds: a = {}{}; median of {} rounds, the variants alternated",
        a.conns,
        a.keys(),
        a.value_size(),
        a.threads,
        a.links,
        bins.osmium.display(),
        a.osmium_b.as_ref().map(|b| format!(", b = {}", b.display())).unwrap_or_default(),
        a.rounds()
    );
    println!(" depth build link  replication    ops/s   p50 us   p99 us  p99.9 us  writer us/write  replica us/write  total  total/none  ops b/a  total b/a");
    for &depth in &a.depths {
        let w = workload(a, depth, 0.0);
        let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); pairs.len()];
        for round in 0..a.rounds().max(1) {
            let mut order: Vec<usize> = (0..pairs.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let p = &pairs[i];
                let others = if p.mode == "none" {
                    Vec::new()
                } else {
                    vec![p.replica.pid()]
                };
                let f = measure(p.client_addr, p.writer.pid(), &others, &w)?;
                p.writer.check_running()?;
                p.replica.check_running()?;
                eprintln!(
                    "cluster replication: depth {depth} round {} {} {:?} {:>5}: {:>9.0} ops/s p99 {:>8.1} us writer {:>6.2} replica {:>6.2} us/write",
                    round + 1,
                    p.build,
                    p.link,
                    p.mode,
                    f.ops,
                    f.p99,
                    f.cpu,
                    f.other_cpu
                );
                runs[i].push(f);
            }
        }
        let meds: Vec<Figures> = runs.iter().map(|r| med(r)).collect();
        let find = |build: &str, link: LinkKind, mode: &str| {
            pairs
                .iter()
                .position(|p| p.build == build && p.link == link && p.mode == mode)
                .map(|i| meds[i])
        };
        for (i, p) in pairs.iter().enumerate() {
            let f = meds[i];
            let total = f.cpu + f.other_cpu;
            let none = find(p.build, p.link, "none").map_or(f64::NAN, |n| total / n.cpu);
            let (ops_ba, total_ba) = match (p.build, find("a", p.link, &p.mode)) {
                ("b", Some(base)) => (
                    format!("{:.3}", f.ops / base.ops),
                    format!("{:.3}", total / (base.cpu + base.other_cpu)),
                ),
                _ => ("-".into(), "-".into()),
            };
            println!(
                "{depth:>6} {:<5} {:<5} {:<11} {:>9.0} {:>8.1} {:>8.1} {:>9.1} {:>16.2} {:>17.2} {:>6.2} {:>11.3} {:>8} {:>10}",
                p.build,
                format!("{:?}", p.link).to_lowercase(),
                p.mode,
                f.ops, f.p50, f.p99, f.p999, f.cpu, f.other_cpu, total, none, ops_ba, total_ba
            );
        }
    }
    println!();
    Ok(())
}

fn sla(a: &ClusterArgs, bins: &Binaries, proxy: &std::path::Path) -> Result<(), String> {
    let ring = three(bins, false, true, a)?;
    let mc = three(bins, true, false, a)?;
    let osm = start_proxy(false, proxy, |port| yaml(port, &ring))?;
    let nut = start_proxy(true, &a.nutcracker, |port| yaml(port, &mc))?;
    let w = workload(a, 1, 1.0);
    let opts = SlaOpts {
        bound_us: 1000.0,
        hot: "hotspot:0.001:0.9".parse()?,
        steps: 7,
        step_duration: Duration::from_secs(2),
        retries: 1,
    };
    for p in [&osm, &nut] {
        load::preload(&Targets::one(p.addr(), None), &w)?;
    }
    println!(
        "cluster sla: GETs, {} connections, {} keys ({} B values); 3 osmium servers -t {} in a replication ring behind osmium-proxy against 3 memcached 1.6.45 -t {} behind nutcracker; 99.5 % within 1 ms; median of {} rounds",
        a.conns, a.keys(), a.value_size(), a.threads, a.threads, a.rounds()
    );
    let mut results: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..a.rounds().max(1) {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let p = if i == 0 { &osm } else { &nut };
            let t = Targets::one(p.addr(), None);
            let random = load::sla_rate(&t, &w, &opts)?.rate;
            let hot_w = Workload {
                dist: opts.hot,
                ..w.clone()
            };
            let hot = load::sla_rate(&t, &hot_w, &opts)?.rate;
            p.check_running()?;
            eprintln!(
                "cluster sla: round {} {}: random {random:.0} hot {hot:.0}",
                round + 1,
                p.name()
            );
            results[i].push((random, hot));
        }
    }
    println!(" cluster                          random/s     hot/s   Overall  Overall ratio");
    let overall = |r: &[(f64, f64)]| {
        let random = median(r.iter().map(|x| x.0).collect());
        let hot = median(r.iter().map(|x| x.1).collect());
        (random, hot, 0.8 * random + 0.2 * hot)
    };
    let (_, _, base) = overall(&results[1]);
    for (i, name) in ["osmium ring + osmium-proxy", "memcached + nutcracker"]
        .iter()
        .enumerate()
    {
        let (r, h, o) = overall(&results[i]);
        println!("{name:<32} {r:>9.0} {h:>9.0} {o:>9.0} {:>14.3}", o / base);
    }
    println!();
    Ok(())
}
