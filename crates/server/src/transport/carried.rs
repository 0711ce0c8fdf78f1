//! The server's side of the sockets a binary upgrade carried across the
//! exec (`osmium_upgrade::carried`): the listener a command line's TCP,
//! UDP or unix address takes instead of binding, so that the socket stays
//! the same one from the first start on and a connection that arrives
//! while the process is between two images waits in its backlog (none is
//! refused); and a carried client connection as a worker's stream
//! (`conn_stream`), dealt to the workers with its session's state.

use std::net::SocketAddr;
use std::path::Path;

pub(crate) use osmium_upgrade::carried::{close_state_fds, Carried};
use osmium_upgrade::carried::{conn_socket, BoundTo};
use osmium_upgrade::{ConnRec, ListenerKind};
use socket2::{Socket, Type};

use super::stream::Stream;

/// The carried TCP listener (TLS or not: the command line says which)
/// bound to `addr`.
pub(crate) fn take_tcp(carried: &mut Carried, addr: SocketAddr) -> Option<Socket> {
    carried.take(
        Type::STREAM,
        |kind| matches!(kind, ListenerKind::Tcp | ListenerKind::Tls { .. }),
        BoundTo::Inet(addr),
    )
}

/// The carried UDP socket bound to `addr`.
pub(crate) fn take_udp(carried: &mut Carried, addr: SocketAddr) -> Option<Socket> {
    carried.take(
        Type::DGRAM,
        |kind| matches!(kind, ListenerKind::Udp),
        BoundTo::Inet(addr),
    )
}

/// The carried unix listener bound to `path`.
pub(crate) fn take_unix(carried: &mut Carried, path: &Path) -> Option<Socket> {
    carried.take(
        Type::STREAM,
        |kind| matches!(kind, ListenerKind::Unix { path: p } if p == path),
        BoundTo::Path(path),
    )
}

/// The connection `rec` names as a worker's stream (a duplicate, TCP
/// with no delay); None when its fd is not a connected stream socket of
/// the kind it says (the connection then ends with the state's fd).
pub(crate) fn conn_stream(rec: &ConnRec) -> Option<Stream> {
    let sock = conn_socket(rec)?;
    Some(if rec.unix {
        let unix: std::os::unix::net::UnixStream = sock.into();
        Stream::Unix(mio::net::UnixStream::from_std(unix))
    } else {
        let _ = sock.set_nodelay(true);
        let tcp: std::net::TcpStream = sock.into();
        Stream::Tcp(mio::net::TcpStream::from_std(tcp))
    })
}
