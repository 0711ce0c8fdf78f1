//! Reads: single and multi-key lookups (lock-free and pinned, falling back
//! to the shard's read lock), the prefetch hints that overlap their cache
//! misses, and the reads that also change the item: a new expiry (touch,
//! get-and-touch), a hit recorded after the caller has seen the item, and
//! a placeholder created on a miss ([`Store::fetch`]).

use crate::arena::Queue;
use crate::epoch;
use crate::index::{hash_key, Found, Table};
use crate::item::{self, ItemView};
use crate::store::Store;
use crate::types::{Fetch, Lookup};

impl Store {
    /// Looks `key` up; on a hit runs `f` on the item (lock-free, pinned; or
    /// under the shard's lock). `touch` sets a new expiry (gat/gats/touch).
    /// `f` must not call back into the store.
    pub fn get<R>(
        &self,
        key: &[u8],
        touch: Option<u32>,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Lookup<R> {
        let hash = hash_key(key);
        let now = self.clock.now();
        self.flush_due(now);
        if let Some(exptime) = touch {
            self.promote(key, hash);
            return self.touched(self.copy_head, key, hash, exptime, true, |v, _| f(v));
        }
        self.lookup(key, hash, now, f)
    }

    /// Looks up several keys (a multi-key get), calling `f` for each in
    /// order with its item or its kind of miss, until `f` returns false.
    /// Overlaps the keys' memory accesses: while key `i` is served, the
    /// home bucket of key `i + 2 × AHEAD` and the item that key `i + AHEAD`
    /// probably points at are prefetched, so up to 2 × AHEAD cache misses
    /// are in flight instead of the one or two a lone lookup allows.
    pub fn get_many<'k, I>(
        &self,
        keys: I,
        mut f: impl FnMut(&'k [u8], Lookup<ItemView<'_>>) -> bool,
    ) where
        I: Iterator<Item = &'k [u8]> + Clone,
    {
        const AHEAD: usize = 4;
        const RING: usize = 4 * AHEAD;
        let now = self.clock.now();
        self.flush_due(now);
        // Hashes of the keys from i to i + 2 × AHEAD, by position mod RING.
        let mut hashes = [0u64; RING];
        let mut lead = keys.clone();
        let mut led = 0;
        for (i, key) in keys.enumerate() {
            while led <= i + 2 * AHEAD {
                let Some(k) = lead.next() else { break };
                hashes[led % RING] = self.prefetch_bucket(k);
                led += 1;
            }
            if i + AHEAD < led {
                self.prefetch_item(hashes[(i + AHEAD) % RING]);
            }
            let hash = hashes[i % RING];
            let go = match self.lookup(key, hash, now, |v| f(key, Lookup::Hit(v))) {
                Lookup::Hit(go) => go,
                Lookup::Miss => f(key, Lookup::Miss),
                Lookup::Expired => f(key, Lookup::Expired),
                Lookup::Flushed => f(key, Lookup::Flushed),
            };
            if !go {
                return;
            }
        }
    }

    /// Asks the CPU to fetch the home bucket of `key` (a hint for a lookup
    /// coming soon) and returns the key's hash, for [`Store::prefetch_item`]
    /// once the bucket has had time to arrive. The server calls it for the
    /// first request of every connection an event loop turn will serve.
    #[inline]
    pub fn prefetch_bucket(&self, key: &[u8]) -> u64 {
        let hash = hash_key(key);
        // SAFETY: the shard's table lives as long as the store.
        unsafe { Table::prefetch_bucket(self.shard(hash).lock.data_ptr(), hash) };
        hash
    }

    /// Asks the CPU to fetch the item that the first entry of `hash`'s home
    /// bucket with a matching tag points at (a guess read without a lock;
    /// nothing is dereferenced). Cheap once the bucket is cached.
    #[inline]
    pub fn prefetch_item(&self, hash: u64) {
        // SAFETY: the shard's table lives as long as the store.
        if let Some(loc) = unsafe { Table::guess_location(self.shard(hash).lock.data_ptr(), hash) }
        {
            self.arena.prefetch_item(loc.seg, loc.offset);
        }
    }

    /// A GET of `key` (whose hash is `hash`) at time `now`.
    #[inline]
    pub(crate) fn lookup<R>(
        &self,
        key: &[u8],
        hash: u64,
        now: u32,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Lookup<R> {
        let shard = self.shard(hash);
        // Lock-free first: pinned, so the item's memory is not reused
        // before `f` is done with it (see `epoch`).
        if let Some(pin) = epoch::pin() {
            if let Some(found) = shard.find_optimistic(&self.arena, key, hash) {
                let Some(found) = found else {
                    drop(pin);
                    return self.read_flash(key, hash, now, f);
                };
                return match self.serve(&found, hash, now, true, f) {
                    Ok(r) => Lookup::Hit(r),
                    Err(stale) => {
                        // Never wait for a lock while pinned.
                        drop(pin);
                        self.unlink_stale(key, hash, found.loc);
                        stale.map_hit()
                    }
                };
            }
        }
        let table = shard.read();
        let Some(found) = table.find(&self.arena, key, hash) else {
            drop(table);
            return self.read_flash(key, hash, now, f);
        };
        match self.serve(&found, hash, now, false, f) {
            Ok(r) => Lookup::Hit(r),
            Err(stale) => {
                drop(table);
                self.unlink_stale(key, hash, found.loc);
                stale.map_hit()
            }
        }
    }

    /// A GET's answer for a found item (whose key's hash is `hash`): runs
    /// `f` on it (counting the hit; a packed item that turns hot is noted
    /// for promotion, see `promote`), or says it is expired or flushed.
    /// The caller holds the shard's lock or (`lock_free`) is pinned.
    #[inline]
    fn serve<R>(
        &self,
        found: &Found,
        hash: u64,
        now: u32,
        lock_free: bool,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Result<R, Lookup<()>> {
        match self.check_exptime(found.meta.exptime, found.loc, now) {
            Lookup::Hit(()) => {}
            stale => return Err(stale),
        }
        found.item.bump(self.atime_in(found.loc.seg, now));
        if found.meta.is_packed() {
            self.note_hot_packed(found.item, hash, found.loc);
        }
        let mut view = self.view_with(found.loc, found.item, found.meta);
        view.lock_free = lock_free;
        Ok(f(view))
    }

    /// A hit that sets a new expiry: in place when the item has an expiry
    /// field, else by replacing it with a copy that has one (keeping its
    /// CAS unique). Runs `f` under the write lock on the (possibly new)
    /// item, whose view still shows the expiry from before, and whether
    /// it was hit (bumped) if `bump`.
    fn touched<R>(
        &self,
        head: usize,
        key: &[u8],
        hash: u64,
        exptime: u32,
        bump: bool,
        f: impl FnOnce(ItemView<'_>, bool) -> R,
    ) -> Lookup<R> {
        loop {
            let mut table = self.shard(hash).write();
            let found = match self.find_checked(&mut table, key, hash) {
                Ok(found) => found,
                Err(missed) => return missed.map_hit(),
            };
            let it = found.item;
            if it.has_exptime_field() || exptime == 0 {
                let view = self.view(found.loc, it);
                if it.has_exptime_field() {
                    // SAFETY: we hold the shard write lock.
                    unsafe { it.set_exptime(exptime) };
                    self.arena.segment(found.loc.seg).note_expiry(exptime);
                }
                let r = f(view, false);
                if bump {
                    it.bump(self.atime_in(found.loc.seg, self.clock.now()));
                }
                return Lookup::Hit(r);
            }
            // Copy it with an expiry field, keeping its CAS unique.
            let spec = item::ItemSpec {
                exptime,
                exptime_field: true,
                cas: self.explicit(self.cas_of(found.loc, it)),
                ..it.spec()
            };
            let old_loc = found.loc;
            drop(table);
            let Some(slot) = self.reserve(head, &spec) else {
                return Lookup::Miss;
            };
            let Some((mut table, old)) = self.relock_at(key, hash, old_loc) else {
                // Changed while we reserved: start over.
                self.abandon(slot);
                continue;
            };
            let view_before = self.view(old.loc, old.item);
            self.write_item(
                &slot,
                &spec,
                key,
                &[old.item.stored_value()],
                old.item.state(),
            );
            slot.ptr
                .set_atime(self.atime_in(slot.seg, self.base_atime(old.loc, old.item)));
            self.link_counted(&mut table, hash, &slot, Some(&old), false);
            // The copy's header has the new expiry; its view shows the old.
            let mut meta = slot.ptr.meta();
            meta.exptime = view_before.exptime();
            let r = f(
                ItemView {
                    ptr: slot.ptr,
                    meta,
                    ..view_before
                },
                false,
            );
            if bump {
                slot.ptr.bump(self.atime_in(slot.seg, self.clock.now()));
            }
            drop(table);
            self.arena.finish_write(slot.seg);
            return Lookup::Hit(r);
        }
    }

    /// Looks `key` up and runs `f` on the item *before* the hit is recorded
    /// (so `f` sees whether it was fetched before and its last access):
    /// lock-free and pinned as a GET (`ItemView::lock_free`), else under
    /// the shard's lock; `f` also gets whether the item was just created.
    /// With `fetch.create`, a miss creates an empty item. `fetch.record_hit`
    /// records the hit; `fetch.new_exptime` sets a new expiry (the view
    /// shows the one before).
    pub fn fetch<R>(
        &self,
        head: usize,
        key: &[u8],
        fetch: &Fetch,
        f: impl FnOnce(ItemView<'_>, bool) -> R,
    ) -> Lookup<R> {
        let bump = fetch.record_hit;
        let hash = hash_key(key);
        let now = self.clock.now();
        self.flush_due(now);
        let mut f = Some(f);
        if fetch.new_exptime.is_some() || fetch.create.is_some() {
            self.promote(key, hash);
        }
        let missed = if let Some(exptime) = fetch.new_exptime {
            let lane = self.arena.head(head, Queue::Main);
            let r = self.touched(lane, key, hash, exptime, bump, |v, c| {
                (f.take().expect("called once"))(v, c)
            });
            match r {
                Lookup::Hit(r) => return Lookup::Hit(r),
                Lookup::Miss => Lookup::Miss,
                Lookup::Expired => Lookup::Expired,
                Lookup::Flushed => Lookup::Flushed,
            }
        } else {
            // As a GET: lock-free (pinned) first, else under the read lock;
            // `f` sees the item before the hit is recorded either way.
            let shard = self.shard(hash);
            let mut pin = epoch::pin();
            let optimistic = pin
                .as_ref()
                .and_then(|_| shard.find_optimistic(&self.arena, key, hash));
            let table = if optimistic.is_none() {
                // Never wait for a lock while pinned (an evictor holding
                // it may be waiting for the pin).
                pin = None;
                Some(shard.read())
            } else {
                None
            };
            let found = match (&table, optimistic) {
                (_, Some(found)) => found,
                (Some(table), None) => table.find(&self.arena, key, hash),
                (None, None) => None,
            };
            match found {
                None => {
                    drop(table);
                    drop(pin);
                    match self.read_flash(key, hash, now, |v| {
                        (f.take().expect("called once"))(v, false)
                    }) {
                        Lookup::Hit(r) => return Lookup::Hit(r),
                        Lookup::Miss => Lookup::Miss,
                        Lookup::Expired => Lookup::Expired,
                        Lookup::Flushed => Lookup::Flushed,
                    }
                }
                Some(found) => match self.check_exptime(found.meta.exptime, found.loc, now) {
                    Lookup::Hit(()) => {
                        let mut view = self.view_with(found.loc, found.item, found.meta);
                        view.lock_free = table.is_none();
                        let r = (f.take().expect("called once"))(view, false);
                        if bump {
                            found.item.bump(self.atime_in(found.loc.seg, now));
                            if found.meta.is_packed() {
                                self.note_hot_packed(found.item, hash, found.loc);
                            }
                        }
                        return Lookup::Hit(r);
                    }
                    stale => {
                        // Never wait for a lock while pinned.
                        drop(table);
                        drop(pin);
                        self.unlink_stale(key, hash, found.loc);
                        stale.map_hit()
                    }
                },
            }
        };
        let Some(v) = fetch.create.as_ref() else {
            return missed;
        };
        let spec = item::ItemSpec {
            key_len: key.len(),
            exptime: v.exptime,
            cas: self.explicit(v.cas),
            ..Default::default()
        };
        let Some(slot) = self.reserve(self.new_item_head(head, hash), &spec) else {
            return missed;
        };
        let state = if v.binary_key {
            item::STATE_BINARY_KEY
        } else {
            0
        };
        let mut table = self.shard(hash).write();
        // Written under the lock: a racing creation may have won.
        let (loc, it, created) = match self.find_live(&mut table, key, hash) {
            Some(existing) => {
                slot.ptr.mark_dead();
                (existing.loc, existing.item, false)
            }
            None => {
                self.write_item(&slot, &spec, key, &[], state);
                (self.link(&mut table, hash, &slot, None), slot.ptr, true)
            }
        };
        let r = (f.take().expect("called once"))(self.view(loc, it), created);
        if bump {
            it.bump(self.atime_in(loc.seg, self.clock.now()));
        }
        drop(table);
        self.arena.finish_write(slot.seg);
        Lookup::Hit(r)
    }

    /// touch: sets a new expiry. Returns whether the key was live.
    pub fn touch(&self, key: &[u8], exptime: u32) -> Lookup<()> {
        self.get(key, Some(exptime), |_| ())
    }
}
