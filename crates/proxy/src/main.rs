//! The `osmium-proxy` command: nutcracker 0.5.0's command line (`-c`,
//! `-t`, `-v`, `-o`, `-s`, `-a`, `-i`, `-p`, `-m`, `-D`, `-d`, `-V`),
//! then the event loop until SIGINT or SIGTERM; SIGHUP reloads the `-c`
//! file (see `proxy::reload`). `-t` also loads the certificates and keys
//! the pools' `tls:` names. `--admin-token-file` allows `reload <token>`
//! on the stats port (`admin`).
//!
//! `-d` starts the same binary again, detached (its own process group,
//! standard streams on /dev/null), and waits until that child has bound
//! its sockets or failed: the child is told by the environment variable
//! `OSMIUM_PROXY_START_FILE`, a file where it writes `ready` or why it
//! could not start.

use std::fs::OpenOptions;
use std::io::{IsTerminal, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use osmium_proxy::{stats, Config, Proxy};
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// Where a daemon's child reports how its start went.
const START_FILE_ENV: &str = "OSMIUM_PROXY_START_FILE";
/// How long `-d` waits for the child to report.
const START_WAIT: Duration = Duration::from_secs(30);

/// A twemproxy (nutcracker) drop-in for memcached pools.
#[derive(Parser, Debug)]
#[command(name = "osmium-proxy", version, about)]
struct Args {
    /// The configuration file (nutcracker's YAML).
    #[arg(short = 'c', long = "conf-file", default_value = "conf/nutcracker.yml")]
    conf: PathBuf,
    /// Test the configuration for syntax errors and exit (0: valid).
    #[arg(short = 't', long = "test-conf")]
    test_conf: bool,
    /// Log level: 0 warnings, 1-5 info, 6+ debug (nutcracker's -v N).
    #[arg(short = 'v', long = "verbose", default_value_t = 0)]
    verbose: u8,
    /// Run in the background: the command returns once the proxy is
    /// listening (exit 0) or could not start (exit 1).
    #[arg(short = 'd', long = "daemonize")]
    daemonize: bool,
    /// Print the stats description and exit.
    #[arg(short = 'D', long = "describe-stats")]
    describe_stats: bool,
    /// Append the log to this file [default: stderr].
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// The stats port: one JSON document per connection (nutcracker's).
    #[arg(short = 's', long = "stats-port", default_value_t = 22222,
          value_parser = clap::value_parser!(u16).range(1..))]
    stats_port: u16,
    /// The address the stats port listens on.
    #[arg(short = 'a', long = "stats-addr", default_value = "0.0.0.0")]
    stats_addr: String,
    /// nutcracker's stats aggregation interval in ms: accepted, no effect
    /// (osmium-proxy's figures are current when the stats port is asked).
    #[arg(short = 'i', long = "stats-interval", default_value_t = 30000)]
    stats_interval: u64,
    /// Write the process id to this file at start; removed at a clean exit.
    #[arg(short = 'p', long = "pid-file", value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Allow `reload <token>` on the stats port, the token being this
    /// file's one line (mode 0600: readable by its owner only).
    #[arg(long = "admin-token-file", value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// nutcracker's mbuf chunk size (512 to 16777216): accepted, no effect.
    #[arg(short = 'm', long = "mbuf-size", default_value_t = 16384,
          value_parser = clap::value_parser!(u32).range(512..=16_777_216))]
    mbuf_size: u32,
}

/// Where a daemon's child reports its start (nothing otherwise).
struct Start(Option<PathBuf>);

impl Start {
    fn from_env() -> Start {
        Start(std::env::var_os(START_FILE_ENV).map(PathBuf::from))
    }

    fn report(&self, line: &str) {
        if let Some(path) = &self.0 {
            if let Ok(mut f) = OpenOptions::new().write(true).open(path) {
                let _ = f.write_all(format!("{line}\n").as_bytes());
            }
        }
    }

    /// Says why the start failed (stderr, and the parent of a daemon).
    fn fail(&self, msg: &str) -> ExitCode {
        eprintln!("{msg}");
        self.report(&format!("error: {msg}"));
        ExitCode::FAILURE
    }
}

/// `--generate-man DIR` (a packaging step, not in `-h`): writes
/// DIR/osmium-proxy.1 from the clap definition.
fn generate_man() -> Option<ExitCode> {
    let mut argv = std::env::args_os().skip(1);
    if argv.next()? != "--generate-man" {
        return None;
    }
    let dir = PathBuf::from(argv.next().unwrap_or_default());
    let path = dir.join("osmium-proxy.1");
    let cmd = <Args as clap::CommandFactory>::command();
    let written =
        std::fs::File::create(&path).and_then(|mut f| clap_mangen::Man::new(cmd).render(&mut f));
    Some(match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osmium-proxy: {}: {e}", path.display());
            ExitCode::FAILURE
        }
    })
}

fn main() -> ExitCode {
    if let Some(code) = generate_man() {
        return code;
    }
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            // Usage errors exit 1, as nutcracker's do.
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if args.describe_stats {
        print!("{}", stats::describe());
        return ExitCode::SUCCESS;
    }
    let start = Start::from_env();
    if let Err(e) = init_logging(&args) {
        return start.fail(&e);
    }
    let config = match Config::load(&args.conf) {
        Ok(c) => c,
        Err(e) => {
            let what = format!(
                "osmium-proxy: configuration file '{}' syntax is invalid",
                args.conf.display()
            );
            return start.fail(&format!("{what}\n{e}"));
        }
    };
    if args.test_conf {
        // The files `tls:` and `replication_secret:` name are read and
        // checked too.
        let files = osmium_proxy::tls::check(&config).and_then(|()| {
            config
                .pools
                .iter()
                .try_for_each(|p| osmium_proxy::peer::load_secret(p).map(drop))
        });
        if let Err(e) = files {
            return start.fail(&format!(
                "osmium-proxy: configuration file '{}' is invalid\n{e}",
                args.conf.display()
            ));
        }
        println!(
            "osmium-proxy: configuration file '{}' syntax is ok",
            args.conf.display()
        );
        return ExitCode::SUCCESS;
    }
    if args.daemonize && start.0.is_none() {
        return daemonize();
    }
    let admin_token = match &args.admin_token_file {
        Some(path) => match osmium_proxy::admin::Token::load(path) {
            Ok(t) => Some(t),
            Err(e) => return start.fail(&format!("osmium-proxy: {e}")),
        },
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    let flags = [
        (signal_hook::consts::SIGINT, &stop),
        (signal_hook::consts::SIGTERM, &stop),
        (signal_hook::consts::SIGHUP, &hup),
    ];
    for (sig, flag) in flags {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(flag)) {
            return start.fail(&format!("osmium-proxy: cannot handle signal {sig}: {e}"));
        }
    }
    let mut proxy = match Proxy::bind(config, &args.stats_addr, args.stats_port) {
        Ok(p) => p,
        Err(e) => return start.fail(&format!("osmium-proxy: {e}")),
    };
    // A reload reads the file again by the path given (relative to the
    // directory the proxy started in).
    let conf = std::env::current_dir()
        .map(|d| d.join(&args.conf))
        .unwrap_or_else(|_| args.conf.clone());
    proxy.reload_from(conf, hup);
    proxy.set_admin_token(admin_token);
    if let Some(path) = &args.pid_file {
        if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
            let msg = format!(
                "osmium-proxy: cannot write pid file '{}': {e}",
                path.display()
            );
            return start.fail(&msg);
        }
    }
    tracing::info!(
        "{} started on pid {}, stats on {}:{}",
        stats::VERSION,
        std::process::id(),
        args.stats_addr,
        args.stats_port
    );
    tracing::debug!(
        "accepted, no effect: stats interval {} ms (figures are current when asked), mbuf size {}",
        args.stats_interval,
        args.mbuf_size
    );
    start.report("ready");
    let result = proxy.run(stop);
    if let Some(path) = &args.pid_file {
        let _ = std::fs::remove_file(path);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("osmium-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// tracing to stderr, or appended to `-o FILE`.
fn init_logging(args: &Args) -> Result<(), String> {
    let level = match args.verbose {
        0 => "warn",
        1..=5 => "info",
        _ => "debug",
    };
    let (writer, ansi) = match &args.output {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    format!(
                        "osmium-proxy: cannot open log file '{}': {e}",
                        path.display()
                    )
                })?;
            (BoxMakeWriter::new(Mutex::new(file)), false)
        }
        // Colours only for a person reading a terminal, never in a file
        // or a journal.
        None => (
            BoxMakeWriter::new(std::io::stderr),
            std::io::stderr().is_terminal(),
        ),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(writer)
        .with_ansi(ansi)
        .init();
    Ok(())
}

/// `-d`: starts this binary again with the same arguments, detached, and
/// returns once it reported its start.
fn daemonize() -> ExitCode {
    let fail = |msg: String| {
        eprintln!("osmium-proxy: {msg}");
        ExitCode::FAILURE
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(format!("cannot find its own binary: {e}")),
    };
    let report = match start_file() {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot create a start file: {e}")),
    };
    let spawned = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(START_FILE_ENV, &report)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&report);
            return fail(format!("cannot start the daemon: {e}"));
        }
    };
    let begin = Instant::now();
    let code = loop {
        // A failed child reports, then exits: its report is whole then.
        if let Ok(Some(status)) = child.try_wait() {
            let said = std::fs::read_to_string(&report).unwrap_or_default();
            break match said.strip_prefix("error: ") {
                Some(why) => {
                    eprint!("{why}");
                    ExitCode::FAILURE
                }
                None => fail(format!("the daemon exited at start ({status})")),
            };
        }
        if std::fs::read_to_string(&report).is_ok_and(|s| s == "ready\n") {
            break ExitCode::SUCCESS;
        }
        if begin.elapsed() > START_WAIT {
            eprintln!(
                "osmium-proxy: the daemon (pid {}) has not reported its start in {} s; left running",
                child.id(),
                START_WAIT.as_secs()
            );
            break ExitCode::SUCCESS;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = std::fs::remove_file(&report);
    code
}

/// A new empty file for the child's start report.
fn start_file() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir();
    let mut last = None;
    for n in 0..100u32 {
        let path: PathBuf = dir.join(format!("osmium-proxy-start-{}-{n}", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(_) => return Ok(path),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no name")))
}
