//! `tls`: TLS costs of osmium against memcached `-Z`, both started here
//! with the same test certificates ([`certs`], made with the `openssl`
//! command at bench time, ECDSA P-256 or RSA-2048):
//!
//! * `tls handshakes`: client threads open connections as fast as they
//!   can — handshake (full, or resumed from the session the client kept),
//!   one `version` request, close — and the server's CPU time over the
//!   measured window (from `/proc`) gives its CPU per handshake, and so
//!   handshakes per core-second; osmium and memcached alternate round by
//!   round;
//! * `tls idle`: the RAM an idle TLS connection holds: the server's RSS
//!   growth over N connections left idle after their handshake and one
//!   `get`, divided by N.
//!
//! The TLS mode of `load` (`load --tls`) is [`LoadTls`]; its client
//! stream is [`sock`].
//!
//! Resumption: the client keeps TLS 1.3 tickets, and TLS 1.2 session IDs
//! and tickets (rustls `Tls12Resumption::SessionIdOrTickets`). Both
//! servers issue tickets by default (memcached through OpenSSL, osmium
//! through rustls's ticketer); `--session-cache` starts both with `-o
//! ssl_session_cache` (their session-ID caches) as well, and
//! `--tls12-resumption ids` has the client offer TLS 1.2 session IDs only
//! (no tickets), so that the ID caches are what resumes.

pub(crate) mod certs;
pub(crate) mod sock;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use rustls::{ClientConfig, ClientConnection, HandshakeKind};

use osmium_protocol::client::encode;
use osmium_protocol::client::reply::Expect;

use crate::servers::{Kind, Server};
use certs::{Certs, KeyType, Tls12Resume, Version};

/// TLS costs: handshakes per core-second, RAM per idle TLS connection
/// (osmium against memcached -Z, same certificates, alternating rounds).
#[derive(Args)]
pub(crate) struct TlsArgs {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Full and resumed handshakes: server CPU per handshake and
    /// handshakes per core-second.
    Handshakes(HandshakeArgs),
    /// RAM an idle TLS connection holds (RSS growth over N idle
    /// connections / N).
    Idle(IdleArgs),
}

/// Certificates and server options every `tls` mode shares.
#[derive(Args, Clone)]
struct TlsCommon {
    #[command(flatten)]
    common: crate::Common,
    /// Key type of the server certificate (and its CA).
    #[arg(long, value_enum, default_value_t = KeyType::Rsa2048)]
    key_type: KeyType,
    /// TLS version the client offers.
    #[arg(long, value_enum, default_value_t = Version::V13)]
    tls_version: Version,
    /// Start both servers with `-o ssl_session_cache` too (the
    /// session-ID cache; tickets are on either way).
    #[arg(long)]
    session_cache: bool,
    /// How the client resumes TLS 1.2 sessions: `tickets` (a ticket when
    /// the server issued one, else the session ID) or `ids` (the session
    /// ID only, which needs --session-cache to resume).
    #[arg(long, value_enum, default_value_t = Tls12Resume::Tickets)]
    tls12_resumption: Tls12Resume,
}

#[derive(Args)]
struct HandshakeArgs {
    #[command(flatten)]
    tls: TlsCommon,
    /// Handshake kinds, comma separated: full (the client keeps no
    /// session), resumed (it offers the last one the server gave it).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "full,resumed"
    )]
    kind: Vec<HsKind>,
    /// Client threads, each opening connections one after another.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Unmeasured seconds before each run.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Rounds (the server order alternates; medians are reported).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
}

#[derive(Args)]
struct IdleArgs {
    #[command(flatten)]
    tls: TlsCommon,
    /// Idle connections held open (each server gets `-c` this + 64).
    #[arg(long, default_value_t = 2000)]
    conns: usize,
    /// Rounds, each on fresh servers (the order alternates; medians are
    /// reported).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Also measure plain TCP connections (no -Z), for comparison.
    #[arg(long)]
    plain: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum HsKind {
    Full,
    Resumed,
}

/// `load --tls`: the load generator over TLS.
#[derive(Args, Clone)]
pub(crate) struct LoadTlsArgs {
    /// Connect with TLS (rustls client); with --vs, start every server
    /// with -Z and test certificates made here (see --tls-key-type).
    #[arg(long)]
    tls: bool,
    /// Key type of the test certificates of --tls.
    #[arg(long, value_enum, default_value_t = KeyType::Rsa2048, requires = "tls")]
    tls_key_type: KeyType,
    /// TLS version the client offers with --tls.
    #[arg(long, value_enum, default_value_t = Version::Any, requires = "tls")]
    tls_version: Version,
    /// The CA certificate (PEM) of a running server (--addr, --targets)
    /// loaded with --tls; --vs makes its own certificates instead.
    #[arg(long, value_name = "PATH", requires = "tls")]
    tls_ca: Option<std::path::PathBuf>,
}

/// What `load --tls` set up: the client configuration, the server
/// arguments of --vs, and the certificates (kept until the run ends).
#[derive(Default)]
pub(crate) struct LoadTls {
    pub client: Option<Arc<ClientConfig>>,
    pub server_args: Vec<String>,
    _certs: Option<Certs>,
}

impl LoadTls {
    /// Certificates and the client configuration for `load --tls` (nothing
    /// without --tls).
    pub(crate) fn setup(a: &LoadTlsArgs, kinds: &[Kind], vs: bool) -> Result<LoadTls, String> {
        if !a.tls {
            return Ok(LoadTls::default());
        }
        match (vs, &a.tls_ca) {
            (true, Some(_)) => {
                return Err("--tls-ca is for a running server (--addr): --vs makes its own".into())
            }
            (false, None) => {
                return Err("--tls on a running server needs --tls-ca (its CA certificate)".into())
            }
            _ => {}
        }
        if vs && kinds.iter().any(|k| k.is_floor()) {
            return Err("the floor server has no TLS: leave it out of --servers with --tls".into());
        }
        if let Some(ca) = &a.tls_ca {
            let client = certs::client_config_for_ca(ca, a.tls_version)?;
            return Ok(LoadTls {
                client: Some(client),
                ..LoadTls::default()
            });
        }
        let certs = Certs::make(a.tls_key_type)?;
        eprintln!(
            "--tls: {} certificates, client offers {}",
            certs.key_type.name(),
            a.tls_version.name()
        );
        Ok(LoadTls {
            client: Some(certs.client_config(a.tls_version, Some(Tls12Resume::Tickets))?),
            server_args: certs.server_args(false),
            _certs: Some(certs),
        })
    }
}

pub(crate) fn run(a: &TlsArgs) -> Result<bool, String> {
    match &a.mode {
        Mode::Handshakes(h) => handshakes(h),
        Mode::Idle(i) => idle(i),
    }
}

/// What one handshake run counted.
#[derive(Clone, Copy, Debug, Default)]
struct HsOutcome {
    handshakes: u64,
    resumed: u64,
    seconds: f64,
    cpu: Duration,
}

impl HsOutcome {
    fn per_sec(&self) -> f64 {
        self.handshakes as f64 / self.seconds
    }
    fn cpu_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.handshakes.max(1) as f64
    }
    /// Handshakes per second of server CPU.
    fn per_core_sec(&self) -> f64 {
        self.handshakes as f64 / self.cpu.as_secs_f64().max(1e-9)
    }
}

fn handshakes(h: &HandshakeArgs) -> Result<bool, String> {
    let t = &h.tls;
    let bins = crate::binaries(&t.common)?;
    let kinds = crate::cache_kinds(&t.common)?;
    let certs = Certs::make(t.key_type)?;
    let mut servers = Vec::new();
    for &kind in &kinds {
        servers.push(Server::start_with(
            &bins,
            kind,
            64,
            t.common.threads,
            &certs.server_args(t.session_cache),
        )?);
    }
    let duration = Duration::from_secs_f64(h.duration.max(0.1));
    let warmup = Duration::from_secs_f64(h.warmup.max(0.0));
    let mut rows = Vec::new();
    for &kind in &h.kind {
        let resume = kind == HsKind::Resumed;
        let mut results: Vec<Vec<HsOutcome>> = vec![Vec::new(); servers.len()];
        for round in 0..h.rounds.max(1) {
            let mut order: Vec<usize> = (0..servers.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let s = &servers[i];
                // A client store of its own per run: one server's tickets
                // mean nothing to the other.
                let config =
                    certs.client_config(t.tls_version, resume.then_some(t.tls12_resumption))?;
                let o = handshake_run(s, &config, h.clients.max(1), warmup, duration)?;
                s.check_alive()?;
                eprintln!(
                    "round {} {:>9} {:?}: {:>8.0} handshakes/s  server cpu {:>7.1} us/handshake  {:>7.0} per core-s  resumed {:.1}%",
                    round + 1,
                    s.kind,
                    kind,
                    o.per_sec(),
                    o.cpu_us(),
                    o.per_core_sec(),
                    100.0 * o.resumed as f64 / o.handshakes.max(1) as f64
                );
                results[i].push(o);
            }
        }
        for (s, r) in servers.iter().zip(results) {
            rows.push(HsRow::of(s.kind, kind, &r));
        }
    }
    let header = format!(
        "{}, {} certificate, {} client thread(s), servers -t {}{}; median of {} round(s) of {:.0} s",
        t.tls_version.name(),
        certs.key_type.name(),
        h.clients,
        t.common.threads,
        match (t.session_cache, t.tls12_resumption) {
            (true, Tls12Resume::Ids) => ", -o ssl_session_cache, TLS 1.2 resumed by session ID only",
            (true, Tls12Resume::Tickets) => ", -o ssl_session_cache",
            (false, Tls12Resume::Ids) => ", TLS 1.2 resumed by session ID only",
            (false, Tls12Resume::Tickets) => "",
        },
        h.rounds.max(1),
        duration.as_secs_f64()
    );
    print_hs(&header, &rows, t.common.json);
    Ok(true)
}

/// Medians of one server's handshake runs of one kind.
struct HsRow {
    server: Kind,
    kind: HsKind,
    per_sec: f64,
    cpu_us: f64,
    per_core_sec: f64,
    resumed_pct: f64,
}

impl HsRow {
    fn of(server: Kind, kind: HsKind, runs: &[HsOutcome]) -> HsRow {
        let med = |f: fn(&HsOutcome) -> f64| {
            crate::median(runs.iter().map(f).collect()).unwrap_or(f64::NAN)
        };
        HsRow {
            server,
            kind,
            per_sec: med(HsOutcome::per_sec),
            cpu_us: med(HsOutcome::cpu_us),
            per_core_sec: med(HsOutcome::per_core_sec),
            resumed_pct: med(|o| 100.0 * o.resumed as f64 / o.handshakes.max(1) as f64),
        }
    }
}

fn print_hs(header: &str, rows: &[HsRow], json: bool) {
    // Ratios against memcached's row of the same kind.
    let base = |r: &HsRow| {
        rows.iter()
            .find(|b| b.kind == r.kind && b.server == Kind::Memcached)
            .map(|b| r.per_core_sec / b.per_core_sec)
    };
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "server": r.server.name(),
                    "handshake": format!("{:?}", r.kind).to_lowercase(),
                    "handshakes_per_sec": r.per_sec,
                    "server_cpu_us_per_handshake": r.cpu_us,
                    "handshakes_per_core_sec": r.per_core_sec,
                    "resumed_pct": r.resumed_pct,
                    "per_core_vs_memcached": base(r),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(out));
        return;
    }
    println!("{header}");
    println!(
        "| handshake | server    | handshakes/s | server CPU us/handshake | per core-s | vs memcached | resumed |"
    );
    println!(
        "|-----------|-----------|-------------:|------------------------:|-----------:|-------------:|--------:|"
    );
    for r in rows {
        println!(
            "| {:<9} | {:<9} | {:>12.0} | {:>23.1} | {:>10.0} | {:>12} | {:>6.1}% |",
            format!("{:?}", r.kind).to_lowercase(),
            r.server.name(),
            r.per_sec,
            r.cpu_us,
            r.per_core_sec,
            base(r).map_or("-".into(), |x| format!("{x:.2}x")),
            r.resumed_pct
        );
    }
}

/// Sets SO_LINGER to 0, so closing sends a reset and leaves no TIME_WAIT
/// (tens of thousands of connections would use up the ephemeral ports).
fn linger_zero(s: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket descriptor and a linger struct of the size
    // given.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// One connection: handshake, a request, its reply up to `end`; the
/// stream and session are returned open. Resumed or not.
fn open_one(
    addr: std::net::SocketAddr,
    config: &Arc<ClientConfig>,
    request: &[u8],
    end: &[u8],
) -> Result<(std::net::TcpStream, ClientConnection, bool), String> {
    let mut tcp =
        std::net::TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut conn = ClientConnection::new(config.clone(), certs::server_name())
        .map_err(|e| format!("TLS client: {e}"))?;
    {
        let mut s = rustls::Stream::new(&mut conn, &mut tcp);
        s.write_all(request)
            .map_err(|e| format!("TLS with {addr}: {e}"))?;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(end) {
            let n = s
                .read(&mut buf)
                .map_err(|e| format!("TLS with {addr}: {e}"))?;
            if n == 0 {
                return Err(format!("{addr} closed the connection"));
            }
            got.extend_from_slice(&buf[..n]);
        }
    }
    let resumed = conn.handshake_kind() == Some(HandshakeKind::Resumed);
    Ok((tcp, conn, resumed))
}

/// `clients` threads open connections to `server` one after another for
/// `warmup + duration`; the handshakes finished in the measured window
/// and the server's CPU time over it.
fn handshake_run(
    server: &Server,
    config: &Arc<ClientConfig>,
    clients: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<HsOutcome, String> {
    let addr = server.addr();
    let start = Instant::now();
    let (from, to) = (start + warmup, start + warmup + duration);
    let failed = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let config = config.clone();
            let failed = failed.clone();
            std::thread::spawn(move || -> Result<(u64, u64), String> {
                let (mut n, mut resumed) = (0, 0);
                while Instant::now() < to && !failed.load(Ordering::Relaxed) {
                    let r = open_one(addr, &config, b"version\r\n", b"\r\n");
                    let (tcp, _conn, res) =
                        r.inspect_err(|_| failed.store(true, Ordering::Relaxed))?;
                    linger_zero(&tcp);
                    let now = Instant::now();
                    if now >= from && now < to {
                        n += 1;
                        resumed += u64::from(res);
                    }
                }
                Ok((n, resumed))
            })
        })
        .collect();
    std::thread::sleep(from.saturating_duration_since(Instant::now()));
    let cpu0 = crate::load::cpu_time(server.pid)?;
    std::thread::sleep(to.saturating_duration_since(Instant::now()));
    let cpu1 = crate::load::cpu_time(server.pid)?;
    let mut out = HsOutcome {
        seconds: duration.as_secs_f64(),
        cpu: cpu1.saturating_sub(cpu0),
        ..HsOutcome::default()
    };
    for w in workers {
        let (n, r) = w
            .join()
            .map_err(|_| "a client thread panicked".to_string())??;
        out.handshakes += n;
        out.resumed += r;
    }
    Ok(out)
}

/// One idle measurement: RSS growth per connection.
#[derive(Clone, Copy, Debug)]
struct IdleOutcome {
    rss_before: u64,
    rss_after: u64,
    conns: usize,
}

impl IdleOutcome {
    fn per_conn(&self) -> f64 {
        self.rss_after.saturating_sub(self.rss_before) as f64 / self.conns.max(1) as f64
    }
}

fn idle(a: &IdleArgs) -> Result<bool, String> {
    let t = &a.tls;
    let bins = crate::binaries(&t.common)?;
    let kinds = crate::cache_kinds(&t.common)?;
    let certs = Certs::make(t.key_type)?;
    let config = certs.client_config(t.tls_version, None)?;
    let mut variants: Vec<(Kind, bool)> = kinds.iter().map(|&k| (k, true)).collect();
    if a.plain {
        variants.extend(kinds.iter().map(|&k| (k, false)));
    }
    let mut results: Vec<Vec<IdleOutcome>> = vec![Vec::new(); variants.len()];
    for round in 0..a.rounds.max(1) {
        let mut order: Vec<usize> = (0..variants.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (kind, tls) = variants[i];
            let mut args = vec!["-c".to_string(), (a.conns + 64).to_string()];
            if tls {
                args.extend(certs.server_args(t.session_cache));
            }
            let server = Server::start_with(&bins, kind, 64, t.common.threads, &args)?;
            let o = idle_run(&server, tls.then_some(&config), a.conns)?;
            eprintln!(
                "round {} {:>9} {}: RSS {:.1} -> {:.1} MiB over {} connections: {:.0} B per connection",
                round + 1,
                kind,
                if tls { "tls" } else { "plain" },
                crate::mib(o.rss_before),
                crate::mib(o.rss_after),
                o.conns,
                o.per_conn()
            );
            results[i].push(o);
        }
    }
    let rows: Vec<(Kind, bool, f64)> = variants
        .iter()
        .zip(&results)
        .map(|(&(k, tls), r)| {
            let per = crate::median(r.iter().map(IdleOutcome::per_conn).collect());
            (k, tls, per.unwrap_or(f64::NAN))
        })
        .collect();
    let base = |tls: bool| {
        rows.iter()
            .find(|r| r.0 == Kind::Memcached && r.1 == tls)
            .map(|r| r.2)
    };
    if t.common.json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|&(k, tls, per)| {
                serde_json::json!({
                    "server": k.name(),
                    "tls": tls,
                    "conns": a.conns,
                    "rss_bytes_per_conn": per,
                    "vs_memcached": base(tls).map(|b| per / b),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(out));
        return Ok(true);
    }
    println!(
        "{} idle connections after handshake + one get, {} ({} certificate), servers -t {}; median of {} round(s)",
        a.conns,
        t.tls_version.name(),
        certs.key_type.name(),
        t.common.threads,
        a.rounds.max(1)
    );
    println!("| server    | transport | RSS per idle connection | vs memcached |");
    println!("|-----------|-----------|------------------------:|-------------:|");
    for &(k, tls, per) in &rows {
        println!(
            "| {:<9} | {:<9} | {:>17.1} KiB | {:>12} |",
            k.name(),
            if tls { "TLS" } else { "plain" },
            per / 1024.0,
            base(tls).map_or("-".into(), |b| format!("{:.2}x", per / b))
        );
    }
    Ok(true)
}

/// Opens `n` connections to `server` (TLS when `tls`), each with its
/// handshake and one `get` of a stored key, keeps them idle and reads the
/// server's RSS growth.
fn idle_run(
    server: &Server,
    tls: Option<&Arc<ClientConfig>>,
    n: usize,
) -> Result<IdleOutcome, String> {
    let addr = server.addr();
    let mut get = Vec::new();
    encode::get(&mut get, b"get", [b"idle-key"]);
    let mut set = Vec::new();
    encode::set(&mut set, b"idle-key", 0, 0, &[b'v'; 64], false);
    // One connection first: the key is stored, the lazy allocations a
    // first connection makes are made.
    {
        let mut s = sock::connect_blocking(addr, tls)?;
        s.send(&set).map_err(|e| format!("set: {e}"))?;
        read_reply(&mut s, Expect::Line)?;
        s.send(&get).map_err(|e| format!("get: {e}"))?;
        read_reply(&mut s, Expect::Values)?;
    }
    std::thread::sleep(Duration::from_millis(500));
    let rss_before = server.rss_bytes()?;
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = sock::connect_blocking(addr, tls)?;
        s.send(&get).map_err(|e| format!("get: {e}"))?;
        read_reply(&mut s, Expect::Values)?;
        held.push(s);
    }
    // Let the workers go idle (and release what they release when idle).
    std::thread::sleep(Duration::from_secs(2));
    server.check_alive()?;
    let rss_after = server.rss_bytes()?;
    drop(held);
    Ok(IdleOutcome {
        rss_before,
        rss_after,
        conns: n,
    })
}

/// Reads one reply framed as `expect` says.
fn read_reply(s: &mut osmium_net::Client, expect: Expect) -> Result<(), String> {
    s.reply(expect)
        .map(|_| ())
        .map_err(|e| format!("reading: {e}"))
}
