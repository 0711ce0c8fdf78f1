//! The floor server over real sockets: `osmium-bench floor` started on a
//! free loopback port, answering text and binary gets, pipelined or not;
//! and its io_uring variant (`floor --io-uring`), whose replies must be
//! byte for byte those of the epoll floor.

use crate::common;
use common::bench;
use osmium_test_harness::{Program, Running, ServerProcess};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

/// The floor server with values of `value_size` bytes on a free loopback
/// port (the harness proves it listens there, and kills it by PID when
/// dropped).
fn start_floor(value_size: usize) -> Running {
    floor_with(value_size, &[])
}

/// [`start_floor`] with `extra` arguments (e.g. `--io-uring`).
fn floor_with(value_size: usize, extra: &[&str]) -> Running {
    let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
    Program::new(
        "osmium-bench floor",
        env!("CARGO_BIN_EXE_osmium-bench"),
        move |port| {
            let mut args = vec!["floor".to_string(), "--port".into(), port.to_string()];
            args.extend(["--value-size".to_string(), value_size.to_string()]);
            args.extend(extra.iter().cloned());
            args
        },
    )
    .start()
}

/// A connection to `floor` with a 10 s read timeout.
fn connect(floor: &ServerProcess) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", floor.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn read_exactly(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).unwrap();
    buf
}

#[test]
fn answers_text_gets_one_by_one_and_pipelined() {
    let floor = start_floor(64);
    let mut s = connect(&floor);
    let value = "x".repeat(64);
    let one = format!("VALUE key:1 0 64\r\n{value}\r\nEND\r\n");
    s.write_all(b"get key:1\r\n").unwrap();
    assert_eq!(read_exactly(&mut s, one.len()), one.as_bytes());
    // 16 gets in one write, and a set with its data block.
    let mut batch = String::new();
    let mut expect = String::new();
    for i in 0..16 {
        batch.push_str(&format!("get k{i}\r\n"));
        expect.push_str(&format!("VALUE k{i} 0 64\r\n{value}\r\nEND\r\n"));
    }
    batch.push_str("set k 0 0 5\r\nhello\r\nversion\r\n");
    expect.push_str("STORED\r\nVERSION floor\r\n");
    s.write_all(batch.as_bytes()).unwrap();
    assert_eq!(
        String::from_utf8(read_exactly(&mut s, expect.len())).unwrap(),
        expect
    );
}

#[test]
fn answers_meta_gets_sets_and_noops() {
    let floor = start_floor(4);
    let mut s = connect(&floor);
    s.write_all(b"mg key:1 v\r\nms key:2 3 T0\r\nabc\r\nmg key:3\r\nmn\r\n")
        .unwrap();
    let expect = b"VA 4\r\nxxxx\r\nHD\r\nHD\r\nMN\r\n";
    assert_eq!(read_exactly(&mut s, expect.len()), expect);
}

#[test]
fn answers_binary_gets() {
    let floor = start_floor(8);
    let mut s = connect(&floor);
    // GETK "abc", opaque 7.
    let mut req = vec![0x80, 0x0c, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 7];
    req.extend_from_slice(&[0; 8]);
    req.extend_from_slice(b"abc");
    s.write_all(&req).unwrap();
    let resp = read_exactly(&mut s, 24 + 4 + 3 + 8);
    assert_eq!(resp[0], 0x81);
    assert_eq!(resp[1], 0x0c);
    assert_eq!(&resp[6..8], &[0, 0], "status");
    assert_eq!(&resp[12..16], &[0, 0, 0, 7], "opaque");
    assert_eq!(&resp[24..], b"\0\0\0\0abcxxxxxxxx");
}

/// A binary request: `opcode`, `key`, `extras` and `value` as the body,
/// opaque 7.
fn binary(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut req = vec![0x80, opcode];
    req.extend_from_slice(&(key.len() as u16).to_be_bytes());
    req.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    req.extend_from_slice(&(body as u32).to_be_bytes());
    req.extend_from_slice(&[0, 0, 0, 7]);
    req.extend_from_slice(&[0; 8]);
    req.extend_from_slice(extras);
    req.extend_from_slice(key);
    req.extend_from_slice(value);
    req
}

/// Sends `chunks` one write at a time (a short pause between them, so that
/// a request split over two of them arrives in two reads), then shuts the
/// write side and returns every byte the server sent until it closed.
fn exchange(floor: &ServerProcess, chunks: &[Vec<u8>]) -> Vec<u8> {
    let mut s = connect(floor);
    for chunk in chunks {
        s.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).unwrap();
    reply
}

#[test]
fn io_uring_floor_answers_byte_for_byte_as_the_epoll_floor() {
    for variant in [&["--io-uring"][..], &["--io-uring", "--recv-multishot"]] {
        same_replies(&start_floor(32), &floor_with(32, variant));
    }
}

/// `uring` answers as `epoll` does: every kind of request, split and
/// pipelined, replies larger than a socket buffer, many connections.
fn same_replies(epoll: &ServerProcess, uring: &ServerProcess) {
    let mut pipelined_text = Vec::new();
    for i in 0..64 {
        pipelined_text.extend_from_slice(format!("get k{i} k{i}b\r\n").as_bytes());
    }
    let mut pipelined_binary = Vec::new();
    for i in 0..64u8 {
        pipelined_binary.extend(binary(0x0c, &[b'k', i], &[], &[]));
        pipelined_binary.extend(binary(0x09, b"q", &[], &[]));
    }
    pipelined_binary.extend(binary(0x0a, b"", &[], &[]));
    let set = binary(0x01, b"key", &[0; 8], b"value");
    let cases: Vec<Vec<Vec<u8>>> = vec![
        // Text: one get, gets, a set, noreply, version, an unknown command.
        vec![b"get key:1\r\n".to_vec()],
        vec![b"gets a b c\r\nset k 0 0 5\r\nhello\r\nset k 0 0 1 noreply\r\nx\r\nversion\r\nbogus\r\n".to_vec()],
        // A get and a set whose data block are split over two writes.
        vec![b"get ke".to_vec(), b"y\r\nset k 0 0 5\r\nhe".to_vec(), b"llo\r\nget z\r\n".to_vec()],
        // Meta.
        vec![b"mg key:1 v\r\nms key:2 3 T0\r\nabc\r\nmg key:3\r\nmg q q\r\nms e 2 q\r\nxy\r\nmn\r\n".to_vec()],
        // Binary: GETK, GET, GETQ, GETKQ, SET, SETQ, NOOP, VERSION, unknown.
        vec![[
            binary(0x0c, b"abc", &[], &[]),
            binary(0x00, b"abc", &[], &[]),
            binary(0x09, b"q", &[], &[]),
            binary(0x0d, b"kq", &[], &[]),
            set.clone(),
            binary(0x11, b"key", &[0; 8], b"v"),
            binary(0x0a, b"", &[], &[]),
            binary(0x0b, b"", &[], &[]),
            binary(0x42, b"", &[], &[]),
        ]
        .concat()],
        // A binary set split inside its header, then inside its body.
        vec![set[..10].to_vec(), set[10..30].to_vec(), set[30..].to_vec()],
        // Pipelined: 128 text gets in one write, 129 binary requests.
        vec![pipelined_text],
        vec![pipelined_binary],
    ];
    for case in &cases {
        let want = exchange(epoll, case);
        assert!(!want.is_empty(), "{case:?}");
        assert_eq!(exchange(uring, case), want, "{case:?}");
    }
    // A reply larger than a socket buffer (partial sends): 20,000 gets of a
    // 32 B value in one write, read back only once all are sent.
    let mut many = Vec::new();
    for _ in 0..20_000 {
        many.extend_from_slice(b"get key\r\n");
    }
    let want = exchange(epoll, std::slice::from_ref(&many));
    assert_eq!(want.len(), 20_000 * (b"VALUE key 0 32\r\n".len() + 34 + 5));
    assert_eq!(
        want.len(),
        20_000 * (b"VALUE key 0 32\r\n".len() + 34 + 5),
        "epoll floor reply"
    );
    // Many connections at once, each answered on its own.
    let mut socks: Vec<TcpStream> = (0..50).map(|_| connect(uring)).collect();
    for (i, s) in socks.iter_mut().enumerate() {
        s.write_all(format!("get c{i}\r\n").as_bytes()).unwrap();
    }
    for (i, s) in socks.iter_mut().enumerate() {
        let one = format!("VALUE c{i} 0 32\r\n{}\r\nEND\r\n", "x".repeat(32));
        assert_eq!(read_exactly(s, one.len()), one.as_bytes());
    }
}

#[test]
fn load_vs_runs_both_floors() {
    let text = bench(&[
        "load",
        "--vs",
        "--servers",
        "floor,floor-uring,floor-uring-ms",
        "--threads",
        "1",
        "--json",
        "--rounds",
        "1",
        "--duration",
        "0.5",
        "--warmup",
        "0.2",
        "--depth",
        "4",
    ]);
    let rows: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{text}");
    for (row, name) in rows.iter().zip(["floor", "floor-uring", "floor-uring-ms"]) {
        assert_eq!(row["server"], name);
        assert!(row["ops_per_sec"].as_f64().unwrap() > 0.0, "{row}");
        let cpu = row["cpu_us_per_req"].as_f64().unwrap();
        assert!(cpu > 0.0 && cpu < 1000.0, "{row}");
    }
}

#[test]
fn load_measures_the_floor_server() {
    // `load --vs` with the floor server alone: starts it, runs a short
    // closed loop (4 connections, 4 deep, text, binary and meta), and reports
    // throughput and CPU time per request from /proc.
    for protocol in ["text", "binary", "meta"] {
        let text = bench(&[
            "load",
            "--vs",
            "--servers",
            "floor",
            "--json",
            "--rounds",
            "1",
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
            "--conns",
            "4",
            "--depth",
            "4",
            "--protocol",
            protocol,
        ]);
        let rows: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        let row = &rows[0];
        assert_eq!(row["server"], "floor");
        assert!(row["ops_per_sec"].as_f64().unwrap() > 1000.0, "{row}");
        let cpu = row["cpu_us_per_req"].as_f64().unwrap();
        assert!(cpu > 0.0 && cpu < 1000.0, "{row}");
        assert!(row["p50_us"].as_f64().unwrap() > 0.0, "{row}");
    }
}

#[test]
fn open_loop_and_sla_run_against_the_floor_server() {
    // An open-loop run at a fixed rate reports about that rate; an SLA
    // search (few short steps, a loose bound so that a loaded test machine
    // still passes some rate) prints random, hot and overall rates.
    let floor = start_floor(64);
    let addr = format!("127.0.0.1:{}", floor.port());
    let pid = floor.pid().to_string();
    let text = bench(&[
        "load",
        "--addr",
        &addr,
        "--pid",
        &pid,
        "--preload",
        "false",
        "--rate",
        "2000",
        "--duration",
        "0.5",
        "--warmup",
        "0.2",
        "--dist",
        "zipf:0.99",
    ]);
    let ops: f64 = text.split_whitespace().next().unwrap().parse().unwrap();
    assert!((1500.0..2500.0).contains(&ops), "{text}");
    let text = bench(&[
        "load",
        "--addr",
        &addr,
        "--sla",
        "--preload",
        "false",
        "--sla-steps",
        "3",
        "--sla-step-duration",
        "0.3",
        "--warmup",
        "0.1",
        "--sla-bound-us",
        "200000",
    ]);
    let overall: f64 = text
        .split("overall ")
        .nth(1)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(overall > 0.0, "{text}");
}

#[test]
fn progress_bar_stays_off_a_stderr_that_is_not_a_terminal() {
    // A 3 s run would show a progress bar on a terminal; piped, stderr
    // gets none of it.
    let floor = start_floor(64);
    let addr = format!("127.0.0.1:{}", floor.port());
    let out = Command::new(env!("CARGO_BIN_EXE_osmium-bench"))
        .args([
            "load",
            "--addr",
            &addr,
            "--preload",
            "false",
            "--conns",
            "1",
        ])
        .args(["--duration", "2.5", "--warmup", "0.5"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("measuring") && !stderr.contains('\r'),
        "{stderr:?}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ops/s"));
}

/// The fields every `load` row has, whatever the mode.
const ROW_FIELDS: [&str; 7] = [
    "server",
    "ops_per_sec",
    "p50_us",
    "p99_us",
    "p999_us",
    "cpu_us_per_req",
    "miss_ratio",
];

#[test]
fn every_load_mode_prints_json_with_the_same_fields() {
    let (a, b) = (start_floor(64), start_floor(64));
    let addr = format!("127.0.0.1:{}", a.port());
    let pid = a.pid().to_string();
    let targets = format!("{addr},127.0.0.1:{}", b.port());
    let short = [
        "--duration",
        "0.3",
        "--warmup",
        "0.1",
        "--preload",
        "false",
        "--json",
    ];
    let modes: [Vec<&str>; 4] = [
        vec!["load", "--addr", &addr, "--pid", &pid],
        vec!["load", "--addr", &addr, "--rate", "2000"],
        vec!["load", "--targets", &targets, "--depth", "4"],
        vec!["load", "--addr", &addr, "--value-sizes", "64,256"],
    ];
    for mode in modes {
        let mut args = mode.clone();
        args.extend(short);
        let text = bench(&args);
        let rows: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        let rows = rows
            .as_array()
            .unwrap_or_else(|| panic!("{mode:?}: {text}"));
        assert!(!rows.is_empty(), "{mode:?}");
        for row in rows {
            for field in ROW_FIELDS {
                assert!(row.get(field).is_some(), "{mode:?}: no {field} in {row}");
            }
            assert!(
                row["ops_per_sec"].as_f64().unwrap() > 0.0,
                "{mode:?}: {row}"
            );
        }
    }
    // --sla: the fields of `load --vs --sla --json`.
    let text = bench(&[
        "load",
        "--addr",
        &addr,
        "--sla",
        "--preload",
        "false",
        "--sla-steps",
        "2",
        "--sla-step-duration",
        "0.2",
        "--warmup",
        "0.1",
        "--sla-bound-us",
        "200000",
        "--json",
    ]);
    let rows: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    for field in [
        "server",
        "random_rps",
        "hot_rps",
        "overall",
        "cpu_us_per_req",
    ] {
        assert!(rows[0].get(field).is_some(), "no {field} in {text}");
    }
}

#[test]
fn plot_writes_a_latency_cdf_and_a_rate_chart() {
    let floor = start_floor(64);
    let addr = format!("127.0.0.1:{}", floor.port());
    let dir = std::env::temp_dir().join(format!("osmium-bench-plot-{}", std::process::id()));
    let dir_arg = dir.to_str().unwrap();
    let short = ["--duration", "0.3", "--warmup", "0.1", "--preload", "false"];
    let mut args = vec!["load", "--addr", &addr, "--plot", dir_arg];
    args.extend(short);
    bench(&args);
    // --rates: a row per offered rate, and throughput/p99 against it.
    let mut args = vec![
        "load",
        "--addr",
        &addr,
        "--plot",
        dir_arg,
        "--rates",
        "1000,3000",
    ];
    args.extend(short);
    args.push("--json");
    let rows: serde_json::Value = serde_json::from_str(bench(&args).trim()).unwrap();
    assert_eq!(rows[0]["offered_rps"], 1000.0);
    assert_eq!(rows[1]["offered_rps"], 3000.0);
    // --sla: its bisection steps.
    let mut args = vec!["load", "--addr", &addr, "--plot", dir_arg, "--sla"];
    args.extend([
        "--preload",
        "false",
        "--sla-steps",
        "2",
        "--sla-step-duration",
        "0.2",
    ]);
    args.extend(["--warmup", "0.1", "--sla-bound-us", "200000"]);
    bench(&args);
    for file in ["latency-cdf.svg", "rates.svg", "sla.svg"] {
        let svg = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(svg.starts_with("<svg"), "{file}");
        assert!(svg.contains("<polyline"), "{file}: no curve");
        assert!(svg.trim_end().ends_with("</svg>"), "{file}");
    }
    let cdf = std::fs::read_to_string(dir.join("latency-cdf.svg")).unwrap();
    assert!(
        cdf.contains("99.999") && cdf.contains(&addr),
        "axis and legend"
    );
    std::fs::remove_dir_all(&dir).ok();
}
