//! `osmium-bench flash`: osmium's flash tier against memcached's extstore,
//! both started here with the same `-m` and the same flash file size
//! (memcached's syntax, `-o ext_path=FILE:SIZE`, plus any `--ext-opts`).
//!
//! This module owns what the modes share: the options, the directory of the
//! flash files and the guards that remove it and them (also on error and,
//! through [`crate::servers`], on Ctrl-C), starting a server with or
//! without a flash file, the items (key `k%015d` of id `0..n`, a value
//! derived from id and size), the paced loader, the byte-exact sweep,
//! waiting for a server's flash writes to settle, and the one JSON
//! document of a run. The modes: [`density`] (items kept and RAM per item),
//! [`hitratio`] (cache-aside miss ratio), [`reads`] (`reads` and `sizes`:
//! GETs served from flash); the page cache of a flash file is [`cache`]'s.

mod cache;
mod density;
mod hitratio;
mod reads;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use osmium_protocol::client::encode;
use osmium_protocol::client::reply;

use crate::conn::Conn;
use crate::keys::Key;
use crate::load::KeyDist;
use crate::servers::{self, Binaries, Kind, Server};

pub(crate) use cache::DropCache;

/// Key size: `k%015d`, the keys `load` draws too.
pub(crate) const KEY_SIZE: usize = 16;

/// Bytes a flashed item takes on memcached's flash besides key and value
/// (item header with CAS, the key's NUL, the value's CRLF, rounded up):
/// used only to keep a load inside the flash file.
const FLASH_OVERHEAD: u64 = 96;

/// Share of the flash file a load may fill (memcached wants free pages for
/// its compaction).
const FLASH_FILL: f64 = 0.85;

/// The modes of `osmium-bench flash`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Items kept, items on flash, RSS, RAM per item kept and per flash item.
    Density,
    /// Cache-aside miss ratio, zipf keys, mixed value sizes.
    Hitratio,
    /// GET throughput, latency and server CPU with the hits from flash.
    Reads,
    /// The same per value size, 64 B to 1 MiB.
    Sizes,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Density => "density",
            Mode::Hitratio => "hitratio",
            Mode::Reads => "reads",
            Mode::Sizes => "sizes",
        }
    }
}

/// Everything `osmium-bench flash` was asked.
#[derive(Clone, Debug)]
pub(crate) struct FlashOpts {
    pub modes: Vec<Mode>,
    pub servers: Vec<Kind>,
    pub threads: u32,
    /// `-m` of every server, MB.
    pub memory_mb: u64,
    /// `--flash-size` as given (memcached's syntax: `8G`, `512M`).
    pub flash_size: String,
    /// The same in bytes.
    pub flash_bytes: u64,
    /// `--dir`; None: a fresh directory under /tmp.
    pub dir: Option<PathBuf>,
    /// More `-o` options for every flash server (`ext_item_size=64`, ...).
    pub ext_opts: Vec<String>,
    pub rounds: usize,
    /// Item data loaded (density, hitratio, reads) as a multiple of `-m`.
    pub data_ratio: f64,
    /// `sizes`: the same, per size.
    pub sizes_ratio: f64,
    /// Value sizes of `density`.
    pub density_sizes: Vec<usize>,
    /// Value sizes of `sizes`.
    pub sweep_sizes: Vec<usize>,
    /// Pace of the loads, MB/s of item data (0: as fast as the server
    /// takes them).
    pub load_mbps: f64,
    /// Connections of the sweeps.
    pub sweep_conns: usize,
    pub seed: u64,
    /// `hitratio`: key distribution, value size range, requests.
    pub dist: KeyDist,
    pub min_value: usize,
    pub max_value: usize,
    pub warmup_requests: u64,
    pub requests: u64,
    pub hr_conns: usize,
    pub batch: usize,
    /// Gets per second in all (0: unpaced).
    pub hr_rate: f64,
    /// `reads`/`sizes`: value size of `reads`, connections, seconds.
    pub read_size: usize,
    pub read_conns: usize,
    pub duration: f64,
    pub warmup: f64,
    pub drop_cache: DropCache,
    pub json: bool,
}

/// Parses a flash size the way memcached's `ext_path=FILE:SIZE` does: a
/// whole number followed by `m`, `g` or `t` (binary units, any case).
pub(crate) fn parse_flash_size(s: &str) -> Result<u64, String> {
    let bad = || format!("bad flash size {s:?}: a whole number with M, G or T (e.g. 8G)");
    let s = s.trim();
    let (num, unit) = s.split_at(s.len().saturating_sub(1));
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(bad()),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    if n == 0 {
        return Err(bad());
    }
    n.checked_mul(mult).ok_or_else(bad)
}

/// `/proc/PID/status` field `name` (kB) in bytes.
pub(crate) fn status_bytes(pid: u32, name: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// A numeric `stats` field, None when the server does not report it.
pub(crate) fn stat(stats: &HashMap<String, String>, name: &str) -> Option<u64> {
    stats.get(name)?.parse().ok()
}

/// The difference of a numeric `stats` field between two snapshots.
pub(crate) fn stat_delta(
    before: &HashMap<String, String>,
    after: &HashMap<String, String>,
    name: &str,
) -> Option<u64> {
    Some(stat(after, name)?.saturating_sub(stat(before, name)?))
}

/// Share of the server's hits it served from flash between two `stats`:
/// the deltas of `get_extstore` / `get_hits` (the same window, the server's
/// own counts); None when it reports no `get_extstore` or had no hit.
pub(crate) fn flash_share(
    before: &HashMap<String, String>,
    after: &HashMap<String, String>,
) -> Option<f64> {
    let flash = stat_delta(before, after, "get_extstore")?;
    let hits = stat_delta(before, after, "get_hits")?;
    (hits > 0).then(|| flash as f64 / hits as f64)
}

/// The directory the flash files go in: `--dir` (kept), or a fresh one
/// under /tmp, removed when dropped.
pub(crate) struct FlashDir {
    pub path: PathBuf,
    created: bool,
}

impl FlashDir {
    pub(crate) fn new(dir: Option<&Path>) -> Result<FlashDir, String> {
        let (path, created) = match dir {
            Some(d) => {
                if !d.is_dir() {
                    return Err(format!("--dir {}: not a directory", d.display()));
                }
                (d.to_path_buf(), false)
            }
            None => {
                let p =
                    std::env::temp_dir().join(format!("osmium-bench-flash-{}", std::process::id()));
                std::fs::create_dir_all(&p)
                    .map_err(|e| format!("creating {}: {e}", p.display()))?;
                (p, true)
            }
        };
        Ok(FlashDir { path, created })
    }

    /// The flash file of a server of `kind` (removed before, and when the
    /// guard drops).
    pub(crate) fn file(&self, kind: Kind) -> FlashFile {
        FlashFile::new(
            self.path
                .join(format!("{}-{}.flash", kind.name(), std::process::id())),
        )
    }
}

impl Drop for FlashDir {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A flash file: removed before the server starts, when the guard drops
/// and by the signal handler.
pub(crate) struct FlashFile {
    pub path: PathBuf,
}

impl FlashFile {
    fn new(path: PathBuf) -> FlashFile {
        let _ = std::fs::remove_file(&path);
        servers::remove_on_signal(&path);
        FlashFile { path }
    }

    /// Bytes the file takes on disk (its allocated blocks: memcached writes
    /// it sparsely).
    pub(crate) fn allocated(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path).map_or(0, |m| m.blocks() * 512)
    }
}

impl Drop for FlashFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        servers::forget_on_signal(&self.path);
    }
}

/// A server started for a mode; dropping it stops the server (by PID),
/// then removes its flash file.
pub(crate) struct Running {
    // Declared first: dropped (the process killed) before the file goes.
    pub server: Server,
    pub file: Option<FlashFile>,
}

impl Running {
    pub(crate) fn kind(&self) -> Kind {
        self.server.kind
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    pub(crate) fn stats(&self) -> Result<HashMap<String, String>, String> {
        Conn::connect(self.addr())?.stats()
    }
}

/// Starts `kind` with `-m`, `-t`, the `-I` items of `max_value` need, and
/// with a flash file in `dir` when given: `-o ext_path=FILE:SIZE` and the
/// `--ext-opts`.
pub(crate) fn start(
    bins: &Binaries,
    kind: Kind,
    o: &FlashOpts,
    max_value: usize,
    dir: Option<&FlashDir>,
) -> Result<Running, String> {
    let mut args = Vec::new();
    if let Some(limit) = crate::load::item_size_limit(max_value, KEY_SIZE) {
        args.extend(["-I".to_string(), limit]);
    }
    let file = dir.map(|d| d.file(kind));
    if let Some(f) = &file {
        let mut ext = vec![format!("ext_path={}:{}", f.path.display(), o.flash_size)];
        ext.extend(o.ext_opts.iter().cloned());
        args.extend(["-o".to_string(), ext.join(",")]);
    }
    let server = Server::start_with(bins, kind, o.memory_mb, o.threads, &args)?;
    Ok(Running { server, file })
}

/// Byte `i` of a value is deterministic: the key (cut to the size), then a
/// stream seeded by id and size, so a value moved, cut short, mixed with
/// another item's or another size's bytes is caught.
pub(crate) fn append_value(out: &mut Vec<u8>, id: u64, size: usize) {
    let key = Key::new(b'k', id, KEY_SIZE);
    let head = size.min(KEY_SIZE);
    out.extend_from_slice(&key.as_bytes()[..head]);
    let mut state = id.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ (size as u64).rotate_left(32);
    let mut left = size - head;
    while left > 0 {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let n = left.min(8);
        out.extend_from_slice(&z.to_le_bytes()[..n]);
        left -= n;
    }
}

/// A value size for every id.
pub(crate) type SizeOf<'a> = &'a (dyn Fn(u64) -> usize + Sync);

/// What a load did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Loaded {
    /// Item data sent: keys and values.
    pub bytes: u64,
    pub seconds: f64,
    /// Replies to the `noreply` sets (`SERVER_ERROR out of memory ...`).
    pub set_errors: u64,
    pub error_sample: Vec<String>,
}

impl Loaded {
    pub(crate) fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
}

/// Bytes of `set` commands per write of the loader.
const LOAD_WRITE: usize = 64 * 1024;

/// Sets items `ids` in order (value sizes from `size_of`) on one
/// connection as pipelined `set … noreply` writes, paced to `mbps` MB/s of
/// item data (0: unpaced), then an `mn` round trip: every set has been
/// applied when it returns. One connection, so the items arrive in id
/// order: the lowest ids are the oldest, the first a server moves to flash.
pub(crate) fn load(
    addr: SocketAddr,
    ids: std::ops::Range<u64>,
    size_of: SizeOf,
    mbps: f64,
    tag: &str,
) -> Result<Loaded, String> {
    let mut conn = Conn::connect(addr)?;
    let n = ids.end - ids.start;
    let mut payload = Vec::with_capacity(LOAD_WRITE * 2);
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut last_note = start;
    for (i, id) in ids.enumerate() {
        let size = size_of(id);
        encode::set_line(
            &mut payload,
            Key::new(b'k', id, KEY_SIZE).as_bytes(),
            size,
            true,
        );
        append_value(&mut payload, id, size);
        encode::block_end(&mut payload);
        bytes += (size + KEY_SIZE) as u64;
        if payload.len() >= LOAD_WRITE {
            conn.send(&payload)?;
            payload.clear();
            if mbps > 0.0 {
                let due = start + Duration::from_secs_f64(bytes as f64 / (mbps * 1e6));
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            if last_note.elapsed() > Duration::from_secs(10) {
                last_note = Instant::now();
                eprintln!(
                    "{tag}: loaded {} of {n} items ({:.0} MB/s)",
                    i + 1,
                    bytes as f64 / 1e6 / start.elapsed().as_secs_f64()
                );
            }
        }
    }
    conn.send(&payload)?;
    conn.round_trip()?;
    Ok(Loaded {
        bytes,
        seconds: start.elapsed().as_secs_f64(),
        set_errors: conn.unexpected_lines,
        error_sample: conn.unexpected_sample.clone(),
    })
}

/// What a sweep found.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sweep {
    /// Hits with the exact value.
    pub found: u64,
    pub missing: u64,
    /// Hits with other bytes (or a key not asked for).
    pub wrong: u64,
}

impl Sweep {
    fn add(&mut self, o: &Sweep) {
        self.found += o.found;
        self.missing += o.missing;
        self.wrong += o.wrong;
    }
}

/// Fetches ids `lo, lo + step, …` below `hi` with multi-key `get`s (up to
/// 100 keys, fewer for large values) over `conns` connections, and compares
/// every value byte for byte with [`append_value`]'s.
pub(crate) fn sweep(
    addr: SocketAddr,
    lo: u64,
    hi: u64,
    step: u64,
    size_of: SizeOf,
    conns: usize,
) -> Result<Sweep, String> {
    let step = step.max(1);
    let count = (hi.saturating_sub(lo)).div_ceil(step);
    let conns = (conns.max(1) as u64).min(count.max(1));
    let results: Vec<Result<Sweep, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns)
            .map(|c| {
                let (a, b) = (count * c / conns, count * (c + 1) / conns);
                s.spawn(move || sweep_share(addr, (a..b).map(|i| lo + i * step), size_of))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("sweep thread panicked".into()))
            })
            .collect()
    });
    let mut out = Sweep::default();
    for r in results {
        out.add(&r?);
    }
    Ok(out)
}

fn sweep_share(
    addr: SocketAddr,
    mut ids: impl Iterator<Item = u64>,
    size_of: SizeOf,
) -> Result<Sweep, String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let io = |e: std::io::Error| format!("sweep on {addr}: {e}");
    let mut w = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(io)?;
    w.set_nodelay(true).map_err(io)?;
    w.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(io)?;
    let mut r = BufReader::with_capacity(1 << 18, w.try_clone().map_err(io)?);
    let mut out = Sweep::default();
    let (mut req, mut line, mut data, mut want) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut batch: Vec<u64> = Vec::new();
    loop {
        batch.clear();
        let mut bytes = 0;
        for id in ids.by_ref() {
            batch.push(id);
            bytes += size_of(id) + 64;
            if batch.len() >= 100 || bytes >= 1 << 20 {
                break;
            }
        }
        if batch.is_empty() {
            return Ok(out);
        }
        req.clear();
        encode::get(
            &mut req,
            b"get",
            batch.iter().map(|&id| Key::new(b'k', id, KEY_SIZE)),
        );
        w.write_all(&req).map_err(io)?;
        // Hits come in request order; `next` is the first id not yet seen.
        let mut next = 0;
        loop {
            line.clear();
            if r.read_until(b'\n', &mut line).map_err(io)? == 0 {
                return Err(format!("sweep on {addr}: connection closed"));
            }
            if reply::is_end(&line) {
                break;
            }
            let Some((key, _, len, _)) = reply::value_header(&line) else {
                let text = String::from_utf8_lossy(&line);
                return Err(format!("sweep: reply {:?} to a get", text.trim_end()));
            };
            let key = key.to_vec();
            data.resize(len + 2, 0);
            r.read_exact(&mut data).map_err(io)?;
            let at = (next..batch.len())
                .find(|&i| Key::new(b'k', batch[i], KEY_SIZE).as_bytes() == key.as_slice());
            let Some(i) = at else {
                out.wrong += 1;
                continue;
            };
            out.missing += (i - next) as u64;
            next = i + 1;
            want.clear();
            append_value(&mut want, batch[i], size_of(batch[i]));
            if &data[..len] == want.as_slice() && &data[len..] == b"\r\n" {
                out.found += 1;
            } else {
                out.wrong += 1;
            }
        }
        out.missing += (batch.len() - next) as u64;
    }
}

/// Waits (up to 60 s) until the server's item count and flash writes
/// (`curr_items`, `extstore_objects_written`, `extstore_objects_used`,
/// `evictions`) have not moved for a second, so that what a load left in
/// the server's queues has landed; the last `stats`.
pub(crate) fn settle(addr: SocketAddr) -> Result<HashMap<String, String>, String> {
    let mut conn = Conn::connect(addr)?;
    let fields = [
        "curr_items",
        "evictions",
        "extstore_objects_written",
        "extstore_objects_used",
    ];
    let key = |s: &HashMap<String, String>| fields.map(|f| stat(s, f));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = conn.stats()?;
    let mut since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let now = conn.stats()?;
        if key(&now) != key(&last) {
            since = Instant::now();
        } else if since.elapsed() >= Duration::from_secs(1) || Instant::now() > deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// How many items of `value_size` make `ratio` × `-m` of item data, and
/// whether the flash file cut that down (to [`FLASH_FILL`] of it).
pub(crate) fn items_for(o: &FlashOpts, ratio: f64, value_size: usize) -> (u64, bool) {
    let per_item = (value_size + KEY_SIZE) as f64;
    let want = (ratio * o.memory_mb as f64 * (1u64 << 20) as f64 / per_item).ceil() as u64;
    let fits = (o.flash_bytes as f64 * FLASH_FILL
        / (value_size as u64 + KEY_SIZE as u64 + FLASH_OVERHEAD) as f64) as u64;
    if want > fits {
        (fits.max(1), true)
    } else {
        (want.max(1), false)
    }
}

/// `statfs` magic of tmpfs.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Is `dir` on tmpfs? (There a "flash" file is RAM.)
fn on_tmpfs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data; zeroed is valid; the path is a valid
    // NUL-terminated string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type as i64 == TMPFS_MAGIC
}

/// `osmium-bench flash`: every mode asked, in the order density,
/// hitratio, reads, sizes; false if a server returned a wrong value.
pub(crate) fn run(bins: &Binaries, o: &FlashOpts) -> Result<bool, String> {
    if o.servers.is_empty() {
        return Err("--servers names no server".into());
    }
    if o.memory_mb == 0 || o.rounds == 0 {
        return Err("--memory and --rounds must be at least 1".into());
    }
    let dir = FlashDir::new(o.dir.as_deref())?;
    let tmpfs = on_tmpfs(&dir.path);
    eprintln!(
        "flash: -m {} -t {}, flash files of {} in {}{}",
        o.memory_mb,
        o.threads,
        o.flash_size,
        dir.path.display(),
        if tmpfs {
            " (WARNING: tmpfs: the \"flash\" is RAM; pass --dir on a disk)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let mut modes = o.modes.clone();
    modes.sort();
    modes.dedup();
    let mut ok = true;
    let mut doc = serde_json::Map::new();
    doc.insert("benchmark".into(), "flash".into());
    doc.insert(
        "config".into(),
        serde_json::json!({
            "modes": modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "servers": o.servers.iter().map(|k| k.name()).collect::<Vec<_>>(),
            "memory_mb": o.memory_mb,
            "threads": o.threads,
            "flash_size": o.flash_size,
            "flash_bytes": o.flash_bytes,
            "dir": dir.path.display().to_string(),
            "dir_is_tmpfs": tmpfs,
            "ext_opts": o.ext_opts,
            "rounds": o.rounds,
            "data_ratio": o.data_ratio,
            "sizes_ratio": o.sizes_ratio,
            "load_mbps": o.load_mbps,
            "key_size": KEY_SIZE,
            "seed": o.seed,
        }),
    );
    for mode in modes {
        let (mode_ok, value) = match mode {
            Mode::Density => density::run(bins, o, &dir)?,
            Mode::Hitratio => hitratio::run(bins, o, &dir)?,
            Mode::Reads => reads::run(bins, o, &dir, &[o.read_size], o.data_ratio, "reads")?,
            Mode::Sizes => reads::run(bins, o, &dir, &o.sweep_sizes, o.sizes_ratio, "sizes")?,
        };
        ok &= mode_ok;
        doc.insert(mode.name().into(), value);
        if !o.json {
            println!();
        }
    }
    let total = started.elapsed().as_secs_f64();
    doc.insert("total_seconds".into(), total.into());
    if o.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::Value::Object(doc))
                .map_err(|e| e.to_string())?
        );
    } else {
        println!("total run time {total:.0} s");
    }
    Ok(ok)
}

/// Servers of round `round` (1-based): `servers` in order, reversed every
/// other round.
pub(crate) fn round_order(servers: &[Kind], round: usize) -> Vec<Kind> {
    let mut v = servers.to_vec();
    if round.is_multiple_of(2) {
        v.reverse();
    }
    v
}

/// `x` with `d` decimals, `-` when None or not finite.
pub(crate) fn fmt_opt(x: Option<f64>, d: usize) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.d$}"),
        _ => "-".into(),
    }
}

/// `x` for JSON: null when not finite.
pub(crate) fn json_f64(x: Option<f64>) -> serde_json::Value {
    match x {
        Some(x) if x.is_finite() => x.into(),
        _ => serde_json::Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_sizes_parse_like_memcached() {
        assert_eq!(parse_flash_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_flash_size("512m").unwrap(), 512 << 20);
        assert_eq!(parse_flash_size("1t").unwrap(), 1 << 40);
        assert!(parse_flash_size("8").is_err());
        assert!(parse_flash_size("1.5G").is_err());
        assert!(parse_flash_size("0G").is_err());
        assert!(parse_flash_size("G").is_err());
    }

    #[test]
    fn values_depend_on_id_and_size() {
        let mut a = Vec::new();
        append_value(&mut a, 7, 100);
        assert_eq!(a.len(), 100);
        assert_eq!(&a[..16], b"k000000000000007");
        let mut b = Vec::new();
        append_value(&mut b, 7, 100);
        assert_eq!(a, b);
        b.clear();
        append_value(&mut b, 8, 100);
        assert_ne!(a[16..], b[16..]);
        b.clear();
        append_value(&mut b, 7, 101);
        assert_ne!(a[16..], b[16..100]);
        b.clear();
        append_value(&mut b, 7, 5);
        assert_eq!(b, b"k0000");
    }

    #[test]
    fn loads_fit_the_flash() {
        let o = FlashOpts {
            modes: vec![],
            servers: vec![],
            threads: 4,
            memory_mb: 64,
            flash_size: "8G".into(),
            flash_bytes: 8 << 30,
            dir: None,
            ext_opts: vec![],
            rounds: 1,
            data_ratio: 40.0,
            sizes_ratio: 8.0,
            density_sizes: vec![],
            sweep_sizes: vec![],
            load_mbps: 40.0,
            sweep_conns: 4,
            seed: 1,
            dist: KeyDist::Uniform,
            min_value: 100,
            max_value: 4096,
            warmup_requests: 0,
            requests: 0,
            hr_conns: 4,
            batch: 64,
            hr_rate: 0.0,
            read_size: 4096,
            read_conns: 16,
            duration: 1.0,
            warmup: 0.0,
            drop_cache: DropCache::Auto,
            json: false,
        };
        // 40 x 64 MiB of 4 KiB items: 2.5 GiB, fits in 8 GiB.
        assert_eq!(items_for(&o, 40.0, 4096), (652_810, false));
        let small = FlashOpts {
            flash_bytes: 1 << 30,
            ..o.clone()
        };
        let (n, cut) = items_for(&small, 40.0, 4096);
        assert!(cut && n < 230_000, "{n}");
        assert_eq!(
            round_order(&[Kind::Memcached, Kind::Osmium], 2)[0],
            Kind::Osmium
        );
    }
}
