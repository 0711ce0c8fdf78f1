//! Sockets an upgrade carried across the exec, for the image that starts
//! from the state (the server's and the proxy's alike): listening ones
//! (the state's `ListenerRec`s), taken instead of binding, so that a
//! client that connects while the process is between two images waits
//! in the backlog (none is refused); and client connections
//! (`ConnRec`s), handed to whatever serves them.
//!
//! A listener is taken when its record's kind and its socket's type and
//! address, as the kernel says it (`getsockname`, never the state's
//! text), match a listener the command line or configuration asks for.
//! What is taken is a duplicate (close-on-exec, non-blocking), for
//! listeners and connections alike: the state's own fds stay open and
//! not close-on-exec until the start succeeded ([`close_state_fds`]), so
//! that a start that fails can still hand every socket back to the old
//! image. A carried socket no listener took is closed then.

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};
use std::path::Path;

use socket2::{Domain, SockRef, Socket, Type};

use crate::state::{ConnRec, ListenerKind, ListenerRec, State};

/// Where a listener is bound.
#[derive(Debug, Clone, Copy)]
pub enum BoundTo<'a> {
    /// An inet address (TCP or UDP).
    Inet(SocketAddr),
    /// A unix socket's path.
    Path(&'a Path),
}

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
        Carried::new(state.listeners.clone(), state.conns.clone())
    }

    /// The listeners `recs` and the connections `conns`.
    pub fn new(recs: Vec<ListenerRec>, conns: Vec<ConnRec>) -> Carried {
        Carried {
            taken: vec![false; recs.len()],
            recs,
            conns,
        }
    }

    /// The client connections, for whatever serves them.
    pub fn take_conns(&mut self) -> Vec<ConnRec> {
        std::mem::take(&mut self.conns)
    }

    /// How many listeners were taken.
    pub fn taken(&self) -> usize {
        self.taken.iter().filter(|t| **t).count()
    }

    /// A duplicate (close-on-exec, non-blocking) of the first listener
    /// not yet taken whose record's kind `kind` accepts and whose socket
    /// is of type `ty` and bound to `at`.
    pub fn take(
        &mut self,
        ty: Type,
        kind: impl Fn(&ListenerKind) -> bool,
        at: BoundTo<'_>,
    ) -> Option<Socket> {
        for (i, rec) in self.recs.iter().enumerate() {
            if self.taken[i] || !kind(&rec.kind) {
                continue;
            }
            // SAFETY: an fd the state names, open from the exec until
            // `close_state_fds`; borrowed only for this call.
            let fd = unsafe { BorrowedFd::borrow_raw(rec.fd) };
            let sock = SockRef::from(&fd);
            if sock.r#type().ok() != Some(ty) || !bound_to(&sock, at) {
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
}

fn bound_to(sock: &SockRef<'_>, at: BoundTo<'_>) -> bool {
    let Ok(local) = sock.local_addr() else {
        return false;
    };
    match at {
        BoundTo::Inet(addr) => local.as_socket() == Some(addr),
        BoundTo::Path(path) => local.as_pathname() == Some(path),
    }
}

/// A duplicate (close-on-exec, non-blocking) of the client connection
/// `rec` names; None when its fd is not a connected stream socket of the
/// kind it says (unix or not: the connection then ends with the state's
/// fd).
pub fn conn_socket(rec: &ConnRec) -> Option<Socket> {
    // SAFETY: an fd the state names, open from the exec until
    // `close_state_fds`; borrowed only for this call.
    let fd = unsafe { BorrowedFd::borrow_raw(rec.fd) };
    let sock = SockRef::from(&fd);
    if sock.r#type().ok()? != Type::STREAM {
        return None;
    }
    let local = sock.local_addr().ok()?;
    if (local.domain() == Domain::UNIX) != rec.unix {
        return None;
    }
    let owned = fd.try_clone_to_owned().ok()?;
    let sock = Socket::from(owned);
    sock.set_nonblocking(true).ok()?;
    Some(sock)
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
    use std::os::fd::{AsRawFd, IntoRawFd};

    fn rec(fd: RawFd, kind: ListenerKind) -> ListenerRec {
        ListenerRec {
            fd,
            kind,
            local: String::new(),
        }
    }

    fn is_tcp(kind: &ListenerKind) -> bool {
        matches!(kind, ListenerKind::Tcp | ListenerKind::Tls { .. })
    }

    fn is_udp(kind: &ListenerKind) -> bool {
        matches!(kind, ListenerKind::Udp)
    }

    #[test]
    fn a_socket_is_taken_by_its_kind_type_and_address_once() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tcp_addr = tcp.local_addr().unwrap();
        let udp_addr = udp.local_addr().unwrap();
        let (tcp_fd, udp_fd) = (tcp.into_raw_fd(), udp.into_raw_fd());
        let mut carried = Carried::new(
            vec![
                rec(tcp_fd, ListenerKind::Tcp),
                rec(udp_fd, ListenerKind::Udp),
            ],
            Vec::new(),
        );
        assert!(
            carried
                .take(Type::DGRAM, |_| true, BoundTo::Inet(tcp_addr))
                .is_none(),
            "not a datagram socket"
        );
        assert!(
            carried
                .take(Type::STREAM, is_udp, BoundTo::Inet(tcp_addr))
                .is_none(),
            "not a UDP listener's record"
        );
        let taken = carried
            .take(Type::STREAM, is_tcp, BoundTo::Inet(tcp_addr))
            .expect("the TCP listener");
        assert_ne!(taken.as_raw_fd(), tcp_fd, "a duplicate");
        assert_eq!(taken.local_addr().unwrap().as_socket(), Some(tcp_addr));
        assert!(
            carried
                .take(Type::STREAM, is_tcp, BoundTo::Inet(tcp_addr))
                .is_none(),
            "taken once"
        );
        assert!(carried
            .take(Type::DGRAM, is_udp, BoundTo::Inet(udp_addr))
            .is_some());
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
        let fd = l.into_raw_fd();
        let mut carried = Carried::new(
            vec![rec(fd, ListenerKind::Unix { path: path.clone() })],
            Vec::new(),
        );
        let other = dir.join("other");
        let any = |_: &ListenerKind| true;
        assert!(carried
            .take(Type::STREAM, any, BoundTo::Path(&other))
            .is_none());
        let taken = carried
            .take(Type::STREAM, any, BoundTo::Path(&path))
            .expect("the unix listener");
        assert!(taken.nonblocking().unwrap(), "non-blocking");
        close(fd);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_connection_is_taken_as_the_kind_it_says() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        let conn = |unix| ConnRec {
            fd: server.as_raw_fd(),
            unix,
            peer: String::new(),
            protocol: 0,
            authenticated: false,
            sasl: 0,
            login_pending: None,
            swallow: 0,
            close_after_write: false,
            repl_peer: 0,
            last_active: 0,
            input: Vec::new(),
            output: Vec::new(),
            proxy: None,
        };
        assert!(conn_socket(&conn(true)).is_none(), "not a unix socket");
        let taken = conn_socket(&conn(false)).expect("the connection");
        assert_ne!(taken.as_raw_fd(), server.as_raw_fd(), "a duplicate");
        assert!(taken.nonblocking().unwrap(), "non-blocking");
        drop(client);
    }
}
