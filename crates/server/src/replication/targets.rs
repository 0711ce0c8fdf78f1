//! The live change of the targets (`--replicate-to`, re-read from the
//! config file on SIGHUP, or `replica_targets` from a proved peer) and of
//! the mode (`--replication`).
//!
//! ```text
//!   slots: TARGET_SLOTS links; `mask` and `order` name the current targets
//!   change A,B -> B,C:
//!     B  same address: its slot, link, queue and connection stay as they are
//!     A  removed: slot out of `mask` (no write queued for it any more), link
//!        down (a sync write waiting for it is answered), queue closed, the
//!        sender sees `active` false and ends; the slot is reused only once
//!        it has ended (`running`)
//!     C  added: a free slot, counters cleared, sender started: it connects
//!        and opens with the full copy, as a link does at start, so C gets
//!        every key this server holds; no catch-up pull (this server lost
//!        nothing)
//! ```
//!
//! A server started without `--replicate-to` is not told of writes (the
//! workers skip replication entirely, `is_on`): it cannot be given targets
//! live; a restart can.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::{Replication, TARGET_SLOTS};
use crate::settings::MAX_REPLICA_TARGETS;

/// What a change of the targets did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TargetChange {
    pub old: Vec<String>,
    pub new: Vec<String>,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// `reload` (SIGHUP) or `command` (`replica_targets`).
    pub source: &'static str,
}

/// Told when the targets change (the log watchers' `sysevents`).
pub(crate) type TargetHook = Box<dyn Fn(&TargetChange) + Send + Sync>;

impl Replication {
    /// Sets what is told when the targets change (once).
    pub(crate) fn on_targets_change(&self, hook: TargetHook) {
        let _ = self.targets_hook.set(hook);
    }

    /// The current targets, in order.
    pub(crate) fn target_addrs(&self) -> Vec<String> {
        let order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        order.iter().map(|&i| self.addr_of(i)).collect()
    }

    fn addr_of(&self, slot: usize) -> String {
        self.targets[slot]
            .addr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets the mode: true for sync. Writes held for acknowledgements are
    /// looked at again (in async mode they are answered). Whether it
    /// changed.
    pub(crate) fn set_sync(&self, sync: bool) -> bool {
        let was = self.sync.swap(sync, Relaxed);
        if was != sync {
            tracing::warn!(
                "[replication] mode changed to {}",
                if sync { "sync" } else { "async" }
            );
            self.wake_all();
        }
        was != sync
    }

    /// Makes `new` the targets (addresses as `--replicate-to` takes them,
    /// checked by the caller): None when they already are. Refused when
    /// there are too many, when the server was started without targets
    /// and `new` has some, or when every free slot is still held by a
    /// removed target's closing link (seconds at most: try again).
    pub(crate) fn set_targets(
        self: &Arc<Self>,
        new: &[String],
        source: &'static str,
    ) -> Result<Option<TargetChange>, String> {
        if new.len() > MAX_REPLICA_TARGETS {
            return Err(format!(
                "at most {MAX_REPLICA_TARGETS} --replicate-to targets"
            ));
        }
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        let old: Vec<String> = order.iter().map(|&i| self.addr_of(i)).collect();
        if old == new {
            return Ok(None);
        }
        if !self.on {
            return Err(
                "the server was started without --replicate-to: replication cannot be \
                 turned on live (restart it with the targets)"
                    .into(),
            );
        }
        // Each new address takes the slot of an equal old one, if any.
        let mut used = vec![false; order.len()];
        let keep: Vec<Option<usize>> = new
            .iter()
            .map(|a| {
                let j = (0..old.len()).find(|&j| !used[j] && old[j] == *a)?;
                used[j] = true;
                Some(order[j])
            })
            .collect();
        let wanted = keep.iter().filter(|k| k.is_none()).count();
        let free: Vec<usize> = (0..TARGET_SLOTS)
            .filter(|&i| {
                let t = &self.targets[i];
                !t.active.load(Relaxed) && !t.running.load(Relaxed)
            })
            .take(wanted)
            .collect();
        if free.len() < wanted {
            return Err(
                "the links of targets removed just before are still closing: try again in a second"
                    .into(),
            );
        }
        let mut change = TargetChange {
            old: old.clone(),
            new: new.to_vec(),
            source,
            ..TargetChange::default()
        };
        // Removed first: nothing is queued for them any more, and a sync
        // write waiting for one of them is answered.
        for (j, &slot) in order.iter().enumerate() {
            if !used[j] {
                self.retire(slot);
                change.removed.push(old[j].clone());
            }
        }
        let mut free = free.into_iter();
        let mut next = Vec::with_capacity(new.len());
        let mut started = Vec::new();
        for (k, a) in keep.iter().zip(new) {
            if let Some(slot) = k {
                next.push(*slot);
            } else if let Some(slot) = free.next() {
                self.assign(slot, a);
                change.added.push(a.clone());
                started.push(slot);
                next.push(slot);
            }
        }
        *order = next;
        drop(order);
        // A removed target's pull is over; an added one pulls nothing.
        self.pulls_changed();
        for slot in started {
            self.spawn_target(slot);
        }
        tracing::warn!(
            "[replication] targets changed ({source}): [{}] -> [{}]{}{}",
            change.old.join(","),
            change.new.join(","),
            if change.added.is_empty() {
                String::new()
            } else {
                format!("; full copy to {}", change.added.join(","))
            },
            if change.removed.is_empty() {
                String::new()
            } else {
                format!("; link to {} closed", change.removed.join(","))
            },
        );
        if let Some(h) = self.targets_hook.get() {
            h(&change);
        }
        Ok(Some(change))
    }

    /// Makes free slot `slot` the target `addr` (its sender not started).
    fn assign(&self, slot: usize, addr: &str) {
        let t = &self.targets[slot];
        *t.addr.lock().unwrap_or_else(|e| e.into_inner()) = addr.to_string();
        for c in [&t.sent, &t.errors, &t.full_copies, &t.reconnects, &t.lag_us] {
            c.store(0, Relaxed);
        }
        t.up.store(false, Relaxed);
        // No catch-up pull from a target added live.
        t.synced.store(true, Relaxed);
        t.active.store(true, Relaxed);
        self.mask.fetch_or(1 << slot, Relaxed);
    }

    /// Takes target slot `slot` out: no write is queued for it, writes
    /// waiting for it are answered, its sender (and catch-up pull) end.
    fn retire(&self, slot: usize) {
        let t = &self.targets[slot];
        self.mask.fetch_and(!(1 << slot), Relaxed);
        t.active.store(false, Relaxed);
        t.synced.store(true, Relaxed);
        t.up.store(false, Relaxed);
        t.queue.close();
        t.queue.poke();
        self.wake_all();
    }
}
