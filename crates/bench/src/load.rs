//! `load`: the load generator of issue 5, its `--vs` mode, its sweeps
//! and its SLA search.
//!
//! Closed loop: `conns` connections spread over `threads` threads (each
//! thread one `mio` poll loop), every connection keeping `depth` requests in
//! flight: it sends a batch of `depth` requests in one write and sends the
//! next batch when the last reply of this one has arrived. A request's
//! latency runs from its batch's write to its own reply. Requests are gets
//! and sets (`--get-ratio`) of keys drawn from `--keys` keys by a
//! [`KeyDist`], in the text, binary or meta protocol; with `--preload` every
//! key is set first. Every request in flight is remembered (key, get or
//! set) so that with `--cache-aside` a get that misses is followed by a set
//! of its key.
//!
//! Open loop (`--rate`, or a sweep over `--rates`): every connection sends
//! on a fixed schedule (woken by a timerfd), whatever the replies do, and a
//! request's latency runs from when it was *due*, so a stalled server is
//! charged for every request that should have gone out meanwhile (no
//! coordinated omission).
//!
//! [`Targets`]: one server, or several (`--targets`, `--vs --instances`)
//! with each key sent to the server libmemcached's ketama picks: every
//! connection then holds a socket per server.
//!
//! SLA (`--sla`, [`sla_rate`]): the highest open-loop rate at which a
//! quantile (99.5 %) of requests finish within a bound (1 ms), by bisection,
//! for random and for hot keys; Overall = 0.8 × random + 0.2 × hot.
//!
//! The server's CPU time comes from `/proc/<pid>/stat` (user + system, all
//! threads), read just before and just after the measured window, so
//! `cpu_us_per_req` is server CPU per request whatever the generator
//! itself costs on the shared cores.
//!
//! `--vs` starts the servers itself (memcached and osmium with the same
//! `-t` and `-m`, and the floor server when `--servers` names it), runs
//! them in turn for `--rounds` rounds, alternating the order (A B, B A,
//! ...), and prints every server's median figures with ratios against the
//! first server and the floor; `--value-sizes`/`--sweep` repeat that per
//! value size on fresh servers. What is printed is [`crate::report`]'s;
//! the charts of `--plot` are [`crate::plot`]'s.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::keys;
use crate::report::{self, Outcome, Summary};

/// Wire protocol of the generated requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    Text,
    Binary,
    /// Meta commands: `mg <key> v` (`VA <n>` + data on a hit, `EN` on a
    /// miss) and `ms <key> <n>` + data (`HD`).
    Meta,
}

/// What one run sends.
#[derive(Clone, Debug)]
pub struct Workload {
    pub conns: usize,
    pub threads: usize,
    pub depth: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub keys: u64,
    pub key_size: usize,
    pub value_size: usize,
    /// Fraction of requests that are gets (the rest are sets).
    pub get_ratio: f64,
    pub protocol: Protocol,
    pub seed: u64,
    /// Which keys are requested.
    pub dist: KeyDist,
    /// Open loop at this many requests per second in all (None: closed
    /// loop, `depth` in flight per connection).
    pub rate: Option<f64>,
    /// The latency quantile reported as `pq_us` (the SLA's, 0.995).
    pub quantile: f64,
    /// Cache-aside: every get that misses is followed by a set of its key.
    pub cache_aside: bool,
    /// Open loop: spin on the poll (timeout zero) instead of sleeping on a
    /// timerfd between sends, so requests leave on schedule and replies are
    /// read as they land, without the generator's own wake-up latency.
    pub busy_poll: bool,
}

/// How keys are drawn from `0..keys`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyDist {
    Uniform,
    /// zipf(s) over the key ranks (key 0 the most requested).
    Zipf(f64),
    /// Share `share` of the requests go to the first `fraction` of the
    /// keys (uniformly), the rest to the others.
    Hotspot {
        fraction: f64,
        share: f64,
    },
}

impl std::str::FromStr for KeyDist {
    type Err = String;
    /// `uniform`, `zipf:S` or `hotspot:FRACTION:SHARE`.
    fn from_str(s: &str) -> Result<KeyDist, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let num = |i: usize| -> Result<f64, String> {
            parts
                .get(i)
                .and_then(|p| p.parse::<f64>().ok())
                .ok_or_else(|| format!("bad key distribution {s:?}"))
        };
        match parts[0] {
            "uniform" if parts.len() == 1 => Ok(KeyDist::Uniform),
            "zipf" if parts.len() == 2 => Ok(KeyDist::Zipf(num(1)?)),
            "hotspot" if parts.len() == 3 => {
                let (fraction, share) = (num(1)?, num(2)?);
                if !(0.0..=1.0).contains(&fraction) || !(0.0..=1.0).contains(&share) {
                    return Err(format!("bad key distribution {s:?}: fractions are 0..=1"));
                }
                Ok(KeyDist::Hotspot { fraction, share })
            }
            _ => Err(format!(
                "bad key distribution {s:?}: uniform, zipf:S or hotspot:FRACTION:SHARE"
            )),
        }
    }
}

impl std::fmt::Display for KeyDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyDist::Uniform => write!(f, "uniform"),
            KeyDist::Zipf(s) => write!(f, "zipf:{s}"),
            KeyDist::Hotspot { fraction, share } => write!(f, "hotspot:{fraction}:{share}"),
        }
    }
}

/// Draws key ids by a [`KeyDist`].
struct KeySampler {
    keys: u64,
    dist: KeyDist,
    zipf: Option<rand_distr::Zipf<f64>>,
    hot: u64,
}

impl KeySampler {
    fn new(keys: u64, dist: KeyDist) -> Result<KeySampler, String> {
        let zipf = match dist {
            KeyDist::Zipf(s) => Some(
                rand_distr::Zipf::new(keys, s).map_err(|e| format!("zipf({keys}, {s}): {e}"))?,
            ),
            _ => None,
        };
        let hot = match dist {
            KeyDist::Hotspot { fraction, .. } => ((keys as f64 * fraction) as u64).clamp(1, keys),
            _ => 0,
        };
        Ok(KeySampler {
            keys,
            dist,
            zipf,
            hot,
        })
    }

    #[inline]
    fn sample(&self, rng: &mut SmallRng) -> u64 {
        use rand_distr::Distribution;
        match self.dist {
            KeyDist::Uniform => rng.gen_range(0..self.keys),
            KeyDist::Zipf(_) => {
                // Ranks 1..=keys.
                let r = self.zipf.as_ref().map_or(1.0, |z| z.sample(rng));
                (r as u64).clamp(1, self.keys) - 1
            }
            KeyDist::Hotspot { share, .. } => {
                if self.hot == self.keys || rng.gen_bool(share) {
                    rng.gen_range(0..self.hot)
                } else {
                    rng.gen_range(self.hot..self.keys)
                }
            }
        }
    }
}

/// The server's CPU time so far (user + system, every thread), from
/// `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Result<Duration, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    // Fields after the command name (which may hold spaces), 1-based from
    // field 3: utime is field 14, stime field 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("bad {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64, String> {
        fields
            .get(i - 3)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("bad field {i} in {path}"))
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let total = ticks(14)? + ticks(15)?;
    Ok(Duration::from_micros(total * 1_000_000 / hz))
}

/// The servers one run loads: one, or several with every key placed on
/// one of them as libmemcached's ketama would place it.
#[derive(Clone, Debug)]
pub struct Targets {
    pub addrs: Vec<SocketAddr>,
    /// Their PIDs, when known, for the servers' CPU time per request
    /// (summed over all of them).
    pub pids: Vec<u32>,
    /// Key placement over several servers (None: one server).
    pub continuum: Option<std::sync::Arc<crate::ketama::Continuum>>,
}

impl Targets {
    /// One server.
    pub fn one(addr: SocketAddr, pid: Option<u32>) -> Targets {
        Targets {
            addrs: vec![addr],
            pids: pid.into_iter().collect(),
            continuum: None,
        }
    }

    /// Several servers, `(host as spelled for ketama, port, address)`,
    /// keys placed by libmemcached's ketama `variant`.
    pub fn ketama(
        servers: &[(String, u16, SocketAddr)],
        pids: Vec<u32>,
        variant: crate::ketama::Variant,
    ) -> Targets {
        let names: Vec<(String, u16)> = servers.iter().map(|(h, p, _)| (h.clone(), *p)).collect();
        Targets {
            addrs: servers.iter().map(|s| s.2).collect(),
            pids,
            continuum: Some(std::sync::Arc::new(variant.continuum(&names))),
        }
    }

    /// The servers' addresses, comma separated (the `server` of reports).
    pub fn name(&self) -> String {
        self.addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index in `addrs` of the server that holds `key`.
    #[inline]
    pub fn server_of(&self, key: &[u8]) -> usize {
        match &self.continuum {
            Some(c) if self.addrs.len() > 1 => c.server_of(key),
            _ => 0,
        }
    }

    /// The servers' CPU time so far, summed; None without PIDs.
    fn cpu_time(&self) -> Result<Option<Duration>, String> {
        if self.pids.is_empty() {
            return Ok(None);
        }
        let mut total = Duration::ZERO;
        for &pid in &self.pids {
            total += cpu_time(pid)?;
        }
        Ok(Some(total))
    }
}

/// Sets every key once (pipelined, text protocol, each key on its server
/// of `targets`), so that gets hit. Large values go fewer to a write.
pub fn preload(targets: &Targets, w: &Workload) -> Result<(), String> {
    keys::check_key_size(w.key_size, w.keys)?;
    let value = vec![b'v'; w.value_size];
    let mut out = Vec::new();
    let mut reply = vec![0u8; 1 << 16];
    let chunk = ((4 << 20) / (w.value_size + 64)).clamp(1, 500);
    for (server, &addr) in targets.addrs.iter().enumerate() {
        let mut s =
            std::net::TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
        let mut ids = (0..w.keys).filter(|&i| {
            targets.addrs.len() == 1
                || targets.server_of(keys::Key::new(b'k', i, w.key_size).as_bytes()) == server
        });
        loop {
            out.clear();
            let mut sent = 0;
            for i in ids.by_ref().take(chunk) {
                let k = keys::Key::new(b'k', i, w.key_size);
                out.extend_from_slice(b"set ");
                out.extend_from_slice(k.as_bytes());
                out.extend_from_slice(format!(" 0 0 {}\r\n", w.value_size).as_bytes());
                out.extend_from_slice(&value);
                out.extend_from_slice(b"\r\n");
                sent += 1;
            }
            if sent == 0 {
                break;
            }
            s.write_all(&out).map_err(|e| format!("preload: {e}"))?;
            // Each reply is a line: STORED, or an error that stops here
            // (e.g. an item over the server's -I).
            let mut lines = 0;
            let mut input = Vec::new();
            while lines < sent {
                let got = s.read(&mut reply).map_err(|e| format!("preload: {e}"))?;
                if got == 0 {
                    return Err("preload: the server closed the connection".into());
                }
                input.extend_from_slice(&reply[..got]);
                while let Some(end) = memchr::memchr(b'\n', &input) {
                    if &input[..=end] != b"STORED\r\n" {
                        return Err(format!(
                            "preload of {addr}: {}",
                            String::from_utf8_lossy(&input[..=end]).trim_end()
                        ));
                    }
                    input.drain(..=end);
                    lines += 1;
                }
            }
        }
    }
    Ok(())
}

/// A request in flight: its key, whether it is a get, and when its latency
/// starts (closed loop: its batch's write; open loop: when it was due; a
/// cache-aside fill: when its get's miss arrived).
#[derive(Clone, Copy)]
struct InFlight {
    id: u64,
    get: bool,
    from: Instant,
}

/// One socket of a connection: to one server of the targets.
struct Stream {
    socket: TcpStream,
    out: Vec<u8>,
    sent: usize,
    input: Vec<u8>,
    /// Requests sent or queued on it, oldest first (replies come in order).
    inflight: VecDeque<InFlight>,
}

/// One client connection of a generator thread: a socket to every target
/// server (one without `--targets`).
struct Conn {
    streams: Vec<Stream>,
    /// Replies still due for the batch in flight (closed loop).
    pending: usize,
    /// Cache-aside, closed loop: keys whose get missed, set first in the
    /// next batch.
    refills: Vec<u64>,
    /// Open loop: when the next request is due.
    next_at: Instant,
}

/// What a generator thread counted.
struct Tally {
    /// Latencies (ns) of the requests measured.
    hist: Histogram<u64>,
    gets: u64,
    misses: u64,
    fills: u64,
}

/// Runs the workload against `targets`; their PIDs add the servers' CPU
/// time per request.
pub fn run(targets: &Targets, w: &Workload) -> Result<Outcome, String> {
    keys::check_key_size(w.key_size, w.keys)?;
    let threads = w.threads.clamp(1, w.conns.max(1));
    let start = Instant::now() + Duration::from_millis(50);
    let measure_from = start + w.warmup;
    let measure_to = measure_from + w.duration;
    let probe_targets = targets.clone();
    let cpu_probe = std::thread::spawn(move || -> Result<Option<Duration>, String> {
        if probe_targets.pids.is_empty() {
            return Ok(None);
        }
        sleep_until(measure_from);
        let before = probe_targets.cpu_time()?;
        sleep_until(measure_to);
        let after = probe_targets.cpu_time()?;
        Ok(after.zip(before).map(|(a, b)| a.saturating_sub(b)))
    });
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let conns = w.conns / threads + usize::from(t < w.conns % threads);
            let w = w.clone();
            let targets = targets.clone();
            std::thread::spawn(move || generate(&targets, conns, t as u64, &w, start, measure_to))
        })
        .collect();
    let progress = Progress::start(start, w.warmup, w.duration);
    let mut joined = Vec::with_capacity(workers.len());
    for h in workers {
        joined.push(h.join());
    }
    progress.finish();
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?;
    let (mut gets, mut misses, mut fills) = (0, 0, 0);
    for part in joined {
        let part = part.map_err(|_| "a generator thread panicked".to_string())??;
        hist.add(part.hist).map_err(|e| e.to_string())?;
        gets += part.gets;
        misses += part.misses;
        fills += part.fills;
    }
    let cpu = cpu_probe
        .join()
        .map_err(|_| "the CPU probe panicked".to_string())??;
    let requests = hist.len();
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok(Outcome {
        requests,
        seconds: w.duration.as_secs_f64(),
        p50_us: us(0.5),
        p99_us: us(0.99),
        p999_us: us(0.999),
        pq_us: us(w.quantile),
        cpu_us_per_req: cpu.map(|c| c.as_secs_f64() * 1e6 / requests.max(1) as f64),
        gets,
        misses,
        fills,
        latency: Some(hist),
    })
}

/// A progress bar on stderr over a run's warm-up and measured window,
/// shown only when the run lasts [`Progress::MIN_RUN`] or more and stderr is
/// a terminal (so tests and CI logs get nothing).
struct Progress {
    bar: indicatif::ProgressBar,
    ticker: Option<std::thread::JoinHandle<()>>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Progress {
    const MIN_RUN: Duration = Duration::from_secs(3);

    fn start(start: Instant, warmup: Duration, duration: Duration) -> Progress {
        use std::io::IsTerminal;
        use std::sync::atomic::{AtomicBool, Ordering};
        let total = warmup + duration;
        let done = std::sync::Arc::new(AtomicBool::new(false));
        if total < Progress::MIN_RUN || !io::stderr().is_terminal() {
            return Progress {
                bar: indicatif::ProgressBar::hidden(),
                ticker: None,
                done,
            };
        }
        let bar = indicatif::ProgressBar::new(total.as_millis() as u64);
        let template = format!(
            "  {{msg:9}} [{{bar:40}}] {{elapsed}}/{:.0}s",
            total.as_secs_f64()
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template(&template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let ticker = {
            let (bar, done) = (bar.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    let elapsed = Instant::now().saturating_duration_since(start);
                    bar.set_position(elapsed.as_millis() as u64);
                    bar.set_message(if elapsed < warmup {
                        "warm-up"
                    } else {
                        "measuring"
                    });
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Progress {
            bar,
            ticker: Some(ticker),
            done,
        }
    }

    fn finish(self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.ticker {
            t.join().ok();
        }
        self.bar.finish_and_clear();
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// One generator thread: `n` connections, connected at once, sending from
/// `start` on in one poll loop until `measure_to`. Measured are, closed
/// loop, the replies that arrived between `start + warmup` and
/// `measure_to`; open loop, the requests due in that window, however late
/// their reply.
fn generate(
    targets: &Targets,
    n: usize,
    thread: u64,
    w: &Workload,
    start: Instant,
    measure_to: Instant,
) -> Result<Tally, String> {
    let measure_from = start + w.warmup;
    let mut tally = Tally {
        hist: Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).map_err(|e| e.to_string())?,
        gets: 0,
        misses: 0,
        fills: 0,
    };
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    let mut rng = SmallRng::seed_from_u64(w.seed ^ (thread << 32));
    let sampler = KeySampler::new(w.keys, w.dist)?;
    let value = vec![b'v'; w.value_size];
    let servers = targets.addrs.len();
    // Open loop: each connection sends every `interval`, the connections
    // of all threads staggered over it.
    let interval = w
        .rate
        .map(|r| Duration::from_secs_f64(w.conns as f64 / r.max(1e-3)));
    let open = interval.is_some();
    let threads = w.threads.clamp(1, w.conns.max(1)) as u64;
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut streams = Vec::with_capacity(servers);
        for (s, &addr) in targets.addrs.iter().enumerate() {
            let std = std::net::TcpStream::connect(addr)
                .map_err(|e| format!("connecting to {addr}: {e}"))?;
            std.set_nodelay(true).map_err(|e| e.to_string())?;
            std.set_nonblocking(true).map_err(|e| e.to_string())?;
            let mut socket = TcpStream::from_std(std);
            poll.registry()
                .register(
                    &mut socket,
                    Token(i * servers + s),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .map_err(|e| e.to_string())?;
            streams.push(Stream {
                socket,
                out: Vec::with_capacity(4096),
                sent: 0,
                input: Vec::with_capacity(1 << 16),
                inflight: VecDeque::new(),
            });
        }
        let slot = (i as u64 * threads + thread) as f64 / w.conns.max(1) as f64;
        conns.push(Conn {
            streams,
            pending: 0,
            refills: Vec::new(),
            next_at: start + interval.map_or(Duration::ZERO, |iv| iv.mul_f64(slot)),
        });
    }
    let mut events = Events::with_capacity(256);
    let mut chunk = vec![0u8; 1 << 16];
    // Open loop: epoll's timeout is whole milliseconds, far coarser than
    // the gaps between requests, so a timerfd wakes the loop when the next
    // request is due.
    let timer = match interval {
        Some(_) if !w.busy_poll => Some(Timer::new(&poll, Token(usize::MAX))?),
        _ => None,
    };
    sleep_until(start);
    if !open {
        for conn in conns.iter_mut() {
            next_batch(conn, targets, w, &sampler, &mut rng, &value);
            conn.write_all()?;
        }
    }
    // Open loop: replies due in the window may come after it.
    let drain_until = measure_to + Duration::from_secs(2);
    loop {
        let now = Instant::now();
        let mut timeout = Duration::from_millis(100);
        if let Some(iv) = interval {
            if now < measure_to {
                for conn in conns.iter_mut() {
                    while conn.next_at <= now {
                        let get = rng.gen_bool(w.get_ratio.clamp(0.0, 1.0));
                        let id = sampler.sample(&mut rng);
                        let at = conn.next_at;
                        conn.push(targets, w, id, get, &value, at);
                        conn.next_at += iv;
                    }
                    conn.write_all()?;
                    timeout = timeout.min(conn.next_at.saturating_duration_since(now));
                }
                match &timer {
                    Some(t) => t.arm(timeout)?,
                    None => timeout = Duration::ZERO,
                }
            } else if now >= drain_until
                || conns
                    .iter()
                    .all(|c| c.streams.iter().all(|s| s.inflight.is_empty()))
            {
                break;
            }
        } else if now >= measure_to {
            break;
        }
        poll.poll(&mut events, Some(timeout))
            .map_err(|e| format!("poll: {e}"))?;
        for event in events.iter() {
            if event.token() == Token(usize::MAX) {
                if let Some(t) = &timer {
                    t.drain();
                }
                continue;
            }
            let (c, s) = (event.token().0 / servers, event.token().0 % servers);
            let conn = &mut conns[c];
            let stream = &mut conn.streams[s];
            write_out(stream).map_err(|e| format!("sending: {e}"))?;
            loop {
                match stream.socket.read(&mut chunk) {
                    Ok(0) => return Err(format!("{} closed the connection", targets.addrs[s])),
                    Ok(got) => {
                        stream.input.extend_from_slice(&chunk[..got]);
                        // A short read emptied the socket; more data raises
                        // a new (edge-triggered) event.
                        if got < chunk.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("reading: {e}")),
                }
            }
            let mut at = 0;
            let mut refilled = false;
            while let Some(&req) = stream.inflight.front() {
                let reply = match w.protocol {
                    Protocol::Text => text_reply(&stream.input[at..])?,
                    Protocol::Binary => binary_reply(&stream.input[at..]),
                    Protocol::Meta => meta_reply(&stream.input[at..])?,
                };
                let Some((len, miss)) = reply else { break };
                at += len;
                stream.inflight.pop_front();
                let now = Instant::now();
                let counted = if open {
                    req.from >= measure_from && req.from < measure_to
                } else {
                    conn.pending -= 1;
                    now >= measure_from && now < measure_to
                };
                if counted {
                    tally
                        .hist
                        .saturating_record(((now - req.from).as_nanos() as u64).max(1));
                    if req.get {
                        tally.gets += 1;
                        tally.misses += u64::from(miss);
                    } else if req.id & FILL != 0 {
                        tally.fills += 1;
                    }
                }
                if req.get && miss && w.cache_aside {
                    if !open {
                        conn.refills.push(req.id);
                    } else if now < measure_to {
                        // The fill goes on the same socket (same server).
                        if stream.sent == stream.out.len() {
                            stream.out.clear();
                            stream.sent = 0;
                        }
                        let key = keys::Key::new(b'k', req.id, w.key_size);
                        push_request(&mut stream.out, w.protocol, key.as_bytes(), false, &value);
                        stream.inflight.push_back(InFlight {
                            id: req.id | FILL,
                            get: false,
                            from: now,
                        });
                        refilled = true;
                    }
                }
            }
            stream.input.drain(..at);
            if refilled {
                write_out(stream).map_err(|e| format!("sending: {e}"))?;
            }
            if !open && conn.pending == 0 {
                next_batch(conn, targets, w, &sampler, &mut rng, &value);
                conn.write_all()?;
            }
        }
    }
    // Open loop: requests of the window never answered count as answered
    // at the end.
    let end = Instant::now();
    for conn in &conns {
        for req in conn.streams.iter().flat_map(|s| s.inflight.iter()) {
            if open && req.from >= measure_from && req.from < measure_to {
                tally
                    .hist
                    .saturating_record(((end - req.from).as_nanos() as u64).max(1));
            }
        }
    }
    Ok(tally)
}

/// Marks a cache-aside fill in [`InFlight::id`] (key ids stay far below).
const FILL: u64 = 1 << 63;

impl Conn {
    /// Queues a request for key `id` on its server's socket.
    fn push(
        &mut self,
        targets: &Targets,
        w: &Workload,
        id: u64,
        get: bool,
        value: &[u8],
        from: Instant,
    ) {
        let key = keys::Key::new(b'k', id & !FILL, w.key_size);
        let stream = &mut self.streams[targets.server_of(key.as_bytes())];
        if stream.sent == stream.out.len() {
            stream.out.clear();
            stream.sent = 0;
        }
        push_request(&mut stream.out, w.protocol, key.as_bytes(), get, value);
        stream.inflight.push_back(InFlight { id, get, from });
    }

    /// Writes what every socket has queued (as far as the sockets take it).
    fn write_all(&mut self) -> Result<(), String> {
        for stream in &mut self.streams {
            write_out(stream).map_err(|e| format!("sending: {e}"))?;
        }
        Ok(())
    }
}

/// A timerfd in the generator's poll: a wake-up with microsecond
/// precision (epoll's own timeout has milliseconds).
struct Timer {
    fd: std::os::fd::OwnedFd,
}

impl Timer {
    fn new(poll: &Poll, token: Token) -> Result<Timer, String> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: timerfd_create has no preconditions; the result is
        // checked before it is owned.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(format!("timerfd_create: {}", io::Error::last_os_error()));
        }
        // SAFETY: fd is a new descriptor that nothing else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        poll.registry()
            .register(
                &mut mio::unix::SourceFd(&fd.as_raw_fd()),
                token,
                Interest::READABLE,
            )
            .map_err(|e| format!("registering the timer: {e}"))?;
        // Timer slack would add up to 50 us to every wake-up.
        // SAFETY: PR_SET_TIMERSLACK takes a value and changes only this
        // thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64) };
        Ok(Timer { fd })
    }

    /// Fires once, `after` from now (at least 1 ns: zero would disarm).
    fn arm(&self, after: Duration) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: a valid timerfd and a valid itimerspec.
        let r =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if r < 0 {
            return Err(format!("timerfd_settime: {}", io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Consumes the expirations (the fd is edge-triggered in mio, but a
    /// read keeps it tidy).
    fn drain(&self) {
        use std::os::fd::AsRawFd;
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a u64 from our own descriptor.
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut n as *mut u64 as *mut libc::c_void,
                8,
            )
        };
    }
}

/// Builds the connection's next batch (closed loop): the cache-aside
/// fills owed, then new requests up to `depth` in all.
fn next_batch(
    conn: &mut Conn,
    targets: &Targets,
    w: &Workload,
    sampler: &KeySampler,
    rng: &mut SmallRng,
    value: &[u8],
) {
    let now = Instant::now();
    let fills = std::mem::take(&mut conn.refills);
    let mut n = 0;
    for &id in &fills {
        conn.push(targets, w, id | FILL, false, value, now);
        n += 1;
    }
    conn.refills = fills;
    conn.refills.clear();
    while n < w.depth {
        let get = rng.gen_bool(w.get_ratio.clamp(0.0, 1.0));
        let id = sampler.sample(rng);
        conn.push(targets, w, id, get, value, now);
        n += 1;
    }
    conn.pending = n;
}

/// Appends a get of `key` (or a set of `value`) in `protocol` to `out`.
fn push_request(out: &mut Vec<u8>, protocol: Protocol, key: &[u8], get: bool, value: &[u8]) {
    match protocol {
        Protocol::Text => {
            if get {
                out.extend_from_slice(b"get ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" 0 0 ");
                out.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
        Protocol::Meta => {
            if get {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(key);
                out.extend_from_slice(b" v\r\n");
            } else {
                out.extend_from_slice(b"ms ");
                out.extend_from_slice(key);
                out.push(b' ');
                out.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
        }
        Protocol::Binary => {
            let (opcode, extras, body) = if get {
                (0x00u8, 0usize, key.len())
            } else {
                (0x01, 8, 8 + key.len() + value.len())
            };
            out.extend_from_slice(&[0x80, opcode]);
            out.extend_from_slice(&(key.len() as u16).to_be_bytes());
            out.extend_from_slice(&[extras as u8, 0, 0, 0]);
            out.extend_from_slice(&(body as u32).to_be_bytes());
            out.extend_from_slice(&[0; 12]);
            if !get {
                out.extend_from_slice(&[0; 8]);
            }
            out.extend_from_slice(key);
            if !get {
                out.extend_from_slice(value);
            }
        }
    }
}

fn write_out(stream: &mut Stream) -> io::Result<()> {
    while stream.sent < stream.out.len() {
        match stream.socket.write(&stream.out[stream.sent..]) {
            Ok(n) => stream.sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The length of the first complete text reply in `input`, and whether it
/// was a get's miss; None if incomplete. A reply the benchmark never
/// expects (`ERROR`, `SERVER_ERROR ...`) is an error.
fn text_reply(input: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let Some(end) = memchr::memchr(b'\n', input) else {
        return Ok(None);
    };
    let line = &input[..end + 1];
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        // VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\nEND\r\n
        let bytes = rest
            .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
            .filter(|f| !f.is_empty())
            .nth(2)
            .and_then(|b| std::str::from_utf8(b).ok()?.parse::<usize>().ok())
            .ok_or_else(|| format!("bad reply {:?}", String::from_utf8_lossy(line)))?;
        let total = line.len() + bytes + 2 + 5;
        return Ok((input.len() >= total).then_some((total, false)));
    }
    match line {
        b"END\r\n" => Ok(Some((line.len(), true))),
        b"STORED\r\n" => Ok(Some((line.len(), false))),
        _ => Err(format!(
            "unexpected reply {:?}",
            String::from_utf8_lossy(line)
        )),
    }
}

/// The length of the first complete binary reply, and whether it was a
/// get's miss (status 1, key not found); None if incomplete.
fn binary_reply(input: &[u8]) -> Option<(usize, bool)> {
    if input.len() < 24 {
        return None;
    }
    let body = u32::from_be_bytes([input[8], input[9], input[10], input[11]]) as usize;
    let status = u16::from_be_bytes([input[6], input[7]]);
    (input.len() >= 24 + body).then_some((24 + body, status == 1))
}

/// The length of the first complete meta reply in `input`, and whether it
/// was a get's miss (`EN`); None if incomplete. `VA <n> <flags>*` is
/// followed by n bytes of data and CRLF; `HD` (a set stored) and `MN`
/// are lines. Anything else (`NS`, `EX`, `NF`, `ERROR`, `CLIENT_ERROR`,
/// `SERVER_ERROR ...`) is an error.
fn meta_reply(input: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let Some(end) = memchr::memchr(b'\n', input) else {
        return Ok(None);
    };
    let line = &input[..end + 1];
    let bad = || format!("unexpected reply {:?}", String::from_utf8_lossy(line));
    let word = line
        .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(b"");
    match word {
        b"VA" => {
            let bytes = line[3..]
                .split(|&b| b == b' ' || b == b'\r' || b == b'\n')
                .find(|f| !f.is_empty())
                .and_then(|b| std::str::from_utf8(b).ok()?.parse::<usize>().ok())
                .ok_or_else(bad)?;
            let total = line.len() + bytes + 2;
            Ok((input.len() >= total).then_some((total, false)))
        }
        b"EN" => Ok(Some((line.len(), true))),
        b"HD" | b"MN" => Ok(Some((line.len(), false))),
        _ => Err(bad()),
    }
}

/// How `--vs` runs the servers.
#[derive(Clone, Debug)]
pub struct VsOpts {
    /// `-m` of memcached and osmium.
    pub memory_mb: u64,
    /// `-t` of memcached and osmium.
    pub threads: u32,
    pub rounds: usize,
    /// Set every key before the runs.
    pub preload: bool,
    pub json: bool,
    /// `--plot DIR`: SVG charts written there.
    pub plot: Option<std::path::PathBuf>,
    /// Servers of each kind (`--instances`), keys spread by ketama; each
    /// has `memory_mb`.
    pub instances: usize,
    /// `--pin`: every server on one CPU, the generator on another.
    pub pin: Option<Pin>,
}

/// `--pin`: the CPU every server process runs on (all of its threads) and
/// the CPU of this process's generator threads, so that a server with
/// `-t 1` has a core of its own and neither the scheduler nor the
/// generator's busy polling moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pin {
    pub server: usize,
    pub generator: usize,
}

impl Pin {
    /// The first two CPUs this process may run on: servers on the first,
    /// the generator on the second. Pins the calling thread to the
    /// generator's CPU, so that every thread it starts from now on (the
    /// generator's, the CPU probe's) runs there too.
    pub fn apply() -> Result<Pin, String> {
        let cpus = crate::servers::allowed_cpus();
        let [server, generator, ..] = cpus[..] else {
            return Err(format!(
                "--pin needs two CPUs to run on; this process may use {cpus:?}"
            ));
        };
        crate::servers::pin_to_cpu(generator)
            .map_err(|e| format!("pinning the generator to CPU {generator}: errno {}", e.0))?;
        Ok(Pin { server, generator })
    }

    /// How the runs were placed, for the report headers.
    pub fn describe(pin: Option<Pin>) -> String {
        match pin {
            Some(p) => format!(
                ", each pinned to CPU {} (generator on CPU {})",
                p.server, p.generator
            ),
            None => String::new(),
        }
    }
}

/// The extra arguments a server of `kind` is started with for workload
/// `w`: the floor server answers with values of `w.value_size` bytes;
/// memcached and osmium get the `-I` that items of that size need.
fn server_args(kind: crate::servers::Kind, w: &Workload) -> Vec<String> {
    if kind.is_floor() {
        return vec!["--value-size".into(), w.value_size.to_string()];
    }
    match item_size_limit(w.value_size, w.key_size) {
        Some(limit) => vec!["-I".into(), limit],
        None => Vec::new(),
    }
}

/// `-I` for items of `value_size` with `key_size` keys: None while
/// memcached's default of 1 MiB per item (header and key included) holds
/// them, else the next power of two in MiB (`2m` for 1 MiB values).
pub fn item_size_limit(value_size: usize, key_size: usize) -> Option<String> {
    const MIB: usize = 1 << 20;
    // memcached's item header with CAS is 56 bytes; leave some room.
    let item = value_size + key_size + 128;
    (item > MIB).then(|| format!("{}m", item.div_ceil(MIB).next_power_of_two()))
}

/// The value sizes of `--sweep`: 64 B to 1 MiB, doubling.
pub fn sweep_sizes() -> Vec<usize> {
    (6..=20).map(|bits| 1usize << bits).collect()
}

/// How many of `keys` a sweep step at `value_size` uses: no more than
/// fill half of `memory_mb` at `value_size + key_size + 64` bytes per item,
/// so that every preloaded key stays (gets hit) at every size.
pub fn keys_that_fit(keys: u64, value_size: usize, key_size: usize, memory_mb: u64) -> u64 {
    let per_item = (value_size + key_size + 64) as u64;
    (memory_mb * (1 << 20) / 2 / per_item).clamp(1, keys.max(1))
}

/// Starts every server in `kinds` (same `-t`, `-m`, and the arguments of
/// [`server_args`]), preloads each (not the floor, which stores nothing),
/// then runs the workload on them in turn for `rounds` rounds,
/// alternating the order; every server's medians, in `kinds`' order. The
/// servers are stopped before it returns.
pub fn compare(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
) -> Result<Vec<Summary>, String> {
    let groups = start_servers(bins, kinds, w, o)?;
    measure(&groups, w, o.rounds)
}

/// The servers of one kind in a comparison: one, or `--instances` of
/// them with the keys spread over them by ketama.
pub struct Group {
    pub kind: crate::servers::Kind,
    pub servers: Vec<crate::servers::Server>,
}

impl Group {
    /// The group as load targets (with every PID, for CPU time).
    fn targets(&self) -> Targets {
        if let [one] = &self.servers[..] {
            return Targets::one(one.addr(), Some(one.pid));
        }
        let list: Vec<(String, u16, SocketAddr)> = self
            .servers
            .iter()
            .map(|s| ("127.0.0.1".to_string(), s.port, s.addr()))
            .collect();
        let pids = self.servers.iter().map(|s| s.pid).collect();
        Targets::ketama(&list, pids, crate::ketama::Variant::Default)
    }

    fn check_alive(&self) -> Result<(), String> {
        self.servers.iter().try_for_each(|s| s.check_alive())
    }
}

/// Starts `o.instances` servers of every kind in `kinds` for workload `w`
/// and preloads those that store (all but the floor) when `o.preload`,
/// each key on its ketama server.
fn start_servers(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
) -> Result<Vec<Group>, String> {
    use crate::servers::Server;
    let mut groups = Vec::new();
    for &kind in kinds {
        let mut servers = Vec::new();
        for _ in 0..o.instances.max(1) {
            let args = server_args(kind, w);
            let cpu = o.pin.map(|p| p.server);
            let server = Server::start_on(bins, kind, o.memory_mb, o.threads, &args, cpu)?;
            if cpu.is_some() {
                eprintln!(
                    "{kind} (pid {}): Cpus_allowed_list {}",
                    server.pid,
                    crate::servers::cpus_allowed_list(server.pid).unwrap_or_default()
                );
            }
            servers.push(server);
        }
        let group = Group { kind, servers };
        if o.preload && !kind.is_floor() {
            preload(&group.targets(), w)?;
        }
        groups.push(group);
    }
    Ok(groups)
}

/// Runs `w` on every group in turn for `rounds` rounds, alternating the
/// order; every group's medians, in `groups`' order.
fn measure(groups: &[Group], w: &Workload, rounds: usize) -> Result<Vec<Summary>, String> {
    let mut results: Vec<Vec<Outcome>> = vec![Vec::new(); groups.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..groups.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let g = &groups[i];
            let o = run(&g.targets(), w)?;
            g.check_alive()?;
            eprintln!(
                "round {} {:>9}: {:>10.0} ops/s  p50 {:>7.1} us  p99 {:>7.1} us  p99.9 {:>7.1} us  cpu {:>6.2} us/req  miss ratio {:.4}",
                round + 1,
                g.kind,
                o.ops_per_sec(),
                o.p50_us,
                o.p99_us,
                o.p999_us,
                o.cpu_us_per_req.unwrap_or(f64::NAN),
                o.miss_ratio()
            );
            results[i].push(o);
        }
    }
    Ok(groups
        .iter()
        .zip(&results)
        .map(|(g, r)| Summary::of(g.kind.name(), r))
        .collect())
}

/// The floor server's summary among `summaries`, if it ran.
fn floor_of(summaries: &[Summary]) -> Option<&Summary> {
    summaries.iter().find(|s| s.server == "floor")
}

/// `--vs`: [`compare`], then the median figures of each server with ratios
/// against the first server and the floor, as a table or JSON.
pub fn run_vs(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
) -> Result<bool, String> {
    let summaries = compare(bins, kinds, w, o)?;
    plot_cdf(
        o.plot.as_deref(),
        "latency-cdf.svg",
        &chart_title(w, &format!("{} B", w.value_size)),
        &summaries,
    )?;
    let floor = floor_of(&summaries);
    let first = &summaries[0];
    if o.json {
        let rows: Vec<serde_json::Value> = summaries
            .iter()
            .map(|s| serde_json::Value::Object(s.json(Some(first), floor)))
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(true);
    }
    println!("{}", describe(w, o, &format!("{} B", w.value_size)));
    let misses = w.cache_aside || !o.preload;
    println!("{}", report::table_header(None, &first.server, misses));
    for s in &summaries {
        println!("{}", report::table_row(None, s, first, floor, misses));
    }
    Ok(true)
}

/// A chart's title: the workload in short (`values`: the value size).
fn chart_title(w: &Workload, values: &str) -> String {
    format!(
        "{values} values, {:.0}% gets, {:?}, {} conns x depth {}",
        w.get_ratio * 100.0,
        w.protocol,
        w.conns,
        w.depth
    )
}

/// The line above a `--vs` table: what ran (`values`: the value size).
fn describe(w: &Workload, o: &VsOpts, values: &str) -> String {
    let instances = if o.instances > 1 {
        format!(", {} of each behind ketama", o.instances)
    } else {
        String::new()
    };
    format!(
        "{} connections, {} generator thread(s), depth {}, {:.0}% gets{}, {values} values, {:?} protocol; servers -t {} -m {}{instances}{}; median of {} round(s)",
        w.conns,
        w.threads,
        w.depth,
        w.get_ratio * 100.0,
        if w.cache_aside { " (cache-aside)" } else { "" },
        w.protocol,
        o.threads,
        o.memory_mb,
        Pin::describe(o.pin),
        o.rounds
    )
}

/// `--vs` with `--value-sizes`/`--sweep`: the whole comparison once per
/// value size, on servers started afresh for each size (so the slabs one
/// size filled do not serve the next) with the `-I` it needs, over
/// [`keys_that_fit`] keys; one table (or JSON array) with a row per size
/// and server.
pub fn run_sweep_vs(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
    sizes: &[usize],
) -> Result<bool, String> {
    let mut steps = Vec::new();
    for &size in sizes {
        let step = Workload {
            value_size: size,
            keys: keys_that_fit(w.keys, size, w.key_size, o.memory_mb),
            ..w.clone()
        };
        eprintln!(
            "value size {size} B: {} keys{}",
            step.keys,
            item_size_limit(size, w.key_size).map_or(String::new(), |l| format!(", -I {l}"))
        );
        let summaries = compare(bins, kinds, &step, o)?;
        plot_cdf(
            o.plot.as_deref(),
            &format!("latency-cdf-{size}B.svg"),
            &chart_title(&step, &format!("{size} B")),
            &summaries,
        )?;
        steps.push(size_step(&step, summaries));
    }
    print_steps(
        &steps,
        "value B",
        o.json,
        w.cache_aside || !o.preload,
        || describe(w, o, "sized"),
    );
    Ok(true)
}

/// One step of a sweep: its lead column (value size, or offered rate),
/// the fields it adds to each JSON row, and every server's figures.
pub struct Step {
    pub lead: String,
    pub fields: Vec<(&'static str, serde_json::Value)>,
    pub summaries: Vec<Summary>,
}

/// A sweep's rows: a table with the step's lead first (`lead` names that
/// column), or a JSON array whose objects add the step's fields.
fn print_steps(
    steps: &[Step],
    lead: &str,
    json: bool,
    misses: bool,
    describe: impl Fn() -> String,
) {
    if json {
        let rows: Vec<serde_json::Value> = steps
            .iter()
            .flat_map(|step| {
                let floor = floor_of(&step.summaries);
                step.summaries.iter().map(move |s| {
                    let mut row = s.json(step.summaries.first(), floor);
                    for (name, v) in &step.fields {
                        row.insert((*name).into(), v.clone());
                    }
                    serde_json::Value::Object(row)
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return;
    }
    println!("{}", describe());
    let Some(first) = steps.first().and_then(|s| s.summaries.first()) else {
        return;
    };
    println!(
        "{}",
        report::table_header(Some(lead), &first.server, misses)
    );
    for step in steps {
        let floor = floor_of(&step.summaries);
        for s in &step.summaries {
            println!(
                "{}",
                report::table_row(Some(&step.lead), s, &step.summaries[0], floor, misses)
            );
        }
    }
}

/// A value-size sweep step.
fn size_step(w: &Workload, summaries: Vec<Summary>) -> Step {
    Step {
        lead: w.value_size.to_string(),
        fields: vec![("value_size", w.value_size.into()), ("keys", w.keys.into())],
        summaries,
    }
}

/// An offered-rate sweep step.
fn rate_step(rate: f64, summaries: Vec<Summary>) -> Step {
    Step {
        lead: format!("{rate:.0}"),
        fields: vec![("offered_rps", rate.into())],
        summaries,
    }
}

/// `--plot DIR`: writes DIR/`file`, the latency CDF of `summaries`.
pub fn plot_cdf(
    dir: Option<&std::path::Path>,
    file: &str,
    title: &str,
    summaries: &[Summary],
) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let series: Vec<crate::plot::CdfSeries> = summaries
        .iter()
        .filter_map(|s| {
            Some(crate::plot::CdfSeries {
                name: &s.server,
                hist: s.latency.as_ref()?,
            })
        })
        .collect();
    let path = dir.join(file);
    crate::plot::latency_cdf(&path, title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `--plot DIR` with `--rates`: writes DIR/rates.svg, throughput and p99
/// against offered rate, a line per server.
fn plot_rates(
    dir: Option<&std::path::Path>,
    title: &str,
    steps: &[(f64, Vec<Summary>)],
) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let Some((_, first)) = steps.first() else {
        return Ok(());
    };
    let series: Vec<crate::plot::RateSeries> = first
        .iter()
        .enumerate()
        .map(|(i, s)| crate::plot::RateSeries {
            name: &s.server,
            points: steps
                .iter()
                .map(|(rate, sums)| (*rate, sums[i].ops_per_sec, sums[i].p99_us))
                .collect(),
        })
        .collect();
    let path = dir.join("rates.svg");
    crate::plot::rates(&path, title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `--vs --rates`: the servers started once, then at each offered rate
/// (open loop) every server in turn for `rounds` rounds; a row per rate and
/// server, and with `--plot` DIR/rates.svg.
pub fn run_rates_vs(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    o: &VsOpts,
    rates: &[f64],
) -> Result<bool, String> {
    let groups = start_servers(bins, kinds, w, o)?;
    let mut results = Vec::new();
    for &rate in rates {
        eprintln!("offered {rate:.0} req/s:");
        let step = Workload {
            rate: Some(rate),
            ..w.clone()
        };
        results.push((rate, measure(&groups, &step, o.rounds)?));
    }
    plot_rates(
        o.plot.as_deref(),
        &chart_title(w, &format!("{} B", w.value_size)),
        &results,
    )?;
    let steps: Vec<Step> = results.into_iter().map(|(r, s)| rate_step(r, s)).collect();
    print_steps(
        &steps,
        "rate/s",
        o.json,
        w.cache_aside || !o.preload,
        || describe(w, o, &format!("{} B", w.value_size)),
    );
    Ok(true)
}

/// `--rates` on running servers (`--addr`/`--targets`): one open-loop run
/// per offered rate; a row per rate, and with `plot` DIR/rates.svg.
pub fn run_rates(
    targets: &Targets,
    w: &Workload,
    rates: &[f64],
    json: bool,
    plot: Option<&std::path::Path>,
) -> Result<bool, String> {
    let mut results = Vec::new();
    for &rate in rates {
        let step = Workload {
            rate: Some(rate),
            ..w.clone()
        };
        let out = run(targets, &step)?;
        eprintln!(
            "offered {rate:.0} req/s: achieved {:.0}, p99 {:.1} us",
            out.ops_per_sec(),
            out.p99_us
        );
        results.push((rate, vec![Summary::of(&targets.name(), &[out])]));
    }
    let title = format!("{} connections, {:?} protocol", w.conns, w.protocol);
    plot_rates(plot, &title, &results)?;
    let steps: Vec<Step> = results.into_iter().map(|(r, s)| rate_step(r, s)).collect();
    print_steps(&steps, "rate/s", json, w.cache_aside, || title.clone());
    Ok(true)
}

/// A sweep on one running server (`--addr` with `--value-sizes`/`--sweep`):
/// per size, [`keys_that_fit`] keys (with `memory_mb`, the `-m` the server
/// is assumed to have) preloaded unless `preload` is false, then one run.
/// The server must accept the largest items (`-I`).
pub fn run_sweep(
    targets: &Targets,
    w: &Workload,
    sizes: &[usize],
    memory_mb: u64,
    preload_keys: bool,
    json: bool,
    plot: Option<&std::path::Path>,
) -> Result<bool, String> {
    let name = targets.name();
    let mut steps = Vec::new();
    for &size in sizes {
        let step = Workload {
            value_size: size,
            keys: keys_that_fit(w.keys, size, w.key_size, memory_mb),
            ..w.clone()
        };
        eprintln!("value size {size} B: {} keys", step.keys);
        if preload_keys {
            preload(targets, &step)?;
        }
        let out = run(targets, &step)?;
        let summaries = vec![Summary::of(&name, &[out])];
        plot_cdf(
            plot,
            &format!("latency-cdf-{size}B.svg"),
            &format!("{size} B values"),
            &summaries,
        )?;
        steps.push(size_step(&step, summaries));
    }
    print_steps(
        &steps,
        "value B",
        json,
        w.cache_aside || !preload_keys,
        || {
            format!(
                "{} connections, depth {}, {:.0}% gets, sized values, {:?} protocol",
                w.conns,
                w.depth,
                w.get_ratio * 100.0,
                w.protocol
            )
        },
    );
    Ok(true)
}

/// How `--sla` searches: the highest open-loop rate at which the
/// workload's `quantile` of requests finish within `bound_us`.
#[derive(Clone, Copy, Debug)]
pub struct SlaOpts {
    pub bound_us: f64,
    /// The hot-key distribution (the random one is the workload's).
    pub hot: KeyDist,
    /// Bisection steps after the capacity estimate.
    pub steps: usize,
    /// Measured seconds per step (after the workload's warm-up).
    pub step_duration: Duration,
    /// Runs of a step that went over before its rate counts as over.
    pub retries: usize,
}

/// The SLA rate of one distribution on `addr`: estimates capacity with a
/// short closed-loop run (depth 1), then bisects the open-loop rate between
/// 0 and 3 × capacity (an open loop pipelines, so it can pass more than the
/// closed loop's capacity). A rate passes when its quantile latency is within
/// the bound and the generator kept up with it (achieved ≥ 95 % of it), in
/// its first run or in one of `retries` more (this shared VM pauses now and
/// then for tens of milliseconds, which alone puts a 2 s step over 1 ms at
/// the 99.5th percentile, at any rate).
/// Returns the highest passing rate and that run's outcome.
pub fn sla_rate(targets: &Targets, w: &Workload, o: &SlaOpts) -> Result<SlaSearch, String> {
    let probe = Workload {
        rate: None,
        depth: 1,
        duration: Duration::from_secs(1),
        warmup: Duration::from_millis(300),
        ..w.clone()
    };
    let no_cpu = Targets {
        pids: Vec::new(),
        ..targets.clone()
    };
    let capacity = run(&no_cpu, &probe)?.ops_per_sec();
    let (mut lo, mut hi) = (0.0f64, capacity * 3.0);
    let mut best = None;
    let mut steps = Vec::new();
    for _ in 0..o.steps.max(1) {
        let rate = (lo + hi) / 2.0;
        let step = Workload {
            rate: Some(rate),
            duration: o.step_duration,
            ..w.clone()
        };
        let mut tries = 0;
        let (out, pass) = loop {
            let out = run(targets, &step)?;
            let pass = out.pq_us <= o.bound_us && out.ops_per_sec() >= 0.95 * rate;
            eprintln!(
                "  {} at {:>9.0}/s: achieved {:>9.0}/s, p{} {:>8.1} us: {}",
                w.dist,
                rate,
                out.ops_per_sec(),
                w.quantile * 100.0,
                out.pq_us,
                if pass { "within" } else { "over" }
            );
            if pass || tries == o.retries {
                break (out, pass);
            }
            tries += 1;
        };
        steps.push((rate, out.ops_per_sec(), out.p99_us));
        if pass {
            lo = rate;
            best = Some(out);
        } else {
            hi = rate;
        }
    }
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(SlaSearch {
        rate: if best.is_some() { lo } else { 0.0 },
        best,
        steps,
    })
}

/// What [`sla_rate`] found.
pub struct SlaSearch {
    /// The highest rate that passed (0 if none did).
    pub rate: f64,
    /// That step's outcome.
    pub best: Option<Outcome>,
    /// Every step, by offered rate: (offered, achieved, p99 µs).
    pub steps: Vec<(f64, f64, f64)>,
}

/// `--plot DIR` with `--sla`: writes DIR/sla.svg, throughput and p99
/// against the offered rate of every bisection step, a line per server
/// and key distribution.
pub fn plot_sla(
    dir: Option<&std::path::Path>,
    title: &str,
    series: &[(String, &SlaSearch)],
) -> Result<(), String> {
    let Some(dir) = dir else { return Ok(()) };
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let series: Vec<crate::plot::RateSeries> = series
        .iter()
        .map(|(name, search)| crate::plot::RateSeries {
            name,
            points: search.steps.clone(),
        })
        .collect();
    let path = dir.join("sla.svg");
    crate::plot::rates(&path, title, &series)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// One server's SLA figures as JSON: `server`, `random_rps`, `hot_rps`,
/// `overall` (0.8 × random + 0.2 × hot), with `first` (the first server's
/// overall) `overall_vs_first`, and `cpu_us_per_req` of the best random
/// step when there was one.
pub fn sla_json(
    server: &str,
    random: f64,
    hot: f64,
    first: Option<f64>,
    random_out: Option<&Outcome>,
) -> serde_json::Value {
    let overall = 0.8 * random + 0.2 * hot;
    let mut row = serde_json::Map::new();
    row.insert("server".into(), server.into());
    row.insert("random_rps".into(), random.into());
    row.insert("hot_rps".into(), hot.into());
    row.insert("overall".into(), overall.into());
    if let Some(first) = first {
        row.insert("overall_vs_first".into(), (overall / first).into());
    }
    let cpu = random_out
        .and_then(|o| o.cpu_us_per_req)
        .unwrap_or(f64::NAN);
    row.insert("cpu_us_per_req".into(), cpu.into());
    serde_json::Value::Object(row)
}

/// `--sla` on each server of `kinds` (started as for `--vs`, one at a
/// time in the order given): the random-key and hot-key SLA rates and
/// Overall = 0.8 × random + 0.2 × hot (seed 002), with ratios against the
/// first server.
pub fn run_sla(
    bins: &crate::servers::Binaries,
    kinds: &[crate::servers::Kind],
    w: &Workload,
    vs: &VsOpts,
    o: &SlaOpts,
) -> Result<bool, String> {
    // Every round searches each server in turn, the order alternating
    // (A B, B A, ...); each server's random and hot rates are the medians
    // over the rounds, so one stall of the shared machine in one step
    // does not decide the score.
    let mut runs: Vec<(Vec<SlaSearch>, Vec<SlaSearch>)> =
        kinds.iter().map(|_| (Vec::new(), Vec::new())).collect();
    for round in 0..vs.rounds.max(1) {
        let mut order: Vec<usize> = (0..kinds.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let kind = kinds[i];
            // One kind at a time: the others are not running meanwhile.
            let group = start_servers(bins, &[kind], w, vs)?.remove(0);
            eprintln!("round {} {kind}:", round + 1);
            let target = group.targets();
            let random = sla_rate(&target, w, o)?;
            let hot_w = Workload {
                dist: o.hot,
                ..w.clone()
            };
            let hot = sla_rate(&target, &hot_w, o)?;
            group.check_alive()?;
            runs[i].0.push(random);
            runs[i].1.push(hot);
        }
    }
    let median = |mut v: Vec<SlaSearch>| {
        v.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        // The lower middle for an even count.
        v.swap_remove((v.len() - 1) / 2)
    };
    let rows: Vec<_> = kinds
        .iter()
        .zip(runs)
        .map(|(&k, (random, hot))| (k, median(random), median(hot)))
        .collect();
    let overall = |r: &SlaSearch, h: &SlaSearch| 0.8 * r.rate + 0.2 * h.rate;
    let first = rows.first().map_or(f64::NAN, |(_, r, h)| overall(r, h));
    let series: Vec<(String, &SlaSearch)> = rows
        .iter()
        .flat_map(|(k, r, h)| [(format!("{k} random"), r), (format!("{k} hot"), h)])
        .collect();
    plot_sla(
        vs.plot.as_deref(),
        &format!(
            "SLA steps: {}",
            chart_title(w, &format!("{} B", w.value_size))
        ),
        &series,
    )?;
    if vs.json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(k, r, h)| sla_json(k.name(), r.rate, h.rate, Some(first), r.best.as_ref()))
            .collect();
        println!("{}", serde_json::Value::Array(out));
        return Ok(true);
    }
    println!(
        "SLA: {}% of requests within {} us; random keys {}, hot keys {}; {} connections, {:.0}% gets, {} B values, {:?}; servers -t {} -m {}{}; median of {} round(s)",
        w.quantile * 100.0,
        o.bound_us,
        w.dist,
        o.hot,
        w.conns,
        w.get_ratio * 100.0,
        w.value_size,
        w.protocol,
        vs.threads,
        vs.memory_mb,
        Pin::describe(vs.pin),
        vs.rounds.max(1)
    );
    println!(
        "{:>10} {:>14} {:>14} {:>14} {:>10} {:>12}",
        "server", "random req/s", "hot req/s", "overall", "vs first", "cpu us/req"
    );
    for (k, r, h) in &rows {
        println!(
            "{:>10} {:>14.0} {:>14.0} {:>14.0} {:>10.3} {:>12.2}",
            k.name(),
            r.rate,
            h.rate,
            overall(r, h),
            overall(r, h) / first,
            r.best
                .as_ref()
                .and_then(|o| o.cpu_us_per_req)
                .unwrap_or(f64::NAN)
        );
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_replies_are_framed() {
        let hit = b"VALUE k1 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(text_reply(hit).unwrap(), Some((hit.len(), false)));
        assert_eq!(text_reply(&hit[..hit.len() - 1]).unwrap(), None);
        let cas = b"VALUE k1 0 3 99\r\nabc\r\nEND\r\nSTORED\r\n";
        assert_eq!(text_reply(cas).unwrap(), Some((cas.len() - 8, false)));
        assert_eq!(text_reply(b"END\r\n").unwrap(), Some((5, true)));
        assert_eq!(text_reply(b"STORED\r\nEND").unwrap(), Some((8, false)));
        assert!(text_reply(b"SERVER_ERROR out of memory\r\n").is_err());
    }

    #[test]
    fn meta_replies_are_framed() {
        let hit = b"VA 3\r\nabc\r\n";
        assert_eq!(meta_reply(hit).unwrap(), Some((hit.len(), false)));
        assert_eq!(meta_reply(&hit[..hit.len() - 1]).unwrap(), None);
        let flags = b"VA 2 f0 t-1\r\nab\r\nHD\r\n";
        assert_eq!(meta_reply(flags).unwrap(), Some((flags.len() - 4, false)));
        assert_eq!(meta_reply(b"EN\r\n").unwrap(), Some((4, true)));
        assert_eq!(meta_reply(b"HD\r\nEN").unwrap(), Some((4, false)));
        assert_eq!(meta_reply(b"MN\r\n").unwrap(), Some((4, false)));
        assert_eq!(meta_reply(b"HD").unwrap(), None);
        assert!(meta_reply(b"NS\r\n").is_err());
        assert!(meta_reply(b"SERVER_ERROR out of memory\r\n").is_err());
    }

    #[test]
    fn requests_are_encoded() {
        let mut out = Vec::new();
        push_request(&mut out, Protocol::Meta, b"k1", true, b"");
        push_request(&mut out, Protocol::Meta, b"k2", false, b"xyz");
        push_request(&mut out, Protocol::Text, b"k3", false, b"ab");
        assert_eq!(out, b"mg k1 v\r\nms k2 3\r\nxyz\r\nset k3 0 0 2\r\nab\r\n");
    }

    #[test]
    fn sweep_sizes_fit_their_servers() {
        let sizes = sweep_sizes();
        assert_eq!((sizes[0], sizes[sizes.len() - 1]), (64, 1 << 20));
        assert_eq!(sizes.len(), 15);
        assert_eq!(item_size_limit(64, 16), None);
        assert_eq!(item_size_limit(512 << 10, 16), None);
        assert_eq!(item_size_limit(1 << 20, 16), Some("2m".into()));
        assert_eq!(item_size_limit(3 << 20, 16), Some("4m".into()));
        assert_eq!(keys_that_fit(100_000, 64, 16, 1024), 100_000);
        assert_eq!(keys_that_fit(100_000, 1 << 20, 16, 1024), 511);
        assert_eq!(keys_that_fit(100_000, 1 << 20, 16, 1), 1);
    }

    #[test]
    fn binary_replies_are_framed() {
        let mut r = vec![0x81, 0, 0, 0, 4, 0, 0, 1, 0, 0, 0, 9];
        r.extend_from_slice(&[0; 12]);
        r.extend_from_slice(b"Not found");
        assert_eq!(binary_reply(&r), Some((33, true)));
        assert_eq!(binary_reply(&r[..30]), None);
    }

    #[test]
    fn cpu_time_of_this_process_moves() {
        let pid = std::process::id();
        let before = cpu_time(pid).unwrap();
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_time(pid).unwrap() >= before);
    }
}
