//! `density --phases replay`: a zipf cache-aside replay over the keys the
//! fill sent (`k0` … `k{n-1}`: with `--factor 3`, three times what fits in
//! `-m` raw). Each request `get`s a key drawn from zipf(`--replay-alpha`)
//! (rank to key through a fixed pseudo-random permutation) and, on a miss,
//! `set`s that key's corpus value; a hit's value is checked byte for byte.
//!
//! The streams are drawn once, before any server runs
//! (`hitratio::draw_streams`: one seeded generator per connection), and
//! replayed identically to every server, warm-up first (not measured),
//! then the measured requests. Each connection sends one payload per batch
//! of `BATCH` gets, with the sets of the previous batch's misses before
//! them (as `hitratio` does). The miss ratio is the server's own: the
//! delta of `get_hits` and `get_misses` over the measured requests.
//!
//! With `--replay-rate N` the warm-up and the measured part are paced: a
//! connection's batch `b` of a part is due `b × BATCH × conns / N` seconds
//! after the part started, and the client sleeps until then (absolute due
//! times: a late wake-up or a slow answer is made up by sending the next
//! batch at once, so the rate holds on average without spinning a core
//! the server needs). A cache-aside's misses come at the database's
//! speed; unpaced, the misses' sets come as fast as the server answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use osmium_protocol::client::{encode, reply};

use super::phase_args::PhaseArgs;
use super::{connect, num, stats, Corpus, Run};
use crate::servers::Server;

/// Gets per pipelined batch.
const BATCH: usize = 32;

/// The request streams: per connection, the key numbers of its warm-up
/// share, then of its measured share.
pub(super) struct Streams {
    keys: u64,
    streams: Vec<Vec<u32>>,
    warmup_len: Vec<usize>,
    /// Requests per second asked over all connections (0: unpaced).
    rate: u64,
}

impl Streams {
    /// zipf over keys `0..n`, drawn from `seed` as `a` says.
    pub(super) fn draw(n: u64, seed: u64, a: &PhaseArgs) -> Result<Streams, String> {
        if n == 0 || n > u64::from(u32::MAX) {
            return Err(format!("replay: {n} keys (1 to 2^32 - 1)"));
        }
        let (streams, warmup_len) = crate::hitratio::draw_streams(
            n,
            a.replay_alpha,
            seed,
            a.replay_conns.max(1) as u64,
            a.replay_warmup,
            a.replay_requests,
        )?;
        Ok(Streams {
            keys: n,
            streams,
            warmup_len,
            rate: a.replay_rate,
        })
    }

    /// The time between two batches of one connection at the rate asked
    /// (None: unpaced).
    fn batch_interval(&self) -> Option<Duration> {
        (self.rate > 0).then(|| {
            let per_batch = (BATCH * self.streams.len()) as f64 / self.rate as f64;
            Duration::from_secs_f64(per_batch)
        })
    }

    /// Connection `i`'s requests of the warm-up or of the measured part.
    fn part(&self, i: usize, measured: bool) -> &[u32] {
        let (warm, rest) = self.streams[i].split_at(self.warmup_len[i]);
        if measured {
            rest
        } else {
            warm
        }
    }
}

/// Client-side counts of one connection.
#[derive(Default)]
struct Counts {
    gets: u64,
    misses: u64,
    sets: u64,
    /// Set replies other than `STORED`.
    set_errors: u64,
    /// Hits whose value was not the key's.
    bad_values: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.gets += o.gets;
        self.misses += o.misses;
        self.sets += o.sets;
        self.set_errors += o.set_errors;
        self.bad_values += o.bad_values;
    }
}

/// One connection.
struct Client<'c> {
    corpus: &'c Corpus,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    /// The last batch's misses, set before the next batch's gets.
    pending: Vec<u32>,
    payload: Vec<u8>,
    line: Vec<u8>,
    value: Vec<u8>,
}

impl<'c> Client<'c> {
    fn connect(server: &Server, corpus: &'c Corpus) -> Result<Client<'c>, String> {
        let writer = connect(server)?;
        writer.set_nodelay(true).map_err(|e| e.to_string())?;
        let reader =
            BufReader::with_capacity(1 << 16, writer.try_clone().map_err(|e| e.to_string())?);
        Ok(Client {
            corpus,
            writer,
            reader,
            pending: Vec::new(),
            payload: Vec::new(),
            line: Vec::new(),
            value: Vec::new(),
        })
    }

    fn read_line(&mut self) -> Result<(), String> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| format!("replay: {e}"))?;
        if n == 0 {
            return Err("replay: the server closed the connection".into());
        }
        Ok(())
    }

    /// Sends the pending sets and `batch`'s gets, reads every reply, and
    /// keeps the batch's misses (each key once) for the next exchange.
    fn exchange(&mut self, batch: &[u32], c: &mut Counts) -> Result<(), String> {
        self.payload.clear();
        for &id in &self.pending {
            let value = self.corpus.value(u64::from(id));
            encode::set(
                &mut self.payload,
                format!("k{id}").as_bytes(),
                0,
                0,
                &value,
                false,
            );
        }
        for &id in batch {
            encode::get(&mut self.payload, b"get", [format!("k{id}")]);
        }
        self.writer
            .write_all(&self.payload)
            .map_err(|e| format!("replay: {e}"))?;
        for _ in 0..self.pending.len() {
            self.read_line()?;
            c.sets += 1;
            c.set_errors += u64::from(self.line != b"STORED\r\n");
        }
        self.pending.clear();
        for &id in batch {
            c.gets += 1;
            self.read_line()?;
            if reply::is_end(&self.line) {
                c.misses += 1;
                if !self.pending.contains(&id) {
                    self.pending.push(id);
                }
                continue;
            }
            let (_, _, len, _) = reply::value_header(&self.line).ok_or_else(|| {
                format!(
                    "replay: k{id}: bad reply {:?}",
                    String::from_utf8_lossy(&self.line)
                )
            })?;
            self.value.resize(len + 2, 0);
            self.reader
                .read_exact(&mut self.value)
                .map_err(|e| format!("replay: {e}"))?;
            if self.value[..len] != self.corpus.value(u64::from(id))[..] {
                c.bad_values += 1;
            }
            self.read_line()?;
            if !reply::is_end(&self.line) {
                return Err(format!(
                    "replay: expected END, got {:?}",
                    String::from_utf8_lossy(&self.line)
                ));
            }
        }
        Ok(())
    }

    /// Requests `ids` in batches, one each `interval` if paced (see the
    /// module comment); ends with the last batch's misses set.
    fn run(&mut self, ids: &[u32], interval: Option<Duration>) -> Result<Counts, String> {
        let mut c = Counts::default();
        let start = Instant::now();
        for (b, batch) in ids.chunks(BATCH).enumerate() {
            if let Some(interval) = interval {
                let due = start + interval.mul_f64(b as f64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            self.exchange(batch, &mut c)?;
        }
        if !self.pending.is_empty() {
            self.exchange(&[], &mut c)?;
        }
        Ok(c)
    }
}

/// Every connection's part of the warm-up or of the measured requests,
/// each on its own thread; their counts summed.
fn part(clients: &mut [Client<'_>], s: &Streams, measured: bool) -> Result<Counts, String> {
    let results: Vec<Result<Counts, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(i, cl)| {
                let ids = s.part(i, measured);
                let interval = s.batch_interval();
                scope.spawn(move || cl.run(ids, interval))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("replay: a client thread panicked".into()))
            })
            .collect()
    });
    let mut total = Counts::default();
    for r in results {
        total.add(&r?);
    }
    Ok(total)
}

/// The `replay` phase's figures of one server (the measured part).
pub(super) struct ReplayFigures {
    pub keys: u64,
    /// Requests per second asked (0: unpaced).
    pub rate: u64,
    pub requests: u64,
    /// The server's `get_hits` and `get_misses` deltas.
    pub hits: u64,
    pub misses: u64,
    /// The client's count of misses.
    pub client_misses: u64,
    pub sets: u64,
    pub set_errors: u64,
    pub cpu_s: f64,
    pub seconds: f64,
    /// The pack pass's and the evictor's work over the measured requests
    /// (deltas of `pack_items`, `pack_kept_raw`, `pack_kept_packed`,
    /// `evictions`), `curr_items` and `packed_items` at their end; None
    /// where the server has no such stat.
    pub server_counts: [(&'static str, Option<u64>); 6],
}

impl ReplayFigures {
    pub(super) fn miss_ratio(&self) -> f64 {
        let gets = self.hits + self.misses;
        if gets == 0 {
            return 0.0;
        }
        self.misses as f64 / gets as f64
    }

    fn cpu_us_per_request(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.cpu_s * 1e6 / self.requests as f64)
    }

    pub(super) fn json(&self) -> Value {
        let server: serde_json::Map<String, Value> = self
            .server_counts
            .iter()
            .map(|&(name, v)| (name.to_string(), json!(v)))
            .collect();
        json!({
            "keys": self.keys,
            "rate": self.rate,
            "requests": self.requests,
            "get_hits": self.hits,
            "get_misses": self.misses,
            "miss_ratio": self.miss_ratio(),
            "client_misses": self.client_misses,
            "sets": self.sets,
            "set_errors": self.set_errors,
            "cpu_seconds": self.cpu_s,
            "cpu_us_per_request": self.cpu_us_per_request(),
            "seconds": self.seconds,
            "server": server,
        })
    }
}

/// Replays `s` to `server` (filled with its keys).
pub(super) fn run(server: &Server, corpus: &Corpus, s: &Streams) -> Result<ReplayFigures, String> {
    let mut clients = (0..s.streams.len())
        .map(|_| Client::connect(server, corpus))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ctl = connect(server)?;
    let warm = part(&mut clients, s, false)?;
    let st0 = stats(&mut ctl)?;
    let (cpu0, t) = (crate::load::cpu_time(server.pid)?, Instant::now());
    let c = part(&mut clients, s, true)?;
    let seconds = t.elapsed().as_secs_f64();
    let cpu_s = (crate::load::cpu_time(server.pid)? - cpu0).as_secs_f64();
    let st1 = stats(&mut ctl)?;
    if warm.bad_values + c.bad_values > 0 {
        return Err(format!(
            "replay: {} values read back differ",
            warm.bad_values + c.bad_values
        ));
    }
    let delta = |name: &str| -> Result<u64, String> {
        let (a, b) = (num(&st0, name), num(&st1, name));
        a.zip(b)
            .map(|(a, b)| b.saturating_sub(a))
            .ok_or_else(|| format!("replay: no {name} in stats"))
    };
    Ok(ReplayFigures {
        keys: s.keys,
        rate: s.rate,
        requests: c.gets,
        hits: delta("get_hits")?,
        misses: delta("get_misses")?,
        client_misses: c.misses,
        sets: c.sets,
        set_errors: c.set_errors,
        cpu_s,
        seconds,
        server_counts: [
            ("pack_items", delta("pack_items").ok()),
            ("pack_kept_raw", delta("pack_kept_raw").ok()),
            ("pack_kept_packed", delta("pack_kept_packed").ok()),
            ("evictions", delta("evictions").ok()),
            ("curr_items", num(&st1, "curr_items")),
            ("packed_items", num(&st1, "packed_items")),
        ],
    })
}

/// The `replay` table.
pub(super) fn print(rows: &[(Run, &ReplayFigures)]) {
    println!(
        "{:<10} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>9}",
        "replay", "keys", "requests", "hits", "misses", "miss ratio", "sets", "CPU us/req", "req/s"
    );
    for (run, r) in rows {
        println!(
            "{:<10} {:>9} {:>10} {:>10} {:>10} {:>10.4} {:>10} {:>11.2} {:>9.0}",
            run.name(),
            r.keys,
            r.requests,
            r.hits,
            r.misses,
            r.miss_ratio(),
            r.sets,
            r.cpu_us_per_request().unwrap_or(0.0),
            if r.seconds > 0.0 {
                r.requests as f64 / r.seconds
            } else {
                0.0
            },
        );
    }
    println!("replay: zipf cache-aside over the keys the fill sent (a miss sets the key's value), the same streams for every server; miss ratio from the server's get_hits/get_misses over the measured requests");
    if let Some((_, r)) = rows.first().filter(|(_, r)| r.rate > 0) {
        println!("replay: paced at {} requests/s (--replay-rate)", r.rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(conns: usize, warmup: u64, requests: u64) -> PhaseArgs {
        PhaseArgs {
            phases: vec![],
            replay_requests: requests,
            replay_warmup: warmup,
            replay_conns: conns,
            replay_alpha: 0.99,
            replay_rate: 0,
            gets: 0,
            sets: 0,
        }
    }

    #[test]
    fn streams_split_warmup_and_measured_over_connections() {
        let s = Streams::draw(1000, 1, &args(3, 100, 1000)).unwrap();
        assert_eq!(s.streams.len(), 3);
        let warm: usize = (0..3).map(|i| s.part(i, false).len()).sum();
        let measured: usize = (0..3).map(|i| s.part(i, true).len()).sum();
        assert_eq!((warm, measured), (100, 1000));
        assert!(s.streams.iter().flatten().all(|&k| k < 1000));
    }

    #[test]
    fn streams_are_the_same_for_the_same_seed() {
        let a = Streams::draw(5000, 9, &args(2, 0, 2000)).unwrap();
        let b = Streams::draw(5000, 9, &args(2, 0, 2000)).unwrap();
        let c = Streams::draw(5000, 10, &args(2, 0, 2000)).unwrap();
        assert_eq!(a.streams, b.streams);
        assert_ne!(a.streams, c.streams);
    }

    #[test]
    fn streams_are_skewed() {
        // zipf(0.99) over 10,000 keys: the most requested key takes
        // about 10 % of the requests, far above uniform's 0.01 %.
        let s = Streams::draw(10_000, 1, &args(1, 0, 20_000)).unwrap();
        let mut counts = std::collections::HashMap::new();
        for &k in s.part(0, true) {
            *counts.entry(k).or_insert(0u32) += 1;
        }
        let top = counts.values().max().copied().unwrap_or(0);
        assert!(top > 1000, "top key requested {top} times of 20,000");
        assert!(counts.len() < 10_000);
    }

    #[test]
    fn a_rate_spaces_each_connections_batches_evenly() {
        let unpaced = Streams::draw(1000, 1, &args(4, 0, 1000)).unwrap();
        assert_eq!(unpaced.batch_interval(), None);
        let paced = Streams::draw(
            1000,
            1,
            &PhaseArgs {
                replay_rate: 64_000,
                ..args(4, 0, 1000)
            },
        )
        .unwrap();
        // 4 connections of 16,000 requests/s: 32 gets every 2 ms each.
        let interval = paced.batch_interval().unwrap();
        assert!(
            (interval.as_secs_f64() - 0.002).abs() < 1e-9,
            "{interval:?}"
        );
    }

    #[test]
    fn no_keys_is_an_error() {
        assert!(Streams::draw(0, 1, &args(1, 0, 10)).is_err());
    }
}
