//! `osmium-bench restart`: warm restart from a memory file (`-e FILE`)
//! compared between osmium and memcached on the same items. Owns the item
//! set (seeded mixed value sizes), the loader, the restart probe (spawn →
//! first `get` answered with its value), the survival sweep (every key
//! fetched and byte-compared), the memory-file guard, and the report
//! (table or JSON).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use osmium_protocol::client::encode;
use osmium_protocol::client::reply::{self, Expect, Outcome};

use crate::conn::{stat_u64, Conn};
use crate::keys::Key;
use crate::servers::{self, Binaries, Kind, Server};
use crate::{median, mib};

/// Key size: `k%015d`.
const KEY_SIZE: usize = 16;
/// Value sizes of most items: log-uniform over this range (bytes).
pub(crate) const SMALL_VALUES: (u32, u32) = (16, 4096);
/// Value sizes of the `--large-fraction` items: log-uniform over this range.
pub(crate) const LARGE_VALUES: (u32, u32) = (1024, 65536);
/// How long a server may answer the probe key with a miss before it counts
/// as having come back empty.
const COLD_GRACE: Duration = Duration::from_secs(1);
/// How long a restart (to the probe's answer) or a stop may take.
const PATIENCE: Duration = Duration::from_secs(180);
/// Keys per `get` of the survival sweep.
const SWEEP_BATCH: usize = 100;
/// Bytes of `set` commands per write of the loader.
const LOAD_WRITE: usize = 256 * 1024;

pub(crate) struct RestartOpts {
    pub items: u64,
    pub large_fraction: f64,
    pub seed: u64,
    /// `-m`; None: 2048, or what the items need with room.
    pub memory_mb: Option<u64>,
    pub threads: u32,
    pub rounds: usize,
    /// Where the memory files go (tmpfs for memcached).
    pub dir: PathBuf,
    /// Loader and sweep connections.
    pub conns: usize,
    pub servers: Vec<Kind>,
    pub json: bool,
}

/// The items: key `k%015d` of id `0..n`, value size drawn once from the
/// seed (the same sequence for every server), value bytes derived from the
/// seed and the id.
pub(crate) struct Items {
    sizes: Vec<u32>,
    seed: u64,
}

fn log_uniform(rng: &mut SmallRng, (lo, hi): (u32, u32)) -> u32 {
    let (lo_f, hi_f) = (f64::from(lo).ln(), f64::from(hi).ln());
    let x = (lo_f + rng.gen::<f64>() * (hi_f - lo_f)).exp().round();
    (x as u32).clamp(lo, hi)
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Items {
    pub(crate) fn new(n: u64, large_fraction: f64, seed: u64) -> Items {
        let mut rng = SmallRng::seed_from_u64(seed);
        let sizes = (0..n)
            .map(|_| {
                if rng.gen::<f64>() < large_fraction {
                    log_uniform(&mut rng, LARGE_VALUES)
                } else {
                    log_uniform(&mut rng, SMALL_VALUES)
                }
            })
            .collect();
        Items { sizes, seed }
    }

    pub(crate) fn len(&self) -> u64 {
        self.sizes.len() as u64
    }

    pub(crate) fn key(&self, id: u64) -> Key {
        Key::new(b'k', id, KEY_SIZE)
    }

    pub(crate) fn value_size(&self, id: u64) -> usize {
        self.sizes[id as usize] as usize
    }

    /// Appends item `id`'s value: its key (cut to the size), then a
    /// pseudo-random stream seeded by the seed and the id, so a value
    /// moved, truncated or mixed with another item's bytes is caught.
    pub(crate) fn append_value(&self, id: u64, out: &mut Vec<u8>) {
        let size = self.value_size(id);
        let key = self.key(id);
        let head = size.min(KEY_SIZE);
        out.extend_from_slice(&key.as_bytes()[..head]);
        let mut state = self.seed ^ id.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        let mut left = size - head;
        while left > 0 {
            let word = splitmix64(&mut state).to_le_bytes();
            let n = left.min(8);
            out.extend_from_slice(&word[..n]);
            left -= n;
        }
    }

    /// Bytes of item data: the sum of key and value sizes.
    pub(crate) fn data_bytes(&self) -> u64 {
        self.sizes
            .iter()
            .map(|&s| u64::from(s) + KEY_SIZE as u64)
            .sum()
    }

    /// `-m` that holds every item with room: 1.5 × (data + 100 B per item)
    /// + 64 MB, at least 2048.
    pub(crate) fn default_memory_mb(&self) -> u64 {
        let need = (self.data_bytes() + 100 * self.len()) as f64 * 1.5 / (1024.0 * 1024.0);
        (need.ceil() as u64 + 64).max(2048)
    }
}

/// The memory file of one server in one round (and memcached's
/// `FILE.meta`, osmium's `FILE.dicts`, its packing dictionaries): removed
/// before the first start, on drop and by the signal handler.
struct MemFile {
    path: PathBuf,
    meta: PathBuf,
    dicts: PathBuf,
}

impl MemFile {
    fn new(dir: &Path, kind: Kind) -> MemFile {
        let path = dir.join(format!("{}-{}.mem", kind.name(), std::process::id()));
        let beside = |suffix: &str| {
            let mut name = path.clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        };
        let f = MemFile {
            meta: beside(".meta"),
            dicts: beside(".dicts"),
            path,
        };
        for p in [&f.path, &f.meta, &f.dicts] {
            let _ = std::fs::remove_file(p);
            servers::remove_on_signal(p);
        }
        f
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        for p in [&self.path, &self.meta, &self.dicts] {
            let _ = std::fs::remove_file(p);
            servers::forget_on_signal(p);
        }
    }
}

/// How a server was stopped before the restart measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    /// SIGUSR1.
    Graceful,
    /// SIGKILL.
    Kill,
}

impl After {
    fn name(self) -> &'static str {
        match self {
            After::Graceful => "graceful",
            After::Kill => "kill -9",
        }
    }
}

/// Every key fetched after a restart.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Survival {
    /// Found with the right bytes.
    pub found: u64,
    pub missing: u64,
    /// Found with other bytes (or a key not asked for).
    pub wrong: u64,
}

/// One restart of one server.
#[derive(Debug)]
pub(crate) struct Row {
    pub round: usize,
    pub kind: Kind,
    pub after: After,
    /// Seconds the load took (the same load for both rows of a round).
    pub load_s: f64,
    /// VmRSS after the load.
    pub rss_loaded: u64,
    /// From SIGUSR1 / SIGKILL to the process's exit.
    pub stop_ms: f64,
    /// From spawn to the first answer to the probe `get` (hit or miss).
    pub up_ms: Option<f64>,
    /// From spawn to the probe `get` answered with its value.
    pub restart_ms: Option<f64>,
    pub survival: Survival,
    /// `curr_items` after the restart.
    pub curr_items: u64,
    /// VmRSS after the restart and the sweep.
    pub rss_restarted: u64,
    /// The `[restart]` lines the restarted server printed on stderr.
    pub lines: Vec<String>,
    /// The restart's duration by those lines ([`own_ms`]).
    pub own_ms: Option<f64>,
}

impl Row {
    fn back_pct(&self, items: u64) -> f64 {
        self.survival.found as f64 * 100.0 / items as f64
    }
}

/// Loads every item over `conns` connections (contiguous shares, pipelined
/// `set … noreply` writes of ~256 KiB, then an `mn` round trip on each).
fn load(server: &Server, items: &Items, conns: usize) -> Result<f64, String> {
    let mut cs: Vec<Conn> = (0..conns)
        .map(|_| Conn::connect(server.addr()))
        .collect::<Result<_, _>>()?;
    let n = items.len();
    let start = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = cs
            .iter_mut()
            .enumerate()
            .map(|(c, conn)| {
                let (lo, hi) = (
                    n * c as u64 / conns as u64,
                    n * (c as u64 + 1) / conns as u64,
                );
                s.spawn(move || -> Result<(), String> {
                    let mut payload = Vec::with_capacity(LOAD_WRITE + 70_000);
                    for id in lo..hi {
                        let key = items.key(id);
                        let size = items.value_size(id);
                        encode::set_line(&mut payload, key.as_bytes(), size, true);
                        items.append_value(id, &mut payload);
                        encode::block_end(&mut payload);
                        if payload.len() >= LOAD_WRITE {
                            conn.send(&payload)?;
                            payload.clear();
                        }
                    }
                    conn.send(&payload)?;
                    conn.round_trip()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("loader thread panicked".into()))
            })
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    let unexpected: u64 = cs.iter().map(|c| c.unexpected_lines).sum();
    if unexpected > 0 {
        let sample: Vec<&String> = cs.iter().flat_map(|c| &c.unexpected_sample).collect();
        return Err(format!(
            "{}: {unexpected} replies to noreply sets while loading, e.g. {sample:?}",
            server.kind
        ));
    }
    Ok(seconds)
}

/// What the probe saw.
struct Probe {
    up_ms: Option<f64>,
    restart_ms: Option<f64>,
}

/// A complete reply to `get KEY`: `Some(None)` a miss, `Some(Some(value))`
/// a hit.
type GetReply = Option<Option<Vec<u8>>>;

/// The reply to `get KEY` at the start of `buf`; None while incomplete. Any
/// other line is an error.
fn parse_get_reply(buf: &[u8]) -> Result<GetReply, String> {
    let framed = reply::frame_reply(buf, Expect::Values);
    let text = || String::from_utf8_lossy(&buf[..buf.len().min(80)]).into_owned();
    match framed.map_err(|_| format!("bad reply {:?}", text()))? {
        None => Ok(None),
        Some((_, Outcome::Miss)) => Ok(Some(None)),
        Some((n, Outcome::Value)) => Ok(Some(reply::value(&buf[..n]).map(<[u8]>::to_vec))),
        Some(_) => Err(format!("reply {:?}", text())),
    }
}

/// From `t0` (just before the spawn): connects every ~1 ms until the
/// server accepts, sends `get KEY` and waits for the answer; a miss (or an
/// error line) is asked again ~1 ms later, until a hit or [`COLD_GRACE`]
/// of misses (the server came back empty).
fn probe(server: &Server, t0: Instant, key: &[u8], expect: &[u8]) -> Result<Probe, String> {
    let ms = |t: Instant| t.duration_since(t0).as_secs_f64() * 1000.0;
    let mut req = Vec::new();
    encode::get(&mut req, b"get", [key]);
    let mut up: Option<Instant> = None;
    let mut stream: Option<TcpStream> = None;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 17];
    let mut sent = false;
    loop {
        if t0.elapsed() > PATIENCE {
            return Err(format!(
                "{} did not answer with the value within {PATIENCE:?}",
                server.kind
            ));
        }
        if let Some(status) = server.exited() {
            return Err(format!(
                "{} exited during the restart ({status}): {}",
                server.kind,
                server.stderr_text().trim()
            ));
        }
        let Some(s) = stream.as_mut() else {
            match TcpStream::connect_timeout(&server.addr(), Duration::from_millis(50)) {
                Ok(s) => {
                    s.set_nodelay(true).map_err(|e| e.to_string())?;
                    s.set_read_timeout(Some(Duration::from_millis(5)))
                        .map_err(|e| e.to_string())?;
                    stream = Some(s);
                    sent = false;
                    buf.clear();
                }
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            continue;
        };
        if !sent {
            if s.write_all(&req).is_err() {
                stream = None;
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            sent = true;
        }
        match s.read(&mut chunk) {
            Ok(0) => {
                stream = None;
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(_) => {
                stream = None;
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        }
        let reply = match parse_get_reply(&buf) {
            Ok(None) => continue,
            Ok(Some(value)) => Ok(value),
            Err(e) => Err(e),
        };
        let now = Instant::now();
        let first = *up.get_or_insert(now);
        if let Ok(Some(v)) = &reply {
            if v == expect {
                return Ok(Probe {
                    up_ms: Some(ms(first)),
                    restart_ms: Some(ms(now)),
                });
            }
        }
        if now.duration_since(first) > COLD_GRACE {
            return Ok(Probe {
                up_ms: Some(ms(first)),
                restart_ms: None,
            });
        }
        // A miss, a wrong value or an error line: ask again.
        buf.clear();
        sent = false;
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Fetches every item (`get` of [`SWEEP_BATCH`] keys at a time, `conns`
/// connections over contiguous shares) and compares each value byte for
/// byte.
fn sweep(addr: SocketAddr, items: &Items, conns: usize) -> Result<Survival, String> {
    let n = items.len();
    let results: Vec<Result<Survival, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns as u64)
            .map(|c| {
                let (lo, hi) = (n * c / conns as u64, n * (c + 1) / conns as u64);
                s.spawn(move || sweep_share(addr, items, lo, hi))
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
    let mut out = Survival::default();
    for r in results {
        let r = r?;
        out.found += r.found;
        out.missing += r.missing;
        out.wrong += r.wrong;
    }
    Ok(out)
}

fn sweep_share(addr: SocketAddr, items: &Items, lo: u64, hi: u64) -> Result<Survival, String> {
    let io = |e: std::io::Error| format!("sweep on {addr}: {e}");
    let mut w = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(io)?;
    w.set_nodelay(true).map_err(io)?;
    w.set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(io)?;
    let mut r = BufReader::with_capacity(1 << 18, w.try_clone().map_err(io)?);
    let mut out = Survival::default();
    let (mut req, mut line, mut data, mut want) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut id = lo;
    while id < hi {
        let end = (id + SWEEP_BATCH as u64).min(hi);
        req.clear();
        encode::get(&mut req, b"get", (id..end).map(|k| items.key(k)));
        w.write_all(&req).map_err(io)?;
        // Hits come in request order; `next` is the first key not yet seen.
        let mut next = id;
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
            let at = (next..end).find(|&k| items.key(k).as_bytes() == key.as_slice());
            let Some(k) = at else {
                out.wrong += 1;
                continue;
            };
            out.missing += k - next;
            next = k + 1;
            want.clear();
            items.append_value(k, &mut want);
            if &data[..len] == want.as_slice() && &data[len..] == b"\r\n" {
                out.found += 1;
            } else {
                out.wrong += 1;
            }
        }
        out.missing += end - next;
        id = end;
    }
    Ok(out)
}

/// The restart's duration by the server's own account, from its
/// `[restart]` lines: osmium's `... in X ms`, memcached's `recovery start
/// [S.U]` to `recovery end [S.U]` (`%d.%d` of seconds and microseconds: U
/// is not zero-padded, so it is read as a number of microseconds).
fn own_ms(lines: &[String]) -> Option<f64> {
    let stamp = |tag: &str| -> Option<i64> {
        let l = lines.iter().find(|l| l.contains(tag))?;
        let inner = l.rsplit_once('[')?.1.strip_suffix(']')?;
        let (s, us) = inner.split_once('.')?;
        Some(s.parse::<i64>().ok()? * 1_000_000 + us.parse::<i64>().ok()?)
    };
    if let (Some(a), Some(b)) = (stamp("recovery start"), stamp("recovery end")) {
        return Some((b - a) as f64 / 1000.0);
    }
    lines.iter().find_map(|l| {
        let (_, rest) = l.split_once(" in ")?;
        rest.split_once(" ms")?.0.parse().ok()
    })
}

/// The `[restart]` lines of a server's stderr.
fn restart_lines(server: &Server) -> Vec<String> {
    server
        .stderr_text()
        .lines()
        .filter(|l| l.contains("[restart]"))
        .map(str::to_string)
        .collect()
}

/// Sleeps until the wall clock is in a later second than now (+ 10 ms):
/// memcached 1.6.45 refuses a memory file whose stop time (whole seconds,
/// saved at the stop) is not before the second of the start ("restart
/// incompatible due to setting for [stop_time]": it takes a zero delta for
/// a clock gone wrong). Done before every restart of every server alike;
/// the restart is timed from the spawn, after it.
fn next_second() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = Duration::from_nanos(u64::from(now.subsec_nanos()));
    std::thread::sleep(Duration::from_secs(1) - into + Duration::from_millis(10));
}

/// A server restarted on its memory file, probed and swept.
struct Restarted {
    server: Server,
    probe: Probe,
    survival: Survival,
    curr_items: u64,
    rss: u64,
}

/// Starts a server again with `args` (its memory file), times it with
/// [`probe`] (on item `probe_id`), then sweeps every item.
fn restarted(
    bins: &Binaries,
    kind: Kind,
    args: &[String],
    memory_mb: u64,
    o: &RestartOpts,
    items: &Items,
    probe_id: u64,
) -> Result<Restarted, String> {
    let key = items.key(probe_id);
    let mut expect = Vec::new();
    items.append_value(probe_id, &mut expect);
    next_second();
    let t0 = Instant::now();
    let server = Server::spawn(bins, kind, memory_mb, o.threads, args)?;
    let probe = probe(&server, t0, key.as_bytes(), &expect)?;
    let survival = sweep(server.addr(), items, o.conns)?;
    let curr_items = stat_u64(&Conn::connect(server.addr())?.stats()?, "curr_items")?;
    let rss = server.rss_bytes()?;
    Ok(Restarted {
        server,
        probe,
        survival,
        curr_items,
        rss,
    })
}

/// One round of one server: fresh start on a new file, load, SIGUSR1,
/// restart (row 1), SIGKILL, restart (row 2).
fn measure(
    bins: &Binaries,
    kind: Kind,
    round: usize,
    o: &RestartOpts,
    items: &Items,
    memory_mb: u64,
) -> Result<[Row; 2], String> {
    let file = MemFile::new(&o.dir, kind);
    // -v: memcached prints its `[restart] recovery start/end` lines only
    // when verbose (osmium prints its line either way); errors and warnings
    // only, for both.
    let args = vec![
        "-e".to_string(),
        file.path.display().to_string(),
        "-v".to_string(),
    ];
    let probe_id = items.len() / 2;
    let tag = format!("restart: round {round}/{}: {kind}", o.rounds);

    let first = Server::start_with(bins, kind, memory_mb, o.threads, &args)?;
    let load_s = load(&first, items, o.conns)?;
    let stats = Conn::connect(first.addr())?.stats()?;
    let (curr, evictions) = (
        stat_u64(&stats, "curr_items")?,
        stat_u64(&stats, "evictions")?,
    );
    if evictions > 0 || curr != items.len() {
        return Err(format!(
            "{kind}: {curr} items of {} after the load, {evictions} evictions: raise -m (now {memory_mb})",
            items.len()
        ));
    }
    let rss_loaded = first.rss_bytes()?;
    eprintln!(
        "{tag}: loaded {} items in {load_s:.2} s, RSS {:.1} MiB; SIGUSR1",
        items.len(),
        mib(rss_loaded)
    );
    let t = Instant::now();
    first.signal(libc::SIGUSR1)?;
    first.wait_exit(PATIENCE)?;
    let graceful_stop_ms = t.elapsed().as_secs_f64() * 1000.0;
    drop(first);

    let mut rows = Vec::with_capacity(2);
    let mut stop_ms = graceful_stop_ms;
    for after in [After::Graceful, After::Kill] {
        let Restarted {
            server,
            probe: p,
            survival,
            curr_items,
            rss,
        } = restarted(bins, kind, &args, memory_mb, o, items, probe_id)?;
        eprintln!(
            "{tag}: after {}: restart {} ms, {} of {} back, {} wrong",
            after.name(),
            p.restart_ms.map_or("-".into(), |x| format!("{x:.1}")),
            survival.found,
            items.len(),
            survival.wrong
        );
        let next_stop_ms = if after == After::Graceful {
            let t = Instant::now();
            server.signal(libc::SIGKILL)?;
            server.wait_exit(PATIENCE)?;
            t.elapsed().as_secs_f64() * 1000.0
        } else {
            0.0
        };
        let lines = restart_lines(&server);
        rows.push(Row {
            round,
            kind,
            after,
            load_s,
            rss_loaded,
            stop_ms,
            up_ms: p.up_ms,
            restart_ms: p.restart_ms,
            survival,
            curr_items,
            rss_restarted: rss,
            own_ms: own_ms(&lines),
            lines,
        });
        stop_ms = next_stop_ms;
    }
    let [a, b]: [Row; 2] = rows.try_into().map_err(|_| "two rows".to_string())?;
    Ok([a, b])
}

fn fmt_opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".into(), |x| format!("{x:.decimals$}"))
}

/// `osmium-bench restart`: false if a server lost items it should have
/// kept (any server after a graceful stop; osmium also after kill -9) or
/// returned a wrong value.
pub(crate) fn run(bins: &Binaries, o: &RestartOpts) -> Result<bool, String> {
    if o.items == 0 {
        return Err("--items must be at least 1".into());
    }
    crate::keys::check_key_size(KEY_SIZE, o.items)?;
    if !(0.0..=1.0).contains(&o.large_fraction) {
        return Err("--large-fraction must be between 0 and 1".into());
    }
    if !o.dir.is_dir() {
        return Err(format!("--dir {}: not a directory", o.dir.display()));
    }
    let items = Items::new(o.items, o.large_fraction, o.seed);
    let data = items.data_bytes();
    let memory_mb = o.memory_mb.unwrap_or_else(|| items.default_memory_mb());
    let gb = data as f64 / 1e9;
    eprintln!(
        "restart: {} items, {:.1} MiB of item data, -m {memory_mb} -t {}, files in {}",
        o.items,
        mib(data),
        o.threads,
        o.dir.display()
    );
    let mut rows: Vec<Row> = Vec::new();
    for round in 1..=o.rounds {
        for &kind in &o.servers {
            rows.extend(measure(bins, kind, round, o, &items, memory_mb)?);
        }
    }

    let ok = rows.iter().all(|r| {
        let must_keep = r.after == After::Graceful || r.kind != Kind::Memcached;
        r.survival.wrong == 0 && (!must_keep || (r.survival.missing == 0 && r.restart_ms.is_some()))
    });
    let ms_per_gb = |r: &Row| r.restart_ms.map(|x| x / gb);
    // Medians per (server, after), in the order the servers ran.
    let mut groups: Vec<(Kind, After)> = Vec::new();
    for r in &rows {
        if !groups.contains(&(r.kind, r.after)) {
            groups.push((r.kind, r.after));
        }
    }
    let of = |k: Kind, a: After| rows.iter().filter(move |r| r.kind == k && r.after == a);
    let med = |k: Kind, a: After, f: &dyn Fn(&Row) -> Option<f64>| {
        median(of(k, a).filter_map(f).collect())
    };
    // osmium / memcached restart time after a graceful stop, per round.
    let ratios: Vec<(usize, f64)> = (1..=o.rounds)
        .filter_map(|round| {
            let find = |k: Kind| {
                rows.iter()
                    .find(|r| r.round == round && r.kind == k && r.after == After::Graceful)
                    .and_then(|r| r.restart_ms)
            };
            Some((round, find(Kind::Osmium)? / find(Kind::Memcached)?))
        })
        .collect();
    let median_ratio = median(ratios.iter().map(|r| r.1).collect());

    if o.json {
        let out = json!({
            "benchmark": "restart",
            "items": o.items,
            "item_bytes": data,
            "key_size": KEY_SIZE,
            "small_values": [SMALL_VALUES.0, SMALL_VALUES.1],
            "large_values": [LARGE_VALUES.0, LARGE_VALUES.1],
            "large_fraction": o.large_fraction,
            "seed": o.seed,
            "memory_mb": memory_mb,
            "threads": o.threads,
            "rounds": o.rounds,
            "rows": rows.iter().map(|r| json!({
                "round": r.round,
                "server": r.kind.name(),
                "after": match r.after { After::Graceful => "graceful", After::Kill => "kill9" },
                "load_seconds": r.load_s,
                "rss_loaded": r.rss_loaded,
                "stop_ms": r.stop_ms,
                "up_ms": r.up_ms,
                "restart_ms": r.restart_ms,
                "own_ms": r.own_ms,
                "ms_per_gb": ms_per_gb(r),
                "found": r.survival.found,
                "missing": r.survival.missing,
                "wrong": r.survival.wrong,
                "back_pct": r.back_pct(o.items),
                "curr_items": r.curr_items,
                "rss_restarted": r.rss_restarted,
                "restart_lines": r.lines,
            })).collect::<Vec<_>>(),
            "medians": groups.iter().map(|&(k, a)| json!({
                "server": k.name(),
                "after": match a { After::Graceful => "graceful", After::Kill => "kill9" },
                "restart_ms": med(k, a, &|r| r.restart_ms),
                "ms_per_gb": med(k, a, &ms_per_gb),
                "back_pct": med(k, a, &|r| Some(r.back_pct(o.items))),
                "wrong": of(k, a).map(|r| r.survival.wrong).sum::<u64>(),
                "missing": of(k, a).map(|r| r.survival.missing).sum::<u64>(),
            })).collect::<Vec<_>>(),
            "ratios": ratios.iter().map(|(round, x)| json!({"round": round, "graceful_restart_ms": x})).collect::<Vec<_>>(),
            "median_ratio": median_ratio,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(ok);
    }

    println!(
        "warm restart: {} items, {:.1} MiB of item data ({KEY_SIZE} B keys; values log-uniform {}–{} B, {} % of them {}–{} B), -m {memory_mb} -t {}, memory files in {}",
        o.items,
        mib(data),
        SMALL_VALUES.0,
        SMALL_VALUES.1,
        o.large_fraction * 100.0,
        LARGE_VALUES.0,
        LARGE_VALUES.1,
        o.threads,
        o.dir.display()
    );
    println!();
    println!(
        "{:>5}  {:<10} {:<9} {:>9} {:>8} {:>8} {:>10} {:>8} {:>9} {:>8} {:>7} {:>7}",
        "round",
        "server",
        "after",
        "RSS MiB",
        "stop ms",
        "up ms",
        "restart ms",
        "own ms",
        "ms per GB",
        "back %",
        "wrong",
        "missing"
    );
    println!("{}", "-".repeat(113));
    for r in &rows {
        println!(
            "{:>5}  {:<10} {:<9} {:>9.1} {:>8.1} {:>8} {:>10} {:>8} {:>9} {:>8.2} {:>7} {:>7}",
            r.round,
            r.kind,
            r.after.name(),
            mib(r.rss_loaded),
            r.stop_ms,
            fmt_opt(r.up_ms, 1),
            fmt_opt(r.restart_ms, 1),
            fmt_opt(r.own_ms, 1),
            fmt_opt(ms_per_gb(r), 0),
            r.back_pct(o.items),
            r.survival.wrong,
            r.survival.missing
        );
    }
    println!();
    println!("[restart] lines of each restarted server (stderr):");
    for r in &rows {
        let lines = if r.lines.is_empty() {
            vec!["(none)".to_string()]
        } else {
            r.lines.clone()
        };
        for l in lines {
            println!("  {} {} {}: {l}", r.round, r.kind, r.after.name());
        }
    }
    println!();
    println!(
        "medians over {} round(s) (wrong and missing: all rounds):",
        o.rounds
    );
    println!(
        "{:<10} {:<9} {:>10} {:>9} {:>8} {:>7} {:>7}",
        "server", "after", "restart ms", "ms per GB", "back %", "wrong", "missing"
    );
    for &(k, a) in &groups {
        println!(
            "{:<10} {:<9} {:>10} {:>9} {:>8} {:>7} {:>7}",
            k,
            a.name(),
            fmt_opt(med(k, a, &|r| r.restart_ms), 1),
            fmt_opt(med(k, a, &ms_per_gb), 0),
            fmt_opt(med(k, a, &|r| Some(r.back_pct(o.items))), 2),
            of(k, a).map(|r| r.survival.wrong).sum::<u64>(),
            of(k, a).map(|r| r.survival.missing).sum::<u64>()
        );
    }
    if let Some(m) = median_ratio {
        println!();
        for (round, x) in &ratios {
            println!("round {round}: osmium/memcached restart time after a graceful stop {x:.3}");
        }
        println!("median osmium/memcached restart time after a graceful stop: {m:.3}");
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_seeded_and_mixed() {
        let a = Items::new(10_000, 0.05, 7);
        let b = Items::new(10_000, 0.05, 7);
        assert_eq!(a.sizes, b.sizes);
        assert!(a.sizes.iter().all(|&s| (16..=65536).contains(&s)));
        // 5 % large, two thirds of them (ln 16 / ln 64) over 4 KiB: ~333.
        let large = a.sizes.iter().filter(|&&s| s > 4096).count();
        assert!((250..420).contains(&large), "{large} values over 4 KiB");
        let (mut v, mut w) = (Vec::new(), Vec::new());
        a.append_value(3, &mut v);
        b.append_value(3, &mut w);
        assert_eq!(v, w);
        assert_eq!(v.len(), a.value_size(3));
        w.clear();
        Items::new(10_000, 0.05, 8).append_value(3, &mut w);
        assert_ne!(v, w);
    }

    #[test]
    fn get_replies_parse() {
        assert_eq!(parse_get_reply(b"END\r\n").unwrap(), Some(None));
        assert_eq!(parse_get_reply(b"VALUE k 0 2\r\nab\r\nE").unwrap(), None);
        assert_eq!(
            parse_get_reply(b"VALUE k 0 2\r\nab\r\nEND\r\n").unwrap(),
            Some(Some(b"ab".to_vec()))
        );
        assert!(parse_get_reply(b"SERVER_ERROR x\r\n").is_err());
    }

    #[test]
    fn own_durations_parse() {
        let mc: Vec<String> = [
            "[restart] original memory base: [0x7f83b561d000] new base: [0x7f8f0161d000]",
            "[restart] recovery start [1795682179.13866]",
            "[restart] recovery end [1795682180.7119]",
        ]
        .map(String::from)
        .to_vec();
        let ms = own_ms(&mc).unwrap();
        assert!((ms - 993.253).abs() < 1e-6, "{ms}");
        let os = vec![
            "[restart] 20000 items back from /dev/shm/o.mem in 10.6 ms (20 segments)".to_string(),
        ];
        assert_eq!(own_ms(&os), Some(10.6));
        assert_eq!(
            own_ms(&["[restart] no metadata save file".to_string()]),
            None
        );
    }
}
