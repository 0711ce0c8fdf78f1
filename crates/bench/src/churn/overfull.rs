//! `churn` mode (b), an over-full cache under churn: a cache-aside replay
//! like `hitratio`'s over about three times more data than fits in `-m`,
//! where every request draws a key from zipf(`--alpha`) (rank → key through
//! a fixed permutation) and is an update (a set with a newly drawn size),
//! a delete, or a get whose miss is followed by a set of the key with a
//! newly drawn size (the fill, sent at the start of the next batch). The
//! request streams (key, kind, size) are drawn up front per connection from
//! `--seed` and replayed identically to every server. Reports the miss
//! ratio from the server's stats over the measured phase (and the client's
//! count), the items kept (at the end, and the mean of samples taken every
//! second of the measured phase), bytes, evictions, and the ratios to the
//! first server. Every hit is checked byte for byte against its header.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde_json::{json, Value};

use super::stats::{self, num, num0, Sample, Stats};
use super::wire::{Client, Errors, Reply};
use super::{check_value, cmdlines_json, key_len, print_cmdlines, Env, SizeMix};
use crate::conn::Conn;
use crate::flash::{fmt_opt, json_f64};
use crate::keys::permutation;
use crate::servers::Kind;
use crate::{median, mib};

pub(crate) struct Opts {
    pub memory_mb: u64,
    pub keys: Option<u64>,
    pub mix: SizeMix,
    pub alpha: f64,
    pub update_ratio: f64,
    pub delete_ratio: f64,
    pub warmup: u64,
    pub requests: u64,
    pub conns: usize,
    /// Requests per second in all (0: unpaced).
    pub rate: f64,
}

const GET: u64 = 0;
const UPDATE: u64 = 1;
const DELETE: u64 = 2;
const SIZE_BITS: u32 = 30;

/// A request: key id (32 bits), kind (2 bits), value size (30 bits).
fn pack(id: u32, op: u64, size: usize) -> u64 {
    (u64::from(id) << 32) | (op << SIZE_BITS) | (size as u64 & ((1 << SIZE_BITS) - 1))
}

fn unpack(r: u64) -> (u64, u64, usize) {
    (
        r >> 32,
        (r >> SIZE_BITS) & 3,
        (r & ((1 << SIZE_BITS) - 1)) as usize,
    )
}

/// Keys whose data is 3 x `-m` at the mix's mean value, the key and 50 B.
pub(crate) fn default_keys(memory_mb: u64, mix: &SizeMix) -> u64 {
    let per_item = mix.mean() + key_len(1_000_000) as f64 + 50.0;
    (3.0 * (memory_mb << 20) as f64 / per_item).round() as u64
}

/// Client-side counts of one phase.
#[derive(Clone, Debug, Default)]
struct Counts {
    gets: u64,
    misses: u64,
    /// Hits whose bytes were not a value of their key.
    wrong: u64,
    updates: u64,
    deletes: u64,
    fills: u64,
    errors: Errors,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.gets += o.gets;
        self.misses += o.misses;
        self.wrong += o.wrong;
        self.updates += o.updates;
        self.deletes += o.deletes;
        self.fills += o.fills;
        self.errors.add(&o.errors);
    }
}

/// One pipelined cache-aside connection.
struct Conn2 {
    c: Client,
    /// Misses of the last batch (id, size), set at the start of the next.
    pending: Vec<(u64, usize)>,
    /// Version of the next write (any version checks; a counter).
    version: u32,
}

impl Conn2 {
    fn write_version(&mut self) -> u32 {
        self.version = self.version.wrapping_add(1);
        self.version
    }

    /// The pending fills and `reqs` in one write, then every reply.
    fn exchange(&mut self, reqs: &[u64], c: &mut Counts) -> Result<(), String> {
        let fills = std::mem::take(&mut self.pending);
        for &(id, size) in &fills {
            let v = self.write_version();
            self.c.set(id, v, size);
        }
        for &r in reqs {
            let (id, op, size) = unpack(r);
            match op {
                GET => self.c.get(id),
                UPDATE => {
                    let v = self.write_version();
                    self.c.set(id, v, size);
                }
                _ => self.c.delete(id),
            }
        }
        self.c.flush()?;
        for _ in &fills {
            c.fills += 1;
            if let r @ Reply::Error(_) = self.c.read_store()? {
                c.errors.note(format!("fill: {r:?}"));
            }
        }
        for &r in reqs {
            let (id, op, size) = unpack(r);
            match op {
                GET => {
                    c.gets += 1;
                    match self.c.read_get()? {
                        Reply::Hit => {
                            if check_value(id, &self.c.value).is_none() {
                                c.wrong += 1;
                            }
                        }
                        Reply::Miss => {
                            c.misses += 1;
                            if !self.pending.iter().any(|p| p.0 == id) {
                                self.pending.push((id, size));
                            }
                        }
                        other => {
                            c.misses += 1;
                            c.errors.note(format!("get: {other:?}"));
                        }
                    }
                }
                UPDATE => {
                    c.updates += 1;
                    if let r @ Reply::Error(_) = self.c.read_store()? {
                        c.errors.note(format!("update: {r:?}"));
                    }
                }
                _ => {
                    c.deletes += 1;
                    if let r @ Reply::Error(_) = self.c.read_delete()? {
                        c.errors.note(format!("delete: {r:?}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Replays `reqs` in batches, paced to `rate` per second (0: unpaced);
    /// ends with the last batch's fills stored.
    fn phase(
        &mut self,
        reqs: &[u64],
        batch: usize,
        rate: f64,
        done: &AtomicU64,
    ) -> Result<Counts, String> {
        let mut c = Counts::default();
        let start = Instant::now();
        let mut sent = 0u64;
        for chunk in reqs.chunks(batch) {
            if rate > 0.0 {
                let due = start + Duration::from_secs_f64(sent as f64 / rate);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            self.exchange(chunk, &mut c)?;
            sent += chunk.len() as u64;
            done.fetch_add(chunk.len() as u64, Relaxed);
        }
        if !self.pending.is_empty() {
            self.exchange(&[], &mut c)?;
        }
        Ok(c)
    }
}

/// `total` split over `n` parts; part `i`.
fn share(total: u64, n: u64, i: u64) -> usize {
    (total * (i + 1) / n - total * i / n) as usize
}

/// Every connection's requests (warm-up share, then measured share) and
/// how many of them are the warm-up's.
fn draw(o: &Opts, keys: u64, seed: u64) -> Result<Vec<(Vec<u64>, usize)>, String> {
    let perm = permutation(keys as u32, seed ^ 0xC4_0B5E_55ED);
    let zipf = Zipf::new(keys, o.alpha).map_err(|e| format!("zipf({keys}, {}): {e}", o.alpha))?;
    let n = o.conns as u64;
    let (perm, zipf) = (&perm, &zipf);
    Ok(std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(
                        seed ^ 0xB0B ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    );
                    let warm = share(o.warmup, n, i);
                    let len = warm + share(o.requests, n, i);
                    let reqs = (0..len)
                        .map(|_| {
                            let id =
                                perm[(zipf.sample(&mut rng) as usize).clamp(1, keys as usize) - 1];
                            let u: f64 = rng.gen();
                            let op = if u < o.update_ratio {
                                UPDATE
                            } else if u < o.update_ratio + o.delete_ratio {
                                DELETE
                            } else {
                                GET
                            };
                            pack(id, op, o.mix.draw(rng.gen()))
                        })
                        .collect();
                    (reqs, warm)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("stream thread"))
            .collect()
    }))
}

/// One server, one round.
struct Run {
    kind: Kind,
    round: usize,
    warm: Counts,
    measured: Counts,
    warm_secs: f64,
    measured_secs: f64,
    before: Stats,
    after: Stats,
    /// Samples of the measured phase, every second.
    samples: Vec<Sample>,
    cpu_secs: f64,
}

impl Run {
    fn delta(&self, name: &str) -> u64 {
        num0(&self.after, name).saturating_sub(num0(&self.before, name))
    }

    fn miss_ratio(&self) -> f64 {
        let m = self.delta("get_misses");
        m as f64 / (m + self.delta("get_hits")).max(1) as f64
    }

    fn client_miss_ratio(&self) -> f64 {
        self.measured.misses as f64 / self.measured.gets.max(1) as f64
    }

    /// Mean `curr_items` of the samples of the measured phase.
    fn items_avg(&self) -> f64 {
        let v: Vec<u64> = self
            .samples
            .iter()
            .filter_map(|s| num(&s.stats, "curr_items"))
            .collect();
        if v.is_empty() {
            // A phase shorter than a second: the end's count.
            return num0(&self.after, "curr_items") as f64;
        }
        v.iter().sum::<u64>() as f64 / v.len() as f64
    }

    fn requests(&self) -> u64 {
        self.measured.gets + self.measured.updates + self.measured.deletes
    }

    fn ok(&self) -> bool {
        self.warm.wrong + self.measured.wrong == 0
    }
}

impl Run {
    fn json(&self, flash: bool) -> Value {
        json!({
            "server": self.kind.name(),
            "round": self.round,
            "miss_ratio": self.miss_ratio(),
            "client_miss_ratio": self.client_miss_ratio(),
            "get_hits": self.delta("get_hits"),
            "get_misses": self.delta("get_misses"),
            "curr_items_end": num(&self.after, "curr_items"),
            "curr_items_avg": self.items_avg(),
            "bytes_end": num(&self.after, "bytes"),
            "evictions_measured": self.delta("evictions"),
            "evictions_warmup": num(&self.before, "evictions"),
            "requests": self.requests(),
            "gets": self.measured.gets, "misses": self.measured.misses,
            "updates": self.measured.updates, "deletes": self.measured.deletes,
            "fills": self.measured.fills,
            "wrong": self.measured.wrong + self.warm.wrong,
            "errors": self.measured.errors.count + self.warm.errors.count,
            "error_sample": self.warm.errors.sample.iter().chain(&self.measured.errors.sample).collect::<Vec<_>>(),
            "warmup_seconds": self.warm_secs,
            "measured_seconds": self.measured_secs,
            "server_cpu_seconds": self.cpu_secs,
            "optional_stats_end": stats::optional_json(&self.after, flash),
            "stats_after_warmup": stats::json(&self.before),
            "stats_end": stats::json(&self.after),
            "samples": self.samples.iter().map(Sample::json).collect::<Vec<_>>(),
        })
    }
}

/// Runs one phase on every connection; (counts, seconds). With `sample`,
/// the control connection takes `stats` every second meanwhile.
fn phase(
    conns: &mut [Conn2],
    streams: &[(Vec<u64>, usize)],
    measured: bool,
    env: &Env,
    rate: f64,
    mut sample: Option<(&mut Conn, &mut Vec<Sample>)>,
) -> Result<(Counts, f64), String> {
    let done = AtomicU64::new(0);
    let rate_each = rate / conns.len() as f64;
    let start = Instant::now();
    let results: Vec<Result<Counts, String>> = std::thread::scope(|s| {
        let done = &done;
        let hs: Vec<_> = conns
            .iter_mut()
            .zip(streams)
            .map(|(c, (reqs, warm))| {
                let part = if measured {
                    &reqs[*warm..]
                } else {
                    &reqs[..*warm]
                };
                s.spawn(move || c.phase(part, env.batch, rate_each, done))
            })
            .collect();
        if let Some((ctrl, out)) = sample.as_mut() {
            let mut next = start + Duration::from_secs(1);
            loop {
                while Instant::now() < next && !hs.iter().all(|h| h.is_finished()) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                if hs.iter().all(|h| h.is_finished()) {
                    break;
                }
                match ctrl.stats() {
                    Ok(stats) => out.push(Sample {
                        secs: start.elapsed().as_secs_f64(),
                        ops: done.load(Relaxed),
                        client_live: None,
                        client_live_bytes: None,
                        end: false,
                        stats,
                    }),
                    Err(e) => eprintln!("churn (b): sample failed: {e}"),
                }
                next += Duration::from_secs(1);
            }
        }
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("client thread panicked".into()))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut total = Counts::default();
    for r in results {
        total.add(&r?);
    }
    Ok((total, secs))
}

fn run_one(
    env: &Env,
    o: &Opts,
    streams: &[(Vec<u64>, usize)],
    kind: Kind,
    round: usize,
) -> Result<(Run, String), String> {
    let started = env.start(kind, o.memory_mb, o.mix.max())?;
    let server = started.server();
    let addr = server.addr();
    let tag = format!("churn (b): {kind} round {round}");
    let mut conns = (0..o.conns)
        .map(|i| {
            Ok(Conn2 {
                c: Client::connect(addr)?,
                pending: Vec::new(),
                version: (i as u32) << 24,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut ctrl = Conn::connect(addr)?;
    let (warm, warm_secs) = phase(&mut conns, streams, false, env, o.rate, None)?;
    server.check_alive()?;
    let before = ctrl.stats()?;
    eprintln!(
        "{tag}: warm-up {} requests in {warm_secs:.1} s; {} items, {} evictions",
        o.warmup,
        num0(&before, "curr_items"),
        num0(&before, "evictions")
    );
    if num0(&before, "evictions") + num0(&before, "extstore_objects_written") == 0 {
        eprintln!(
            "{tag}: WARNING: nothing was evicted (or written to flash) during the warm-up: the \
             cache was not full yet, so the measured phase is not its steady state (raise --warmup-b)"
        );
    }
    let cpu0 = crate::load::cpu_time(server.pid)?;
    let mut samples = Vec::new();
    let (measured, measured_secs) = phase(
        &mut conns,
        streams,
        true,
        env,
        o.rate,
        Some((&mut ctrl, &mut samples)),
    )?;
    let cpu_secs = (crate::load::cpu_time(server.pid)? - cpu0).as_secs_f64();
    server.check_alive()?;
    let after = ctrl.stats()?;
    let run = Run {
        kind,
        round,
        warm,
        measured,
        warm_secs,
        measured_secs,
        before,
        after,
        samples,
        cpu_secs,
    };
    eprintln!(
        "{tag}: measured {} requests in {measured_secs:.1} s: miss ratio {:.4}, {} items",
        run.requests(),
        run.miss_ratio(),
        num0(&run.after, "curr_items")
    );
    Ok((run, started.cmdline.clone()))
}

/// Mode (b); (every hit was right, JSON).
pub(crate) fn run(env: &Env, o: &Opts) -> Result<(bool, Value), String> {
    let keys = o.keys.unwrap_or_else(|| default_keys(o.memory_mb, &o.mix));
    if keys == 0 || keys > u64::from(u32::MAX) {
        return Err("--keys-b must be in 1..=4294967295".into());
    }
    if o.mix.max() >= 1 << SIZE_BITS {
        return Err("--mix-b: values must be under 1 GiB".into());
    }
    eprintln!(
        "churn (b): {keys} keys{}; drawing {} requests",
        if o.keys.is_none() {
            " (3 x what fits in -m)"
        } else {
            ""
        },
        o.warmup + o.requests
    );
    let streams = draw(o, keys, env.seed)?;
    let mut runs = Vec::new();
    let mut cmdlines = Vec::new();
    for round in 1..=env.rounds {
        for kind in env.order(round) {
            let (r, cmd) = run_one(env, o, &streams, kind, round)?;
            cmdlines.push((round, kind, cmd));
            runs.push(r);
        }
    }
    let ok = runs.iter().all(Run::ok);
    let flash = env.flash.is_some();
    let first = env.servers[0];
    let med = |kind: Kind, f: &dyn Fn(&Run) -> f64| {
        median(runs.iter().filter(|r| r.kind == kind).map(f).collect()).unwrap_or(f64::NAN)
    };
    let medians: Vec<(Kind, [f64; 6])> = env
        .servers
        .iter()
        .map(|&k| {
            (
                k,
                [
                    med(k, &|r| r.miss_ratio()),
                    med(k, &|r| r.client_miss_ratio()),
                    med(k, &|r| num0(&r.after, "curr_items") as f64),
                    med(k, &Run::items_avg),
                    med(k, &|r| r.delta("evictions") as f64),
                    med(k, &|r| r.cpu_secs * 1e6 / r.requests().max(1) as f64),
                ],
            )
        })
        .collect();
    let base = medians[0].1;
    let doc = json!({
        "mode": "b",
        "memory_mb": o.memory_mb,
        "keys": keys,
        "keys_default": o.keys.is_none(),
        "mix": o.mix.to_string(),
        "mean_value": o.mix.mean(),
        "alpha": o.alpha,
        "update_ratio": o.update_ratio,
        "delete_ratio": o.delete_ratio,
        "warmup": o.warmup,
        "requests": o.requests,
        "conns": o.conns,
        "batch": env.batch,
        "rate": o.rate,
        "cmdlines": cmdlines_json(&cmdlines),
        "runs": runs.iter().map(|r| r.json(flash)).collect::<Vec<_>>(),
        "medians": medians.iter().map(|(k, m)| json!({
            "server": k.name(),
            "miss_ratio": json_f64(Some(m[0])),
            "client_miss_ratio": json_f64(Some(m[1])),
            "curr_items_end": json_f64(Some(m[2])),
            "curr_items_avg": json_f64(Some(m[3])),
            "evictions_measured": json_f64(Some(m[4])),
            "cpu_us_per_request": json_f64(Some(m[5])),
            "items_avg_vs_first": json_f64(Some(m[3] / base[3])),
            "miss_ratio_vs_first": json_f64(Some(m[0] / base[0])),
        })).collect::<Vec<_>>(),
        "first": first.name(),
    });
    if env.json {
        return Ok((ok, doc));
    }
    println!(
        "churn (b), over-full cache: zipf({}) over {keys} keys{}, value sizes {} (mean {:.0} B); -m {} -t {}{}; {} conns x batch {}{}; requests: {:.0} % updates, {:.0} % deletes, the rest gets (a miss is filled); warm-up {} + measured {}",
        o.alpha,
        if o.keys.is_none() { " (3 x what fits)" } else { "" },
        o.mix,
        o.mix.mean(),
        o.memory_mb,
        env.threads,
        if flash { " with flash" } else { "" },
        o.conns,
        env.batch,
        if o.rate > 0.0 { format!(" at {} req/s", o.rate) } else { String::new() },
        o.update_ratio * 100.0,
        o.delete_ratio * 100.0,
        o.warmup,
        o.requests
    );
    print_cmdlines(&cmdlines);
    println!();
    let head = format!(
        "{:<10} {:>5} {:>10} {:>11} {:>10} {:>10} {:>9} {:>10} {:>9} {:>10} {:>6} {:>6}",
        "server",
        "round",
        "miss ratio",
        "client miss",
        "items end",
        "items avg",
        "bytes MiB",
        "evictions",
        "req/s",
        "cpu us/req",
        "wrong",
        "errors"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for r in &runs {
        println!(
            "{:<10} {:>5} {:>10.4} {:>11.4} {:>10} {:>10.0} {:>9.1} {:>10} {:>9.0} {:>10.2} {:>6} {:>6}",
            r.kind,
            r.round,
            r.miss_ratio(),
            r.client_miss_ratio(),
            num0(&r.after, "curr_items"),
            r.items_avg(),
            mib(num0(&r.after, "bytes")),
            r.delta("evictions"),
            r.requests() as f64 / r.measured_secs,
            r.cpu_secs * 1e6 / r.requests().max(1) as f64,
            r.measured.wrong + r.warm.wrong,
            r.measured.errors.count + r.warm.errors.count
        );
    }
    for r in runs
        .iter()
        .filter(|r| r.warm.errors.count + r.measured.errors.count > 0)
    {
        let e: Vec<&String> = r
            .warm
            .errors
            .sample
            .iter()
            .chain(&r.measured.errors.sample)
            .collect();
        println!("{} round {}: errors, e.g. {e:?}", r.kind, r.round);
    }
    println!();
    let cols = stats::columns(flash);
    let mut head = format!("{:<10} {:>5}", "server", "round");
    for c in &cols {
        head += &format!(
            " {:>w$}",
            stats::header(c),
            w = stats::header(c).len().max(8)
        );
    }
    println!("stats at the end:");
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for r in &runs {
        let mut line = format!("{:<10} {:>5}", r.kind, r.round);
        for c in &cols {
            line += &format!(
                " {:>w$}",
                stats::cell(&r.after, c),
                w = stats::header(c).len().max(8)
            );
        }
        println!("{line}");
        let extras = stats::extras(&r.after, flash);
        if !extras.is_empty() {
            let e: Vec<String> = extras.iter().map(|(n, v)| format!("{n}={v}")).collect();
            println!("           also: {}", e.join(" "));
        }
    }
    println!("{}", stats::legend(flash));
    println!();
    println!(
        "medians over {} round(s); ratios: server / {first}",
        env.rounds
    );
    let head = format!(
        "{:<10} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10} {:>15} {:>16}",
        "server",
        "miss ratio",
        "client miss",
        "items end",
        "items avg",
        "evictions",
        "cpu us/req",
        "items avg / 1st",
        "miss ratio / 1st"
    );
    println!("{head}");
    println!("{}", "-".repeat(head.len()));
    for (k, m) in &medians {
        println!(
            "{:<10} {:>10.4} {:>11.4} {:>10.0} {:>10.0} {:>10.0} {:>10.2} {:>15} {:>16}",
            k,
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5],
            fmt_opt(Some(m[3] / base[3]), 3),
            fmt_opt(Some(m[0] / base[0]), 3)
        );
    }
    println!("miss ratio: the server's get_misses / (get_hits + get_misses) over the measured phase; client miss: the client's count;");
    println!("items avg: mean curr_items of the samples taken every second of the measured phase; evictions: during the measured phase");
    Ok((ok, doc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_pack() {
        let r = pack(123_456, DELETE, 1000);
        assert_eq!(unpack(r), (123_456, DELETE, 1000));
        let r = pack(u32::MAX, UPDATE, 16);
        assert_eq!(unpack(r), (u64::from(u32::MAX), UPDATE, 16));
    }

    #[test]
    fn default_keys_are_three_times_what_fits() {
        let mix: SizeMix = "80:16-100,20:100-1024".parse().unwrap();
        let k = default_keys(64, &mix);
        assert!((850_000..1_000_000).contains(&k), "{k}");
    }
}
