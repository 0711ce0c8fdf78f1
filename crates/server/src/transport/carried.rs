//! Sockets a binary upgrade carried across the exec, for the start that
//! follows to take over: listening ones (the state's `ListenerRec`s),
//! taken instead of binding, so that the socket stays the same one from
//! the first start on and a connection that arrives while the process is
//! between two images waits in its backlog (none is refused); and client
//! connections (`ConnRec`s), dealt to the workers with their sessions'
//! state (`conn_stream`).
//!
//! A socket is taken when its kind (stream or datagram, inet or unix)
//! and its address, as the kernel says it (`getsockname`, never the
//! state's text), match a listener the command line asks for. What is
//! taken is a duplicate (close-on-exec), for listeners and connections
//! alike: the state's own fds stay open and not close-on-exec until the
//! start succeeded (`close_state_fds`), so that a start that fails can
//! still hand every socket back to the old image.

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};
use std::path::Path;

use osmium_upgrade::{ConnRec, ListenerKind, ListenerRec, State};
use socket2::{SockRef, Socket, Type};

use super::stream::Stream;

/// The sockets a state carries: listening ones, each taken at most once,
/// and client connections.
#[derive(Default)]
pub(crate) struct Carried {
    recs: Vec<ListenerRec>,
    taken: Vec<bool>,
    /// The client connections, taken by `take_conns`.
    conns: Vec<ConnRec>,
}

impl Carried {
    /// The sockets a state names.
    pub(crate) fn from_state(state: &State) -> Carried {
        Carried::listeners(&state.listeners, state.conns.clone())
    }

    fn listeners(recs: &[ListenerRec], conns: Vec<ConnRec>) -> Carried {
        Carried {
            recs: recs.to_vec(),
            taken: vec![false; recs.len()],
            conns,
        }
    }

    /// The client connections, for the workers.
    pub(crate) fn take_conns(&mut self) -> Vec<ConnRec> {
        std::mem::take(&mut self.conns)
    }

    /// How many were taken.
    pub(crate) fn taken(&self) -> usize {
        self.taken.iter().filter(|t| **t).count()
    }

    /// A duplicate of the first socket not yet taken whose record and
    /// socket `matches`.
    fn take(&mut self, matches: impl Fn(&ListenerKind, &SockRef<'_>) -> bool) -> Option<Socket> {
        for (i, rec) in self.recs.iter().enumerate() {
            if self.taken[i] {
                continue;
            }
            // SAFETY: an fd the state names, open from the exec until
            // `close_state_fds`; borrowed only for this call.
            let fd = unsafe { BorrowedFd::borrow_raw(rec.fd) };
            let sock = SockRef::from(&fd);
            if !matches(&rec.kind, &sock) {
                continue;
            }
            let Ok(owned) = fd.try_clone_to_owned() else {
                continue;
            };
            self.taken[i] = true;
            return Some(Socket::from(owned));
        }
        None
    }

    /// The TCP listener (TLS or not: the command line says which) bound
    /// to `addr`.
    pub(crate) fn take_tcp(&mut self, addr: SocketAddr) -> Option<Socket> {
        self.take(|kind, sock| {
            matches!(kind, ListenerKind::Tcp | ListenerKind::Tls { .. })
                && sock.r#type().ok() == Some(Type::STREAM)
                && local_inet(sock) == Some(addr)
        })
    }

    /// The UDP socket bound to `addr`.
    pub(crate) fn take_udp(&mut self, addr: SocketAddr) -> Option<Socket> {
        self.take(|kind, sock| {
            matches!(kind, ListenerKind::Udp)
                && sock.r#type().ok() == Some(Type::DGRAM)
                && local_inet(sock) == Some(addr)
        })
    }

    /// The unix listener bound to `path`.
    pub(crate) fn take_unix(&mut self, path: &Path) -> Option<Socket> {
        self.take(|kind, sock| {
            matches!(kind, ListenerKind::Unix { path: p } if p == path)
                && sock.r#type().ok() == Some(Type::STREAM)
                && sock
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(Path::to_path_buf))
                    .as_deref()
                    == Some(path)
        })
    }
}

fn local_inet(sock: &SockRef<'_>) -> Option<SocketAddr> {
    sock.local_addr().ok().and_then(|a| a.as_socket())
}

/// A duplicate (close-on-exec, non-blocking) of the connection `rec`
/// names, as a stream; None when its fd is not a connected stream socket
/// of the kind it says (the connection then ends with the state's fd).
pub(crate) fn conn_stream(rec: &ConnRec) -> Option<Stream> {
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
        let _ = sock.set_nodelay(true);
        let tcp: std::net::TcpStream = sock.into();
        Stream::Tcp(mio::net::TcpStream::from_std(tcp))
    })
}

/// Closes the socket fds a state names, listeners and connections (after
/// the start took its duplicates, or when nothing will take them).
pub(crate) fn close_state_fds(state: &State) {
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
    use std::os::fd::{AsRawFd, IntoRawFd};

    fn rec(fd: RawFd, kind: ListenerKind) -> ListenerRec {
        ListenerRec {
            fd,
            kind,
            local: String::new(),
        }
    }

    #[test]
    fn a_socket_is_taken_by_its_kind_and_address_once() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tcp_addr = tcp.local_addr().unwrap();
        let udp_addr = udp.local_addr().unwrap();
        let (tcp_fd, udp_fd) = (tcp.into_raw_fd(), udp.into_raw_fd());
        let recs = [
            rec(tcp_fd, ListenerKind::Tcp),
            rec(udp_fd, ListenerKind::Udp),
        ];
        let mut carried = Carried::listeners(&recs, Vec::new());
        assert!(
            carried.take_udp(tcp_addr).is_none(),
            "not a datagram socket"
        );
        let taken = carried.take_tcp(tcp_addr).expect("the TCP listener");
        assert_ne!(taken.as_raw_fd(), tcp_fd, "a duplicate");
        assert_eq!(taken.local_addr().unwrap().as_socket(), Some(tcp_addr));
        assert!(carried.take_tcp(tcp_addr).is_none(), "taken once");
        assert!(carried.take_udp(udp_addr).is_some());
        assert_eq!(carried.taken(), 2);
        close(tcp_fd);
        close(udp_fd);
        // The duplicate still listens.
        std::net::TcpStream::connect(tcp_addr).expect("connect to the duplicate");
    }

    #[test]
    fn a_unix_listener_is_taken_by_its_path() {
        let dir = std::env::temp_dir().join(format!("osmium-carried-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("sock");
        let _ = std::fs::remove_file(&path);
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let recs = [rec(
            l.into_raw_fd(),
            ListenerKind::Unix { path: path.clone() },
        )];
        let mut carried = Carried::listeners(&recs, Vec::new());
        assert!(carried.take_unix(&dir.join("other")).is_none());
        assert!(carried.take_unix(&path).is_some());
        close(recs[0].fd);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
