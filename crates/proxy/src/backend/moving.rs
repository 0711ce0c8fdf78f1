//! A pool's warm move at run time (see `crate::moves` for the rules):
//! started where a reload changed the ring ([`Pool::start_move`]), its
//! migration thread spawned once every request queued before the switch
//! has been answered, requests routed by [`Pool::move_route`], parked
//! requests sent once their key's copy is done, removed servers kept
//! (for warm reads and the migration) until the move ends
//! ([`Pool::move_tick`]).

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use mio::{Registry, Waker};

use super::{Delivery, Dest, Health, Pool, RingChange};
use crate::moves::migrate::{self, Plan};
use crate::moves::{key_hash, Kind, Move, Progress, Route};
use crate::reply::Expect;

/// A request held until its key is copied.
#[derive(Debug)]
pub struct Parked {
    pub key: Vec<u8>,
    pub wire: Vec<u8>,
    pub expect: Expect,
    pub dest: Dest,
}

/// A move in progress.
#[derive(Debug)]
pub struct Moving {
    mv: Move,
    /// Old ring index → slot of that server.
    old_order: Vec<usize>,
    /// Old ring index → whether that server is out of reach: removed by
    /// the reload without a connection open (a placeholder, a server
    /// already gone). Its keys route as usual and it is not listed.
    gone: Vec<bool>,
    started: Instant,
    /// Connections with requests queued before the switch, and the byte
    /// mark those requests end at.
    before: Vec<(usize, usize, u64)>,
    plan: Option<PlanParts>,
    thread: Option<std::thread::JoinHandle<()>>,
    progress: Arc<Progress>,
    priority: Sender<Vec<u8>>,
    copied: Receiver<u64>,
    parked: HashMap<u64, Vec<Parked>>,
    /// `moved_keys` and `moved_bytes` of the moves before this one (the
    /// stats count over the proxy's life, as every other figure does).
    base: (u64, u64),
}

/// What the thread is given when it starts.
#[derive(Debug)]
struct PlanParts {
    old: crate::config::PoolConfig,
    skip: Vec<bool>,
    priority: Receiver<Vec<u8>>,
    copied: Sender<u64>,
}

/// Where a keyed request goes during a move.
pub enum MoveRoute {
    /// As usual.
    Usual,
    /// To this slot (a warm read from the key's old owner).
    Slot(usize),
    /// Parked until its copy.
    Park,
}

impl Pool {
    /// Starts a warm move from `change` (with `warm_moves`): refused, the
    /// plain behaviour kept, for pools with TLS to their servers and the
    /// `random` distribution. A move already running is cut short: its
    /// keys not yet copied miss as after a plain reload.
    pub(super) fn start_move(&mut self, change: RingChange) {
        let name = self.cfg.name.clone();
        let mut requeue = Vec::new();
        if let Some(old) = self.moving.take() {
            tracing::warn!("pool {name}: ring changed again while moving: the earlier move stops");
            old.progress
                .cancel
                .store(true, std::sync::atomic::Ordering::Relaxed);
            requeue.extend(old.parked.into_values().flatten());
            self.stats.migrating = 0;
        }
        self.requeue.extend(requeue);
        let gone: Vec<bool> = change
            .old_order
            .iter()
            .map(|&slot| {
                self.servers.get(slot).map_or(true, |s| {
                    s.pos.is_none() && !s.conns.iter().any(|c| c.connected)
                })
            })
            .collect();
        if gone.iter().all(|&g| g) {
            // Nothing reachable to move from (a pool started with
            // placeholder servers, say).
            return;
        }
        if self.tls.is_some() {
            tracing::warn!(
                "pool {name}: warm moves are not done for a pool with TLS to its servers: moved keys miss"
            );
            return;
        }
        let Some(mv) = Move::new(&change.old_cfg, &self.cfg, Arc::default()) else {
            return;
        };
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
            "pool {name}: warm move started ({} servers before, {} now)",
            change.old_order.len(),
            self.order.len()
        );
        self.stats.migrating = 1;
        self.moving = Some(Moving {
            mv,
            old_order: change.old_order,
            gone: gone.clone(),
            started: Instant::now(),
            before,
            plan: Some(PlanParts {
                old: change.old_cfg,
                skip: gone,
                priority: prx,
                copied: ctx,
            }),
            thread: None,
            progress: Arc::default(),
            priority: ptx,
            copied: crx,
            parked: HashMap::new(),
            base: (self.stats.moved_keys, self.stats.moved_bytes),
        });
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
            Route::Old(i) if m.gone[i] => MoveRoute::Usual,
            Route::Old(i) => {
                let slot = m.old_order[i];
                let usable = self
                    .servers
                    .get(slot)
                    .is_some_and(|s| !self.cfg.auto_eject_hosts || s.health == Health::Up);
                if usable {
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
                        old: parts.old,
                        skip: parts.skip,
                        new: self.cfg.clone(),
                        settled: m.mv.settled.clone(),
                        progress: m.progress.clone(),
                        priority: parts.priority,
                        copied: parts.copied,
                        waker: Some(waker.clone()),
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
            self.stats.moved_keys = m.base.0 + m.progress.moved_keys();
            self.stats.moved_bytes = m.base.1 + m.progress.moved_bytes();
            ended = m.plan.is_none() && m.progress.is_done();
        }
        if ended {
            let m = self.moving.take().unwrap();
            if let Some(h) = m.thread {
                let _ = h.join();
            }
            ready.extend(m.parked.into_values().flatten());
            self.stats.migrating = 0;
            self.stats.moved_keys = m.base.0 + m.progress.moved_keys();
            self.stats.moved_bytes = m.base.1 + m.progress.moved_bytes();
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
