//! A reload's change to a running pool ([`Pool::reconfigure`]): servers
//! matched by name keep their slot, connections, queued requests and
//! health; new servers get new slots; a removed server leaves the ring at
//! once but keeps its connections until every request queued on them is
//! answered ([`Pool::reap`] then closes them and frees the slot). The
//! ring is rebuilt for the new list; when the placement changed, the old
//! ring goes to [`Pool::ring_changed`], which starts a warm move (`moving`).

use std::collections::HashMap;

use mio::Registry;

use super::{split_tls, Conn, Pool, Server, MAX_SLOTS};
use crate::config::PoolConfig;
use crate::counters::ServerStats;
use crate::ring::Ring;
use crate::tls::ServersContext;

/// The placement a reload replaced: what a warm move from it needs.
#[derive(Debug)]
pub struct RingChange {
    /// The pool's configuration before the reload.
    pub old_cfg: PoolConfig,
    /// The ring before the reload.
    pub old_ring: Ring,
    /// The slot of each server of the old `servers:` (old ring index →
    /// slot; see [`Pool::order`] for the new one).
    pub old_order: Vec<usize>,
    /// Old slot → new slot of the server of the same name (a kept server
    /// keeps its slot; one whose address changed has a new slot). A
    /// removed server's slot is not in it.
    pub by_name: HashMap<usize, usize>,
}

/// What [`Pool::reconfigure`] changed, by server name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reconfigured {
    /// Servers added.
    pub added: Vec<String>,
    /// Servers removed.
    pub removed: Vec<String>,
    /// Kept servers whose weight changed.
    pub reweighted: Vec<String>,
    /// Whether the placement changed (servers, weights, order, hash,
    /// `hash_tag`, distribution).
    pub ring_changed: bool,
}

/// Whether `a` and `b` place keys alike.
fn same_placement(a: &PoolConfig, b: &PoolConfig) -> bool {
    let servers = |p: &PoolConfig| {
        p.servers
            .iter()
            .map(|s| (s.name.clone(), s.weight, s.addr.clone()))
            .collect::<Vec<_>>()
    };
    a.hash == b.hash
        && a.hash_tag == b.hash_tag
        && a.distribution == b.distribution
        && servers(a) == servers(b)
}

/// Closes one connection (no request is queued on it).
fn close_conn(registry: &Registry, conn: &mut Conn, stats: &mut ServerStats) {
    if let Some(mut link) = conn.link.take() {
        let _ = registry.deregister(&mut link);
        if conn.connected {
            stats.server_connections = stats.server_connections.saturating_sub(1);
        }
    }
    conn.connected = false;
}

impl Pool {
    /// Whether `cfg`'s servers fit the pool's slots beside the removed
    /// ones still draining.
    pub fn fits(&self, cfg: &PoolConfig) -> Result<(), String> {
        let kept = cfg
            .servers
            .iter()
            .filter(|s| {
                self.order.iter().any(|&o| {
                    self.servers[o].cfg.name == s.name && self.servers[o].cfg.addr == s.addr
                })
            })
            .count();
        let need = self.servers.len() + cfg.servers.len() - kept;
        if need > MAX_SLOTS {
            return Err(format!(
                "pool '{}': {need} servers with those still draining, at most {MAX_SLOTS}",
                cfg.name
            ));
        }
        Ok(())
    }

    /// TLS for a peer connection to the server in slot `slot`
    /// (`peer::connect_peer_with`): the pool's `tls.servers`
    /// configuration and the server's name; None without `tls.servers`.
    pub fn peer_tls(&self, slot: usize) -> Option<crate::peer::PeerTls> {
        let server = self.servers.get(slot)?;
        Some(crate::peer::PeerTls {
            config: self.tls.clone()?,
            name: server.tls_name.clone()?,
        })
    }

    /// Takes the pool's new configuration (same name). Requests already
    /// queued keep their server and connection; the ring is rebuilt for
    /// the new list; new connections of a `tls.servers` pool use `tls`.
    pub fn reconfigure(&mut self, cfg: PoolConfig, tls: Option<ServersContext>) -> Reconfigured {
        let (tls, mut names) = split_tls(tls, cfg.servers.len());
        let mut report = Reconfigured {
            ring_changed: !same_placement(&self.cfg, &cfg),
            ..Reconfigured::default()
        };
        let mut current: HashMap<String, usize> = self
            .order
            .iter()
            .map(|&s| (self.servers[s].cfg.name.clone(), s))
            .collect();
        let old_order = std::mem::take(&mut self.order);
        let mut by_name = HashMap::new();
        let connections = 2 * cfg.server_connections as usize;
        for (i, sc) in cfg.servers.iter().enumerate() {
            let same = current.get(&sc.name).copied();
            let slot = match same.filter(|&s| self.servers[s].cfg.addr == sc.addr) {
                Some(slot) => {
                    current.remove(&sc.name);
                    let server = &mut self.servers[slot];
                    if server.cfg.weight != sc.weight {
                        report.reweighted.push(sc.name.clone());
                    }
                    server.cfg = sc.clone();
                    server.pos = Some(i);
                    server.tls_name = names[i].take();
                    if server.conns.len() < connections {
                        server.conns.resize_with(connections, Conn::default);
                    }
                    slot
                }
                None => {
                    report.added.push(sc.name.clone());
                    let server =
                        Server::new(sc.clone(), i, names[i].take(), cfg.server_connections);
                    self.servers.insert(server)
                }
            };
            if let Some(old) = same {
                by_name.insert(old, slot);
            }
            self.order.push(slot);
        }
        // What is left was removed (or moved to another address): out of
        // the ring now, closed once drained.
        let mut removed: Vec<(String, usize)> = current.into_iter().collect();
        removed.sort_by_key(|(_, s)| old_order.iter().position(|o| o == s));
        for (name, slot) in removed {
            self.servers[slot].pos = None;
            report.removed.push(name);
        }
        self.draining = true;
        let old_cfg = std::mem::replace(&mut self.cfg, cfg);
        self.tls = tls;
        if report.ring_changed {
            let old_ring = std::mem::replace(&mut self.ring, Ring::new(&self.cfg));
            self.rebuild();
            self.ring_changed(RingChange {
                old_cfg,
                old_ring,
                old_order,
                by_name,
            });
        } else {
            self.rebuild();
        }
        report
    }

    /// Where a warm move from the previous ring starts (with
    /// `warm_moves: true`, see `moving`). Without, the old ring is
    /// forgotten (a running move given up), and a key whose owner changed
    /// misses on its new owner, as after a nutcracker restart with the new
    /// file.
    pub fn ring_changed(&mut self, change: RingChange) {
        if self.cfg.warm_moves {
            self.start_move(change);
        } else {
            self.abandon_move("warm_moves: false");
        }
    }

    /// Closes what reloads left draining once it is idle: removed servers
    /// with nothing queued (their slots freed), and connections past
    /// `server_connections` with nothing queued.
    pub fn reap(&mut self, registry: &Registry) {
        if !self.draining {
            return;
        }
        let per = 2 * self.cfg.server_connections as usize;
        let mut gone = Vec::new();
        let mut left = false;
        for (s, server) in self.servers.iter_mut() {
            if server.pos.is_none() {
                // Kept while a move may read from it or copy from it.
                if server.busy() || self.moving.is_some() {
                    left = true;
                } else {
                    gone.push(s);
                }
                continue;
            }
            if server.conns.len() > per {
                let Server { conns, stats, .. } = server;
                for conn in conns[per..].iter_mut().filter(|c| c.pending.is_empty()) {
                    close_conn(registry, conn, stats);
                }
                if conns[per..].iter().all(|c| c.link.is_none()) {
                    conns.truncate(per);
                } else {
                    left = true;
                }
            }
        }
        for s in gone {
            let mut server = self.servers.remove(s);
            tracing::debug!(
                "pool {}: removed server {} drained, closed",
                self.cfg.name,
                server.cfg.name
            );
            let Server { conns, stats, .. } = &mut server;
            for conn in conns.iter_mut() {
                close_conn(registry, conn, stats);
            }
        }
        self.draining = left;
    }

    /// Whether no request is queued on any of the pool's servers.
    pub fn idle(&self) -> bool {
        self.servers.iter().all(|(_, s)| !s.busy())
    }

    /// Closes every server connection (a pool a reload removed, once its
    /// clients are gone).
    pub fn close_all(&mut self, registry: &Registry) {
        for (_, server) in self.servers.iter_mut() {
            let Server { conns, stats, .. } = server;
            for conn in conns.iter_mut() {
                close_conn(registry, conn, stats);
            }
        }
    }
}
