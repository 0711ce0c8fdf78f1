//! `flash --mode hitratio`: a cache-aside workload over the network with a
//! flash file, its total data `--data-ratio` times `-m`. Owns the item set
//! (value sizes log-uniform between `--min-value` and `--max-value`, one
//! per key, derived from the seed and the id), the request streams (keys
//! drawn by `--dist`, zipf:0.99 by default, rank → key through a fixed
//! permutation; drawn once before any server runs and replayed to each),
//! the pipelined cache-aside client (per batch: the sets of the previous
//! batch's misses, then `--batch` gets; every hit byte-compared), the
//! warm-up and measured phases, and the miss ratio table and JSON.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::Distribution;
use serde_json::json;

use super::{
    append_value, fmt_opt, json_f64, round_order, start, stat, stat_delta, FlashDir, FlashOpts,
    FLASH_FILL, FLASH_OVERHEAD, KEY_SIZE,
};
use osmium_protocol::client::encode;
use osmium_protocol::client::reply::{self, Outcome};

use crate::keys::{permutation, Key};
use crate::load::KeyDist;
use crate::servers::{Binaries, Kind};
use crate::{median, mib};

/// Value size of key `id`: log-uniform between `min` and `max`, from the
/// seed and the id (the same for every server and every request).
pub(crate) fn value_size(seed: u64, min: usize, max: usize, id: u64) -> usize {
    let mut z = (seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_add(0x632B_E59B_D9B4_E019);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = (z >> 11) as f64 / (1u64 << 53) as f64;
    let (lo, hi) = ((min as f64).ln(), (max as f64).ln());
    ((lo + u * (hi - lo)).exp().round() as usize).clamp(min, max)
}

/// Keys `0..n` whose item data (key + value) adds up to `ratio` × `-m`,
/// fewer if the flash file would not hold them; (n, data bytes, cut).
fn key_count(o: &FlashOpts) -> (u64, u64, bool) {
    let target = (o.data_ratio * o.memory_mb as f64 * (1u64 << 20) as f64) as u64;
    let flash = (o.flash_bytes as f64 * FLASH_FILL) as u64;
    let (mut data, mut on_flash, mut n) = (0u64, 0u64, 0u64);
    while data < target {
        let v = value_size(o.seed, o.min_value, o.max_value, n) as u64;
        if on_flash + v + KEY_SIZE as u64 + FLASH_OVERHEAD > flash {
            return (n, data, true);
        }
        data += v + KEY_SIZE as u64;
        on_flash += v + KEY_SIZE as u64 + FLASH_OVERHEAD;
        n += 1;
    }
    (n, data, false)
}

/// Draws ids by a [`KeyDist`] over ranks, each rank mapped to a key by a
/// fixed permutation (hot keys scattered over the key space).
struct Sampler {
    n: u64,
    dist: KeyDist,
    zipf: Option<rand_distr::Zipf<f64>>,
    perm: Vec<u32>,
}

impl Sampler {
    fn new(n: u64, dist: KeyDist, seed: u64) -> Result<Sampler, String> {
        let zipf = match dist {
            KeyDist::Zipf(s) => {
                Some(rand_distr::Zipf::new(n, s).map_err(|e| format!("zipf({n}, {s}): {e}"))?)
            }
            _ => None,
        };
        Ok(Sampler {
            n,
            dist,
            zipf,
            perm: permutation(n as u32, seed ^ 0x5EED_F1A5_u64),
        })
    }

    fn sample(&self, rng: &mut SmallRng) -> u32 {
        let rank = match self.dist {
            KeyDist::Uniform => rng.gen_range(0..self.n),
            KeyDist::Zipf(_) => {
                let r = self.zipf.as_ref().map_or(1.0, |z| z.sample(rng));
                (r as u64).clamp(1, self.n) - 1
            }
            KeyDist::Hotspot { fraction, share } => {
                let hot = ((self.n as f64 * fraction) as u64).clamp(1, self.n);
                if hot == self.n || rng.gen_bool(share) {
                    rng.gen_range(0..hot)
                } else {
                    rng.gen_range(hot..self.n)
                }
            }
        };
        self.perm[rank as usize]
    }
}

/// Client-side counts of one phase.
#[derive(Clone, Debug, Default)]
struct Counts {
    gets: u64,
    misses: u64,
    sets: u64,
    /// Set replies other than `STORED`.
    set_errors: u64,
    /// Get replies other than `VALUE`/`END`.
    get_errors: u64,
    /// Hits whose value was not the key's.
    wrong: u64,
    sample: Vec<String>,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.gets += o.gets;
        self.misses += o.misses;
        self.sets += o.sets;
        self.set_errors += o.set_errors;
        self.get_errors += o.get_errors;
        self.wrong += o.wrong;
        for s in &o.sample {
            if self.sample.len() < 3 {
                self.sample.push(s.clone());
            }
        }
    }

    fn note(&mut self, line: &[u8]) {
        if self.sample.len() < 3 {
            self.sample
                .push(String::from_utf8_lossy(line).trim_end().to_string());
        }
    }

    fn miss_ratio(&self) -> f64 {
        self.misses as f64 / self.gets.max(1) as f64
    }
}

/// One pipelined cache-aside connection.
struct Client {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    /// Misses of the last batch, set at the start of the next.
    pending: Vec<u64>,
    payload: Vec<u8>,
    line: Vec<u8>,
    data: Vec<u8>,
    want: Vec<u8>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Result<Client, String> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let reader = BufReader::with_capacity(1 << 17, s.try_clone().map_err(|e| e.to_string())?);
        Ok(Client {
            writer: s,
            reader,
            pending: Vec::new(),
            payload: Vec::new(),
            line: Vec::new(),
            data: Vec::new(),
            want: Vec::new(),
        })
    }

    fn read_line(&mut self) -> Result<(), String> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| format!("reading a reply: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        Ok(())
    }

    /// Sends the pending sets and `batch`'s gets in one write, reads every
    /// reply, and queues the misses (each key once) for the next exchange.
    fn exchange(&mut self, o: &FlashOpts, batch: &[u32], c: &mut Counts) -> Result<(), String> {
        let size = |id: u64| value_size(o.seed, o.min_value, o.max_value, id);
        self.payload.clear();
        for &id in &self.pending {
            let n = size(id);
            encode::set_line(
                &mut self.payload,
                Key::new(b'k', id, KEY_SIZE).as_bytes(),
                n,
                false,
            );
            append_value(&mut self.payload, id, n);
            encode::block_end(&mut self.payload);
        }
        for &id in batch {
            encode::get(
                &mut self.payload,
                b"get",
                [Key::new(b'k', u64::from(id), KEY_SIZE)],
            );
        }
        self.writer
            .write_all(&self.payload)
            .map_err(|e| format!("sending: {e}"))?;
        for _ in 0..self.pending.len() {
            self.read_line()?;
            c.sets += 1;
            if reply::outcome(&self.line) != Outcome::Done {
                c.set_errors += 1;
                let l = self.line.clone();
                c.note(&l);
            }
        }
        self.pending.clear();
        for &id in batch {
            let id = u64::from(id);
            let mut hit = false;
            loop {
                self.read_line()?;
                if reply::is_end(&self.line) {
                    break;
                }
                if reply::outcome(&self.line) != Outcome::Value {
                    c.get_errors += 1;
                    let l = self.line.clone();
                    c.note(&l);
                    break;
                }
                let (_, _, len, _) = reply::value_header(&self.line).ok_or_else(|| {
                    format!("bad VALUE line {:?}", String::from_utf8_lossy(&self.line))
                })?;
                self.data.resize(len + 2, 0);
                self.reader
                    .read_exact(&mut self.data)
                    .map_err(|e| format!("reading a value: {e}"))?;
                self.want.clear();
                append_value(&mut self.want, id, size(id));
                if self.data[..len] != self.want[..] {
                    c.wrong += 1;
                }
                hit = true;
            }
            c.gets += 1;
            if !hit {
                c.misses += 1;
                if !self.pending.contains(&id) {
                    self.pending.push(id);
                }
            }
        }
        Ok(())
    }

    /// Requests `ids` in batches, at `rate` gets per second (0: as fast
    /// as the replies come); ends with the last batch's misses stored.
    fn run(&mut self, o: &FlashOpts, ids: &[u32], rate: f64) -> Result<Counts, String> {
        let mut c = Counts::default();
        let start = Instant::now();
        let mut sent = 0usize;
        for batch in ids.chunks(o.batch.max(1)) {
            if rate > 0.0 {
                let due = start + Duration::from_secs_f64(sent as f64 / rate);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            self.exchange(o, batch, &mut c)?;
            sent += batch.len();
        }
        if !self.pending.is_empty() {
            self.exchange(o, &[], &mut c)?;
        }
        Ok(c)
    }
}

/// Every connection's stream: its warm-up share, then its measured share.
struct Streams {
    ids: Vec<Vec<u32>>,
    warmup: Vec<usize>,
}

fn share(total: u64, n: u64, i: u64) -> u64 {
    total * (i + 1) / n - total * i / n
}

fn draw(o: &FlashOpts, keys: u64) -> Result<Streams, String> {
    let sampler = Sampler::new(keys, o.dist, o.seed)?;
    let conns = o.hr_conns.max(1) as u64;
    let sampler = &sampler;
    let ids: Vec<Vec<u32>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..conns)
            .map(|i| {
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(
                        o.seed
                            .wrapping_add((i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                    );
                    let len = share(o.warmup_requests, conns, i) + share(o.requests, conns, i);
                    (0..len)
                        .map(|_| sampler.sample(&mut rng))
                        .collect::<Vec<u32>>()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let warmup = (0..conns)
        .map(|i| share(o.warmup_requests, conns, i) as usize)
        .collect();
    Ok(Streams { ids, warmup })
}

/// Runs one phase on every client at once; the summed counts and seconds.
fn phase(
    clients: &mut [Client],
    o: &FlashOpts,
    streams: &Streams,
    measured: bool,
) -> Result<(Counts, f64), String> {
    let t = Instant::now();
    let rate = o.hr_rate / clients.len().max(1) as f64;
    let results: Vec<Result<Counts, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(i, cl)| {
                let (warm, meas) = streams.ids[i].split_at(streams.warmup[i]);
                let ids = if measured { meas } else { warm };
                s.spawn(move || cl.run(o, ids, rate))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("client thread panicked".into()))
            })
            .collect()
    });
    let mut total = Counts::default();
    for r in results {
        total.add(&r?);
    }
    Ok((total, t.elapsed().as_secs_f64()))
}

/// One (round, server).
struct Row {
    round: usize,
    kind: Kind,
    warm: Counts,
    meas: Counts,
    warm_s: f64,
    meas_s: f64,
    /// `stats` at the end of the warm-up and of the measured phase.
    s0: HashMap<String, String>,
    s1: HashMap<String, String>,
    rss: u64,
}

impl Row {
    fn delta(&self, name: &str) -> Option<u64> {
        stat_delta(&self.s0, &self.s1, name)
    }

    /// Share of the measured hits the server read from flash.
    fn flash_hit_share(&self) -> Option<f64> {
        super::flash_share(&self.s0, &self.s1)
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "round": self.round,
            "server": self.kind.name(),
            "miss_ratio": self.meas.miss_ratio(),
            "gets": self.meas.gets,
            "misses": self.meas.misses,
            "fills": self.meas.sets,
            "warmup_miss_ratio": self.warm.miss_ratio(),
            "wrong": self.meas.wrong + self.warm.wrong,
            "set_errors": self.meas.set_errors + self.warm.set_errors,
            "get_errors": self.meas.get_errors + self.warm.get_errors,
            "error_sample": self.warm.sample.iter().chain(&self.meas.sample).take(3).collect::<Vec<_>>(),
            "warmup_seconds": self.warm_s,
            "measured_seconds": self.meas_s,
            "server_get_hits": self.delta("get_hits"),
            "server_get_misses": self.delta("get_misses"),
            "get_extstore": self.delta("get_extstore"),
            "miss_from_extstore": self.delta("miss_from_extstore"),
            "flash_hit_share": json_f64(self.flash_hit_share()),
            "evictions": self.delta("evictions"),
            "evictions_in_warmup": stat(&self.s0, "evictions"),
            "curr_items": stat(&self.s1, "curr_items"),
            "extstore_objects_used": stat(&self.s1, "extstore_objects_used"),
            "extstore_index_bytes": stat(&self.s1, "extstore_index_bytes"),
            "rss": self.rss,
        })
    }
}

fn measure(
    bins: &Binaries,
    o: &FlashOpts,
    dir: &FlashDir,
    streams: &Streams,
    kind: Kind,
    round: usize,
) -> Result<Row, String> {
    let tag = format!("flash hitratio: round {round}: {kind}");
    let running = start(bins, kind, o, o.max_value, Some(dir))?;
    let mut clients = (0..o.hr_conns.max(1))
        .map(|_| Client::connect(running.addr()))
        .collect::<Result<Vec<_>, _>>()?;
    let (warm, warm_s) = phase(&mut clients, o, streams, false)?;
    running.server.check_alive()?;
    let s0 = running.stats()?;
    eprintln!(
        "{tag}: warm-up {} gets in {warm_s:.1} s, miss ratio {:.4}, {} items, {} on flash",
        warm.gets,
        warm.miss_ratio(),
        fmt_opt(stat(&s0, "curr_items").map(|x| x as f64), 0),
        fmt_opt(stat(&s0, "extstore_objects_used").map(|x| x as f64), 0)
    );
    if stat(&s0, "evictions") == Some(0) && stat(&s0, "extstore_objects_used").unwrap_or(0) == 0 {
        eprintln!("{tag}: WARNING: nothing evicted or flashed in the warm-up: the cache is not full yet (raise --warmup-requests)");
    }
    let (meas, meas_s) = phase(&mut clients, o, streams, true)?;
    running.server.check_alive()?;
    let s1 = running.stats()?;
    let rss = running.server.rss_bytes()?;
    eprintln!(
        "{tag}: measured {} gets in {meas_s:.1} s ({:.0} k/s): miss ratio {:.4}, {} wrong",
        meas.gets,
        meas.gets as f64 / meas_s.max(1e-9) / 1e3,
        meas.miss_ratio(),
        meas.wrong + warm.wrong
    );
    Ok(Row {
        round,
        kind,
        warm,
        meas,
        warm_s,
        meas_s,
        s0,
        s1,
        rss,
    })
}

/// Runs the hit-ratio mode; prints its table (unless JSON) and returns
/// (no wrong value or error reply, its JSON).
pub(crate) fn run(
    bins: &Binaries,
    o: &FlashOpts,
    dir: &FlashDir,
) -> Result<(bool, serde_json::Value), String> {
    if o.min_value == 0 || o.min_value > o.max_value {
        return Err("--min-value must be at least 1 and at most --max-value".into());
    }
    let (keys, data, cut) = key_count(o);
    if keys == 0 || keys > u64::from(u32::MAX) {
        return Err(format!("{keys} keys: out of range"));
    }
    let t = Instant::now();
    let streams = draw(o, keys)?;
    eprintln!(
        "flash hitratio: {keys} keys, {:.0} MiB of item data{}; drew {} + {} {} requests in {:.1} s",
        mib(data),
        if cut { " (cut to fit the flash file)" } else { "" },
        o.warmup_requests,
        o.requests,
        o.dist,
        t.elapsed().as_secs_f64()
    );
    let mut rows = Vec::new();
    for round in 1..=o.rounds {
        for kind in round_order(&o.servers, round) {
            rows.push(measure(bins, o, dir, &streams, kind, round)?);
        }
    }
    let ok = rows
        .iter()
        .all(|r| r.warm.wrong + r.meas.wrong + r.warm.get_errors + r.meas.get_errors == 0);
    let med = |kind: Kind, f: &dyn Fn(&Row) -> Option<f64>| {
        median(
            rows.iter()
                .filter(|r| r.kind == kind)
                .filter_map(f)
                .collect(),
        )
    };
    let miss = |r: &Row| Some(r.meas.miss_ratio());
    let ratios: Vec<(usize, f64)> = (1..=o.rounds)
        .filter_map(|round| {
            let find = |k: Kind| rows.iter().find(|r| r.round == round && r.kind == k);
            Some((
                round,
                find(Kind::Osmium)?.meas.miss_ratio() / find(Kind::Memcached)?.meas.miss_ratio(),
            ))
        })
        .collect();
    let median_ratio = median(ratios.iter().map(|r| r.1).collect());
    let value = json!({
        "keys": keys,
        "item_bytes": data,
        "keys_cut_by_flash_size": cut,
        "dist": o.dist.to_string(),
        "min_value": o.min_value,
        "max_value": o.max_value,
        "warmup_requests": o.warmup_requests,
        "requests": o.requests,
        "conns": o.hr_conns,
        "batch": o.batch,
        "rate": o.hr_rate,
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
        "medians": o.servers.iter().map(|&k| json!({
            "server": k.name(),
            "miss_ratio": json_f64(med(k, &miss)),
            "flash_hit_share": json_f64(med(k, &Row::flash_hit_share)),
        })).collect::<Vec<_>>(),
        "ratios": ratios.iter().map(|(round, x)| json!({"round": round, "miss_ratio_osmium_vs_memcached": json_f64(Some(*x))})).collect::<Vec<_>>(),
        "median_ratio": json_f64(median_ratio),
    });
    if o.json {
        return Ok((ok, value));
    }
    println!(
        "flash hit ratio, cache-aside: {} over {keys} keys ({:.0} MiB of item data = {:.1} x -m {}; values log-uniform {}-{} B), flash {}; warm-up {} + measured {} gets, {} conns x batch {}, {}",
        o.dist,
        mib(data),
        data as f64 / (o.memory_mb << 20) as f64,
        o.memory_mb,
        o.min_value,
        o.max_value,
        o.flash_size,
        o.warmup_requests,
        o.requests,
        o.hr_conns,
        o.batch,
        if o.hr_rate > 0.0 {
            format!("{:.0} gets/s", o.hr_rate)
        } else {
            "unpaced".into()
        }
    );
    println!(
        "{:>5} {:<10} {:>10} {:>10} {:>10} {:>9} {:>10} {:>10} {:>9} {:>8} {:>6} {:>7}",
        "round",
        "server",
        "miss ratio",
        "warm miss",
        "gets",
        "flash %",
        "evictions",
        "on flash",
        "RSS MiB",
        "meas. s",
        "wrong",
        "errors"
    );
    println!("{}", "-".repeat(114));
    for r in &rows {
        println!(
            "{:>5} {:<10} {:>10.4} {:>10.4} {:>10} {:>9} {:>10} {:>10} {:>9.1} {:>8.1} {:>6} {:>7}",
            r.round,
            r.kind,
            r.meas.miss_ratio(),
            r.warm.miss_ratio(),
            r.meas.gets,
            fmt_opt(r.flash_hit_share().map(|x| x * 100.0), 1),
            fmt_opt(r.delta("evictions").map(|x| x as f64), 0),
            fmt_opt(stat(&r.s1, "extstore_objects_used").map(|x| x as f64), 0),
            mib(r.rss),
            r.meas_s,
            r.meas.wrong + r.warm.wrong,
            r.meas.set_errors + r.warm.set_errors + r.meas.get_errors + r.warm.get_errors,
        );
        let sample: Vec<&String> = r.warm.sample.iter().chain(&r.meas.sample).take(3).collect();
        if !sample.is_empty() {
            println!("      error replies, e.g. {sample:?}");
        }
    }
    println!("miss ratio: the client's misses / gets over the measured phase; flash %: the server's get_extstore / get_hits");
    if let Some(m) = median_ratio {
        for (round, x) in &ratios {
            println!("round {round}: miss ratio osmium/memcached {x:.3}");
        }
        println!(
            "median miss ratio: memcached {}, osmium {}; osmium/memcached {m:.3}",
            fmt_opt(med(Kind::Memcached, &miss), 4),
            fmt_opt(med(Kind::Osmium, &miss), 4)
        );
    }
    Ok((ok, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_sizes_are_log_uniform_and_fixed_per_key() {
        let sizes: Vec<usize> = (0..100_000)
            .map(|id| value_size(1, 100, 4096, id))
            .collect();
        assert!(sizes.iter().all(|&s| (100..=4096).contains(&s)));
        assert_eq!(value_size(1, 100, 4096, 42), sizes[42]);
        // Log-uniform: half of them under sqrt(100 * 4096) = 640.
        let under = sizes.iter().filter(|&&s| s < 640).count();
        assert!((48_000..52_000).contains(&under), "{under}");
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        // (4096 - 100) / ln(40.96) = 1076.
        assert!((1040.0..1110.0).contains(&mean), "{mean}");
    }
}
