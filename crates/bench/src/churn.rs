//! `osmium-bench churn`: what a cache does with memory when items are
//! overwritten with new sizes and deleted, osmium against memcached 1.6.45
//! (or two osmium builds) at the same `-m`, every server started fresh per
//! mode and round, the order alternating over rounds (A B, B A, ...):
//!
//! * (a) [`fits`]: data that fits; live keys kept and evictions over time
//!   while disjoint key partitions are churned, then an exact verify;
//! * (b) [`overfull`]: an over-full cache under a zipf cache-aside replay
//!   with updates and deletes: items kept and miss ratio;
//! * (c) [`cpu`]: server CPU per SET and per GET (and latency) while the
//!   engine cleans, at several pipeline depths;
//! * `--flash` ("(d)"): every server of every mode gets a flash file.
//!
//! This module owns the command line ([`ChurnArgs`]), the value-size mixes
//! ([`SizeMix`]), the keys (`c:<id>`) and the self-checking values (a
//! header with the writer's version and a tag of the key, then bytes
//! derived from key, version and size), starting a server (with its flash
//! file) and recording its exact command line, and the one JSON document.
//! The shared key-partition churner is [`partition`], the pipelined client
//! [`wire`], and the stats sampled and printed [`stats`].

mod cpu;
mod fits;
mod overfull;
mod partition;
mod stats;
mod wire;

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::flash::{FlashDir, Running};
use crate::servers::{Binaries, Kind, Server};

/// The modes of `osmium-bench churn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Data that fits: live keys kept and evictions over time, exact verify.
    A,
    /// Over-full cache, zipf cache-aside with updates and deletes: items
    /// kept and miss ratio.
    B,
    /// Server CPU per SET and per GET while cleaning runs.
    C,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::A => "a",
            Mode::B => "b",
            Mode::C => "c",
        }
    }
}

/// `osmium-bench churn`.
#[derive(clap::Args)]
#[command(mut_arg("threads", |a| a.default_value("2")))]
pub(crate) struct ChurnArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Modes, comma separated (run in the order a, b, c).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "a,b,c")]
    mode: Vec<Mode>,
    /// Rounds of every mode (the server order alternates; medians).
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Seed of every key choice, value size and request stream (the same
    /// for every server).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Requests per pipelined batch of the (a) and (b) clients.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Give every server a flash file (`-o ext_path=FILE:SIZE`): "(d)".
    #[arg(long)]
    flash: bool,
    /// Size of each flash file, memcached's syntax (M, G or T).
    #[arg(long, default_value = "4G")]
    flash_size: String,
    /// Directory of the flash files, on a disk (not tmpfs) [default: a
    /// fresh directory under /tmp, removed at the end].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// More `-o` options for every server with flash, comma separated.
    #[arg(long, value_delimiter = ',')]
    ext_opts: Vec<String>,

    /// (a): memory limit, MB [default: 2048, or 256 with --flash].
    #[arg(short = 'm', long)]
    memory: Option<u64>,
    /// (a): keys (`c:0` ...), all loaded before the churn.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// (a), (c): value sizes, `PERCENT:MIN-MAX,...` (uniform in each range,
    /// bytes, at least 8).
    #[arg(long, default_value = "80:16-100,19:100-4096,1:4096-204800")]
    mix: SizeMix,
    /// (a), (c): pace of the load, MB/s of values in all (0: as fast as
    /// the server takes it).
    #[arg(long, default_value_t = 0.0)]
    load_mbps: f64,
    /// (a): churn connections (one thread each); key i belongs to
    /// connection i mod this; the load uses as many.
    #[arg(long, default_value_t = 4)]
    churn_conns: usize,
    /// (a): churn seconds.
    #[arg(long, default_value_t = 12.0)]
    duration: f64,
    /// (a), (c): share of churn operations that delete (the rest set).
    #[arg(long, default_value_t = 0.12)]
    delete_ratio: f64,
    /// (a): seconds between stats samples taken while the churn runs.
    #[arg(long, default_value_t = 3.0)]
    sample: f64,

    /// (b): memory limit, MB.
    #[arg(long, default_value_t = 64)]
    memory_b: u64,
    /// (b): distinct keys [default: 3 x what fits in --memory-b at the
    /// mix's mean value + key + 50 B].
    #[arg(long)]
    keys_b: Option<u64>,
    /// (b): value sizes.
    #[arg(long, default_value = "80:16-100,20:100-1024")]
    mix_b: SizeMix,
    /// (b): zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    alpha: f64,
    /// (b): share of requests that are updates (a set with a new size).
    #[arg(long, default_value_t = 0.10)]
    update_ratio: f64,
    /// (b): share of requests that are deletes.
    #[arg(long, default_value_t = 0.03)]
    delete_ratio_b: f64,
    /// (b): warm-up requests (not measured).
    #[arg(long, default_value_t = 3_000_000)]
    warmup_b: u64,
    /// (b): measured requests.
    #[arg(long, default_value_t = 5_000_000)]
    requests_b: u64,
    /// (b): connections, one thread each.
    #[arg(long, default_value_t = 4)]
    conns_b: usize,
    /// (b): requests per second in all, paced per batch (0: unpaced).
    #[arg(long, default_value_t = 0.0)]
    rate_b: f64,

    /// (c): memory limit, MB.
    #[arg(long, default_value_t = 1024)]
    memory_c: u64,
    /// (c): keys [default: live data of 70 % of --memory-c at the capped
    /// mix's mean value + key + 50 B].
    #[arg(long)]
    keys_c: Option<u64>,
    /// (c): every value size of the mix capped at this (request CPU, not
    /// memcpy of 200 KB values).
    #[arg(long, default_value_t = 4096)]
    max_value_c: usize,
    /// (c): seconds of churn after the load, before measuring.
    #[arg(long, default_value_t = 5.0)]
    warmup_c: f64,
    /// (c): pipeline depths, comma separated (a SET and a GET phase each).
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    depths: Vec<usize>,
    /// (c): seconds of every phase.
    #[arg(long, default_value_t = 5.0)]
    phase_seconds: f64,
    /// (c): connections of the SET phase (also of the load and warm-up).
    #[arg(long, default_value_t = 8)]
    set_conns: usize,
    /// (c): connections of the GET phase.
    #[arg(long, default_value_t = 8)]
    get_conns: usize,
    /// (c): overwrites per second of the one background connection of the
    /// GET phase.
    #[arg(long, default_value_t = 20_000.0)]
    background_set_rate: f64,
    /// (c): keys the GET phase reads, live keys written again just before
    /// it (0: every live key).
    #[arg(long, default_value_t = 100_000)]
    get_keys_c: usize,
}

/// Value sizes: ranges, each drawn uniformly, picked by weight.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SizeMix {
    /// (weight, lowest, highest), weights as given.
    parts: Vec<(f64, u32, u32)>,
}

/// Bytes of a value's header: the writer's version, then a tag of the key.
pub(crate) const HEADER: usize = 8;

impl FromStr for SizeMix {
    type Err = String;

    fn from_str(s: &str) -> Result<SizeMix, String> {
        let bad = |p: &str| format!("bad size mix part {p:?}: PERCENT:MIN-MAX (bytes)");
        let mut parts = Vec::new();
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (w, range) = p.split_once(':').ok_or_else(|| bad(p))?;
            let (lo, hi) = range.split_once('-').ok_or_else(|| bad(p))?;
            let w: f64 = w.trim().parse().map_err(|_| bad(p))?;
            let lo: u32 = lo.trim().parse().map_err(|_| bad(p))?;
            let hi: u32 = hi.trim().parse().map_err(|_| bad(p))?;
            if !(w.is_finite() && w >= 0.0) || lo > hi || (lo as usize) < HEADER {
                return Err(format!("{} (weights >= 0, {HEADER} <= MIN <= MAX)", bad(p)));
            }
            parts.push((w, lo, hi));
        }
        if parts.iter().map(|p| p.0).sum::<f64>() <= 0.0 {
            return Err(format!("size mix {s:?} has no weight"));
        }
        Ok(SizeMix { parts })
    }
}

impl std::fmt::Display for SizeMix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .parts
            .iter()
            .map(|(w, lo, hi)| format!("{w}:{lo}-{hi}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl SizeMix {
    /// A size from the 64 random bits `h`.
    pub(crate) fn draw(&self, h: u64) -> usize {
        let total: f64 = self.parts.iter().map(|p| p.0).sum();
        let u = (h >> 11) as f64 / (1u64 << 53) as f64 * total;
        let mut acc = 0.0;
        let mut pick = self.parts[self.parts.len() - 1];
        for &p in &self.parts {
            acc += p.0;
            if u < acc {
                pick = p;
                break;
            }
        }
        let (_, lo, hi) = pick;
        let span = u64::from(hi - lo) + 1;
        (u64::from(lo) + mix64(h ^ 0xA076_1D64_78BD_642F) % span) as usize
    }

    /// The mean size.
    pub(crate) fn mean(&self) -> f64 {
        let total: f64 = self.parts.iter().map(|p| p.0).sum();
        self.parts
            .iter()
            .map(|&(w, lo, hi)| w * (f64::from(lo) + f64::from(hi)) / 2.0)
            .sum::<f64>()
            / total
    }

    /// The largest size.
    pub(crate) fn max(&self) -> usize {
        self.parts.iter().map(|p| p.2).max().unwrap_or(0) as usize
    }

    /// Every range cut at `cap` bytes.
    pub(crate) fn capped(&self, cap: usize) -> SizeMix {
        let cap = cap.clamp(HEADER, u32::MAX as usize) as u32;
        SizeMix {
            parts: self
                .parts
                .iter()
                .map(|&(w, lo, hi)| (w, lo.min(cap), hi.min(cap)))
                .collect(),
        }
    }
}

/// splitmix64's finaliser.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Random bits of (seed, id, version): the size of that write of that key.
#[inline]
pub(crate) fn write_hash(seed: u64, id: u64, version: u32) -> u64 {
    mix64(
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ mix64(id.wrapping_add(0x632B_E59B_D9B4_E019))
            ^ u64::from(version).rotate_left(40),
    )
}

/// Appends the key `c:<id>`.
#[inline]
pub(crate) fn push_key(out: &mut Vec<u8>, id: u64) {
    out.extend_from_slice(b"c:");
    out.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
}

/// Bytes of a key.
pub(crate) fn key_len(id: u64) -> usize {
    2 + itoa::Buffer::new().format(id).len()
}

/// The tag of key `id` in a value's header.
#[inline]
fn key_tag(id: u64) -> u32 {
    (mix64(id ^ 0x5851_F42D_4C95_7F2D) >> 32) as u32
}

/// Appends the value of key `id` written at `version` with `size` bytes
/// (at least [`HEADER`]): the version (little endian), the key's tag, then
/// bytes from a generator seeded by key, version and size.
pub(crate) fn append_value(out: &mut Vec<u8>, id: u64, version: u32, size: usize) {
    debug_assert!(size >= HEADER);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&key_tag(id).to_le_bytes());
    let mut state = mix64(id ^ u64::from(version).rotate_left(32) ^ ((size as u64) << 8));
    let mut left = size - HEADER;
    while left > 0 {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = mix64(state);
        let n = left.min(8);
        out.extend_from_slice(&z.to_le_bytes()[..n]);
        left -= n;
    }
}

/// The version of `value` if it is exactly what [`append_value`] writes
/// for key `id` at that version and its length; None if not.
pub(crate) fn check_value(id: u64, value: &[u8]) -> Option<u32> {
    if value.len() < HEADER || value[4..8] != key_tag(id).to_le_bytes() {
        return None;
    }
    let version = u32::from_le_bytes(value[..4].try_into().ok()?);
    let mut state = mix64(id ^ u64::from(version).rotate_left(32) ^ ((value.len() as u64) << 8));
    for chunk in value[HEADER..].chunks(8) {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        if chunk != &mix64(state).to_le_bytes()[..chunk.len()] {
            return None;
        }
    }
    Some(version)
}

/// What every mode needs to start its servers.
pub(crate) struct Env<'a> {
    pub bins: &'a Binaries,
    pub servers: Vec<Kind>,
    pub threads: u32,
    pub rounds: usize,
    pub seed: u64,
    pub batch: usize,
    pub flash: Option<&'a FlashDir>,
    pub flash_size: String,
    pub ext_opts: Vec<String>,
    pub json: bool,
}

/// A server started by a mode, with its exact command line.
pub(crate) struct Started {
    pub running: Running,
    pub cmdline: String,
}

impl Started {
    pub(crate) fn server(&self) -> &Server {
        &self.running.server
    }
}

impl Env<'_> {
    /// Starts `kind` with `-m memory_mb -t threads`, `-I` if `max_value`
    /// needs it, and a flash file with `--flash`.
    pub(crate) fn start(
        &self,
        kind: Kind,
        memory_mb: u64,
        max_value: usize,
    ) -> Result<Started, String> {
        let mut args = Vec::new();
        if let Some(limit) = crate::load::item_size_limit(max_value, 24) {
            args.extend(["-I".to_string(), limit]);
        }
        let file = self.flash.map(|d| d.file(kind));
        if let Some(f) = &file {
            let mut ext = vec![format!("ext_path={}:{}", f.path.display(), self.flash_size)];
            ext.extend(self.ext_opts.iter().cloned());
            args.extend(["-o".to_string(), ext.join(",")]);
        }
        let server = Server::start_with(self.bins, kind, memory_mb, self.threads, &args)?;
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.pid))
            .map(|raw| {
                raw.split(|&b| b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_else(|e| format!("? ({e})"));
        eprintln!("churn: started {kind} (pid {}): {cmdline}", server.pid);
        Ok(Started {
            running: Running { server, file },
            cmdline,
        })
    }

    /// Servers of round `round` (1-based), alternating.
    pub(crate) fn order(&self, round: usize) -> Vec<Kind> {
        crate::flash::round_order(&self.servers, round)
    }
}

/// `osmium-bench churn`: every mode asked; false if a server lost live
/// data it should have kept in (a), or returned a wrong value anywhere.
pub(crate) fn run(a: &ChurnArgs) -> Result<bool, String> {
    let bins = crate::binaries(&a.common)?;
    let servers = crate::cache_kinds(&a.common)?;
    if servers.is_empty() || a.rounds == 0 || a.batch == 0 {
        return Err("--servers, --rounds and --batch need at least one".into());
    }
    crate::flash::parse_flash_size(&a.flash_size)?;
    let dir = if a.flash {
        let d = FlashDir::new(a.dir.as_deref())?;
        eprintln!(
            "churn: flash files of {} in {}",
            a.flash_size,
            d.path.display()
        );
        Some(d)
    } else {
        None
    };
    let env = Env {
        bins: &bins,
        servers,
        threads: a.common.threads,
        rounds: a.rounds,
        seed: a.seed,
        batch: a.batch,
        flash: dir.as_ref(),
        flash_size: a.flash_size.clone(),
        ext_opts: a.ext_opts.clone(),
        json: a.common.json,
    };
    let started = Instant::now();
    let mut modes = a.mode.clone();
    modes.sort();
    modes.dedup();
    let mut ok = true;
    let mut doc = Map::new();
    doc.insert("benchmark".into(), "churn".into());
    doc.insert(
        "config".into(),
        json!({
            "modes": modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "servers": env.servers.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "threads": env.threads,
            "rounds": env.rounds,
            "seed": env.seed,
            "batch": env.batch,
            "flash": a.flash,
            "flash_size": a.flash.then(|| a.flash_size.clone()),
            "flash_dir": dir.as_ref().map(|d| d.path.display().to_string()),
            "ext_opts": a.ext_opts,
        }),
    );
    for mode in modes {
        let (mode_ok, value) = match mode {
            Mode::A => fits::run(
                &env,
                &fits::Opts {
                    memory_mb: a.memory.unwrap_or(if a.flash { 256 } else { 2048 }),
                    load_mbps: a.load_mbps.max(0.0),
                    keys: a.keys,
                    mix: a.mix.clone(),
                    conns: a.churn_conns.max(1),
                    duration: a.duration.max(0.1),
                    delete_ratio: a.delete_ratio.clamp(0.0, 1.0),
                    sample: a.sample.max(0.1),
                },
            )?,
            Mode::B => overfull::run(
                &env,
                &overfull::Opts {
                    memory_mb: a.memory_b,
                    keys: a.keys_b,
                    mix: a.mix_b.clone(),
                    alpha: a.alpha,
                    update_ratio: a.update_ratio.clamp(0.0, 1.0),
                    delete_ratio: a.delete_ratio_b.clamp(0.0, 1.0),
                    warmup: a.warmup_b,
                    requests: a.requests_b,
                    conns: a.conns_b.max(1),
                    rate: a.rate_b.max(0.0),
                },
            )?,
            Mode::C => cpu::run(
                &env,
                &cpu::Opts {
                    memory_mb: a.memory_c,
                    load_mbps: a.load_mbps.max(0.0),
                    keys: a.keys_c,
                    mix: a.mix.capped(a.max_value_c),
                    delete_ratio: a.delete_ratio.clamp(0.0, 1.0),
                    warmup: a.warmup_c.max(0.0),
                    depths: a.depths.iter().map(|&d| d.max(1)).collect(),
                    phase_seconds: a.phase_seconds.max(0.1),
                    set_conns: a.set_conns.max(1),
                    get_conns: a.get_conns.max(1),
                    background_rate: a.background_set_rate.max(0.0),
                    get_keys: a.get_keys_c,
                },
            )?,
        };
        ok &= mode_ok;
        doc.insert(mode.name().into(), value);
        if !env.json {
            println!();
        }
    }
    let total = started.elapsed().as_secs_f64();
    doc.insert("total_seconds".into(), total.into());
    if env.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&Value::Object(doc)).map_err(|e| e.to_string())?
        );
    } else {
        println!("total run time {total:.0} s");
    }
    Ok(ok)
}

/// Prints the command lines of a mode's servers (the top of its section).
pub(crate) fn print_cmdlines(cmdlines: &[(usize, Kind, String)]) {
    println!("server command lines (the port is new at every start):");
    for (round, kind, cmd) in cmdlines {
        println!("  round {round} {kind}: {cmd}");
    }
}

/// The command lines as JSON.
pub(crate) fn cmdlines_json(cmdlines: &[(usize, Kind, String)]) -> Value {
    cmdlines
        .iter()
        .map(|(r, k, c)| json!({"round": r, "server": k.name(), "cmdline": c}))
        .collect::<Vec<_>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_draw_in_range() {
        let m: SizeMix = "80:16-100,19:100-4096,1:4096-204800".parse().unwrap();
        assert_eq!(m.max(), 204_800);
        let mut small = 0;
        for i in 0..100_000u64 {
            let s = m.draw(mix64(i));
            assert!((16..=204_800).contains(&s));
            small += usize::from(s <= 100);
        }
        assert!((78_000..82_500).contains(&small), "{small}");
        assert!("0:1-2".parse::<SizeMix>().is_err());
        assert!("1:200-100".parse::<SizeMix>().is_err());
        let c = m.capped(4096);
        assert_eq!(c.max(), 4096);
        assert_eq!(c.to_string(), "80:16-100,19:100-4096,1:4096-4096");
    }

    #[test]
    fn values_check_key_version_and_length() {
        let mut v = Vec::new();
        append_value(&mut v, 42, 7, 100);
        assert_eq!(v.len(), 100);
        assert_eq!(check_value(42, &v), Some(7));
        assert_eq!(check_value(43, &v), None);
        assert_eq!(check_value(42, &v[..99]), None);
        let mut w = Vec::new();
        append_value(&mut w, 42, 8, 100);
        assert_eq!(check_value(42, &w), Some(8));
        assert_ne!(v[8..], w[8..]);
        w[50] ^= 1;
        assert_eq!(check_value(42, &w), None);
        let mut h = Vec::new();
        append_value(&mut h, 1, 1, HEADER);
        assert_eq!(check_value(1, &h), Some(1));
        let mut k = Vec::new();
        push_key(&mut k, 12);
        assert_eq!(k, b"c:12");
        assert_eq!(key_len(12), 4);
    }
}
