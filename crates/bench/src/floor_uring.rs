//! The floor server on io_uring (`osmium-bench floor --io-uring`): the same
//! answers as the epoll floor ([`crate::floor`], whose [`answer`] it calls),
//! one thread, but every socket operation is an io_uring request, so that
//! the two floors differ only in their I/O loop and measure whether
//! io_uring beats epoll on this kernel.
//!
//! Design:
//!
//! * one ring, set up with `SINGLE_ISSUER | DEFER_TASKRUN` (completions are
//!   run only when this thread enters the kernel to wait, never by
//!   interrupting it), falling back to `COOP_TASKRUN`, then to no flag, when
//!   the kernel refuses them; `--sqpoll` sets up a kernel thread polling the
//!   submission queue instead (it burns a core: a separate variant);
//! * one multishot accept on the listener, re-armed only when a completion
//!   says it has stopped;
//! * per connection one recv at a time into the spare capacity of its input
//!   buffer (`IORING_RECVSEND_POLL_FIRST`: it is re-armed just after the
//!   socket was read, so it waits for data instead of trying a recv that
//!   would find nothing), and at most one send at a time of all the answers
//!   a recv's complete requests produced (answers made while a send is in
//!   flight go to a second buffer and are sent when it completes); with
//!   `--recv-multishot`, one multishot recv per connection instead, into
//!   buffers of a provided buffer ring ([`BufRing`]) that are parsed in
//!   place and handed back at once (only an incomplete request's tail is
//!   copied to the input buffer): no recv SQE, no poll re-arm per read;
//! * the loop is one `submit_and_wait(1)` per iteration: it submits every
//!   SQE the previous iteration queued, for every connection, and waits for
//!   at least one completion; then every completion there is is handled.
//!   That batching of syscalls across connections is what io_uring can gain
//!   over epoll's `epoll_wait` + `read` + `write` per ready socket.
//!
//! Buffers are per connection (an input and two output `Vec`s, grown only
//! when a request does not fit), nothing is allocated per request, and a
//! buffer the kernel may write or read is never moved or freed while its
//! operation is in flight: a connection is freed only once neither its recv
//! nor its send is pending (closing one shuts its socket down, which ends a
//! pending recv).

use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use crate::floor::answer;

/// Size of the input buffer of a new connection (grown when full).
const INPUT: usize = 64 * 1024;
/// Submission queue entries (the completion queue is twice that; the
/// kernel keeps completions that overflow it).
const RING_ENTRIES: u32 = 1024;
/// `user_data` of the multishot accept; a connection's operations are
/// `id << 1 | op`.
const ACCEPT: u64 = u64::MAX;
const OP_RECV: u64 = 0;
const OP_SEND: u64 = 1;
/// Group id of the provided buffer ring (`--recv-multishot`).
const BGID: u16 = 0;
/// Buffers in that ring (a power of two) and bytes per buffer.
const BUFS: u16 = 512;
const BUF_SIZE: usize = 8 * 1024;
/// `IORING_RECVSEND_POLL_FIRST` (not exported by the `io-uring` crate).
const RECVSEND_POLL_FIRST: u16 = 1;

struct Conn {
    stream: TcpStream,
    /// Received bytes not answered yet; a recv writes past its length.
    input: Vec<u8>,
    /// Answers waiting for the send in flight to complete.
    out: Vec<u8>,
    /// The answers being sent; `sent` bytes of it are gone.
    flight: Vec<u8>,
    sent: usize,
    recv_pending: bool,
    send_pending: bool,
    /// Done (EOF or error): freed once no operation is pending.
    closing: bool,
}

/// Runs the io_uring floor server on `addr` (port 0: any free port),
/// printing `listening on <addr>` once bound; never returns unless it fails.
pub(crate) fn run(
    addr: SocketAddr,
    value_size: usize,
    sqpoll: bool,
    multishot: bool,
) -> Result<(), String> {
    let value = vec![b'x'; value_size];
    let mut ring = setup(sqpoll)?;
    let mut bufs = if multishot {
        Some(BufRing::register(&ring)?)
    } else {
        None
    };
    let listener = crate::floor::listen(addr)?;
    let mut conns: slab::Slab<Conn> = slab::Slab::new();
    let lfd = types::Fd(listener.as_raw_fd());
    let accept = opcode::AcceptMulti::new(lfd).build().user_data(ACCEPT);
    // SAFETY: the accept multishot SQE references only the listener's fd,
    // which lives (in `listener`) as long as this function, hence the ring.
    unsafe { push(&mut ring, &accept) }?;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Completion queue full: handle what is there, then retry.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(format!("floor --io-uring: submit_and_wait: {e}")),
        }
        let (submitter, mut sq, mut cq) = ring.split();
        cq.sync();
        for cqe in &mut cq {
            let (data, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            let mut queue = |e: squeue::Entry| -> Result<(), String> {
                // SAFETY: the entry comes from `recv_entry`, `send_entry` or
                // the accept above, whose buffers stay valid until their
                // completion (see those functions).
                while unsafe { sq.push(&e) }.is_err() {
                    sq.sync();
                    submitter
                        .submit()
                        .map_err(|e| format!("floor --io-uring: submit: {e}"))?;
                    sq.sync();
                }
                Ok(())
            };
            if data == ACCEPT {
                if res >= 0 {
                    // SAFETY: a successful accept returns a new socket fd
                    // that nothing else owns.
                    let stream = unsafe { TcpStream::from_raw_fd(res) };
                    stream.set_nodelay(true).ok();
                    let id = conns.insert(Conn {
                        stream,
                        input: Vec::with_capacity(INPUT),
                        out: Vec::new(),
                        flight: Vec::new(),
                        sent: 0,
                        recv_pending: false,
                        send_pending: false,
                        closing: false,
                    });
                    queue(recv_entry(id, &mut conns[id], bufs.is_some()))?;
                }
                if !cqueue::more(flags) {
                    queue(accept.clone())?;
                }
                continue;
            }
            let id = (data >> 1) as usize;
            let Some(conn) = conns.get_mut(id) else {
                continue;
            };
            if data & 1 == OP_RECV {
                // A multishot recv stays armed while its completions say
                // MORE.
                if !(bufs.is_some() && cqueue::more(flags)) {
                    conn.recv_pending = false;
                }
                let picked = bufs.as_ref().and(cqueue::buffer_select(flags));
                if res > 0 && !conn.closing {
                    let n = res as usize;
                    match (&bufs, picked) {
                        (Some(b), Some(bid)) => {
                            // SAFETY: the kernel wrote `n` bytes into
                            // buffer `bid` and handed it to us; it is not
                            // reused until `recycle` below.
                            let chunk = unsafe { b.filled(bid, n) };
                            if conn.input.is_empty() {
                                // The common case: parse in place, keep
                                // only an incomplete tail.
                                let used = answer(chunk, &value, &mut conn.out);
                                conn.input.extend_from_slice(&chunk[used..]);
                            } else {
                                conn.input.extend_from_slice(chunk);
                                let used = answer(&conn.input, &value, &mut conn.out);
                                conn.input.drain(..used);
                            }
                        }
                        _ => {
                            // SAFETY: the kernel wrote `n` bytes into the
                            // spare capacity past `input.len()` (the
                            // recv's buffer).
                            unsafe { conn.input.set_len(conn.input.len() + n) };
                            let used = answer(&conn.input, &value, &mut conn.out);
                            conn.input.drain(..used);
                            if conn.input.len() == conn.input.capacity() {
                                conn.input.reserve(conn.input.capacity());
                            }
                        }
                    }
                    if !conn.send_pending && !conn.out.is_empty() {
                        std::mem::swap(&mut conn.out, &mut conn.flight);
                        conn.sent = 0;
                        queue(send_entry(id, conn))?;
                    }
                }
                if let (Some(b), Some(bid)) = (&mut bufs, picked) {
                    b.recycle(bid);
                }
                let retry = [-libc::EINTR, -libc::EAGAIN, -libc::ENOBUFS].contains(&res);
                if conn.closing || res == 0 || (res < 0 && !retry) {
                    close(&mut conns, id);
                } else if !conn.recv_pending {
                    queue(recv_entry(id, conn, bufs.is_some()))?;
                }
            } else {
                conn.send_pending = false;
                if conn.closing || res < 0 {
                    close(&mut conns, id);
                    continue;
                }
                conn.sent += res as usize;
                if conn.sent < conn.flight.len() {
                    queue(send_entry(id, conn))?;
                    continue;
                }
                conn.flight.clear();
                if !conn.out.is_empty() {
                    std::mem::swap(&mut conn.out, &mut conn.flight);
                    conn.sent = 0;
                    queue(send_entry(id, conn))?;
                }
            }
        }
    }
}

/// The ring: with `sqpoll`, a kernel thread polls the submission queue
/// (idle after 1 s); otherwise the best of `SINGLE_ISSUER | DEFER_TASKRUN`,
/// `COOP_TASKRUN` and no flag that the kernel accepts (said on stderr).
fn setup(sqpoll: bool) -> Result<IoUring, String> {
    if sqpoll {
        return IoUring::builder()
            .setup_sqpoll(1000)
            .build(RING_ENTRIES)
            .map_err(|e| format!("floor --io-uring --sqpoll: io_uring_setup: {e}"));
    }
    let mut last = None;
    for name in ["SINGLE_ISSUER|DEFER_TASKRUN", "COOP_TASKRUN", "no flag"] {
        let mut b = IoUring::builder();
        match name {
            "SINGLE_ISSUER|DEFER_TASKRUN" => b.setup_single_issuer().setup_defer_taskrun(),
            "COOP_TASKRUN" => b.setup_coop_taskrun(),
            _ => &mut b,
        };
        match b.build(RING_ENTRIES) {
            Ok(ring) => {
                eprintln!("floor --io-uring: ring set up with {name}");
                return Ok(ring);
            }
            Err(e) => {
                eprintln!("floor --io-uring: {name} refused: {e}");
                last = Some(e);
            }
        }
    }
    Err(format!(
        "floor --io-uring: io_uring_setup: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    ))
}

/// Queues `e` on the ring's submission queue, submitting first if full.
///
/// # Safety
/// The buffers `e` points to must stay valid until its completion.
unsafe fn push(ring: &mut IoUring, e: &squeue::Entry) -> Result<(), String> {
    // SAFETY: the caller guarantees the buffers outlive the operation.
    while unsafe { ring.submission().push(e) }.is_err() {
        ring.submit()
            .map_err(|e| format!("floor --io-uring: submit: {e}"))?;
    }
    Ok(())
}

/// A recv into the spare capacity of `conn.input`. That buffer is not
/// touched (no push, no reserve, no drop) until the recv completes:
/// `recv_pending` guards it, and the connection is freed only once it is
/// false. With `multishot`, a multishot recv into buffers of the
/// [`BufRing`] instead (it references no memory of the connection).
fn recv_entry(id: usize, conn: &mut Conn, multishot: bool) -> squeue::Entry {
    conn.recv_pending = true;
    if multishot {
        return opcode::RecvMulti::new(types::Fd(conn.stream.as_raw_fd()), BGID)
            .build()
            .user_data((id as u64) << 1 | OP_RECV);
    }
    let spare = conn.input.spare_capacity_mut();
    opcode::Recv::new(
        types::Fd(conn.stream.as_raw_fd()),
        spare.as_mut_ptr().cast(),
        spare.len().min(u32::MAX as usize) as u32,
    )
    .ioprio(RECVSEND_POLL_FIRST)
    .build()
    .user_data((id as u64) << 1 | OP_RECV)
}

/// A send of `conn.flight[conn.sent..]`. `flight` is not touched until the
/// send completes: answers go to `out` while `send_pending` is set, and the
/// connection is freed only once it is false.
fn send_entry(id: usize, conn: &mut Conn) -> squeue::Entry {
    conn.send_pending = true;
    let rest = &conn.flight[conn.sent..];
    opcode::Send::new(
        types::Fd(conn.stream.as_raw_fd()),
        rest.as_ptr(),
        rest.len().min(u32::MAX as usize) as u32,
    )
    .flags(libc::MSG_NOSIGNAL)
    .build()
    .user_data((id as u64) << 1 | OP_SEND)
}

/// Closes connection `id`: frees it if no operation is pending, else shuts
/// its socket down (which completes a pending recv or send) and frees it
/// when the last completion arrives.
fn close(conns: &mut slab::Slab<Conn>, id: usize) {
    let conn = &mut conns[id];
    if conn.recv_pending || conn.send_pending {
        if !conn.closing {
            conn.closing = true;
            conn.stream.shutdown(Shutdown::Both).ok();
        }
        return;
    }
    conns.remove(id);
}

/// The provided-buffer ring of `--recv-multishot`: `BUFS` buffers of
/// `BUF_SIZE` bytes the kernel picks from for each multishot recv
/// completion; a buffer goes back to the ring (`recycle`) once its bytes
/// are parsed or copied. Its memory is leaked on purpose: the kernel may
/// use it as long as the ring lives, which is until the process exits.
struct BufRing {
    entries: *mut types::BufRingEntry,
    base: *mut u8,
    /// Our copy of the ring's tail (the kernel only reads it).
    tail: u16,
}

impl BufRing {
    /// Allocates the ring and its buffers, gives every buffer to the
    /// kernel and registers the ring as group `BGID`.
    fn register(ring: &IoUring) -> Result<BufRing, String> {
        let bytes = usize::from(BUFS) * std::mem::size_of::<types::BufRingEntry>();
        // SAFETY: an anonymous private mapping (page-aligned, as the
        // kernel requires), checked below, never unmapped.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            return Err(format!(
                "floor --io-uring: mmap: {}",
                io::Error::last_os_error()
            ));
        }
        let base = Box::leak(vec![0u8; usize::from(BUFS) * BUF_SIZE].into_boxed_slice());
        let mut bufs = BufRing {
            entries: mem.cast(),
            base: base.as_mut_ptr(),
            tail: 0,
        };
        for bid in 0..BUFS {
            bufs.recycle(bid);
        }
        // SAFETY: the ring memory (`BUFS` entries) and the buffers are
        // valid for the rest of the process (never freed).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(mem as u64, BUFS, BGID, 0)
        }
        .map_err(|e| format!("floor --io-uring: register_buf_ring: {e}"))?;
        Ok(bufs)
    }

    /// The first `len` bytes of buffer `bid`.
    ///
    /// # Safety
    /// The kernel must have handed `bid` over with `len` bytes in it, and
    /// the slice must be dropped before `recycle(bid)`.
    unsafe fn filled(&self, bid: u16, len: usize) -> &[u8] {
        // SAFETY: `bid < BUFS` and `len <= BUF_SIZE` (the kernel filled at
        // most the length it was given); the caller owns the buffer now.
        unsafe { std::slice::from_raw_parts(self.base.add(usize::from(bid) * BUF_SIZE), len) }
    }

    /// Gives buffer `bid` back to the kernel.
    fn recycle(&mut self, bid: u16) {
        let slot = usize::from(self.tail & (BUFS - 1));
        // SAFETY: `slot < BUFS`, inside the mapping; the kernel only reads
        // the slots past its head up to the published tail, and this one
        // is not published yet (at most BUFS buffers are ever out).
        let entry = unsafe { &mut *self.entries.add(slot) };
        // SAFETY: `bid < BUFS`: inside the buffer allocation.
        let addr = unsafe { self.base.add(usize::from(bid) * BUF_SIZE) };
        entry.set_addr(addr as u64);
        entry.set_len(BUF_SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the u16 the kernel reads at the start of the
        // ring (entry 0's reserved field), aligned and inside the mapping;
        // the release store publishes the entry written above.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}
