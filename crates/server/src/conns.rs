//! The registry of open sockets behind `stats conns`: listening sockets,
//! UDP sockets and client connections, by descriptor, as memcached lists
//! them.
//!
//! An entry is added when a socket opens and removed when it closes (never
//! per request); a client's last-command time and state are atomics the
//! owning worker updates, so listing every connection takes one short lock.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use crate::compose::stat_rows::{stat, StatRows};

/// What kind of socket an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A TCP listening socket.
    ListenTcp { local: Option<SocketAddr> },
    /// A unix-domain listening socket.
    ListenUnix,
    /// A worker's UDP socket.
    Udp { local: Option<SocketAddr> },
    /// A TCP client.
    Tcp {
        remote: Option<SocketAddr>,
        local: Option<SocketAddr>,
    },
    /// A unix-domain client.
    Unix,
}

/// A client connection's state, as `stats conns` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// Waiting for a request.
    Waiting = 0,
    /// Running requests.
    Parsing = 1,
    /// Reading a data block.
    ReadingValue = 2,
    /// Sending replies the socket did not take yet.
    Writing = 3,
    /// A log watcher (`watch`).
    Watching = 4,
}

impl State {
    fn name(v: u8) -> &'static str {
        match v {
            1 => "conn_parse_cmd",
            2 => "conn_nread",
            3 => "conn_mwrite",
            4 => "conn_watch",
            _ => "conn_waiting",
        }
    }
}

/// What a worker updates about one of its clients.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    /// Relative time of the last request.
    pub last_cmd: AtomicU32,
    state: AtomicU8,
}

impl Activity {
    #[inline]
    pub(crate) fn set_state(&self, s: State) {
        self.state.store(s as u8, Ordering::Relaxed);
    }
}

struct Entry {
    kind: Kind,
    activity: Option<Arc<Activity>>,
    /// A listening socket whose clients speak TLS.
    tls: bool,
}

/// Every open socket, by descriptor.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<BTreeMap<i32, Entry>>,
}

impl Registry {
    /// Records a listening or UDP socket.
    pub(crate) fn add_server_socket(&self, fd: i32, kind: Kind) {
        self.add_listener(fd, kind, false);
    }

    /// Records a listening socket, `tls` if its clients speak TLS.
    pub(crate) fn add_listener(&self, fd: i32, kind: Kind, tls: bool) {
        self.lock().insert(
            fd,
            Entry {
                kind,
                activity: None,
                tls,
            },
        );
    }

    /// Open clients per listening socket: (its address, or `unix:<path>`;
    /// whether it is TLS; how many clients). A TCP client belongs to the
    /// listener of its local port (and address, unless the listener's is
    /// a wildcard).
    pub(crate) fn clients_by_listener(
        &self,
        socket_path: Option<&str>,
    ) -> Vec<(String, bool, u64)> {
        let entries = self.lock();
        let mut out = Vec::new();
        for e in entries.values() {
            let count = match e.kind {
                Kind::ListenTcp { local: Some(l) } => entries
                    .values()
                    .filter(|c| match c.kind {
                        Kind::Tcp { local: Some(a), .. } => {
                            a.port() == l.port() && (l.ip().is_unspecified() || a.ip() == l.ip())
                        }
                        _ => false,
                    })
                    .count(),
                Kind::ListenUnix => entries.values().filter(|c| c.kind == Kind::Unix).count(),
                _ => continue,
            };
            let name = match e.kind {
                Kind::ListenTcp { local: Some(l) } => l.to_string(),
                _ => format!("unix:{}", socket_path.unwrap_or_default()),
            };
            out.push((name, e.tls, count as u64));
        }
        out
    }

    /// Records a client connection; the worker keeps the returned activity
    /// up to date.
    pub(crate) fn add_client(&self, fd: i32, kind: Kind, now: u32) -> Arc<Activity> {
        let activity = Arc::new(Activity::default());
        activity.last_cmd.store(now, Ordering::Relaxed);
        self.lock().insert(
            fd,
            Entry {
                kind,
                activity: Some(activity.clone()),
                tls: false,
            },
        );
        activity
    }

    pub(crate) fn remove(&self, fd: i32) {
        self.lock().remove(&fd);
    }

    /// Who is at the other end of client `fd`, for a log line.
    pub(crate) fn remote(&self, fd: i32) -> String {
        match self.lock().get(&fd).map(|e| e.kind) {
            Some(Kind::Tcp {
                remote: Some(a), ..
            }) => a.to_string(),
            Some(Kind::Unix) => "a unix-socket client".into(),
            _ => format!("connection {fd}"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `stats conns`: every socket in descriptor order; `asking` is the
    /// descriptor of the connection that asked (shown parsing).
    pub(crate) fn write_stats(
        &self,
        now: u32,
        asking: i32,
        socket_path: Option<&str>,
        out: &mut StatRows,
    ) {
        let addr = |proto: &str, a: Option<SocketAddr>| match a {
            Some(SocketAddr::V4(a)) => format!("{proto}:{}:{}", a.ip(), a.port()),
            Some(SocketAddr::V6(a)) => format!("{proto}6:[{}]:{}", a.ip(), a.port()),
            None => "?:<AF 0>".to_string(),
        };
        let unix = || format!("unix:{}", socket_path.unwrap_or_default());
        for (&fd, e) in self.lock().iter() {
            let (remote, listen, state) = match e.kind {
                Kind::ListenTcp { local } => (addr("tcp", local), None, "conn_listening"),
                Kind::ListenUnix => (unix(), None, "conn_listening"),
                Kind::Udp { local } => {
                    stat(out, &format!("{fd}:UDP"), "UDP");
                    (addr("udp", local), None, "conn_read")
                }
                Kind::Tcp { remote, local } => (addr("tcp", remote), Some(addr("tcp", local)), ""),
                Kind::Unix => ("?:<AF 0>".to_string(), Some(unix()), ""),
            };
            let (state, last) = match &e.activity {
                Some(a) => {
                    let s = if fd == asking {
                        "conn_parse_cmd"
                    } else {
                        State::name(a.state.load(Ordering::Relaxed))
                    };
                    (s, a.last_cmd.load(Ordering::Relaxed))
                }
                None => (state, now),
            };
            stat(out, &format!("{fd}:addr"), remote);
            if let Some(listen) = listen {
                stat(out, &format!("{fd}:listen_addr"), listen);
            }
            stat(out, &format!("{fd}:state"), state);
            stat(
                out,
                &format!("{fd}:secs_since_last_cmd"),
                now.saturating_sub(last),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_socket_in_descriptor_order() {
        let r = Registry::default();
        let local: SocketAddr = "127.0.0.1:11211".parse().unwrap();
        let remote: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        r.add_server_socket(7, Kind::ListenTcp { local: Some(local) });
        let a = r.add_client(
            12,
            Kind::Tcp {
                remote: Some(remote),
                local: Some(local),
            },
            100,
        );
        r.add_client(
            9,
            Kind::Tcp {
                remote: Some(remote),
                local: Some(local),
            },
            90,
        );
        a.set_state(State::Waiting);
        let mut out = StatRows::new();
        r.write_stats(105, 9, None, &mut out);
        let text = out.text();
        let fds: Vec<&str> = text
            .lines()
            .map(|l| l.split(':').next().unwrap().trim_start_matches("STAT "))
            .collect();
        assert_eq!(fds[0], "7");
        assert!(text.contains("STAT 7:state conn_listening\r\n"));
        assert!(text.contains("STAT 9:state conn_parse_cmd\r\n"));
        assert!(text.contains("STAT 9:secs_since_last_cmd 15\r\n"));
        assert!(text.contains("STAT 12:state conn_waiting\r\n"));
        assert!(text.contains("STAT 12:listen_addr tcp:127.0.0.1:11211\r\n"));
        r.remove(12);
        let mut out = StatRows::new();
        r.write_stats(105, 9, None, &mut out);
        assert!(!out.text().contains("12:"));
    }
}
