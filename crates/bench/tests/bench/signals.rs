//! Ctrl-C in the middle of a run: `osmium-bench load --vs` against genuine
//! memcached gets SIGINT once its server runs, and must leave no server
//! behind (every process it started is killed by the harness's
//! `kill_all_started`), exit with 128 + 2, and say how many it stopped.

use crate::common::memcached_bin;
use osmium_test_harness::{poll, signal, EXIT_TIMEOUT, READY_TIMEOUT};
use std::process::{Command, Stdio};

/// The processes whose parent is `pid` (field 4 of `/proc/*/stat`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

#[test]
fn sigint_in_the_middle_of_a_run_leaves_no_server_running() {
    let Some(memcached) = memcached_bin() else {
        return;
    };
    let mut bench = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args(["load", "--vs", "--servers", "memcached", "--memcached"])
        .arg(&memcached)
        .args(["--threads", "1", "--conns", "1", "--rounds", "1"])
        .args(["--duration", "600", "--warmup", "0.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run osmium-bench");
    let mut servers = Vec::new();
    poll::wait_until("osmium-bench to start memcached", READY_TIMEOUT, || {
        servers = children_of(bench.id());
        !servers.is_empty()
    });
    assert!(signal(bench.id(), libc::SIGINT), "SIGINT to osmium-bench");
    let mut status = None;
    poll::wait_until("osmium-bench to exit", EXIT_TIMEOUT, || {
        status = bench.try_wait().expect("wait for osmium-bench");
        status.is_some()
    });
    let mut said = String::new();
    std::io::Read::read_to_string(&mut bench.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(status.unwrap().code(), Some(130), "{said}");
    // 1 server, or 0 when the run, its connections cut, dropped (and so
    // killed) it first.
    assert!(said.contains("osmium-bench: signal 2, stopped "), "{said}");
    for pid in servers {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "server {pid} still runs: {said}"
        );
    }
}
