//! Sockets an upgrade carried across the exec, for the proxy that starts
//! from the state (t4 of the sequence in `mod.rs`): listening ones (the
//! state's `ListenerRec`s: each pool's, `ProxyPool`, and the stats
//! port's, `ProxyStats`), taken instead of binding, so that a client
//! that connects while the process is between two images waits in the
//! backlog (none is refused); and client connections (`ConnRec`s with
//! their `ProxyConnRec`), adopted by their pool (`Proxy::adopt`).
//!
//! A listener is taken when its kind and its address, as the kernel says
//! it (`getsockname`, never the state's text), match a listener the
//! configuration asks for; a pool's is matched by its address, not its
//! name (a pool renamed in the file keeps its socket). What is taken is
//! a duplicate (close-on-exec), for listeners and connections alike: the
//! state's own fds stay open and not close-on-exec until the start
//! succeeded ([`close_state_fds`]), so that a start that fails can still
//! hand every socket back to the old image. A carried socket no listener
//! took is closed then.

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{BorrowedFd, RawFd};
use std::path::{Path, PathBuf};

use osmium_upgrade::{ConnRec, ListenerKind, ListenerRec, State};
use socket2::{SockRef, Socket, Type};

use crate::config::Addr;
use crate::stream::{Listener, Stream};

/// The sockets a state carries: listening ones, each taken at most once,
/// and client connections.
#[derive(Debug, Default)]
pub struct Carried {
    recs: Vec<ListenerRec>,
    taken: Vec<bool>,
    conns: Vec<ConnRec>,
}

impl Carried {
    /// The sockets a state names.
    pub fn from_state(state: &State) -> Carried {
        Carried {
            recs: state.listeners.clone(),
            taken: vec![false; state.listeners.len()],
            conns: state.conns.clone(),
        }
    }

    /// The client connections, for `Proxy::adopt`.
    pub fn take_conns(&mut self) -> Vec<ConnRec> {
        std::mem::take(&mut self.conns)
    }

    /// How many listeners were taken.
    pub fn taken(&self) -> usize {
        self.taken.iter().filter(|t| **t).count()
    }

    /// A duplicate (non-blocking) of the first socket not yet taken whose
    /// record and socket `matches`.
    fn take(&mut self, matches: impl Fn(&ListenerKind, &SockRef<'_>) -> bool) -> Option<Socket> {
        for (i, rec) in self.recs.iter().enumerate() {
            if self.taken[i] {
                continue;
            }
            // SAFETY: an fd the state names, open from the exec until
            // `close_state_fds`; borrowed only for this call.
            let fd = unsafe { BorrowedFd::borrow_raw(rec.fd) };
            let sock = SockRef::from(&fd);
            if sock.r#type().ok() != Some(Type::STREAM) || !matches(&rec.kind, &sock) {
                continue;
            }
            let Ok(owned) = fd.try_clone_to_owned() else {
                continue;
            };
            let sock = Socket::from(owned);
            if sock.set_nonblocking(true).is_err() {
                continue;
            }
            self.taken[i] = true;
            return Some(sock);
        }
        None
    }

    /// The carried listener of a pool that listens on `addr`.
    pub fn take_pool(&mut self, addr: &Addr) -> Option<Listener> {
        match addr {
            Addr::Tcp { host, port } => {
                let want = resolve(host, *port)?;
                let sock = self.take(|kind, sock| {
                    matches!(kind, ListenerKind::ProxyPool { .. }) && local_inet(sock) == Some(want)
                })?;
                let std: std::net::TcpListener = sock.into();
                Some(Listener::Tcp(mio::net::TcpListener::from_std(std)))
            }
            Addr::Unix(path) => {
                let sock = self.take(|kind, sock| {
                    matches!(kind, ListenerKind::ProxyPool { .. })
                        && local_path(sock).as_deref() == Some(path.as_path())
                })?;
                let std: std::os::unix::net::UnixListener = sock.into();
                Some(Listener::Unix(
                    mio::net::UnixListener::from_std(std),
                    path.clone(),
                ))
            }
        }
    }

    /// The carried stats port's listener on `host:port`.
    pub fn take_stats(&mut self, host: &str, port: u16) -> Option<mio::net::TcpListener> {
        let want = resolve(host, port)?;
        let sock = self.take(|kind, sock| {
            matches!(kind, ListenerKind::ProxyStats) && local_inet(sock) == Some(want)
        })?;
        let std: std::net::TcpListener = sock.into();
        Some(mio::net::TcpListener::from_std(std))
    }
}

/// `host:port` as a listener binds it (`stream::tcp_listener`).
fn resolve(host: &str, port: u16) -> Option<SocketAddr> {
    (host, port).to_socket_addrs().ok()?.next()
}

fn local_inet(sock: &SockRef<'_>) -> Option<SocketAddr> {
    sock.local_addr().ok().and_then(|a| a.as_socket())
}

fn local_path(sock: &SockRef<'_>) -> Option<PathBuf> {
    sock.local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
}

/// A duplicate (close-on-exec, non-blocking) of the client connection
/// `rec` names, as a stream; None when its fd is not a connected stream
/// socket of the kind it says (the connection then ends with the state's
/// fd).
pub fn conn_stream(rec: &ConnRec) -> Option<Stream> {
    // SAFETY: an fd the state names, open from the exec until
    // `close_state_fds`; borrowed only for this call.
    let fd = unsafe { BorrowedFd::borrow_raw(rec.fd) };
    let sock = SockRef::from(&fd);
    if sock.r#type().ok()? != Type::STREAM {
        return None;
    }
    let local = sock.local_addr().ok()?;
    if (local.domain() == socket2::Domain::UNIX) != rec.unix {
        return None;
    }
    let owned = fd.try_clone_to_owned().ok()?;
    let sock = Socket::from(owned);
    sock.set_nonblocking(true).ok()?;
    Some(if rec.unix {
        let unix: std::os::unix::net::UnixStream = sock.into();
        Stream::Unix(mio::net::UnixStream::from_std(unix))
    } else {
        let tcp: std::net::TcpStream = sock.into();
        Stream::Tcp(mio::net::TcpStream::from_std(tcp))
    })
}

/// Closes the socket fds a state names, listeners and connections (after
/// the start took its duplicates, or when nothing will take them).
pub fn close_state_fds(state: &State) {
    let listeners = state.listeners.iter().map(|l| l.fd);
    for fd in listeners.chain(state.conns.iter().map(|c| c.fd)) {
        close(fd);
    }
}

fn close(fd: RawFd) {
    // SAFETY: close of an fd the state names, which this image does not
    // use itself (it took duplicates); an fd already closed: EBADF.
    unsafe { libc::close(fd) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    fn rec(fd: RawFd, kind: ListenerKind) -> ListenerRec {
        ListenerRec {
            fd,
            kind,
            local: String::new(),
        }
    }

    fn carried(recs: Vec<ListenerRec>) -> Carried {
        Carried {
            taken: vec![false; recs.len()],
            recs,
            conns: Vec::new(),
        }
    }

    #[test]
    fn a_pool_listener_and_the_stats_port_are_taken_by_kind_and_address_once() {
        let pool = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stats = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (pool_port, stats_port) = (
            pool.local_addr().unwrap().port(),
            stats.local_addr().unwrap().port(),
        );
        let (pool_fd, stats_fd) = (pool.into_raw_fd(), stats.into_raw_fd());
        let mut c = carried(vec![
            rec(
                pool_fd,
                ListenerKind::ProxyPool {
                    pool: "alpha".into(),
                },
            ),
            rec(stats_fd, ListenerKind::ProxyStats),
        ]);
        assert!(
            c.take_stats("127.0.0.1", pool_port).is_none(),
            "a pool's listener is not the stats port's"
        );
        let addr = Addr::Tcp {
            host: "127.0.0.1".into(),
            port: pool_port,
        };
        let taken = c.take_pool(&addr).expect("the pool's listener");
        assert!(c.take_pool(&addr).is_none(), "taken once");
        assert!(c.take_stats("127.0.0.1", stats_port).is_some());
        assert_eq!(c.taken(), 2);
        close(pool_fd);
        close(stats_fd);
        // The duplicate still listens.
        assert_eq!(
            taken.local_addr().map(|a| a.port()),
            Some(pool_port),
            "the same address"
        );
        std::net::TcpStream::connect(("127.0.0.1", pool_port)).expect("connect to the duplicate");
    }

    #[test]
    fn a_unix_pool_listener_is_taken_by_its_path() {
        let dir = std::env::temp_dir().join(format!("osmium-proxy-carried-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("sock");
        let _ = std::fs::remove_file(&path);
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let fd = l.into_raw_fd();
        let mut c = carried(vec![rec(fd, ListenerKind::ProxyPool { pool: "u".into() })]);
        assert!(c.take_pool(&Addr::Unix(dir.join("other"))).is_none());
        assert!(c.take_pool(&Addr::Unix(path.clone())).is_some());
        close(fd);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
