//! `flash --mode density`: how many items a server keeps, and at what RAM
//! cost, when the data is many times its `-m`. Owns the density run (per
//! round, value size and server: a paced load of N distinct keys with a
//! flash file, the settle, VmRSS and `stats`, a byte-exact sweep of every
//! key; then the same server with the same `-m` and no flash, filled to
//! capacity with the same size, for the RSS of the RAM-only server), the
//! derived figures (RAM per item kept, marginal RAM per flash item), and
//! their table and JSON.

use std::time::Instant;

use serde_json::json;

use super::{
    fmt_opt, items_for, json_f64, load, round_order, settle, start, stat, status_bytes, sweep,
    FlashDir, FlashOpts, Loaded, Sweep, KEY_SIZE,
};
use crate::servers::{Binaries, Kind};
use crate::{median, mib};

/// Item data of the RAM-only fill, as a multiple of `-m`: enough that the
/// server evicts, so it is full.
const BASE_FILL: f64 = 2.0;

/// One (round, value size, server).
#[derive(Debug)]
pub(crate) struct Row {
    pub round: usize,
    pub kind: Kind,
    pub value_size: usize,
    /// Distinct keys loaded.
    pub items: u64,
    /// The flash file cut `items` below `--data-ratio`.
    pub cut: bool,
    pub loaded: Loaded,
    /// `stats` after the load settled (None: not reported).
    pub curr_items: Option<u64>,
    pub evictions: Option<u64>,
    /// `extstore_objects_used`: items on flash.
    pub flash_objects: Option<u64>,
    pub flash_bytes: Option<u64>,
    pub flash_written: Option<u64>,
    /// `extstore_index_bytes` (osmium): RAM of the flash index.
    pub index_bytes: Option<u64>,
    /// Disk blocks of the flash file.
    pub file_allocated: u64,
    /// VmRSS (and its RssFile part) after the load settled.
    pub rss: u64,
    pub rss_file: Option<u64>,
    pub sweep: Sweep,
    pub sweep_seconds: f64,
    /// The same server without flash, filled to capacity: VmRSS, items.
    pub base_rss: u64,
    pub base_items: Option<u64>,
    pub base_evictions: Option<u64>,
}

impl Row {
    /// VmRSS / items kept.
    pub(crate) fn ram_per_kept(&self) -> Option<f64> {
        (self.sweep.found > 0).then(|| self.rss as f64 / self.sweep.found as f64)
    }

    /// (VmRSS − VmRSS of the RAM-only server) / items on flash.
    pub(crate) fn marginal(&self) -> Option<f64> {
        let f = self.flash_objects.filter(|&f| f > 0)?;
        Some((self.rss as f64 - self.base_rss as f64) / f as f64)
    }

    /// Items kept / items loaded.
    pub(crate) fn kept_share(&self) -> f64 {
        self.sweep.found as f64 / self.items.max(1) as f64
    }

    /// RAM of the flash index per item on flash (osmium).
    pub(crate) fn index_per_flash_item(&self) -> Option<f64> {
        let f = self.flash_objects.filter(|&f| f > 0)?;
        Some(self.index_bytes? as f64 / f as f64)
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "round": self.round,
            "server": self.kind.name(),
            "value_size": self.value_size,
            "items": self.items,
            "items_cut_by_flash_size": self.cut,
            "load_seconds": self.loaded.seconds,
            "load_mb_per_sec": self.loaded.mb_per_sec(),
            "set_errors": self.loaded.set_errors,
            "set_error_sample": self.loaded.error_sample,
            "curr_items": self.curr_items,
            "evictions": self.evictions,
            "extstore_objects_used": self.flash_objects,
            "extstore_bytes_used": self.flash_bytes,
            "extstore_objects_written": self.flash_written,
            "extstore_index_bytes": self.index_bytes,
            "flash_file_allocated": self.file_allocated,
            "rss": self.rss,
            "rss_file": self.rss_file,
            "kept": self.sweep.found,
            "missing": self.sweep.missing,
            "wrong": self.sweep.wrong,
            "kept_share": self.kept_share(),
            "sweep_seconds": self.sweep_seconds,
            "ram_per_item_kept": json_f64(self.ram_per_kept()),
            "base_rss": self.base_rss,
            "base_items": self.base_items,
            "base_evictions": self.base_evictions,
            "marginal_ram_per_flash_item": json_f64(self.marginal()),
            "index_bytes_per_flash_item": json_f64(self.index_per_flash_item()),
        })
    }
}

fn measure(
    bins: &Binaries,
    o: &FlashOpts,
    dir: &FlashDir,
    kind: Kind,
    round: usize,
    value_size: usize,
) -> Result<Row, String> {
    let (items, cut) = items_for(o, o.data_ratio, value_size);
    let size_of = move |_: u64| value_size;
    let tag = format!("flash density: round {round}: {kind} {value_size} B");
    let running = start(bins, kind, o, value_size, Some(dir))?;
    eprintln!(
        "{tag}: loading {items} items ({:.0} MiB of item data{}) at {}",
        mib(items * (value_size + KEY_SIZE) as u64),
        if cut {
            ", cut to fit the flash file"
        } else {
            ""
        },
        if o.load_mbps > 0.0 {
            format!("{} MB/s", o.load_mbps)
        } else {
            "full speed".into()
        }
    );
    let loaded = load(running.addr(), 0..items, &size_of, o.load_mbps, &tag)?;
    running.server.check_alive()?;
    let stats = settle(running.addr())?;
    let rss = running.server.rss_bytes()?;
    let rss_file = status_bytes(running.server.pid, "RssFile:");
    let file_allocated = running.file.as_ref().map_or(0, |f| f.allocated());
    let t = Instant::now();
    let sw = sweep(running.addr(), 0, items, 1, &size_of, o.sweep_conns)?;
    let sweep_seconds = t.elapsed().as_secs_f64();
    running.server.check_alive()?;
    eprintln!(
        "{tag}: loaded in {:.1} s ({:.0} MB/s, {} set errors); {} kept, {} wrong, {} on flash; RSS {:.1} MiB; swept in {sweep_seconds:.1} s",
        loaded.seconds,
        loaded.mb_per_sec(),
        loaded.set_errors,
        sw.found,
        sw.wrong,
        fmt_opt(stat(&stats, "extstore_objects_used").map(|x| x as f64), 0),
        mib(rss)
    );
    drop(running);

    let base = start(bins, kind, o, value_size, None)?;
    let base_n = ((BASE_FILL * o.memory_mb as f64 * (1u64 << 20) as f64)
        / (value_size + KEY_SIZE) as f64)
        .ceil() as u64;
    load(base.addr(), 0..base_n, &size_of, 0.0, &tag)?;
    let bstats = base.stats()?;
    let base_rss = base.server.rss_bytes()?;
    let base_evictions = stat(&bstats, "evictions");
    if base_evictions == Some(0) {
        eprintln!("{tag}: WARNING: the RAM-only server evicted nothing: it may not be full");
    }
    eprintln!(
        "{tag}: without flash: RSS {:.1} MiB, {} items",
        mib(base_rss),
        fmt_opt(stat(&bstats, "curr_items").map(|x| x as f64), 0)
    );
    Ok(Row {
        round,
        kind,
        value_size,
        items,
        cut,
        loaded,
        curr_items: stat(&stats, "curr_items"),
        evictions: stat(&stats, "evictions"),
        flash_objects: stat(&stats, "extstore_objects_used"),
        flash_bytes: stat(&stats, "extstore_bytes_used"),
        flash_written: stat(&stats, "extstore_objects_written"),
        index_bytes: stat(&stats, "extstore_index_bytes"),
        file_allocated,
        rss,
        rss_file,
        sweep: sw,
        sweep_seconds,
        base_rss,
        base_items: stat(&bstats, "curr_items"),
        base_evictions,
    })
}

/// Runs the density mode; prints its table (unless JSON) and returns
/// (no wrong value, its JSON).
pub(crate) fn run(
    bins: &Binaries,
    o: &FlashOpts,
    dir: &FlashDir,
) -> Result<(bool, serde_json::Value), String> {
    let mut rows = Vec::new();
    for round in 1..=o.rounds {
        for &size in &o.density_sizes {
            for kind in round_order(&o.servers, round) {
                rows.push(measure(bins, o, dir, kind, round, size)?);
            }
        }
    }
    let ok = rows.iter().all(|r| r.sweep.wrong == 0);

    // Medians per (size, server), and osmium / memcached.
    let med = |size: usize, kind: Kind, f: &dyn Fn(&Row) -> Option<f64>| {
        median(
            rows.iter()
                .filter(|r| r.value_size == size && r.kind == kind)
                .filter_map(f)
                .collect(),
        )
    };
    let kept = |r: &Row| Some(r.sweep.found as f64);
    let mut medians = Vec::new();
    for &size in &o.density_sizes {
        for &kind in &o.servers {
            medians.push(json!({
                "value_size": size,
                "server": kind.name(),
                "kept": json_f64(med(size, kind, &kept)),
                "extstore_objects_used": json_f64(med(size, kind, &|r| r.flash_objects.map(|x| x as f64))),
                "rss": json_f64(med(size, kind, &|r| Some(r.rss as f64))),
                "ram_per_item_kept": json_f64(med(size, kind, &Row::ram_per_kept)),
                "marginal_ram_per_flash_item": json_f64(med(size, kind, &Row::marginal)),
            }));
        }
    }
    let ratio = |size: usize, f: &dyn Fn(&Row) -> Option<f64>| {
        Some(med(size, Kind::Osmium, f)? / med(size, Kind::Memcached, f)?)
    };
    let ratios: Vec<_> = o
        .density_sizes
        .iter()
        .map(|&size| (size, ratio(size, &kept), ratio(size, &Row::ram_per_kept)))
        .collect();

    let value = json!({
                "value_sizes": o.density_sizes,
                "data_ratio": o.data_ratio,
                "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
                "medians": medians,
                "ratios": ratios.iter().map(|(s, k, r)| json!({
                    "value_size": s,
                    "kept_osmium_vs_memcached": json_f64(*k),
                    "ram_per_item_kept_osmium_vs_memcached": json_f64(*r),
                })).collect::<Vec<_>>(),
    });
    if o.json {
        return Ok((ok, value));
    }
    println!(
        "flash density: -m {}, flash {}, {} x -m of item data per value size ({KEY_SIZE} B keys), loaded at {}; kept = hits with the exact value",
        o.memory_mb,
        o.flash_size,
        o.data_ratio,
        if o.load_mbps > 0.0 {
            format!("{} MB/s", o.load_mbps)
        } else {
            "full speed".into()
        }
    );
    println!(
        "{:>5} {:<10} {:>7} {:>9} {:>6} {:>9} {:>7} {:>6} {:>9} {:>8} {:>9} {:>9} {:>10} {:>9}",
        "round",
        "server",
        "value B",
        "items",
        "load s",
        "kept",
        "kept %",
        "wrong",
        "on flash",
        "RSS MiB",
        "B/kept",
        "noflash",
        "B/flash it",
        "index B/it"
    );
    println!("{}", "-".repeat(128));
    for r in &rows {
        println!(
            "{:>5} {:<10} {:>7} {:>9} {:>6.1} {:>9} {:>7.2} {:>6} {:>9} {:>8.1} {:>9} {:>9.1} {:>10} {:>9}",
            r.round,
            r.kind,
            r.value_size,
            r.items,
            r.loaded.seconds,
            r.sweep.found,
            r.kept_share() * 100.0,
            r.sweep.wrong,
            r.flash_objects.map_or("-".into(), |x| x.to_string()),
            mib(r.rss),
            fmt_opt(r.ram_per_kept(), 1),
            mib(r.base_rss),
            fmt_opt(r.marginal(), 1),
            fmt_opt(r.index_per_flash_item(), 1),
        );
        if r.loaded.set_errors > 0 {
            println!(
                "      {} set errors, e.g. {:?}",
                r.loaded.set_errors, r.loaded.error_sample
            );
        }
    }
    println!("B/kept: VmRSS / items kept; noflash: VmRSS MiB of the same server, same -m, no flash, full;");
    println!("B/flash it: (VmRSS - noflash) / extstore_objects_used; index B/it: extstore_index_bytes / extstore_objects_used");
    if o.servers.contains(&Kind::Osmium) && o.servers.contains(&Kind::Memcached) {
        println!();
        println!(
            "{:>7} {:>22} {:>30}",
            "value B", "kept osmium/memcached", "B/kept osmium/memcached"
        );
        for (s, k, r) in &ratios {
            println!("{s:>7} {:>22} {:>30}", fmt_opt(*k, 3), fmt_opt(*r, 3));
        }
    }
    Ok((ok, value))
}
