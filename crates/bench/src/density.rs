//! `osmium-bench density`: items a cache holds at the same `-m` (and,
//! with `--flash SIZE`, per flash GB) when its values are real files.
//!
//! The corpus: values of 64 B to 16 KiB (log-normal, median 3,600 B,
//! mean about 5 KiB) cut out of the files of this machine: man pages
//! (gunzipped with `gzip -dc`), /usr/share/doc, Python sources, and JSON,
//! XML and HTML under /usr/share (about 85 %), and already compressed files
//! as they are (*.gz, *.png: about 15 %). Value `i` is a function of the
//! seed and `i` (`Corpus::value`), so every server gets the same values and
//! the read-back knows what to expect.
//!
//! Each run (osmium with `-o compression=cold`, with `off`, memcached) is
//! a server started here with the same `-m` (and flash file), filled with
//! keys `k0`, `k1`, ... in batches of 100 pipelined sets, paced (`--rate`:
//! osmium packs cold items in background threads, which an unpaced fill
//! outruns), until `--factor` × `-m` (× (`-m` + flash) with `--flash`) of
//! values were sent; then, once its flash writes settled, every key is
//! read back with `mg KEY s v` and each value held is checked byte for
//! byte. Printed: items held and their MiB, evictions, the packing stats;
//! with `--flash`, the items on flash, the flash bytes they take, items
//! per flash GB, and the server's CPU per GET of the read-back.
//! `--phases replay,gets,sets` measures what packing costs and buys on
//! each run besides (`density/phases.rs`: a zipf cache-aside replay's
//! miss ratio, GETs of hot and of cold keys, the CPU per SET).
//! `scripts/density-corpus.py` runs this subcommand.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use serde_json::json;

use crate::flash::{parse_flash_size, FlashDir};
use crate::servers::{Binaries, Kind, Server};
use phases::{Figures, Phase, PhaseArgs};

mod cleaner;
mod gets;
mod latency;
mod phase_args;
mod phases;
mod replay;
mod sets;

/// The most read of one file.
const FILE_MAX: u64 = 1 << 20;
/// `.gz` text files gunzipped per `gzip -dc` (their texts joined: values
/// are cut out of one source, and may span two man pages).
const GUNZIP_BATCH: usize = 64;

/// Items a cache holds at the same `-m` when its values are real files
/// (the corpus of this machine: see `density.rs`): osmium with
/// `compression=cold` and `off`, memcached; `--flash SIZE` adds a flash
/// file of that size to each and reports items per flash GB; `--phases
/// replay,gets,sets` a zipf replay's miss ratio, hot and cold GETs'
/// latency and CPU, and the CPU per SET.
#[derive(clap::Args, Clone)]
pub(crate) struct DensityArgs {
    #[command(flatten)]
    common: crate::Common,
    /// Memory limit of every server, MB (`-m`).
    #[arg(short = 'm', long, default_value_t = 256)]
    memory: u64,
    /// Values sent, as a multiple of -m (with --flash, of -m plus the
    /// flash size).
    #[arg(long, default_value_t = 3.0)]
    factor: f64,
    /// Seed of the corpus (which files, which cuts).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// MiB of files the corpus takes in (four fifths text, one fifth
    /// compressed files).
    #[arg(long, default_value_t = 200)]
    corpus_mb: usize,
    /// MiB of values a second the fill sends at most (0: no limit).
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// Runs, in this order: cold (osmium -o compression=cold), nodicts
    /// (cold without trained dictionaries), off (osmium -o
    /// compression=off), memcached.
    #[arg(long, value_delimiter = ',', default_value = "cold,off,memcached")]
    runs: Vec<Run>,
    /// A flash file of this size for every server (`-o
    /// ext_path=FILE:SIZE`, e.g. 1G): reports items per flash GB.
    #[arg(long, value_name = "SIZE")]
    flash: Option<String>,
    /// Where the flash files go [default: a new directory under /tmp].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    phases: PhaseArgs,
}

/// One server configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Run {
    /// osmium, `-o compression=cold`.
    Cold,
    /// osmium, `-o compression=cold,compress_dicts=off`: packed without
    /// dictionaries.
    Nodicts,
    /// osmium, `-o compression=off`.
    Off,
    /// memcached.
    Memcached,
}

impl Run {
    fn name(self) -> &'static str {
        match self {
            Run::Cold => "cold",
            Run::Nodicts => "nodicts",
            Run::Off => "off",
            Run::Memcached => "memcached",
        }
    }

    fn kind(self) -> Kind {
        match self {
            Run::Memcached => Kind::Memcached,
            _ => Kind::Osmium,
        }
    }
}

/// The values: text and compressed files' contents, and the seed.
struct Corpus {
    text: Vec<Vec<u8>>,
    packed: Vec<Vec<u8>>,
    seed: u64,
}

/// (text files, compressed files), shuffled with `seed`.
fn gather_files(seed: u64) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut text, mut packed) = (Vec::new(), Vec::new());
    for root in ["/usr/share/man", "/usr/share/doc", "/usr/share"] {
        walk(Path::new(root), &mut |p| {
            let s = p.to_string_lossy();
            if root == "/usr/share" {
                if s.starts_with("/usr/share/man/") || s.starts_with("/usr/share/doc/") {
                    return;
                }
                if s.ends_with(".png") || s.ends_with(".gz") {
                    packed.push(p.to_path_buf());
                } else if [".json", ".xml", ".html"].iter().any(|e| s.ends_with(e)) {
                    text.push(p.to_path_buf());
                }
                return;
            }
            if s.ends_with(".png") {
                packed.push(p.to_path_buf());
            } else {
                if s.ends_with(".gz") && root == "/usr/share/doc" {
                    packed.push(p.to_path_buf());
                }
                text.push(p.to_path_buf());
            }
        });
    }
    walk(Path::new("/usr/lib"), &mut |p| {
        let s = p.to_string_lossy();
        if s.contains("/python3") && s.ends_with(".py") {
            text.push(p.to_path_buf());
        }
    });
    // The walk's order is the file system's: sorted first, so that a seed
    // means the same corpus on the same machine.
    text.sort();
    packed.sort();
    let mut rng = StdRng::seed_from_u64(seed);
    text.shuffle(&mut rng);
    packed.shuffle(&mut rng);
    (text, packed)
}

/// Calls `f` with every regular file under `dir` (symbolic links not
/// followed).
fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            walk(&e.path(), f);
        } else if t.is_file() {
            f(&e.path());
        }
    }
}

/// The first `FILE_MAX` bytes of `p`.
fn read_head(p: &Path) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    std::fs::File::open(p)
        .ok()?
        .take(FILE_MAX)
        .read_to_end(&mut data)
        .ok()?;
    Some(data)
}

/// `paths`' contents (`.gz` files gunzipped when `unzip`), each at least
/// 256 bytes, up to `limit` bytes in all.
fn load(paths: &[PathBuf], limit: usize, unzip: bool) -> Vec<Vec<u8>> {
    let (mut out, mut total) = (Vec::new(), 0);
    let mut gz = Vec::new();
    let keep = |data: Vec<u8>, out: &mut Vec<Vec<u8>>, total: &mut usize| {
        if data.len() >= 256 {
            *total += data.len();
            out.push(data);
        }
    };
    for p in paths {
        if total >= limit {
            break;
        }
        if unzip && p.extension().is_some_and(|e| e == "gz") {
            gz.push(p.clone());
            if gz.len() == GUNZIP_BATCH {
                keep(gunzip(&gz), &mut out, &mut total);
                gz.clear();
            }
            continue;
        }
        if let Some(data) = read_head(p) {
            keep(data, &mut out, &mut total);
        }
    }
    if total < limit && !gz.is_empty() {
        keep(gunzip(&gz), &mut out, &mut total);
    }
    out
}

/// The texts of `paths` (gzip files) one after the other (`gzip -dc`;
/// files it cannot read are left out).
fn gunzip(paths: &[PathBuf]) -> Vec<u8> {
    let out = Command::new("gzip")
        .arg("-dcq")
        .arg("--")
        .args(paths)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    out.map(|o| o.stdout).unwrap_or_default()
}

impl Corpus {
    fn new(seed: u64, mb: usize) -> Result<Corpus, String> {
        let (text_paths, packed_paths) = gather_files(seed);
        let text = load(&text_paths, (mb << 20) / 5 * 4, true);
        let packed = load(&packed_paths, (mb << 20) / 5, false);
        if text.is_empty() || packed.is_empty() {
            return Err(format!(
                "density: too few files on this machine ({} text, {} compressed)",
                text.len(),
                packed.len()
            ));
        }
        Ok(Corpus { text, packed, seed })
    }

    /// Value `i`'s generator after its length and its pool were drawn:
    /// (generator, length, cut out of a compressed file?).
    fn draw(&self, i: u64) -> (StdRng, usize, bool) {
        let mut rng = StdRng::seed_from_u64(self.seed.wrapping_mul(1_000_003).wrapping_add(i));
        let dist = LogNormal::new(3600f64.ln(), 0.85).expect("valid");
        let n = (dist.sample(&mut rng) as usize).clamp(64, 16384);
        let compressed = rng.gen::<f64>() < 0.15;
        (rng, n, compressed)
    }

    /// Whether value `i` is cut out of text (not of a compressed file).
    fn is_text(&self, i: u64) -> bool {
        !self.draw(i).2
    }

    /// Value `i`: 64 B to 16 KiB cut out of one file (15 % compressed).
    fn value(&self, i: u64) -> Vec<u8> {
        let (mut rng, n, compressed) = self.draw(i);
        let pool = if compressed { &self.packed } else { &self.text };
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let src = &pool[rng.gen_range(0..pool.len())];
            let want = n - out.len();
            let at = rng.gen_range(0..src.len().saturating_sub(want).max(1));
            let end = (at + want).min(src.len());
            out.extend_from_slice(&src[at..end]);
        }
        out
    }
}

/// Reads from `r` until `buf` ends with `end`.
fn read_until(r: &mut impl Read, buf: &mut Vec<u8>, end: &[u8]) -> Result<(), String> {
    let mut chunk = vec![0u8; 1 << 16];
    while !buf.ends_with(end) {
        let n = r.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

fn connect(s: &Server) -> Result<TcpStream, String> {
    let c = TcpStream::connect(s.addr()).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    Ok(c)
}

fn stats(c: &mut TcpStream) -> Result<HashMap<String, String>, String> {
    c.write_all(b"stats\r\n").map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    read_until(c, &mut buf, b"END\r\n")?;
    Ok(String::from_utf8_lossy(&buf)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            if f.next() != Some("STAT") {
                return None;
            }
            Some((f.next()?.to_string(), f.next()?.to_string()))
        })
        .collect())
}

fn num(st: &HashMap<String, String>, name: &str) -> Option<u64> {
    st.get(name)?.parse().ok()
}

/// Sets keys `0..n`, at most `rate` MiB of values a second (0: as fast
/// as the server takes them), each batch's round trip (ns) into `rtt`;
/// returns the values sent, bytes.
fn fill(
    c: &mut TcpStream,
    corpus: &Corpus,
    n: u64,
    rate: f64,
    rtt: &mut Histogram<u64>,
) -> Result<u64, String> {
    let (mut sent, t0) = (0u64, Instant::now());
    let mut reader = BufReader::new(c.try_clone().map_err(|e| e.to_string())?);
    let mut line = String::new();
    for start in (0..n).step_by(100) {
        if rate > 0.0 {
            let ahead = sent as f64 / (rate * (1 << 20) as f64) - t0.elapsed().as_secs_f64();
            if ahead > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(ahead));
            }
        }
        let batch = start..n.min(start + 100);
        let mut req = Vec::new();
        for i in batch.clone() {
            let v = corpus.value(i);
            req.extend_from_slice(format!("set k{i} 0 0 {}\r\n", v.len()).as_bytes());
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
            sent += v.len() as u64;
        }
        let sent_at = Instant::now();
        c.write_all(&req).map_err(|e| format!("fill: {e}"))?;
        for _ in batch {
            line.clear();
            reader
                .read_line(&mut line)
                .map_err(|e| format!("fill: {e}"))?;
            if line.is_empty() {
                return Err("fill: the server closed the connection".into());
            }
        }
        rtt.saturating_record((sent_at.elapsed().as_nanos() as u64).max(1));
    }
    Ok(sent)
}

/// Reads from `r` until `buf` holds at least `len` bytes.
fn read_to(r: &mut impl Read, buf: &mut Vec<u8>, len: usize) -> Result<(), String> {
    let mut chunk = vec![0u8; 1 << 16];
    while buf.len() < len {
        let n = r.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

/// The next line of `buf` from `at` (read from `r` as needed), without
/// its CRLF; `at` moves past it.
fn next_line(r: &mut impl Read, buf: &mut Vec<u8>, at: &mut usize) -> Result<String, String> {
    loop {
        if let Some(end) = memchr::memmem::find(&buf[*at..], b"\r\n") {
            let line = String::from_utf8_lossy(&buf[*at..*at + end]).into_owned();
            *at += end + 2;
            return Ok(line);
        }
        let want = buf.len() + 1;
        read_to(r, buf, want)?;
    }
}

/// Reads keys `0..n` back (`mg k s v`, batches of 200 and `mn`, each reply
/// parsed in order: a value may hold any bytes); every value held must be
/// the one set. Returns (items held, their bytes).
fn held(c: &mut TcpStream, corpus: &Corpus, n: u64) -> Result<(u64, u64), String> {
    let (mut items, mut bytes) = (0, 0);
    for start in (0..n).step_by(200) {
        let batch = start..n.min(start + 200);
        let mut req = Vec::new();
        for i in batch.clone() {
            req.extend_from_slice(format!("mg k{i} s v\r\n").as_bytes());
        }
        req.extend_from_slice(b"mn\r\n");
        c.write_all(&req).map_err(|e| e.to_string())?;
        let (mut buf, mut at) = (Vec::new(), 0);
        for i in batch {
            let line = next_line(c, &mut buf, &mut at)?;
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.first() == Some(&"EN") {
                continue;
            }
            let size: usize = f
                .get(1)
                .filter(|_| f[0] == "VA")
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("k{i}: bad reply {line:?}"))?;
            read_to(c, &mut buf, at + size + 2)?;
            let got = &buf[at..at + size];
            at += size + 2;
            let want = corpus.value(i);
            if got != want.as_slice() || f.get(2) != Some(&format!("s{}", want.len()).as_str()) {
                return Err(format!("k{i}: the value read back differs"));
            }
            items += 1;
            bytes += size as u64;
        }
        let end = next_line(c, &mut buf, &mut at)?;
        if end != "MN" {
            return Err(format!("expected MN, got {end:?}"));
        }
    }
    Ok((items, bytes))
}

/// Waits until the server's flash writes settled: nothing staged, and
/// the items on flash unchanged for a second.
fn settle(c: &mut TcpStream) -> Result<HashMap<String, String>, String> {
    let mut last = None;
    for _ in 0..120 {
        std::thread::sleep(Duration::from_secs(1));
        let st = stats(c)?;
        let now = (
            num(&st, "extstore_objects_used"),
            num(&st, "extstore_bytes_written"),
        );
        if num(&st, "extstore_staged_bytes").unwrap_or(0) == 0 && last == Some(now) {
            return Ok(st);
        }
        last = Some(now);
    }
    stats(c)
}

/// One run's figures.
struct Row {
    run: Run,
    sent_items: u64,
    fill_s: f64,
    items: u64,
    bytes: u64,
    stats: HashMap<String, String>,
    /// Server CPU seconds of the read-back.
    read_cpu_s: f64,
    flash_bytes: u64,
    /// What the phases of `--phases` measured.
    phases: Figures,
}

impl Row {
    fn stat(&self, name: &str) -> Option<u64> {
        num(&self.stats, name)
    }

    /// Items on flash per GiB of flash their records take.
    fn per_flash_gb(&self) -> Option<f64> {
        let items = self.stat("extstore_objects_used")? as f64;
        let used = self.stat("extstore_bytes_used")? as f64;
        (used > 0.0).then(|| items * (1u64 << 30) as f64 / used)
    }

    fn json(&self) -> serde_json::Value {
        let ratio = match (self.stat("packed_raw_bytes"), self.stat("packed_bytes")) {
            (Some(r), Some(p)) if p > 0 => Some(r as f64 / p as f64),
            _ => None,
        };
        let mut v = json!({
            "run": self.run.name(),
            "values_sent": self.sent_items,
            "fill_seconds": self.fill_s,
            "held": self.items,
            "held_bytes": self.bytes,
            "evictions": self.stat("evictions"),
            "pack_items": self.stat("pack_items"),
            "packed_items": self.stat("packed_items"),
            "packed_ratio": ratio,
            "pack_cpu_us": self.stat("pack_cpu_us"),
            "pack_dicts": self.stat("pack_dicts"),
            "flash_size": self.flash_bytes,
            "extstore_objects_used": self.stat("extstore_objects_used"),
            "extstore_bytes_used": self.stat("extstore_bytes_used"),
            "extstore_packed_items": self.stat("extstore_packed_items"),
            "extstore_packed_raw_bytes": self.stat("extstore_packed_raw_bytes"),
            "extstore_packed_bytes": self.stat("extstore_packed_bytes"),
            "extstore_pack_cpu_us": self.stat("extstore_pack_cpu_us"),
            "items_per_flash_gb": self.per_flash_gb(),
            "read_back_cpu_us_per_get": self.cpu_per_get(),
        });
        self.phases.add_json(&mut v);
        v
    }

    fn cpu_per_get(&self) -> Option<f64> {
        (self.sent_items > 0).then(|| self.read_cpu_s * 1e6 / self.sent_items as f64)
    }
}

fn measure(
    bins: &Binaries,
    a: &DensityArgs,
    corpus: &Corpus,
    run: Run,
    n: u64,
    flash: Option<(&FlashDir, u64)>,
    streams: Option<&replay::Streams>,
) -> Result<Row, String> {
    let kind = run.kind();
    let mut extra = Vec::new();
    match run {
        Run::Cold => extra.extend(["-o".to_string(), "compression=cold".to_string()]),
        Run::Nodicts => extra.extend([
            "-o".to_string(),
            "compression=cold,compress_dicts=off".to_string(),
        ]),
        Run::Off => extra.extend(["-o".to_string(), "compression=off".to_string()]),
        Run::Memcached => {}
    }
    let file = flash.map(|(dir, _)| {
        let f = dir.file(kind);
        let _ = std::fs::remove_file(&f.path);
        f
    });
    if let (Some(f), Some((_, size))) = (&file, flash) {
        extra.extend([
            "-o".to_string(),
            format!("ext_path={}:{}m", f.path.display(), size >> 20),
        ]);
    }
    let server = Server::start_with(bins, kind, a.memory, a.common.threads, &extra)?;
    let mut c = connect(&server)?;
    let mut rtt = latency::histogram()?;
    let fill_cpu0 = crate::load::cpu_time(server.pid)?;
    let t = Instant::now();
    fill(&mut c, corpus, n, a.rate, &mut rtt)?;
    let fill_s = t.elapsed().as_secs_f64();
    let fill_cpu1 = crate::load::cpu_time(server.pid)?;
    server.check_alive()?;
    let st = if flash.is_some() {
        settle(&mut c)?
    } else if !a.phases.phases.is_empty() {
        cleaner::settle_cleaner(&mut c)?
    } else {
        std::thread::sleep(Duration::from_secs(1));
        stats(&mut c)?
    };
    let mut figures = Figures::default();
    if a.phases.has(Phase::Sets) {
        let settled = crate::load::cpu_time(server.pid)?;
        figures.sets = Some(sets::of_fill(n, [fill_cpu0, fill_cpu1, settled], &rtt));
    }
    if a.phases.has(Phase::Gets) {
        figures.gets = Some(gets::run(&server, corpus, n, &a.phases)?);
        server.check_alive()?;
    }
    let cpu0 = crate::load::cpu_time(server.pid)?;
    let (items, bytes) = held(&mut c, corpus, n)?;
    let read_cpu_s = (crate::load::cpu_time(server.pid)? - cpu0).as_secs_f64();
    server.check_alive()?;
    let mut stats_after = stats(&mut c)?;
    // The figures of the fill (not the read-back), but the reads' counts.
    for (k, v) in st {
        stats_after.entry(k).or_insert(v);
    }
    // Last, as they write: the depth-1 sets, then the replay.
    if let Some(f) = figures.sets.as_mut() {
        sets::single(&server, corpus, n, a.phases.sets, f)?;
        server.check_alive()?;
    }
    if let Some(streams) = streams {
        figures.replay = Some(replay::run(&server, corpus, streams)?);
        server.check_alive()?;
    }
    drop(c);
    drop(server);
    drop(file);
    Ok(Row {
        run,
        sent_items: n,
        fill_s,
        items,
        bytes,
        stats: stats_after,
        read_cpu_s,
        flash_bytes: flash.map_or(0, |(_, s)| s),
        phases: figures,
    })
}

/// Runs `density`; false if a value read back differed (an error).
pub(crate) fn run(a: &DensityArgs) -> Result<bool, String> {
    let bins = Binaries::resolve(a.common.osmium.clone(), a.common.memcached.clone());
    let flash_size = a.flash.as_deref().map(parse_flash_size).transpose()?;
    let dir = flash_size
        .map(|_| FlashDir::new(a.dir.as_deref()))
        .transpose()?;
    let t0 = Instant::now();
    let corpus = Corpus::new(a.seed, a.corpus_mb.max(1))?;
    let mean = (0..2000).map(|i| corpus.value(i).len()).sum::<usize>() as f64 / 2000.0;
    let room = a.memory + flash_size.map_or(0, |s| s >> 20);
    let n = (a.factor * room as f64 * (1u64 << 20) as f64 / mean) as u64;
    eprintln!(
        "corpus: {} text sources, {} compressed files ({:.1} s); values: mean {mean:.0} B, {n} values ({:.0} MiB, {}x {} MiB)",
        corpus.text.len(),
        corpus.packed.len(),
        t0.elapsed().as_secs_f64(),
        n as f64 * mean / (1u64 << 20) as f64,
        a.factor,
        room
    );
    // The replay's streams: drawn once, replayed to every server.
    let streams = a
        .phases
        .has(Phase::Replay)
        .then(|| replay::Streams::draw(n, a.seed, &a.phases))
        .transpose()?;
    let mut rows = Vec::new();
    for &run in &a.runs {
        bins.check(run.kind())?;
        eprintln!("density: {} ...", run.name());
        let flash = dir.as_ref().zip(flash_size);
        rows.push(measure(&bins, a, &corpus, run, n, flash, streams.as_ref())?);
    }
    let figures: Vec<(Run, &Figures)> = rows.iter().map(|r| (r.run, &r.phases)).collect();
    if a.common.json {
        let v = json!({
            "memory_mb": a.memory,
            "flash_size": flash_size,
            "factor": a.factor,
            "values": n,
            "mean_value": mean,
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
            "ratios": phases::ratios_json(&figures),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
        return Ok(true);
    }
    println!(
        "density: -m {}{}, {n} values of mean {mean:.0} B sent at {}",
        a.memory,
        a.flash
            .as_ref()
            .map_or(String::new(), |s| format!(", flash {s}")),
        if a.rate > 0.0 {
            format!("{} MiB/s", a.rate)
        } else {
            "full speed".into()
        }
    );
    let dash = |x: Option<u64>| x.map_or("-".to_string(), |v| v.to_string());
    println!(
        "{:<10} {:>8} {:>9} {:>10} {:>7} {:>10} {:>12} {:>10} {:>10}",
        "server",
        "held",
        "held MiB",
        "evictions",
        "fill s",
        "pack_items",
        "packed_items",
        "raw/packed",
        "pack_cpu_s"
    );
    for r in &rows {
        let (raw, packed) = (
            r.stat("packed_raw_bytes").unwrap_or(0),
            r.stat("packed_bytes").unwrap_or(0),
        );
        println!(
            "{:<10} {:>8} {:>9.1} {:>10} {:>7.1} {:>10} {:>12} {:>10.2} {:>10.2}",
            r.run.name(),
            r.items,
            r.bytes as f64 / (1u64 << 20) as f64,
            dash(r.stat("evictions")),
            r.fill_s,
            dash(r.stat("pack_items")),
            dash(r.stat("packed_items")),
            if packed > 0 {
                raw as f64 / packed as f64
            } else {
                0.0
            },
            r.stat("pack_cpu_us").unwrap_or(0) as f64 / 1e6,
        );
    }
    if flash_size.is_some() {
        println!();
        println!(
            "{:<10} {:>10} {:>12} {:>14} {:>12} {:>10} {:>12}",
            "server",
            "on flash",
            "flash MiB",
            "items/flash GB",
            "packed",
            "raw/packed",
            "CPU us/GET"
        );
        for r in &rows {
            let (raw, packed) = (
                r.stat("extstore_packed_raw_bytes").unwrap_or(0),
                r.stat("extstore_packed_bytes").unwrap_or(0),
            );
            println!(
                "{:<10} {:>10} {:>12.1} {:>14} {:>12} {:>10.2} {:>12.2}",
                r.run.name(),
                dash(r.stat("extstore_objects_used")),
                r.stat("extstore_bytes_used").unwrap_or(0) as f64 / (1u64 << 20) as f64,
                r.per_flash_gb()
                    .map_or("-".to_string(), |x| format!("{x:.0}")),
                dash(r.stat("extstore_packed_items")),
                if packed > 0 {
                    raw as f64 / packed as f64
                } else {
                    0.0
                },
                r.cpu_per_get().unwrap_or(0.0),
            );
        }
        println!("items/flash GB: extstore_objects_used per GiB of extstore_bytes_used; CPU us/GET: the server's CPU over the read-back (RAM and flash hits, misses) per key read");
    }
    phases::print(&figures);
    Ok(true)
}
