//! `density --phases gets`: closed-loop GETs, one at a time on one
//! connection, of two key sets of the same size (1 % of the values the
//! fill sent), after the cleaner settled:
//!
//! * hot: the last 1 % written, set again and read once (so raw: the
//!   pack pass packs the newest segment too when no segment is free, and
//!   a packed item read stays packed until the evictor passes it; then
//!   the cleaner settles);
//! * cold: the oldest keys still held whose values are text, found with
//!   `me` (which counts no hit): with `compression=cold` the pack pass
//!   held them by packing them, elsewhere they are raw, of values drawn
//!   from the same distribution.
//!
//! Each key of a set is read once first (its value checked byte for
//! byte), then `--gets` GETs go over the set round after round, each round
//! in a shuffled order. Reported per set: hits, latency percentiles of
//! the hits (write to the whole reply; hdrhistogram) and the server's CPU
//! (utime + stime of its PID over the measured GETs) per GET.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::{json, Value};

use osmium_protocol::client::{encode, reply};

use super::latency::{histogram, Latency};
use super::phase_args::PhaseArgs;
use super::{connect, num, stats, Corpus, Run};
use crate::servers::Server;

/// Keys probed with `me` per round trip.
const PROBE_BATCH: usize = 200;

/// The keys of each set: 1 % of the `n` values sent, at least one.
pub(super) fn set_size(n: u64) -> u64 {
    (n / 100).clamp(n.min(1), n)
}

/// The hot keys: the last 1 % of `0..n` written.
pub(super) fn hot_keys(n: u64) -> Range<u64> {
    n - set_size(n)..n
}

/// `count` indexes into a set of `len` keys: every key once a round,
/// each round in its own order (drawn from `seed`).
fn order(len: usize, count: u64, seed: u64) -> Vec<u32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut round: Vec<u32> = (0..len as u32).collect();
    let mut out = Vec::with_capacity(count as usize);
    while len > 0 && (out.len() as u64) < count {
        round.shuffle(&mut rng);
        let take = (count - out.len() as u64).min(len as u64) as usize;
        out.extend_from_slice(&round[..take]);
    }
    out
}

/// One key set's figures.
#[derive(Default)]
pub(super) struct KeySet {
    pub keys: u64,
    /// The first and last key of the set (key numbers).
    pub span: Option<(u64, u64)>,
    pub gets: u64,
    pub hits: u64,
    pub cpu_s: f64,
    /// Of the hits.
    pub latency: Latency,
}

impl KeySet {
    /// Server CPU per GET measured, µs.
    pub(super) fn cpu_us_per_get(&self) -> Option<f64> {
        (self.gets > 0).then(|| self.cpu_s * 1e6 / self.gets as f64)
    }

    fn json(&self) -> Value {
        json!({
            "keys": self.keys,
            "first_key": self.span.map(|s| s.0),
            "last_key": self.span.map(|s| s.1),
            "gets": self.gets,
            "hits": self.hits,
            "cpu_seconds": self.cpu_s,
            "cpu_us_per_get": self.cpu_us_per_get(),
            "latency": self.latency.json(),
        })
    }
}

/// The `gets` phase's figures of one server.
pub(super) struct GetFigures {
    pub hot: KeySet,
    pub cold: KeySet,
    /// `packed_items` before the hot keys were set again, once the cleaner
    /// settled after, and after the measured GETs (osmium only).
    pub packed_items: [Option<u64>; 3],
    /// `pack_items` + `segments_compacted` moved during the measured GETs
    /// (the cleaner at work: the figures are disturbed).
    pub cleaner_moves: Option<u64>,
    /// `pack_promoted` during the measured GETs: packed items the GETs
    /// made hot, written back raw by the cleaner.
    pub promoted: Option<u64>,
}

impl GetFigures {
    pub(super) fn json(&self) -> Value {
        json!({
            "hot": self.hot.json(),
            "cold": self.cold.json(),
            "packed_items_before_hot_sets": self.packed_items[0],
            "packed_items_settled": self.packed_items[1],
            "packed_items_after": self.packed_items[2],
            "cleaner_moves_while_measuring": self.cleaner_moves,
            "pack_promoted_while_measuring": self.promoted,
        })
    }
}

/// The cleaner's moves so far: `pack_items` + `segments_compacted`.
fn cleaner_moves(st: &HashMap<String, String>) -> Option<u64> {
    Some(num(st, "pack_items")? + num(st, "segments_compacted")?)
}

/// A connection that GETs one key at a time.
struct Getter {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    line: Vec<u8>,
    /// The last hit's value and its `\r\n`.
    value: Vec<u8>,
}

impl Getter {
    fn connect(server: &Server) -> Result<Getter, String> {
        let writer = connect(server)?;
        writer.set_nodelay(true).map_err(|e| e.to_string())?;
        let reader =
            BufReader::with_capacity(1 << 16, writer.try_clone().map_err(|e| e.to_string())?);
        Ok(Getter {
            writer,
            reader,
            line: Vec::new(),
            value: Vec::new(),
        })
    }

    fn read_line(&mut self) -> Result<(), String> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| format!("gets: {e}"))?;
        if n == 0 {
            return Err("gets: the server closed the connection".into());
        }
        Ok(())
    }

    /// Sends `request` (one `get`) and reads its reply: a hit?
    fn get(&mut self, request: &[u8]) -> Result<bool, String> {
        self.writer
            .write_all(request)
            .map_err(|e| format!("gets: {e}"))?;
        self.read_line()?;
        if reply::is_end(&self.line) {
            return Ok(false);
        }
        let (_, _, len, _) = reply::value_header(&self.line)
            .ok_or_else(|| format!("gets: bad reply {:?}", String::from_utf8_lossy(&self.line)))?;
        self.value.resize(len + 2, 0);
        self.reader
            .read_exact(&mut self.value)
            .map_err(|e| format!("gets: {e}"))?;
        self.read_line()?;
        if !reply::is_end(&self.line) {
            return Err(format!(
                "gets: expected END, got {:?}",
                String::from_utf8_lossy(&self.line)
            ));
        }
        Ok(true)
    }

    /// Sets `keys` again, each with its own value (100 pipelined a round
    /// trip), then reads each once: they are raw (the cleaner may have
    /// packed them, the newest segments too when none was free, and a
    /// packed item read stays packed until the evictor passes it) and
    /// hit, so the pack pass copies them raw.
    fn make_hot(&mut self, corpus: &Corpus, keys: &[u64]) -> Result<(), String> {
        let mut req = Vec::new();
        for batch in keys.chunks(100) {
            req.clear();
            for &i in batch {
                encode::set(
                    &mut req,
                    format!("k{i}").as_bytes(),
                    0,
                    0,
                    &corpus.value(i),
                    false,
                );
            }
            self.writer
                .write_all(&req)
                .map_err(|e| format!("gets: {e}"))?;
            for &i in batch {
                self.read_line()?;
                if self.line != b"STORED\r\n" {
                    return Err(format!(
                        "gets: set k{i}: {:?}",
                        String::from_utf8_lossy(&self.line)
                    ));
                }
            }
        }
        for &i in keys {
            self.get(format!("get k{i}\r\n").as_bytes())?;
        }
        Ok(())
    }

    /// The first `want` keys of `0..below` held whose values are text,
    /// oldest first (`me KEY`, `PROBE_BATCH` and `mn` a round trip).
    fn oldest_text_keys(
        &mut self,
        corpus: &Corpus,
        below: u64,
        want: usize,
    ) -> Result<Vec<u64>, String> {
        let (mut found, mut next, mut req) = (Vec::new(), 0, Vec::new());
        while found.len() < want && next < below {
            let batch: Vec<u64> = (next..below)
                .filter(|&i| corpus.is_text(i))
                .take(PROBE_BATCH)
                .collect();
            let Some(&last) = batch.last() else { break };
            next = last + 1;
            req.clear();
            for i in &batch {
                req.extend_from_slice(format!("me k{i}\r\n").as_bytes());
            }
            req.extend_from_slice(b"mn\r\n");
            self.writer
                .write_all(&req)
                .map_err(|e| format!("gets: {e}"))?;
            for &i in &batch {
                self.read_line()?;
                if self.line.starts_with(b"ME ") {
                    if found.len() < want {
                        found.push(i);
                    }
                } else if self.line != b"EN\r\n" {
                    return Err(format!(
                        "gets: me k{i}: {:?}",
                        String::from_utf8_lossy(&self.line)
                    ));
                }
            }
            self.read_line()?;
            if self.line != b"MN\r\n" {
                return Err(format!(
                    "gets: expected MN, got {:?}",
                    String::from_utf8_lossy(&self.line)
                ));
            }
        }
        Ok(found)
    }

    /// Reads each of `keys` once (its value checked), then `gets` GETs
    /// over them; the server's CPU is `pid`'s.
    fn measure(
        &mut self,
        corpus: &Corpus,
        keys: &[u64],
        gets: u64,
        pid: u32,
        seed: u64,
    ) -> Result<KeySet, String> {
        let requests: Vec<Vec<u8>> = keys
            .iter()
            .map(|i| format!("get k{i}\r\n").into_bytes())
            .collect();
        for (&i, r) in keys.iter().zip(&requests) {
            if self.get(r)? && self.value[..self.value.len() - 2] != corpus.value(i)[..] {
                return Err(format!("gets: k{i}: the value read back differs"));
            }
        }
        let order = order(keys.len(), gets, seed);
        let (mut hist, mut hits) = (histogram()?, 0);
        let cpu0 = crate::load::cpu_time(pid)?;
        for &j in &order {
            let t = Instant::now();
            let hit = self.get(&requests[j as usize])?;
            let ns = t.elapsed().as_nanos() as u64;
            if hit {
                hits += 1;
                hist.saturating_record(ns.max(1));
            }
        }
        let cpu_s = (crate::load::cpu_time(pid)? - cpu0).as_secs_f64();
        Ok(KeySet {
            keys: keys.len() as u64,
            span: keys.first().zip(keys.last()).map(|(a, b)| (*a, *b)),
            gets: order.len() as u64,
            hits,
            cpu_s,
            latency: Latency::of(&hist),
        })
    }
}

/// Runs the phase on `server`, filled with keys `0..n`.
pub(super) fn run(
    server: &Server,
    corpus: &Corpus,
    n: u64,
    a: &PhaseArgs,
) -> Result<GetFigures, String> {
    let mut g = Getter::connect(server)?;
    let mut ctl = connect(server)?;
    let before = stats(&mut ctl)?;
    let hot_range = hot_keys(n);
    let hot: Vec<u64> = hot_range.clone().collect();
    g.make_hot(corpus, &hot)?;
    let settled = super::cleaner::settle_cleaner(&mut ctl)?;
    let cold = g.oldest_text_keys(corpus, hot_range.start, set_size(n) as usize)?;
    let hot = g.measure(corpus, &hot, a.gets, server.pid, 1)?;
    let cold = g.measure(corpus, &cold, a.gets, server.pid, 2)?;
    let after = stats(&mut ctl)?;
    Ok(GetFigures {
        hot,
        cold,
        packed_items: [&before, &settled, &after].map(|st| num(st, "packed_items")),
        cleaner_moves: cleaner_moves(&after)
            .zip(cleaner_moves(&settled))
            .map(|(a, b)| a.saturating_sub(b)),
        promoted: num(&after, "pack_promoted")
            .zip(num(&settled, "pack_promoted"))
            .map(|(a, b)| a.saturating_sub(b)),
    })
}

/// The `gets` table.
pub(super) fn print(rows: &[(Run, &GetFigures)]) {
    println!(
        "{:<10} {:<5} {:>7} {:>15} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "GETs",
        "keys",
        "count",
        "key numbers",
        "gets",
        "hits",
        "p50 us",
        "p99 us",
        "p999 us",
        "CPU us/GET"
    );
    for (run, f) in rows {
        for (name, s) in [("hot", &f.hot), ("cold", &f.cold)] {
            println!(
                "{:<10} {:<5} {:>7} {:>15} {:>9} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>11.2}",
                run.name(),
                name,
                s.keys,
                s.span.map_or("-".into(), |(a, b)| format!("{a}-{b}")),
                s.gets,
                s.hits,
                s.latency.p50_us,
                s.latency.p99_us,
                s.latency.p999_us,
                s.cpu_us_per_get().unwrap_or(0.0),
            );
        }
    }
    println!("hot: the last 1 % of keys written; cold: as many of the oldest keys held with text values (packed with compression=cold); one GET at a time; latency of the hits; CPU: the server's over the measured GETs, per GET");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_keys_are_the_last_percent() {
        assert_eq!(hot_keys(10_000), 9_900..10_000);
        assert_eq!(hot_keys(150), 149..150);
        assert_eq!(hot_keys(1), 0..1);
        assert!(hot_keys(0).is_empty());
    }

    #[test]
    fn order_visits_every_key_once_a_round() {
        let o = order(10, 25, 7);
        assert_eq!(o.len(), 25);
        for round in o.chunks(10).take(2) {
            let mut r = round.to_vec();
            r.sort_unstable();
            assert_eq!(r, (0..10).collect::<Vec<u32>>());
        }
        assert!(o[20..].iter().all(|&i| i < 10));
        assert_ne!(o[..10], o[10..20], "each round shuffled on its own");
        assert_eq!(o, order(10, 25, 7), "the same seed, the same order");
        assert!(order(0, 5, 1).is_empty());
        assert!(order(5, 0, 1).is_empty());
    }

    #[test]
    fn text_keys_are_the_values_cut_from_text() {
        let corpus = Corpus {
            text: vec![b"text ".repeat(100)],
            packed: vec![vec![0x1f; 500]],
            seed: 3,
        };
        let (mut text, mut other) = (0, 0);
        for i in 0..2000 {
            let v = corpus.value(i);
            if corpus.is_text(i) {
                text += 1;
                assert!(!v.contains(&0x1f), "value {i}");
            } else {
                other += 1;
                assert!(v.iter().all(|&b| b == 0x1f), "value {i}");
            }
        }
        // About 15 % come from compressed files.
        assert!((200..400).contains(&other), "{other} of {}", text + other);
    }
}
