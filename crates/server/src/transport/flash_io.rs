//! A worker's flash reads: an io_uring of its own whose completions wake
//! the worker's event loop through an eventfd, so a GET whose keys are on
//! flash waits for its reads while the worker serves other connections.
//!
//! ```text
//!   request ──execute──▶ Next::AwaitFlash (keys on flash, not read yet)
//!      │                       │ WorkerCtx::flash_wanted
//!      │                       ▼
//!      │                 FlashIo::submit: one read per record (O_DIRECT
//!      │                 blocks), user_data = slot in `in_flight`
//!      │                       │ (kernel, disk)
//!      │                       ▼
//!      │                 eventfd readable ──▶ FlashIo::complete:
//!      │                 Store::flash_arrived (the record is ready on this
//!      │                 thread), the connection's count of reads goes down
//!      ▼                       │ 0
//!   request runs again ◀──────┘  its lookups find the records ready
//! ```
//!
//! The request's replies stay in order: nothing after it runs until it
//! has. A buffer given to the kernel is owned by `in_flight` until its
//! completion arrives, also when its connection closed meanwhile; the
//! worker waits for every read before it drops the ring.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use io_uring::{opcode, types, IoUring};
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use slab::Slab;

use osmium_store::flash::device::AlignedBuf;
use osmium_store::flash::FlashRead;
use osmium_store::{FlashFetch, Store};

use crate::stats::latency::{self, Latency};

const RING_ENTRIES: u32 = 256;

/// A read the kernel is doing.
struct InFlight {
    /// The connection waiting for it (its slab key and its id, so that a
    /// key reused by a later connection is not woken).
    conn: usize,
    conn_id: u64,
    read: FlashRead,
    buf: AlignedBuf,
    skip: usize,
    /// Bytes asked for: fewer is a failing (e.g. truncated) file.
    len: usize,
    /// When it was started (its latency, in `osmium_flash_read_duration_seconds`).
    started: u64,
}

pub(crate) struct FlashIo {
    ring: IoUring,
    eventfd: OwnedFd,
    in_flight: Slab<InFlight>,
    /// Entries pushed since the last `submit`.
    unsubmitted: usize,
    /// The worker's histograms: each read's time from its start to its
    /// completion being reaped.
    latency: Arc<Latency>,
}

impl FlashIo {
    /// A ring whose completions make `token` readable in `registry`; None
    /// where the kernel refuses io_uring (the GETs then read flash
    /// themselves, blocking their worker).
    pub(crate) fn new(
        registry: &Registry,
        token: Token,
        latency: Arc<Latency>,
    ) -> io::Result<FlashIo> {
        let ring = IoUring::new(RING_ENTRIES)?;
        // SAFETY: eventfd has no memory-safety preconditions; the result is
        // checked and owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nobody else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        registry.register(
            &mut SourceFd(&eventfd.as_raw_fd()),
            token,
            Interest::READABLE,
        )?;
        Ok(FlashIo {
            ring,
            eventfd,
            in_flight: Slab::new(),
            unsubmitted: 0,
            latency,
        })
    }

    /// Starts the reads of `wanted` for connection `conn` (`conn_id`);
    /// returns how many it waits for (0: everything is ready already).
    pub(crate) fn start(
        &mut self,
        store: &Store,
        conn: usize,
        conn_id: u64,
        wanted: &mut Vec<FlashRead>,
    ) -> usize {
        let mut started = 0;
        for read in wanted.drain(..) {
            let FlashFetch::Disk {
                fd,
                offset,
                len,
                skip,
                mut buf,
            } = store.flash_source(&read)
            else {
                continue;
            };
            let ptr = buf.as_mut_ptr();
            let slot = self.in_flight.insert(InFlight {
                conn,
                conn_id,
                read,
                buf,
                skip,
                len,
                started: latency::now(),
            });
            let entry = opcode::Read::new(types::Fd(fd), ptr, len as u32)
                .offset(offset)
                .build()
                .user_data(slot as u64);
            // SAFETY: the buffer is owned by `in_flight[slot]` until this
            // read's completion is reaped (`complete`), and its heap memory
            // does not move when the slab does; the file descriptor lives
            // as long as the store.
            while unsafe { self.ring.submission().push(&entry) }.is_err() {
                self.submit();
            }
            self.unsubmitted += 1;
            started += 1;
        }
        started
    }

    /// Hands the kernel the reads started since the last call.
    pub(crate) fn submit(&mut self) {
        if self.unsubmitted > 0 {
            match self.ring.submit() {
                Ok(_) => self.unsubmitted = 0,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => tracing::warn!("flash reads: io_uring submit failed: {e}"),
            }
        }
    }

    /// Reaps the reads that finished: each record is made ready for its
    /// connection's next lookups; `done(conn, conn_id)` is called once per
    /// read for the connection that waited for it.
    pub(crate) fn complete(&mut self, store: &Store, mut done: impl FnMut(usize, u64)) {
        let mut count = [0u8; 8];
        // SAFETY: reads 8 bytes into our buffer from our own eventfd.
        unsafe { libc::read(self.eventfd.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        let finished: Vec<(usize, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (slot, result) in finished {
            let Some(f) = self.in_flight.try_remove(slot) else {
                continue;
            };
            let result = if result < 0 {
                Err(io::Error::from_raw_os_error(-result))
            } else if (result as usize) < f.len {
                // The tier only reads what it wrote, inside its pages:
                // less means the file is shorter than the tier made it.
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("read {result} of {} bytes", f.len),
                ))
            } else {
                Ok(result as usize)
            };
            self.latency.flash_read(f.started);
            store.flash_arrived(&f.read, f.buf, f.skip, result);
            done(f.conn, f.conn_id);
        }
    }

    /// Waits for every read in flight (before the ring and the buffers
    /// are dropped).
    pub(crate) fn drain(&mut self, store: &Store) {
        self.submit();
        while !self.in_flight.is_empty() {
            if self.ring.submit_and_wait(1).is_err() {
                break;
            }
            self.complete(store, |_, _| {});
        }
    }
}
