//! `cluster --mode copy`: what sync-mode writes wait while a replica that
//! returns gets its full copy. A writer (`--replicate-to R --replication
//! sync`) holds `--copy-items` items while R is down; R starts empty, the
//! writer connects and copies every item to it, and one client writes
//! back to back to the writer meanwhile, each write answered only once R
//! acknowledged it. Reported: the copy's duration (from the writer's
//! `replica_0_link up` until R holds every item), the writes answered
//! during it, their latency (p50, p99, max).
//!
//! ```text
//!   client ──set──▶ writer ══ full copy (N items) + the client's writes ══▶ replica (started empty)
//!          ◀─STORED── (after the replica's MN)
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use osmium_protocol::client::encode;

use osmium_test_harness::{free_port, Running};

/// Starts an osmium server on a port with more arguments.
pub(crate) type StartServer<'a> = &'a dyn Fn(u16, &[String]) -> Result<Running, String>;

/// What to measure, and how to start an osmium server on a port with more
/// arguments (the caller's settings: `-m`, `-t`, the binary).
pub(crate) struct CopyRun<'a> {
    pub rounds: usize,
    pub items: u64,
    pub value_size: usize,
    pub start: StartServer<'a>,
}

fn connect(port: u16) -> Result<(TcpStream, BufReader<TcpStream>), String> {
    let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let r = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
    Ok((s, r))
}

fn line(r: &mut BufReader<TcpStream>) -> Result<String, String> {
    let mut l = String::new();
    r.read_line(&mut l).map_err(|e| format!("read: {e}"))?;
    Ok(l.trim_end().to_string())
}

/// One `stats` value of the server on `port`.
fn stat(port: u16, name: &str) -> Result<u64, String> {
    let v = stat_text(port, name)?;
    v.parse()
        .map_err(|_| format!("STAT {name} {v}: not a number"))
}

fn stat_text(port: u16, name: &str) -> Result<String, String> {
    let (mut w, mut r) = connect(port)?;
    w.write_all(b"stats\r\n").map_err(|e| e.to_string())?;
    let mut found = None;
    loop {
        let l = line(&mut r)?;
        if l == "END" || l.is_empty() {
            break;
        }
        let mut t = l.split(' ');
        if t.nth(1) == Some(name) {
            found = t.next().map(str::to_string);
        }
    }
    found.ok_or_else(|| format!("no STAT {name}"))
}

/// Runs the copy measurement once per round; prints a table.
pub(crate) fn run(a: &CopyRun<'_>) -> Result<(), String> {
    let items = a.items;
    println!(
        "cluster copy: a sync writer holding {items} items of {} B while its replica is down; the replica starts empty and gets the full copy while one client writes back to back",
        a.value_size
    );
    println!(" round  copy ms  writes during copy  p50 us  p99 us   max us");
    for round in 1..=a.rounds.max(1) {
        // The replica's port is named to the writer before it starts.
        let rp = free_port();
        let wp = free_port();
        let extra: Vec<String> = ["--replicate-to", &format!("127.0.0.1:{rp}")]
            .iter()
            .map(|s| s.to_string())
            .chain(["--replication".to_string(), "sync".to_string()])
            .collect();
        let writer = (a.start)(wp, &extra)?;
        let (mut w, mut r) = connect(wp)?;
        let value = vec![b'v'; a.value_size];
        let mut load = Vec::with_capacity(1 << 20);
        for k in 0..items {
            let key = format!("copy:{k}");
            encode::meta(&mut load, b"ms", key.as_bytes(), Some(value.len()), false)
                .flag(b'q')
                .data(&value);
            if load.len() >= 1 << 20 {
                w.write_all(&load).map_err(|e| e.to_string())?;
                load.clear();
            }
        }
        encode::line(&mut load, &[b"mn"]);
        w.write_all(&load).map_err(|e| e.to_string())?;
        let l = line(&mut r)?;
        if l != "MN" {
            return Err(format!("loading the writer: {l}"));
        }
        let held = stat(wp, "curr_items")?;
        let replica = (a.start)(rp, &[])?;
        // The writer reconnects on its own schedule: timing starts when
        // it says the link is up (the copy under way).
        while stat_text(wp, "replica_0_link")? != "up" {
            std::thread::sleep(Duration::from_millis(1));
        }
        let started = Instant::now();
        let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let mut i = 0u64;
        let copy_ms = loop {
            let t = Instant::now();
            let mut set = Vec::new();
            encode::set(&mut set, format!("copyw:{i}").as_bytes(), 0, 0, b"x", false);
            w.write_all(&set).map_err(|e| e.to_string())?;
            let l = line(&mut r)?;
            if l != "STORED" {
                return Err(format!("write during the copy: {l}"));
            }
            let _ = hist.record(t.elapsed().as_micros() as u64);
            i += 1;
            if i.is_multiple_of(50) && stat(rp, "curr_items")? >= held {
                break started.elapsed().as_secs_f64() * 1000.0;
            }
            if started.elapsed() > Duration::from_secs(120) {
                return Err("the copy did not end within 120 s".into());
            }
        };
        writer.check_running()?;
        replica.check_running()?;
        println!(
            "{round:>6} {copy_ms:>8.0} {i:>19} {:>7} {:>7} {:>8}",
            hist.value_at_quantile(0.5),
            hist.value_at_quantile(0.99),
            hist.max()
        );
    }
    println!();
    Ok(())
}
