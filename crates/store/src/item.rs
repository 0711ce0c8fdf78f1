//! The item record: how one key/value pair is laid out in segment memory.
//!
//! Items are appended to segments (see `arena`) at 8-byte aligned offsets and
//! never move. The header holds no pointers, so a segment can live in a
//! file-backed mapping and be read back after a restart.
//!
//! ```text
//!  byte 0        4        8                16       20       24  25  26
//!       +--------+--------+----------------+--------+--------+---+---+-----+-------+-----+
//!       |exptime | atime  |      cas       | flags  | vlen   |kl |st | key | value | pad |
//!       +--------+--------+----------------+--------+--------+---+---+-----+-------+-----+
//!  exptime u32  relative expiry second, 0 = never      (atomic: gat/touch)
//!  atime   u32  relative last-access second            (atomic: refreshed on hits)
//!  cas     u64  CAS unique (0 when -C)
//!  flags   u32  client flags
//!  vlen    u32  value length in bytes (the value is stored without \r\n)
//!  kl      u8   key length (1..=250)
//!  st      u8   state bits (atomic): DEAD (unlinked from the index),
//!               FETCHED (hit at least once), ACTIVE (hit twice: access time
//!               now follows hits), STALE (meta invalidated), TOKEN_SENT (a
//!               meta client won the recache token), KEY_BINARY (stored
//!               with a base64 key: meta replies re-encode it)
//!  pad          up to the next multiple of 8
//! ```
//!
//! [`HEADER_SIZE`] is 26 bytes. Concurrency rules: the immutable fields
//! (key, lengths) may be read by anyone who knows the item is fully written
//! (its segment has no pending writer). `exptime`, `atime` and `st` are
//! atomics. `cas`, `flags` and the value bytes are written only before the
//! item is published or under its index shard's write lock, and read under
//! that shard's read or write lock.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

pub const HEADER_SIZE: usize = 26;
pub const ALIGN: usize = 8;

const OFF_EXPTIME: usize = 0;
const OFF_ATIME: usize = 4;
const OFF_CAS: usize = 8;
const OFF_FLAGS: usize = 16;
const OFF_VLEN: usize = 20;
const OFF_KLEN: usize = 24;
const OFF_STATE: usize = 25;

pub const STATE_DEAD: u8 = 1;
pub const STATE_FETCHED: u8 = 2;
pub const STATE_ACTIVE: u8 = 4;
pub const STATE_STALE: u8 = 8;
pub const STATE_TOKEN_SENT: u8 = 16;
pub const STATE_KEY_BINARY: u8 = 32;

/// Bytes an item with this key and value length occupies in a segment.
#[inline]
pub fn item_size(key_len: usize, value_len: usize) -> usize {
    (HEADER_SIZE + key_len + value_len + ALIGN - 1) & !(ALIGN - 1)
}

/// A raw handle on an item in segment memory. Copyable; validity is the
/// caller's business (see the module comment for the locking rules).
#[derive(Clone, Copy)]
pub struct ItemPtr(*mut u8);

// SAFETY: an ItemPtr is an address into segment memory that is shared by
// all threads; access discipline is enforced by the index shard locks.
unsafe impl Send for ItemPtr {}
unsafe impl Sync for ItemPtr {}

impl ItemPtr {
    /// # Safety
    /// `p` must point at an 8-byte aligned item slot inside a live segment,
    /// large enough for the item that is (or will be) written there.
    #[inline]
    pub unsafe fn from_raw(p: *mut u8) -> ItemPtr {
        debug_assert!((p as usize).is_multiple_of(ALIGN));
        ItemPtr(p)
    }

    /// Writes a complete item. The caller owns this freshly allocated slot.
    ///
    /// # Safety
    /// The slot must be exclusively owned and `item_size(key.len(), vlen)`
    /// bytes long; `value_parts` must add up to `vlen` bytes.
    pub unsafe fn init(
        self,
        key: &[u8],
        flags: u32,
        exptime: u32,
        atime: u32,
        vlen: usize,
        value_parts: &[&[u8]],
    ) {
        let p = self.0;
        // SAFETY: the caller guarantees exclusive ownership of a slot large
        // enough for header + key + value; all writes stay inside it.
        unsafe {
            (p.add(OFF_EXPTIME) as *mut u32).write(exptime);
            (p.add(OFF_ATIME) as *mut u32).write(atime);
            (p.add(OFF_CAS) as *mut u64).write(0);
            (p.add(OFF_FLAGS) as *mut u32).write(flags);
            (p.add(OFF_VLEN) as *mut u32).write(vlen as u32);
            p.add(OFF_KLEN).write(key.len() as u8);
            p.add(OFF_STATE).write(0);
            std::ptr::copy_nonoverlapping(key.as_ptr(), p.add(HEADER_SIZE), key.len());
            let mut dst = p.add(HEADER_SIZE + key.len());
            for part in value_parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), dst, part.len());
                dst = dst.add(part.len());
            }
        }
    }

    #[inline]
    fn atomic_u32(self, off: usize) -> &'static AtomicU32 {
        // SAFETY: the field is 4-byte aligned (items are 8-aligned and the
        // offsets are multiples of 4) and lives as long as the arena, which
        // outlives every ItemPtr use.
        unsafe { &*(self.0.add(off) as *const AtomicU32) }
    }

    #[inline]
    fn state_atomic(self) -> &'static AtomicU8 {
        // SAFETY: as above; a u8 needs no alignment.
        unsafe { &*(self.0.add(OFF_STATE) as *const AtomicU8) }
    }

    #[inline]
    pub fn exptime(self) -> u32 {
        self.atomic_u32(OFF_EXPTIME).load(Ordering::Relaxed)
    }

    #[inline]
    pub fn set_exptime(self, t: u32) {
        self.atomic_u32(OFF_EXPTIME).store(t, Ordering::Relaxed)
    }

    #[inline]
    pub fn atime(self) -> u32 {
        self.atomic_u32(OFF_ATIME).load(Ordering::Relaxed)
    }

    #[inline]
    pub fn set_atime(self, t: u32) {
        self.atomic_u32(OFF_ATIME).store(t, Ordering::Relaxed)
    }

    #[inline]
    pub fn cas(self) -> u64 {
        // SAFETY: read under the shard lock (module rules); 8-aligned field.
        unsafe { (self.0.add(OFF_CAS) as *const u64).read() }
    }

    /// # Safety
    /// Only before publication or under the item's shard write lock.
    #[inline]
    pub unsafe fn set_cas(self, cas: u64) {
        // SAFETY: exclusive access per the caller's contract.
        unsafe { (self.0.add(OFF_CAS) as *mut u64).write(cas) }
    }

    #[inline]
    pub fn flags(self) -> u32 {
        // SAFETY: immutable after init; 4-aligned.
        unsafe { (self.0.add(OFF_FLAGS) as *const u32).read() }
    }

    #[inline]
    pub fn value_len(self) -> usize {
        // SAFETY: immutable after init; 4-aligned.
        unsafe { (self.0.add(OFF_VLEN) as *const u32).read() as usize }
    }

    #[inline]
    pub fn key_len(self) -> usize {
        // SAFETY: immutable after init.
        unsafe { self.0.add(OFF_KLEN).read() as usize }
    }

    #[inline]
    pub fn key<'a>(self) -> &'a [u8] {
        // SAFETY: the key bytes are immutable after init and inside the slot.
        unsafe { std::slice::from_raw_parts(self.0.add(HEADER_SIZE), self.key_len()) }
    }

    #[inline]
    pub fn value<'a>(self) -> &'a [u8] {
        // SAFETY: inside the slot; the caller holds the shard lock, so no
        // in-place update runs concurrently.
        unsafe {
            std::slice::from_raw_parts(self.0.add(HEADER_SIZE + self.key_len()), self.value_len())
        }
    }

    /// # Safety
    /// Under the item's shard write lock only.
    #[inline]
    pub unsafe fn value_mut<'a>(self) -> &'a mut [u8] {
        // SAFETY: exclusive per the caller's contract; inside the slot.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.0.add(HEADER_SIZE + self.key_len()),
                self.value_len(),
            )
        }
    }

    #[inline]
    pub fn size(self) -> usize {
        item_size(self.key_len(), self.value_len())
    }

    #[inline]
    pub fn state(self) -> u8 {
        self.state_atomic().load(Ordering::Relaxed)
    }

    #[inline]
    pub fn is_dead(self) -> bool {
        self.state() & STATE_DEAD != 0
    }

    #[inline]
    pub fn mark_dead(self) {
        self.state_atomic().fetch_or(STATE_DEAD, Ordering::Relaxed);
    }

    #[inline]
    pub fn is_fetched(self) -> bool {
        self.state() & STATE_FETCHED != 0
    }

    #[inline]
    pub fn has_state(self, bits: u8) -> bool {
        self.state() & bits != 0
    }

    #[inline]
    pub fn set_state(self, bits: u8) {
        self.state_atomic().fetch_or(bits, Ordering::Relaxed);
    }

    #[inline]
    pub fn clear_state(self, bits: u8) {
        self.state_atomic().fetch_and(!bits, Ordering::Relaxed);
    }

    /// A hit, as memcached's segmented-LRU `do_item_bump`: the first hit
    /// marks the item fetched; later hits make it active and refresh its
    /// access time.
    #[inline]
    pub fn bump(self, now: u32) {
        if !self.is_fetched() {
            self.set_state(STATE_FETCHED);
        } else {
            if !self.has_state(STATE_ACTIVE) {
                self.set_state(STATE_ACTIVE);
            }
            if self.atime() != now {
                self.set_atime(now);
            }
        }
    }

    #[inline]
    pub fn mark_fetched(self) {
        if !self.is_fetched() {
            self.state_atomic()
                .fetch_or(STATE_FETCHED, Ordering::Relaxed);
        }
    }
}

/// A read-only view of a live item handed to callers while the shard lock
/// is held.
#[derive(Clone, Copy)]
pub struct ItemView<'a> {
    pub(crate) ptr: ItemPtr,
    pub(crate) use_cas: bool,
    pub(crate) _lock: std::marker::PhantomData<&'a ()>,
}

impl<'a> ItemView<'a> {
    pub fn key(&self) -> &'a [u8] {
        self.ptr.key()
    }
    pub fn value(&self) -> &'a [u8] {
        self.ptr.value()
    }
    pub fn flags(&self) -> u32 {
        self.ptr.flags()
    }
    pub fn cas(&self) -> u64 {
        if self.use_cas {
            self.ptr.cas()
        } else {
            0
        }
    }
    pub fn exptime(&self) -> u32 {
        self.ptr.exptime()
    }
    pub fn atime(&self) -> u32 {
        self.ptr.atime()
    }
    pub fn value_len(&self) -> usize {
        self.ptr.value_len()
    }
    /// TTL update (mg T, gat): exptime is atomic, so a read lock suffices.
    pub fn set_exptime(&self, exptime: u32) {
        self.ptr.set_exptime(exptime)
    }
    /// Has the item been hit before (memcached's ITEM_FETCHED)?
    pub fn fetched(&self) -> bool {
        self.ptr.is_fetched()
    }
    pub fn stale(&self) -> bool {
        self.ptr.has_state(STATE_STALE)
    }
    pub fn token_sent(&self) -> bool {
        self.ptr.has_state(STATE_TOKEN_SENT)
    }
    pub fn mark_token_sent(&self) {
        self.ptr.set_state(STATE_TOKEN_SENT)
    }
    pub fn key_binary(&self) -> bool {
        self.ptr.has_state(STATE_KEY_BINARY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_roundtrip() {
        let mut buf = vec![0u64; 16];
        let p = buf.as_mut_ptr() as *mut u8;
        // SAFETY: the buffer is 128 bytes, 8-aligned and owned by the test.
        let it = unsafe { ItemPtr::from_raw(p) };
        unsafe { it.init(b"key", 7, 100, 62, 5, &[b"he", b"llo"]) };
        unsafe { it.set_cas(99) };
        assert_eq!(it.key(), b"key");
        assert_eq!(it.value(), b"hello");
        assert_eq!(
            (it.flags(), it.exptime(), it.atime(), it.cas()),
            (7, 100, 62, 99)
        );
        assert_eq!(it.size(), 40);
        assert!(!it.is_dead());
        it.mark_dead();
        it.mark_fetched();
        assert!(it.is_dead() && it.is_fetched());
        assert_eq!(item_size(0, 0), 32);
    }
}
