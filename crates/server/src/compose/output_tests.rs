//! Unit tests of `Output`: the queue it builds, sent by the plain
//! stream transport's write (`transport::stream::send_plain`) through a
//! socketpair, as a session does.

use super::*;
use crate::transport::stream::send_plain;
use std::io::Read;
use std::os::unix::net::UnixStream;

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A socketpair's writing end as a session's sink: the plain stream
/// transport's write.
struct Pair<'a>(&'a UnixStream);

impl Sink for Pair<'_> {
    fn send(&mut self, out: &mut Output, stats: &ThreadStats) -> io::Result<bool> {
        send_plain(&mut self.0, out, stats)
    }
}

/// `put_value` as a request does it, then the session's send of a
/// due queue.
fn put(out: &mut Output, a: &UnixStream, value: &[u8], trailer: &[u8], stats: &ThreadStats) {
    {
        let _pin = osmium_store::epoch::pin().expect("a reader slot");
        out.put_value(value, trailer, true);
    }
    if out.due() {
        let _ = Pair(a).send(out, stats);
    }
}

#[test]
fn what_the_socket_and_the_buffer_hold_is_the_output_in_order() {
    // Values go to a socket nobody reads until it is full; from then
    // on they are copied, except what the reader's small reads make
    // room for. The peer's bytes followed by the buffer's must be
    // everything appended, in order.
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let stats = ThreadStats::default();
    let mut out = Output::stream();
    out.buf().extend_from_slice(b"queued before\r\n");
    let mut all = out.pending().to_vec();
    let mut got = Vec::new();
    let mut wrote = 0;
    for i in 0..60u8 {
        let value = bytes(DIRECT_MIN + 9_000 * usize::from(i), i);
        put(&mut out, &a, &value, b"\r\n", &stats);
        assert!(!out.has_refs(), "a value outside GETs leaves at once");
        all.extend_from_slice(&value);
        all.extend_from_slice(b"\r\n");
        wrote += usize::from(std::mem::take(&mut out.wrote_directly));
        put(&mut out, &a, b"small", b"\r\n", &stats);
        all.extend_from_slice(b"small\r\n");
        if out.queued() > 0 {
            let mut chunk = [0u8; 20_000];
            let n = b.read(&mut chunk).unwrap();
            got.extend_from_slice(&chunk[..n]);
        }
    }
    assert!(wrote > 0, "some values were written from item memory");
    assert!(out.queued() > 0, "the socket filled up");
    let sent = stats.bytes_written.get() as usize;
    drop(a);
    b.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), sent);
    got.extend_from_slice(out.pending());
    assert!(got == all);
}

#[test]
fn only_streams_with_unsent_front_and_lock_free_items_reference_values() {
    let out = Output::stream();
    assert!(out.direct_takes(DIRECT_MIN, true));
    assert!(!out.direct_takes(DIRECT_MIN, false));
    assert!(!out.direct_takes(DIRECT_MIN - 1, true));
    assert!(!Output::datagram().direct_takes(DIRECT_MIN, true));
    let mut partly = Output::stream();
    partly.buf().extend_from_slice(b"abc");
    partly.sent(1);
    assert!(!partly.direct_takes(DIRECT_MIN, true));
    // Not pinned: nothing keeps the value's memory, so it is copied.
    let mut unpinned = Output::stream();
    unpinned.put_value(&bytes(DIRECT_MIN, 1), b"\r\n", true);
    assert!(!unpinned.has_refs() && unpinned.queued() == DIRECT_MIN + 2);
}

#[test]
fn a_value_the_socket_did_not_take_whole_marks_it_full_until_drained() {
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let stats = ThreadStats::default();
    let mut out = Output::stream();
    let small = bytes(DIRECT_MIN, 1);
    put(&mut out, &a, &small, b"\r\n", &stats);
    assert!(!out.socket_full(), "a value the socket took whole");
    let mut got = vec![0u8; small.len() + 2];
    b.read_exact(&mut got).unwrap();
    let huge = bytes(16 << 20, 2);
    put(&mut out, &a, &huge, b"\r\n", &stats);
    assert!(out.socket_full() && out.queued() > 0);
    let queued = out.queued();
    out.sent(queued);
    assert!(!out.socket_full(), "drained");
}

/// Gathers `values` (each after a small header, with a trailer) while
/// pinned, as a session running GETs does; returns the whole output.
fn gather(out: &mut Output, values: &[Vec<u8>]) -> Vec<u8> {
    let mut all = Vec::new();
    out.gather_values(true);
    for (i, v) in values.iter().enumerate() {
        let _pin = osmium_store::epoch::pin().expect("a reader slot");
        let head = format!("VALUE k{i} 0 {}\r\n", v.len());
        out.buf().extend_from_slice(head.as_bytes());
        out.put_value(v, b"\r\n", true);
        all.extend_from_slice(head.as_bytes());
        all.extend_from_slice(v);
        all.extend_from_slice(b"\r\n");
    }
    out.buf().extend_from_slice(b"END\r\n");
    all.extend_from_slice(b"END\r\n");
    all
}

#[test]
fn gathered_values_leave_in_one_write_in_order() {
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let stats = ThreadStats::default();
    let mut out = Output::stream();
    let values: Vec<_> = (0..3)
        .map(|i| bytes(DIRECT_MIN + 1000 * i, i as u8))
        .collect();
    let all = gather(&mut out, &values);
    assert!(out.has_refs() && !out.due());
    assert!(osmium_store::epoch::pinned(), "kept while referenced");
    assert!(Pair(&a).send(&mut out, &stats).unwrap());
    assert!(!out.has_refs() && !osmium_store::epoch::pinned());
    let mut got = vec![0u8; stats.bytes_written.get() as usize];
    b.read_exact(&mut got).unwrap();
    got.extend_from_slice(out.pending());
    assert!(got == all);
}

#[test]
fn a_batch_is_due_at_the_gather_limits_and_leaves_in_batches() {
    let values: Vec<_> = (0..GATHER_VALUES + 5)
        .map(|i| bytes(DIRECT_MIN, i as u8))
        .collect();
    let mut out = Output::stream();
    gather(&mut out, &values[..GATHER_VALUES - 1]);
    assert!(!out.due());
    let all = gather(&mut out, &values[GATHER_VALUES - 1..]);
    assert!(out.due(), "GATHER_VALUES reached");
    // One write takes GATHER_VALUES values, the last one's trailer
    // included.
    let mut iov = [IoSlice::new(&[]); GATHER_PIECES];
    let (count, bytes) = out.pieces(0, usize::MAX, &mut iov);
    assert_eq!(count, 2 * GATHER_VALUES + 1);
    let head = |i: usize| format!("VALUE k{i} 0 {DIRECT_MIN}\r\n").len();
    let heads: usize = (0..GATHER_VALUES - 1).map(head).sum::<usize>() + head(0);
    assert_eq!(bytes, heads + GATHER_VALUES * (DIRECT_MIN + 2) + 5);
    // A write cut at `max` in the middle of a value, then the rest.
    let (_, first) = out.pieces(0, 1000, &mut iov);
    assert_eq!(first, 1000);
    let mut whole = Vec::new();
    let mut skip = 0;
    loop {
        let (count, n) = out.pieces(skip, 50_000, &mut iov);
        if count == 0 {
            break;
        }
        iov[..count].iter().for_each(|s| whole.extend_from_slice(s));
        skip += n;
    }
    let mut want = gather_all(&values[..GATHER_VALUES - 1]);
    want.extend_from_slice(&all);
    assert!(whole == want);
    out.discard_refs();
}

#[test]
fn a_due_batch_leaves_and_the_rest_stays_gathered_for_the_next() {
    // As a pipeline of multi-gets: each request's values past the
    // batch wait for the next request's, so batches run across them.
    // (A blocking socket read by another thread takes every write.)
    let (a, mut b) = UnixStream::pair().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        got
    });
    let stats = ThreadStats::default();
    let mut out = Output::stream();
    let size = GATHER_BYTES / 16;
    let first: Vec<_> = (0..20).map(|i| bytes(size, i)).collect();
    let mut all = gather(&mut out, &first);
    assert!(out.due());
    out.send_due_batches();
    // 16 values make a batch, which ends with the 16th's trailer.
    let head = |i: usize| format!("VALUE k{i} 0 {size}\r\n").len();
    let batch = (0..16).map(|i| head(i) + size + 2).sum::<usize>();
    assert_eq!(out.sendable(), batch);
    assert!(Pair(&a).send(&mut out, &stats).unwrap());
    assert_eq!(stats.bytes_written.get() as usize, batch);
    assert!(out.has_refs() && !out.due() && osmium_store::epoch::pinned());
    let second: Vec<_> = (20..34).map(|i| bytes(size, i)).collect();
    all.extend_from_slice(&gather(&mut out, &second));
    assert!(out.due(), "4 + 14 values");
    out.send_due_batches();
    assert!(Pair(&a).send(&mut out, &stats).unwrap());
    assert!(out.has_refs(), "2 values wait");
    // The run ends: everything leaves.
    assert!(Pair(&a).send(&mut out, &stats).unwrap());
    assert!(!out.has_refs() && !osmium_store::epoch::pinned());
    assert_eq!(out.queued(), 0);
    drop(a);
    assert!(reader.join().unwrap() == all);
}

/// What `gather` returns for `values`.
fn gather_all(values: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Output::stream();
    out.gather_values(true);
    let all = gather(&mut out, values);
    out.discard_refs();
    all
}

#[test]
fn what_a_full_socket_did_not_take_of_gathered_values_is_kept_in_order() {
    // Rounds of gathered values to a socket read slowly: the peer's
    // bytes followed by the buffer's are everything, in order.
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let stats = ThreadStats::default();
    let mut out = Output::stream();
    let mut all = Vec::new();
    let mut got = Vec::new();
    for round in 0..12u8 {
        if out.queued() == 0 {
            let values: Vec<_> = (0..5)
                .map(|i| bytes(DIRECT_MIN + 7_919 * usize::from(i + round), i ^ round))
                .collect();
            all.extend_from_slice(&gather(&mut out, &values));
            let _ = Pair(&a).send(&mut out, &stats);
            assert!(!out.has_refs());
        } else {
            let mut chunk = [0u8; 50_000];
            let n = b.read(&mut chunk).unwrap();
            got.extend_from_slice(&chunk[..n]);
            // The transport sends the rest as the socket takes it.
            let _ = Pair(&a).send(&mut out, &stats);
        }
    }
    let sent = stats.bytes_written.get() as usize;
    assert!(out.queued() > 0, "the socket filled up");
    let pending = out.pending().to_vec();
    drop(a);
    b.read_to_end(&mut got).unwrap();
    got.extend_from_slice(&pending);
    assert!(sent > 0 && got == all);
}

#[test]
fn a_truncated_reply_drops_its_gathered_value() {
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let stats = ThreadStats::default();
    let mut out = Output::stream();
    let values = [bytes(DIRECT_MIN, 1), bytes(DIRECT_MIN, 2)];
    gather(&mut out, &values[..1]);
    let kept = out.len();
    gather(&mut out, &values[1..]);
    out.truncate(kept);
    let _ = Pair(&a).send(&mut out, &stats);
    let mut want = format!("VALUE k0 0 {}\r\n", DIRECT_MIN).into_bytes();
    want.extend_from_slice(&values[0]);
    want.extend_from_slice(b"\r\nEND\r\n");
    let mut got = vec![0u8; stats.bytes_written.get() as usize];
    b.read_exact(&mut got).unwrap();
    got.extend_from_slice(out.pending());
    assert!(got == want);
}

#[test]
fn buffers_go_back_to_the_pool_when_sent() {
    let pool = BufferPool::new(0, Default::default());
    let mut out = Output::stream();
    out.acquire(&pool).unwrap();
    out.buf().extend_from_slice(b"END\r\n");
    out.release_if_empty(&pool);
    assert!(out.buf.capacity() > 0, "still pending");
    out.sent(5);
    out.release_if_empty(&pool);
    assert_eq!(out.buf.capacity(), 0);
}
