//! The item record: how one key/value pair is laid out in segment memory.
//!
//! Items are appended to segments (see `arena`) back to back, at any byte
//! offset, and never move. The header holds no pointers, so a segment can live in a
//! file-backed mapping and be read back after a restart. An item with no
//! client flags, no expiry and the CAS unique its location gives it (see
//! below) has a 5-byte header; the rest is optional:
//!
//! ```text
//!  item at an even address:
//!  byte 0       2       3      4                 4+V
//!       +-------+-------+------+-----------------+----------------------+-----+-------+
//!       | atime | state | klen | vlen (LEB128,V) | [ext: x, fields...]  | key | value |
//!       +-------+-------+------+-----------------+----------------------+-----+-------+
//!  item at an odd address: state and atime swap places, so that atime is
//!  always 2-byte aligned (an AtomicU16) and no item needs padding:
//!  byte 0       1       3      4
//!       +-------+-------+------+------ ...
//!       | state | atime | klen | vlen ...
//!       +-------+-------+------+------ ...
//!
//!  atime u16  (atomic) last access, seconds after the segment's base time,
//!             saturating at 65535 (the arena seals a segment before items
//!             written into it could be later than that)
//!  state u8   (atomic)
//!             bit 0 DEAD       unlinked from the index
//!             bit 1 FETCHED    hit at least once
//!             bit 2 STALE      meta-invalidated (md I, ms I)
//!             bit 3 TOKEN_SENT a meta client won the recache token
//!             bit 4 BINARY_KEY the key is binary (sent base64 encoded)
//!             bit 5 EXT        the ext byte and fields follow vlen
//!             bit 6-7 FREQ     hits since insertion or the last eviction
//!                              pass, saturating at 3 (the evictor's input)
//!  klen  u8   key length, 1..=250
//!  vlen       value length (the value is stored without \r\n), 7 bits a
//!             byte, low bits first, high bit = more bytes (1 byte < 128)
//!  ext   u8   bit 0 FLAGS: u32 client flags follow (else flags are 0)
//!             bit 1 EXPTIME: u32 relative expiry follows (else never);
//!                   present also when an expiry may be set later
//!             bit 2 CAS: u64 CAS unique follows (else it is the location's)
//!             bit 3 PACKED: the value is a zstd frame (see `codec`); a
//!                   codec byte and the raw length follow the CAS field
//!             bit 4 RAW_TRIED: the value was tried and did not compress
//!                   (no field; never with PACKED)
//!             bits 5-7 zero
//!             fields in that order, little endian, unaligned:
//!
//!       | ext | flags? | exptime? | cas? | codec? | rawlen? | key | value |
//!         u8    u32      u32        u64    u8       LEB128
//!
//!  codec u8   (PACKED) bits 0-5 dictionary slot (0 = none), bits 6-7 the
//!             slot's generation modulo 4 (see `dict`)
//!  rawlen     (PACKED) the client's value length, LEB128 as vlen;
//!             64 <= rawlen <= -I, and vlen < rawlen
//!  vlen       bytes of value in the item: the frame's length when packed
//! ```
//!
//! [`item_size`] of a 16-byte key and a 64-byte value is 85 bytes. The
//! header's variable part (ext byte, optional and packed fields: sizing,
//! writing, decoding, the recovery's trust gate) is `header`'s; this module
//! owns the handle on an item ([`ItemPtr`]), its decoded header
//! ([`ItemMeta`]), its atomics and the readers' [`ItemView`].
//!
//! **CAS uniques.** An item that does not store one has the CAS unique of
//! its location, `segment sequence × segment size + offset + 1`, where the sequence
//! numbers the segment's activations: every write goes to a location never
//! used before, so every version of every key has a distinct unique, and a
//! CAS never needs bytes. Explicit uniques (meta `E`, or an item rewritten
//! in place of itself, e.g. by touch, that must keep its unique) are stored.
//!
//! Concurrency rules: the immutable fields (lengths, layout, key, flags,
//! stored CAS, value) may be read by anyone who knows the item is fully
//! written (its segment has no pending writer); `atime` and `state` are
//! atomics updated by hits (which hold no lock, see `epoch`); the stored
//! exptime is written only under the item's shard write lock, and read
//! under that shard's lock or by a lock-free GET that validates what it
//! read against the shard's version.

use std::sync::atomic::{AtomicU16, AtomicU8, Ordering};

use crate::codec::ValueRef;
use crate::dict::DictTable;

mod header;

pub use header::{item_size, ItemSpec, EXT_PACKED, EXT_RAW_TRIED, RAW_LEN_MAX};
use header::{EXT_CAS, EXT_EXPTIME, EXT_FLAGS, OFF_KLEN};

/// Items start at any byte offset: no alignment, no padding.
pub const ALIGN: usize = 1;
/// Bytes of a header without ext and with a one-byte vlen.
pub const HEADER_SIZE: usize = 5;

/// State bit: unlinked from the index.
pub const STATE_DEAD: u8 = 1;
/// State bit: hit at least once.
pub const STATE_FETCHED: u8 = 2;
/// State bit: meta-invalidated (md I, ms I).
pub const STATE_STALE: u8 = 4;
/// State bit: a meta client won the recache token.
pub const STATE_TOKEN_SENT: u8 = 8;
/// State bit: the key is binary (sent base64 encoded).
pub const STATE_BINARY_KEY: u8 = 16;
const STATE_EXT: u8 = 32;
const FREQ_SHIFT: u32 = 6;
/// The highest eviction frequency (hits counted, saturating).
pub const FREQ_MAX: u8 = 3;

/// An item's header decoded once: where its key and value are and its
/// optional fields. Valid as long as the item is (headers never change,
/// except the expiry, which `exptime` holds as of the decoding).
#[derive(Clone, Copy, Debug)]
pub struct ItemMeta {
    key_off: u32,
    key_len: u8,
    /// The ext byte (0 without one): which optional fields there are.
    ext: u8,
    /// Bytes of value in the item.
    stored_len: u32,
    /// The client's length (`stored_len` unless packed).
    raw_len: u32,
    /// Client flags.
    pub flags: u32,
    /// Relative expiry when decoded, 0 = never.
    pub exptime: u32,
    /// The stored CAS unique, if the item has one (else the location's).
    pub stored_cas: Option<u64>,
}

impl ItemMeta {
    /// Key length.
    #[inline]
    pub fn key_len(&self) -> usize {
        self.key_len as usize
    }
    /// The client's value length (what a GET sends).
    #[inline]
    pub fn value_len(&self) -> usize {
        self.raw_len as usize
    }
    /// Bytes of value in the item (the frame's length when packed).
    #[inline]
    pub fn stored_len(&self) -> usize {
        self.stored_len as usize
    }
    /// Whether the value is a zstd frame.
    #[inline]
    pub fn is_packed(&self) -> bool {
        self.ext & EXT_PACKED != 0
    }
    /// Whether the item has an exptime field (its expiry can be set in place).
    #[inline]
    pub fn has_exptime_field(&self) -> bool {
        self.ext & EXT_EXPTIME != 0
    }
}

/// A raw handle on an item in segment memory. Copyable; validity is the
/// caller's business (see the module comment for the locking rules).
#[derive(Clone, Copy)]
pub struct ItemPtr(*mut u8);

// SAFETY: an ItemPtr is an address into segment memory that is shared by
// all threads; access discipline is enforced by the index shard locks and
// versions and by reader pins (see `epoch`).
unsafe impl Send for ItemPtr {}
// SAFETY: a shared `&ItemPtr` gives only copies of the address (every
// method takes `self` by value), so sharing one is sending copies: Send's
// argument. Through the address, the bytes that change under readers (atime,
// state) are atomics; the other writes are unsafe fns (`init`,
// `write_header`, `set_exptime`) whose callers hold the slot exclusively.
unsafe impl Sync for ItemPtr {}

impl ItemPtr {
    /// # Safety
    /// `p` must point at an item slot inside a live segment, large enough
    /// for the item that is (or will be) written there.
    #[inline]
    pub unsafe fn from_raw(p: *mut u8) -> ItemPtr {
        ItemPtr(p)
    }

    /// The item's address.
    #[inline]
    pub fn as_ptr(self) -> *const u8 {
        self.0
    }

    /// Offsets of atime and state (they swap at odd addresses).
    #[inline]
    fn atime_off(self) -> usize {
        self.0 as usize & 1
    }

    #[inline]
    fn state_off(self) -> usize {
        2 - 2 * (self.0 as usize & 1)
    }

    /// Writes a complete item. The caller owns this freshly allocated slot.
    ///
    /// # Safety
    /// The slot must be exclusively owned and `spec.size()` bytes long;
    /// `value_parts` must add up to at most `spec.value_len` bytes; when
    /// less, the rest of the value must be written (at `value_ptr`) before
    /// the item is published.
    pub unsafe fn init(
        self,
        spec: &ItemSpec,
        key: &[u8],
        value_parts: &[&[u8]],
        atime: u16,
        state: u8,
    ) {
        debug_assert_eq!(key.len(), spec.key_len);
        // SAFETY: as `write_header`, whose contract the caller's implies;
        // the key and value parts fit in the rest of the slot.
        unsafe {
            let mut q = self.write_header(spec, state);
            (self.0.add(self.atime_off()) as *mut u16).write(atime);
            std::ptr::copy_nonoverlapping(key.as_ptr(), q, key.len());
            q = q.add(key.len());
            for part in value_parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), q, part.len());
                q = q.add(part.len());
            }
        }
    }

    /// Decodes the whole header at once.
    #[inline]
    pub fn meta(self) -> ItemMeta {
        let l = self.layout();
        let mut off = l.fields;
        let mut flags = 0;
        let mut exptime = 0;
        let mut stored_cas = None;
        if l.ext & EXT_FLAGS != 0 {
            flags = self.read_u32(off);
            off += 4;
        }
        if l.ext & EXT_EXPTIME != 0 {
            exptime = self.read_u32(off);
            off += 4;
        }
        if l.ext & EXT_CAS != 0 {
            // SAFETY: inside the slot; immutable after init.
            stored_cas = Some(u64::from_le_bytes(unsafe {
                (self.0.add(off) as *const [u8; 8]).read()
            }));
        }
        ItemMeta {
            key_off: l.key as u32,
            key_len: l.key_len as u8,
            ext: l.ext,
            stored_len: l.stored_len as u32,
            raw_len: l.raw_len as u32,
            flags,
            exptime,
            stored_cas,
        }
    }

    /// The key, located by `m` (this item's meta).
    #[inline]
    pub fn key_at<'a>(self, m: &ItemMeta) -> &'a [u8] {
        // SAFETY: m was decoded from this item; the key is inside the slot.
        unsafe { std::slice::from_raw_parts(self.0.add(m.key_off as usize), m.key_len()) }
    }

    /// Whether the key, located by `m` (this item's meta), is `key`. Keys
    /// of up to 16 bytes (the common case) are compared with two
    /// overlapping word loads on each side instead of a call to memcmp.
    #[inline]
    pub fn key_is(self, m: &ItemMeta, key: &[u8]) -> bool {
        let n = key.len();
        if m.key_len() != n {
            return false;
        }
        // SAFETY: the key is n bytes inside the slot, from key_off.
        let p = unsafe { self.0.add(m.key_off as usize) };
        let word = |q: *const u8, off: usize| -> u64 {
            // SAFETY: callers pass off + 8 <= n.
            u64::from_le_bytes(unsafe { (q.add(off) as *const [u8; 8]).read() })
        };
        let half = |q: *const u8, off: usize| -> u32 {
            // SAFETY: callers pass off + 4 <= n.
            u32::from_le_bytes(unsafe { (q.add(off) as *const [u8; 4]).read() })
        };
        let k = key.as_ptr();
        match n {
            8..=16 => word(p, 0) == word(k, 0) && word(p, n - 8) == word(k, n - 8),
            4..=7 => half(p, 0) == half(k, 0) && half(p, n - 4) == half(k, n - 4),
            _ => self.key_at(m) == key,
        }
    }

    /// Where the value starts (for writing the value of a slot its writer
    /// still owns: see `Store::incoming_space`).
    #[inline]
    pub fn value_ptr(self) -> *mut u8 {
        let l = self.layout();
        self.0.wrapping_add(l.key + l.key_len)
    }

    /// The value's bytes in the item (a frame when packed), located by
    /// `m` (this item's meta).
    #[inline]
    pub fn stored_value_at<'a>(self, m: &ItemMeta) -> &'a [u8] {
        // SAFETY: as above.
        unsafe {
            std::slice::from_raw_parts(self.0.add(m.key_off as usize + m.key_len()), m.stored_len())
        }
    }

    /// The value as a reader gets it, located by `m` (this item's meta);
    /// `dicts` decodes a packed one.
    #[inline]
    pub fn value_ref_at<'a>(self, m: &ItemMeta, dicts: &'a DictTable) -> ValueRef<'a> {
        if m.is_packed() {
            return self.packed_value_ref(m, dicts);
        }
        ValueRef::Raw(self.stored_value_at(m))
    }

    /// `value_ref_at` of a packed item: out of line, so that a raw value's
    /// reader runs none of it.
    #[cold]
    #[inline(never)]
    fn packed_value_ref<'a>(self, m: &ItemMeta, dicts: &'a DictTable) -> ValueRef<'a> {
        ValueRef::Packed {
            frame: self.stored_value_at(m),
            codec: self.codec(&self.layout()),
            raw_len: m.raw_len,
            dicts,
        }
    }

    #[inline]
    fn read_u32(self, off: usize) -> u32 {
        // SAFETY: inside the slot; unaligned read of plain bytes.
        u32::from_le_bytes(unsafe { (self.0.add(off) as *const [u8; 4]).read() })
    }

    #[inline]
    fn atime_atomic(self) -> &'static AtomicU16 {
        // SAFETY: atime_off makes the address even (2-byte aligned); segment
        // memory lives as long as the arena, which outlives every ItemPtr use.
        unsafe { &*(self.0.add(self.atime_off()) as *const AtomicU16) }
    }

    #[inline]
    fn state_atomic(self) -> &'static AtomicU8 {
        // SAFETY: as above; a u8 needs no alignment.
        unsafe { &*(self.0.add(self.state_off()) as *const AtomicU8) }
    }

    /// Last access, seconds after the segment's base time.
    #[inline]
    pub fn atime(self) -> u16 {
        self.atime_atomic().load(Ordering::Relaxed)
    }

    /// Sets the last access, seconds after the segment's base time.
    #[inline]
    pub fn set_atime(self, t: u16) {
        self.atime_atomic().store(t, Ordering::Relaxed)
    }

    /// Client flags (0 when the item stores none).
    #[inline]
    pub fn flags(self) -> u32 {
        let l = self.layout();
        if l.ext & EXT_FLAGS != 0 {
            self.read_u32(l.fields)
        } else {
            0
        }
    }

    /// Relative expiry, 0 = never.
    #[inline]
    pub fn exptime(self) -> u32 {
        let l = self.layout();
        if l.ext & EXT_EXPTIME != 0 {
            self.read_u32(Self::field(&l, EXT_EXPTIME))
        } else {
            0
        }
    }

    /// Can the expiry be changed in place?
    #[inline]
    pub fn has_exptime_field(self) -> bool {
        self.layout().ext & EXT_EXPTIME != 0
    }

    /// Sets the expiry in place.
    ///
    /// # Safety
    /// Under the item's shard write lock only, on an item that has the
    /// field (`has_exptime_field`).
    #[inline]
    pub unsafe fn set_exptime(self, t: u32) {
        let l = self.layout();
        debug_assert!(l.ext & EXT_EXPTIME != 0);
        let off = Self::field(&l, EXT_EXPTIME);
        // SAFETY: exclusive per the caller's contract; inside the slot.
        unsafe { (self.0.add(off) as *mut [u8; 4]).write(t.to_le_bytes()) }
    }

    /// The stored CAS unique, if the item has one.
    #[inline]
    pub fn stored_cas(self) -> Option<u64> {
        let l = self.layout();
        if l.ext & EXT_CAS != 0 {
            let off = Self::field(&l, EXT_CAS);
            // SAFETY: inside the slot; immutable after init.
            Some(u64::from_le_bytes(unsafe {
                (self.0.add(off) as *const [u8; 8]).read()
            }))
        } else {
            None
        }
    }

    /// The client's value length (what a GET sends).
    #[inline]
    pub fn value_len(self) -> usize {
        self.layout().raw_len
    }

    /// Bytes of value in the item (the frame's length when packed).
    #[inline]
    pub fn stored_len(self) -> usize {
        self.layout().stored_len
    }

    /// The codec byte and the client's length of a packed value.
    #[inline]
    pub fn packed(self) -> Option<(u8, usize)> {
        let l = self.layout();
        (l.ext & EXT_PACKED != 0).then(|| (self.codec(&l), l.raw_len))
    }

    /// Whether the value was tried and did not compress.
    #[inline]
    pub fn raw_tried(self) -> bool {
        self.layout().ext & EXT_RAW_TRIED != 0
    }

    /// Key length.
    #[inline]
    pub fn key_len(self) -> usize {
        self.byte(OFF_KLEN) as usize
    }

    /// The key, in segment memory.
    #[inline]
    pub fn key<'a>(self) -> &'a [u8] {
        let l = self.layout();
        // SAFETY: the key bytes are immutable after init and inside the slot.
        unsafe { std::slice::from_raw_parts(self.0.add(l.key), l.key_len) }
    }

    /// The value's bytes in segment memory (a frame when packed: copies
    /// of the item take them with its `spec`).
    #[inline]
    pub fn stored_value<'a>(self) -> &'a [u8] {
        let l = self.layout();
        // SAFETY: inside the slot; values are immutable after init.
        unsafe { std::slice::from_raw_parts(self.0.add(l.key + l.key_len), l.stored_len) }
    }

    /// The item's size in bytes, header included.
    #[inline]
    pub fn size(self) -> usize {
        let l = self.layout();
        l.key + l.key_len + l.stored_len
    }

    /// The item's size and, when its value is packed, the client's length:
    /// one decoding of the header, for the counts kept as items are linked
    /// and unlinked.
    #[inline]
    pub fn footprint(self) -> (usize, Option<usize>) {
        let l = self.layout();
        (
            l.key + l.key_len + l.stored_len,
            (l.ext & EXT_PACKED != 0).then_some(l.raw_len),
        )
    }

    /// The value as a reader gets it; `dicts` decodes a packed one.
    #[inline]
    pub fn value_ref<'a>(self, dicts: &'a DictTable) -> ValueRef<'a> {
        self.value_ref_at(&self.meta(), dicts)
    }

    /// The spec of a copy of this item (same flags, expiry field, stored
    /// CAS, and value bytes: packed stays packed).
    pub fn spec(self) -> ItemSpec {
        let l = self.layout();
        ItemSpec {
            key_len: l.key_len,
            value_len: l.stored_len,
            flags: self.flags(),
            exptime: self.exptime(),
            exptime_field: l.ext & EXT_EXPTIME != 0,
            cas: self.stored_cas(),
            packed: (l.ext & EXT_PACKED != 0).then(|| (self.codec(&l), l.raw_len)),
            raw_tried: l.ext & EXT_RAW_TRIED != 0,
        }
    }

    /// The state byte (`STATE_*` bits, EXT, FREQ).
    #[inline]
    pub fn state(self) -> u8 {
        self.state_atomic().load(Ordering::Relaxed)
    }

    /// Unlinked from the index (or not yet committed).
    #[inline]
    pub fn is_dead(self) -> bool {
        self.state() & STATE_DEAD != 0
    }

    /// Marks the item unlinked.
    #[inline]
    pub fn mark_dead(self) {
        self.state_atomic().fetch_or(STATE_DEAD, Ordering::Relaxed);
    }

    /// Commits a written item, just before it is linked: items are
    /// written dead (see `Arena::reserve`), so an item whose writer never
    /// finished is never taken for a live one by a recovery. The release
    /// orders every byte of the item before the commit, for a recovery
    /// that reads the item memory this process leaves behind. Only the
    /// item's writer touches its state before it is linked, so a plain
    /// store does.
    #[inline]
    pub fn commit(self) {
        let state = self.state_atomic();
        state.store(
            state.load(Ordering::Relaxed) & !STATE_DEAD,
            Ordering::Release,
        );
    }

    /// Hit at least once.
    #[inline]
    pub fn is_fetched(self) -> bool {
        self.state() & STATE_FETCHED != 0
    }

    /// Whether any of the state bits `bits` is set.
    #[inline]
    pub fn has_state(self, bits: u8) -> bool {
        self.state() & bits != 0
    }

    /// Sets state bits (not EXT or FREQ).
    #[inline]
    pub fn set_state(self, bits: u8) {
        self.state_atomic()
            .fetch_or(bits & (STATE_EXT - 1), Ordering::Relaxed);
    }

    /// Clears state bits (not EXT or FREQ).
    #[inline]
    pub fn clear_state(self, bits: u8) {
        self.state_atomic()
            .fetch_and(!(bits & (STATE_EXT - 1)), Ordering::Relaxed);
    }

    /// Hits counted for the evictor (0..=FREQ_MAX).
    #[inline]
    pub fn freq(self) -> u8 {
        self.state() >> FREQ_SHIFT
    }

    /// A hit, as memcached's segmented-LRU `do_item_bump`: the first hit
    /// marks the item fetched; later hits refresh its access time. Every
    /// hit counts towards the eviction frequency. Takes no lock: two
    /// atomics, written only when they change.
    #[inline]
    pub fn bump(self, atime: u16) {
        let s = self.state();
        if s & STATE_FETCHED == 0 {
            self.state_atomic()
                .fetch_or(STATE_FETCHED, Ordering::Relaxed);
        } else if self.atime() != atime {
            self.set_atime(atime);
        }
        let s = self.state();
        if s >> FREQ_SHIFT < FREQ_MAX {
            // A lost race only loses a count.
            let _ = self.state_atomic().compare_exchange(
                s,
                s + (1 << FREQ_SHIFT),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Sets the eviction frequency (the evictor, on a copy it owns).
    #[inline]
    pub fn set_freq(self, freq: u8) {
        let s = self.state();
        self.state_atomic().store(
            (s & ((1 << FREQ_SHIFT) - 1)) | (freq.min(FREQ_MAX) << FREQ_SHIFT),
            Ordering::Relaxed,
        );
    }

    /// Marks the item hit, without counting a hit for the evictor.
    #[inline]
    pub fn mark_fetched(self) {
        if !self.is_fetched() {
            self.state_atomic()
                .fetch_or(STATE_FETCHED, Ordering::Relaxed);
        }
    }
}

/// A read-only view of a live item handed to callers while the shard lock
/// is held or the thread is pinned (so its memory stays as it is).
#[derive(Clone, Copy)]
pub struct ItemView<'a> {
    pub(crate) ptr: ItemPtr,
    pub(crate) meta: ItemMeta,
    /// The CAS unique (0 with -C).
    pub(crate) cas: u64,
    /// The segment's base time (atime is relative to it).
    pub(crate) base_time: u32,
    /// Held by an epoch pin only, no shard lock (see `lock_free`).
    pub(crate) lock_free: bool,
    /// The dictionaries a packed value may name.
    pub(crate) dicts: &'a DictTable,
}

impl<'a> ItemView<'a> {
    /// True when the item is held by an epoch pin only, not under its
    /// shard's lock: slow work with it (a socket write of its value) then
    /// holds up no other thread's reads or writes of the shard.
    #[inline]
    pub fn lock_free(&self) -> bool {
        self.lock_free
    }

    /// The key.
    pub fn key(&self) -> &'a [u8] {
        self.ptr.key_at(&self.meta)
    }
    /// The value: its bytes, or a frame that decodes to them.
    #[inline]
    pub fn value(&self) -> ValueRef<'a> {
        self.ptr.value_ref_at(&self.meta, self.dicts)
    }
    /// Client flags.
    pub fn flags(&self) -> u32 {
        self.meta.flags
    }
    /// The CAS unique (0 with -C).
    pub fn cas(&self) -> u64 {
        self.cas
    }
    /// Relative expiry when the view was made (`meta`'s: mg T and gat
    /// change the item's after), 0 = never.
    pub fn exptime(&self) -> u32 {
        self.meta.exptime
    }
    /// Last access (relative clock).
    pub fn atime(&self) -> u32 {
        self.base_time + u32::from(self.ptr.atime())
    }
    /// The client's value length.
    pub fn value_len(&self) -> usize {
        self.meta.value_len()
    }
    /// Whether the value is stored packed.
    pub fn is_packed(&self) -> bool {
        self.meta.is_packed()
    }
    /// Has the item been hit before (memcached's ITEM_FETCHED)?
    pub fn fetched(&self) -> bool {
        self.ptr.is_fetched()
    }
    /// Meta-invalidated (md I, ms I): a client should recompute the value.
    pub fn stale(&self) -> bool {
        self.ptr.has_state(STATE_STALE)
    }
    /// A meta client has already won the recache token.
    pub fn token_sent(&self) -> bool {
        self.ptr.has_state(STATE_TOKEN_SENT)
    }
    /// Records that a meta client won the recache token.
    pub fn mark_token_sent(&self) {
        self.ptr.set_state(STATE_TOKEN_SENT)
    }
    /// The key is binary (sent base64 encoded).
    pub fn binary_key(&self) -> bool {
        self.ptr.has_state(STATE_BINARY_KEY)
    }
}

#[cfg(test)]
mod tests;
