//! A pool's warm move at run time (see `crate::moves` for the rules and
//! the invariant): started where a reload changed the ring
//! ([`Pool::start_move`]; a reload while a move runs starts a move from
//! the whole chain of rings, the running one stopped), its migration
//! thread spawned once every request queued before the switch has been
//! answered, requests routed by [`Pool::move_route`] (warm reads to the
//! slot of the key's source, once the source is known reachable), parked
//! requests sent once their key's copy is done, removed servers kept (for
//! warm reads and the migration) until the move ends
//! ([`Pool::move_tick`]). With `tls.servers` the migration speaks TLS to
//! the servers, each verified against the name the pool's own
//! connections use.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use mio::{Registry, Waker};
use rustls_pki_types::ServerName;

use super::{Delivery, Dest, Health, Pool, RingChange};
use crate::config::Addr;
use crate::moves::chain::{DOWN, UNKNOWN, UP};
use crate::moves::conn::MigrationTls;
use crate::moves::migrate::{self, Plan};
use crate::moves::{key_hash, Kind, Move, Progress, Reach, Route};
use crate::reply::Expect;

/// A request held until its key is copied.
#[derive(Debug)]
pub struct Parked {
    /// Its key.
    pub key: Vec<u8>,
    /// Its bytes, to send.
    pub wire: Vec<u8>,
    /// The shape of its reply.
    pub expect: Expect,
    /// Where its reply goes.
    pub dest: Dest,
}

/// A move in progress.
#[derive(Debug)]
pub(crate) struct Moving {
    mv: Move,
    /// Source index → the slot of that server (warm reads go there).
    slots: Vec<Option<usize>>,
    /// Whether each source is reachable (the migration finds out).
    reach: Arc<Reach>,
    started: Instant,
    /// Connections with requests queued before the switch, and the byte
    /// mark those requests end at.
    before: Vec<(usize, usize, u64)>,
    plan: Option<PlanParts>,
    thread: Option<std::thread::JoinHandle<()>>,
    progress: Arc<Progress>,
    /// The progress of the moves this one replaced (their threads may
    /// still finish a batch).
    replaced: Vec<Arc<Progress>>,
    priority: Sender<Vec<u8>>,
    copied: Receiver<u64>,
    parked: HashMap<u64, Vec<Parked>>,
    /// `moved_keys` and `moved_bytes` of the moves before this chain (the
    /// stats count over the proxy's life, as every other figure does).
    base: (u64, u64),
}

/// What the thread is given when it starts.
#[derive(Debug)]
struct PlanParts {
    priority: Receiver<Vec<u8>>,
    copied: Sender<u64>,
    tls: Option<MigrationTls>,
    /// The migration of the move this one replaced, to wait for.
    replaced: Option<std::thread::JoinHandle<()>>,
}

/// Where a keyed request goes during a move.
pub enum MoveRoute {
    /// As usual.
    Usual,
    /// To this slot (a warm read from the key's source).
    Slot(usize),
    /// Parked until its copy.
    Park,
}

impl Moving {
    fn moved(&self) -> (u64, u64) {
        let all = self.replaced.iter().chain([&self.progress]);
        all.fold(self.base, |(k, b), p| {
            (k + p.moved_keys(), b + p.moved_bytes())
        })
    }

    /// Stops the move (a newer one replaces it, or it is given up): its
    /// thread stops at its next batch; its parked requests go back.
    fn stop(&mut self) -> Vec<Parked> {
        self.progress
            .cancel
            .store(true, std::sync::atomic::Ordering::Relaxed);
        std::mem::take(&mut self.parked)
            .into_values()
            .flatten()
            .collect()
    }
}

impl Pool {
    /// Starts a warm move from `change` (with `warm_moves`): from the
    /// old ring, or, when a move is running, from every ring of its chain
    /// (that move stopped, see `crate::moves`). Not done for the `random`
    /// distribution (no key has an owner): a running move is given up.
    pub(super) fn start_move(&mut self, change: RingChange) {
        let name = self.cfg.name.clone();
        let mut prev = self.moving.take();
        if prev.is_none() {
            // A pool that never reached its old servers (started with
            // placeholders, say) has nothing to move.
            let unreached = change.old_order.iter().all(|&slot| {
                self.servers
                    .get(slot)
                    .is_none_or(|s| s.pos.is_none() && !s.ever_connected)
            });
            if unreached {
                return;
            }
        }
        let mv = match &prev {
            Some(p) => p.mv.then(&self.cfg),
            None => Move::new(&change.old_cfg, &self.cfg),
        };
        let Some(mv) = mv else {
            if let Some(p) = &mut prev {
                p.mv.settled.abandon();
            }
            self.give_up(prev, "the pool's distribution has no owners (random)");
            return;
        };
        let (replaced_thread, replaced, base) = match &mut prev {
            Some(p) => {
                tracing::info!(
                    "pool {name}: ring changed again while moving: a move from every ring \
                     since the pool last stood still starts (the running one stops)"
                );
                let parked = p.stop();
                self.requeue.extend(parked);
                let thread = p
                    .thread
                    .take()
                    .or_else(|| p.plan.take().and_then(|x| x.replaced));
                let mut replaced = std::mem::take(&mut p.replaced);
                replaced.push(p.progress.clone());
                (thread, replaced, p.base)
            }
            None => (
                None,
                Vec::new(),
                (self.stats.moved_keys, self.stats.moved_bytes),
            ),
        };
        let slots: Vec<Option<usize>> = mv.sources.iter().map(|s| self.slot_of(&s.addr)).collect();
        let reach = Reach::new(slots.iter().enumerate().map(|(i, slot)| {
            let known = prev.as_ref().is_some_and(|p| p.reach.get(i) == UP);
            let up = slot
                .and_then(|s| self.servers.get(s))
                .is_some_and(|s| s.pos.is_some() || s.conns.iter().any(|c| c.connected));
            if known || up {
                UP
            } else {
                UNKNOWN
            }
        }));
        let tls = self.tls.as_ref().map(|config| MigrationTls {
            // Every handshake a full one: a ticket one server issued is
            // not offered to another of the same name (osmium answers
            // such a resumption with an internal-error alert).
            config: {
                let mut c = (**config).clone();
                c.resumption = rustls::client::Resumption::disabled();
                Arc::new(c)
            },
            names: mv
                .sources
                .iter()
                .zip(&slots)
                .map(|(s, slot)| self.tls_name_of(&s.addr, *slot))
                .collect(),
        });
        let mut before = Vec::new();
        for (s, server) in self.servers.iter() {
            for (c, conn) in server.conns.iter().enumerate() {
                if !conn.pending.is_empty() {
                    before.push((s, c, conn.queued_bytes));
                }
            }
        }
        let (ptx, prx) = mpsc::channel();
        let (ctx, crx) = mpsc::channel();
        tracing::info!(
            "pool {name}: warm move started ({} servers before, {} now{})",
            change.old_order.len(),
            self.order.len(),
            if mv.depth() > 1 {
                format!(", from {} rings", mv.depth())
            } else {
                String::new()
            }
        );
        self.stats.migrating = 1;
        self.moving = Some(Moving {
            mv,
            slots,
            reach: Arc::new(reach),
            started: Instant::now(),
            before,
            plan: Some(PlanParts {
                priority: prx,
                copied: ctx,
                tls,
                replaced: replaced_thread,
            }),
            thread: None,
            progress: Arc::default(),
            replaced,
            priority: ptx,
            copied: crx,
            parked: HashMap::new(),
            base,
        });
    }

    /// Gives up the running move, if any (a reload to `warm_moves: false`
    /// or a `random` distribution): its keys not yet copied miss, as after
    /// a plain reload.
    pub(super) fn abandon_move(&mut self, why: &str) {
        let prev = self.moving.take();
        if let Some(p) = &prev {
            p.mv.settled.abandon();
        }
        self.give_up(prev, why);
    }

    fn give_up(&mut self, prev: Option<Moving>, why: &str) {
        let Some(mut p) = prev else {
            return;
        };
        tracing::warn!(
            "pool {}: the running warm move is given up ({why}): its keys not yet copied miss",
            self.cfg.name
        );
        let parked = p.stop();
        self.requeue.extend(parked);
        let (keys, bytes) = p.moved();
        self.stats.moved_keys = keys;
        self.stats.moved_bytes = bytes;
        self.stats.migrating = 0;
        self.draining = true;
    }

    /// The slot of the server at `addr`: the configured one, else a
    /// removed one still kept.
    fn slot_of(&self, addr: &Addr) -> Option<usize> {
        let configured = self
            .order
            .iter()
            .copied()
            .find(|&s| self.servers[s].cfg.addr == *addr);
        configured.or_else(|| {
            self.servers
                .iter()
                .find(|(_, s)| s.cfg.addr == *addr)
                .map(|(slot, _)| slot)
        })
    }

    /// The name a server's certificate is verified against: its slot's,
    /// else as `tls::context` names servers (`server_name`, or the host).
    fn tls_name_of(&self, addr: &Addr, slot: Option<usize>) -> Option<ServerName<'static>> {
        if let Some(n) = slot.and_then(|s| self.servers.get(s)?.tls_name.clone()) {
            return Some(n);
        }
        let configured = self.cfg.tls.servers.as_ref()?.server_name.clone();
        let name = match (configured, addr) {
            (Some(n), _) => n,
            (None, Addr::Tcp { host, .. }) => host.clone(),
            (None, Addr::Unix(_)) => return None,
        };
        ServerName::try_from(name).ok()
    }

    /// Whether the pool is moving.
    pub fn is_moving(&self) -> bool {
        self.moving.is_some()
    }

    /// Where a request of `kind` for `key` goes (usual when not moving).
    pub fn move_route(&mut self, key: &[u8], kind: Kind) -> MoveRoute {
        let Some(m) = &self.moving else {
            return MoveRoute::Usual;
        };
        match m.mv.route(key, kind) {
            Route::New => MoveRoute::Usual,
            Route::Park => MoveRoute::Park,
            Route::Old(i) => {
                let slot = m.slots.get(i).copied().flatten();
                // Not known unreachable: a removed server the proxy had no
                // connection to gets one (its copy is the latest; the new
                // owner may hold a stale one).
                let usable = m.reach.get(i) != DOWN
                    && slot
                        .and_then(|s| self.servers.get(s))
                        .is_some_and(|s| !self.cfg.auto_eject_hosts || s.health == Health::Up);
                if let (true, Some(slot)) = (usable, slot) {
                    self.stats.warm_reads += 1;
                    MoveRoute::Slot(slot)
                } else {
                    // The old owner is down: the new owner is the best left.
                    MoveRoute::Usual
                }
            }
        }
    }

    /// Holds `p` until its key is copied (asks the migration for it).
    pub fn park(&mut self, p: Parked) {
        let Some(m) = &mut self.moving else {
            self.requeue.push(p);
            return;
        };
        let h = key_hash(&p.key);
        let list = m.parked.entry(h).or_default();
        if list.is_empty() {
            let _ = m.priority.send(p.key.clone());
        }
        list.push(p);
    }

    /// The move's turn: starts the migration once the requests from
    /// before the switch are answered, sends the parked requests whose
    /// keys are copied (their clients are added to `released`), and ends
    /// the move when the migration is done. `released`: the clients (slab key,
    /// generation) whose parked requests went.
    pub fn move_tick(
        &mut self,
        registry: &Registry,
        waker: &Arc<Waker>,
        now: Instant,
        out: &mut Vec<Delivery>,
        released: &mut Vec<(usize, u64)>,
    ) {
        let mut ready = std::mem::take(&mut self.requeue);
        let mut ended = false;
        if let Some(m) = &mut self.moving {
            if m.plan.is_some() {
                let servers = &self.servers;
                m.before.retain(|&(s, c, mark)| {
                    servers
                        .get(s)
                        .and_then(|sv| sv.conns.get(c))
                        .and_then(|conn| conn.pending.front())
                        .is_some_and(|p| p.end <= mark)
                });
                if m.before.is_empty() {
                    let parts = m.plan.take().unwrap();
                    let plan = Plan {
                        mv: m.mv.clone(),
                        new: self.cfg.clone(),
                        tls: parts.tls,
                        reach: m.reach.clone(),
                        progress: m.progress.clone(),
                        priority: parts.priority,
                        copied: parts.copied,
                        waker: Some(waker.clone()),
                        replaced: parts.replaced,
                    };
                    match migrate::spawn(plan) {
                        Ok(h) => m.thread = Some(h),
                        Err(e) => {
                            tracing::error!("pool {}: migration not started: {e}", self.cfg.name);
                            m.progress
                                .done
                                .store(true, std::sync::atomic::Ordering::Release);
                        }
                    }
                }
            }
            while let Ok(h) = m.copied.try_recv() {
                if let Some(list) = m.parked.remove(&h) {
                    ready.extend(list);
                }
            }
            (self.stats.moved_keys, self.stats.moved_bytes) = m.moved();
            ended = m.plan.is_none() && m.progress.is_done();
        }
        if ended {
            let mut m = self.moving.take().unwrap();
            if let Some(h) = m.thread.take() {
                let _ = h.join();
            }
            ready.extend(std::mem::take(&mut m.parked).into_values().flatten());
            self.stats.migrating = 0;
            (self.stats.moved_keys, self.stats.moved_bytes) = m.moved();
            self.draining = true;
            tracing::info!(
                "pool {}: warm move done: {} keys, {} bytes copied in {:.1} s",
                self.cfg.name,
                m.progress.moved_keys(),
                m.progress.moved_bytes(),
                m.started.elapsed().as_secs_f64()
            );
        }
        for p in ready {
            if let Dest::Client { key, id, .. } = p.dest {
                released.push((key, id));
            }
            // Routed again: another change may have come meanwhile.
            match self.move_route(&p.key, Kind::Other) {
                MoveRoute::Park => self.park(p),
                MoveRoute::Slot(s) => self.send(registry, s, &p.wire, p.expect, p.dest, now, out),
                MoveRoute::Usual => match self.route(&p.key) {
                    Some(s) => self.send(registry, s, &p.wire, p.expect, p.dest, now, out),
                    None => out.push(Delivery {
                        dest: p.dest,
                        result: Err("no server is available".into()),
                    }),
                },
            }
        }
    }
}
