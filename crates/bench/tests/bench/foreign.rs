//! `osmium-bench load --addr` into a server it did not start (genuine
//! memcached, started here by the harness on a free loopback port and
//! killed by PID): a
//! warning on stderr before anything is written, naming the keys and
//! their prefix, and every key written under that prefix. Standard input
//! is not a terminal here, so the run goes on after the warning.

use crate::common;
use common::memcached_bin;
use osmium_test_harness::{Osmium, Running};
use std::io::{Read, Write};
use std::process::{Command, Stdio};

/// Whether `server` stores `key`.
fn has(server: &Running, key: &str) -> bool {
    let mut s = server.connect();
    s.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(b"END\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        reply.extend_from_slice(&buf[..n]);
    }
    reply.starts_with(b"VALUE ")
}

/// Runs `osmium-bench` with standard input not a terminal; (stdout,
/// stderr) after checking it succeeded.
fn bench(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run osmium-bench");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "osmium-bench {args:?}: {stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

const SHORT: [&str; 6] = ["--duration", "0.3", "--warmup", "0", "--conns", "2"];

#[test]
fn load_into_a_server_it_did_not_start_warns_and_prefixes_every_key() {
    let Some(memcached) = memcached_bin() else {
        return;
    };
    let server = Osmium::new().bin(&memcached).start();
    let addr = server.addr().to_string();
    let mut args = vec![
        "load",
        "--addr",
        &addr,
        "--keys",
        "50",
        "--get-ratio",
        "0.5",
    ];
    args.extend(SHORT);
    let (_, stderr) = bench(&args);
    let warning = format!(
        "osmium-bench: warning: writing up to 50 keys (prefix `osmium-bench:`) into {addr}, \
         a server this tool did not start"
    );
    assert!(stderr.contains(&warning), "{stderr}");
    // The preload wrote every key, under the prefix only.
    assert!(has(&server, "osmium-bench:k000000000000000"));
    assert!(has(&server, "osmium-bench:k000000000000049"));
    assert!(!has(&server, "k000000000000000"));

    // A prefix of one's own.
    let mut args = vec![
        "load",
        "--addr",
        &addr,
        "--keys",
        "5",
        "--key-prefix",
        "mine:",
    ];
    args.extend(SHORT);
    let (_, stderr) = bench(&args);
    assert!(
        stderr.contains("writing up to 5 keys (prefix `mine:`)"),
        "{stderr}"
    );
    assert!(has(&server, "mine:k000000000000004"));
}

#[test]
fn a_run_that_only_reads_does_not_warn() {
    let Some(memcached) = memcached_bin() else {
        return;
    };
    let server = Osmium::new().bin(&memcached).start();
    let addr = server.addr().to_string();
    let mut args = vec![
        "load",
        "--addr",
        &addr,
        "--keys",
        "50",
        "--preload",
        "false",
    ];
    args.extend(SHORT);
    let (_, stderr) = bench(&args);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(!has(&server, "osmium-bench:k000000000000000"));
}
