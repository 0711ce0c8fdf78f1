//! `osmium-bench closed`: a closed-loop sweep over connection counts,
//! memcached 1.6.45 against osmium (or any `--servers`) in one alternated
//! run, per placement (unpinned, then pinned), value size and get ratio.
//!
//! This module owns the command line ([`ClosedArgs`]), the order of the
//! configurations (every unpinned one before the first pinned one, since
//! pinning the generator is not undone), the table of each configuration
//! (a row per connection count, the ratios of the second server to the
//! first, a `<` where the second is behind), the JSON rows, and the names
//! and titles of the charts. Starting, preloading and measuring the
//! servers round by round is `load --vs`'s ([`crate::load::start_servers`],
//! [`crate::load::measure`]); the chart is [`crate::plot::closed_loop`].

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::load::{self, Pin, VsOpts, Workload};
use crate::report::Summary;

/// Bytes of every key (`k` and digits), as `load`'s default.
const KEY_SIZE: usize = 16;

/// Where the servers and the generator run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Placement {
    /// Wherever the scheduler puts them, servers with `--threads`.
    Unpinned,
    /// Every server on the first CPU with `-t 1`, the generator on the
    /// second (`load --pin`).
    Pinned,
}

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Placement::Unpinned => "unpinned",
            Placement::Pinned => "pinned",
        }
    }
}

/// Closed-loop sweep: ops/s, p50/p99/p99.9 and server CPU per request at
/// each of --conns, per placement, value size and get ratio, the servers
/// alternated round by round.
#[derive(clap::Args)]
#[command(mut_arg("threads", |a| a.default_value("1")))]
pub(crate) struct ClosedArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Client connections of each point, comma separated (run in
    /// ascending order on the same servers).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    conns: Vec<usize>,
    /// Value sizes, bytes, comma separated (fresh servers for each).
    #[arg(long, value_delimiter = ',', default_value = "64,1024")]
    value_sizes: Vec<usize>,
    /// Fractions of requests that are gets (the rest sets), comma
    /// separated (fresh servers for each).
    #[arg(long, value_delimiter = ',', default_value = "1.0,0.9")]
    get_ratios: Vec<f64>,
    /// Placements, comma separated; every unpinned configuration runs
    /// before the pinned ones, whatever the order here.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "unpinned,pinned"
    )]
    placements: Vec<Placement>,
    /// Requests in flight per connection, sent in one write.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Rounds of every point (the server order alternates; medians).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Unmeasured seconds before each run.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Distinct keys, uniform, all set first (cut to what fills half of
    /// --memory at large values).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Memory limit of each server, MB (`-m`).
    #[arg(short = 'm', long, default_value_t = 1024)]
    memory: u64,
    /// Generator threads (each a poll loop over its connections).
    #[arg(long, default_value_t = 1)]
    gen_threads: usize,
    /// Send a connection's next requests only after every reply of the
    /// generator's poll is read (libevent's way; see `load`).
    #[arg(long)]
    deferred_sends: bool,
    /// Write one SVG per configuration into this directory
    /// (closed-<placement>-<size>B-get<percent>.svg).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

/// One configuration of the sweep: its servers run every connection count.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Config {
    placement: Placement,
    value_size: usize,
    get_ratio: f64,
}

impl Config {
    /// The get ratio as a percentage without a trailing `.0` (`90`, `99.5`).
    fn get_percent(&self) -> String {
        let p = format!("{:.1}", self.get_ratio * 100.0);
        p.strip_suffix(".0").map_or(p.clone(), str::to_string)
    }

    /// `unpinned, 64 B values, 90% gets`.
    fn label(&self) -> String {
        format!(
            "{}, {} B values, {}% gets",
            self.placement.name(),
            self.value_size,
            self.get_percent()
        )
    }

    /// The chart's file name: `closed-unpinned-64B-get90.svg`.
    fn plot_file(&self) -> String {
        format!(
            "closed-{}-{}B-get{}.svg",
            self.placement.name(),
            self.value_size,
            self.get_percent()
        )
    }
}

/// Every server's medians at one connection count.
struct Point {
    conns: usize,
    summaries: Vec<Summary>,
}

/// What one configuration ran and measured.
struct Sweep {
    config: Config,
    /// Keys preloaded and requested.
    keys: u64,
    /// `-t` of the servers.
    server_threads: u32,
    pin: Option<Pin>,
    points: Vec<Point>,
}

/// The configurations in the order they run: placement (unpinned first),
/// then value size, then get ratio, each as given (duplicates dropped).
fn configurations(placements: &[Placement], sizes: &[usize], ratios: &[f64]) -> Vec<Config> {
    let mut placements = placements.to_vec();
    placements.sort();
    placements.dedup();
    let mut out: Vec<Config> = Vec::new();
    for &placement in &placements {
        for &value_size in sizes {
            for &get_ratio in ratios {
                let c = Config {
                    placement,
                    value_size,
                    get_ratio,
                };
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// Whether `second` is behind `first`: fewer ops/s or a higher p50.
fn behind(first: &Summary, second: &Summary) -> bool {
    second.ops_per_sec < first.ops_per_sec || second.p50_us > first.p50_us
}

/// Runs the sweep and prints a table per configuration (or, with
/// `--json`, every point at the end). Always `Ok(true)` when it ends: a
/// server that dies or answers wrongly is an error.
pub(crate) fn run(a: &ClosedArgs) -> Result<bool, String> {
    let mut conns: Vec<usize> = a.conns.iter().map(|&c| c.max(1)).collect();
    conns.sort_unstable();
    conns.dedup();
    if conns.is_empty() || a.value_sizes.is_empty() || a.get_ratios.is_empty() {
        return Err("--conns, --value-sizes and --get-ratios need a value each".into());
    }
    if let Some(r) = a.get_ratios.iter().find(|r| !(0.0..=1.0).contains(*r)) {
        return Err(format!("get ratio {r} is not in 0..=1"));
    }
    let configs = configurations(&a.placements, &a.value_sizes, &a.get_ratios);
    let bins = crate::binaries(&a.common)?;
    let kinds = crate::kinds(&a.common);
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    let base = Workload {
        conns: conns[0],
        threads: a.gen_threads.max(1),
        depth: a.depth.max(1),
        duration: Duration::from_secs_f64(a.duration.max(0.1)),
        warmup: Duration::from_secs_f64(a.warmup.max(0.0)),
        keys: a.keys.max(1),
        key_size: KEY_SIZE,
        value_size: 64,
        get_ratio: 1.0,
        protocol: load::Protocol::Text,
        seed: 1,
        dist: load::KeyDist::Uniform,
        rate: None,
        arrivals: Default::default(),
        quantile: 0.995,
        cache_aside: false,
        busy_poll: true,
        deferred_sends: a.deferred_sends,
        tls: None,
        key_prefix: Vec::new(),
    };
    let mut pin: Option<Pin> = None;
    let mut sweeps = Vec::new();
    for config in configs {
        if config.placement == Placement::Pinned && pin.is_none() {
            let p = Pin::apply()?;
            eprintln!(
                "pinned: servers on CPU {} with -t 1, generator on CPU {} (from now on)",
                p.server, p.generator
            );
            pin = Some(p);
        }
        let sweep = run_configuration(&bins, &kinds, &base, a, config, &conns, pin)?;
        if let Some(dir) = &a.plot {
            plot(dir, &sweep, &base)?;
        }
        if !a.common.json {
            println!("{}", describe(&sweep, &base, a.rounds.max(1)));
            for line in table(&sweep, &names) {
                println!("{line}");
            }
            println!();
        }
        sweeps.push(sweep);
    }
    if a.common.json {
        let rows: Vec<Value> = sweeps.iter().flat_map(|s| json_rows(s, &base)).collect();
        println!("{}", Value::Array(rows));
    } else if let [first, second, ..] = &names[..] {
        let rows: usize = sweeps.iter().map(|s| s.points.len()).sum();
        let marked: usize = sweeps
            .iter()
            .flat_map(|s| &s.points)
            .filter(|p| behind(&p.summaries[0], &p.summaries[1]))
            .count();
        println!(
            "{second} behind {first} (fewer ops/s or a higher p50, marked <) in {marked} of {rows} rows"
        );
    }
    Ok(true)
}

/// One configuration: its servers started and preloaded, every connection
/// count measured on them for `--rounds` alternated rounds, then stopped.
fn run_configuration(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    base: &Workload,
    a: &ClosedArgs,
    config: Config,
    conns: &[usize],
    pin: Option<Pin>,
) -> Result<Sweep, String> {
    let pin = match config.placement {
        Placement::Pinned => pin,
        Placement::Unpinned => None,
    };
    let keys = load::keys_that_fit(a.keys, config.value_size, KEY_SIZE, a.memory);
    let w = Workload {
        value_size: config.value_size,
        get_ratio: config.get_ratio,
        keys,
        ..base.clone()
    };
    let opts = VsOpts {
        memory_mb: a.memory,
        threads: if pin.is_some() { 1 } else { a.common.threads },
        rounds: a.rounds.max(1),
        preload: true,
        json: a.common.json,
        plot: None,
        instances: 1,
        pin,
        server_args: Vec::new(),
    };
    eprintln!("{}: {keys} keys, starting the servers", config.label());
    let groups = load::start_servers(bins, kinds, &w, &opts)?;
    let mut points = Vec::new();
    for &n in conns {
        eprintln!("{}, {n} connection(s):", config.label());
        let step = Workload {
            conns: n,
            ..w.clone()
        };
        let summaries = load::measure(&groups, &step, opts.rounds)?;
        points.push(Point {
            conns: n,
            summaries,
        });
    }
    // Stops them (by PID) before the next configuration starts its own.
    drop(groups);
    Ok(Sweep {
        config,
        keys,
        server_threads: opts.threads,
        pin,
        points,
    })
}

/// The line above a configuration's table: what ran.
fn describe(s: &Sweep, base: &Workload, rounds: usize) -> String {
    format!(
        "{}: closed loop, depth {}, {} generator thread(s){}, {} keys, text protocol; servers -t {}{}; median of {rounds} round(s) of {:.1} s",
        s.config.label(),
        base.depth,
        base.threads,
        if base.deferred_sends { ", deferred sends" } else { "" },
        s.keys,
        s.server_threads,
        Pin::describe(s.pin),
        base.duration.as_secs_f64()
    )
}

/// Width of one server's columns: ops/s, p50, p99, p99.9, cpu.
const SERVER_WIDTH: usize = 45;
/// Width of the ratio columns: ops/s, p50, cpu.
const RATIO_WIDTH: usize = 24;

/// A configuration's table: two header lines, then a row per connection
/// count with every server's medians and, with two servers or more, the
/// second's ratios to the first and `<` where it is behind.
fn table(s: &Sweep, names: &[&str]) -> Vec<String> {
    let ratios = names.len() >= 2;
    let mut groups = format!("{:>5}", "");
    let mut columns = format!("{:>5}", "conns");
    for name in names {
        groups.push_str(&format!(
            " {:-^w$}",
            format!(" {name} "),
            w = SERVER_WIDTH - 1
        ));
        columns.push_str(&format!(
            " {:>10} {:>7} {:>7} {:>8} {:>8}",
            "ops/s", "p50 us", "p99 us", "p99.9 us", "cpu us"
        ));
    }
    if ratios {
        let title = format!(" {}/{} ", names[1], names[0]);
        groups.push_str(&format!(" {:-^w$}", title, w = RATIO_WIDTH - 1));
        columns.push_str(&format!(
            " {:>7} {:>7} {:>7} {}",
            "ops/s", "p50", "cpu", "<"
        ));
    }
    let mut lines = vec![groups, columns];
    for p in &s.points {
        let mut line = format!("{:>5}", p.conns);
        for m in &p.summaries {
            line.push_str(&format!(
                " {:>10.0} {:>7.1} {:>7.1} {:>8.1} {:>8.2}",
                m.ops_per_sec, m.p50_us, m.p99_us, m.p999_us, m.cpu_us_per_req
            ));
        }
        if let [first, second, ..] = &p.summaries[..] {
            line.push_str(&format!(
                " {:>7.3} {:>7.3} {:>7.3} {}",
                second.ops_per_sec / first.ops_per_sec,
                second.p50_us / first.p50_us,
                second.cpu_us_per_req / first.cpu_us_per_req,
                if behind(first, second) { "<" } else { "" }
            ));
        }
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// A configuration's JSON rows: one per connection count and server,
/// `Summary::json`'s fields (with `cpu_vs_<first>`) and the point's
/// settings; every server after the first adds `ops_vs_<first>`,
/// `p50_vs_<first>` and `behind_<first>`.
fn json_rows(s: &Sweep, base: &Workload) -> Vec<Value> {
    let mut rows = Vec::new();
    for p in &s.points {
        let first = &p.summaries[0];
        for (i, m) in p.summaries.iter().enumerate() {
            let mut row: Map<String, Value> = m.json(Some(first), None);
            row.insert("placement".into(), s.config.placement.name().into());
            row.insert("value_size".into(), s.config.value_size.into());
            row.insert("get_ratio".into(), s.config.get_ratio.into());
            row.insert("conns".into(), p.conns.into());
            row.insert("depth".into(), base.depth.into());
            row.insert("gen_threads".into(), base.threads.into());
            row.insert("keys".into(), s.keys.into());
            row.insert("server_threads".into(), s.server_threads.into());
            if i > 0 {
                let of = &first.server;
                row.insert(
                    format!("ops_vs_{of}"),
                    (m.ops_per_sec / first.ops_per_sec).into(),
                );
                row.insert(format!("p50_vs_{of}"), (m.p50_us / first.p50_us).into());
                row.insert(format!("behind_{of}"), behind(first, m).into());
            }
            rows.push(Value::Object(row));
        }
    }
    rows
}

/// `--plot DIR`: the configuration's chart, DIR/[`Config::plot_file`].
fn plot(dir: &std::path::Path, s: &Sweep, base: &Workload) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let Some(first) = s.points.first() else {
        return Ok(());
    };
    let series: Vec<crate::plot::ConnSeries> = (0..first.summaries.len())
        .map(|i| crate::plot::ConnSeries {
            name: &first.summaries[i].server,
            points: s
                .points
                .iter()
                .map(|p| {
                    let m = &p.summaries[i];
                    (p.conns as f64, m.ops_per_sec, m.p50_us, m.p99_us)
                })
                .collect(),
        })
        .collect();
    let title = format!(
        "closed loop, {}, depth {}, -t {}",
        s.config.label(),
        base.depth,
        s.server_threads
    );
    let path = dir.join(s.config.plot_file());
    crate::plot::closed_loop(&path, &title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Outcome;

    fn summary(server: &str, ops: u64, p50: f64) -> Summary {
        let o = Outcome {
            requests: ops,
            seconds: 1.0,
            p50_us: p50,
            p99_us: p50 * 2.0,
            p999_us: p50 * 3.0,
            pq_us: p50 * 2.0,
            cpu_us_per_req: Some(4.0),
            gets: ops,
            misses: 0,
            fills: 0,
            latency: None,
        };
        Summary::of(server, &[o])
    }

    #[test]
    fn unpinned_configurations_run_first() {
        let c = configurations(
            &[Placement::Pinned, Placement::Unpinned, Placement::Pinned],
            &[64, 1024],
            &[1.0, 0.9],
        );
        assert_eq!(c.len(), 8);
        assert!(c[..4].iter().all(|c| c.placement == Placement::Unpinned));
        assert_eq!((c[1].value_size, c[1].get_ratio), (64, 0.9));
        assert_eq!(c[2].value_size, 1024);
        assert_eq!(c[5].plot_file(), "closed-pinned-64B-get90.svg");
        assert_eq!(c[4].plot_file(), "closed-pinned-64B-get100.svg");
        let odd = Config {
            get_ratio: 0.995,
            ..c[0]
        };
        assert_eq!(odd.get_percent(), "99.5");
    }

    #[test]
    fn rows_where_the_second_server_is_behind_are_marked() {
        let points = vec![
            // Ahead on both: no mark.
            Point {
                conns: 1,
                summaries: vec![summary("memcached", 100, 10.0), summary("osmium", 110, 9.0)],
            },
            // Fewer ops/s.
            Point {
                conns: 2,
                summaries: vec![summary("memcached", 100, 10.0), summary("osmium", 99, 9.0)],
            },
            // Higher p50.
            Point {
                conns: 4,
                summaries: vec![
                    summary("memcached", 100, 10.0),
                    summary("osmium", 120, 10.5),
                ],
            },
        ];
        let sweep = Sweep {
            config: configurations(&[Placement::Unpinned], &[64], &[1.0])[0],
            keys: 100,
            server_threads: 1,
            pin: None,
            points,
        };
        let lines = table(&sweep, &["memcached", "osmium"]);
        assert_eq!(lines.len(), 5);
        assert!(lines[0].contains(" memcached ") && lines[0].contains(" osmium/memcached "));
        assert!(!lines[2].ends_with('<'), "{}", lines[2]);
        assert!(lines[3].ends_with('<') && lines[4].ends_with('<'));
        let cols: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(cols[0], "1");
        assert_eq!(cols[11], "1.100", "ops/s ratio: {}", lines[2]);
        assert_eq!(cols[12], "0.900", "p50 ratio: {}", lines[2]);
        assert_eq!(cols[13], "1.000", "cpu ratio: {}", lines[2]);
        // Every line's columns line up under the header's.
        assert!(lines[1..].iter().all(|l| l.len() <= lines[1].len()));
        assert_eq!(lines[1].len(), lines[3].len());
        let base = Workload {
            conns: 1,
            threads: 1,
            depth: 1,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            keys: 100,
            key_size: KEY_SIZE,
            value_size: 64,
            get_ratio: 1.0,
            protocol: load::Protocol::Text,
            seed: 1,
            dist: load::KeyDist::Uniform,
            rate: None,
            arrivals: Default::default(),
            quantile: 0.995,
            cache_aside: false,
            busy_poll: true,
            deferred_sends: false,
            tls: None,
            key_prefix: Vec::new(),
        };
        let rows = json_rows(&sweep, &base);
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[0]["server"], "memcached");
        assert!(rows[0].get("behind_memcached").is_none());
        assert_eq!(rows[1]["behind_memcached"], false);
        assert_eq!(rows[3]["behind_memcached"], true);
        assert_eq!(rows[5]["conns"], 4);
        assert_eq!(rows[5]["placement"], "unpinned");
    }
}
