//! What a quiesced server hands over to the image that runs next (t1-t3
//! of the sequence in `mod.rs`): `Started::quiesce` fills it.

use std::path::PathBuf;
use std::sync::Arc;

use osmium_store::Store;
use osmium_upgrade::{ConnRec, ListenerKind, ListenerRec, ReplQueueRec, WatcherRec};

use crate::transport::listen::Listener;

/// What a quiesced server hands over (t1-t3).
pub(crate) struct Quiesced {
    pub conns: Vec<ConnRec>,
    pub listeners: Vec<ListenerRec>,
    pub watchers: Vec<WatcherRec>,
    pub repl: Vec<ReplQueueRec>,
    pub counters: Vec<(String, u64)>,
    pub live: Vec<(String, String)>,
    pub store: Arc<Store>,
    /// Connections closed at the deadline.
    pub closed: u64,
}

/// What a listener is in the state; its fd stays open (the listener is
/// forgotten, not closed).
pub(crate) fn listener_rec(l: Listener) -> ListenerRec {
    use crate::settings::tls::ListenerTls;
    let fd = l.fd();
    let local = l.describe();
    let kind = match &l {
        Listener::Tcp(_) => ListenerKind::Tcp,
        Listener::Tls(_, mode, _) => ListenerKind::Tls {
            mode: match mode {
                ListenerTls::Off => 0,
                ListenerTls::Default => 1,
                ListenerTls::NoPeer => 2,
                ListenerTls::Peer => 3,
            },
        },
        Listener::Unix(_) => ListenerKind::Unix {
            path: PathBuf::from(&local),
        },
    };
    std::mem::forget(l);
    ListenerRec { fd, kind, local }
}

/// What a UDP socket is in the state; its fd stays open.
pub(crate) fn udp_rec(socket: std::net::UdpSocket) -> ListenerRec {
    use std::os::fd::IntoRawFd;
    let local = socket
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    ListenerRec {
        fd: socket.into_raw_fd(),
        kind: ListenerKind::Udp,
        local,
    }
}
