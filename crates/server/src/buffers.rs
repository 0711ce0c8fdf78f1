//! Connection buffers and the per-worker pool they come from.
//!
//! A connection holds a read buffer only while it has unconsumed input and
//! a write buffer only while it has unsent output: both are taken from its
//! worker's [`BufferPool`] when bytes arrive or replies are written, and
//! given back as soon as they are empty (memcached's read-buffer cache does
//! the same). An idle connection costs no buffer memory, and 5,000 clients
//! that each send one request share the few buffers a worker's turn needs.
//!
//! ```text
//!   ReadBuffer:  buf [.......consumed......|====input====|....free....]
//!                                          start         end
//! ```
//!
//! Read buffers are `READ_CHUNK` bytes and grow only for a data block that
//! must be held whole (a storage command's value that is not read straight
//! into its item); such large buffers go back to a small set the pool keeps
//! for the next large value, so a client storing large values does not
//! make the server allocate, zero and fault in a fresh buffer each time.
//! Write buffers start at `READ_CHUNK` and grow with the replies; a grown
//! one goes back to a set of at most `LARGE_WRITE_KEEP_BYTES` and is lent
//! again to a connection whose last replies needed that much. Buffers
//! beyond what the pool keeps are freed. With `-o
//! read_buf_mem_limit` the buffers out of a worker's pool at once are
//! limited, as memcached limits its read buffers: a connection that cannot
//! get one is closed and counted in `read_buf_oom`.
//!
//! The cursors are private: callers see the input, consume from its front,
//! and ask for space to read into.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Size of a read buffer and the first capacity of a write buffer.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// Small buffers a pool keeps for reuse (of each kind: read and write).
const SMALL_KEEP: usize = 64;
/// Large read buffers a pool keeps.
const LARGE_KEEP: usize = 4;
/// Larger buffers than this are freed, not kept.
pub(crate) const LARGE_KEEP_MAX: usize = 4 << 20;
/// Write buffers up to this size go back to the small set.
const WRITE_KEEP_MAX: usize = 64 * 1024;
/// Bytes of larger write buffers a pool keeps, for the connections that
/// needed one last time (large values, deep pipelines): the next reply of
/// that size does not map, fault in and unmap a fresh buffer.
const LARGE_WRITE_KEEP_BYTES: usize = 4 << 20;

/// Bytes of buffers freed since the allocator last returned memory to the
/// system (see `trim_memory`).
static FREED_SINCE_TRIM: AtomicU64 = AtomicU64::new(0);

fn freed(capacity: usize) {
    FREED_SINCE_TRIM.fetch_add(capacity as u64, Ordering::Relaxed);
}

/// Returns freed heap memory to the system when much has been freed since
/// the last time (a burst of connections that went away): glibc keeps
/// freed blocks of its per-thread arenas otherwise. Called by the
/// maintenance thread.
pub(crate) fn trim_memory() {
    const TRIM_AFTER: u64 = 8 << 20;
    if FREED_SINCE_TRIM.load(Ordering::Relaxed) >= TRIM_AFTER {
        FREED_SINCE_TRIM.store(0, Ordering::Relaxed);
        // SAFETY: malloc_trim only releases free memory of the allocator's
        // arenas; it touches no live allocation.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// What `stats` reports of a pool (memcached's `read_buf_*`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PoolStats {
    /// Buffers in use or kept.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes of the kept (free) ones.
    pub bytes_free: u64,
    /// Connections refused a buffer by `-o read_buf_mem_limit`.
    pub oom: u64,
}

/// One worker's buffers (used by that worker's thread only).
pub(crate) struct BufferPool {
    small_read: RefCell<Vec<Vec<u8>>>,
    large_read: RefCell<Vec<Vec<u8>>>,
    write: RefCell<Vec<Vec<u8>>>,
    large_write: RefCell<Vec<Vec<u8>>>,
    /// Buffers handed out and not yet given back (read and write; the
    /// limit counts them all but refuses only read buffers: a connection
    /// that got its input in always gets to answer it).
    out: Cell<usize>,
    out_bytes: Cell<usize>,
    /// `-o read_buf_mem_limit`: most buffers out at once (None: no limit).
    limit: Option<usize>,
    oom: Cell<u64>,
    /// The figures `stats` reads from other threads.
    published: Arc<PublishedPoolStats>,
}

/// A pool's figures, readable from any thread.
#[derive(Default)]
pub(crate) struct PublishedPoolStats {
    count: AtomicU64,
    bytes: AtomicU64,
    bytes_free: AtomicU64,
    oom: AtomicU64,
}

impl PublishedPoolStats {
    pub(crate) fn get(&self) -> PoolStats {
        PoolStats {
            count: self.count.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            bytes_free: self.bytes_free.load(Ordering::Relaxed),
            oom: self.oom.load(Ordering::Relaxed),
        }
    }
}

/// The pool has no buffer for this connection (`-o read_buf_mem_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoBuffer;

impl BufferPool {
    /// A pool; `limit_bytes` is this worker's share of
    /// `-o read_buf_mem_limit` (0: none); it publishes its figures in
    /// `published`.
    pub(crate) fn new(limit_bytes: usize, published: Arc<PublishedPoolStats>) -> BufferPool {
        BufferPool {
            small_read: RefCell::new(Vec::new()),
            large_read: RefCell::new(Vec::new()),
            write: RefCell::new(Vec::new()),
            large_write: RefCell::new(Vec::new()),
            out: Cell::new(0),
            out_bytes: Cell::new(0),
            limit: (limit_bytes > 0).then(|| (limit_bytes / READ_CHUNK).max(1)),
            oom: Cell::new(0),
            published,
        }
    }

    /// Where this pool publishes its figures (shared with `stats`).
    #[cfg(test)]
    fn published(&self) -> &PublishedPoolStats {
        &self.published
    }

    fn publish(&self) {
        let kept = |v: &RefCell<Vec<Vec<u8>>>| -> (usize, usize) {
            let v = v.borrow();
            (v.len(), v.iter().map(Vec::capacity).sum())
        };
        let (a, ab) = kept(&self.small_read);
        let (b, bb) = kept(&self.large_read);
        let (c, cb) = kept(&self.write);
        let (d, db) = kept(&self.large_write);
        let free = ab + bb + cb + db;
        let p = &self.published;
        p.count
            .store((a + b + c + d + self.out.get()) as u64, Ordering::Relaxed);
        p.bytes
            .store((free + self.out_bytes.get()) as u64, Ordering::Relaxed);
        p.bytes_free.store(free as u64, Ordering::Relaxed);
        p.oom.store(self.oom.get(), Ordering::Relaxed);
    }

    /// Counts a buffer handed out; a read buffer (`limited`) may be refused
    /// by `-o read_buf_mem_limit`.
    fn lend(&self, buffer: &[u8], limited: bool) -> Result<(), NoBuffer> {
        if limited && self.limit.is_some_and(|l| self.out.get() >= l) {
            self.oom.set(self.oom.get() + 1);
            self.publish();
            return Err(NoBuffer);
        }
        self.out.set(self.out.get() + 1);
        self.out_bytes.set(self.out_bytes.get() + buffer.len());
        Ok(())
    }

    fn returned(&self, capacity: usize) {
        self.out.set(self.out.get().saturating_sub(1));
        self.out_bytes
            .set(self.out_bytes.get().saturating_sub(capacity));
    }

    /// A read buffer of at least `len` bytes (READ_CHUNK for ordinary
    /// input).
    fn take_read(&self, len: usize) -> Result<Vec<u8>, NoBuffer> {
        let buffer = if len <= READ_CHUNK {
            self.small_read
                .borrow_mut()
                .pop()
                .unwrap_or_else(|| vec![0; READ_CHUNK])
        } else {
            let mut large = self.large_read.borrow_mut();
            let fits = (0..large.len())
                .filter(|&i| large[i].len() >= len)
                .min_by_key(|&i| large[i].len());
            let mut b = match fits.or_else(|| (0..large.len()).max_by_key(|&i| large[i].len())) {
                Some(i) => large.swap_remove(i),
                None => Vec::new(),
            };
            if b.len() < len {
                b.resize(len.next_power_of_two(), 0);
            }
            b
        };
        match self.lend(&buffer, true) {
            Ok(()) => {
                self.publish();
                Ok(buffer)
            }
            Err(e) => {
                self.give_read_unlent(buffer);
                Err(e)
            }
        }
    }

    fn give_read(&self, buffer: Vec<u8>) {
        self.returned(buffer.len());
        self.give_read_unlent(buffer);
        self.publish();
    }

    fn give_read_unlent(&self, buffer: Vec<u8>) {
        let len = buffer.len();
        if len == READ_CHUNK {
            let mut small = self.small_read.borrow_mut();
            if small.len() < SMALL_KEEP {
                small.push(buffer);
                return;
            }
        } else if len > READ_CHUNK && len <= LARGE_KEEP_MAX {
            let mut large = self.large_read.borrow_mut();
            if large.len() < LARGE_KEEP {
                large.push(buffer);
                return;
            }
            if let Some(i) = (0..large.len()).min_by_key(|&i| large[i].len()) {
                if large[i].len() < len {
                    let smaller = std::mem::replace(&mut large[i], buffer);
                    freed(smaller.capacity());
                    return;
                }
            }
        }
        freed(buffer.capacity());
    }

    /// An empty write buffer: a kept large one when the connection's last
    /// replies needed more than `WRITE_KEEP_MAX` bytes (`wanted`) and the
    /// pool has one, else a small one.
    pub(crate) fn take_write(&self, wanted: usize) -> Result<Vec<u8>, NoBuffer> {
        let large = if wanted > WRITE_KEEP_MAX {
            let mut large = self.large_write.borrow_mut();
            let fits = (0..large.len())
                .filter(|&i| large[i].capacity() >= wanted)
                .min_by_key(|&i| large[i].capacity());
            fits.or_else(|| (0..large.len()).max_by_key(|&i| large[i].capacity()))
                .map(|i| large.swap_remove(i))
        } else {
            None
        };
        let buffer = large
            .or_else(|| self.write.borrow_mut().pop())
            .unwrap_or_else(|| Vec::with_capacity(READ_CHUNK));
        match self.lend(&[], false) {
            Ok(()) => {
                self.out_bytes.set(self.out_bytes.get() + buffer.capacity());
                self.publish();
                Ok(buffer)
            }
            Err(e) => {
                self.give_write_unlent(buffer);
                Err(e)
            }
        }
    }

    /// Gives an emptied write buffer back (`capacity_when_taken` is what
    /// `take_write` counted for it).
    pub(crate) fn give_write(&self, buffer: Vec<u8>, capacity_when_taken: usize) {
        self.returned(capacity_when_taken);
        self.give_write_unlent(buffer);
        self.publish();
    }

    fn give_write_unlent(&self, mut buffer: Vec<u8>) {
        buffer.clear();
        let capacity = buffer.capacity();
        if capacity <= WRITE_KEEP_MAX {
            let mut write = self.write.borrow_mut();
            if write.len() < SMALL_KEEP {
                write.push(buffer);
            } else {
                freed(capacity);
            }
            return;
        }
        if capacity > LARGE_KEEP_MAX.min(LARGE_WRITE_KEEP_BYTES) {
            freed(capacity);
            return;
        }
        // Keep the largest ones within the budget.
        let mut large = self.large_write.borrow_mut();
        large.push(buffer);
        let mut kept: usize = large.iter().map(Vec::capacity).sum();
        while kept > LARGE_WRITE_KEEP_BYTES {
            let smallest = (0..large.len())
                .min_by_key(|&i| large[i].capacity())
                .expect("over budget means non-empty");
            let dropped = large.swap_remove(smallest);
            kept -= dropped.capacity();
            freed(dropped.capacity());
        }
    }
}

/// A connection's input: bytes received and not yet consumed, in a buffer
/// lent by the worker's pool while there are any.
#[derive(Default)]
pub(crate) struct ReadBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuffer {
    /// Received bytes not yet consumed.
    #[inline]
    pub(crate) fn input(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Drops `n` bytes from the front of the input.
    #[inline]
    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n.min(self.len());
    }

    /// Drops all input.
    pub(crate) fn clear(&mut self) {
        self.start = self.end;
    }

    /// Whether a buffer is held.
    #[cfg(test)]
    fn holds_buffer(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Makes room to read into, for input of at least `need` bytes in all
    /// (a data block to hold whole), and returns the free tail of the
    /// buffer; report what was read with `received`.
    pub(crate) fn space(&mut self, pool: &BufferPool, need: usize) -> Result<&mut [u8], NoBuffer> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        // The buffer must hold the whole of `need` (or what is held) and
        // leave room for a read after the input.
        let target = need.max(self.end - self.start);
        if self.buf.is_empty() {
            self.buf = pool.take_read(target + READ_CHUNK / 4)?;
        } else if self.buf.len() - self.end < READ_CHUNK / 4 || self.buf.len() - self.start < target
        {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < READ_CHUNK / 4 || self.buf.len() < target {
                let mut larger = pool.take_read(target + READ_CHUNK)?;
                larger[..self.end].copy_from_slice(&self.buf[..self.end]);
                let old = std::mem::replace(&mut self.buf, larger);
                pool.give_read(old);
            }
        }
        Ok(&mut self.buf[self.end..])
    }

    /// Records that `n` bytes were read into `space`.
    #[inline]
    pub(crate) fn received(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Gives the buffer back to the pool if all input is consumed.
    #[inline]
    pub(crate) fn release_if_empty(&mut self, pool: &BufferPool) {
        if self.start == self.end && !self.buf.is_empty() {
            pool.give_read(std::mem::take(&mut self.buf));
            self.start = 0;
            self.end = 0;
        }
    }

    /// Gives the buffer back, dropping any input (the connection closed).
    pub(crate) fn release(&mut self, pool: &BufferPool) {
        self.clear();
        self.release_if_empty(pool);
    }

    /// Replaces the input with `bytes` (a datagram), in a buffer owned
    /// outright (datagram endpoints keep theirs).
    pub(crate) fn set(&mut self, bytes: &[u8]) {
        if self.buf.len() < bytes.len() {
            self.buf.resize(bytes.len(), 0);
        }
        self.buf[..bytes.len()].copy_from_slice(bytes);
        self.start = 0;
        self.end = bytes.len();
    }

    /// Appends `bytes` to the input, in a buffer owned outright (a datagram
    /// endpoint completing a data block from its next datagram).
    pub(crate) fn append(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < self.end + bytes.len() {
            self.buf.resize(self.end + bytes.len(), 0);
        }
        self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(r: &mut ReadBuffer, pool: &BufferPool, data: &[u8], need: usize, chunk: usize) {
        let mut at = 0;
        while at < data.len() {
            let space = r.space(pool, need).unwrap();
            let n = space.len().min(chunk).min(data.len() - at);
            space[..n].copy_from_slice(&data[at..at + n]);
            r.received(n);
            at += n;
        }
    }

    #[test]
    fn an_idle_connection_holds_no_buffer() {
        let pool = BufferPool::new(0, Arc::default());
        let mut r = ReadBuffer::default();
        receive(&mut r, &pool, b"get k\r\n", 0, 100);
        assert!(r.holds_buffer());
        r.consume(7);
        r.release_if_empty(&pool);
        assert!(!r.holds_buffer());
        assert_eq!(pool.published().get().count, 1, "kept by the pool");
        // The next read reuses it.
        receive(&mut r, &pool, b"x", 0, 1);
        assert_eq!(pool.published().get().count, 1);
    }

    #[test]
    fn a_large_block_borrows_a_large_buffer_and_gives_it_back() {
        let pool = BufferPool::new(0, Arc::default());
        let mut r = ReadBuffer::default();
        for round in 0..3u8 {
            let block: Vec<u8> = (0..3 << 20).map(|i: u32| (i as u8) ^ round).collect();
            receive(&mut r, &pool, &block, block.len(), 100_000);
            assert!(r.input() == &block[..]);
            r.consume(block.len());
            r.release_if_empty(&pool);
            assert!(!r.holds_buffer());
            assert_eq!(pool.large_read.borrow().len(), 1, "round {round}");
        }
    }

    #[test]
    fn input_survives_growth_and_partial_consumption() {
        let pool = BufferPool::new(0, Arc::default());
        let mut r = ReadBuffer::default();
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        receive(&mut r, &pool, &data[..1000], 0, 700);
        r.consume(10);
        receive(&mut r, &pool, &data[1000..], 200_000, 9_999);
        assert!(r.input() == &data[10..]);
    }

    #[test]
    fn the_limit_refuses_buffers_and_counts_it() {
        let pool = BufferPool::new(2 * READ_CHUNK, Arc::default());
        let mut a = ReadBuffer::default();
        let mut b = ReadBuffer::default();
        let mut c = ReadBuffer::default();
        assert!(a.space(&pool, 0).is_ok());
        assert!(b.space(&pool, 0).is_ok());
        assert_eq!(c.space(&pool, 0).err(), Some(NoBuffer));
        assert_eq!(pool.published().get().oom, 1);
        a.release(&pool);
        assert!(c.space(&pool, 0).is_ok());
    }

    #[test]
    fn write_buffers_come_back() {
        let pool = BufferPool::new(0, Arc::default());
        let mut w = pool.take_write(0).unwrap();
        let cap = w.capacity();
        w.extend_from_slice(b"STORED\r\n");
        pool.give_write(w, cap);
        let s = pool.published().get();
        assert_eq!(s.count, 1);
        assert_eq!(s.bytes, s.bytes_free);
    }
}
