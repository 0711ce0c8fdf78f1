//! The store's side of the flash tier (see `flash`): an item the RAM
//! evictor would drop goes to flash instead (`demote`: packed on the way
//! when it is raw, see `flash::stage`); a GET that misses
//! RAM looks on flash (`read_flash`), and one in `ext_recache_rate` reads of
//! items read there before brings the item back into RAM; every other command sees a key on flash as
//! present: the item is brought back into RAM before the command runs
//! (`promote`); a new RAM item for a key removes the key's flash entry
//! (`Store::link_counted`), so a key is in one tier at a time (for an
//! instant in both, during a move: RAM is looked at first).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use crate::flash::device::AlignedBuf;
use crate::flash::{FlashRead, Source};
use crate::index::Found;
use crate::item::{self, ItemPtr, ItemSpec, ItemView};
use crate::store::Store;
use crate::types::{Lookup, StoreMode, Write};

thread_local! {
    /// A thread's buffer for flash reads (grown to the largest record it
    /// read).
    static READ_BUF: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
    /// Records this thread read ahead of the lookups that need them (see
    /// `Store::flash_wanted`), oldest first.
    static READY: RefCell<VecDeque<Ready>> = const { RefCell::new(VecDeque::new()) };
    /// Reads of hot items on flash, for `ext_recache_rate`.
    static RECACHE_COUNT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// Buffers of reads ahead whose records were used, for the next
    /// reads: a new buffer is new memory the kernel must fault in and zero
    /// (most of a large read's CPU), a spare one is not.
    static SPARE: RefCell<Vec<AlignedBuf>> = const { RefCell::new(Vec::new()) };
}

/// Records read ahead that a thread keeps, at most.
const READY_MAX: usize = 256;
/// Spare read buffers a thread keeps, at most, and their bytes at most.
const SPARE_MAX: usize = 32;
const SPARE_BYTES: usize = 16 << 20;

/// A buffer of at least `len` bytes for a read: the smallest spare that
/// holds it, else a new one.
fn spare_buf(len: usize) -> AlignedBuf {
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        let fit = (0..s.len())
            .filter(|&i| s[i].len() >= len)
            .min_by_key(|&i| s[i].len());
        match fit {
            Some(i) => s.swap_remove(i),
            None => AlignedBuf::new(len),
        }
    })
}

/// Keeps a read buffer for later reads, within `SPARE_MAX` buffers and
/// `SPARE_BYTES` (the smallest go first when over; one that does not fit
/// is freed).
fn give_back(buf: AlignedBuf) {
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        let held: usize = s.iter().map(|b| b.len()).sum();
        if buf.len() > SPARE_BYTES {
            return;
        }
        s.push(buf);
        let mut held = held + s.last().map_or(0, |b| b.len());
        while s.len() > SPARE_MAX || held > SPARE_BYTES {
            let smallest = (0..s.len()).min_by_key(|&i| s[i].len()).expect("not empty");
            held -= s.swap_remove(smallest).len();
        }
    });
}

/// A record read ahead: `len` bytes of `buf` from `skip` are the record of
/// the key with `hash` at flash address `addr`.
struct Ready {
    hash: u64,
    addr: u64,
    buf: AlignedBuf,
    skip: usize,
    len: usize,
}

/// Where to read a record the caller reads itself (see
/// [`Store::flash_source`]).
pub enum FlashFetch {
    /// Nothing to read: the record is gone, or was in RAM and is ready.
    Ready,
    /// Read `len` bytes at `offset` of `fd` into `buf` (block aligned),
    /// then hand them over with [`Store::flash_arrived`].
    Disk {
        /// The flash file.
        fd: std::os::fd::RawFd,
        /// Offset of the first block, in the file.
        offset: u64,
        /// Bytes to read.
        len: usize,
        /// Where the record starts in what is read.
        skip: usize,
        /// The buffer to read into.
        buf: AlignedBuf,
    },
}

/// State bits an item keeps on flash.
const KEPT_STATE: u8 =
    item::STATE_FETCHED | item::STATE_STALE | item::STATE_TOKEN_SENT | item::STATE_BINARY_KEY;

impl Store {
    /// Writes `found`'s item to the flash tier and points its key there, in
    /// place of evicting it; false when the tier takes nothing (off,
    /// failed, a value under `ext_item_size`). The caller holds the key's
    /// shard lock and unlinks the RAM item after; `flushes` is the arena's
    /// flush number read before it checked the item.
    pub(crate) fn demote(&self, hash: u64, found: &Found, flushes: u32) -> bool {
        let Some(flash) = &self.flash else {
            return false;
        };
        let it = found.item;
        if it.value_len() < flash.config().item_size_min {
            return false;
        }
        // The CAS unique moves with the item (in RAM it is its location's).
        let spec = ItemSpec {
            cas: Some(self.version_of(found.loc, it)),
            ..it.spec()
        };
        let (state, atime) = (it.state() & KEPT_STATE, self.base_atime(found.loc, it));
        // A raw value worth a try waits in RAM to be packed by the
        // flusher (`flash::stage`, which points the key at it); the rest
        // is appended as it is (a value packed in RAM stays packed).
        let staged = flash.stage(hash, &spec, it.key(), it.stored_value(), state, Some(atime));
        let written = staged.or_else(|| {
            let entry = flash.append(
                &spec,
                it.key(),
                it.stored_value(),
                state,
                true,
                crate::flash::Origin::Ram,
                Some(atime),
            )?;
            flash.index.insert(hash, entry);
            Some(entry)
        });
        match written {
            Some(entry) => {
                if self.arena.flush_epoch() != flushes {
                    // A flush_all ran since the item was checked: the copy
                    // may be past the flush's mark on flash. It goes, as
                    // the item would have.
                    flash.index.remove_at(hash, entry.addr);
                }
                true
            }
            None => false,
        }
    }

    /// A GET that missed RAM: runs `f` on the item if the flash tier holds
    /// the key (read into this thread's buffer; `f` must not call back into
    /// the store).
    pub(crate) fn read_flash<R>(
        &self,
        key: &[u8],
        hash: u64,
        now: u32,
        f: impl FnOnce(ItemView<'_>) -> R,
    ) -> Lookup<R> {
        let Some(flash) = &self.flash else {
            return Lookup::Miss;
        };
        let Some(r) = flash.find(hash) else {
            return Lookup::Miss;
        };
        let ready = take_ready(&r);
        let (result, recache) = READ_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            let read = match &ready {
                Some(rd) => flash.check(&r, key, &rd.buf[rd.skip..rd.skip + rd.len]),
                None => flash.read(&r, key, &mut buf),
            };
            let Some(bytes) = read else {
                flash.stats.get_misses.fetch_add(1, Ordering::Relaxed);
                return (Lookup::Miss, None);
            };
            // SAFETY: a verified record's item bytes are a whole item, in
            // this thread's buffer until the next read.
            let it = unsafe { ItemPtr::from_raw(bytes.as_ptr() as *mut u8) };
            let meta = it.meta();
            if meta.exptime != 0 && meta.exptime <= now {
                flash.index.remove_at(r.hash, r.entry.addr);
                return (Lookup::Expired, None);
            }
            flash.stats.get_hits.fetch_add(1, Ordering::Relaxed);
            it.set_state(item::STATE_FETCHED);
            let view = ItemView {
                ptr: it,
                meta,
                cas: if self.cfg.use_cas {
                    meta.stored_cas.unwrap_or(0)
                } else {
                    0
                },
                base_time: now,
                lock_free: false,
                dicts: &self.dicts,
            };
            let out = f(view);
            // Read twice since it was written: back into RAM. Not while
            // this thread keeps its pin for values it has not sent yet: the
            // write could make room by reusing a segment, and the reuse
            // does not wait for the writer's own pin.
            let rate = flash.config().recache_rate;
            let due = r.entry.hot
                && rate > 0
                && !crate::epoch::keeps()
                && RECACHE_COUNT.with(|c| {
                    let n = c.get().wrapping_add(1);
                    c.set(n);
                    n % rate == 0
                });
            // Back in RAM raw: a packed value is decoded into the copy.
            let recache = due
                .then(|| {
                    let value = it.value_ref_at(&meta, &self.dicts).to_vec().ok()?;
                    Some((
                        ItemSpec {
                            cas: meta.stored_cas,
                            ..it.spec()
                        },
                        value,
                        it.state() & KEPT_STATE,
                    ))
                })
                .flatten();
            if recache.is_none() {
                flash.index.mark_hot(r.hash, r.entry.addr);
            }
            (Lookup::Hit(out), recache)
        });
        if let Some(rd) = ready {
            give_back(rd.buf);
        }
        if let Some((spec, value, state)) = recache {
            self.back_to_ram(key, &spec, &value, state);
            flash.stats.recaches.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// Stores an item read from flash in RAM again (unless the key got a
    /// RAM item meanwhile); linking it removes its flash entry.
    fn back_to_ram(&self, key: &[u8], spec: &ItemSpec, value: &[u8], state: u8) {
        let w = Write {
            mode: StoreMode::Add,
            key,
            flags: spec.flags,
            exptime: spec.exptime,
            value,
            new_cas: spec.cas.unwrap_or(0),
            binary_key: state & item::STATE_BINARY_KEY != 0,
            ..Write::default()
        };
        self.store_unpromoted(self.copy_head, &w);
    }

    /// Before a command that reads or changes `key`'s item in place of a
    /// plain GET or SET (add, replace, cas, append, prepend, incr, decr,
    /// touch, delete, the meta commands' variants): if the key is on flash
    /// and not in RAM, brings its item back into RAM, so that the command
    /// sees it as memcached's would. The read blocks this thread.
    pub(crate) fn promote(&self, key: &[u8], hash: u64) {
        let Some(flash) = &self.flash else {
            return;
        };
        let Some(r) = flash.find(hash) else {
            return;
        };
        if self
            .shard(hash)
            .read()
            .find(&self.arena, key, hash)
            .is_some()
        {
            return;
        }
        let now = self.clock.now();
        let found = READ_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            let bytes = flash.read(&r, key, &mut buf)?;
            // SAFETY: as in `read_flash`.
            let it = unsafe { ItemPtr::from_raw(bytes.as_ptr() as *mut u8) };
            let spec = it.spec();
            if spec.exptime != 0 && spec.exptime <= now {
                return None;
            }
            // A value that does not decode is dropped with the entry.
            let value = self.value_of(it).to_vec().ok()?;
            Some((spec, value, it.state() & KEPT_STATE))
        });
        match found {
            Some((spec, value, state)) => self.back_to_ram(key, &spec, &value, state),
            None => {
                flash.index.remove_at(r.hash, r.entry.addr);
            }
        }
    }

    /// For a GET-family request whose flash reads the caller does itself
    /// (without blocking): the key's record if the key is on flash, not in
    /// RAM, and not read ahead already.
    pub fn flash_wanted(&self, key: &[u8]) -> Option<FlashRead> {
        let flash = self.flash.as_ref()?;
        let hash = crate::index::hash_key(key);
        let r = flash.find(hash)?;
        if is_ready(&r)
            || self
                .shard(hash)
                .read()
                .find(&self.arena, key, hash)
                .is_some()
        {
            return None;
        }
        Some(r)
    }

    /// Where to read `r` (see [`FlashFetch`]); a record still in a write
    /// buffer is made ready at once.
    pub fn flash_source(&self, r: &FlashRead) -> FlashFetch {
        let Some(flash) = &self.flash else {
            return FlashFetch::Ready;
        };
        let mut buf = None;
        match flash.source(r, &mut buf) {
            Source::Gone => {
                // Flushed or reclaimed: the entry goes, so that the lookup
                // that wanted it misses instead of wanting it again.
                flash.index.remove_at(r.hash, r.entry.addr);
                FlashFetch::Ready
            }
            Source::Ram { len } => {
                keep_ready(Ready {
                    hash: r.hash,
                    addr: r.entry.addr,
                    buf: buf.expect("copied"),
                    skip: 0,
                    len,
                });
                FlashFetch::Ready
            }
            Source::Disk {
                fd,
                offset,
                len,
                skip,
            } => FlashFetch::Disk {
                fd,
                offset,
                len,
                skip,
                buf: spare_buf(len),
            },
        }
    }

    /// A read the caller did for `r` (see [`FlashFetch::Disk`]) finished:
    /// `Ok(n)` bytes arrived in `buf`, or the read failed. The next lookup
    /// of the key on this thread uses them.
    pub fn flash_arrived(
        &self,
        r: &FlashRead,
        buf: AlignedBuf,
        skip: usize,
        result: std::io::Result<usize>,
    ) {
        let Some(flash) = &self.flash else {
            return;
        };
        match result {
            Ok(n) if n > skip => {
                flash.note_read(n);
                keep_ready(Ready {
                    hash: r.hash,
                    addr: r.entry.addr,
                    buf,
                    skip,
                    len: n - skip,
                });
            }
            Ok(_) => give_back(buf),
            Err(e) => {
                give_back(buf);
                flash.read_failed(&e);
            }
        }
    }

    /// Removes the key's flash entry (a new RAM item for it was linked).
    #[inline]
    /// Removes the key's flash entry, if any; true if it had one.
    pub(crate) fn forget_flash(&self, hash: u64) -> bool {
        match &self.flash {
            Some(flash) => flash.index.remove(hash),
            None => false,
        }
    }

    /// Whether the flash tier has an entry for the key.
    pub(crate) fn flash_has(&self, hash: u64) -> bool {
        self.flash
            .as_ref()
            .is_some_and(|f| f.index.get(hash).is_some())
    }
}

/// Whether `r`'s record was read ahead on this thread.
fn is_ready(r: &FlashRead) -> bool {
    READY.with(|q| {
        q.borrow()
            .iter()
            .any(|x| x.hash == r.hash && x.addr == r.entry.addr)
    })
}

/// Takes `r`'s record read ahead on this thread, if any.
fn take_ready(r: &FlashRead) -> Option<Ready> {
    READY.with(|q| {
        let mut q = q.borrow_mut();
        let i = q
            .iter()
            .position(|x| x.hash == r.hash && x.addr == r.entry.addr)?;
        q.remove(i)
    })
}

/// Keeps a record read ahead (dropping the oldest beyond `READY_MAX`).
fn keep_ready(r: Ready) {
    READY.with(|q| {
        let mut q = q.borrow_mut();
        if q.len() >= READY_MAX {
            if let Some(old) = q.pop_front() {
                give_back(old.buf);
            }
        }
        q.push_back(r);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spare_lens() -> Vec<usize> {
        SPARE.with(|s| {
            let mut v: Vec<usize> = s.borrow().iter().map(|b| b.len()).collect();
            v.sort_unstable();
            v
        })
    }

    #[test]
    fn spare_buffers_are_reused_and_bounded() {
        // A buffer given back is the one a read of its size gets again.
        let b = spare_buf(10_000);
        let ptr = b.as_ptr();
        give_back(b);
        let again = spare_buf(9_000);
        assert_eq!(again.as_ptr(), ptr, "the smallest spare that holds it");
        give_back(again);
        // At most SPARE_MAX buffers: the smallest go first.
        for i in 0..SPARE_MAX + 8 {
            give_back(AlignedBuf::new(4096 * (i + 1)));
        }
        let lens = spare_lens();
        assert!(lens.len() <= SPARE_MAX, "{}", lens.len());
        assert!(lens.iter().sum::<usize>() <= SPARE_BYTES);
        assert!(!lens.contains(&4096), "the smallest went first");
        // At most SPARE_BYTES: big ones push small ones out, one over the
        // limit by itself is freed.
        for _ in 0..40 {
            give_back(AlignedBuf::new(1 << 20));
        }
        give_back(AlignedBuf::new(SPARE_BYTES + 4096));
        let lens = spare_lens();
        assert!(lens.iter().sum::<usize>() <= SPARE_BYTES, "{lens:?}");
        assert!(lens.iter().all(|&l| l <= SPARE_BYTES));
    }
}
