//! The proxy's side of the sockets an upgrade carried across the exec
//! (`osmium_upgrade::carried`), for the proxy that starts from the state
//! (t4 of the sequence in `mod.rs`): the listener a pool's address or the
//! stats port takes instead of binding (the state's `ProxyPool` and
//! `ProxyStats` records), so that a client that connects while the
//! process is between two images waits in the backlog (none is refused);
//! and a carried client connection (`ConnRec` with its `ProxyConnRec`) as
//! a stream, adopted by its pool (`Proxy::adopt`).
//!
//! A pool's listener is matched by its address, not its name (a pool
//! renamed in the file keeps its socket). A carried socket no listener
//! took is closed once the start succeeded ([`close_state_fds`]).

use std::net::{SocketAddr, ToSocketAddrs};

pub use osmium_upgrade::carried::{close_state_fds, Carried};
use osmium_upgrade::carried::{conn_socket, BoundTo};
use osmium_upgrade::{ConnRec, ListenerKind};
use socket2::Type;

use crate::config::Addr;
use crate::stream::{Listener, Stream};

fn is_pool(kind: &ListenerKind) -> bool {
    matches!(kind, ListenerKind::ProxyPool { .. })
}

/// The carried listener of a pool that listens on `addr`.
pub fn take_pool(carried: &mut Carried, addr: &Addr) -> Option<Listener> {
    match addr {
        Addr::Tcp { host, port } => {
            let want = resolve(host, *port)?;
            let sock = carried.take(Type::STREAM, is_pool, BoundTo::Inet(want))?;
            let std: std::net::TcpListener = sock.into();
            Some(Listener::Tcp(mio::net::TcpListener::from_std(std)))
        }
        Addr::Unix(path) => {
            let sock = carried.take(Type::STREAM, is_pool, BoundTo::Path(path))?;
            let std: std::os::unix::net::UnixListener = sock.into();
            Some(Listener::Unix(
                mio::net::UnixListener::from_std(std),
                path.clone(),
            ))
        }
    }
}

/// The carried stats port's listener on `host:port`.
pub fn take_stats(carried: &mut Carried, host: &str, port: u16) -> Option<mio::net::TcpListener> {
    let want = resolve(host, port)?;
    let sock = carried.take(
        Type::STREAM,
        |kind| matches!(kind, ListenerKind::ProxyStats),
        BoundTo::Inet(want),
    )?;
    let std: std::net::TcpListener = sock.into();
    Some(mio::net::TcpListener::from_std(std))
}

/// `host:port` as a listener binds it (`stream::tcp_listener`).
fn resolve(host: &str, port: u16) -> Option<SocketAddr> {
    (host, port).to_socket_addrs().ok()?.next()
}

/// The client connection `rec` names as a stream (a duplicate); None
/// when its fd is not a connected stream socket of the kind it says (the
/// connection then ends with the state's fd).
pub fn conn_stream(rec: &ConnRec) -> Option<Stream> {
    let sock = conn_socket(rec)?;
    Some(if rec.unix {
        let unix: std::os::unix::net::UnixStream = sock.into();
        Stream::Unix(mio::net::UnixStream::from_std(unix))
    } else {
        let tcp: std::net::TcpStream = sock.into();
        Stream::Tcp(mio::net::TcpStream::from_std(tcp))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use osmium_upgrade::ListenerRec;
    use std::os::fd::AsRawFd;

    #[test]
    fn pool_listeners_and_the_stats_port_are_taken_by_their_kind_and_address() {
        let dir = std::env::temp_dir().join(format!("osmium-proxy-carried-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("sock");
        let _ = std::fs::remove_file(&path);
        let unix = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stats = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = |l: &std::net::TcpListener| l.local_addr().unwrap().port();
        let (tcp_port, stats_port) = (port(&tcp), port(&stats));
        let pool = |pool: &str| ListenerKind::ProxyPool { pool: pool.into() };
        let recs = [
            (tcp.as_raw_fd(), pool("alpha")),
            (unix.as_raw_fd(), pool("u")),
            (stats.as_raw_fd(), ListenerKind::ProxyStats),
        ];
        let recs = recs.into_iter().map(|(fd, kind)| ListenerRec {
            fd,
            kind,
            local: String::new(),
        });
        let mut c = Carried::new(recs.collect(), Vec::new());
        let tcp_addr = Addr::Tcp {
            host: "127.0.0.1".into(),
            port: tcp_port,
        };
        assert!(
            take_stats(&mut c, "127.0.0.1", tcp_port).is_none(),
            "a pool's listener is not the stats port's"
        );
        assert!(take_pool(&mut c, &Addr::Unix(dir.join("other"))).is_none());
        let taken = take_pool(&mut c, &tcp_addr).expect("the TCP pool's listener");
        assert!(take_pool(&mut c, &tcp_addr).is_none(), "taken once");
        assert!(take_pool(&mut c, &Addr::Unix(path.clone())).is_some());
        assert!(take_stats(&mut c, "127.0.0.1", stats_port).is_some());
        assert_eq!(c.taken(), 3);
        drop((tcp, unix, stats));
        // The duplicate still listens.
        assert_eq!(taken.local_addr().map(|a| a.port()), Some(tcp_port));
        std::net::TcpStream::connect(("127.0.0.1", tcp_port)).expect("connect to the duplicate");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
