//! Removals: delete, and [`Store::remove`], which can also keep the item
//! marked stale or with its value dropped, under a CAS condition.

use crate::index::hash_key;
use crate::item;
use crate::store::Store;
use crate::types::{Removal, RemoveResult};

impl Store {
    /// delete: true if a live item was removed.
    pub fn delete(&self, key: &[u8]) -> bool {
        let hash = hash_key(key);
        self.flush_due(self.clock.now());
        self.promote(key, hash);
        let mut table = self.shard(hash).write();
        match self.find_live(&mut table, key, hash) {
            Some(f) => {
                self.unlink(&mut table, &f);
                drop(table);
                // (A kill between a demotion's two steps can leave a key in
                // both tiers: a delete removes both.)
                self.forget_flash(hash);
                true
            }
            // The evictor may have moved the key to flash since `promote`
            // looked (it was still in RAM then): it is deleted there.
            None => {
                drop(table);
                self.forget_flash(hash)
            }
        }
    }

    /// Removes the item, or marks it stale, or drops its value, each
    /// optionally only if the CAS unique matches (memcached's md).
    /// Marking stale and dropping the value replace the item with a copy
    /// (it gets a new CAS unique).
    pub fn remove(&self, head: usize, key: &[u8], d: &Removal) -> RemoveResult {
        let hash = hash_key(key);
        self.flush_due(self.clock.now());
        self.promote(key, hash);
        let mut forced = None;
        let mut looked_again = false;
        loop {
            let mut table = self.shard(hash).write();
            let Some(f) = self.find_live(&mut table, key, hash) else {
                drop(table);
                // As in `delete`: the key may have gone to flash since
                // `promote`; a plain removal removes it there, anything
                // else looks again.
                if self.flash_has(hash) && !looked_again {
                    if !d.drop_value && !d.mark_stale && d.if_cas.is_none() {
                        self.forget_flash(hash);
                        return RemoveResult::Removed;
                    }
                    self.promote(key, hash);
                    looked_again = true;
                    continue;
                }
                return RemoveResult::NotFound;
            };
            if d.if_cas.is_some_and(|c| c != self.cas_of(f.loc, f.item)) {
                return RemoveResult::Exists;
            }
            if !d.drop_value && !d.mark_stale {
                self.unlink(&mut table, &f);
                drop(table);
                self.forget_flash(hash);
                return RemoveResult::Removed;
            }
            let old = f.item.spec();
            let exptime = match (d.mark_stale, d.exptime) {
                (true, Some(e)) => e,
                _ => old.exptime,
            };
            let spec = if d.drop_value {
                item::ItemSpec {
                    key_len: key.len(),
                    value_len: 0,
                    flags: d.flags,
                    exptime,
                    exptime_field: old.exptime_field,
                    cas: self.explicit(d.new_cas).or(forced),
                    packed: None,
                    raw_tried: false,
                }
            } else {
                item::ItemSpec {
                    exptime,
                    exptime_field: old.exptime_field,
                    cas: self.explicit(d.new_cas).or(forced),
                    ..old
                }
            };
            let old_loc = f.loc;
            let lane = self.update_head(head, &f);
            drop(table);
            let Some(slot) = self.reserve(lane, &spec) else {
                return RemoveResult::NotFound;
            };
            let Some((mut table, f)) = self.relock_at(key, hash, old_loc) else {
                // Changed while we reserved: start over.
                self.abandon(slot);
                continue;
            };
            let spec = if d.mark_stale && d.exptime.is_some() {
                spec
            } else {
                item::ItemSpec {
                    exptime: f.item.exptime(),
                    ..spec
                }
            };
            let old_state = f.item.state();
            let state = if d.drop_value {
                let keep =
                    item::STATE_BINARY_KEY | if d.mark_stale { 0 } else { item::STATE_STALE };
                (old_state & keep) | if d.mark_stale { item::STATE_STALE } else { 0 }
            } else {
                (old_state & !item::STATE_TOKEN_SENT) | item::STATE_STALE
            };
            let value: &[u8] = if d.drop_value {
                &[]
            } else {
                f.item.stored_value()
            };
            self.write_item(&slot, &spec, key, &[value], state);
            slot.ptr
                .set_atime(self.atime_in(slot.seg, self.base_atime(f.loc, f.item)));
            // Marking stale is in place in memcached, dropping the value a
            // new item.
            if let Some(c) = self.cas_conflict(&slot, spec.cas.is_some(), Some(&f)) {
                forced = Some(c);
                drop(table);
                self.abandon(slot);
                continue;
            }
            self.link_counted(&mut table, hash, &slot, Some(&f), d.drop_value);
            drop(table);
            self.arena.finish_write(slot.seg);
            return RemoveResult::Kept;
        }
    }
}
