//! osmium-tool: the operator's command line for osmium and memcached.
//! memcached-tool's verbs with its output formats (`verbs`), `hotkeys`,
//! `top`, a live view of one server, several, or the servers of a
//! nutcracker/osmium-proxy YAML (`top`, `sample`, `metrics`), with
//! `--once --json` for scripts, and `upgrade`, a local osmium's binary
//! upgraded in place and waited for (`upgrade`, `procfs`). Addresses are
//! `host[:port]` (TCP, port 11211 by default) or a unix socket path
//! (`conn`).

mod conn;
mod man;
mod metrics;
mod procfs;
mod sample;
mod top;
mod upgrade;
mod verbs;

use std::io::{self, Write};
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use clap::Parser;

const USAGE: &str = "\
Usage: osmium-tool <host[:port] | /path/to/socket> [mode]
       osmium-tool top [host[:port] | /path ...] [--pool FILE.yml [--pool-name NAME]]
                       [--interval SECS] [--once] [--json]
       osmium-tool upgrade <host[:port] | /path | PID> [--addr ADDR] [--timeout SECS]

       osmium-tool 10.0.0.5:11211 display           # shows slabs
       osmium-tool 10.0.0.5:11211                   # same.  (default is display)
       osmium-tool 10.0.0.5:11211 stats             # shows general stats
       osmium-tool 10.0.0.5:11211 settings          # shows settings stats
       osmium-tool 10.0.0.5:11211 sizes             # shows sizes stats
       osmium-tool 10.0.0.5:11211 dump [limit]      # dumps keys and values
       osmium-tool 10.0.0.5:11211 keys [-u] [limit] # dumps keys (-u: unescape special characters)
       osmium-tool 10.0.0.5:11211 hotkeys [limit]   # the hottest keys (osmium's stats hotkeys)
       osmium-tool top 10.0.0.5:11211 10.0.0.6:11211  # live view (q quits)
       osmium-tool top --pool nutcracker.yml --once --json  # one sample as JSON
       osmium-tool upgrade 127.0.0.1:11211          # the binary upgraded in place (SIGUSR2)
       osmium-tool upgrade 1234                     # the same, by PID (systemctl reload)

The mode may also come first (osmium-tool stats 10.0.0.5:11211).
";

const MODES: [&str; 7] = [
    "display", "stats", "settings", "sizes", "dump", "keys", "hotkeys",
];

/// `osmium-tool top`'s options.
#[derive(Parser, Debug)]
#[command(
    name = "osmium-tool top",
    about = "A live view of memcached/osmium servers"
)]
struct TopArgs {
    /// Servers: host[:port] (port 11211 by default) or a unix socket path.
    addrs: Vec<String>,
    /// Every server of a nutcracker / osmium-proxy YAML configuration.
    #[arg(long, value_name = "FILE.yml")]
    pool: Option<std::path::PathBuf>,
    /// With --pool: only this pool's servers (default: every pool's).
    #[arg(long, value_name = "NAME", requires = "pool")]
    pool_name: Option<String>,
    /// Seconds between polls (rates are over this interval).
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    interval: f64,
    /// Poll twice, one interval apart, print the result and exit.
    #[arg(long)]
    once: bool,
    /// With --once (implied): the result as JSON (schema in docs/tool.md).
    #[arg(long)]
    json: bool,
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("osmium-tool: {msg}");
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(code) = man::generate(&args) {
        return code;
    }
    match args.first().map(String::as_str) {
        None | Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            if args.is_empty() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("osmium-tool {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("upgrade") => upgrade::main(&args[1..]),
        Some("top") => {
            let top = TopArgs::parse_from(
                std::iter::once("osmium-tool top".to_string()).chain(args.iter().skip(1).cloned()),
            );
            run_top(top)
        }
        Some(first) => {
            // memcached-tool's order (addr mode ...) or mode first.
            let (addr, rest) = if MODES.contains(&first) && args.len() >= 2 {
                let mut rest = vec![first.to_string()];
                rest.extend(args[2..].iter().cloned());
                (args[1].clone(), rest)
            } else {
                (first.to_string(), args[1..].to_vec())
            };
            run_verb(&addr, &rest)
        }
    }
}

/// A positive `limit` argument.
fn limit(arg: Option<&String>) -> Result<Option<u64>, String> {
    match arg {
        None => Ok(None),
        Some(a) => match a.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err("ERROR: invalid limit (should be a positive number)".into()),
        },
    }
}

fn run_verb(addr: &str, rest: &[String]) -> ExitCode {
    let mode = rest.first().map_or("display", String::as_str);
    let args = rest.get(1..).unwrap_or(&[]);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let usage = || {
        eprint!("{USAGE}");
        ExitCode::FAILURE
    };
    let result = match mode {
        "display" | "stats" | "settings" | "sizes" if !args.is_empty() => return usage(),
        "display" => verbs::display(addr, &mut out),
        "stats" => verbs::table(addr, "", &mut out),
        "settings" => verbs::table(addr, "settings", &mut out),
        "sizes" => verbs::table(addr, "sizes", &mut out),
        "dump" | "hotkeys" if args.len() > 1 => return usage(),
        "dump" | "hotkeys" => match limit(args.first()) {
            Err(e) => {
                eprintln!("{e}\n");
                return usage();
            }
            Ok(l) if mode == "dump" => verbs::dump(addr, l, &mut out),
            Ok(l) => verbs::hotkeys(addr, l, &mut out),
        },
        "keys" => {
            let (unescape, args) = match args.first().map(String::as_str) {
                Some("-u") => (true, &args[1..]),
                _ => (false, args),
            };
            if args.len() > 1 {
                return usage();
            }
            match limit(args.first()) {
                Err(e) => {
                    eprintln!("{e}\n");
                    return usage();
                }
                Ok(l) => verbs::keys(addr, unescape, l, &mut out),
            }
        }
        _ => return usage(),
    };
    match result.and_then(|_| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => fail(format!(
            "Couldn't connect to {}: {e}",
            conn::normalize(addr)
        )),
        Err(e) => fail(format!("{}: {e}", conn::normalize(addr))),
    }
}

/// The servers of `--pool` (every pool's, or `name`'s), in file order.
fn pool_servers(path: &std::path::Path, name: Option<&str>) -> Result<Vec<String>, String> {
    let config = osmium_pool_config::Config::load(path)?;
    let pools: Vec<_> = config
        .pools
        .iter()
        .filter(|p| name.is_none_or(|n| p.name == n))
        .collect();
    if pools.is_empty() {
        return Err(format!(
            "{}: no pool named {}",
            path.display(),
            name.unwrap_or("?")
        ));
    }
    let mut addrs: Vec<String> = Vec::new();
    for p in pools {
        for s in &p.servers {
            let a = s.addr.to_string();
            if !addrs.contains(&a) {
                addrs.push(a);
            }
        }
    }
    Ok(addrs)
}

fn run_top(top: TopArgs) -> ExitCode {
    let mut addrs = top.addrs.clone();
    if let Some(path) = &top.pool {
        match pool_servers(path, top.pool_name.as_deref()) {
            Ok(a) => addrs.extend(a),
            Err(e) => return fail(e),
        }
    }
    if addrs.is_empty() {
        return fail("top: no server given (addresses or --pool FILE.yml)");
    }
    if !(top.interval.is_finite() && top.interval >= 0.05) {
        return fail("top: --interval must be at least 0.05 seconds");
    }
    let interval = Duration::from_secs_f64(top.interval);
    if top.once || top.json {
        let views = once(&addrs, interval);
        if top.json {
            let doc = sample::json(top.interval, &views);
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        } else {
            print!("{}", top::text(&views));
        }
        return ExitCode::SUCCESS;
    }
    let title = match (&top.pool, &top.pool_name) {
        (Some(p), Some(n)) => format!("{} ({n})", p.display()),
        (Some(p), None) => p.display().to_string(),
        _ => format!("{} server(s)", addrs.len()),
    };
    match top::run(addrs, interval, title) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format!("top: {e}")),
    }
}

/// Two polls of every server, `interval` apart, all servers at once.
fn once(addrs: &[String], interval: Duration) -> Vec<sample::View> {
    let poll_all = || -> Vec<sample::Snapshot> {
        thread::scope(|s| {
            let handles: Vec<_> = addrs
                .iter()
                .map(|a| s.spawn(move || sample::poll(a)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("poller thread"))
                .collect()
        })
    };
    let first = poll_all();
    thread::sleep(interval);
    let second = poll_all();
    addrs
        .iter()
        .zip(first.iter().zip(&second))
        .map(|(a, (b, n))| sample::View::new(a, Some(b), n))
        .collect()
}
