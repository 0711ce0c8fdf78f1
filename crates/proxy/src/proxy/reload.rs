//! Reloading the configuration while serving. The file given with `-c`
//! is read and checked exactly as at start (YAML, every pool's
//! directives, the TLS files built); any failure refuses the whole reload
//! (one log line, `reload_failures` + 1) and nothing changes. Then every
//! listener the new file needs is made ready (bound, or taken over from a
//! pool that gives up that address); a bind failure also refuses the
//! reload. Only then is the new configuration applied:
//!
//! - a pool of the same name is changed in place ([`Pool::reconfigure`]):
//!   its clients, and the requests queued on its servers, carry on;
//! - a pool whose `listen:` changed gets its new listener, the old one
//!   closed; its clients stay;
//! - a new pool gets a new slot, listener and servers;
//! - a removed pool's listener closes; each of its clients, once it has
//!   every reply it is owed, is closed; then the pool is forgotten.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use mio::Token;

use super::{token_base, Proxy, Served, MAX_POOLS};
use crate::backend::{check_limits, Delivery, Pool, Reconfigured};
use crate::config::Config;
use crate::log_list::short_list;
use crate::peer::Secret;
use crate::stream::Listener;
use crate::tls::PoolTls;

/// Where a pool of the new file gets its listener.
enum Bound {
    /// Its pool keeps listening where it did.
    Keep,
    /// From the pool in this slot, which gives that address up.
    Take(usize),
    /// Newly bound.
    New(Listener),
}

/// What one reload did, for its log line.
#[derive(Default)]
struct Summary {
    added: Vec<String>,
    removed: Vec<String>,
    listen: Vec<String>,
    changed: Vec<(String, Reconfigured)>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.added.is_empty() {
            parts.push(format!("pools added: {}", short_list(&self.added)));
        }
        if !self.removed.is_empty() {
            parts.push(format!("pools removed: {}", short_list(&self.removed)));
        }
        if !self.listen.is_empty() {
            parts.push(format!("listening anew: {}", short_list(&self.listen)));
        }
        for (name, r) in &self.changed {
            let mut what = Vec::new();
            if !r.added.is_empty() {
                what.push(format!("servers added: {}", short_list(&r.added)));
            }
            if !r.removed.is_empty() {
                what.push(format!("servers removed: {}", short_list(&r.removed)));
            }
            if !r.reweighted.is_empty() {
                what.push(format!("weights changed: {}", short_list(&r.reweighted)));
            }
            if what.is_empty() {
                what.push(if r.ring_changed {
                    "placement changed".to_string()
                } else {
                    "settings changed".to_string()
                });
            }
            parts.push(format!("pool {name}: {}", what.join("; ")));
        }
        if parts.is_empty() {
            return f.write_str("no change");
        }
        f.write_str(&parts.join("; "))
    }
}

impl Proxy {
    /// Reloads the `-c` file (asked by `by`): applied, or refused with the
    /// running configuration untouched. Logged either way; the refusal's
    /// reason is returned.
    pub(super) fn reload(
        &mut self,
        by: &str,
        now: Instant,
        out: &mut Vec<Delivery>,
        touched: &mut Vec<usize>,
    ) -> Result<(), String> {
        let Some((path, _)) = &self.conf else {
            return Err("no configuration file to reload".into());
        };
        let path = path.clone();
        match self.try_reload(&path, now, out, touched) {
            Ok(summary) => {
                self.reloads += 1;
                for (_, s) in &mut self.pools {
                    s.pool.stats.reloads = self.reloads;
                }
                tracing::info!(
                    "configuration '{}' reloaded ({by}): {summary}",
                    path.display()
                );
                Ok(())
            }
            Err(why) => {
                let why = why.replace('\n', " ");
                self.reload_failures += 1;
                for (_, s) in &mut self.pools {
                    s.pool.stats.reload_failures = self.reload_failures;
                }
                tracing::error!(
                    "configuration '{}' not reloaded ({by}), the running one kept: {why}",
                    path.display()
                );
                Err(why)
            }
        }
    }

    fn try_reload(
        &mut self,
        path: &std::path::Path,
        now: Instant,
        out: &mut Vec<Delivery>,
        touched: &mut Vec<usize>,
    ) -> Result<Summary, String> {
        // Everything that can fail comes first.
        let config = Config::load(path)?;
        let mut tls = Vec::with_capacity(config.pools.len());
        let mut secrets = Vec::with_capacity(config.pools.len());
        for pool in &config.pools {
            check_limits(pool)?;
            tls.push(crate::tls::build(pool)?);
            secrets.push(crate::peer::load_secret(pool)?);
        }
        let live: HashMap<String, usize> = self
            .pools
            .iter()
            .filter(|(_, s)| !s.removed())
            .map(|(slot, s)| (s.pool.cfg.name.clone(), slot))
            .collect();
        let added = config
            .pools
            .iter()
            .filter(|p| !live.contains_key(&p.name))
            .count();
        if self.pools.len() + added > MAX_POOLS {
            return Err(format!(
                "{} pools with those still closing, at most {MAX_POOLS}",
                self.pools.len() + added
            ));
        }
        for cfg in &config.pools {
            if let Some(&slot) = live.get(&cfg.name) {
                self.pools[slot].pool.fits(cfg)?;
            }
        }
        let bound = self.bind_listeners(&config, &live)?;
        Ok(self.apply(config, tls, secrets, bound, &live, now, out, touched))
    }

    /// A listener for each pool of `config`; nothing kept when one
    /// cannot be bound (the error names the pool and the address).
    fn bind_listeners(
        &self,
        config: &Config,
        live: &HashMap<String, usize>,
    ) -> Result<Vec<Bound>, String> {
        // The new address of each pool that stays.
        let new_listen: HashMap<&str, &str> = config
            .pools
            .iter()
            .map(|p| (p.name.as_str(), p.listen.pname.as_str()))
            .collect();
        let mut bound = Vec::with_capacity(config.pools.len());
        for cfg in &config.pools {
            let mine = live.get(&cfg.name).copied();
            if mine.is_some_and(|slot| self.pools[slot].pool.cfg.listen.pname == cfg.listen.pname) {
                bound.push(Bound::Keep);
                continue;
            }
            // An address another pool gives up (a pool renamed, say).
            let giver = live.iter().find(|(name, &slot)| {
                self.pools[slot].pool.cfg.listen.pname == cfg.listen.pname
                    && new_listen.get(name.as_str()) != Some(&cfg.listen.pname.as_str())
            });
            if let Some((_, &slot)) = giver {
                bound.push(Bound::Take(slot));
                continue;
            }
            match Listener::bind(&cfg.listen, cfg.backlog) {
                Ok(l) => bound.push(Bound::New(l)),
                Err(e) => {
                    for b in bound {
                        if let Bound::New(l) = b {
                            l.close(self.poll.registry(), true);
                        }
                    }
                    return Err(format!(
                        "pool '{}': cannot listen on {}: {e}",
                        cfg.name, cfg.listen.pname
                    ));
                }
            }
        }
        Ok(bound)
    }

    /// Applies a checked configuration (nothing fails from here).
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        config: Config,
        tls: Vec<PoolTls>,
        secrets: Vec<Option<Arc<Secret>>>,
        bound: Vec<Bound>,
        live: &HashMap<String, usize>,
        now: Instant,
        out: &mut Vec<Delivery>,
        touched: &mut Vec<usize>,
    ) -> Summary {
        let registry = self.poll.registry();
        let mut summary = Summary::default();
        let new_paths: Vec<String> = config
            .pools
            .iter()
            .map(|p| p.listen.pname.clone())
            .collect();
        // Listeners taken over first, while their pools still hold them.
        let mut taken: HashMap<usize, Listener> = HashMap::new();
        for b in &bound {
            if let Bound::Take(slot) = b {
                if let Some(mut l) = self.pools[*slot].listener.take() {
                    // Registered again under its new pool's token below.
                    l.deregister(registry);
                    taken.insert(*slot, l);
                }
            }
        }
        let kept: Vec<String> = config.pools.iter().map(|p| p.name.clone()).collect();
        // Pools removed: their listeners close (if not taken over).
        for (name, &slot) in live {
            if kept.contains(name) {
                continue;
            }
            let served = &mut self.pools[slot];
            let pname = served.pool.cfg.listen.pname.clone();
            // A listener taken over by another pool is already gone.
            if let Some(l) = served.listener.take() {
                l.close(registry, !new_paths.contains(&pname));
            }
            summary.removed.push(name.clone());
        }
        let each = config.pools.into_iter().zip(tls).zip(secrets).zip(bound);
        for (((cfg, tls), secret), b) in each {
            match live.get(&cfg.name).copied() {
                Some(slot) => {
                    let served = &mut self.pools[slot];
                    let listener = match b {
                        Bound::Keep => None,
                        Bound::Take(from) => taken.remove(&from),
                        Bound::New(l) => {
                            self.opened += 1;
                            Some(l)
                        }
                    };
                    if let Some(mut l) = listener {
                        if let Some(old) = served.listener.take() {
                            let pname = &served.pool.cfg.listen.pname;
                            old.close(registry, !new_paths.contains(pname));
                        }
                        if l.register(registry, Token(slot)).is_err() {
                            tracing::warn!("pool {}: cannot watch its new listener", cfg.name);
                        }
                        summary
                            .listen
                            .push(format!("{} on {}", cfg.name, cfg.listen.pname));
                        served.listener = Some(l);
                    }
                    served.listen_tls = tls.listen;
                    if served.pool.cfg != cfg {
                        // A replicated ring's servers told their new
                        // targets (`peer`, off this thread).
                        let ring = tls.servers.as_ref();
                        crate::peer::on_reload(&served.pool.cfg, &cfg, secret.as_ref(), ring);
                        let name = cfg.name.clone();
                        let preconnect = cfg.preconnect;
                        let r = served.pool.reconfigure(cfg, tls.servers);
                        if preconnect {
                            served.pool.preconnect(registry, now, out);
                        }
                        summary.changed.push((name, r));
                    }
                }
                None => {
                    let entry = self.pools.vacant_entry();
                    let slot = entry.key();
                    let mut l = match b {
                        Bound::New(l) => {
                            self.opened += 1;
                            l
                        }
                        Bound::Take(from) => match taken.remove(&from) {
                            Some(l) => l,
                            None => continue,
                        },
                        Bound::Keep => continue,
                    };
                    if l.register(registry, Token(slot)).is_err() {
                        tracing::warn!("pool {}: cannot watch its listener", cfg.name);
                    }
                    summary.added.push(cfg.name.clone());
                    let preconnect = cfg.preconnect;
                    let mut pool = Pool::new(cfg, token_base(slot), tls.servers);
                    pool.stats.reloads = self.reloads;
                    pool.stats.reload_failures = self.reload_failures;
                    if preconnect {
                        pool.preconnect(registry, now, out);
                    }
                    entry.insert(Served {
                        pool,
                        listener: Some(l),
                        listen_tls: tls.listen,
                    });
                }
            }
        }
        // The removed pools' clients read no more: each is closed once
        // it has the replies to what it sent (`settle`).
        let removed: Vec<usize> = live
            .iter()
            .filter(|(name, _)| !kept.contains(*name))
            .map(|(_, &slot)| slot)
            .collect();
        let clients: Vec<usize> = self
            .clients
            .iter()
            .filter(|(_, c)| removed.contains(&c.pool))
            .map(|(key, _)| key)
            .collect();
        for key in clients {
            // What it already sent is served first.
            self.serve(key, now, out);
            if let Some(c) = self.clients.get_mut(key) {
                c.closing = true;
                c.quit = true;
            }
            touched.push(key);
        }
        summary
    }

    /// Forgets the pools a reload removed once their clients are gone.
    pub(super) fn forget_removed_pools(&mut self) {
        let gone: Vec<usize> = self
            .pools
            .iter()
            .filter(|(_, s)| s.removed() && s.pool.stats.client_connections == 0)
            .map(|(slot, _)| slot)
            .collect();
        for slot in gone {
            let mut served = self.pools.remove(slot);
            served.pool.close_all(self.poll.registry());
            tracing::debug!(
                "pool {}: removed, its last client gone",
                served.pool.cfg.name
            );
        }
    }
}
