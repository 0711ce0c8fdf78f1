//! Compression dictionaries: the table that maps an item's codec byte to
//! the dictionary its value was packed with, how long a dictionary lives,
//! and where the table is kept across restarts (`persist`). Training is
//! `train`'s (a module of its own: it packs, and `codec` imports this
//! one).
//!
//! ```text
//!  codec byte:   bits 7-6 generation mod 4 | bits 5-0 slot (0: plain zstd, 1..=63: a dictionary)
//!
//!  slots:   0        1             2            3      ...  63
//!          plain   [gen 5, cls 1] [gen 0, cls 0] null       null
//!                   retired        current for
//!                   (live 12)      class 0
//! ```
//!
//! A dictionary is made by the pack pass's trainer for one size class of
//! values (`train`), digested once into a `CDict` (for the packer) and a
//! `DDict` (for every reader), and installed in a free slot with that
//! slot's next generation; it is then the *current* dictionary of its
//! class, the one the pack pass packs the class's values with. A newer
//! dictionary for the same class takes another slot: the older one is
//! *retired* (no longer packed with) but still decodes the items that name
//! it.
//!
//! Lifetime rule: the table counts, per slot, the linked packed items that
//! name it (`count_use`, called where the shards count packed items: a
//! link counts the new item before the old one is uncounted, so a copy in
//! flight never lets a count touch zero). A retired dictionary whose count
//! is zero is removed (`collect`): its slot reads empty at once, its memory
//! is freed after an epoch grace period (`epoch::retire`), so a reader
//! that found it before the removal still decodes with it. The slot may
//! then be reused, with the next generation. An item that still named the
//! old generation (none can, by the count; a reader racing a removal, or a
//! memory file written by a crashed process) reads as corrupt, never
//! through the new dictionary, because the codec byte's generation no
//! longer matches. A slot is reused only once its last dictionary's grace
//! period is over (no reader pinned before the removal is left), free
//! slots are taken round-robin, and the next generation of every slot is
//! kept in the table's file too, so a false match (the same slot four
//! generations later) would need a reader to outlive four removals.
//!
//! With the flash tier, records on flash name dictionaries too, and are
//! not counted: retired dictionaries are then never removed (the table
//! holds at most 63, and the trainer stops when every slot is taken).
//!
//! Lock-free readers: a slot is an atomic pointer to an immutable
//! [`Dict`]; [`DictTable::get`] loads it and checks the whole codec byte.
//! A reader that decodes an item is pinned (`epoch`: a GET), or holds the
//! lock of the item's shard (the item stays linked, so its dictionary
//! stays counted: no lock-free swap replaces it meanwhile), or read it
//! from flash (whose dictionaries are never removed); so a removed
//! dictionary outlives every reader that could have found it.

mod persist;

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

use parking_lot::Mutex;
use zstd::zstd_safe::{CDict, DDict};

pub use persist::DictFile;

/// The codec byte of a value packed without a dictionary.
pub const CODEC_PLAIN: u8 = 0;

/// Slots a codec byte can name (slot 0 is plain zstd).
pub const SLOTS: usize = 64;

/// The largest dictionary the table holds.
pub const DICT_MAX: usize = 32 << 10;

/// Size classes that may have a dictionary: values of 64 B up to 4 KiB
/// (the pack pass's classes 0..=5; larger values gain little).
pub const DICT_CLASSES: usize = 6;

/// Size classes of values: powers of two from 64 bytes (`codec::PACK_MIN`,
/// 2^6) to 2^30 and more (the pack pass keeps its statistics by them).
pub const CLASSES: usize = 25;

/// log2 of the smallest class's least length.
pub const CLASS_MIN_LOG2: u32 = 6;

/// The size class of a value of `len` bytes (at least 64).
#[inline]
pub fn class_of(len: usize) -> usize {
    let log2 = usize::BITS - 1 - len.max(1).leading_zeros();
    (log2.saturating_sub(CLASS_MIN_LOG2) as usize).min(CLASSES - 1)
}

/// The codec byte of `slot` at `generation`.
#[inline]
pub fn codec_of(slot: usize, generation: u32) -> u8 {
    debug_assert!(slot > 0 && slot < SLOTS);
    slot as u8 | (((generation & 3) as u8) << 6)
}

/// The slot a codec byte names.
#[inline]
pub fn slot_of(codec: u8) -> usize {
    (codec & 63) as usize
}

/// A dictionary, digested for packing and unpacking (immutable once made).
pub struct Dict {
    codec: u8,
    class: u8,
    generation: u32,
    bytes: Vec<u8>,
    cdict: CDict<'static>,
    ddict: DDict<'static>,
}

impl Dict {
    /// Digests `bytes` (a zstd dictionary, as `zstd::dict` trains them,
    /// or raw content) for slot `slot` at `generation`, packing at zstd
    /// `level`. None if zstd refuses it or it is too large.
    pub fn new(
        slot: usize,
        generation: u32,
        class: u8,
        bytes: Vec<u8>,
        level: i32,
    ) -> Option<Dict> {
        if slot == 0 || slot >= SLOTS || bytes.is_empty() || bytes.len() > DICT_MAX {
            return None;
        }
        let cdict = CDict::try_create(&bytes, level)?;
        let ddict = DDict::try_create(&bytes)?;
        Some(Dict {
            codec: codec_of(slot, generation),
            class,
            generation,
            bytes,
            cdict,
            ddict,
        })
    }

    /// The codec byte of the items packed with it.
    pub fn codec(&self) -> u8 {
        self.codec
    }

    /// The size class it was trained for.
    pub fn class(&self) -> u8 {
        self.class
    }

    /// Its slot's generation when it was installed.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The dictionary's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// For packing (see `codec::Packer::pack_with`).
    pub fn cdict(&self) -> &CDict<'static> {
        &self.cdict
    }

    /// For unpacking.
    pub fn ddict(&self) -> &DDict<'static> {
        &self.ddict
    }
}

impl std::fmt::Debug for Dict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dict")
            .field("codec", &self.codec)
            .field("class", &self.class)
            .field("generation", &self.generation)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// What only the table's writers (the trainer, the start) touch.
struct Admin {
    /// Where the table is kept (memory file or memfd), if anywhere.
    file: Option<DictFile>,
    /// Per slot, the generation its next dictionary gets.
    next_generation: [u32; SLOTS],
    /// Where the search for a free slot starts (round-robin).
    cursor: usize,
    /// Removed dictionaries: slot, dictionary, the epoch of the removal.
    graveyard: Vec<(usize, *mut Dict, u64)>,
    /// Never remove retired dictionaries (the flash tier names them too).
    keep_retired: bool,
    /// Install nothing (the table's file could not be opened: a
    /// dictionary it does not hold must not be named by items that
    /// outlive the process).
    frozen: bool,
}

impl Default for Admin {
    fn default() -> Admin {
        Admin {
            file: None,
            next_generation: [0; SLOTS],
            cursor: 1,
            graveyard: Vec::new(),
            keep_retired: false,
            frozen: false,
        }
    }
}

// SAFETY: the graveyard's pointers are owned boxes of `Dict` (Send + Sync),
// only touched under the admin lock.
unsafe impl Send for Admin {}

/// The dictionaries items may name (see the module comment).
pub struct DictTable {
    slots: [AtomicPtr<Dict>; SLOTS],
    /// Linked packed items naming each slot (wrapping).
    live: [AtomicU64; SLOTS],
    /// Per size class, the codec byte of its current dictionary (0: none).
    current: [AtomicU8; DICT_CLASSES],
    admin: Mutex<Admin>,
    /// Dictionaries installed (trained, or loaded at a start).
    installed: AtomicU64,
    /// Trainings run, and the CPU time they took (µs).
    pub(crate) trainings: AtomicU64,
    pub(crate) train_cpu_micros: AtomicU64,
}

impl Default for DictTable {
    fn default() -> DictTable {
        DictTable {
            slots: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
            live: std::array::from_fn(|_| AtomicU64::new(0)),
            current: std::array::from_fn(|_| AtomicU8::new(CODEC_PLAIN)),
            admin: Mutex::default(),
            installed: AtomicU64::new(0),
            trainings: AtomicU64::new(0),
            train_cpu_micros: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for DictTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, bytes) = self.in_use();
        f.debug_struct("DictTable")
            .field("dicts", &n)
            .field("bytes", &bytes)
            .finish()
    }
}

impl DictTable {
    /// A table with no dictionary: only [`CODEC_PLAIN`] is known.
    pub fn new() -> DictTable {
        DictTable::default()
    }

    /// Whether `codec` names something this table can decode with: slot
    /// 0, or a live slot of that generation.
    #[inline]
    pub fn knows(&self, codec: u8) -> bool {
        codec == CODEC_PLAIN || self.get(codec).is_some()
    }

    /// The dictionary `codec` names, if the table holds it at that
    /// generation. The reference is good while the caller is pinned
    /// (`epoch`), or holds a linked item naming it, or is the trainer.
    #[inline]
    pub fn get(&self, codec: u8) -> Option<&Dict> {
        let p = self.slots[slot_of(codec)].load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a slot's dictionary is freed only after an epoch grace
        // period that began after it was unpublished (see the module
        // comment); a reader that loaded the pointer is pinned.
        let d = unsafe { &*p };
        (d.codec == codec).then_some(d)
    }

    /// The dictionary the pack pass packs a value of `len` bytes with
    /// now, if its class has one.
    #[inline]
    pub fn for_len(&self, len: usize) -> Option<&Dict> {
        let codec = self.current_codec(class_of(len));
        if codec == CODEC_PLAIN {
            return None;
        }
        self.get(codec)
    }

    /// The codec byte of size class `class`'s current dictionary (0: none).
    #[inline]
    pub fn current_codec(&self, class: usize) -> u8 {
        self.current
            .get(class)
            .map_or(CODEC_PLAIN, |c| c.load(Ordering::Acquire))
    }

    /// A linked packed item naming `codec` was counted (`linked`) or
    /// uncounted (see the module comment).
    #[inline]
    pub(crate) fn count_use(&self, codec: u8, linked: bool) {
        let slot = slot_of(codec);
        if slot == 0 {
            return;
        }
        if linked {
            self.live[slot].fetch_add(1, Ordering::Relaxed);
        } else {
            self.live[slot].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Linked packed items naming `slot` now.
    pub fn live_items(&self, slot: usize) -> u64 {
        self.live[slot].load(Ordering::Relaxed)
    }

    /// Linked packed items naming any dictionary (wrapping).
    pub fn live_total(&self) -> u64 {
        self.live[1..]
            .iter()
            .fold(0u64, |n, l| n.wrapping_add(l.load(Ordering::Relaxed)))
    }

    /// Dictionaries held, and their bytes.
    pub fn in_use(&self) -> (u64, u64) {
        let (mut n, mut bytes) = (0, 0);
        let _admin = self.admin.lock();
        for s in &self.slots[1..] {
            let p = s.load(Ordering::Acquire);
            if !p.is_null() {
                n += 1;
                // SAFETY: under the admin lock no dictionary is removed.
                bytes += unsafe { (*p).bytes.len() } as u64;
            }
        }
        (n, bytes)
    }

    /// Dictionaries installed since the start (trained or loaded).
    pub fn installed(&self) -> u64 {
        self.installed.load(Ordering::Relaxed)
    }

    /// Keeps the table in `file` from now on, loading what it holds
    /// (before any item naming a dictionary is trusted: a start calls it
    /// before the recovery). Returns the dictionaries loaded.
    pub fn attach(&self, file: DictFile, level: i32) -> usize {
        let mut admin = self.admin.lock();
        let mut loaded = 0;
        let (stored, next) = file.load();
        admin.next_generation = next;
        for e in stored {
            let slot = slot_of(e.codec);
            let Some(d) = Dict::new(slot, e.generation, e.class, e.bytes, level) else {
                continue;
            };
            if d.codec != e.codec || !self.slots[slot].load(Ordering::Relaxed).is_null() {
                continue;
            }
            admin.next_generation[slot] =
                admin.next_generation[slot].max(e.generation.wrapping_add(1));
            let class = usize::from(e.class);
            if e.current && class < DICT_CLASSES {
                self.current[class].store(d.codec, Ordering::Release);
            }
            self.slots[slot].store(Box::into_raw(Box::new(d)), Ordering::Release);
            self.installed.fetch_add(1, Ordering::Relaxed);
            loaded += 1;
        }
        admin.file = Some(file);
        loaded
    }

    /// Installs nothing from now on (see `Admin::frozen`).
    pub fn freeze(&self) {
        self.admin.lock().frozen = true;
    }

    /// Whether retired dictionaries must be kept (the flash tier is on:
    /// its records name them too).
    pub fn keep_retired(&self, keep: bool) {
        self.admin.lock().keep_retired = keep;
    }

    /// Installs `bytes` as the current dictionary of size class `class`
    /// (the previous one is retired), in a free slot at its next
    /// generation, packing at zstd `level`; written to the table's file
    /// first. None if no slot is free (even after `collect`) or zstd
    /// refused the dictionary.
    pub fn install(&self, class: u8, bytes: Vec<u8>, level: i32) -> Option<&Dict> {
        if usize::from(class) >= DICT_CLASSES {
            return None;
        }
        let mut admin = self.admin.lock();
        if admin.frozen {
            return None;
        }
        let slot = match self.free_slot(&admin) {
            Some(s) => s,
            None => {
                self.collect_locked(&mut admin);
                self.free_slot(&admin)?
            }
        };
        let generation = admin.next_generation[slot];
        let d = Dict::new(slot, generation, class, bytes, level)?;
        let old = self.current[usize::from(class)].load(Ordering::Relaxed);
        if let Some(file) = &admin.file {
            // The file says which dictionary is current per class: the
            // old one becomes retired there first.
            if old != CODEC_PLAIN {
                file.set_current(slot_of(old), false);
            }
            if file.store(slot, &d, true).is_err() {
                return None;
            }
        }
        admin.next_generation[slot] = generation.wrapping_add(1);
        admin.cursor = slot % (SLOTS - 1) + 1;
        let codec = d.codec;
        let p = Box::into_raw(Box::new(d));
        self.slots[slot].store(p, Ordering::Release);
        self.current[usize::from(class)].store(codec, Ordering::Release);
        self.installed.fetch_add(1, Ordering::Relaxed);
        // SAFETY: just published; removed only by `collect`, which needs
        // the admin lock and a retired dictionary.
        Some(unsafe { &*p })
    }

    /// A free slot, round-robin from the cursor: empty, and its last
    /// dictionary's grace period over (so no reader that could hold an
    /// item of its last generation is left: see the module comment).
    fn free_slot(&self, admin: &Admin) -> Option<usize> {
        let start = admin.cursor.clamp(1, SLOTS - 1);
        (0..SLOTS - 1)
            .map(|i| (start - 1 + i) % (SLOTS - 1) + 1)
            .find(|&s| {
                self.slots[s].load(Ordering::Relaxed).is_null()
                    && !admin.graveyard.iter().any(|&(g, _, _)| g == s)
            })
    }

    /// Removes the retired dictionaries no linked item names (unless they
    /// are kept for the flash tier) and frees those removed earlier whose
    /// grace period is over. The trainer calls it now and then.
    pub fn collect(&self) {
        let mut admin = self.admin.lock();
        self.collect_locked(&mut admin);
    }

    fn collect_locked(&self, admin: &mut Admin) {
        if !admin.keep_retired {
            for (slot, cell) in self.slots.iter().enumerate().skip(1) {
                let p = cell.load(Ordering::Relaxed);
                if p.is_null() {
                    continue;
                }
                // SAFETY: under the admin lock nothing is removed but here.
                let (codec, class) = unsafe { ((*p).codec, usize::from((*p).class)) };
                let current =
                    class < DICT_CLASSES && self.current[class].load(Ordering::Relaxed) == codec;
                if current || self.live[slot].load(Ordering::Relaxed) != 0 {
                    continue;
                }
                cell.store(std::ptr::null_mut(), Ordering::Release);
                if let Some(file) = &admin.file {
                    file.clear(slot, admin.next_generation[slot]);
                }
                admin.graveyard.push((slot, p, crate::epoch::retire()));
            }
        }
        admin.graveyard.retain(|&(_, p, epoch)| {
            if crate::epoch::is_past(epoch) {
                // SAFETY: unpublished before `epoch` began, and no reader
                // pinned at or before it remains.
                drop(unsafe { Box::from_raw(p) });
                false
            } else {
                true
            }
        });
    }
}

impl Drop for DictTable {
    fn drop(&mut self) {
        let admin = self.admin.get_mut();
        for (_, p, _) in admin.graveyard.drain(..) {
            // SAFETY: the store is going: no reader remains.
            drop(unsafe { Box::from_raw(p) });
        }
        for s in &self.slots {
            let p = s.swap(std::ptr::null_mut(), Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: as above.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
