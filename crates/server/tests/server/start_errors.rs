//! A refused start says what failed, in memcached 1.6.45's words where
//! memcached has the same failure: a port in use names the `-l`
//! interfaces (or, without `-l`, the TCP or UDP port), an address that
//! does not resolve is named after getaddrinfo()'s reason, and a value a
//! config file gave is refused with the file and line. The listener cases
//! run against osmium and memcached alike (`against_both!`).

use std::net::{TcpListener, UdpSocket};

use crate::common;
use common::{against_both, free_port, target_server};
use osmium_test_harness::CacheServer;

/// Runs a server that must fail to start, with exactly `args` (the
/// listeners are what is tested: no `-l`, `-p` or `-U` of the builder's):
/// its exit status and stderr.
fn refused<I, S>(server: CacheServer, args: I) -> (i32, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = server.bare().args(args).run_to_exit();
    (out.code().unwrap_or(-1), out.stderr)
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
    let args = ["-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1"];
    assert_eq!(
        refused(target_server(), args),
        (
            71,
            "failed to listen on one of interface(s) 127.0.0.1: Address already in use\n".into()
        )
    );
    // Every -l, as given, joined by commas.
    let two = format!("127.0.0.1:{port}");
    let args = [
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-l",
        "127.0.0.2",
        "-l",
        &two,
    ];
    assert_eq!(
        refused(target_server(), args),
        (
            71,
            format!(
                "failed to listen on one of interface(s) 127.0.0.2,127.0.0.1:{port}: Address already in use\n"
            )
        )
    );
}

fn an_address_that_does_not_resolve_is_named() {
    let args = ["-p", &free_port().to_string(), "-U", "0", "-l", "999.1.1.1"];
    // memcached reports errno after getaddrinfo() left it 0: "Success".
    assert_eq!(
        refused(target_server(), args),
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
    assert_eq!(
        refused(common::osmium(), ["-p", &port.to_string(), "-U", "0"]),
        (
            71,
            format!("failed to listen on TCP port {port}: Address already in use\n")
        )
    );
    let udp = UdpSocket::bind(("127.0.0.1", 0)).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let args = ["-p", &free_port().to_string(), "-U", &udp_port.to_string()];
    assert_eq!(
        refused(common::osmium(), args),
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
    assert_eq!(
        refused(common::osmium(), ["--config-file", conf]),
        (
            64,
            format!("osmium: {conf} line 3: -m: invalid memory limit 'abc'\n")
        )
    );
    // clap's refusals too.
    std::fs::write(dir.join("osmium.conf"), "-m 64\n-t x\n").unwrap();
    let (code, said) = refused(common::osmium(), ["--config-file", conf]);
    assert_eq!(code, 64);
    assert!(
        said.starts_with(&format!("osmium: {conf} line 2: error: invalid value 'x'")),
        "{said}"
    );
    // The command line's own mistake is not the file's.
    std::fs::write(dir.join("osmium.conf"), "-m 64\n").unwrap();
    assert_eq!(
        refused(common::osmium(), ["--config-file", conf, "-t", "0"]),
        (64, "Number of threads must be greater than 0\n".into())
    );
    let _ = std::fs::remove_dir_all(&dir);
}
