//! The harness against a stand-in server: this test binary run again as
//! `fake_server` (its port in FAKE_SERVER_PORT, or on its command line as
//! `--skip fake-port=PORT`, a filter that skips nothing), which binds the
//! port as the real servers do (`SO_REUSEADDR`, std's listener) or says
//! why it cannot.

use super::*;
use std::process::Command;

const PORT_VAR: &str = "FAKE_SERVER_PORT";
const FAIL_VAR: &str = "FAKE_SERVER_FAIL";
const PORT_ARG: &str = "fake-port=";

/// The stand-in server's port: FAKE_SERVER_PORT, or `--skip fake-port=PORT`.
fn fake_port() -> Option<u16> {
    let from_args = std::env::args().find_map(|a| a.strip_prefix(PORT_ARG).map(str::to_string));
    std::env::var(PORT_VAR).ok().or(from_args)?.parse().ok()
}

/// The stand-in server's body; an ordinary (empty) test otherwise.
#[test]
fn fake_server() {
    let Some(port) = fake_port() else {
        return;
    };
    if let Ok(why) = std::env::var(FAIL_VAR) {
        eprintln!("{why}");
        std::process::exit(64);
    }
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(_listener) => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
        Err(e) => {
            eprintln!("failed to listen on port {port}: {e}");
            std::process::exit(71);
        }
    }
}

fn fake(port: u16) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "tests::fake_server", "--nocapture"])
        .env(PORT_VAR, port.to_string());
    cmd
}

/// The stand-in server as a [`Program`], its port on its command line.
fn fake_program() -> Program {
    Program::new("fake program", std::env::current_exe().unwrap(), |port| {
        vec![
            "--exact".to_string(),
            "tests::fake_server".into(),
            "--nocapture".into(),
            "--skip".into(),
            format!("{PORT_ARG}{port}"),
        ]
    })
}

#[test]
fn a_reserved_port_is_given_to_no_other_bind_but_a_server_binds_it() {
    let port = free_port();
    // The kernel's automatic choice skips it...
    for _ in 0..2000 {
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        assert_ne!(other.local_addr().unwrap().port(), port);
    }
    // ...and a server (address reuse on, as std sets it) binds it.
    let server = TcpListener::bind(("127.0.0.1", port)).expect("bind the reserved port");
    assert_eq!(server.local_addr().unwrap().port(), port);
}

#[test]
fn a_start_whose_port_is_taken_is_retried_on_another() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    force_next_port(taken);
    let mut server = ServerProcess::start("fake server", fake);
    assert_eq!(
        server.attempts(),
        2,
        "one failed start, then one that listens"
    );
    assert_eq!(last_start_attempts(), 2);
    assert_ne!(server.port(), taken);
    assert!(listens_on(server.pid(), server.port()));
    TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    let status = server.stop();
    assert!(!status.success(), "stopped by a signal: {status}");
}

#[test]
fn a_start_on_a_given_port_moves_when_that_port_is_taken() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    let server = Start::new("fake server").port(taken).command(fake);
    assert_eq!(server.attempts(), 2);
    assert_ne!(server.port(), taken);
}

#[test]
fn a_start_that_fails_for_another_reason_is_not_retried_and_says_why() {
    let result = std::panic::catch_unwind(|| {
        Start::new("fake server").command(|port| {
            let mut cmd = fake(port);
            cmd.env(FAIL_VAR, "unknown option -Z");
            cmd
        })
    });
    let why = *result.err().unwrap().downcast::<String>().unwrap();
    assert!(why.contains("unknown option -Z"), "{why}");
    assert!(why.contains("exit status: 64"), "{why}");
}

#[test]
fn a_port_held_throughout_fails_after_the_attempts_with_each_reason() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    let result = std::panic::catch_unwind(|| {
        Start::new("fake server")
            .only_port(taken)
            .attempts(2)
            .command(fake)
    });
    let why = *result.err().unwrap().downcast::<String>().unwrap();
    assert!(why.contains("did not start in 2 attempts"), "{why}");
    assert!(why.contains("Address already in use"), "{why}");
}

#[test]
fn dropping_a_server_kills_it() {
    let server = ServerProcess::start("fake server", fake);
    let pid = server.pid();
    drop(server);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn the_servers_messages_for_a_taken_port_are_recognised() {
    for said in [
        "failed to listen on one of interface(s) 127.0.0.1: Address already in use",
        "[2026-11-27 19:10:20.055] nc_proxy.c:147 bind on p 6 to addr '127.0.0.1:48263' failed: Address already in use",
        "failed to start: Address already in use (os error 98)",
        "osmium-proxy: cannot listen for stats on 0.0.0.0:59179: Address already in use (os error 98)",
    ] {
        assert!(says_address_in_use(said), "{said}");
    }
    assert!(!says_address_in_use("unknown option -Z"));
}

#[test]
fn a_udp_socket_and_a_listening_unix_socket_are_seen_as_this_processes() {
    let pid = std::process::id();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap().port();
    assert!(binds_udp(pid, port));
    drop(udp);
    assert!(!binds_udp(pid, port));

    let dir = std::env::temp_dir().join(format!("osmium-harness-unix-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("listening.sock");
    let _ = std::fs::remove_file(&path);
    assert!(!listens_on_unix(pid, &path));
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    assert!(listens_on_unix(pid, &path));
    drop(listener);
    assert!(!listens_on_unix(pid, &path));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_start_that_must_fail_gives_its_status_and_what_it_said() {
    let dir = std::env::temp_dir().join(format!("osmium-harness-exit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = fake(free_port());
    cmd.env(FAIL_VAR, "unknown option -Z");
    let out = exited::run_to_exit("fake server", cmd, &dir.join("stderr.log"));
    assert_eq!(out.code(), Some(64));
    assert!(out.stderr.contains("unknown option -Z"), "{}", out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_start_waits_for_what_ready_says() {
    let mut asked = 0;
    let mut server = Start::new("fake server").child_ready(
        |port| {
            fake(port)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        },
        |child, port| {
            asked += 1;
            asked > 3 && listens_on(child.id(), port)
        },
    );
    assert!(asked > 3);
    assert!(server.is_running());
    server.send_signal(libc::SIGTERM);
    assert!(!server.wait_exit().success());
}

#[test]
fn a_program_pinned_to_a_cpu_runs_there_only() {
    let cpus = allowed_cpus();
    let cpu = *cpus.last().expect("this process may run somewhere");
    let server = fake_program().cpu(cpu).start();
    assert!(listens_on(server.pid(), server.port()));
    assert_eq!(cpus_allowed_list(server.pid()), Some(cpu.to_string()));
    assert!(server.rss_bytes().unwrap() > 0);
    assert!(server.check_running().is_ok());
}

#[test]
fn a_signal_reaches_a_server_until_it_has_exited() {
    let server = ServerProcess::start("fake server", fake);
    assert!(server.exited().is_none());
    server.try_signal(libc::SIGTERM).unwrap();
    poll::wait_until("the stand-in to exit", EXIT_TIMEOUT, || {
        server.exited().is_some()
    });
    let why = server.try_signal(libc::SIGTERM).unwrap_err();
    assert!(why.contains("exited"), "{why}");
    let died = server.check_running().unwrap_err();
    assert!(died.contains("died"), "{died}");
}

#[test]
fn a_start_without_wait_returns_at_the_spawn_in_one_attempt() {
    let holder = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    // Started on a port that is taken: no wait, so no retry; the process
    // says so and exits on its own.
    let server = Start::new("fake server")
        .port(taken)
        .no_wait()
        .command(fake);
    assert_eq!(server.attempts(), 1);
    assert_eq!(server.port(), taken);
    poll::wait_until("the stand-in to exit", EXIT_TIMEOUT, || {
        server.exited().is_some()
    });
    let free = Start::new("fake server").no_wait().command(fake);
    poll::wait_until("the stand-in to listen", READY_TIMEOUT, || {
        listens_on(free.pid(), free.port())
    });
}

const KILL_ALL_VAR: &str = "HARNESS_KILL_ALL";

/// Run again as its own process by the test below (HARNESS_KILL_ALL set):
/// starts two servers, kills them all, tries one more start; says what
/// happened on stdout and exits without dropping anything.
#[test]
fn kill_all_started_in_a_process_of_its_own() {
    if std::env::var_os(KILL_ALL_VAR).is_none() {
        return;
    }
    let a = ServerProcess::start("fake server", fake);
    let b = fake_program().start();
    println!("pids {} {}", a.pid(), b.pid());
    println!("scratch {}", b.scratch_dir().display());
    println!("killed {}", kill_all_started());
    match Start::new("fake server").try_child_ready(
        |port| fake(port).spawn().map_err(|e| e.to_string()),
        |_, _| true,
    ) {
        Ok(_) => println!("started after kill_all_started"),
        Err(why) => println!("refused: {why}"),
    }
    std::process::exit(0);
}

#[test]
fn kill_all_started_kills_every_running_server_and_refuses_more() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::kill_all_started_in_a_process_of_its_own",
            "--nocapture",
        ])
        .env(KILL_ALL_VAR, "1")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |name: &str| -> String {
        said.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name:?} in {said}"))
            .trim()
            .to_string()
    };
    assert_eq!(field("killed "), "2", "{said}");
    assert!(field("refused: ").contains("kill_all_started"), "{said}");
    for pid in field("pids ").split(' ') {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} still runs: {said}"
        );
    }
    assert!(!Path::new(&field("scratch ")).exists(), "{said}");
}
