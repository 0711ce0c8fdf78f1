//! The `osmium-proxy` command: nutcracker 0.5.0's command line (`-c`,
//! `-t`, `-v`, `-o`, `-s`, `-a`, `-i`, `-p`, `-m`, `-D`, `-d`, `-V`),
//! then the event loop until SIGINT or SIGTERM; SIGHUP reloads the `-c`
//! file (see `proxy::reload`). `-t` also loads the certificates and keys
//! the pools' `tls:` names. `--admin-token-file` allows `reload <token>`
//! on the stats port (`admin`). SIGUSR2 upgrades the binary in place
//! (`osmium_proxy::upgrade`): the same process runs the file it was
//! started from again, its listeners and clients kept; a binary run as
//! `osmium-proxy --upgrade-check` answers the old one's check, and one
//! started by an upgrade's exec (`OSMIUM_UPGRADE_FD`) starts from the
//! state it is handed, or hands it back.
//!
//! `-d` starts the same binary again, detached (its own process group,
//! standard streams on /dev/null), and waits until that child has bound
//! its sockets or failed: the child is told by the environment variable
//! `OSMIUM_PROXY_START_FILE`, a file where it writes `ready` or why it
//! could not start.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use osmium_proxy::proxy::Ran;
use osmium_proxy::upgrade::carried::{close_state_fds, Carried};
use osmium_proxy::upgrade::{check, handover, History, EX_OSERR, REFUSE_ENV};
use osmium_proxy::{stats, Config, Proxy};
use osmium_upgrade::State;
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

/// `--upgrade-check` (the first argument; run by an old image's
/// upgrade): reads the command line to take over on stdin, checks it and
/// the files it names as a start would, answers one line.
fn answer_check() -> ExitCode {
    let code = osmium_upgrade::answer_check(
        osmium_proxy::upgrade::VERSION,
        &[osmium_upgrade::TAKES_CONNS, osmium_upgrade::TAKES_PROXY],
        |argv| {
            let args = Args::try_parse_from(argv).map_err(|e| e.to_string())?;
            if args.test_conf || args.describe_stats {
                return Err("a command line that starts no proxy".into());
            }
            load_files(&args).map(drop)
        },
    );
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The configuration and the files it names (TLS, replication secrets),
/// and the admin token: what a start reads.
fn load_files(args: &Args) -> Result<(Config, Option<osmium_proxy::admin::Token>), String> {
    let config = Config::load(&args.conf).map_err(|e| {
        format!(
            "configuration file '{}' syntax is invalid: {e}",
            args.conf.display()
        )
    })?;
    osmium_proxy::tls::check(&config)?;
    for pool in &config.pools {
        osmium_proxy::peer::load_secret(pool)?;
    }
    let token = match &args.admin_token_file {
        Some(path) => Some(osmium_proxy::admin::Token::load(path)?),
        None => None,
    };
    Ok((config, token))
}

/// What an upgrade's exec handed this image.
struct Handed {
    state: State,
    /// The state's memfd (None: a state this process kept after no
    /// image could be run).
    fd: Option<OwnedFd>,
    /// Set for the old image again: why the upgrade failed.
    failed: Option<String>,
}

/// A proxy started from an upgrade's state: its listeners taken, its
/// clients adopted, the state's socket fds closed.
fn start_from_state(args: &Args, state: &State) -> Result<Proxy, String> {
    let (config, token) = load_files(args)?;
    let mut carried = Carried::from_state(state);
    let mut proxy = Proxy::bind_carried(config, &args.stats_addr, args.stats_port, &mut carried)
        .map_err(|e| e.to_string())?;
    proxy.set_admin_token(token);
    let listeners = carried.taken();
    let adopted = proxy.adopt(carried.take_conns());
    close_state_fds(state);
    tracing::warn!(
        "upgrade: {listeners} of {} listeners taken over, {adopted} of {} clients adopted",
        state.listeners.len(),
        state.conns.len()
    );
    Ok(proxy)
}

/// The proxy an upgrade's state describes, in the new image (or the old
/// one again, `handed.failed`); a new image that cannot take it hands it
/// back to the old one (an exec: returns only if that failed).
fn resume(args: &Args, handed: Handed, refuse: bool) -> Result<Proxy, ExitCode> {
    let Handed { state, fd, failed } = handed;
    let from = state.origin.clone();
    let ours = osmium_proxy::upgrade::VERSION;
    if let Some(why) = failed {
        let history = History::from_origin(&from, false);
        tracing::warn!("upgrade failed: {why}; serving with osmium-proxy {ours}");
        return match start_from_state(args, &state) {
            Ok(mut proxy) => {
                proxy.restore(history, &state.counters);
                Ok(proxy)
            }
            Err(e) => {
                tracing::error!("upgrade failed: the old image cannot serve again: {e}");
                Err(ExitCode::from(EX_OSERR))
            }
        };
    }
    let taken = if refuse {
        Err(format!("{REFUSE_ENV} is set"))
    } else {
        start_from_state(args, &state)
    };
    match taken {
        Ok(mut proxy) => {
            proxy.restore(History::from_origin(&from, true), &state.counters);
            // SAFETY: the state names this fd as the old image's, kept
            // open across the exec; nothing in this image uses it.
            drop(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(state.old_exe) });
            tracing::warn!(
                "upgrade done: osmium-proxy {} -> osmium-proxy {ours}, pid {}",
                from.version,
                std::process::id()
            );
            Ok(proxy)
        }
        Err(why) => {
            tracing::warn!(
                "upgrade refused by the new image (osmium-proxy {ours}): {why}; \
                 handing back to osmium-proxy {}",
                from.version
            );
            let argv: Vec<OsString> = state.command_line.argv.clone();
            // SAFETY: the state names this fd as the old image's, kept
            // open across the exec and not closed in this image.
            let old_exe = unsafe { BorrowedFd::borrow_raw(state.old_exe) };
            let e = match &fd {
                Some(fd) => osmium_upgrade::exec_image(old_exe, &argv, fd.as_fd(), Some(&why)),
                None => std::io::Error::other("no state to hand back"),
            };
            tracing::error!("upgrade failed: the old image cannot be run again: {e}");
            Err(ExitCode::from(EX_OSERR))
        }
    }
}

fn main() -> ExitCode {
    // First, before any thread exists (it changes the environment): what
    // an upgrade's exec handed this image.
    let inherited = osmium_upgrade::take_env();
    let refuse = std::env::var_os(REFUSE_ENV).is_some();
    std::env::remove_var(REFUSE_ENV);
    if let Some(code) = generate_man() {
        return code;
    }
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == osmium_upgrade::CHECK_FLAG)
    {
        return answer_check();
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
    // A daemon's child reports its first start only.
    let start = match inherited {
        None => Start::from_env(),
        Some(_) => Start(None),
    };
    if let Err(e) = init_logging(&args) {
        return start.fail(&e);
    }
    check::note_exe();
    let handed = match inherited {
        None => None,
        Some(inherited) => match State::read(inherited.state.as_raw_fd()) {
            Ok(state) => Some(Handed {
                state,
                fd: Some(inherited.state),
                failed: inherited.failed,
            }),
            Err(e) => {
                // Nothing to hand back to: the fallback's fd is in the state.
                tracing::error!("upgrade failed: the hand-over state cannot be read: {e}");
                return ExitCode::from(EX_OSERR);
            }
        },
    };
    if let Some(handed) = handed {
        return serve(&args, Some(handed), refuse, &start);
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
    drop(config);
    serve(&args, None, refuse, &start)
}

/// Starts the proxy (afresh, or from an upgrade's state) and serves until
/// a stop, through the upgrades SIGUSR2 asks; the exit status.
fn serve(args: &Args, mut handed: Option<Handed>, refuse: bool, start: &Start) -> ExitCode {
    let stop = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    let usr2 = Arc::new(AtomicBool::new(false));
    let flags = [
        (signal_hook::consts::SIGINT, &stop),
        (signal_hook::consts::SIGTERM, &stop),
        (signal_hook::consts::SIGHUP, &hup),
        (signal_hook::consts::SIGUSR2, &usr2),
    ];
    for (sig, flag) in flags {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(flag)) {
            return start.fail(&format!("osmium-proxy: cannot handle signal {sig}: {e}"));
        }
    }
    // A reload reads the file again by the path given (relative to the
    // directory the proxy started in).
    let conf = std::env::current_dir()
        .map(|d| d.join(&args.conf))
        .unwrap_or_else(|_| args.conf.clone());
    let fresh = handed.is_none();
    loop {
        let mut proxy = match handed.take() {
            Some(h) => match resume(args, h, refuse) {
                Ok(p) => p,
                Err(code) => return code,
            },
            None => {
                let started = load_files(args).and_then(|(config, token)| {
                    let mut p = Proxy::bind(config, &args.stats_addr, args.stats_port)
                        .map_err(|e| e.to_string())?;
                    p.set_admin_token(token);
                    Ok(p)
                });
                match started {
                    Ok(p) => p,
                    Err(e) => return start.fail(&format!("osmium-proxy: {e}")),
                }
            }
        };
        proxy.reload_from(conf.clone(), Arc::clone(&hup));
        proxy.upgrade_on(Arc::clone(&usr2));
        // Blocked by the exec that started this image (a no-op otherwise):
        // the handlers are in place now.
        osmium_upgrade::image::unblock_signals();
        if let Some(path) = &args.pid_file {
            if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
                let msg = format!(
                    "osmium-proxy: cannot write pid file '{}': {e}",
                    path.display()
                );
                return start.fail(&msg);
            }
        }
        if fresh {
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
        }
        match proxy.run(Arc::clone(&stop)) {
            Ok(Ran::Stopped) => break,
            Ok(Ran::Upgrade(checked)) => {
                let (state, why) = handover::exec(proxy.hand_over(), *checked);
                // No image could be run: the proxy starts again here.
                handed = Some(Handed {
                    state,
                    fd: None,
                    failed: Some(why),
                });
            }
            Err(e) => {
                tracing::error!("{e}");
                eprintln!("osmium-proxy: {e}");
                if let Some(path) = &args.pid_file {
                    let _ = std::fs::remove_file(path);
                }
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(path) = &args.pid_file {
        let _ = std::fs::remove_file(path);
    }
    ExitCode::SUCCESS
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
