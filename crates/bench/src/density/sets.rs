//! `density --phases sets`: what a SET costs the server. The fill's: the
//! server's CPU (utime + stime of its PID, all its threads: the workers'
//! and the cleaner's, which packs cold items) from the fill's start until
//! the cleaner settled, per value set, and the round trips of the fill's
//! pipelined batches of 100 sets. Then, after the read-back, depth-1 SETs
//! (one at a time on one connection) of the hot keys (the last 1 %
//! written) with their own values: latency percentiles and CPU per SET.

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use osmium_protocol::client::encode;

use super::latency::{histogram, Latency};
use super::{connect, Corpus, Run};
use crate::servers::Server;

/// Depth-1 SETs: how many, their CPU, their latency.
pub(super) struct SingleSets {
    pub sets: u64,
    /// Replies other than `STORED`.
    pub errors: u64,
    pub cpu_s: f64,
    pub latency: Latency,
}

/// The `sets` phase's figures of one server.
pub(super) struct SetFigures {
    /// Values the fill set.
    pub sets: u64,
    /// Server CPU from the fill's start to its end.
    pub fill_cpu_s: f64,
    /// Server CPU from the fill's end until the cleaner settled.
    pub settle_cpu_s: f64,
    /// Round trips of the fill's batches of 100 pipelined sets.
    pub batches: Latency,
    pub single: Option<SingleSets>,
}

impl SetFigures {
    /// Server CPU per value the fill set (its cleaner's included), µs.
    pub(super) fn cpu_us_per_set(&self) -> Option<f64> {
        (self.sets > 0).then(|| (self.fill_cpu_s + self.settle_cpu_s) * 1e6 / self.sets as f64)
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "fill_sets": self.sets,
            "fill_cpu_seconds": self.fill_cpu_s,
            "settle_cpu_seconds": self.settle_cpu_s,
            "cpu_us_per_set": self.cpu_us_per_set(),
            "fill_batch_of_100_latency": self.batches.json(),
            "single": self.single.as_ref().map(|s| json!({
                "sets": s.sets,
                "errors": s.errors,
                "cpu_seconds": s.cpu_s,
                "cpu_us_per_set": (s.sets > 0).then(|| s.cpu_s * 1e6 / s.sets as f64),
                "latency": s.latency.json(),
            })),
        })
    }
}

/// The fill's figures: `n` values set, the server's CPU time at the
/// fill's start, at its end and once the cleaner settled, the batches'
/// round trips.
pub(super) fn of_fill(n: u64, cpu: [Duration; 3], rtt: &Histogram<u64>) -> SetFigures {
    SetFigures {
        sets: n,
        fill_cpu_s: cpu[1].saturating_sub(cpu[0]).as_secs_f64(),
        settle_cpu_s: cpu[2].saturating_sub(cpu[1]).as_secs_f64(),
        batches: Latency::of(rtt),
        single: None,
    }
}

/// `count` depth-1 SETs of the hot keys of `n` (in turn, each with its
/// own value) on a connection of their own; into `f.single`.
pub(super) fn single(
    server: &Server,
    corpus: &Corpus,
    n: u64,
    count: u64,
    f: &mut SetFigures,
) -> Result<(), String> {
    let keys = super::gets::hot_keys(n);
    if count == 0 || keys.is_empty() {
        return Ok(());
    }
    // Every request written beforehand: nothing is made while timing.
    let requests: Vec<Vec<u8>> = keys
        .map(|i| {
            let mut r = Vec::new();
            encode::set(
                &mut r,
                format!("k{i}").as_bytes(),
                0,
                0,
                &corpus.value(i),
                false,
            );
            r
        })
        .collect();
    let mut c = connect(server)?;
    c.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(c.try_clone().map_err(|e| e.to_string())?);
    let (mut hist, mut line, mut errors) = (histogram()?, Vec::new(), 0);
    let cpu0 = crate::load::cpu_time(server.pid)?;
    for j in 0..count {
        let req = &requests[(j % requests.len() as u64) as usize];
        let t = Instant::now();
        c.write_all(req).map_err(|e| format!("sets: {e}"))?;
        line.clear();
        reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("sets: {e}"))?;
        let ns = t.elapsed().as_nanos() as u64;
        if line.is_empty() {
            return Err("sets: the server closed the connection".into());
        }
        hist.saturating_record(ns.max(1));
        errors += u64::from(line != b"STORED\r\n");
    }
    let cpu_s = (crate::load::cpu_time(server.pid)? - cpu0).as_secs_f64();
    f.single = Some(SingleSets {
        sets: count,
        errors,
        cpu_s,
        latency: Latency::of(&hist),
    });
    Ok(())
}

/// The `sets` table.
pub(super) fn print(rows: &[(Run, &SetFigures)]) {
    println!(
        "{:<10} {:>9} {:>11} {:>9} {:>13} {:>13} {:>9} {:>9} {:>9} {:>9} {:>11}",
        "SETs",
        "fill sets",
        "CPU us/SET",
        "settle s",
        "batch p50 ms",
        "batch p99 ms",
        "depth-1",
        "p50 us",
        "p99 us",
        "p999 us",
        "CPU us/SET"
    );
    for (run, f) in rows {
        let s = f.single.as_ref();
        let lat = s.map(|s| s.latency).unwrap_or_default();
        println!(
            "{:<10} {:>9} {:>11.2} {:>9.2} {:>13.2} {:>13.2} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>11.2}",
            run.name(),
            f.sets,
            f.cpu_us_per_set().unwrap_or(0.0),
            f.settle_cpu_s,
            f.batches.p50_us / 1000.0,
            f.batches.p99_us / 1000.0,
            s.map_or(0, |s| s.sets),
            lat.p50_us,
            lat.p99_us,
            lat.p999_us,
            s.filter(|s| s.sets > 0)
                .map_or(0.0, |s| s.cpu_s * 1e6 / s.sets as f64),
        );
    }
    println!("CPU us/SET: the server's CPU (all threads) from the fill's start until its cleaner settled, per value set; settle s: the CPU seconds of that after the fill; batch: a round trip of 100 pipelined sets of the fill; depth-1: SETs of the hot keys one at a time after the read-back");
}
