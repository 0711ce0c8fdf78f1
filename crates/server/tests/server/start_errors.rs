//! A refused start says what failed, in memcached 1.6.45's words where
//! memcached has the same failure: a port in use names the `-l`
//! interfaces (or, without `-l`, the TCP or UDP port), an address that
//! does not resolve is named after getaddrinfo()'s reason, and a value a
//! config file gave is refused with the file and line. The listener cases
//! run against osmium and memcached alike (`against_both!`).

use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Stdio};

use crate::common;
use common::{against_both, free_port, target_command, wait_exit};

fn osmium() -> String {
    env!("CARGO_BIN_EXE_osmium").to_string()
}

/// Runs a server that must fail to start: its exit status and stderr.
fn refused(mut cmd: Command) -> (i32, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_exit(&mut child);
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut said).unwrap();
    (status.code().unwrap_or(-1), said)
}

/// A TCP port this test holds (listening) on 127.0.0.1. The kernel picks
/// it (port 0), so no other test running at once can be holding it.
fn held_port() -> (TcpListener, u16) {
    let held = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = held.local_addr().unwrap().port();
    (held, port)
}

fn a_port_in_use_names_the_interfaces() {
    let (_held, port) = held_port();
    let mut cmd = target_command(&osmium());
    cmd.args(["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"]);
    assert_eq!(
        refused(cmd),
        (
            71,
            "failed to listen on one of interface(s) 127.0.0.1: Address already in use\n".into()
        )
    );
    // Every -l, as given, joined by commas.
    let mut cmd = target_command(&osmium());
    cmd.args(["-p", &port.to_string(), "-U", "0"]).args([
        "-l",
        "127.0.0.2",
        "-l",
        &format!("127.0.0.1:{port}"),
    ]);
    assert_eq!(
        refused(cmd),
        (
            71,
            format!(
                "failed to listen on one of interface(s) 127.0.0.2,127.0.0.1:{port}: Address already in use\n"
            )
        )
    );
}

fn an_address_that_does_not_resolve_is_named() {
    let mut cmd = target_command(&osmium());
    cmd.args(["-p", &free_port().to_string(), "-U", "0", "-l", "999.1.1.1"]);
    // memcached reports errno after getaddrinfo() left it 0: "Success".
    assert_eq!(
        refused(cmd),
        (
            71,
            "getaddrinfo(): Name or service not known\n\
             failed to listen on one of interface(s) 999.1.1.1: Success\n"
                .into()
        )
    );
}

against_both!(
    a_port_in_use_names_the_interfaces,
    an_address_that_does_not_resolve_is_named
);

/// Without `-l` memcached names the port (it listens on every interface,
/// which these tests do not hold; osmium listens on 127.0.0.1).
#[test]
fn without_dash_l_the_tcp_or_udp_port_is_named() {
    let (_held, port) = held_port();
    let mut cmd = common::osmium_command(osmium());
    cmd.args(["-p", &port.to_string(), "-U", "0"]);
    assert_eq!(
        refused(cmd),
        (
            71,
            format!("failed to listen on TCP port {port}: Address already in use\n")
        )
    );
    let udp = UdpSocket::bind(("127.0.0.1", 0)).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let mut cmd = common::osmium_command(osmium());
    cmd.args(["-p", &free_port().to_string(), "-U", &udp_port.to_string()]);
    assert_eq!(
        refused(cmd),
        (
            71,
            format!("failed to listen on UDP port {udp_port}: Address already in use\n")
        )
    );
}

#[test]
fn a_bad_value_in_a_config_file_names_the_file_and_line() {
    let dir = std::env::temp_dir().join(format!("osmium-start-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("osmium.conf");
    std::fs::write(&conf, "# the cache\n-p 11311\n-m abc\n-U 0\n").unwrap();
    let conf = conf.to_str().unwrap();
    let mut cmd = common::osmium_command(osmium());
    cmd.args(["--config-file", conf]);
    assert_eq!(
        refused(cmd),
        (
            64,
            format!("osmium: {conf} line 3: -m: invalid memory limit 'abc'\n")
        )
    );
    // clap's refusals too.
    std::fs::write(dir.join("osmium.conf"), "-m 64\n-t x\n").unwrap();
    let mut cmd = common::osmium_command(osmium());
    cmd.args(["--config-file", conf]);
    let (code, said) = refused(cmd);
    assert_eq!(code, 64);
    assert!(
        said.starts_with(&format!("osmium: {conf} line 2: error: invalid value 'x'")),
        "{said}"
    );
    // The command line's own mistake is not the file's.
    std::fs::write(dir.join("osmium.conf"), "-m 64\n").unwrap();
    let mut cmd = common::osmium_command(osmium());
    cmd.args(["--config-file", conf, "-t", "0"]);
    assert_eq!(
        refused(cmd),
        (64, "Number of threads must be greater than 0\n".into())
    );
    let _ = std::fs::remove_dir_all(&dir);
}
