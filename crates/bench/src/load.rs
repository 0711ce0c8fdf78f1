//! `load`: the load generator, its `--vs` mode and sweeps (`vs`), and its
//! SLA search (`sla`); those two submodules build on the generator here.
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
//! on a schedule (woken by a timerfd), whatever the replies do, and a
//! request's latency runs from when it was *due*, so a stalled server is
//! charged for every request that should have gone out meanwhile (no
//! coordinated omission). The schedule is evenly spaced (`--arrivals
//! uniform`: each connection every `conns / rate` seconds, the connections
//! staggered) or Poisson (`--arrivals poisson`: each connection's gaps
//! drawn from an exponential distribution of mean `conns / rate`, so the
//! arrivals of all connections together are a Poisson process of the
//! offered rate, with its bursts and lulls).
//!
//! [`Targets`]: one server, or several (`--targets`, `--vs --instances`)
//! with each key sent to the server libmemcached's ketama picks: every
//! connection then holds a socket per server.
//!
//! SLA (`--sla`, [`sla_rate`]): the highest open-loop rate at which a
//! quantile (99.5 %) of requests finish within a bound (1 ms), growing the
//! rate until a step fails and then bisecting,
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
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::keys;
use crate::report::{self, Outcome, Summary};
use arrivals::next_gap;
pub(crate) use arrivals::Arrivals;

/// Wire protocol of the generated requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Protocol {
    Text,
    Binary,
    /// Meta commands: `mg <key> v` (`VA <n>` + data on a hit, `EN` on a
    /// miss) and `ms <key> <n>` + data (`HD`).
    Meta,
}

/// What one run sends.
#[derive(Clone, Debug)]
pub(crate) struct Workload {
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
    /// Open loop: how the requests are spaced in time.
    pub arrivals: Arrivals,
    /// The latency quantile reported as `pq_us` (the SLA's, 0.995).
    pub quantile: f64,
    /// Cache-aside: every get that misses is followed by a set of its key.
    pub cache_aside: bool,
    /// Open loop: spin on the poll (timeout zero) instead of sleeping on a
    /// timerfd between sends, so requests leave on schedule and replies are
    /// read as they land, without the generator's own wake-up latency.
    pub busy_poll: bool,
    /// Closed loop: a connection's next requests are sent after every
    /// reply of the poll is read, as libevent's bufferevents send
    /// (memtier_benchmark, memaslap): a generator that writes in bursts.
    /// Without it each connection sends as soon as its reply is in.
    pub deferred_sends: bool,
    /// Connect with TLS (`load --tls`): the rustls client configuration.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Put before every key (`load --key-prefix`; by default
    /// `osmium-bench:` against a server this tool did not start, so an
    /// operator can find and delete what it wrote).
    pub key_prefix: Vec<u8>,
}

impl Workload {
    /// Checks that every key fits (ids, prefix and all).
    pub(crate) fn check_keys(&self) -> Result<(), String> {
        keys::check_key_size(self.key_size, self.keys)?;
        if self.key_prefix.len() + self.key_size > keys::MAX_KEY {
            return Err(format!(
                "--key-prefix of {} bytes and --key-size {} make keys over {} bytes",
                self.key_prefix.len(),
                self.key_size,
                keys::MAX_KEY
            ));
        }
        Ok(())
    }

    /// The key of id `id`.
    #[inline]
    pub(crate) fn key(&self, id: u64) -> keys::Key {
        keys::Key::prefixed(&self.key_prefix, b'k', id, self.key_size)
    }
}

/// How keys are drawn from `0..keys`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum KeyDist {
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
pub(crate) fn cpu_time(pid: u32) -> Result<Duration, String> {
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
pub(crate) struct Targets {
    pub addrs: Vec<SocketAddr>,
    /// Their PIDs, when known, for the servers' CPU time per request
    /// (summed over all of them).
    pub pids: Vec<u32>,
    /// Key placement over several servers (None: one server).
    pub continuum: Option<std::sync::Arc<crate::ketama::Continuum>>,
}

impl Targets {
    /// One server.
    pub(crate) fn one(addr: SocketAddr, pid: Option<u32>) -> Targets {
        Targets {
            addrs: vec![addr],
            pids: pid.into_iter().collect(),
            continuum: None,
        }
    }

    /// Several servers, `(host as spelled for ketama, port, address)`,
    /// keys placed by libmemcached's ketama `variant`.
    pub(crate) fn ketama(
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
    pub(crate) fn name(&self) -> String {
        self.addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index in `addrs` of the server that holds `key`.
    #[inline]
    pub(crate) fn server_of(&self, key: &[u8]) -> usize {
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
pub(crate) fn preload(targets: &Targets, w: &Workload) -> Result<(), String> {
    w.check_keys()?;
    let value = vec![b'v'; w.value_size];
    let mut out = Vec::new();
    let chunk = ((4 << 20) / (w.value_size + 64)).clamp(1, 500);
    for (server, &addr) in targets.addrs.iter().enumerate() {
        let mut s = crate::tls::sock::connect_blocking(addr, w.tls.as_ref())?;
        let mut ids = (0..w.keys).filter(|&i| {
            targets.addrs.len() == 1 || targets.server_of(w.key(i).as_bytes()) == server
        });
        loop {
            out.clear();
            let mut sent = 0;
            for i in ids.by_ref().take(chunk) {
                let k = w.key(i);
                osmium_protocol::client::encode::set(&mut out, k.as_bytes(), 0, 0, &value, false);
                sent += 1;
            }
            if sent == 0 {
                break;
            }
            s.send(&out).map_err(|e| format!("preload: {e}"))?;
            // Each reply is a line: STORED, or an error that stops here
            // (e.g. an item over the server's -I).
            for _ in 0..sent {
                let r = s.reply(Expect::Line).map_err(|e| format!("preload: {e}"))?;
                if codec_reply::outcome(&r) != codec_reply::Outcome::Done {
                    return Err(format!(
                        "preload of {addr}: {}",
                        String::from_utf8_lossy(&r).trim_end()
                    ));
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
    conn: osmium_net::nb::Conn,
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
pub(crate) fn run(targets: &Targets, w: &Workload) -> Result<Outcome, String> {
    w.check_keys()?;
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
            let mut conn = crate::tls::sock::connect_nb(addr, w.tls.as_ref())?;
            poll.registry()
                .register(
                    &mut conn,
                    Token(i * servers + s),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .map_err(|e| e.to_string())?;
            streams.push(Stream {
                conn,
                inflight: VecDeque::new(),
            });
        }
        let slot = (i as u64 * threads + thread) as f64 / w.conns.max(1) as f64;
        let first = match (interval, w.arrivals) {
            (None, _) => Duration::ZERO,
            (Some(iv), Arrivals::Uniform) => iv.mul_f64(slot),
            (Some(iv), Arrivals::Poisson) => next_gap(Arrivals::Poisson, iv, &mut rng),
        };
        conns.push(Conn {
            streams,
            pending: 0,
            refills: Vec::new(),
            next_at: start + first,
        });
    }
    let mut events = Events::with_capacity(256);
    // `deferred_sends`: the connections whose next batch goes out after
    // this poll's events.
    let mut due: Vec<usize> = Vec::with_capacity(n);
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
                        conn.next_at += next_gap(w.arrivals, iv, &mut rng);
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
            write_out(stream)?;
            // Until the socket is drained (a short read emptied it; more
            // data raises a new, edge-triggered, event).
            match stream.conn.fill(false) {
                Ok(true) => {}
                Ok(false) => return Err(format!("{} closed the connection", targets.addrs[s])),
                Err(e) => return Err(format!("reading: {e}")),
            }
            let mut refilled = false;
            while let Some(&req) = stream.inflight.front() {
                let Some((len, miss)) = next_reply(&stream.conn, w.protocol)? else {
                    break;
                };
                stream.conn.consume(len);
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
                        let key = w.key(req.id);
                        let out = stream.conn.out();
                        push_request(out, w.protocol, key.as_bytes(), false, &value);
                        stream.inflight.push_back(InFlight {
                            id: req.id | FILL,
                            get: false,
                            from: now,
                        });
                        refilled = true;
                    }
                }
            }
            if refilled {
                write_out(stream)?;
            }
            if !open && conn.pending == 0 {
                if w.deferred_sends {
                    due.push(c);
                } else {
                    next_batch(conn, targets, w, &sampler, &mut rng, &value);
                    conn.write_all()?;
                }
            }
        }
        for c in due.drain(..) {
            let conn = &mut conns[c];
            next_batch(conn, targets, w, &sampler, &mut rng, &value);
            conn.write_all()?;
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
        let key = w.key(id & !FILL);
        let stream = &mut self.streams[targets.server_of(key.as_bytes())];
        push_request(stream.conn.out(), w.protocol, key.as_bytes(), get, value);
        stream.inflight.push_back(InFlight { id, get, from });
    }

    /// Writes what every socket has queued (as far as the sockets take it).
    fn write_all(&mut self) -> Result<(), String> {
        for stream in &mut self.streams {
            write_out(stream)?;
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

/// Writes what the socket has queued, as far as it takes it (TLS records
/// it did not take before go first).
fn write_out(stream: &mut Stream) -> Result<(), String> {
    stream
        .conn
        .flush()
        .map(drop)
        .map_err(|e| format!("sending: {e}"))
}

mod arrivals;
mod cpu_sweep;
mod sla;
mod vs;
mod wire;
pub(crate) use cpu_sweep::run_cpu_sweep_vs;
use osmium_protocol::client::reply::{self as codec_reply, Expect};
pub(crate) use sla::*;
pub(crate) use vs::*;
use wire::{next_reply, push_request};

#[cfg(test)]
mod tests {
    use super::*;

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
