//! `osmium-bench memory` and `osmium-bench retained`: the loader (pipelined
//! `set … noreply` batches over a few connections, then an `mn` round trip on
//! each), resident memory per item (VmRSS growth over the load), and how many
//! items each server retains when the load does not fit in `-m`.

use std::time::Instant;

use serde_json::json;

use osmium_protocol::client::encode;

use crate::conn::{stat_u64, Conn};
use crate::keys::{append_value, check_key_size, value_matches, Key};
use crate::servers::{Binaries, Kind, Server};
use crate::{median, mib};

/// What to load.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoadSpec {
    pub items: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub conns: usize,
    /// Sets per write.
    pub batch: usize,
}

/// What a load left behind, seen by the client.
#[derive(Debug, Default)]
pub(crate) struct LoadResult {
    pub seconds: f64,
    /// Lines received for `noreply` sets (replies a server should not send,
    /// e.g. `SERVER_ERROR out of memory storing object`).
    pub unexpected_lines: u64,
    pub unexpected_sample: Vec<String>,
}

/// Opens `spec.conns` connections and makes one round trip on each.
pub(crate) fn connect_all(server: &Server, conns: usize) -> Result<Vec<Conn>, String> {
    (0..conns)
        .map(|_| {
            let mut c = Conn::connect(server.addr())?;
            c.round_trip()?;
            Ok(c)
        })
        .collect()
}

/// Loads items `0..spec.items` (key `k%0*d`, value derived from the key):
/// connection `c` sends a contiguous share as pipelined `set … noreply`
/// batches, then an `mn` round trip, so every set has been applied when this
/// returns. Stray replies are read by each connection's reader thread.
pub(crate) fn load(conns: &mut [Conn], spec: &LoadSpec) -> Result<LoadResult, String> {
    let n = conns.len() as u64;
    let start = Instant::now();
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(c, conn)| {
                let lo = spec.items * c as u64 / n;
                let hi = spec.items * (c as u64 + 1) / n;
                s.spawn(move || -> Result<(), String> {
                    let mut payload =
                        Vec::with_capacity(spec.batch * (spec.key_size + spec.value_size + 40));
                    let mut i = lo;
                    while i < hi {
                        payload.clear();
                        let end = (i + spec.batch as u64).min(hi);
                        for id in i..end {
                            let key = Key::new(b'k', id, spec.key_size);
                            encode::set_line(&mut payload, key.as_bytes(), spec.value_size, true);
                            append_value(&mut payload, key.as_bytes(), spec.value_size);
                            encode::block_end(&mut payload);
                        }
                        conn.send(&payload)?;
                        i = end;
                    }
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
    let mut out = LoadResult {
        seconds,
        ..LoadResult::default()
    };
    for c in conns.iter() {
        out.unexpected_lines += c.unexpected_lines;
        for line in &c.unexpected_sample {
            if out.unexpected_sample.len() < 3 {
                out.unexpected_sample.push(line.clone());
            }
        }
    }
    Ok(out)
}

/// Gets items `0` and `items - 1` and checks their values.
fn verify_ends(conn: &mut Conn, spec: &LoadSpec) -> Result<(), String> {
    for id in [0, spec.items - 1] {
        let key = Key::new(b'k', id, spec.key_size);
        match conn.get(key.as_bytes())? {
            Some(v) if v.len() == spec.value_size && value_matches(&v, key.as_bytes()) => {}
            Some(_) => {
                return Err(format!(
                    "wrong value for {}",
                    String::from_utf8_lossy(key.as_bytes())
                ))
            }
            None => {
                return Err(format!(
                    "{} missing",
                    String::from_utf8_lossy(key.as_bytes())
                ))
            }
        }
    }
    Ok(())
}

/// One server's figures in `memory`.
#[derive(Debug)]
pub(crate) struct MemoryRow {
    pub round: usize,
    pub kind: Kind,
    pub rss_before: u64,
    pub rss_after: u64,
    pub curr_items: u64,
    pub evictions: u64,
    pub load: LoadResult,
    /// "ok", "skipped (evictions)" or the problem.
    pub verified: String,
}

impl MemoryRow {
    pub(crate) fn growth_per_item(&self, items: u64) -> f64 {
        (self.rss_after as f64 - self.rss_before as f64) / items as f64
    }
}

pub(crate) struct MemoryOpts {
    pub spec: LoadSpec,
    pub memory_mb: u64,
    pub threads: u32,
    pub rounds: usize,
    pub servers: Vec<Kind>,
    pub json: bool,
}

fn measure_memory(
    bins: &Binaries,
    kind: Kind,
    round: usize,
    o: &MemoryOpts,
) -> Result<MemoryRow, String> {
    let server = Server::start(bins, kind, o.memory_mb, o.threads)?;
    let mut conns = connect_all(&server, o.spec.conns)?;
    let rss_before = server.rss_bytes()?;
    let load = load(&mut conns, &o.spec)?;
    server.check_alive()?;
    let rss_after = server.rss_bytes()?;
    let stats = conns[0].stats()?;
    let curr_items = stat_u64(&stats, "curr_items")?;
    let evictions = stat_u64(&stats, "evictions")?;
    let verified = if evictions == 0 && curr_items == o.spec.items {
        match verify_ends(&mut conns[0], &o.spec) {
            Ok(()) => "ok".to_string(),
            Err(e) => e,
        }
    } else {
        format!("skipped ({evictions} evictions, {curr_items} items)")
    };
    Ok(MemoryRow {
        round,
        kind,
        rss_before,
        rss_after,
        curr_items,
        evictions,
        load,
        verified,
    })
}

/// `osmium-bench memory`: returns false if a server lost items or failed
/// verification (the figures are printed in any case).
pub(crate) fn run_memory(bins: &Binaries, o: &MemoryOpts) -> Result<bool, String> {
    check_key_size(o.spec.key_size, o.spec.items)?;
    if o.spec.items == 0 {
        return Err("--items must be at least 1".into());
    }
    let mut rows = Vec::new();
    for round in 1..=o.rounds {
        // A/B, then B/A: alternate which server goes first.
        let mut order = o.servers.clone();
        if round % 2 == 0 {
            order.reverse();
        }
        for &kind in &order {
            eprintln!(
                "memory: round {round}/{}: {kind}: loading {} items ({} B keys, {} B values, -m {})",
                o.rounds, o.spec.items, o.spec.key_size, o.spec.value_size, o.memory_mb
            );
            let row = measure_memory(bins, kind, round, o)?;
            eprintln!(
                "memory: round {round}/{}: {kind}: {:.1} B/item, load {:.2} s",
                o.rounds,
                row.growth_per_item(o.spec.items),
                row.load.seconds
            );
            rows.push(row);
        }
    }
    let items = o.spec.items;
    let ratios: Vec<(usize, f64)> = (1..=o.rounds)
        .filter_map(|round| {
            let find = |k: Kind| rows.iter().find(|r| r.round == round && r.kind == k);
            let (m, s) = (find(Kind::Memcached)?, find(Kind::Osmium)?);
            Some((round, s.growth_per_item(items) / m.growth_per_item(items)))
        })
        .collect();
    let median_ratio = median(ratios.iter().map(|r| r.1).collect());
    let ok = rows
        .iter()
        .all(|r| r.verified == "ok" || (r.evictions > 0 && r.verified.starts_with("skipped")));

    if o.json {
        let out = json!({
            "benchmark": "memory",
            "items": items,
            "key_size": o.spec.key_size,
            "value_size": o.spec.value_size,
            "memory_mb": o.memory_mb,
            "threads": o.threads,
            "rows": rows.iter().map(|r| json!({
                "round": r.round,
                "server": r.kind.name(),
                "rss_before": r.rss_before,
                "rss_after": r.rss_after,
                "growth_per_item": r.growth_per_item(items),
                "curr_items": r.curr_items,
                "evictions": r.evictions,
                "load_seconds": r.load.seconds,
                "unexpected_reply_lines": r.load.unexpected_lines,
                "verified": r.verified,
            })).collect::<Vec<_>>(),
            "ratios": ratios.iter().map(|(round, x)| json!({"round": round, "growth_per_item": x})).collect::<Vec<_>>(),
            "median_ratio": median_ratio,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(ok);
    }

    println!(
        "memory per item: {items} items, {} B keys, {} B values, -m {} -t {}",
        o.spec.key_size, o.spec.value_size, o.memory_mb, o.threads
    );
    println!();
    println!(
        "{:>5}  {:<10} {:>12} {:>12} {:>12} {:>11} {:>9} {:>7}  verified",
        "round",
        "server",
        "RSS before",
        "RSS after",
        "growth/item",
        "curr_items",
        "evictions",
        "load s"
    );
    println!("{}", "-".repeat(96));
    for r in &rows {
        println!(
            "{:>5}  {:<10} {:>8.1} MiB {:>8.1} MiB {:>10.1} B {:>11} {:>9} {:>7.2}  {}",
            r.round,
            r.kind,
            mib(r.rss_before),
            mib(r.rss_after),
            r.growth_per_item(items),
            r.curr_items,
            r.evictions,
            r.load.seconds,
            r.verified
        );
        if r.load.unexpected_lines > 0 {
            println!(
                "       {} unexpected reply lines to noreply sets, e.g. {:?}",
                r.load.unexpected_lines, r.load.unexpected_sample
            );
        }
    }
    println!();
    for (round, x) in &ratios {
        println!("round {round}: ratio osmium/memcached growth per item {x:.3}");
    }
    if let Some(m) = median_ratio {
        println!("median ratio osmium/memcached growth per item: {m:.3}");
    }
    Ok(ok)
}

/// One server's figures in `retained`.
#[derive(Debug)]
pub(crate) struct RetainedRow {
    pub kind: Kind,
    pub curr_items: u64,
    pub evictions: u64,
    pub rss_after: u64,
    pub sample: u64,
    pub sample_hits: u64,
    pub sample_bad_values: u64,
    pub load: LoadResult,
}

impl RetainedRow {
    /// Items retained as estimated from the sample's hit ratio.
    pub(crate) fn estimated(&self, items: u64) -> f64 {
        self.sample_hits as f64 / self.sample.max(1) as f64 * items as f64
    }
}

pub(crate) struct RetainedOpts {
    pub spec: LoadSpec,
    pub memory_mb: u64,
    pub threads: u32,
    pub sample: u64,
    pub servers: Vec<Kind>,
    pub json: bool,
}

/// Gets `sample` keys spread evenly over `0..items` (multi-key gets of 100
/// keys) and counts the hits and the hits with a wrong value.
fn count_sample(conn: &mut Conn, spec: &LoadSpec, sample: u64) -> Result<(u64, u64), String> {
    let sample = sample.min(spec.items);
    let ids: Vec<u64> = (0..sample).map(|j| j * spec.items / sample).collect();
    let (mut hits, mut bad) = (0, 0);
    for chunk in ids.chunks(100) {
        let keys: Vec<Key> = chunk
            .iter()
            .map(|&id| Key::new(b'k', id, spec.key_size))
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        for (key, value) in conn.get_multi(&refs)? {
            hits += 1;
            if value.len() != spec.value_size || !value_matches(&value, &key) {
                bad += 1;
            }
        }
    }
    Ok((hits, bad))
}

fn measure_retained(bins: &Binaries, kind: Kind, o: &RetainedOpts) -> Result<RetainedRow, String> {
    let server = Server::start(bins, kind, o.memory_mb, o.threads)?;
    let mut conns = connect_all(&server, o.spec.conns)?;
    let load = load(&mut conns, &o.spec)?;
    server.check_alive()?;
    let rss_after = server.rss_bytes()?;
    let stats = conns[0].stats()?;
    let sample = o.sample.min(o.spec.items);
    let (sample_hits, sample_bad_values) = count_sample(&mut conns[0], &o.spec, sample)?;
    Ok(RetainedRow {
        kind,
        curr_items: stat_u64(&stats, "curr_items")?,
        evictions: stat_u64(&stats, "evictions")?,
        rss_after,
        sample,
        sample_hits,
        sample_bad_values,
        load,
    })
}

/// `osmium-bench retained`: returns false if a server returned a wrong value.
pub(crate) fn run_retained(bins: &Binaries, o: &RetainedOpts) -> Result<bool, String> {
    check_key_size(o.spec.key_size, o.spec.items)?;
    if o.spec.items == 0 {
        return Err("--items must be at least 1".into());
    }
    let mut rows = Vec::new();
    for &kind in &o.servers {
        eprintln!(
            "retained: {kind}: loading {} items ({} B keys, {} B values) into -m {}",
            o.spec.items, o.spec.key_size, o.spec.value_size, o.memory_mb
        );
        let row = measure_retained(bins, kind, o)?;
        eprintln!(
            "retained: {kind}: {} items retained, load {:.2} s",
            row.curr_items, row.load.seconds
        );
        rows.push(row);
    }
    let items = o.spec.items;
    let find = |k: Kind| rows.iter().find(|r| r.kind == k);
    let ratio = match (find(Kind::Memcached), find(Kind::Osmium)) {
        (Some(m), Some(s)) => Some((
            s.curr_items as f64 / m.curr_items as f64,
            s.estimated(items) / m.estimated(items),
        )),
        _ => None,
    };
    let ok = rows.iter().all(|r| r.sample_bad_values == 0);

    if o.json {
        let out = json!({
            "benchmark": "retained",
            "items": items,
            "key_size": o.spec.key_size,
            "value_size": o.spec.value_size,
            "memory_mb": o.memory_mb,
            "threads": o.threads,
            "rows": rows.iter().map(|r| json!({
                "server": r.kind.name(),
                "curr_items": r.curr_items,
                "evictions": r.evictions,
                "rss_after": r.rss_after,
                "sample": r.sample,
                "sample_hits": r.sample_hits,
                "sample_bad_values": r.sample_bad_values,
                "estimated_retained": r.estimated(items),
                "load_seconds": r.load.seconds,
                "unexpected_reply_lines": r.load.unexpected_lines,
            })).collect::<Vec<_>>(),
            "ratio_curr_items": ratio.map(|r| r.0),
            "ratio_sampled": ratio.map(|r| r.1),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(ok);
    }

    println!(
        "items retained: {items} items loaded, {} B keys, {} B values, -m {} -t {}",
        o.spec.key_size, o.spec.value_size, o.memory_mb, o.threads
    );
    println!();
    println!(
        "{:<10} {:>11} {:>8} {:>10} {:>15} {:>12} {:>12} {:>7}",
        "server",
        "curr_items",
        "% kept",
        "evictions",
        "sample hits",
        "est. kept",
        "RSS after",
        "load s"
    );
    println!("{}", "-".repeat(92));
    for r in &rows {
        println!(
            "{:<10} {:>11} {:>7.1}% {:>10} {:>7}/{:<7} {:>12.0} {:>8.1} MiB {:>7.2}",
            r.kind,
            r.curr_items,
            100.0 * r.curr_items as f64 / items as f64,
            r.evictions,
            r.sample_hits,
            r.sample,
            r.estimated(items),
            mib(r.rss_after),
            r.load.seconds
        );
        if r.sample_bad_values > 0 {
            println!(
                "           {} sampled hits had a wrong value",
                r.sample_bad_values
            );
        }
        if r.load.unexpected_lines > 0 {
            println!(
                "           {} unexpected reply lines to noreply sets, e.g. {:?}",
                r.load.unexpected_lines, r.load.unexpected_sample
            );
        }
    }
    if let Some((by_stats, by_sample)) = ratio {
        println!();
        println!("ratio osmium/memcached items retained: {by_stats:.3} (curr_items), {by_sample:.3} (sampled gets)");
    }
    Ok(ok)
}
