//! The command line: memcached's flags (short and long forms), parsed with
//! clap into [`Settings`]. Flags that have no meaning for osmium's engine
//! (slab tuning, LRU tuning) are accepted with a warning so that existing
//! service files keep working; flags for features that are not built yet are
//! refused with a clear message rather than silently ignored.

mod config_file;
pub(crate) mod hotkeys;
mod ignored;
pub(crate) mod live;
mod metrics;
pub(crate) mod tls;

use clap::{ArgAction, Parser};
use ignored::IGNORED_EXTENDED;
use osmium_store::{FlashConfig, FlashPath};
use tls::{ListenerTls, TlsSettings};

/// The memcached protocol level osmium speaks (`version` on the wire,
/// `STAT version`).
pub(crate) const VERSION: &str = "1.6.45";
/// osmium's own version (`-V`, `-h`, `STAT osmium_version`).
pub(crate) const OSMIUM_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Parser, Debug)]
#[command(
    name = "osmium",
    disable_help_flag = true,
    disable_version_flag = true,
    // As memcached (getopt): an option given twice takes its last value.
    args_override_self = true,
    about = "osmium: a memcached-compatible cache server"
)]
pub(crate) struct Cli {
    /// TCP port to listen on (default: 11211, 0 = off; -U alone sets it too)
    #[arg(short = 'p', long = "port")]
    pub port: Option<u16>,
    /// UDP port to listen on (default: 0, off)
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    pub udp_port: u16,
    /// UNIX socket to listen on (disables network support)
    #[arg(short = 's', long = "unix-socket")]
    pub unix_socket: Option<String>,
    /// access mask for UNIX socket, in octal (default: 700)
    #[arg(
        short = 'a',
        long = "unix-mask",
        default_value = "700",
        allow_hyphen_values = true
    )]
    pub unix_mask: String,
    /// enable ascii "shutdown" command
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
    /// interface to listen on (default: 127.0.0.1); comma separated or repeated, addr[:port]
    #[arg(short = 'l', long = "listen")]
    pub listen: Vec<String>,
    /// run as a daemon
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    /// maximize core file limit
    #[arg(short = 'r', long = "enable-coredumps")]
    pub coredumps: bool,
    /// assume identity of <username> (only when run as root)
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// item memory in megabytes (default: 64)
    #[arg(short = 'm', long = "memory-limit", default_value = "64")]
    pub memory_limit: String,
    /// return error on memory exhausted instead of evicting
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// max simultaneous connections (default: 1024)
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    pub conn_limit: usize,
    /// lock down all paged memory
    #[arg(short = 'k', long = "lock-memory")]
    pub lock_memory: bool,
    /// verbose (-v errors/warnings, -vv also client commands/responses)
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,
    /// print this help and exit
    #[arg(short = 'h', long = "help")]
    pub help: bool,
    /// print license and exit
    #[arg(short = 'i', long = "license")]
    pub license: bool,
    /// print version and exit
    #[arg(short = 'V', long = "version")]
    pub version: bool,
    /// save PID in <file> (with or without -d), written once the server
    /// listens, removed when it stops
    #[arg(short = 'P', long = "pidfile")]
    pub pidfile: Option<String>,
    /// chunk size growth factor (accepted; osmium has no slab classes)
    #[arg(short = 'f', long = "slab-growth-factor")]
    pub growth_factor: Option<f64>,
    /// min space used for key+value+flags (accepted; no slab classes)
    #[arg(short = 'n', long = "slab-min-size")]
    pub slab_min_size: Option<u32>,
    /// try to use large memory pages (accepted; not used yet)
    #[arg(short = 'L', long = "enable-largepages")]
    pub large_pages: bool,
    /// delimiter between key prefixes and IDs for prefix stats (accepted)
    #[arg(short = 'D')]
    pub prefix_delimiter: Option<String>,
    /// number of worker threads (default: 4)
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    pub threads: usize,
    /// maximum requests per event per connection (default: 20)
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20)]
    pub reqs_per_event: usize,
    /// disable use of CAS
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// set the backlog queue limit (default: 1024)
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    pub backlog: i32,
    /// protocol: ascii, binary or auto (default: auto; binary with -S, ascii with -Y)
    #[arg(short = 'B', long = "protocol")]
    pub protocol: Option<String>,
    /// max item size (default: 1m, min: 1k, max: 1024m)
    #[arg(short = 'I', long = "max-item-size")]
    pub max_item_size: Option<String>,
    /// turn on SASL authentication
    #[arg(short = 'S', long = "enable-sasl")]
    pub sasl: bool,
    /// SASL password file for -S: one user:password per line (default: $MEMCACHED_SASL_PWDB)
    #[arg(long = "sasl-pwdb", value_name = "FILE")]
    pub sasl_pwdb: Option<String>,
    /// disable flush_all command
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// disable stats cachedump and lru_crawler metadump
    #[arg(short = 'X', long = "disable-dumping")]
    pub disable_dumping: bool,
    /// disable watch commands
    #[arg(short = 'W', long = "disable-watch")]
    pub disable_watch: bool,
    /// ASCII protocol authentication file: one user:password per line (at most 8)
    #[arg(short = 'Y', long = "auth-file")]
    pub auth_file: Option<String>,
    /// mmap a file for item memory: the cache survives a restart (even after kill -9)
    #[arg(short = 'e', long = "memory-file")]
    pub memory_file: Option<String>,
    /// enable TLS
    #[arg(short = 'Z', long = "enable-ssl")]
    pub ssl: bool,
    /// comma separated list of extended options
    #[arg(short = 'o', long = "extended")]
    pub extended: Vec<String>,
    /// forward every client write to this server (HOST:PORT, repeatable)
    #[arg(long = "replicate-to", value_name = "HOST:PORT")]
    pub replicate_to: Vec<String>,
    /// async: writes are answered at once; sync: after every reachable
    /// target acknowledged them
    #[arg(
        long = "replication",
        value_name = "async|sync",
        default_value = "async"
    )]
    pub replication: String,
    /// seconds a follow link (the catch-up pull from a target) stays open
    /// once synced
    #[arg(long = "replica-follow-seconds", default_value_t = 60)]
    pub replica_follow_seconds: u64,
    /// the replication links' shared secret, the key of their Noise
    /// handshake: both ends of a link must hold the same (mode 600;
    /// required with --replicate-to unless -Z names the peers). At least
    /// 128 random bits: 32+ hex digits, 22+ base64 characters, or 16+
    /// raw bytes (each with 8 or more different symbols, 6 for hex);
    /// make one with --gen-secret FILE
    #[arg(long = "replication-secret", value_name = "FILE")]
    pub replication_secret: Option<String>,
    /// write a new replication secret (256 random bits as 64 hex digits,
    /// mode 600) to FILE, which must not exist, and exit
    #[arg(long = "gen-secret", value_name = "FILE")]
    pub gen_secret: Option<String>,
    /// read options from FILE (memcached.conf's format: one option per
    /// line, `# comments`, `logfile PATH`); later options win; SIGHUP
    /// reads it again and applies --replicate-to and --replication
    #[arg(long = "config-file", value_name = "FILE")]
    pub config_file: Option<String>,
    /// serve Prometheus/OpenMetrics metrics on http://HOST:PORT/metrics
    /// (off by default; also -o metrics_addr=HOST:PORT)
    #[arg(long = "metrics-addr", value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// also serve the hottest keys' names on http://HOST:PORT/hotkeys
    /// (`/metrics` never names keys); refused while -Y, -S or client
    /// certificates guard the cache port unless --metrics-token-file is given
    #[arg(long = "metrics-hotkeys")]
    pub metrics_hotkeys: bool,
    /// require `Authorization: Bearer <token>` on the metrics endpoint, the
    /// token read from FILE (readable by its owner only: mode 600)
    #[arg(long = "metrics-token-file", value_name = "FILE")]
    pub metrics_token_file: Option<String>,
}

/// The most `--replicate-to` targets.
pub(crate) const MAX_REPLICA_TARGETS: usize = 4;

/// Where to listen.
#[derive(Debug, Clone)]
pub(crate) struct ListenAddr {
    pub host: String,
    /// The TCP port: the `-l host:port` one, else `-p`.
    pub port: u16,
    /// `-l host:port` gave a port; it is then used for UDP too, as
    /// memcached does.
    pub explicit_port: bool,
    /// TLS on this listener (`-Z`, or the entry's `notls:`/`btls:`/`mtls:`
    /// prefix).
    pub tls: ListenerTls,
}

/// What holds item memory without `-e` (`-o item_memory`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ItemMemory {
    /// A memfd, handed over by a binary upgrade.
    #[default]
    Memfd,
    /// Private anonymous memory.
    Anonymous,
}

/// Validated settings the server runs with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// TCP port; 0 means no TCP listener.
    pub port: u16,
    /// UDP port (`-U`); 0 means no UDP.
    pub udp_port: u16,
    pub listen: Vec<ListenAddr>,
    /// The `-l` values as memcached keeps them (`settings.inter`: joined
    /// by commas, one already contained in them left out); None without
    /// `-l`. `stats settings` shows it; a failed listener names it.
    pub inter: Option<String>,
    /// `-s`: listen on this unix-domain socket instead of TCP and UDP.
    pub unix_socket: Option<String>,
    /// How many workers serve each UDP socket: every worker, or one when
    /// several `-l` interfaces are given (memcached's num_threads_per_udp).
    pub threads_per_udp: usize,
    pub memory_limit: usize,
    pub item_size_max: usize,
    pub evictions: bool,
    pub use_cas: bool,
    /// `-e`: item memory in this file, which outlives the process (a warm
    /// restart takes its cache over).
    pub memory_file: Option<String>,
    /// `-o item_memory=memfd|anonymous` (osmium's own): what holds item
    /// memory without `-e`: a memfd (the default), which a binary upgrade
    /// hands to the next image with the cache in it, or private anonymous
    /// memory, whose cache an upgrade does not keep.
    pub item_memory: ItemMemory,
    /// The flash tier (`-o ext_path=...` and the other `ext_*` options).
    pub flash: Option<FlashConfig>,
    pub flush_enabled: bool,
    pub shutdown_enabled: bool,
    pub max_connections: usize,
    pub threads: usize,
    pub reqs_per_event: usize,
    pub backlog: i32,
    pub verbose: u32,
    pub daemon: bool,
    pub pidfile: Option<String>,
    pub user: Option<String>,
    pub lock_memory: bool,
    pub coredumps: bool,
    pub idle_timeout: u32,
    pub maxconns_fast: bool,
    pub hashpower_init: u32,
    pub lru_crawler: bool,
    /// `-o compact_policy=greedy|cost_benefit`, `-o
    /// compact_threshold=<percent>`, `-o compact_reserve=<percent>`, `-o
    /// no_compact_background`: how the engine gets dead space back (see
    /// `osmium_store::CleanConfig`).
    pub clean: osmium_store::CleanConfig,
    /// `-o compression=off|cold|all` (osmium's own): which values are
    /// stored packed (`cold`, the default: items not hit, packed by the
    /// background cleaner once memory runs short, so none with
    /// `no_compact_background`; every setting reads packed items).
    pub compression: osmium_store::Compression,
    /// `-o compress_dicts=on|off` (osmium's own, default on): the pack pass
    /// trains zstd dictionaries from the cache's own values and packs
    /// small values with them (values packed with one are read either way).
    pub compress_dicts: bool,
    /// `-o thread_affinity=N` (osmium's own, after the ThreadAffinity
    /// memcached builds of seed 002): worker i runs only on CPU
    /// (N + i) mod the CPUs this process may use. None: no pinning.
    pub thread_affinity: Option<usize>,
    /// `-o idle_spin=<microseconds>` (osmium's own): how long at most a
    /// worker with nothing to do polls before it sleeps
    /// (`transport::idle_spin`); 0 never, the default. Polling buys a
    /// closed-loop client's latency with CPU: at open-loop rates a worker
    /// polls away every gap shorter than the budget, several times the
    /// CPU per request of sleeping (docs/compat.md says when to opt in,
    /// e.g. with 100).
    pub idle_spin_us: u32,
    pub binding_protocol: &'static str,
    /// -S: SASL authentication for the binary protocol.
    pub sasl: bool,
    /// The SASL password file (--sasl-pwdb, else $MEMCACHED_SASL_PWDB).
    pub sasl_pwdb: Option<String>,
    /// -Y: the text protocol's authentication file.
    pub auth_file: Option<String>,
    /// `-a`: permission bits of the unix socket file (memcached keeps the
    /// whole `strtol` result and reports it with `%o`).
    pub unix_mask: u32,
    /// -D: key prefix delimiter for `stats detail`; giving it enables detail.
    pub prefix_delimiter: u8,
    pub detail_enabled: bool,
    /// Not `-X`: `stats cachedump`, `stats detail` and the crawler dumps
    /// are allowed.
    pub dump_enabled: bool,
    /// `!-W`: log watchers (`watch`) allowed.
    pub watch_enabled: bool,
    /// `-o read_buf_mem_limit`, in bytes (0: no limit).
    pub read_buf_mem_limit: usize,
    /// `--replicate-to`: the replication targets, in order.
    pub replicate_to: Vec<String>,
    /// `--replication sync`.
    pub replication_sync: bool,
    /// `--replica-follow-seconds`.
    pub replica_follow_seconds: u64,
    /// `-Z` and the `-o ssl_*` options.
    pub tls: TlsSettings,
    /// `--replication-secret`: the file's path (`main` reads it).
    pub replication_secret: Option<String>,
    /// The config file's `logfile PATH`: stderr is appended there.
    pub logfile: Option<String>,
    /// `-o hotkeys_top`, `-o hotkeys_sample`.
    pub hotkeys: hotkeys::HotkeysSettings,
    /// `--metrics-addr` / `-o metrics_addr`: where `/metrics` listens.
    pub metrics_addr: Option<String>,
    /// `--metrics-hotkeys`: `/hotkeys` names the hottest keys.
    pub metrics_hotkeys: bool,
    /// `--metrics-token-file`: the bearer token's file (`main` reads it).
    pub metrics_token_file: Option<String>,
    /// The options as parsed (what a reload compares, `live`).
    pub options: live::Options,
    pub warnings: Vec<String>,
}

/// What the command line asks for.
pub(crate) enum Action {
    Run(Box<Settings>),
    /// Print this and exit 0 (-h, -V, -i).
    Print(String),
    /// `--gen-secret FILE`: write a new replication secret there, exit.
    GenSecret(String),
}

/// The longest `-o idle_spin` taken (microseconds).
const MAX_IDLE_SPIN_US: u32 = 10_000;

fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1usize << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// One of memcached's extstore options (`-o ext_*`), with its messages.
/// Honoured: ext_path (several), ext_page_size and ext_wbuf_size (MB),
/// ext_item_size, ext_recache_rate (0: nothing read from flash comes back
/// into RAM), ext_compact_under (free pages kept), ext_max_frag (pages
/// less full than this are compacted first), ext_drop_unread. Accepted
/// without effect (osmium's tier has no such knob: docs/flash.md): ext_threads,
/// ext_io_depth, ext_item_age, ext_low_ttl, ext_drop_under, ext_max_sleep.
fn extstore_option(f: &mut FlashConfig, name: &str, value: Option<&str>) -> Result<(), String> {
    let number = |v: Option<&str>| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("Missing {name} argument"))?;
        v.parse()
            .map_err(|_| format!("could not parse argument to {name}"))
    };
    match name {
        "ext_path" => {
            let usage = "must supply size to ext_path, ie: ext_path=/f/e:64m (m|g|t|p supported)";
            let v = value.ok_or("failed to parse ext_path argument")?;
            let mut parts = v.split(':');
            let path = parts.next().filter(|p| !p.is_empty()).ok_or(usage)?;
            let size = parts.next().filter(|s| s.len() >= 2).ok_or(usage)?;
            let (digits, unit) = size.split_at(size.len() - 1);
            let multiplier: u64 = match unit.to_ascii_lowercase().as_str() {
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                "p" => 1 << 50,
                _ => return Err(usage.into()),
            };
            let n: u64 = digits.parse().map_err(|_| usage.to_string())?;
            if let Some(bucket) = parts.next() {
                if ![
                    "compact",
                    "lowttl",
                    "chunked",
                    "default",
                    "coldcompact",
                    "old",
                ]
                .contains(&bucket)
                {
                    return Err(format!("Unknown extstore bucket: {bucket}"));
                }
            }
            f.paths.push(FlashPath {
                path: path.into(),
                size: n * multiplier,
            });
        }
        "ext_page_size" => f.page_size = number(value)? as usize * (1 << 20),
        "ext_wbuf_size" => f.wbuf_size = number(value)? as usize * (1 << 20),
        "ext_item_size" => f.item_size_min = number(value)? as usize,
        "ext_recache_rate" => f.recache_rate = number(value)?.min(u64::from(u32::MAX)) as u32,
        "ext_compact_under" => f.free_pages_min = number(value)? as usize,
        "ext_drop_unread" => f.drop_unread = true,
        "ext_threads" | "ext_io_depth" | "ext_item_age" | "ext_low_ttl" | "ext_drop_under"
        | "ext_max_sleep" => {
            number(value)?;
        }
        "ext_max_frag" => {
            let frag = value
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("could not parse argument to {name}"))?;
            f.max_frag_percent = (frag.clamp(0.0, 1.0) * 100.0).round() as u32;
        }
        n => return Err(format!("Illegal suboption \"{n}\"")),
    }
    Ok(())
}

/// The `-o` options, after `-h`'s list (and in the man page).
pub(crate) const EXTENDED_HELP: &str = "-o options honoured: idle_timeout=<secs>, read_buf_mem_limit=<megabytes>, hashpower=<n>, no_lru_crawler, lru_crawler, maxconns_fast, no_maxconns_fast, thread_affinity=<cpu>, idle_spin=<microseconds>, ext_path=<file>:<size>[m|g|t|p] (the flash tier; several allowed), ext_page_size=<MB>, ext_wbuf_size=<MB>, ext_item_size=<bytes>, ext_recache_rate=<n>, ext_compact_under=<pages>, ext_max_frag=<fraction>, ext_drop_unread, compact_policy=greedy|cost_benefit, compact_threshold=<percent dead>, compact_reserve=<percent>, no_compact_background, compression=off|cold|all (values stored packed: cold items (the default), every value at its write, or none; every setting reads packed items), compress_dicts=on|off (the pack pass trains zstd dictionaries from the cache's values and packs small values with them; on by default), hotkeys_top=<keys> (0: off), hotkeys_sample=adaptive|1/<N>, metrics_addr=<host:port>, replication_peers=<name>[:<name>...] (with -Z: the certificate SANs, DNS names or IP addresses, that make a replication peer), replication_ca=<file> (with -Z: a CA whose certificates make replication peers).\nOther memcached -o options are accepted with a warning.\n";

/// `-V`'s line, also the first of `-h`: osmium's version, then the
/// memcached protocol level it speaks.
pub(crate) fn version_line() -> String {
    format!("osmium {OSMIUM_VERSION} (memcached {VERSION} protocol)")
}

pub(crate) fn help_text() -> String {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    format!(
        "{}\n{}\n\n{EXTENDED_HELP}",
        version_line(),
        cmd.render_help()
    )
}

/// Parses and validates the command line.
pub(crate) fn parse<I, T>(args: I) -> Result<Action, String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let expanded = config_file::expand(args.into_iter().map(Into::into).collect())?;
    let logfile = &expanded.logfile;
    parse_expanded(expanded.args.clone(), logfile).map_err(|message| {
        // A value a config file gave is refused with its file and line.
        config_file::locate(message, &expanded, |args| {
            parse_expanded(args, logfile).err()
        })
    })
}

/// Parses and validates a command line whose config files were expanded.
fn parse_expanded(
    args: Vec<std::ffi::OsString>,
    logfile: &Option<String>,
) -> Result<Action, String> {
    let cli = Cli::try_parse_from(args).map_err(|e| e.to_string())?;
    let options = live::capture(&cli, logfile);
    if cli.help {
        return Ok(Action::Print(help_text()));
    }
    if cli.version {
        return Ok(Action::Print(format!("{}\n", version_line())));
    }
    if cli.license {
        return Ok(Action::Print(
            "osmium is distributed under the BSD 3-clause license, as memcached is.\n".into(),
        ));
    }
    if let Some(path) = cli.gen_secret {
        return Ok(Action::GenSecret(path));
    }
    let mut warnings = Vec::new();

    // memcached refuses UDP with either kind of authentication.
    if cli.sasl && cli.udp_port != 0 {
        return Err("ERROR: Cannot enable UDP while using binary SASL authentication.".into());
    }
    if cli.auth_file.is_some() && cli.udp_port != 0 {
        return Err("Cannot use UDP with ascii authentication enabled (-U 0 to disable)".into());
    }
    let mut binding_protocol = match cli.protocol.as_deref().unwrap_or("auto") {
        "auto" => "auto-negotiate",
        "ascii" => "ascii",
        "binary" => "binary",
        other => return Err(format!("Invalid value for binding protocol: {other}\n -- should be one of auto, binary, or ascii")),
    };
    // As memcached: SASL is binary-only and -Y is ascii-only; either one
    // picks its protocol unless -B was given (SASL is checked first, so
    // -S -Y without -B ends up ascii).
    let protocol_specified = cli.protocol.is_some();
    if cli.sasl {
        if !protocol_specified {
            binding_protocol = "binary";
        } else if binding_protocol != "binary" {
            return Err("ERROR: You cannot allow the ASCII protocol while using SASL.".into());
        }
    }
    if cli.auth_file.is_some() {
        if !protocol_specified {
            binding_protocol = "ascii";
        } else if binding_protocol != "ascii" {
            return Err("ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.".into());
        }
    }
    let sasl_pwdb = cli
        .sasl_pwdb
        .clone()
        .or_else(|| std::env::var("MEMCACHED_SASL_PWDB").ok());

    let memory_mb = parse_size(&cli.memory_limit)
        .ok_or_else(|| format!("-m: invalid memory limit '{}'", cli.memory_limit))?;
    // A bare number is megabytes; a suffixed one is already in bytes.
    let memory_limit = if cli.memory_limit.trim().chars().all(|c| c.is_ascii_digit()) {
        memory_mb
            .checked_mul(1 << 20)
            .ok_or("-m: memory limit too large")?
    } else {
        memory_mb
    };
    if memory_limit == 0 {
        return Err("-m: memory limit must be at least 1 megabyte".into());
    }
    let item_size_max = match &cli.max_item_size {
        None => 1 << 20,
        Some(s) => {
            let v = parse_size(s).ok_or_else(|| format!("-I: invalid item size '{s}'"))?;
            if v < 1024 {
                return Err("Item max size cannot be less than 1024 bytes.".into());
            }
            if v > 1 << 30 {
                return Err("Cannot set item size limit higher than 1 GB.".into());
            }
            if v > memory_limit / 2 {
                return Err("Cannot set item size limit higher than 1/2 of memory max.".into());
            }
            v
        }
    };
    if cli.threads == 0 {
        return Err("Number of threads must be greater than 0".into());
    }
    if cli.threads > 64 {
        warnings.push("WARNING: Setting a high number of worker threads is not recommended. Set this value to the number of cores in your machine or less.".into());
    }
    if cli.conn_limit == 0 {
        return Err("Number of connections must be greater than 0".into());
    }
    if cli.reqs_per_event == 0 {
        return Err("Number of requests per event must be greater than 0".into());
    }
    let unix_mask = strtol_octal(&cli.unix_mask);
    // memcached: `-U n` without `-p` moves the TCP port to n as well.
    let port = match cli.port {
        Some(p) => p,
        None if cli.udp_port != 0 => cli.udp_port,
        None => 11211,
    };
    if cli.ssl && port == 0 {
        return Err("ERROR: You cannot enable SSL without a TCP port.".into());
    }

    let mut listen = Vec::new();
    for spec in cli.listen.iter().flat_map(|l| l.split(',')) {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        let (tls, spec) = tls::listener_prefix(spec, cli.ssl)?;
        let (host, explicit) = split_host_port(spec)?;
        listen.push(ListenAddr {
            host,
            port: explicit.unwrap_or(port),
            explicit_port: explicit.is_some(),
            tls,
        });
    }
    let inter = cli
        .listen
        .iter()
        .fold(None::<String>, |inter, l| match inter {
            None => Some(l.clone()),
            Some(i) if i.contains(l.as_str()) => Some(i),
            Some(i) => Some(format!("{i},{l}")),
        });
    let threads_per_udp = if listen.len() > 1 { 1 } else { cli.threads };
    if listen.is_empty() {
        listen.push(ListenAddr {
            host: "127.0.0.1".into(),
            port,
            explicit_port: false,
            tls: if cli.ssl {
                ListenerTls::Default
            } else {
                ListenerTls::Off
            },
        });
    }

    let mut idle_timeout = 0;
    let mut maxconns_fast = true;
    let mut hashpower_init = 0;
    let mut lru_crawler = true;
    let mut thread_affinity = None;
    let mut idle_spin_us = None;
    let mut read_buf_mem_limit = 0usize;
    let mut metrics_addr = match cli.metrics_addr.as_deref() {
        Some(a) => Some(metrics::metrics_addr(Some(a))?),
        None => None,
    };
    let mut flash = FlashConfig::default();
    let mut clean = osmium_store::CleanConfig::default();
    let mut compression = osmium_store::Compression::default();
    let mut compress_dicts = true;
    let mut item_memory = ItemMemory::default();
    let mut hot = hotkeys::HotkeysSettings::default();
    let mut tls = TlsSettings {
        enabled: cli.ssl,
        ..TlsSettings::default()
    };
    for opt in cli.extended.iter().flat_map(|o| o.split(',')) {
        let opt = opt.trim();
        if opt.is_empty() {
            continue;
        }
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        let number = |v: Option<&str>| -> Result<u32, String> {
            v.and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("-o {name}: needs a numeric value"))
        };
        match name {
            "idle_timeout" => idle_timeout = number(value)?,
            "hashpower" => {
                hashpower_init = number(value)?;
                if !(12..=64).contains(&hashpower_init) {
                    return Err("Initial hashtable multiplier of 12 is too low".into());
                }
            }
            "thread_affinity" => thread_affinity = Some(number(value)? as usize),
            "idle_spin" => idle_spin_us = Some(number(value)?.min(MAX_IDLE_SPIN_US)),
            "read_buf_mem_limit" => {
                let mb = value
                    .and_then(|v| v.parse::<u32>().ok())
                    .ok_or("could not parse argument to read_buf_mem_limit")?;
                read_buf_mem_limit = mb as usize * (1 << 20);
            }
            "compact_policy" => {
                clean.policy = match value {
                    Some("greedy") => osmium_store::CleanPolicy::Greedy,
                    Some("cost_benefit") => osmium_store::CleanPolicy::CostBenefit,
                    _ => return Err("-o compact_policy: greedy or cost_benefit".into()),
                }
            }
            "compact_threshold" => {
                clean.threshold_percent = number(value)?;
                if clean.threshold_percent > 100 {
                    return Err("-o compact_threshold: a percent, 0 to 100".into());
                }
            }
            "compact_reserve" => {
                clean.reserve_percent = number(value)?;
                if clean.reserve_percent > 50 {
                    return Err("-o compact_reserve: a percent, 0 to 50".into());
                }
            }
            "compression" => {
                compression = match value {
                    Some("off") => osmium_store::Compression::Off,
                    Some("cold") => osmium_store::Compression::Cold,
                    Some("all") => osmium_store::Compression::All,
                    _ => return Err("-o compression: off, cold or all".into()),
                }
            }
            "compress_dicts" => {
                compress_dicts = match value {
                    Some("on") => true,
                    Some("off") => false,
                    _ => return Err("-o compress_dicts: on or off".into()),
                }
            }
            "item_memory" => {
                item_memory = match value {
                    Some("memfd") => ItemMemory::Memfd,
                    Some("anonymous") => ItemMemory::Anonymous,
                    _ => return Err("-o item_memory: memfd or anonymous".into()),
                }
            }
            "metrics_addr" => metrics_addr = Some(metrics::metrics_addr(value)?),
            "no_compact_background" => clean.background = false,
            "no_lru_crawler" => lru_crawler = false,
            "lru_crawler" => lru_crawler = true,
            "maxconns_fast" => maxconns_fast = true,
            "no_maxconns_fast" => maxconns_fast = false,
            n if n.starts_with("ext_") => extstore_option(&mut flash, n, value)?,
            n if n.starts_with("hotkeys_") && hot.option(n, value)? => {}
            n if (n.starts_with("ssl_") || n.starts_with("replication_"))
                && tls.option(n, value).map_err(|e| e.message)? => {}
            n if IGNORED_EXTENDED.contains(&n) => {
                warnings.push(format!("-o {n}: accepted but has no effect in osmium"))
            }
            n => return Err(format!("Illegal suboption \"{n}\"")),
        }
    }
    let flash = (!flash.paths.is_empty()).then_some(flash);
    if cli.growth_factor.is_some() || cli.slab_min_size.is_some() {
        warnings.push("-f/-n: osmium has no slab classes; slab sizing flags have no effect".into());
    }
    if cli.large_pages {
        warnings.push("-L: large pages are not used yet; flag has no effect".into());
    }
    let (prefix_delimiter, detail_enabled) = match &cli.prefix_delimiter {
        Some(d) if d.len() == 1 => (d.as_bytes()[0], true),
        Some(_) => return Err("-D takes a single character".into()),
        None => (b':', false),
    };

    let replication_sync = match cli.replication.as_str() {
        "async" => false,
        "sync" => true,
        other => return Err(format!("--replication must be async or sync, not {other}")),
    };
    for t in &cli.replicate_to {
        check_target(t)?;
    }
    if cli.replicate_to.len() > MAX_REPLICA_TARGETS {
        return Err(format!(
            "at most {} --replicate-to targets",
            MAX_REPLICA_TARGETS
        ));
    }
    // How replication's links authenticate both ends (settings/tls.rs).
    let modes: Vec<ListenerTls> = listen.iter().map(|l| l.tls).collect();
    let replicates = !cli.replicate_to.is_empty();
    let secret = cli.replication_secret.is_some();
    warnings.extend(tls::replication_rule(&tls, &modes, replicates, secret)?);
    // Key names on the metrics endpoint only where they leak nothing.
    let guard = metrics::cache_port_guard(cli.sasl, cli.auth_file.is_some(), &tls, &modes);
    metrics::check_endpoint(
        metrics_addr.is_some(),
        cli.metrics_hotkeys,
        cli.metrics_token_file.is_some(),
        guard,
    )?;

    Ok(Action::Run(Box::new(Settings {
        port,
        udp_port: cli.udp_port,
        listen,
        inter,
        unix_socket: cli.unix_socket,
        threads_per_udp,
        memory_limit,
        item_size_max,
        evictions: !cli.disable_evictions,
        memory_file: cli.memory_file.clone(),
        item_memory,
        flash,
        use_cas: !cli.disable_cas,
        flush_enabled: !cli.disable_flush_all,
        shutdown_enabled: cli.enable_shutdown,
        max_connections: cli.conn_limit,
        threads: cli.threads,
        reqs_per_event: cli.reqs_per_event,
        backlog: cli.backlog,
        verbose: u32::from(cli.verbose),
        daemon: cli.daemon,
        pidfile: cli.pidfile,
        user: cli.user,
        lock_memory: cli.lock_memory,
        coredumps: cli.coredumps,
        idle_timeout,
        maxconns_fast,
        hashpower_init,
        lru_crawler,
        clean,
        compression,
        compress_dicts,
        thread_affinity,
        idle_spin_us: idle_spin_us.unwrap_or(0),
        binding_protocol,
        sasl: cli.sasl,
        sasl_pwdb,
        auth_file: cli.auth_file,
        unix_mask,
        prefix_delimiter,
        detail_enabled,
        dump_enabled: !cli.disable_dumping,
        watch_enabled: !cli.disable_watch,
        read_buf_mem_limit,
        replicate_to: cli.replicate_to,
        replication_sync,
        replica_follow_seconds: cli.replica_follow_seconds,
        tls,
        replication_secret: cli.replication_secret,
        logfile: logfile.clone(),
        hotkeys: hot,
        metrics_addr,
        metrics_hotkeys: cli.metrics_hotkeys,
        metrics_token_file: cli.metrics_token_file,
        options,
        warnings,
    })))
}

/// A `--replicate-to` address: `HOST:PORT`.
pub(crate) fn check_target(t: &str) -> Result<(), String> {
    match split_host_port(t).ok().and_then(|(_, p)| p) {
        Some(_) => Ok(()),
        None => Err(format!("--replicate-to needs HOST:PORT, not {t}")),
    }
}

/// memcached's exit code for a refusal of its command line: `EX_USAGE`
/// (64) for most, 1 for an invalid `ssl_verify_mode` or `ssl_min_version`
/// (memcached returns from `main`) and for an option it does not know
/// (in a config file here), `EX_OSERR` (71) for a TLS listener
/// prefix without `-Z` (memcached fails to open that listener).
pub(crate) fn exit_code(message: &str) -> i32 {
    if message.starts_with("Invalid ssl_") || message.ends_with("Illegal argument \"?\"") {
        1
    } else if message.contains("failed to listen on one of interface(s)") {
        71
    } else {
        64
    }
}

/// Splits `-l` forms: `[v6]:port`, `v4:port`, `host`, or a bare v6
/// address. The port is None when the spec gives none.
fn split_host_port(spec: &str) -> Result<(String, Option<u16>), String> {
    if let Some(rest) = spec.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("-l: bad address '{spec}'"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().map_err(|_| format!("-l: bad port in '{spec}'"))?),
            None => None,
        };
        return Ok((host.to_string(), port));
    }
    if spec.matches(':').count() == 1 {
        let (host, port) = spec.split_once(':').expect("one colon");
        let port = port
            .parse()
            .map_err(|_| format!("-l: bad port in '{spec}'"))?;
        return Ok((host.to_string(), Some(port)));
    }
    Ok((spec.to_string(), None))
}

/// memcached reads `-a` with `strtol(arg, NULL, 8)` into an int: leading
/// blanks and a sign are allowed, parsing stops at the first non-octal
/// digit, and garbage is 0. The result keeps the int's bits.
fn strtol_octal(arg: &str) -> u32 {
    let s = arg.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut value: i64 = 0;
    let mut overflow = false;
    for b in digits.bytes() {
        if !(b'0'..=b'7').contains(&b) {
            break;
        }
        match value
            .checked_mul(8)
            .and_then(|v| v.checked_add(i64::from(b - b'0')))
        {
            Some(v) => value = v,
            None => overflow = true,
        }
    }
    // strtol saturates at LONG_MIN/LONG_MAX; the int keeps the low 32 bits.
    let value = match (overflow, negative) {
        (true, false) => i64::MAX,
        (true, true) => i64::MIN,
        (false, true) => -value,
        (false, false) => value,
    };
    value as u32
}

#[cfg(test)]
mod tests;
