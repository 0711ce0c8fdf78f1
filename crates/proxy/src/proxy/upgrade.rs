//! The event loop's side of a binary upgrade (the sequence is
//! `crate::upgrade`'s): SIGUSR2 starts the check; once it passed, the
//! loop quiesces (no accept, no client read, no request framed, the
//! requests already sent answered); then `run` returns and
//! [`Proxy::hand_over`] gives up the listeners and the clients. In the
//! image that starts, [`Proxy::adopt`] takes the clients back, and
//! [`Proxy::restore`] the counters and the history.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Token;
use osmium_upgrade::{ConnRec, ListenerKind, ListenerRec, ProxyConnRec};

use super::{Proxy, CLIENT_BASE};
use crate::client::Client;
use crate::stream::{Listener, Stream};
use crate::upgrade::carried::conn_stream;
use crate::upgrade::check::{Checked, Checking};
use crate::upgrade::handover::HandOver;
use crate::upgrade::History;

/// How long the requests already sent may take to be answered at the
/// quiesce; a client still owed a reply then is closed.
const DRAIN: Duration = Duration::from_secs(2);

/// Where an upgrade is.
#[derive(Debug, Default)]
pub(super) enum Upgrading {
    /// None asked.
    #[default]
    Idle,
    /// The new binary's check runs.
    Checking(Checking),
    /// It passed: the loop quiesces until every client is owed nothing,
    /// or until the deadline.
    Quiescing(Box<Checked>, Instant),
}

impl Upgrading {
    pub(super) fn quiescing(&self) -> bool {
        matches!(self, Upgrading::Quiescing(..))
    }
}

/// How [`Proxy::run`] ended.
#[derive(Debug)]
pub enum Ran {
    /// A stop was asked (SIGINT, SIGTERM).
    Stopped,
    /// A new binary passed its check and the proxy is quiesced: to
    /// [`Proxy::hand_over`], then `upgrade::handover::exec`.
    Upgrade(Box<Checked>),
}

/// The counters carried across an upgrade, by name: `POOL.STAT` for a
/// pool's, and the proxy's reload counts.
const CARRIED_POOL_STATS: [&str; 8] = [
    "client_eof",
    "client_err",
    "server_ejects",
    "forward_error",
    "fragments",
    "moved_keys",
    "moved_bytes",
    "warm_reads",
];

impl Proxy {
    /// SIGUSR2 sets `flag`: an upgrade is asked.
    pub fn upgrade_on(&mut self, flag: Arc<AtomicBool>) {
        self.usr2 = Some(flag);
    }

    /// At a turn's start: an upgrade asked by SIGUSR2 starts its check.
    pub(super) fn upgrade_asked(&mut self) {
        if !self
            .usr2
            .as_ref()
            .is_some_and(|f| f.swap(false, Ordering::Relaxed))
        {
            return;
        }
        if !matches!(self.upgrading, Upgrading::Idle) {
            tracing::warn!("upgrade requested while one runs: ignored");
            return;
        }
        if let Some(why) = self.cannot_upgrade() {
            self.history.failures += 1;
            tracing::warn!("upgrade refused: {why}");
            return;
        }
        match Checking::begin(Arc::clone(&self.waker)) {
            Some(c) => self.upgrading = Upgrading::Checking(c),
            None => self.history.failures += 1,
        }
    }

    /// Why the proxy cannot be handed over now, if it cannot.
    fn cannot_upgrade(&self) -> Option<String> {
        let moving: Vec<&str> = self
            .pools
            .iter()
            .filter(|(_, s)| s.pool.is_moving())
            .map(|(_, s)| s.pool.cfg.name.as_str())
            .collect();
        (!moving.is_empty()).then(|| {
            format!(
                "keys are moving in pool {} (a reload changed its placement); try again once moved",
                moving.join(", ")
            )
        })
    }

    /// At a turn's end: a check that ended starts the quiesce (or is
    /// refused); a quiesce that is done ends the loop (Some).
    pub(super) fn upgrade_step(&mut self, now: Instant) -> Option<Box<Checked>> {
        match std::mem::take(&mut self.upgrading) {
            Upgrading::Idle => None,
            Upgrading::Checking(c) => {
                match c.outcome() {
                    None => self.upgrading = Upgrading::Checking(c),
                    Some(None) => self.history.failures += 1,
                    Some(Some(checked)) => match self.cannot_upgrade() {
                        Some(why) => {
                            self.history.failures += 1;
                            tracing::warn!("upgrade refused: {why}");
                        }
                        None => {
                            // A signal from here on waits for the image
                            // that serves next (which unblocks them once
                            // its handlers are installed).
                            osmium_upgrade::image::block_signals();
                            let waiting = self.clients.iter().filter(|(_, c)| c.waiting() > 0);
                            tracing::warn!(
                                "upgrade: quiescing: {} clients, {} owed replies",
                                self.clients.len(),
                                waiting.count()
                            );
                            self.upgrading = Upgrading::Quiescing(Box::new(checked), now + DRAIN);
                            return self.upgrade_step(now);
                        }
                    },
                }
                None
            }
            Upgrading::Quiescing(checked, deadline) => {
                let owed = self
                    .clients
                    .iter()
                    .filter(|(_, c)| c.waiting() > 0 || c.parked > 0)
                    .count();
                if owed == 0 || now >= deadline {
                    if owed > 0 {
                        tracing::warn!(
                            "upgrade: {owed} clients still owed replies at the drain deadline: closed"
                        );
                    }
                    let took = now.saturating_duration_since(deadline - DRAIN);
                    tracing::warn!("upgrade: quiesced in {:.1} ms", took.as_secs_f64() * 1000.0);
                    return Some(checked);
                }
                self.upgrading = Upgrading::Quiescing(checked, deadline);
                None
            }
        }
    }

    /// The quiesced proxy given up (t2 of `crate::upgrade`'s sequence):
    /// every listener and every plain client still owed nothing, as
    /// records whose fds stay open; the rest closed.
    pub fn hand_over(mut self) -> HandOver {
        let mut handed = HandOver {
            history: Some(self.history),
            counters: self.counters(),
            ..HandOver::default()
        };
        let registry = self.poll.registry();
        let keys: Vec<usize> = self.clients.iter().map(|(k, _)| k).collect();
        for key in keys {
            let mut c = self.clients.remove(key);
            let served = &self.pools[c.pool];
            let plain = matches!(c.stream, Stream::Tcp(_) | Stream::Unix(_));
            let owed = c.waiting() > 0 || c.parked > 0;
            // What the socket takes now leaves now.
            if !plain || owed || served.removed() || c.flush().is_err() {
                c.stream.close();
                c.stream.deregister(registry);
                handed.closed += 1;
                continue;
            }
            c.stream.deregister(registry);
            let peer = c.stream.peer();
            let output = c.take_output();
            let proxy = ProxyConnRec {
                pool: served.pool.cfg.name.clone(),
                binary: c.binary == Some(true),
                closing: c.closing,
                quit: c.quit,
                eof: c.eof,
            };
            let (fd, unix) = match c.stream {
                Stream::Tcp(s) => (std::os::fd::IntoRawFd::into_raw_fd(s), false),
                Stream::Unix(s) => (std::os::fd::IntoRawFd::into_raw_fd(s), true),
                Stream::Tls(_) => unreachable!("checked above"),
            };
            handed.conns.push(ConnRec {
                fd,
                unix,
                peer,
                protocol: 0,
                authenticated: false,
                sasl: 0,
                login_pending: None,
                swallow: 0,
                close_after_write: proxy.closing,
                repl_peer: 0,
                last_active: 0,
                input: c.inbuf.bytes().to_vec(),
                output,
                proxy: Some(proxy),
            });
        }
        for (_, served) in &mut self.pools {
            let Some(mut l) = served.listener.take() else {
                continue;
            };
            l.deregister(registry);
            let pool = served.pool.cfg.name.clone();
            let (fd, local) = match l {
                Listener::Tcp(l) => {
                    let local = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
                    (std::os::fd::IntoRawFd::into_raw_fd(l), local)
                }
                Listener::Unix(l, path) => (
                    std::os::fd::IntoRawFd::into_raw_fd(l),
                    path.display().to_string(),
                ),
            };
            handed.listeners.push(ListenerRec {
                fd,
                kind: ListenerKind::ProxyPool { pool },
                local,
            });
        }
        let stats = self.stats_port.into_listener(registry);
        let local = stats
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        handed.listeners.push(ListenerRec {
            fd: std::os::fd::IntoRawFd::into_raw_fd(stats),
            kind: ListenerKind::ProxyStats,
            local,
        });
        handed
    }

    /// The counters an upgrade carries (see [`CARRIED_POOL_STATS`]).
    fn counters(&self) -> Vec<(String, u64)> {
        let mut out = vec![
            ("reloads".to_string(), self.reloads),
            ("reload_failures".to_string(), self.reload_failures),
        ];
        for (_, s) in self.pools.iter().filter(|(_, s)| !s.removed()) {
            let st = &s.pool.stats;
            let values = [
                st.client_eof,
                st.client_err,
                st.server_ejects,
                st.forward_error,
                st.fragments,
                st.moved_keys,
                st.moved_bytes,
                st.warm_reads,
            ];
            for (name, v) in CARRIED_POOL_STATS.iter().zip(values) {
                out.push((format!("{}.{name}", s.pool.cfg.name), v));
            }
        }
        out
    }

    /// In the image an upgrade started (or the old one again): the
    /// history, the uptime from the first start and the counters the
    /// state carries.
    pub fn restore(&mut self, history: History, counters: &[(String, u64)]) {
        self.history = history;
        let up = crate::counters::now_secs().saturating_sub(history.first_start.max(0) as u64);
        if let Some(t) = Instant::now().checked_sub(Duration::from_secs(up)) {
            self.started = t;
        }
        for (name, v) in counters {
            match name.as_str() {
                "reloads" => self.reloads = *v,
                "reload_failures" => self.reload_failures = *v,
                _ => {}
            }
        }
        for (_, s) in &mut self.pools {
            s.pool.stats.reloads = self.reloads;
            s.pool.stats.reload_failures = self.reload_failures;
            let prefix = format!("{}.", s.pool.cfg.name);
            for (name, v) in counters {
                let Some(stat) = name.strip_prefix(&prefix) else {
                    continue;
                };
                let st = &mut s.pool.stats;
                let field = match stat {
                    "client_eof" => &mut st.client_eof,
                    "client_err" => &mut st.client_err,
                    "server_ejects" => &mut st.server_ejects,
                    "forward_error" => &mut st.forward_error,
                    "fragments" => &mut st.fragments,
                    "moved_keys" => &mut st.moved_keys,
                    "moved_bytes" => &mut st.moved_bytes,
                    "warm_reads" => &mut st.warm_reads,
                    _ => continue,
                };
                *field = *v;
            }
        }
    }

    /// Takes the clients an upgrade carried: each joins the pool of its
    /// name (a plain one: a pool now TLS, or gone, closes it), with its
    /// unread input and unsent output, served at the loop's first turn.
    /// How many were adopted.
    pub fn adopt(&mut self, conns: Vec<ConnRec>) -> usize {
        let mut adopted = 0;
        for rec in conns {
            let Some(p) = &rec.proxy else { continue };
            let slot = self
                .pools
                .iter()
                .find(|(_, s)| !s.removed() && s.listen_tls.is_none() && s.pool.cfg.name == p.pool)
                .map(|(slot, _)| slot);
            let (Some(slot), Some(stream)) = (slot, conn_stream(&rec)) else {
                tracing::warn!(
                    "upgrade: client {} of pool {} closed (no plain pool of that name)",
                    rec.peer,
                    p.pool
                );
                continue;
            };
            let id = self.next_id;
            self.next_id += 1;
            let mut c = Client::new(stream, slot, id);
            c.binary = p.binary.then_some(true);
            c.closing = p.closing;
            c.quit = p.quit;
            c.eof = p.eof;
            c.inbuf.extend(&rec.input);
            c.set_output(rec.output);
            let entry = self.clients.vacant_entry();
            let key = entry.key();
            if c.stream
                .register(self.poll.registry(), Token(CLIENT_BASE + key))
                .is_err()
            {
                continue;
            }
            entry.insert(c);
            self.pools[slot].pool.stats.client_connections += 1;
            self.opened += 1;
            self.resume.push(key);
            adopted += 1;
        }
        adopted
    }
}
