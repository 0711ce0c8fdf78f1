//! The `osmium-proxy` command: nutcracker's command line for what a
//! memcached pool needs (`-c FILE`, `-t`, `-v`, `--version`), then the
//! event loop until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser;
use osmium_proxy::{Config, Proxy};

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
    /// Log level: 0 warnings, 1 info, 2+ debug (nutcracker's -v N).
    #[arg(short = 'v', long = "verbose", default_value_t = 0)]
    verbose: u8,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let level = match args.verbose {
        0 => "warn",
        1..=5 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = match Config::load(&args.conf) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "osmium-proxy: configuration file '{}' syntax is invalid",
                args.conf.display()
            );
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    if args.test_conf {
        println!(
            "osmium-proxy: configuration file '{}' syntax is ok",
            args.conf.display()
        );
        return ExitCode::SUCCESS;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("osmium-proxy: cannot handle signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let proxy = match Proxy::bind(config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("osmium-proxy: {e}");
            return ExitCode::FAILURE;
        }
    };
    match proxy.run(stop) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osmium-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}
