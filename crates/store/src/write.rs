//! Writes: the storage commands (set, add, replace, cas, append, prepend),
//! publishing a written item under its command's condition, the lock-free
//! swap of a plain SET, and items whose value arrives in pieces
//! ([`Incoming`]).

use std::sync::atomic::Ordering;

use crate::arena::{self, Slot};
use crate::clock::ITEM_UPDATE_INTERVAL;
use crate::codec::{self, Packed};
use crate::dict::CODEC_PLAIN;
use crate::epoch;
use crate::index::{hash_key, Found, Location, Table};
use crate::item;
use crate::shard::Shard;
use crate::store::Store;
use crate::types::{Compression, Lookup, StoreMode, StoreStatus, Write};

/// An item whose value is being received (see [`Store::begin_incoming`]):
/// reserved and written up to `filled` bytes of value, not yet published.
#[must_use = "an incoming item must be finished or abandoned"]
pub struct Incoming {
    slot: Slot,
    spec: item::ItemSpec,
    hash: u64,
    mode: StoreMode,
    cas: u64,
    filled: usize,
}

impl Incoming {
    /// The whole value has been written.
    pub fn is_filled(&self) -> bool {
        self.filled == self.spec.value_len
    }

    /// Length of the whole value.
    pub fn value_len(&self) -> usize {
        self.spec.value_len
    }

    /// Its key (written when the item was reserved).
    pub fn key(&self) -> &[u8] {
        self.slot.ptr.key()
    }
}

impl Store {
    /// set/add/replace/append/prepend/cas. `head` picks the write head
    /// (the worker index). Returns the status and the new CAS unique.
    pub fn store(&self, head: usize, w: &Write<'_>) -> (StoreStatus, u64) {
        let (status, cas, _) = self.store_sized(head, w);
        (status, cas)
    }

    /// As [`Store::store`], also returning the stored value's length (the
    /// new size after an append).
    pub fn store_sized(&self, head: usize, w: &Write<'_>) -> (StoreStatus, u64, usize) {
        if w.mode != StoreMode::Set && self.flash.is_some() {
            // add, replace, cas, append, prepend see a key on flash.
            self.promote(w.key, hash_key(w.key));
        }
        self.store_unpromoted(head, w)
    }

    /// `store_sized` of a key not on flash (or whose flash copy does not
    /// matter: a SET replaces it).
    pub(crate) fn store_unpromoted(&self, head: usize, w: &Write<'_>) -> (StoreStatus, u64, usize) {
        let Write {
            mode,
            key,
            flags,
            exptime,
            value,
            ..
        } = *w;
        if self.too_large(key.len(), flags, value.len()) {
            return (StoreStatus::TooLarge, 0, 0);
        }
        let now = self.clock.now();
        self.flush_due(now);
        if matches!(mode, StoreMode::Append | StoreMode::Prepend) {
            let r = self.concat(head, w);
            if r.0 == StoreStatus::NotStored && r.2 == usize::MAX {
                if let Some(exptime) = w.create_exptime {
                    // A miss creates the item.
                    let add = Write {
                        mode: StoreMode::Add,
                        exptime,
                        cas: 0,
                        create_exptime: None,
                        ..*w
                    };
                    return self.store_unpromoted(head, &add);
                }
            }
            return (r.0, r.1, if r.2 == usize::MAX { 0 } else { r.2 });
        }
        let hash = hash_key(key);
        // Start fetching the shard's lock line and the key's home bucket
        // now: they arrive while the item is written.
        self.prefetch_index(hash);
        let spec = item::ItemSpec {
            key_len: key.len(),
            value_len: value.len(),
            flags,
            exptime,
            // A stale-if-older CAS may keep the old item's expiry.
            exptime_field: w.stale_if_older,
            cas: self.explicit(w.new_cas),
            packed: None,
            raw_tried: false,
        };
        if self.cfg.compression == Compression::All && value.len() >= codec::PACK_MIN {
            return self.store_packing(head, w, hash, spec);
        }
        self.write_new(head, w, hash, spec, value)
    }

    /// `store_unpromoted`'s write of a value that `-o compression=all`
    /// packs on this worker, before the item is reserved (stored raw, and
    /// marked tried, when packing does not pay). Out of line: the other
    /// settings' writes run none of it.
    #[inline(never)]
    fn store_packing(
        &self,
        head: usize,
        w: &Write<'_>,
        hash: u64,
        mut spec: item::ItemSpec,
    ) -> (StoreStatus, u64, usize) {
        let value = w.value;
        let packed = codec::with_thread_packer(self.cfg.compress_level, |p| match p.pack(value) {
            Packed::Frame(frame) => {
                let spec = item::ItemSpec {
                    value_len: frame.len(),
                    packed: Some((CODEC_PLAIN, value.len())),
                    ..spec
                };
                Ok(self.write_new(head, w, hash, spec, frame))
            }
            Packed::Rejected | Packed::Sniffed => Err(true),
            Packed::Small => Err(false),
        });
        match packed {
            Some(Ok(done)) => return done,
            Some(Err(tried)) => spec.raw_tried = tried,
            None => {}
        }
        self.write_new(head, w, hash, spec, value)
    }

    /// Reserves, writes (`stored`: the value's bytes in the item, as
    /// `spec` says) and publishes a set/add/replace/cas item.
    #[inline]
    fn write_new(
        &self,
        head: usize,
        w: &Write<'_>,
        hash: u64,
        spec: item::ItemSpec,
        stored: &[u8],
    ) -> (StoreStatus, u64, usize) {
        let Some(slot) = self.reserve(self.new_item_head(head, hash), &spec) else {
            return self.out_of_memory(w);
        };
        self.write_item(&slot, &spec, w.key, &[stored], Self::new_state(w));
        let (status, cas) = self.publish(head, w, hash, slot, spec);
        (status, cas, w.value.len())
    }

    /// Prefetches what a write of a key with this hash will lock and read
    /// in the index: its shard's first line and its home bucket.
    #[inline]
    pub(crate) fn prefetch_index(&self, hash: u64) {
        let shard = self.shard(hash);
        arena::prefetch(shard as *const Shard as *const u8);
        // SAFETY: the shard's table lives as long as the store.
        unsafe { Table::prefetch_bucket(shard.lock.data_ptr(), hash) };
    }

    /// The state bits a new item written by `w` starts with.
    fn new_state(w: &Write<'_>) -> u8 {
        if w.binary_key {
            item::STATE_BINARY_KEY
        } else {
            0
        }
    }

    /// No room for `w`'s item.
    fn out_of_memory(&self, w: &Write<'_>) -> (StoreStatus, u64, usize) {
        if w.mode == StoreMode::Set {
            // memcached drops the old value rather than keep stale data.
            self.delete(w.key);
        }
        (StoreStatus::OutOfMemory, 0, 0)
    }

    /// Publishes the complete item in `slot` (written from `spec`) as `w`
    /// asks (set/add/replace/cas: `w.value` is not used), or marks it dead
    /// when `w`'s condition fails; releases the slot either way. A CAS
    /// conflict (see `cas_conflict`) rewrites the item with the unique it
    /// must have into a new slot.
    fn publish(
        &self,
        head: usize,
        w: &Write<'_>,
        hash: u64,
        mut slot: Slot,
        mut spec: item::ItemSpec,
    ) -> (StoreStatus, u64) {
        let Write { mode, key, cas, .. } = *w;
        loop {
            if mode == StoreMode::Set && spec.cas.is_none() && self.swap(head, key, hash, &slot) {
                self.arena.finish_write(slot.seg);
                return (StoreStatus::Stored, self.slot_cas(&slot));
            }
            let mut table = self.shard(hash).write();
            let old = self.find_live(&mut table, key, hash);
            let now = self.clock.now();
            let links = match (mode, &old) {
                (StoreMode::Add, Some(_)) | (StoreMode::Replace, None) | (StoreMode::Cas, None) => {
                    false
                }
                (StoreMode::Cas, Some(f)) if cas == 0 || self.cas_of(f.loc, f.item) != cas => {
                    w.stale_if_older && cas != 0 && cas < self.cas_of(f.loc, f.item)
                }
                _ => true,
            };
            if links {
                if let Some(c) = self.cas_conflict(&slot, spec.cas.is_some(), old.as_ref()) {
                    drop(table);
                    spec.cas = self.explicit(w.new_cas).or(Some(c));
                    let Some(next) = self.reserve(self.new_item_head(head, hash), &spec) else {
                        self.abandon(slot);
                        let (status, cas, _) = self.out_of_memory(w);
                        return (status, cas);
                    };
                    self.write_item(
                        &next,
                        &spec,
                        key,
                        &[slot.ptr.stored_value()],
                        Self::new_state(w),
                    );
                    self.abandon(slot);
                    slot = next;
                    continue;
                }
            }
            let result = match (mode, &old) {
                (StoreMode::Add, Some(f)) => {
                    let atime = self.base_atime(f.loc, f.item);
                    if atime < now.saturating_sub(ITEM_UPDATE_INTERVAL) {
                        f.item.set_atime(self.atime_in(f.loc.seg, now));
                    }
                    (StoreStatus::NotStored, 0)
                }
                (StoreMode::Replace, None) => (StoreStatus::NotStored, 0),
                (StoreMode::Cas, None) => (StoreStatus::NotFound, 0),
                // A zero CAS never matches (so with -C every cas is EXISTS).
                (StoreMode::Cas, Some(f)) if cas == 0 || self.cas_of(f.loc, f.item) != cas => {
                    if links {
                        // memcached's CAS_STALE: store, keeping the old TTL,
                        // marked stale (and keeping a sent token).
                        // SAFETY: the slot is ours until published.
                        unsafe { slot.ptr.set_exptime(f.item.exptime()) };
                        slot.ptr.set_state(item::STATE_STALE);
                        if f.item.has_state(item::STATE_TOKEN_SENT) {
                            slot.ptr.set_state(item::STATE_TOKEN_SENT);
                        }
                        self.link(&mut table, hash, &slot, old.as_ref());
                        (StoreStatus::Stored, self.slot_cas(&slot))
                    } else {
                        (StoreStatus::Exists, 0)
                    }
                }
                _ => {
                    self.link(&mut table, hash, &slot, old.as_ref());
                    (StoreStatus::Stored, self.slot_cas(&slot))
                }
            };
            if result.0 != StoreStatus::Stored {
                slot.ptr.mark_dead();
            }
            drop(table);
            self.arena.finish_write(slot.seg);
            return result;
        }
    }

    /// Starts a set/add/replace/cas whose value arrives in pieces (a large
    /// value read from the network straight into item memory, as memcached
    /// reads into its item): checks the size, reserves the item, writes
    /// its header, key and the first `w.value.len()` bytes of its
    /// `value_len`-byte value. The caller fills the rest (`incoming_space`,
    /// `incoming_filled`), then publishes it (`finish_incoming`) or gives it
    /// up (`abandon_incoming`), and must do one of the two: until then the
    /// item's segment cannot be evicted. Not for append/prepend, nor for
    /// writes with `stale_if_older`, `new_cas`, `binary_key` or
    /// `create_exptime` (their writes need the old item first).
    pub fn begin_incoming(
        &self,
        head: usize,
        w: &Write<'_>,
        value_len: usize,
    ) -> Result<Incoming, StoreStatus> {
        debug_assert!(matches!(
            w.mode,
            StoreMode::Set | StoreMode::Add | StoreMode::Replace | StoreMode::Cas
        ));
        debug_assert!(
            !w.stale_if_older && w.new_cas == 0 && !w.binary_key && w.create_exptime.is_none()
        );
        debug_assert!(w.value.len() <= value_len);
        if self.too_large(w.key.len(), w.flags, value_len) {
            return Err(StoreStatus::TooLarge);
        }
        self.flush_due(self.clock.now());
        let hash = hash_key(w.key);
        let spec = item::ItemSpec {
            key_len: w.key.len(),
            value_len,
            flags: w.flags,
            exptime: w.exptime,
            exptime_field: false,
            cas: None,
            packed: None,
            raw_tried: false,
        };
        let Some(slot) = self.reserve(self.new_item_head(head, hash), &spec) else {
            return Err(self.out_of_memory(w).0);
        };
        self.write_item(&slot, &spec, w.key, &[w.value], 0);
        Ok(Incoming {
            slot,
            spec,
            hash,
            mode: w.mode,
            cas: w.cas,
            filled: w.value.len(),
        })
    }

    /// The part of an incoming item's value not yet filled.
    pub fn incoming_space<'a>(&'a self, incoming: &'a mut Incoming) -> &'a mut [u8] {
        let value = incoming.slot.ptr.value_ptr();
        // SAFETY: the slot was reserved for the whole item and stays owned
        // by `incoming` (not published, so no reader can reach it, and its
        // segment cannot be evicted while the write is pending); the value
        // is `spec.value_len` bytes from `value_ptr`, of which the first
        // `filled` are written. The arena outlives `&self`.
        unsafe {
            std::slice::from_raw_parts_mut(
                value.add(incoming.filled),
                incoming.spec.value_len - incoming.filled,
            )
        }
    }

    /// Records that `n` more bytes of an incoming value were written into
    /// `incoming_space`.
    pub fn incoming_filled(&self, incoming: &mut Incoming, n: usize) {
        incoming.filled = (incoming.filled + n).min(incoming.spec.value_len);
    }

    /// Publishes a filled incoming item (see `begin_incoming`). Its value
    /// stays raw, whatever `-o compression` says: callers that want values
    /// packed as they are written (`packs_on_write`) send them whole.
    pub fn finish_incoming(&self, head: usize, incoming: Incoming) -> (StoreStatus, u64) {
        debug_assert!(incoming.is_filled());
        let key = incoming.slot.ptr.key();
        let w = Write {
            mode: incoming.mode,
            key,
            flags: incoming.spec.flags,
            exptime: incoming.spec.exptime,
            cas: incoming.cas,
            ..Write::default()
        };
        self.publish(head, &w, incoming.hash, incoming.slot, incoming.spec)
    }

    /// Whether values are packed as they are written (`-o
    /// compression=all`): a value received into its item
    /// ([`Store::begin_incoming`]) would not be.
    pub fn packs_on_write(&self) -> bool {
        self.cfg.compression == Compression::All
    }

    /// Gives up an incoming item (bad data, a closed connection).
    pub fn abandon_incoming(&self, incoming: Incoming) {
        self.abandon(incoming.slot);
    }

    /// A plain SET's fast path: publishes `slot` in place of the live item
    /// of `key` without the shard's lock (see `Table::swap_unlocked`), if
    /// the key is present, live, and its CAS unique below the new one.
    /// False if it changed nothing: the caller takes the locked path.
    #[inline]
    fn swap(&self, head: usize, key: &[u8], hash: u64, slot: &Slot) -> bool {
        let Some(_pin) = epoch::pin() else {
            return false;
        };
        let shard = self.shard(hash);
        let loc = Location {
            seg: slot.seg,
            offset: slot.offset,
        };
        let now = self.clock.now();
        let accept = |f: &Found| {
            let accepted = matches!(
                self.check_exptime(f.meta.exptime, f.loc, now),
                Lookup::Hit(())
            ) && (!self.cfg.use_cas
                || self.slot_cas(slot) > self.cas_of(f.loc, f.item));
            if accepted {
                // Committed just before the entry is swapped (if the swap
                // then fails, the locked path links or abandons it).
                slot.ptr.commit();
            }
            accepted
        };
        // SAFETY: the shard's table lives as long as the store, its version
        // is the shard's, and this thread is pinned.
        let Some(old) = (unsafe {
            Table::swap_unlocked(
                shard.lock.data_ptr(),
                &shard.version,
                &self.arena,
                key,
                hash,
                loc,
                accept,
            )
        }) else {
            return false;
        };
        // Still pinned: the old item's memory is not reused yet.
        old.item.mark_dead();
        let ((new_size, new_packed), (old_size, old_packed)) =
            (slot.ptr.footprint(), old.item.footprint());
        self.arena.segment(slot.seg).add_live(new_size);
        self.arena.segment(old.loc.seg).sub_live(old_size);
        let c = &self.head_counters[head % self.head_counters.len()];
        let delta = (new_size as u64).wrapping_sub(old_size as u64);
        c.bytes.fetch_add(delta, Ordering::Relaxed);
        c.total_items.fetch_add(1, Ordering::Relaxed);
        // The new item first (see `dict`).
        if let Some(raw_len) = new_packed {
            c.count_packed(new_size, raw_len, true);
            self.count_dict_use(slot.ptr, true);
        }
        if let Some(raw_len) = old_packed {
            c.count_packed(old_size, raw_len, false);
            self.count_dict_use(old.item, false);
        }
        true
    }

    /// append/prepend: the new item is old value + data (or data + old).
    /// A miss is NotStored with size `usize::MAX`.
    fn concat(&self, head: usize, w: &Write<'_>) -> (StoreStatus, u64, usize) {
        let (mode, key, data, cas) = (w.mode, w.key, w.value, w.cas);
        let hash = hash_key(key);
        let mut forced = None;
        loop {
            let (old_loc, spec, lane) = {
                let mut table = self.shard(hash).write();
                let Some(f) = self.find_live(&mut table, key, hash) else {
                    return (StoreStatus::NotStored, 0, usize::MAX);
                };
                if cas != 0 && self.cas_of(f.loc, f.item) != cas {
                    return (StoreStatus::Exists, 0, 0);
                }
                // The new value is raw: the client's bytes of the old one
                // (decoded if packed) and `data`.
                let old = f.item.spec();
                let spec = item::ItemSpec {
                    cas: self.explicit(w.new_cas).or(forced),
                    ..old.with_raw_value(old.raw_len() + data.len())
                };
                (f.loc, spec, self.update_head(head, &f))
            };
            if self.too_large(key.len(), spec.flags, spec.value_len) {
                return (StoreStatus::NotStored, 0, 0);
            }
            let Some(slot) = self.reserve(lane, &spec) else {
                return (StoreStatus::OutOfMemory, 0, 0);
            };
            let Some((mut table, old)) = self.relock_at(key, hash, old_loc) else {
                // Changed while we reserved: start over.
                self.abandon(slot);
                continue;
            };
            // The expiry may have been touched in place meanwhile.
            let spec = item::ItemSpec {
                exptime: old.item.exptime(),
                ..spec
            };
            let old_value = self.value_of(old.item);
            let binary = w.binary_key || old.item.has_state(item::STATE_BINARY_KEY);
            let state = if binary { item::STATE_BINARY_KEY } else { 0 };
            self.write_item(&slot, &spec, key, &[], state);
            // SAFETY: the slot was reserved for `spec`, whose value is
            // `spec.value_len` bytes from `value_ptr`; it is this thread's
            // until linked (no reader can reach it).
            let value =
                unsafe { std::slice::from_raw_parts_mut(slot.ptr.value_ptr(), spec.value_len) };
            let (old_part, data_part) = if mode == StoreMode::Append {
                value.split_at_mut(old_value.len())
            } else {
                let (d, o) = value.split_at_mut(data.len());
                (o, d)
            };
            data_part.copy_from_slice(data);
            if old_value.write_into(old_part).is_err() {
                // The old value is lost: the key misses, as after an
                // eviction (see `drop_corrupt`).
                self.unlink(&mut table, &old);
                self.compress_errors.fetch_add(1, Ordering::Relaxed);
                drop(table);
                self.abandon(slot);
                return (StoreStatus::NotStored, 0, usize::MAX);
            }
            if let Some(c) = self.cas_conflict(&slot, spec.cas.is_some(), Some(&old)) {
                forced = Some(c);
                drop(table);
                self.abandon(slot);
                continue;
            }
            self.link(&mut table, hash, &slot, Some(&old));
            let new_cas = self.slot_cas(&slot);
            drop(table);
            self.arena.finish_write(slot.seg);
            return (StoreStatus::Stored, new_cas, spec.value_len);
        }
    }
}
