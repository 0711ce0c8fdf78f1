//! `load --vs`: the same workload against several servers started here
//! (osmium, memcached, a second osmium build), alternated round by round,
//! with `--pin`, sweeps over value sizes and over open-loop rates.

use super::*;

/// How `--vs` runs the servers.
#[derive(Clone, Debug)]
pub(crate) struct VsOpts {
    /// `-m` of memcached and osmium.
    pub memory_mb: u64,
    /// `-t` of memcached and osmium.
    pub threads: u32,
    pub rounds: usize,
    /// Set every key before the runs.
    pub preload: bool,
    pub json: bool,
    /// `--plot DIR`: SVG charts written there.
    pub plot: Option<std::path::PathBuf>,
    /// Servers of each kind (`--instances`), keys spread by ketama; each
    /// has `memory_mb`.
    pub instances: usize,
    /// `--pin`: every server on one CPU, the generator on another.
    pub pin: Option<Pin>,
    /// More arguments for memcached and osmium (not the floor server):
    /// `-Z` and the certificates of `--tls`.
    pub server_args: Vec<String>,
}

/// `--pin`: the CPU every server process runs on (all of its threads) and
/// the CPU of this process's generator threads, so that a server with
/// `-t 1` has a core of its own and neither the scheduler nor the
/// generator's busy polling moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pin {
    pub server: usize,
    pub generator: usize,
}

impl Pin {
    /// The first two CPUs this process may run on: servers on the first,
    /// the generator on the second. Pins the calling thread to the
    /// generator's CPU, so that every thread it starts from now on (the
    /// generator's, the CPU probe's) runs there too.
    pub(crate) fn apply() -> Result<Pin, String> {
        let cpus = osmium_test_harness::allowed_cpus();
        let [server, generator, ..] = cpus[..] else {
            return Err(format!(
                "--pin needs two CPUs to run on; this process may use {cpus:?}"
            ));
        };
        osmium_test_harness::pin_to_cpu(generator).map_err(|e| {
            let errno = e.raw_os_error().unwrap_or(0);
            format!("pinning the generator to CPU {generator}: errno {errno}")
        })?;
        Ok(Pin { server, generator })
    }

    /// How the runs were placed, for the report headers.
    pub(crate) fn describe(pin: Option<Pin>) -> String {
        match pin {
            Some(p) => format!(
                ", each pinned to CPU {} (generator on CPU {})",
                p.server, p.generator
            ),
            None => String::new(),
        }
    }
}

/// The extra arguments a server of `kind` is started with for workload
/// `w`: the floor server answers with values of `w.value_size` bytes;
/// memcached and osmium get the `-I` that items of that size need.
fn server_args(kind: crate::servers::Kind, w: &Workload) -> Vec<String> {
    if kind.is_floor() {
        return vec!["--value-size".into(), w.value_size.to_string()];
    }
    match item_size_limit(w.value_size, w.key_size) {
        Some(limit) => vec!["-I".into(), limit],
        None => Vec::new(),
    }
}

/// `-I` for items of `value_size` with `key_size` keys: None while
/// memcached's default of 1 MiB per item (header and key included) holds
/// them, else the next power of two in MiB (`2m` for 1 MiB values).
pub(crate) fn item_size_limit(value_size: usize, key_size: usize) -> Option<String> {
    const MIB: usize = 1 << 20;
    // memcached's item header with CAS is 56 bytes; leave some room.
    let item = value_size + key_size + 128;
    (item > MIB).then(|| format!("{}m", item.div_ceil(MIB).next_power_of_two()))
}

/// The value sizes of `--sweep`: 64 B to 1 MiB, doubling.
pub(crate) fn sweep_sizes() -> Vec<usize> {
    (6..=20).map(|bits| 1usize << bits).collect()
}

/// How many of `keys` a sweep step at `value_size` uses: no more than
/// fill half of `memory_mb` at `value_size + key_size + 64` bytes per item,
/// so that every preloaded key stays (gets hit) at every size.
pub(crate) fn keys_that_fit(keys: u64, value_size: usize, key_size: usize, memory_mb: u64) -> u64 {
    let per_item = (value_size + key_size + 64) as u64;
    (memory_mb * (1 << 20) / 2 / per_item).clamp(1, keys.max(1))
}

/// Starts every server in `kinds` (same `-t`, `-m`, and the arguments of
/// [`server_args`]), preloads each (not the floor, which stores nothing),
/// then runs the workload on them in turn for `rounds` rounds,
/// alternating the order; every server's medians, in `kinds`' order. The
/// servers are stopped before it returns.
pub(crate) fn compare(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
) -> Result<Vec<Summary>, String> {
    let groups = start_servers(bins, kinds, w, o)?;
    measure(&groups, w, o.rounds)
}

/// The servers of one kind in a comparison: one, or `--instances` of
/// them with the keys spread over them by ketama.
pub(crate) struct Group {
    pub kind: crate::servers::Kind,
    pub servers: Vec<crate::servers::Server>,
}

impl Group {
    /// The group as load targets (with every PID, for CPU time).
    pub(super) fn targets(&self) -> Targets {
        if let [one] = &self.servers[..] {
            return Targets::one(one.addr(), Some(one.pid));
        }
        let list: Vec<(String, u16, SocketAddr)> = self
            .servers
            .iter()
            .map(|s| ("127.0.0.1".to_string(), s.port, s.addr()))
            .collect();
        let pids = self.servers.iter().map(|s| s.pid).collect();
        Targets::ketama(&list, pids, crate::ketama::Variant::Default)
    }

    pub(super) fn check_alive(&self) -> Result<(), String> {
        self.servers.iter().try_for_each(|s| s.check_alive())
    }
}

/// Starts `o.instances` servers of every kind in `kinds` for workload `w`
/// and preloads those that store (all but the floor) when `o.preload`,
/// each key on its ketama server.
pub(crate) fn start_servers(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
) -> Result<Vec<Group>, String> {
    use crate::servers::Server;
    let mut groups = Vec::new();
    for &kind in kinds {
        let mut servers = Vec::new();
        for _ in 0..o.instances.max(1) {
            let mut args = server_args(kind, w);
            if !kind.is_floor() {
                args.extend(o.server_args.iter().cloned());
            }
            let cpu = o.pin.map(|p| p.server);
            let server = Server::start_on(bins, kind, o.memory_mb, o.threads, &args, cpu)?;
            if cpu.is_some() {
                eprintln!(
                    "{kind} (pid {}): Cpus_allowed_list {}",
                    server.pid,
                    osmium_test_harness::cpus_allowed_list(server.pid).unwrap_or_default()
                );
            }
            servers.push(server);
        }
        let group = Group { kind, servers };
        if o.preload && !kind.is_floor() {
            preload(&group.targets(), w)?;
        }
        groups.push(group);
    }
    Ok(groups)
}

/// Runs `w` on every group in turn for `rounds` rounds, alternating the
/// order; every group's medians, in `groups`' order. Each run's figures
/// go to stderr as a progress line.
pub(crate) fn measure(
    groups: &[Group],
    w: &Workload,
    rounds: usize,
) -> Result<Vec<Summary>, String> {
    let mut results: Vec<Vec<Outcome>> = vec![Vec::new(); groups.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..groups.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let g = &groups[i];
            let o = run(&g.targets(), w)?;
            g.check_alive()?;
            eprintln!(
                "round {} {:>9}: {:>10.0} ops/s  p50 {:>7.1} us  p99 {:>7.1} us  p99.9 {:>7.1} us  cpu {:>6.2} us/req  miss ratio {:.4}",
                round + 1,
                g.kind,
                o.ops_per_sec(),
                o.p50_us,
                o.p99_us,
                o.p999_us,
                o.cpu_us_per_req.unwrap_or(f64::NAN),
                o.miss_ratio()
            );
            results[i].push(o);
        }
    }
    Ok(groups
        .iter()
        .zip(&results)
        .map(|(g, r)| Summary::of(g.kind.name(), r))
        .collect())
}

/// The floor server's summary among `summaries`, if it ran.
fn floor_of(summaries: &[Summary]) -> Option<&Summary> {
    summaries.iter().find(|s| s.server == "floor")
}

/// `--vs`: [`compare`], then the median figures of each server with ratios
/// against the first server and the floor, as a table or JSON.
pub(crate) fn run_vs(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
) -> Result<bool, String> {
    let summaries = compare(bins, kinds, w, o)?;
    plot_cdf(
        o.plot.as_deref(),
        "latency-cdf.svg",
        &chart_title(w, &format!("{} B", w.value_size)),
        &summaries,
    )?;
    let floor = floor_of(&summaries);
    let first = &summaries[0];
    if o.json {
        let rows: Vec<serde_json::Value> = summaries
            .iter()
            .map(|s| serde_json::Value::Object(s.json(Some(first), floor)))
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(true);
    }
    println!("{}", describe(w, o, &format!("{} B", w.value_size)));
    let misses = w.cache_aside || !o.preload;
    println!("{}", report::table_header(None, &first.server, misses));
    for s in &summaries {
        println!("{}", report::table_row(None, s, first, floor, misses));
    }
    Ok(true)
}

/// A chart's title: the workload in short (`values`: the value size).
pub(super) fn chart_title(w: &Workload, values: &str) -> String {
    format!(
        "{values} values, {:.0}% gets, {:?}, {} conns x depth {}",
        w.get_ratio * 100.0,
        w.protocol,
        w.conns,
        w.depth
    )
}

/// The line above a `--vs` table: what ran (`values`: the value size).
pub(super) fn describe(w: &Workload, o: &VsOpts, values: &str) -> String {
    let instances = if o.instances > 1 {
        format!(", {} of each behind ketama", o.instances)
    } else {
        String::new()
    };
    format!(
        "{} connections{}, {} generator thread(s), depth {}, {:.0}% gets{}, {values} values, {:?} protocol; servers -t {} -m {}{instances}{}; median of {} round(s)",
        w.conns,
        if w.tls.is_some() { " over TLS" } else { "" },
        w.threads,
        w.depth,
        w.get_ratio * 100.0,
        if w.cache_aside { " (cache-aside)" } else { "" },
        w.protocol,
        o.threads,
        o.memory_mb,
        Pin::describe(o.pin),
        o.rounds
    )
}

/// `--vs` with `--value-sizes`/`--sweep`: the whole comparison once per
/// value size, on servers started afresh for each size (so the slabs one
/// size filled do not serve the next) with the `-I` it needs, over
/// [`keys_that_fit`] keys; one table (or JSON array) with a row per size
/// and server.
pub(crate) fn run_sweep_vs(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
    sizes: &[usize],
) -> Result<bool, String> {
    let mut steps = Vec::new();
    for &size in sizes {
        let step = Workload {
            value_size: size,
            keys: keys_that_fit(w.keys, size, w.key_size, o.memory_mb),
            ..w.clone()
        };
        eprintln!(
            "value size {size} B: {} keys{}",
            step.keys,
            item_size_limit(size, w.key_size).map_or(String::new(), |l| format!(", -I {l}"))
        );
        let summaries = compare(bins, kinds, &step, o)?;
        plot_cdf(
            o.plot.as_deref(),
            &format!("latency-cdf-{size}B.svg"),
            &chart_title(&step, &format!("{size} B")),
            &summaries,
        )?;
        steps.push(size_step(&step, summaries));
    }
    print_steps(
        &steps,
        "value B",
        o.json,
        w.cache_aside || !o.preload,
        || describe(w, o, "sized"),
    );
    Ok(true)
}

/// One step of a sweep: its lead column (value size, or offered rate),
/// the fields it adds to each JSON row, and every server's figures.
pub(crate) struct Step {
    pub lead: String,
    pub fields: Vec<(&'static str, serde_json::Value)>,
    pub summaries: Vec<Summary>,
}

/// A sweep's rows: a table with the step's lead first (`lead` names that
/// column), or a JSON array whose objects add the step's fields.
pub(super) fn print_steps(
    steps: &[Step],
    lead: &str,
    json: bool,
    misses: bool,
    describe: impl Fn() -> String,
) {
    if json {
        let rows: Vec<serde_json::Value> = steps
            .iter()
            .flat_map(|step| {
                let floor = floor_of(&step.summaries);
                step.summaries.iter().map(move |s| {
                    let mut row = s.json(step.summaries.first(), floor);
                    for (name, v) in &step.fields {
                        row.insert((*name).into(), v.clone());
                    }
                    serde_json::Value::Object(row)
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return;
    }
    println!("{}", describe());
    let Some(first) = steps.first().and_then(|s| s.summaries.first()) else {
        return;
    };
    println!(
        "{}",
        report::table_header(Some(lead), &first.server, misses)
    );
    for step in steps {
        let floor = floor_of(&step.summaries);
        for s in &step.summaries {
            println!(
                "{}",
                report::table_row(Some(&step.lead), s, &step.summaries[0], floor, misses)
            );
        }
    }
}

/// A value-size sweep step.
fn size_step(w: &Workload, summaries: Vec<Summary>) -> Step {
    Step {
        lead: w.value_size.to_string(),
        fields: vec![("value_size", w.value_size.into()), ("keys", w.keys.into())],
        summaries,
    }
}

/// An offered-rate sweep step.
fn rate_step(rate: f64, summaries: Vec<Summary>) -> Step {
    Step {
        lead: format!("{rate:.0}"),
        fields: vec![("offered_rps", rate.into())],
        summaries,
    }
}

/// `--plot DIR`: writes DIR/`file`, the latency CDF of `summaries`.
pub(crate) fn plot_cdf(
    dir: Option<&std::path::Path>,
    file: &str,
    title: &str,
    summaries: &[Summary],
) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let series: Vec<crate::plot::CdfSeries> = summaries
        .iter()
        .filter_map(|s| {
            Some(crate::plot::CdfSeries {
                name: &s.server,
                hist: s.latency.as_ref()?,
            })
        })
        .collect();
    let path = dir.join(file);
    crate::plot::latency_cdf(&path, title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `--plot DIR` with `--rates`: writes DIR/rates.svg, throughput and p99
/// against offered rate, a line per server.
fn plot_rates(
    dir: Option<&std::path::Path>,
    title: &str,
    steps: &[(f64, Vec<Summary>)],
) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let Some((_, first)) = steps.first() else {
        return Ok(());
    };
    let series: Vec<crate::plot::RateSeries> = first
        .iter()
        .enumerate()
        .map(|(i, s)| crate::plot::RateSeries {
            name: &s.server,
            points: steps
                .iter()
                .map(|(rate, sums)| (*rate, sums[i].ops_per_sec, sums[i].p99_us))
                .collect(),
        })
        .collect();
    let path = dir.join("rates.svg");
    crate::plot::rates(&path, title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `--vs --rates`: the servers started once, then at each offered rate
/// (open loop) every server in turn for `rounds` rounds; a row per rate and
/// server, and with `--plot` DIR/rates.svg.
pub(crate) fn run_rates_vs(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
    rates: &[f64],
) -> Result<bool, String> {
    let groups = start_servers(bins, kinds, w, o)?;
    let mut results = Vec::new();
    for &rate in rates {
        eprintln!("offered {rate:.0} req/s:");
        let step = Workload {
            rate: Some(rate),
            ..w.clone()
        };
        results.push((rate, measure(&groups, &step, o.rounds)?));
    }
    plot_rates(
        o.plot.as_deref(),
        &chart_title(w, &format!("{} B", w.value_size)),
        &results,
    )?;
    let steps: Vec<Step> = results.into_iter().map(|(r, s)| rate_step(r, s)).collect();
    print_steps(
        &steps,
        "rate/s",
        o.json,
        w.cache_aside || !o.preload,
        || describe(w, o, &format!("{} B", w.value_size)),
    );
    Ok(true)
}

/// `--rates` on running servers (`--addr`/`--targets`): one open-loop run
/// per offered rate; a row per rate, and with `plot` DIR/rates.svg.
pub(crate) fn run_rates(
    targets: &Targets,
    w: &Workload,
    rates: &[f64],
    json: bool,
    plot: Option<&std::path::Path>,
) -> Result<bool, String> {
    let mut results = Vec::new();
    for &rate in rates {
        let step = Workload {
            rate: Some(rate),
            ..w.clone()
        };
        let out = run(targets, &step)?;
        eprintln!(
            "offered {rate:.0} req/s: achieved {:.0}, p99 {:.1} us",
            out.ops_per_sec(),
            out.p99_us
        );
        results.push((rate, vec![Summary::of(&targets.name(), &[out])]));
    }
    let title = format!("{} connections, {:?} protocol", w.conns, w.protocol);
    plot_rates(plot, &title, &results)?;
    let steps: Vec<Step> = results.into_iter().map(|(r, s)| rate_step(r, s)).collect();
    print_steps(&steps, "rate/s", json, w.cache_aside, || title.clone());
    Ok(true)
}

/// A sweep on one running server (`--addr` with `--value-sizes`/`--sweep`):
/// per size, [`keys_that_fit`] keys (with `memory_mb`, the `-m` the server
/// is assumed to have) preloaded unless `preload` is false, then one run.
/// The server must accept the largest items (`-I`).
pub(crate) fn run_sweep(
    targets: &Targets,
    w: &Workload,
    sizes: &[usize],
    memory_mb: u64,
    preload_keys: bool,
    json: bool,
    plot: Option<&std::path::Path>,
) -> Result<bool, String> {
    let name = targets.name();
    let mut steps = Vec::new();
    for &size in sizes {
        let step = Workload {
            value_size: size,
            keys: keys_that_fit(w.keys, size, w.key_size, memory_mb),
            ..w.clone()
        };
        eprintln!("value size {size} B: {} keys", step.keys);
        if preload_keys {
            preload(targets, &step)?;
        }
        let out = run(targets, &step)?;
        let summaries = vec![Summary::of(&name, &[out])];
        plot_cdf(
            plot,
            &format!("latency-cdf-{size}B.svg"),
            &format!("{size} B values"),
            &summaries,
        )?;
        steps.push(size_step(&step, summaries));
    }
    print_steps(
        &steps,
        "value B",
        json,
        w.cache_aside || !preload_keys,
        || {
            format!(
                "{} connections, depth {}, {:.0}% gets, sized values, {:?} protocol",
                w.conns,
                w.depth,
                w.get_ratio * 100.0,
                w.protocol
            )
        },
    );
    Ok(true)
}
