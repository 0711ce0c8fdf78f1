//! What /proc says about a local process, for `osmium-tool upgrade`: the
//! listening sockets it holds (its `/proc/PID/fd` links `socket:[INODE]`
//! matched with the listening rows of `/proc/PID/net/tcp`, `tcp6` and
//! `unix`), as addresses this tool can connect to, and whether it still
//! runs. Reading another user's `/proc/PID/fd` takes root (or that user).
//!
//! ```text
//! /proc/PID/net/tcp   " 0: 0100007F:2BCB 00000000:0000 0A ... 0 0 INODE ..."
//!                          local (hex IPv4 as a native u32 : hex port),
//!                          st 0A = LISTEN, the 10th field the inode
//! /proc/PID/net/tcp6  the same, the address 32 hex digits (four u32s)
//! /proc/PID/net/unix  "Num RefCount Protocol Flags Type St Inode Path":
//!                     Flags 00010000 (accepting), Type 0001 (stream)
//! ```

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

/// A listening socket of the process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Listening {
    Tcp(SocketAddr),
    /// The path as the process sees it (its own mount namespace).
    Unix(PathBuf),
}

impl Listening {
    /// The addresses to try for it, as the tool's verbs take them: an
    /// unspecified IP as its loopback; a unix path first through
    /// `/proc/PID/root` (the process may have a /tmp of its own, as under
    /// systemd's PrivateTmp), then as it is.
    pub(crate) fn addresses(&self, pid: u32) -> Vec<String> {
        match self {
            Listening::Tcp(sa) => {
                let ip = match sa.ip() {
                    IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
                    ip => ip,
                };
                vec![SocketAddr::new(ip, sa.port()).to_string()]
            }
            Listening::Unix(path) => {
                let mut through_root = PathBuf::from(format!("/proc/{pid}/root"));
                through_root.push(path.strip_prefix("/").unwrap_or(path));
                vec![
                    through_root.display().to_string(),
                    path.display().to_string(),
                ]
            }
        }
    }
}

/// The socket inodes process `pid` holds.
fn socket_inodes(pid: u32) -> io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(target) = entry.and_then(|e| std::fs::read_link(e.path())) else {
            continue;
        };
        let inode = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse().ok());
        if let Some(inode) = inode {
            inodes.insert(inode);
        }
    }
    Ok(inodes)
}

/// `/proc/PID/net/NAME`, else this process's `/proc/net/NAME` (the same
/// table when both share a network namespace).
fn net_table(pid: u32, name: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/net/{name}"))
        .or_else(|_| std::fs::read_to_string(format!("/proc/net/{name}")))
        .unwrap_or_default()
}

/// The listening sockets of process `pid`: TCP (IPv4, IPv6), then unix
/// (abstract ones left out), each in /proc's order. An error when its fds
/// cannot be read (no such process, or not allowed).
pub(crate) fn listening(pid: u32) -> io::Result<Vec<Listening>> {
    let inodes = socket_inodes(pid)?;
    let mut found: Vec<Listening> = Vec::new();
    for (name, v6) in [("tcp", false), ("tcp6", true)] {
        let table = net_table(pid, name);
        found.extend(tcp_listeners(&table, v6, &inodes).map(Listening::Tcp));
    }
    found.extend(unix_listeners(&net_table(pid, "unix"), &inodes).map(Listening::Unix));
    Ok(found)
}

/// An address of `/proc/net/tcp` or `tcp6`: `HEX:PORT`.
fn tcp_address(field: &str, v6: bool) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // Each group of 8 hex digits is a u32 the kernel printed in host
    // order from network-order bytes.
    let mut bytes = Vec::with_capacity(16);
    for group in ip.as_bytes().chunks(8) {
        let group = std::str::from_utf8(group).ok()?;
        bytes.extend(u32::from_str_radix(group, 16).ok()?.to_ne_bytes());
    }
    let ip = match (v6, bytes.len()) {
        (false, 4) => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        (true, 16) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The listening rows of a `/proc/net/tcp` (or `tcp6`) table whose inode
/// is one of `inodes`.
fn tcp_listeners<'a>(
    table: &'a str,
    v6: bool,
    inodes: &'a HashSet<u64>,
) -> impl Iterator<Item = SocketAddr> + 'a {
    table.lines().skip(1).filter_map(move |line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
        if *state != "0A" || !inodes.contains(&inode.parse::<u64>().ok()?) {
            return None;
        }
        tcp_address(local, v6)
    })
}

/// The accepting stream sockets of a `/proc/net/unix` table whose inode
/// is one of `inodes`, with a path.
fn unix_listeners<'a>(
    table: &'a str,
    inodes: &'a HashSet<u64>,
) -> impl Iterator<Item = PathBuf> + 'a {
    const ACCEPTING: u32 = 0x0001_0000;
    table.lines().skip(1).filter_map(move |line| {
        // Seven fields (the inode padded with spaces), then " PATH" (which
        // may hold spaces) or nothing.
        let mut rest = line;
        let mut fields = [""; 7];
        for field in &mut fields {
            rest = rest.trim_start();
            let end = rest.find(' ').unwrap_or(rest.len());
            (*field, rest) = rest.split_at(end);
        }
        let flags = u32::from_str_radix(fields[3], 16).ok()?;
        let stream = fields[4] == "0001";
        let inode: u64 = fields[6].parse().ok()?;
        let path = rest.strip_prefix(' ')?;
        if flags & ACCEPTING == 0
            || !stream
            || !inodes.contains(&inode)
            || path.is_empty()
            || path.starts_with('@')
        {
            return None;
        }
        Some(PathBuf::from(path))
    })
}

/// Whether process `pid` runs here (a zombie does not).
pub(crate) fn runs(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "PID (COMM) STATE ...": COMM may hold anything, the state follows
    // its last ')'.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// Whether `/proc/PID` exists at all (else the pid is not one of this
/// PID namespace's).
pub(crate) fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tcp_listeners() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 0100007F:2BCB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n   \
            1: 0100007F:2BCC 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0\n   \
            2: 0100007F:2BCB 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n";
        let inodes: HashSet<u64> = [111].into();
        let found: Vec<_> = tcp_listeners(table, false, &inodes).collect();
        assert_eq!(found, vec!["127.0.0.1:11211".parse().unwrap()]);
        let v6 = "sl local\n 0: 00000000000000000000000001000000:2BCB 00000000000000000000000000000000:0000 0A 0:0 0:0 0 0 0 333 1\n";
        let inodes: HashSet<u64> = [333].into();
        let found: Vec<_> = tcp_listeners(v6, true, &inodes).collect();
        assert_eq!(found, vec!["[::1]:11211".parse().unwrap()]);
    }

    #[test]
    fn reads_unix_listeners() {
        let table = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01   444 /tmp/a b.sock\n\
            0000000000000000: 00000003 00000000 00000000 0001 03   444 /tmp/a b.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01   444\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 555 @abstract\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 666 /tmp/other.sock\n";
        let inodes: HashSet<u64> = [444, 555].into();
        let found: Vec<_> = unix_listeners(table, &inodes).collect();
        assert_eq!(found, vec![PathBuf::from("/tmp/a b.sock")]);
    }

    #[test]
    fn connects_to_unspecified_addresses_on_loopback_and_unix_paths_through_the_root() {
        let any: SocketAddr = "0.0.0.0:11211".parse().unwrap();
        assert_eq!(Listening::Tcp(any).addresses(7), vec!["127.0.0.1:11211"]);
        let any6: SocketAddr = "[::]:11211".parse().unwrap();
        assert_eq!(Listening::Tcp(any6).addresses(7), vec!["[::1]:11211"]);
        let unix = Listening::Unix(PathBuf::from("/tmp/m.sock"));
        assert_eq!(
            unix.addresses(7),
            vec!["/proc/7/root/tmp/m.sock", "/tmp/m.sock"]
        );
    }

    #[test]
    fn this_process_runs_and_listens_where_it_listens() {
        let me = std::process::id();
        assert!(runs(me) && exists(me));
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let found = listening(me).unwrap();
        assert!(
            found.contains(&Listening::Tcp(l.local_addr().unwrap())),
            "{found:?}"
        );
    }
}
