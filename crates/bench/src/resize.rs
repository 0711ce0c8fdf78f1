//! `cluster --mode resize`: what growing and shrinking a pool costs a
//! cache-aside application, for three ways of changing the pool.
//!
//! A cache-aside load ([`clients`]) runs through a proxy in front of four
//! osmium servers, each `-m` large enough for the whole key space (no
//! evictions). Every key is set first and the clients warm up; then, on
//! one timeline, the pool runs steady for a phase, gets a fifth server,
//! runs a phase, loses one of the first four, and runs a last phase. Per
//! second: the database reads (cache misses), requests, failures and
//! latency percentiles.
//!
//! Contenders, one after another (the order reversed every other round):
//! * `warm`: osmium-proxy with `warm_moves: true`, the new YAML applied by
//!   SIGHUP (keys that move are copied to their new owner);
//! * `plain`: the same with `warm_moves: false` (keys that move miss);
//! * `nutcracker`: Debian's nutcracker restarted with the new YAML (stop,
//!   start on the same port; clients reconnect).
//!
//! An osmium-proxy whose stats port has no `reloads` cannot reload: it is
//! restarted instead, and the report says so; one that refuses the
//! `warm_moves` key runs without it (said too).
//!
//! Reported per change: the extra database reads in the phase after it
//! (reads − the steady phase's rate × the phase), as a share of the keys
//! whose owner changed (computed with the proxy's placement, [`pool`]);
//! failed requests and reconnects; p99 while the change is applied
//! against steady; how long the switch and the migration took (from the
//! stats port's `reloads`, `migrating`, `moved_keys`, `moved_bytes`), the
//! servers' extra CPU over the migration (`/proc/<pid>/stat`), per GB
//! moved. At the end every key is read back through the proxy: at its
//! last acknowledged version, older, or missing. `--plot` draws database
//! reads per second for every contender on one chart.

mod clients;
mod pool;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use osmium_test_harness::{free_port, Nutcracker, Running};

use crate::servers::{cache_server, Binaries};
use clients::{Check, Load, Shared};

/// A way of changing the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Contender {
    /// osmium-proxy, `warm_moves: true`, reloaded by SIGHUP.
    Warm,
    /// osmium-proxy, `warm_moves: false`, reloaded by SIGHUP.
    Plain,
    /// nutcracker, restarted with the new YAML.
    Nutcracker,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Contender::Warm => "osmium-proxy warm_moves",
            Contender::Plain => "osmium-proxy plain",
            Contender::Nutcracker => "nutcracker restart",
        }
    }
}

/// The options of `--mode resize` (beside `cluster`'s own).
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct ResizeArgs {
    /// resize: a short run (20,000 keys, 8 clients, 4 s phases, 1 s
    /// warm-up) where those are not given.
    #[arg(long)]
    quick: bool,
    /// resize: client connections [default: 50; --quick 8].
    #[arg(long)]
    clients: Option<usize>,
    /// resize: seconds of each phase: steady, after adding a server, after
    /// removing one [default: 20; --quick 4].
    #[arg(long)]
    phase_seconds: Option<u64>,
    /// resize: seconds the clients run before the timeline [default: 3;
    /// --quick 1].
    #[arg(long)]
    warmup_seconds: Option<u64>,
    /// resize: zipf exponent of the keys requested.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// resize: fraction of requests that write a new version.
    #[arg(long, default_value_t = 0.05)]
    write_fraction: f64,
    /// resize: what a database read costs the client, ms.
    #[arg(long, default_value_t = 0.0)]
    db_delay_ms: f64,
    /// resize: the contenders, comma separated, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "warm,plain,nutcracker"
    )]
    contenders: Vec<Contender>,
    /// resize: draw database reads per second of every contender to this
    /// SVG file.
    #[arg(long, value_name = "PATH")]
    plot: Option<PathBuf>,
    /// resize: print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// Everything a run needs, defaults applied.
pub(crate) struct Setup<'a> {
    pub bins: &'a Binaries,
    pub proxy: &'a Path,
    pub nutcracker: &'a Path,
    pub threads: u32,
    pub rounds: usize,
    /// `--keys`, `--value-size` when given.
    pub keys: Option<u64>,
    pub value_size: Option<usize>,
    pub args: &'a ResizeArgs,
}

struct Plan {
    keys: u64,
    value_size: usize,
    clients: usize,
    phase: u64,
    warmup: u64,
    memory_mb: u64,
}

impl Setup<'_> {
    fn plan(&self) -> Plan {
        let q = self.args.quick;
        let keys = self.keys.unwrap_or(if q { 20_000 } else { 200_000 }).max(1);
        let value_size = self.value_size.unwrap_or(512);
        // Every server could hold every key: no evictions whatever the
        // placement or the copies a move leaves.
        let item = (value_size + clients::KEY_SIZE + 128) as u64;
        let memory_mb = (keys * item * 5 / 4).div_ceil(1 << 20).max(16);
        Plan {
            keys,
            value_size,
            clients: self.args.clients.unwrap_or(if q { 8 } else { 50 }).max(1),
            phase: self
                .args
                .phase_seconds
                .unwrap_or(if q { 4 } else { 20 })
                .max(1),
            warmup: self.args.warmup_seconds.unwrap_or(if q { 1 } else { 3 }),
            memory_mb,
        }
    }
}

/// One change of the pool, as seen.
#[derive(Clone, Debug, Default)]
struct Change {
    what: &'static str,
    /// Keys whose owner changed (the proxy's placement over every key).
    moved: u64,
    /// Seconds until the new configuration served.
    switch_s: Option<f64>,
    /// Seconds until the migration ended (the switch when nothing moved).
    migration_s: Option<f64>,
    moved_keys: u64,
    moved_bytes: u64,
    warm_reads: u64,
    /// The servers' CPU over the migration, less their steady rate.
    server_cpu_s: f64,
    extra_db_reads: f64,
    failed: u64,
    reconnects: u64,
    p99_us: f64,
    note: Option<String>,
}

/// A second of the measured timeline.
#[derive(Clone, Copy, Debug, Default)]
struct Sec {
    requests: u64,
    db_reads: u64,
    failed: u64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
}

struct RunResult {
    contender: Contender,
    round: usize,
    notes: Vec<String>,
    seconds: Vec<Sec>,
    baseline_db_per_s: f64,
    p99_steady_us: f64,
    changes: Vec<Change>,
    failed: u64,
    reconnects: u64,
    stale: u64,
    wrong: u64,
    check: Check,
    evictions: u64,
}

/// Runs every contender `rounds` times and reports; `false` when one lost
/// a key it should have kept or served an older version of one.
pub(crate) fn run(s: &Setup) -> Result<bool, String> {
    let plan = s.plan();
    let a = s.args;
    if a.contenders.is_empty() {
        return Err("--contenders names none".into());
    }
    if let Some(p) = &a.plot {
        if p.extension().is_some_and(|e| e != "svg") {
            return Err(format!(
                "--plot {}: the chart is SVG (a .svg file)",
                p.display()
            ));
        }
    }
    eprintln!(
        "cluster resize: {} clients, zipf {} over {} keys of {} B, {:.0} % writes, database delay {} ms; \
         4 osmium servers (-t {} -m {}), +1 server after {p} s, -1 of the first four after {p} s more, {p} s after that",
        plan.clients,
        a.zipf,
        plan.keys,
        plan.value_size,
        a.write_fraction * 100.0,
        a.db_delay_ms,
        s.threads,
        plan.memory_mb,
        p = plan.phase
    );
    let mut results = Vec::new();
    let mut all_good = true;
    for round in 0..s.rounds.max(1) {
        let mut order = a.contenders.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for c in order {
            let r = run_one(s, &plan, c, round + 1)?;
            eprintln!(
                "cluster resize: round {} {}: extra db reads {:.0} / {:.0}, failed {}, check {} latest {} older {} missing",
                round + 1,
                c.name(),
                r.changes[0].extra_db_reads,
                r.changes[1].extra_db_reads,
                r.failed,
                r.check.latest,
                r.check.older,
                r.check.missing
            );
            all_good &= good(&r);
            results.push(r);
        }
    }
    if let Some(path) = &a.plot {
        plot(path, &plan, &results)?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::Value::Array(results.iter().map(json).collect())
        );
    } else {
        print_tables(&plan, s, &results);
    }
    if !all_good {
        eprintln!("cluster resize: a contender lost or served an older version of a key");
    }
    Ok(all_good)
}

/// No wrong or stale value, and with warm moves actually run (the proxy
/// moved keys), no key lost.
fn good(r: &RunResult) -> bool {
    let warm_ran = r.contender == Contender::Warm
        && r.notes.is_empty()
        && r.changes.iter().all(|c| c.switch_s.is_some())
        && r.changes.iter().any(|c| c.moved_keys > 0);
    r.wrong == 0
        && r.stale == 0
        && r.check.wrong == 0
        && r.check.older == 0
        && (!warm_ran || r.check.missing == 0)
}

/// The proxy of a run: how it is started again and how a change reaches it.
struct Proxy<'a> {
    contender: Contender,
    path: &'a Path,
    /// The port clients use: a free one, moved by the first start if it
    /// was taken meanwhile, then kept by every restart.
    port: u16,
    /// The stats port of the process running now.
    stats: u16,
    /// Whether it has started once (a start after is a restart, on `port`).
    started: bool,
    process: Option<Running>,
    /// osmium-proxy's `warm_moves` line, when the proxy takes it.
    warm_moves: Option<bool>,
    /// Whether a change is applied by SIGHUP (else by a restart).
    reloads: bool,
}

impl Proxy<'_> {
    /// Starts the proxy on `yaml`, whose `listen:` names `self.port`
    /// (the harness writes it to the process's scratch directory).
    fn start(&mut self, yaml: &str) -> Result<(), String> {
        let mut builder = match self.contender {
            Contender::Nutcracker => Nutcracker::at(self.path, yaml, self.port),
            _ => osmium_test_harness::Proxy::new(yaml, self.port).bin(self.path),
        };
        if self.started {
            builder = builder.only_port();
        }
        let running = builder.try_start()?;
        self.port = running.port();
        self.stats = running.stats_port();
        self.started = true;
        self.process = Some(running);
        Ok(())
    }

    fn yaml(&self, servers: &[(u16, &str)]) -> String {
        pool::yaml(self.port, servers, self.warm_moves)
    }
}

fn servers_cpu(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|&p| crate::load::cpu_time(p).ok())
        .map(|d| d.as_secs_f64())
        .sum()
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn start_server(bins: &Binaries, threads: u32, memory_mb: u64) -> Result<Running, String> {
    cache_server(&bins.osmium, "osmium", memory_mb, threads).try_start()
}

fn run_one(
    s: &Setup,
    plan: &Plan,
    contender: Contender,
    round: usize,
) -> Result<RunResult, String> {
    let mut notes = Vec::new();
    let servers: Vec<Running> = (0..5)
        .map(|_| start_server(s.bins, s.threads, plan.memory_mb))
        .collect::<Result<_, _>>()?;
    let ports: Vec<u16> = servers.iter().map(|p| p.port()).collect();
    let pids: Vec<u32> = servers.iter().map(|p| p.pid()).collect();
    let mut proxy = Proxy {
        contender,
        path: if contender == Contender::Nutcracker {
            s.nutcracker
        } else {
            s.proxy
        },
        port: free_port(),
        stats: 0,
        started: false,
        process: None,
        warm_moves: match contender {
            Contender::Warm => Some(true),
            Contender::Plain => Some(false),
            Contender::Nutcracker => None,
        },
        reloads: false,
    };
    let result = drive(s, plan, &mut proxy, &ports, &pids, &mut notes);
    drop(proxy.process.take());
    let (mut r, shared) = result?;
    r.evictions = evictions(&servers);
    drop(servers);
    drop(shared);
    r.round = round;
    r.notes = notes;
    Ok(r)
}

/// Sum of the servers' `evictions`.
fn evictions(servers: &[Running]) -> u64 {
    servers
        .iter()
        .filter_map(|p| {
            let mut c = crate::conn::Conn::connect(p.addr()).ok()?;
            crate::conn::stat_u64(&c.stats().ok()?, "evictions").ok()
        })
        .sum()
}

fn drive(
    s: &Setup,
    plan: &Plan,
    proxy: &mut Proxy,
    ports: &[u16],
    pids: &[u32],
    notes: &mut Vec<String>,
) -> Result<(RunResult, Arc<Shared>), String> {
    let a = s.args;
    const NAMES: [&str; 5] = ["server1", "server2", "server3", "server4", "server5"];
    let named: Vec<(u16, &str)> = ports.iter().copied().zip(NAMES).collect();
    let (first, added) = (&named[..4], &named[..5]);
    // The second change removes the first of the original servers.
    let removed = &named[1..5];
    match proxy.start(&proxy.yaml(first)) {
        Err(e) if proxy.warm_moves.is_some() && e.contains("warm_moves") => {
            notes.push("this osmium-proxy refuses `warm_moves`: ran without it".into());
            proxy.warm_moves = None;
            proxy.start(&proxy.yaml(first))?;
        }
        r => r?,
    }
    let stats_addr = std::net::SocketAddr::from(([127, 0, 0, 1], proxy.stats));
    if proxy.contender != Contender::Nutcracker {
        let p = pool::progress(stats_addr)?;
        proxy.reloads = p.reload_supported;
        if !p.reload_supported {
            notes.push("reload not supported by this osmium-proxy (no `reloads` on its stats port): restarted instead".into());
        }
    }
    let load = Load {
        addr: proxy.process.as_ref().map(|p| p.addr()).ok_or("no proxy")?,
        clients: plan.clients,
        keys: plan.keys,
        value_size: plan.value_size,
        zipf: a.zipf,
        write_fraction: a.write_fraction,
        db_delay: Duration::from_secs_f64(a.db_delay_ms.max(0.0) / 1000.0),
        seed: 1,
    };
    clients::preload(&load)?;
    let key = |id: u64| clients::key(id).as_bytes().to_vec();
    let yamls = [proxy.yaml(first), proxy.yaml(added), proxy.yaml(removed)];
    let moved = [
        pool::moved_keys(&yamls[0], &yamls[1], plan.keys, key)?,
        pool::moved_keys(&yamls[1], &yamls[2], plan.keys, key)?,
    ];
    let (w, t) = (plan.warmup, plan.phase);
    let shared = Arc::new(Shared::new(plan.keys, (w + 3 * t + 30) as usize));
    let handles = clients::start(&load, &shared)?;
    let base = shared.timeline.start + Duration::from_secs(w);
    sleep_until(base);
    let cpu0 = servers_cpu(pids);
    sleep_until(base + Duration::from_secs(t));
    let cpu_rate = (servers_cpu(pids) - cpu0) / t as f64;
    let mut changes = Vec::new();
    let mut failure = None;
    for (i, what) in ["add", "remove"].into_iter().enumerate() {
        let at = base + Duration::from_secs(t * (i as u64 + 1));
        let until = at + Duration::from_secs(t);
        match apply(proxy, &yamls[i + 1], stats_addr, pids, cpu_rate, until) {
            Ok(mut c) => {
                c.what = what;
                c.moved = moved[i];
                if proxy.warm_moves == Some(true) && c.moved_keys == 0 && c.note.is_none() {
                    c.note = Some(format!(
                        "{what}: `warm_moves: true` taken, but the proxy moved no key"
                    ));
                }
                changes.push(c);
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        sleep_until(until);
    }
    shared.stop.store(true, Relaxed);
    for h in handles {
        let _ = h.join();
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let check = clients::check(load.addr, &shared)?;
    let r = summarize(proxy.contender, plan, &shared, changes, check);
    Ok((r, shared))
}

/// Applies the YAML `yaml` and watches the switch and the migration until
/// `until`.
fn apply(
    proxy: &mut Proxy,
    yaml: &str,
    stats: std::net::SocketAddr,
    pids: &[u32],
    cpu_rate: f64,
    until: Instant,
) -> Result<Change, String> {
    let mut c = Change::default();
    let t0 = Instant::now();
    let cpu0 = servers_cpu(pids);
    if !proxy.reloads {
        drop(proxy.process.take());
        proxy.start(yaml)?;
        let s = t0.elapsed().as_secs_f64();
        c.switch_s = Some(s);
        c.migration_s = Some(s);
        c.server_cpu_s = servers_cpu(pids) - cpu0 - cpu_rate * s;
        return Ok(c);
    }
    let before = pool::progress(stats)?;
    let process = proxy.process.as_ref().ok_or("no proxy")?;
    let file = process.config_path();
    std::fs::write(file, yaml).map_err(|e| format!("writing {}: {e}", file.display()))?;
    process.try_signal(libc::SIGHUP)?;
    let (mut applied, mut seen_migrating) = (None::<Instant>, false);
    let mut last = before;
    while Instant::now() < until {
        if let Some(p) = &proxy.process {
            p.check_running()?;
        }
        let Ok(p) = pool::progress(stats) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        last = p;
        if p.reload_failures > before.reload_failures {
            c.note = Some("the proxy refused the new YAML (reload_failures)".into());
            break;
        }
        if applied.is_none() && p.reloads > before.reloads {
            applied = Some(Instant::now());
        }
        seen_migrating |= p.migrating > 0;
        let moved_any = p.moved_keys > before.moved_keys;
        if let Some(at) = applied {
            if p.migrating == 0 && (seen_migrating || moved_any) {
                c.migration_s = Some(t0.elapsed().as_secs_f64());
                break;
            }
            // Nothing started moving within half a second: a plain reload.
            if p.migrating == 0 && at.elapsed() > Duration::from_millis(500) {
                c.migration_s = Some((at - t0).as_secs_f64());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.switch_s = applied.map(|at| (at - t0).as_secs_f64());
    if applied.is_none() && c.note.is_none() {
        c.note = Some("the reload was not seen on the stats port (`reloads` unchanged)".into());
    }
    if c.migration_s.is_none() && applied.is_some() {
        c.note = Some("the migration had not ended by the end of the phase".into());
    }
    // Over the same span as the CPU: until the watch ended.
    c.server_cpu_s = servers_cpu(pids) - cpu0 - cpu_rate * t0.elapsed().as_secs_f64();
    c.moved_keys = last.moved_keys - before.moved_keys.min(last.moved_keys);
    c.moved_bytes = last.moved_bytes - before.moved_bytes.min(last.moved_bytes);
    c.warm_reads = last.warm_reads - before.warm_reads.min(last.warm_reads);
    Ok(c)
}

/// The timeline's figures, per second and per change.
fn summarize(
    contender: Contender,
    plan: &Plan,
    shared: &Shared,
    mut changes: Vec<Change>,
    check: Check,
) -> RunResult {
    let tl = &shared.timeline;
    let (w, t) = (plan.warmup as usize, plan.phase as usize);
    let slots = &tl.seconds[w..(w + 3 * t).min(tl.seconds.len())];
    let sum = |range: std::ops::Range<usize>, f: &dyn Fn(&clients::Second) -> u64| -> u64 {
        slots[range.start.min(slots.len())..range.end.min(slots.len())]
            .iter()
            .map(f)
            .sum()
    };
    let merged = |range: std::ops::Range<usize>| {
        let mut h = clients::new_hist();
        for s in &slots[range.start.min(slots.len())..range.end.min(slots.len())] {
            let _ = h.add(&*s.hist.lock().unwrap_or_else(|e| e.into_inner()));
        }
        h
    };
    let baseline = sum(0..t, &|s| s.db_reads.load(Relaxed)) as f64 / t as f64;
    let p99 = |h: &hdrhistogram::Histogram<u64>| {
        if h.is_empty() {
            f64::NAN
        } else {
            h.value_at_quantile(0.99) as f64
        }
    };
    for (i, c) in changes.iter_mut().enumerate() {
        let start = t * (i + 1);
        let window = start..start + t;
        c.extra_db_reads =
            sum(window.clone(), &|s| s.db_reads.load(Relaxed)) as f64 - baseline * t as f64;
        c.failed = sum(window.clone(), &|s| s.failed.load(Relaxed));
        c.reconnects = sum(window, &|s| s.reconnects.load(Relaxed));
        // While the change is applied: until the migration ended, at
        // least the second of the change, at most the phase.
        let span = c
            .migration_s
            .map_or(3, |m| (m.ceil() as usize).max(1))
            .min(t);
        c.p99_us = p99(&merged(start..start + span));
    }
    let seconds = slots
        .iter()
        .map(|s| {
            let h = s.hist.lock().unwrap_or_else(|e| e.into_inner());
            let q = |x: f64| {
                if h.is_empty() {
                    f64::NAN
                } else {
                    h.value_at_quantile(x) as f64
                }
            };
            Sec {
                requests: s.requests.load(Relaxed),
                db_reads: s.db_reads.load(Relaxed),
                failed: s.failed.load(Relaxed),
                p50_us: q(0.5),
                p99_us: q(0.99),
                p999_us: q(0.999),
            }
        })
        .collect();
    let all = 0..3 * t;
    RunResult {
        contender,
        round: 0,
        notes: Vec::new(),
        seconds,
        baseline_db_per_s: baseline,
        p99_steady_us: p99(&merged(0..t)),
        changes,
        failed: sum(all.clone(), &|s| s.failed.load(Relaxed)),
        reconnects: sum(all.clone(), &|s| s.reconnects.load(Relaxed)),
        stale: sum(all.clone(), &|s| s.stale.load(Relaxed)),
        wrong: sum(all, &|s| s.wrong.load(Relaxed)),
        check,
        evictions: 0,
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// Seconds (or CPU seconds) per GB of `bytes`, when something moved.
fn per_gb(x: Option<f64>, bytes: u64) -> Option<f64> {
    (bytes > 0).then_some(())?;
    x.map(|v| v / (bytes as f64 / 1e9))
}

fn print_tables(plan: &Plan, s: &Setup, results: &[RunResult]) {
    let a = s.args;
    println!(
        "cluster resize: {} clients, cache-aside, zipf {} over {} keys of {} B, {:.0} % writes, database delay {} ms; \
         4 osmium servers (-t {} -m {}) behind the proxy, +1 server after {p} s, -1 of the first four {p} s later, {p} s phases",
        plan.clients, a.zipf, plan.keys, plan.value_size, a.write_fraction * 100.0, a.db_delay_ms,
        s.threads, plan.memory_mb, p = plan.phase
    );
    println!(
        " round contender                change  moved keys  extra db reads  % of moved  failed  reconnects  p99 steady us  p99 change us  switch s  migration s  moved MB   s/GB  server CPU s  CPU s/GB"
    );
    for r in results {
        for c in &r.changes {
            let pct = if c.moved > 0 {
                100.0 * c.extra_db_reads / c.moved as f64
            } else {
                f64::NAN
            };
            println!(
                "{:>6} {:<24} {:<6} {:>11} {:>15.0} {:>11.1} {:>7} {:>11} {:>14.0} {:>14.0} {:>9} {:>12} {:>9.1} {:>6} {:>13.2} {:>9}",
                r.round,
                r.contender.name(),
                c.what,
                c.moved,
                c.extra_db_reads,
                pct,
                c.failed,
                c.reconnects,
                r.p99_steady_us,
                c.p99_us,
                opt(c.switch_s, 3),
                opt(c.migration_s, 3),
                c.moved_bytes as f64 / 1e6,
                opt(per_gb(c.migration_s, c.moved_bytes), 1),
                c.server_cpu_s,
                opt(per_gb(Some(c.server_cpu_s), c.moved_bytes), 1),
            );
        }
    }
    println!();
    println!(
        " round contender                requests  db reads/s steady  stale reads  wrong  check: latest  older  missing  wrong  unsure  evictions  warm reads"
    );
    for r in results {
        let requests: u64 = r.seconds.iter().map(|s| s.requests).sum();
        let warm: u64 = r.changes.iter().map(|c| c.warm_reads).sum();
        println!(
            "{:>6} {:<24} {:>9} {:>18.1} {:>12} {:>6} {:>14} {:>6} {:>8} {:>6} {:>7} {:>10} {:>11}",
            r.round,
            r.contender.name(),
            requests,
            r.baseline_db_per_s,
            r.stale,
            r.wrong,
            r.check.latest,
            r.check.older,
            r.check.missing,
            r.check.wrong,
            r.check.unsure,
            r.evictions,
            warm
        );
        for n in r
            .notes
            .iter()
            .chain(r.changes.iter().filter_map(|c| c.note.as_ref()))
        {
            println!("       note ({}): {n}", r.contender.name());
        }
    }
    println!();
}

fn json(r: &RunResult) -> serde_json::Value {
    let num = |x: f64| {
        if x.is_finite() {
            serde_json::json!(x)
        } else {
            serde_json::Value::Null
        }
    };
    let changes: Vec<serde_json::Value> = r
        .changes
        .iter()
        .map(|c| {
            serde_json::json!({
                "change": c.what,
                "moved_keys_ring": c.moved,
                "extra_db_reads": num(c.extra_db_reads),
                "extra_db_reads_pct_of_moved": if c.moved > 0 { num(100.0 * c.extra_db_reads / c.moved as f64) } else { serde_json::Value::Null },
                "failed": c.failed,
                "reconnects": c.reconnects,
                "p99_change_us": num(c.p99_us),
                "switch_s": c.switch_s,
                "migration_s": c.migration_s,
                "moved_keys": c.moved_keys,
                "moved_bytes": c.moved_bytes,
                "migration_s_per_gb": per_gb(c.migration_s, c.moved_bytes),
                "server_cpu_s": num(c.server_cpu_s),
                "server_cpu_s_per_gb": per_gb(Some(c.server_cpu_s), c.moved_bytes),
                "warm_reads": c.warm_reads,
                "note": c.note,
            })
        })
        .collect();
    let seconds: Vec<serde_json::Value> = r
        .seconds
        .iter()
        .enumerate()
        .map(|(i, s)| {
            serde_json::json!({
                "t": i, "requests": s.requests, "db_reads": s.db_reads, "failed": s.failed,
                "p50_us": num(s.p50_us), "p99_us": num(s.p99_us), "p999_us": num(s.p999_us),
            })
        })
        .collect();
    serde_json::json!({
        "contender": format!("{:?}", r.contender).to_lowercase(),
        "name": r.contender.name(),
        "round": r.round,
        "notes": r.notes,
        "baseline_db_reads_per_s": num(r.baseline_db_per_s),
        "p99_steady_us": num(r.p99_steady_us),
        "changes": changes,
        "failed": r.failed,
        "reconnects": r.reconnects,
        "stale_reads": r.stale,
        "wrong_reads": r.wrong,
        "check": {
            "checked": r.check.checked, "latest": r.check.latest, "older": r.check.older,
            "missing": r.check.missing, "wrong": r.check.wrong, "unsure": r.check.unsure,
        },
        "evictions": r.evictions,
        "seconds": seconds,
    })
}

/// Database reads per second of every contender's first round.
fn plot(path: &Path, plan: &Plan, results: &[RunResult]) -> Result<(), String> {
    let mut series = Vec::new();
    for r in results {
        if series
            .iter()
            .any(|(c, _): &(Contender, _)| *c == r.contender)
        {
            continue;
        }
        let points: Vec<(f64, f64)> = r
            .seconds
            .iter()
            .enumerate()
            .map(|(i, s)| (i as f64 + 0.5, s.db_reads as f64))
            .collect();
        series.push((r.contender, points));
    }
    let lines: Vec<crate::plot::TimeSeries> = series
        .iter()
        .map(|(c, p)| crate::plot::TimeSeries {
            name: c.name(),
            points: p.clone(),
        })
        .collect();
    let t = plan.phase as f64;
    crate::plot::timeline(
        path,
        &format!(
            "database reads per second: {} clients, {} keys, +1 server at {t} s, -1 at {} s",
            plan.clients,
            plan.keys,
            2.0 * t
        ),
        "database reads per second",
        &lines,
        &[t, 2.0 * t],
    )
}
