//! The [`Store`]: its parts, its construction and the plumbing every
//! operation shares — shard access, item views, liveness checks, linking
//! and unlinking under a shard lock, CAS uniques, and reserving item
//! space. The operations themselves are in `read`, `write`, `remove`,
//! `counter`, `evict`, `flush`, `stats` and `dump`.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::arena::{Arena, Queue, Reserve, Room, SegmentId, Slot};
use crate::backing::{Backing, BackingKind, Layout};
use crate::clock::Clock;
use crate::ghost::Ghost;
use crate::index::{shard_of, AddrCodec, Found, Location, Table, SHARDS};
use crate::item::{self, ItemPtr, ItemView};
use crate::memfile;
use crate::shard::{HeadCounters, Shard, ShardWrite};
use crate::types::Restart;
use crate::types::{memcached_item_total, segment_size_for, Lookup, StoreConfig};

/// Longest a caller spins waiting for a busy segment before giving up.
const RESERVE_RETRIES: usize = 64;

/// The cache: item memory, the hash index, eviction, compaction, expiry and the
/// flash tier (see the crate's documentation).
pub struct Store {
    pub(crate) cfg: StoreConfig,
    /// Indexed by write head (modulo its length).
    pub(crate) head_counters: Box<[HeadCounters]>,
    pub(crate) clock: Clock,
    pub(crate) arena: Arena,
    pub(crate) shards: Box<[Shard]>,
    /// The write head of copies made outside a worker's own writes (touch
    /// and gat give no head).
    pub(crate) copy_head: usize,
    /// Keys recently evicted from the small queue.
    pub(crate) ghost: Ghost,
    /// Pending flushes of a flush_all (relative times, 0 = none): see
    /// `flush_all_after`.
    pub(crate) flush_at: [AtomicU32; 2],
    /// Their numbers, and how many flushes were numbered (see `flush`).
    pub(crate) flush_epochs: [AtomicU32; 2],
    pub(crate) flush_count: AtomicU32,
    pub(crate) limit_maxbytes: AtomicU64,
    /// log2(segment size / item alignment): the bits of a location CAS
    /// below the segment sequence.
    pub(crate) cas_offset_bits: u32,
    /// The flash tier (`-o ext_path`).
    pub(crate) flash: Option<std::sync::Arc<crate::flash::Flash>>,
    /// Taken by whoever compacts or evicts a segment (see `compact`).
    pub(crate) cleaner: parking_lot::Mutex<()>,
    pub(crate) clean_stats: crate::arena::CleanStats,
    /// The compaction's notes of the live items it moves (kept from one
    /// compaction to the next; compactions take turns under `cleaner`).
    pub(crate) compact_plan: parking_lot::Mutex<Vec<(u32, u64)>>,
    /// Set (and signalled) when writers find free segments low: wakes the
    /// background cleaner.
    pub(crate) clean_wanted: (parking_lot::Mutex<bool>, parking_lot::Condvar),
    /// What is reported to the owner (`events`).
    pub(crate) events: crate::events::Events,
    /// The dictionaries packed values may name.
    pub(crate) dicts: crate::dict::DictTable,
    /// Packed values that did not decode (see `drop_corrupt`).
    pub(crate) compress_errors: AtomicU64,
    /// The pack pass's working state (`-o compression=cold`; see `pack`).
    pub(crate) pack_work: parking_lot::Mutex<crate::pack_state::PackWork>,
    /// The pack pass's counters.
    pub(crate) pack_stats: crate::pack_state::PackStats,
    /// Hot packed items GETs noted, for the cleaner to write back raw
    /// (`promote`).
    pub(crate) promote_queue: crate::promote_queue::PromoteQueue,
}

impl Store {
    /// A store in anonymous memory (`cfg.backing` must be
    /// `BackingKind::Anonymous`; see [`Store::open`] for a memory file).
    /// Panics if the address space cannot be reserved.
    pub fn new(cfg: StoreConfig) -> Store {
        assert_eq!(
            cfg.backing,
            BackingKind::Anonymous,
            "Store::open opens memory files"
        );
        match Store::open(cfg) {
            Ok((store, _)) => store,
            Err(e) => panic!("cannot reserve address space for item memory: {e}"),
        }
    }

    /// A store in the memory `cfg.backing` names. With a memory file, the
    /// cache the file holds is taken over (its index rebuilt from its
    /// segments by `threads` threads, see `recover`) when the file was made
    /// by a server with the same settings; otherwise the cache starts
    /// clean, and the [`Restart`] says why.
    pub fn open(cfg: StoreConfig) -> io::Result<(Store, Restart)> {
        Store::open_with(cfg, None, None)
    }

    /// A store whose item memory is the memfd `memory` a binary upgrade
    /// handed over (see [`Store::hand_over`] and `memfd`), with
    /// `cfg.backing` [`BackingKind::Memfd`]: its cache is taken over as a
    /// memory file's is when it was made with the same settings; otherwise
    /// the cache starts clean in a new memfd, and the [`Restart`] says
    /// why. The store maps a duplicate of `memory`: the caller closes its
    /// own fd.
    pub fn open_inherited(
        cfg: StoreConfig,
        memory: BorrowedFd<'_>,
    ) -> io::Result<(Store, Restart)> {
        Store::open_with(cfg, Some(memory), None)
    }

    /// A store that takes over what a binary upgrade handed over: item
    /// memory in a memfd (as [`Store::open_inherited`]) and the flash
    /// tier's metadata in a memfd ([`Store::hand_over_flash`]), each when
    /// given and `cfg.backing` is [`BackingKind::Memfd`]. The store maps
    /// duplicates: the caller closes its own fds.
    pub fn open_handed_over(
        cfg: StoreConfig,
        memory: Option<BorrowedFd<'_>>,
        flash_meta: Option<BorrowedFd<'_>>,
    ) -> io::Result<(Store, Restart)> {
        Store::open_with(cfg, memory, flash_meta)
    }

    fn open_with(
        cfg: StoreConfig,
        inherited: Option<BorrowedFd<'_>>,
        flash_inherited: Option<BorrowedFd<'_>>,
    ) -> io::Result<(Store, Restart)> {
        // What the first lookup would otherwise pay (see `epoch::prepare`).
        crate::epoch::prepare();
        let segment_size = segment_size_for(cfg.item_size_max);
        let max_heads = (cfg.memory_limit / segment_size / 4).max(1);
        let heads = cfg.write_heads.clamp(1, max_heads);
        let file = match &cfg.backing {
            BackingKind::Anonymous | BackingKind::Memfd => None,
            BackingKind::File(path) => Some(path.clone()),
        };
        // What this start creates goes again if it fails.
        let mut new_files = crate::new_files::NewFiles::default();
        if let Some(path) = &file {
            new_files.note(path);
        }
        let (_, capacity) = Arena::geometry(cfg.memory_limit, segment_size, file.is_some());
        let layout = Layout::new(capacity, segment_size);
        let fresh_clock = Clock::new();
        let settings = memfile::Settings {
            memory_limit: cfg.memory_limit,
            item_size_max: cfg.item_size_max,
            use_cas: cfg.use_cas,
        };
        let (backing, resume, note) = match &cfg.backing {
            BackingKind::Anonymous => (Backing::anonymous(layout)?, None, None),
            BackingKind::Memfd => {
                let o = crate::memfd::open(
                    &settings,
                    layout,
                    fresh_clock.process_started(),
                    inherited,
                )?;
                (o.backing, o.resume, o.note)
            }
            BackingKind::File(path) => {
                let o = memfile::open(path, &settings, layout, fresh_clock.process_started())?;
                (o.backing, o.resume, o.note)
            }
        };
        let clock = match &resume {
            Some(r) => Clock::resume(r.process_started, r.clock),
            None => fresh_clock,
        };
        // The dictionaries items may name, loaded before any item is
        // trusted (see `dict`): with a memory file, from FILE.dicts; with a
        // memfd, from its bytes past the mapping.
        let dicts = crate::dict::DictTable::new();
        dicts.keep_retired(cfg.flash.is_some());
        let dict_file = match &cfg.backing {
            BackingKind::File(path) => {
                let dicts_path = crate::dict::DictFile::path_beside(path);
                new_files.note(&dicts_path);
                Some(crate::dict::DictFile::beside(path))
            }
            BackingKind::Memfd => backing.memfd().map(|fd| {
                use std::os::fd::AsRawFd;
                let base = layout.total.next_multiple_of(4096) as u64;
                // SAFETY: the memfd is the backing's, which the arena keeps
                // open until the store drops; the table's file is not used
                // in its drop.
                unsafe { crate::dict::DictFile::in_memfd(fd.as_raw_fd(), base) }
            }),
            BackingKind::Anonymous => None,
        };
        let mut new_dict_table = false;
        match dict_file {
            Some(Ok(f)) => {
                new_dict_table = f.is_new();
                dicts.attach(f, cfg.compress_level);
            }
            Some(Err(e)) => {
                // Items that outlive the process must not name a
                // dictionary its file does not hold: none is trained.
                eprintln!("osmium: compression dictionaries off: their file cannot be used: {e}");
                dicts.freeze();
            }
            None => {}
        }
        let arena = Arena::new(backing, cfg.memory_limit, heads, cfg.evictions);
        let codec = AddrCodec::new(
            arena.capacity(),
            arena.segment_shift(),
            item::ALIGN.trailing_zeros(),
        );
        let threads = cfg.recovery_threads.max(1);
        // With a memory file, the flash tier's metadata lives beside it
        // (FILE.flash) and outlives the process too; with item memory in
        // a memfd, in a memfd of its own, which a binary upgrade hands
        // over with item memory (`hand_over_flash`).
        let (flash, flash_resumed) = match &cfg.flash {
            Some(f) => {
                let meta_path = file.as_ref().map(|p| {
                    let mut name = p.as_os_str().to_owned();
                    name.push(".flash");
                    std::path::PathBuf::from(name)
                });
                let f = crate::flash::FlashConfig {
                    item_size_max: cfg.item_size_max,
                    // Staged records are in RAM only: with a memory file,
                    // whose tier a kill -9 must not lose acknowledged items
                    // of, raw items are appended as they are (the RAM pack
                    // pass's packed items still go to flash packed).
                    pack_level: (cfg.compression != crate::types::Compression::Off
                        && meta_path.is_none())
                    .then_some(cfg.compress_level),
                    ..f.clone()
                };
                for p in f
                    .paths
                    .iter()
                    .map(|p| p.path.as_path())
                    .chain(meta_path.as_deref())
                {
                    new_files.note(p);
                }
                let meta = match (&meta_path, &cfg.backing) {
                    (Some(path), _) => crate::flash::MetaSource::File(path),
                    (None, BackingKind::Memfd) => crate::flash::MetaSource::Memfd(flash_inherited),
                    (None, _) => crate::flash::MetaSource::Anonymous,
                };
                let (flash, resumed) = crate::flash::Flash::open(f, meta)?;
                (Some(flash), Some(resumed))
            }
            None => (None, None),
        };
        if new_dict_table
            && flash_resumed
                .as_ref()
                .is_some_and(|r| r.taken_over && r.items > 0)
        {
            // Flash records of an earlier run may name dictionaries of a
            // table that is gone: new ones could take their codec bytes.
            eprintln!(
                "osmium: compression dictionaries off: the flash tier was taken over without \
                 the dictionaries its records may name"
            );
            dicts.freeze();
        }
        let store = Store {
            events: Default::default(),
            flash,
            head_counters: (0..heads).map(|_| HeadCounters::default()).collect(),
            copy_head: arena.copy_head(),
            ghost: Ghost::new(cfg.memory_limit / 96),
            cas_offset_bits: arena.segment_shift() - item::ALIGN.trailing_zeros(),
            arena,
            shards: (0..SHARDS).map(|_| Shard::new(codec)).collect(),
            clock,
            flush_at: [AtomicU32::new(0), AtomicU32::new(0)],
            flush_epochs: [AtomicU32::new(0), AtomicU32::new(0)],
            flush_count: AtomicU32::new(0),
            limit_maxbytes: AtomicU64::new(cfg.memory_limit as u64),
            cleaner: parking_lot::Mutex::new(()),
            clean_stats: Default::default(),
            compact_plan: Default::default(),
            clean_wanted: Default::default(),
            dicts,
            compress_errors: AtomicU64::new(0),
            pack_work: Default::default(),
            pack_stats: Default::default(),
            promote_queue: Default::default(),
            cfg,
        };
        let mut restart = Restart {
            note,
            recovered: None,
            flash: flash_resumed,
        };
        if let Some(r) = resume {
            restart.recovered = Some(store.recover(r, threads));
        } else if let Some(h) = store.memfile_header() {
            h.note_clock(store.clock.now());
        }
        new_files.keep();
        Ok((store, restart))
    }

    /// The flash tier, if there is one.
    /// Sets the hook that hears of the events asked for with
    /// [`Store::report_events`] (once; later calls are ignored).
    pub fn set_event_hook(&self, hook: crate::events::Hook) {
        self.events.set_hook(hook.clone());
        if let Some(f) = &self.flash {
            f.events.set_hook(hook);
        }
    }

    /// Which events the hook hears of (`events::EVICTIONS`,
    /// `events::FLASH_WRITES`; 0 for none).
    pub fn report_events(&self, kinds: u8) {
        self.events.set_wanted(kinds);
        if let Some(f) = &self.flash {
            f.events.set_wanted(kinds);
        }
    }

    /// The flash tier, with `-o ext_path`.
    pub fn flash(&self) -> Option<&crate::flash::Flash> {
        self.flash.as_deref()
    }

    /// The memory file's header, with `-e` or a memfd.
    pub(crate) fn memfile_header(&self) -> Option<&memfile::Header> {
        let backing = self.arena.backing();
        backing.has_header().then(|| memfile::Header::of(backing))
    }

    /// What holds item memory: `memfd`, `anonymous` or `file` (`-e`).
    pub fn item_memory(&self) -> &'static str {
        self.arena.backing().kind_name()
    }

    /// A binary upgrade's hand-over, once every thread that writes has
    /// stopped (no item is being written): with item memory in a memfd,
    /// records the clock and a clean stop in its header and returns a
    /// duplicate of the memfd, not close-on-exec, for the next image to
    /// take the cache over with [`Store::open_inherited`] (see `memfd`).
    /// None for other memory: a memory file is taken over by its path as
    /// after a stop, anonymous memory ends with the image. The store must
    /// not be written to afterwards.
    pub fn hand_over(&self) -> io::Result<Option<OwnedFd>> {
        let backing = self.arena.backing();
        if backing.memfd().is_none() {
            return Ok(None);
        }
        let h = memfile::Header::of(backing);
        h.note_clock(self.clock.now());
        h.mark_closed(self.clock.unix_now());
        crate::memfd::hand_over(backing)
    }

    /// The flash tier's part of a binary upgrade's hand-over, once no
    /// thread writes to the store: with its metadata in a memfd (item
    /// memory in a memfd), the tier stopped gracefully (every write
    /// buffer written out, the metadata marked whole) and a duplicate of
    /// the memfd, not close-on-exec, for the next image to take the tier
    /// over with [`Store::open_handed_over`]. None without a flash tier,
    /// and for metadata in `FILE.flash` (taken over by its path, as after
    /// a kill) or in anonymous memory (the tier starts empty). The store
    /// must not be written to afterwards.
    pub fn hand_over_flash(&self) -> io::Result<Option<OwnedFd>> {
        match &self.flash {
            Some(flash) => flash.hand_over(),
            None => Ok(None),
        }
    }

    /// Advances the clock (see `Clock::tick`) and, with a memory file or a
    /// memfd, records it in its header. The maintainer calls it.
    pub fn tick_clock(&self) {
        self.clock.tick();
        if let Some(h) = self.memfile_header() {
            h.note_clock(self.clock.now());
        }
    }

    /// A graceful stop: with a memory file, writes every page out
    /// (`msync`) and records that the file is whole, so that the next start
    /// takes the cache over even after the system restarted (a memfd's
    /// header records the stop too; it has nothing to write out). The
    /// caller has stopped every thread that writes.
    pub fn close(&self) -> io::Result<()> {
        if let Some(flash) = &self.flash {
            flash.shutdown();
        }
        let Some(h) = self.memfile_header() else {
            return Ok(());
        };
        h.note_clock(self.clock.now());
        self.arena.backing().sync()?;
        h.mark_closed(self.clock.unix_now());
        self.arena.backing().sync()
    }

    /// The configuration the store was made with.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// The store's relative clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Would memcached refuse a value of this size as "too large"?
    pub fn too_large(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        memcached_item_total(key_len, flags, value_len, self.cfg.use_cas) > self.cfg.item_size_max
            || item::ItemSpec {
                key_len,
                value_len,
                flags,
                exptime_field: true,
                cas: Some(0),
                ..Default::default()
            }
            .size()
                > self.arena.segment_size()
    }

    /// cache_memlimit: true if the new limit was applied.
    pub fn set_memory_limit(&self, bytes: usize) -> bool {
        if self.arena.set_limit(bytes) {
            self.limit_maxbytes.store(bytes as u64, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// The CAS unique of the item at `loc` (see `item`): its stored one,
    /// else its location's. 0 with -C.
    #[inline]
    pub(crate) fn cas_of(&self, loc: Location, it: ItemPtr) -> u64 {
        if !self.cfg.use_cas {
            return 0;
        }
        it.stored_cas().unwrap_or_else(|| {
            let seq = self.arena.segment(loc.seg).seq.load(Ordering::Relaxed);
            (seq << self.cas_offset_bits) + (loc.offset / item::ALIGN) as u64 + 1
        })
    }

    /// An explicit CAS unique to store, if CAS is on.
    #[inline]
    pub(crate) fn explicit(&self, cas: u64) -> Option<u64> {
        (cas != 0 && self.cfg.use_cas).then_some(cas)
    }

    /// `now` as an access time of an item in `seg`.
    #[inline]
    pub(crate) fn atime_in(&self, seg: SegmentId, now: u32) -> u16 {
        let base = self.arena.segment(seg).base_time.load(Ordering::Relaxed);
        now.saturating_sub(base).min(u32::from(u16::MAX)) as u16
    }

    /// The absolute access time of an item.
    pub(crate) fn base_atime(&self, loc: Location, it: ItemPtr) -> u32 {
        self.arena
            .segment(loc.seg)
            .base_time
            .load(Ordering::Relaxed)
            + u32::from(it.atime())
    }

    /// Classifies a found item: usable, expired or flushed.
    #[inline]
    pub(crate) fn check(&self, it: ItemPtr, loc: Location, now: u32) -> Lookup<()> {
        self.check_exptime(it.exptime(), loc, now)
    }

    /// `check` for an item whose expiry is known.
    #[inline]
    pub(crate) fn check_exptime(&self, e: u32, loc: Location, now: u32) -> Lookup<()> {
        let seg = self.arena.segment(loc.seg);
        if loc.offset < seg.flushed_below.load(Ordering::Relaxed) {
            return Lookup::Flushed;
        }
        if e != 0 && e <= now {
            Lookup::Expired
        } else {
            Lookup::Hit(())
        }
    }

    #[inline]
    pub(crate) fn shard(&self, hash: u64) -> &Shard {
        &self.shards[shard_of(hash)]
    }

    /// Unlinks a found entry; the caller holds the shard's write lock.
    pub(crate) fn unlink(&self, table: &mut Table, found: &Found) {
        table.remove(found);
        self.release_item(table, found);
    }

    /// Marks an item the index no longer links to dead and takes it off
    /// the counts (the shard's, and its segment's live bytes).
    fn release_item(&self, table: &mut Table, found: &Found) {
        let it = found.item;
        it.mark_dead();
        let (size, packed) = it.footprint();
        if let Some(raw_len) = packed {
            table.counters.packed.sub(size, raw_len);
            self.count_dict_use(it, false);
        }
        self.arena.segment(found.loc.seg).sub_live(size);
        table.counters.curr_items -= 1;
        // Wrapping: a shard's bytes can sink below zero when the item was
        // counted through a head (see HeadCounters); the sum is right.
        table.counters.bytes = table.counters.bytes.wrapping_sub(size as u64);
    }

    fn account_link(&self, table: &mut Table, seg: SegmentId, it: ItemPtr, new: bool) {
        let (size, packed) = it.footprint();
        if let Some(raw_len) = packed {
            table.counters.packed.add(size, raw_len);
            self.count_dict_use(it, true);
        }
        self.arena.segment(seg).add_live(size);
        table.counters.curr_items += 1;
        table.counters.total_items += u64::from(new);
        table.counters.bytes = table.counters.bytes.wrapping_add(size as u64);
    }

    /// After an unlocked check found `key` expired or flushed, unlink it if
    /// it is still the same item.
    pub(crate) fn unlink_stale(&self, key: &[u8], hash: u64, loc: Location) {
        let mut table = self.shard(hash).write();
        if let Some(f) = table.find_at(&self.arena, key, hash, loc) {
            let now = self.clock.now();
            if !matches!(self.check(f.item, f.loc, now), Lookup::Hit(())) {
                self.unlink(&mut table, &f);
            }
        }
    }

    #[inline]
    pub(crate) fn view<'a>(&'a self, loc: Location, it: ItemPtr) -> ItemView<'a> {
        self.view_with(loc, it, it.meta())
    }

    /// A view of an item whose header is decoded already.
    #[inline]
    pub(crate) fn view_with<'a>(
        &'a self,
        loc: Location,
        it: ItemPtr,
        meta: item::ItemMeta,
    ) -> ItemView<'a> {
        let seg = self.arena.segment(loc.seg);
        let cas = if !self.cfg.use_cas {
            0
        } else {
            meta.stored_cas.unwrap_or_else(|| {
                let seq = seg.seq.load(Ordering::Relaxed);
                (seq << self.cas_offset_bits) + (loc.offset / item::ALIGN) as u64 + 1
            })
        };
        ItemView {
            ptr: it,
            meta,
            cas,
            base_time: seg.base_time.load(Ordering::Relaxed),
            lock_free: false,
            dicts: &self.dicts,
        }
    }

    /// The value of an item as a reader gets it.
    #[inline]
    pub(crate) fn value_of(&self, it: ItemPtr) -> crate::codec::ValueRef<'_> {
        it.value_ref(&self.dicts)
    }

    /// After a reader found `key`'s packed value does not decode (a
    /// [`crate::Corrupt`] from its `ValueRef`): unlinks the item if its
    /// value still does not decode, and counts it (`compress_errors`). The
    /// reader answers a miss. A thread that keeps its pin for values not
    /// sent yet (`epoch::keeps`) must not wait for a shard lock: then the
    /// error is counted and the item left for the next reader to drop.
    pub fn drop_corrupt(&self, key: &[u8]) {
        if crate::epoch::keeps() {
            self.compress_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let hash = crate::index::hash_key(key);
        let mut table = self.shard(hash).write();
        let Some(f) = table.find(&self.arena, key, hash) else {
            // Read from flash: its record goes.
            if self.forget_flash(hash) {
                self.compress_errors.fetch_add(1, Ordering::Relaxed);
            }
            return;
        };
        let v = self.value_of(f.item);
        if v.as_raw().is_some() {
            return;
        }
        let mut scratch = Vec::new();
        if v.append_to(&mut scratch).is_err() {
            self.unlink(&mut table, &f);
            self.compress_errors.fetch_add(1, Ordering::Relaxed);
            note_corrupt_value(key, f.item.packed().map_or(0, |(codec, _)| codec));
        }
    }

    /// Packed values that did not decode and were dropped.
    pub fn compress_errors(&self) -> u64 {
        self.compress_errors.load(Ordering::Relaxed)
    }

    /// Finds a live entry under a write lock, unlinking it if expired or
    /// flushed (and saying which).
    pub(crate) fn find_checked(
        &self,
        table: &mut Table,
        key: &[u8],
        hash: u64,
    ) -> Result<Found, Lookup<()>> {
        let Some(found) = table.find(&self.arena, key, hash) else {
            return Err(Lookup::Miss);
        };
        match self.check(found.item, found.loc, self.clock.now()) {
            Lookup::Hit(()) => Ok(found),
            stale => {
                self.unlink(table, &found);
                Err(stale)
            }
        }
    }

    /// Finds a live entry under a write lock, unlinking it if stale.
    pub(crate) fn find_live(&self, table: &mut Table, key: &[u8], hash: u64) -> Option<Found> {
        self.find_checked(table, key, hash).ok()
    }

    /// Takes `key`'s shard write lock again after a gap (a reservation) and
    /// returns it with the entry, if that is still the live item at `loc`.
    pub(crate) fn relock_at(
        &self,
        key: &[u8],
        hash: u64,
        loc: Location,
    ) -> Option<(ShardWrite<'_>, Found)> {
        let table = self.shard(hash).write();
        let found = table
            .find_at(&self.arena, key, hash, loc)
            .filter(|f| matches!(self.check(f.item, f.loc, self.clock.now()), Lookup::Hit(())))?;
        Some((table, found))
    }

    /// Worker `worker`'s write head for a new item: main if the key was
    /// evicted from small recently (it is in the ghost), else small.
    #[inline]
    pub(crate) fn new_item_head(&self, worker: usize, hash: u64) -> usize {
        let queue = if self.ghost.take(hash) {
            Queue::Main
        } else {
            Queue::Small
        };
        self.arena.head(worker, queue)
    }

    /// Worker `worker`'s write head for a new version of a found item: main
    /// if the item is in main or was hit, else small.
    #[inline]
    pub(crate) fn update_head(&self, worker: usize, f: &Found) -> usize {
        let queue = if self.arena.queue(f.loc.seg) == Queue::Main || f.item.freq() > 0 {
            Queue::Main
        } else {
            Queue::Small
        };
        self.arena.head(worker, queue)
    }

    /// Reserves space for the item `spec` describes on arena head `head`,
    /// compacting or evicting as needed (`make_room`); its header is written, marked dead until the
    /// item is linked (see `Arena::reserve`). No shard lock may be held.
    pub(crate) fn reserve(&self, head: usize, spec: &item::ItemSpec) -> Option<Slot> {
        let mut busy = 0;
        loop {
            match self.arena.reserve(head, spec, self.clock.now()) {
                Reserve::Slot(slot) => {
                    if slot.offset == 0 {
                        // A new segment was taken: the background cleaner
                        // may have to free more.
                        self.note_segment_taken();
                    }
                    return Some(slot);
                }
                Reserve::Full => match self.make_room() {
                    Room::Made => {}
                    Room::None => return None,
                    Room::Busy => {
                        busy += 1;
                        if busy > RESERVE_RETRIES {
                            return None;
                        }
                        std::thread::yield_now();
                    }
                },
            }
        }
    }

    /// Drops a reserved slot that will not be published (after the shard
    /// lock it was checked under is released).
    pub(crate) fn abandon(&self, slot: Slot) {
        slot.ptr.mark_dead();
        self.arena.finish_write(slot.seg);
    }

    /// Writes a new item into a slot reserved for `spec`, accessed now,
    /// dead until it is linked (committed).
    pub(crate) fn write_item(
        &self,
        slot: &Slot,
        spec: &item::ItemSpec,
        key: &[u8],
        parts: &[&[u8]],
        state: u8,
    ) {
        let atime = self.atime_in(slot.seg, self.clock.now());
        self.arena.segment(slot.seg).note_expiry(spec.exptime);
        // SAFETY: the slot was reserved for at least spec.size() bytes and
        // is owned by this thread until published.
        unsafe {
            slot.ptr
                .init(spec, key, parts, atime, state | item::STATE_DEAD)
        };
    }

    /// Publishes `slot` under `key`, replacing `old` if given. Caller holds
    /// the shard write lock. Returns the new item's location.
    pub(crate) fn link(
        &self,
        table: &mut Table,
        hash: u64,
        slot: &Slot,
        old: Option<&Found>,
    ) -> Location {
        self.link_counted(table, hash, slot, old, true)
    }

    /// As `link`; `new` is false for a copy that stands for an update
    /// memcached makes in place (not counted in total_items).
    pub(crate) fn link_counted(
        &self,
        table: &mut Table,
        hash: u64,
        slot: &Slot,
        old: Option<&Found>,
        new: bool,
    ) -> Location {
        let loc = Location {
            seg: slot.seg,
            offset: slot.offset,
        };
        slot.ptr.commit();
        // The new item is counted before the old one is uncounted (so a
        // dictionary's count never touches zero for a copy: see `dict`).
        self.account_link(table, slot.seg, slot.ptr, new);
        if old.is_none() {
            // The key's item is in RAM now: none on flash.
            self.forget_flash(hash);
        }
        match old {
            Some(f) => {
                table.replace(f, hash, loc);
                self.release_item(table, f);
            }
            None => table.insert(&self.arena, hash, loc),
        }
        loc
    }

    /// Counts a packed item naming a dictionary as linked or unlinked in
    /// the dictionary table (see `dict`); nothing for other items.
    #[inline]
    pub(crate) fn count_dict_use(&self, it: ItemPtr, linked: bool) {
        if let Some((codec, _)) = it.packed() {
            self.dicts.count_use(codec, linked);
        }
    }

    /// Does publishing `slot` in place of `old` need a stored CAS unique?
    /// Location uniques grow with the segment sequence, but two write heads
    /// fill segments side by side, so a new version written through one
    /// head can sit in an older segment than the version it replaces. A
    /// key's uniques must grow (a stale-if-older `Cas` compares them), so
    /// such a version is written again with the unique `old + 1` stored.
    /// None if no conflict (or the slot stores its unique already, or CAS
    /// is off).
    pub(crate) fn cas_conflict(
        &self,
        slot: &Slot,
        stored: bool,
        old: Option<&Found>,
    ) -> Option<u64> {
        let old = old?;
        if stored || !self.cfg.use_cas {
            return None;
        }
        let old_cas = self.cas_of(old.loc, old.item);
        (self.slot_cas(slot) <= old_cas).then(|| old_cas.wrapping_add(1))
    }

    /// The CAS unique a slot's item gets once linked.
    #[inline]
    pub(crate) fn slot_cas(&self, slot: &Slot) -> u64 {
        self.cas_of(
            Location {
                seg: slot.seg,
                offset: slot.offset,
            },
            slot.ptr,
        )
    }
}

/// A line on standard error for a packed value that did not decode, at
/// most one a second (they are never expected: item memory is trusted and
/// flash records are checksummed).
fn note_corrupt_value(key: &[u8], codec: u8) {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if LAST.swap(now, Ordering::Relaxed) != now {
        eprintln!(
            "osmium: a packed value did not decode (key of {} bytes, dictionary slot {}): dropped",
            key.len(),
            codec & 63
        );
    }
}
