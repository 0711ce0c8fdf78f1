//! One downstream link and the threads that feed it: a *target*
//! (`--replicate-to`, reconnected for ever) or a *feed* (a follow link a
//! restarted server opened with `replica_follow`, one connection).
//!
//! ```text
//!   connect ─▶ TLS handshake with -Z (the target's certificate verified, `stream`)
//!           ─▶ replica_hello (with a secret: both ends prove it, `auth`; on plain
//!              TCP the link is Noise frames from then on)
//!           ─▶ replica_link <name> ◀─ OK (targets only: marks the connection on the
//!              replica; anything else: it does not take this server as a peer,
//!              nothing is sent, counted as a failed proof, retried)
//!   (a feed answers the follower's replica_follow with OK first)
//!           ─▶ queue opened, full copy: replica_copy on, an ms per live item ─▶ mn
//!              (after a connect, the writes queued meanwhile go between
//!              its chunks as batches of their own, each with its mn,
//!              after replica_copy off; the copy goes on after replica_copy on)
//!           ─▶ replica_synced            (the copy ended)
//!           ─▶ batches: the queued keys' current state (ms / md / flush_all), then mn
//!   reader thread: MN acknowledges everything before it (acked = that batch's
//!   sequence number); any other line but a success or a miss (OK, HD, NF...:
//!   `client::reply::outcome`) is an error (counted, logged)
//!   down (refused, reset, no MN within ACK_TIMEOUT): queue closed, workers woken,
//!   reconnect after RETRY_MIN..RETRY_MAX
//! ```

use std::collections::{HashSet, VecDeque};
use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use osmium_protocol::client::reply::{outcome, Outcome};
use osmium_protocol::replication_link::{frame_error, read_line, Role};
use osmium_store::DumpCursor;

use super::encode;
use super::queue::{records, DirtyQueue, Record};
use super::stream::{LinkReader, LinkStream, LinkWriter};
use super::Replication;

/// A batch not acknowledged within this long takes the link down.
pub(crate) const ACK_TIMEOUT: Duration = Duration::from_secs(1);
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// The longest answer line to `replica_link` read.
pub(crate) const MAX_ANSWER: usize = 256;
/// Output is encrypted in chunks of this much (a full TLS record, a full
/// Noise frame) as the batch grows, so the batch buffer and the frames it
/// is sealed into stay in the cache; the frames leave together at the
/// batch's `mn` (or every 64 KiB: `LinkWriter::write_later`), so the
/// target reads a batch at once, not a frame at a time.
const WRITE_CHUNK: usize = 16 << 10;
/// How long the sender waits for keys before it checks its timers.
const POLL: Duration = Duration::from_millis(50);
/// A full copy ends a stretch with `mn` every this many bytes ...
const COPY_MARK: usize = 64 << 10;
/// ... and goes on only while at most this many `mn` are unanswered: the
/// copy runs at most about `COPY_AHEAD * COPY_MARK` bytes ahead of the
/// replica, so a write sent between two stretches is applied (and, in
/// sync mode, answered) after that much, not after whatever the socket
/// buffers hold.
const COPY_AHEAD: usize = 2;

/// A downstream link's queue and figures (`stats`: `replica_N_*`).
#[derive(Default)]
pub(crate) struct Link {
    /// `HOST:PORT` of a target, the peer's address of a feed.
    pub addr: Mutex<String>,
    pub queue: DirtyQueue,
    /// Connected, and the full copy started.
    pub up: AtomicBool,
    /// A feed slot in use; a target slot that is a current target (a
    /// sender whose target a reload removed sees it false and ends).
    pub active: AtomicBool,
    /// A target slot's sender thread runs (the slot is not reused before
    /// it ended).
    pub running: AtomicBool,
    /// A target's catch-up pull is over (its follow link delivered
    /// `replica_synced`, or the target was added or removed live).
    pub synced: AtomicBool,
    /// The sequence number of the last batch sent and acknowledged.
    pub sent_seq: AtomicU64,
    pub acked: AtomicU64,
    /// Commands sent (ms, md, flush_all).
    pub sent: AtomicU64,
    pub errors: AtomicU64,
    pub full_copies: AtomicU64,
    pub reconnects: AtomicU64,
    /// The last batch's round trip.
    pub lag_us: AtomicU64,
}

impl Link {
    /// Why this link's sender stops: the server stops, or the target was
    /// removed.
    fn ended(&self, repl: &Replication) -> Option<io::Error> {
        if repl.stopping() {
            return Some(io::Error::other("stopping"));
        }
        if !self.active.load(Relaxed) {
            return Some(io::Error::other("target removed"));
        }
        None
    }

    /// Whether a sync-mode write with sequence number `seq` may be
    /// answered: acknowledged, or the link is down.
    #[inline]
    pub(crate) fn covers(&self, seq: u64) -> bool {
        seq == 0 || !self.up.load(Relaxed) || self.acked.load(Relaxed) >= seq
    }
}

/// A target's sender: connects, serves the connection, reconnects.
pub(crate) fn run_target(repl: Arc<Replication>, link: Arc<Link>, addr: String) {
    let mut retry = RETRY_MIN;
    let mut connected_before = false;
    let mut logged_down = false;
    while link.ended(&repl).is_none() {
        let stream = repl.connect(&addr, Role::TargetLink).and_then(|mut s| {
            introduce(&repl, &addr, &mut s)?;
            Ok(s)
        });
        let reason = match stream {
            Ok(stream) if link.ended(&repl).is_some() => {
                drop(stream);
                break;
            }
            Ok(stream) => {
                if connected_before {
                    link.reconnects.fetch_add(1, Relaxed);
                }
                connected_before = true;
                retry = RETRY_MIN;
                if logged_down {
                    tracing::info!("[replication] link to {addr} up");
                    logged_down = false;
                }
                repl.link_changed("target", &addr, None);
                let reason = serve(&repl, &link, stream, None, None);
                repl.link_changed("target", &addr, Some(&reason.to_string()));
                if link.ended(&repl).is_some() {
                    break;
                }
                reason
            }
            Err(e) => {
                if !logged_down {
                    repl.link_changed("target", &addr, Some(&e.to_string()));
                }
                e
            }
        };
        if !logged_down {
            tracing::warn!(
                "[replication] link to {addr} down ({reason}): writes are acknowledged without it"
            );
            logged_down = true;
        }
        // In steps, so that a removed target's sender ends soon.
        let until = Instant::now() + retry;
        while Instant::now() < until && link.ended(&repl).is_none() {
            std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
        }
        retry = (retry * 2).min(RETRY_MAX);
    }
}

/// `replica_link <name>` on a new target connection, and its answer: `OK`
/// from a server that takes this one as a peer. Anything else (`ERROR`:
/// over TLS it did not verify this server's client certificate, say) is a
/// failed proof, counted and logged, and nothing is sent.
fn introduce(repl: &Replication, addr: &str, stream: &mut LinkStream) -> io::Result<()> {
    let ask = format!("replica_link {}\r\n", repl.name);
    let answer = stream
        .write_all(ask.as_bytes())
        .and_then(|()| read_line(stream, MAX_ANSWER))
        .map_err(|e| repl.tls_failed(addr, e))?;
    if answer == "OK" {
        return Ok(());
    }
    let why = format!(
        "it answered replica_link with {answer:?}: it does not take this server as a peer{}",
        if stream.is_tls() {
            " (does it verify client certificates: ssl_verify_mode or an mtls: listener?)"
        } else {
            ""
        }
    );
    repl.auth_failed(&format!("{addr}: {why}"));
    Err(io::Error::new(io::ErrorKind::PermissionDenied, why))
}

/// A feed's sender: one connection, closed `follow` after it is synced.
pub(crate) fn run_feed(
    repl: Arc<Replication>,
    link: Arc<Link>,
    stream: LinkStream,
    follow: Duration,
) {
    let peer = stream
        .tcp()
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    *link.addr.lock().unwrap_or_else(|e| e.into_inner()) = peer.clone();
    repl.link_changed("feed", &peer, None);
    let reason = serve(&repl, &link, stream, Some(b"OK\r\n"), Some(follow));
    repl.link_changed("feed", &peer, Some(&reason.to_string()));
    if repl.verbose() {
        tracing::info!("[replication] follow link to {peer} closed ({reason})");
    }
    link.active.store(false, Relaxed);
}

pub(crate) fn connect_to(addr: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, ACK_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// What the reader and the writer of one connection share.
struct Conn {
    /// Batches sent and not yet acknowledged: (sequence number, sent at).
    inflight: Mutex<VecDeque<(u64, Instant)>>,
    broken: AtomicBool,
}

/// Serves one connection until it fails; returns why.
fn serve(
    repl: &Arc<Replication>,
    link: &Arc<Link>,
    stream: LinkStream,
    hello: Option<&[u8]>,
    follow: Option<Duration>,
) -> io::Error {
    let conn = Arc::new(Conn {
        inflight: Mutex::new(VecDeque::new()),
        broken: AtomicBool::new(false),
    });
    let (mut stream, reader) = match setup(stream, hello) {
        Ok(halves) => halves,
        Err(e) => return e,
    };
    let reader = {
        let (repl, link, conn) = (repl.clone(), link.clone(), conn.clone());
        std::thread::Builder::new()
            .name("osmium-repl-ack".into())
            .spawn(move || read_acks(&repl, &link, &conn, reader))
    };
    let reason = match reader {
        Ok(reader) => {
            let r = stream_writes(repl, link, &conn, &mut stream, follow);
            conn.broken.store(true, Relaxed);
            stream.shutdown();
            let _ = reader.join();
            r
        }
        Err(e) => e,
    };
    link.up.store(false, Relaxed);
    link.queue.close();
    repl.wake_workers();
    reason
}

fn setup(stream: LinkStream, hello: Option<&[u8]>) -> io::Result<(LinkWriter, LinkReader)> {
    stream.tcp().set_nodelay(true)?;
    stream.tcp().set_write_timeout(Some(ACK_TIMEOUT * 2))?;
    let (mut writer, reader) = stream.split()?;
    if let Some(hello) = hello {
        writer.write_all(hello)?;
    }
    reader
        .tcp()
        .set_read_timeout(Some(Duration::from_millis(200)))?;
    Ok((writer, reader))
}

/// The writer: full copy, then batches, until the connection fails (or
/// a feed's time is up).
fn stream_writes(
    repl: &Replication,
    link: &Link,
    conn: &Conn,
    stream: &mut LinkWriter,
    follow: Option<Duration>,
) -> io::Error {
    let mut out = Vec::with_capacity(WRITE_CHUNK * 2);
    let mut batch = Vec::new();
    let mut synced_at: Option<Instant> = None;
    let mut copy_due = true;
    // The copy made on connecting sends the writes made meanwhile between
    // its chunks, so a sync write waits for a chunk, not for the whole
    // copy: the queue was closed before, so no write waits for a sequence
    // number only the copy covers. A copy made because the queue
    // overflowed (writes waiting for records it dropped) does not.
    let mut interleave = true;
    loop {
        if copy_due {
            copy_due = false;
            // Queue first, then up: a write that sees the link up (and
            // waits for it) is queued after the copy began.
            let seq = link.queue.open();
            link.up.store(true, Relaxed);
            let mut copy = CopyState {
                conn,
                batch: &mut batch,
                interleave,
                overflowed: false,
                since_mark: 0,
                items_on_wire: false,
            };
            if let Err(e) = full_copy(repl, link, stream, &mut out, &mut copy) {
                return e;
            }
            if copy.overflowed {
                // Records dropped during the copy: copy again, without
                // acknowledging anything before it ends.
                interleave = false;
                copy_due = true;
                continue;
            }
            interleave = false;
            if let Err(e) = end_batch(conn, link, stream, &mut out, seq) {
                return e;
            }
            link.full_copies.fetch_add(1, Relaxed);
            // The copy ended: what follows are writes (and, on a feed, the
            // catch-up pull is over).
            if let Err(e) = stream.write_all(b"replica_synced\r\n") {
                return e;
            }
            if follow.is_some() && synced_at.is_none() {
                synced_at = Some(Instant::now());
            }
        }
        let taken = link.queue.take(&mut batch, POLL);
        if conn.broken.load(Relaxed) {
            return io::Error::new(io::ErrorKind::ConnectionReset, "connection lost");
        }
        if let Some(e) = link.ended(repl) {
            return e;
        }
        let oldest = conn
            .inflight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .front()
            .map(|&(_, sent)| sent);
        if oldest.is_some_and(|sent| sent.elapsed() > ACK_TIMEOUT) {
            return io::Error::new(io::ErrorKind::TimedOut, "no MN within 1 s");
        }
        if let (Some(follow), Some(at)) = (follow, synced_at) {
            // Closed once everything sent was applied.
            if at.elapsed() >= follow && oldest.is_none() {
                return io::Error::other("follow time over");
            }
        }
        if taken.resync {
            copy_due = true;
            interleave = false;
            continue;
        }
        if taken.records == 0 {
            continue;
        }
        if let Err(e) = send_batch(repl, link, stream, &mut out, &batch) {
            return e;
        }
        if let Err(e) = end_batch(conn, link, stream, &mut out, taken.seq) {
            return e;
        }
    }
}

/// Writes the current state of each key in `keys` (length-prefixed).
fn send_states(
    store: &osmium_store::Store,
    link: &Link,
    stream: &mut LinkWriter,
    out: &mut Vec<u8>,
    keys: &[u8],
) -> io::Result<usize> {
    let mut bytes = 0;
    for r in records(keys) {
        if let Record::Key(key) = r {
            let before = out.len();
            encode::key_state(store, key, out);
            bytes += out.len() - before;
            link.sent.fetch_add(1, Relaxed);
        }
        encrypt_whole_chunks(stream, out)?;
    }
    Ok(bytes)
}

/// A full copy's connection and whether writes go between its chunks.
struct CopyState<'a> {
    conn: &'a Conn,
    batch: &'a mut Vec<u8>,
    interleave: bool,
    /// The queue overflowed during the copy.
    overflowed: bool,
    /// Bytes of the copy sent since its last `mn`.
    since_mark: usize,
    /// The replica was told that what follows are the copy's items
    /// (`replica_copy on`), not writes.
    items_on_wire: bool,
}

impl CopyState<'_> {
    /// Before the copy's items: `replica_copy on`, unless it is in force.
    fn items_follow(&mut self, out: &mut Vec<u8>) {
        if !self.items_on_wire {
            osmium_protocol::client::encode::line(out, &[b"replica_copy", b"on"]);
            self.items_on_wire = true;
        }
    }

    /// Before a batch of writes: `replica_copy off`, unless it is in
    /// force.
    fn writes_follow(&mut self, out: &mut Vec<u8>) {
        if self.items_on_wire {
            osmium_protocol::client::encode::line(out, &[b"replica_copy", b"off"]);
            self.items_on_wire = false;
        }
    }

    /// Between two chunks of a copy (`sent` bytes in the last): the
    /// writes queued meanwhile, as a batch of their own (acknowledged by
    /// its MN as usual); every `COPY_MARK` bytes an `mn`, and a wait while
    /// more than `COPY_AHEAD` are unanswered.
    fn between_chunks(
        &mut self,
        repl: &Replication,
        link: &Link,
        stream: &mut LinkWriter,
        out: &mut Vec<u8>,
        sent: usize,
    ) -> io::Result<()> {
        self.since_mark += sent;
        if self.interleave && !self.overflowed {
            let taken = link.queue.take_now(self.batch);
            if taken.resync {
                self.overflowed = true;
            } else if taken.records > 0 {
                self.writes_follow(out);
                send_batch(repl, link, stream, out, self.batch)?;
                end_batch(self.conn, link, stream, out, taken.seq)?;
                self.since_mark = 0;
            }
        }
        if self.since_mark >= COPY_MARK {
            // Sequence number 0: acknowledges no write.
            end_batch(self.conn, link, stream, out, 0)?;
            self.since_mark = 0;
        }
        self.wait_for_replica(repl, link)
    }

    /// Waits while more than `COPY_AHEAD` `mn` are unanswered.
    fn wait_for_replica(&self, repl: &Replication, link: &Link) -> io::Result<()> {
        loop {
            let oldest = {
                let inflight = self.conn.inflight.lock().unwrap_or_else(|e| e.into_inner());
                if inflight.len() <= COPY_AHEAD {
                    return Ok(());
                }
                inflight.front().map(|&(_, sent)| sent)
            };
            if self.conn.broken.load(Relaxed) {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "connection lost",
                ));
            }
            if let Some(e) = link.ended(repl) {
                return Err(e);
            }
            if oldest.is_some_and(|sent| sent.elapsed() > ACK_TIMEOUT) {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no MN within 1 s"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Writes every live item's state: RAM's, then the flash tier's.
fn full_copy(
    repl: &Replication,
    link: &Link,
    stream: &mut LinkWriter,
    out: &mut Vec<u8>,
    copy: &mut CopyState<'_>,
) -> io::Result<()> {
    let store = &*repl.store;
    let mut cursor = DumpCursor::default();
    let mut keys: Vec<u8> = Vec::new();
    loop {
        keys.clear();
        let more = store.dump_step(&mut cursor, |e| {
            if let Ok(len) = u8::try_from(e.key.len()) {
                keys.push(len);
                keys.extend_from_slice(e.key);
            }
        });
        if !keys.is_empty() {
            copy.items_follow(out);
        }
        let sent = send_states(store, link, stream, out, &keys)?;
        copy.between_chunks(repl, link, stream, out, sent)?;
        if !more {
            break;
        }
        if let Some(e) = link.ended(repl) {
            return Err(e);
        }
    }
    // Then the keys only the flash tier holds (their state is read back
    // from flash like any other key's).
    let Some(flash) = store.flash() else {
        return Ok(());
    };
    let mut walk = flash.walk();
    loop {
        keys.clear();
        let more = flash.walk_step(&mut walk, |key| {
            if let Ok(len) = u8::try_from(key.len()) {
                keys.push(len);
                keys.extend_from_slice(key);
            }
        });
        if !keys.is_empty() {
            copy.items_follow(out);
        }
        let sent = send_states(store, link, stream, out, &keys)?;
        copy.between_chunks(repl, link, stream, out, sent)?;
        if !more {
            return Ok(());
        }
        if let Some(e) = link.ended(repl) {
            return Err(e);
        }
    }
}

/// Writes one taken batch: each key once per stretch between flushes.
fn send_batch(
    repl: &Replication,
    link: &Link,
    stream: &mut LinkWriter,
    out: &mut Vec<u8>,
    batch: &[u8],
) -> io::Result<()> {
    let store = &*repl.store;
    let mut seen: HashSet<&[u8]> = HashSet::new();
    for r in records(batch) {
        match r {
            Record::Key(key) => {
                if !seen.insert(key) {
                    continue;
                }
                encode::key_state(store, key, out);
            }
            Record::Flush(delay) => {
                seen.clear();
                encode::flush(delay, out);
            }
        }
        link.sent.fetch_add(1, Relaxed);
        encrypt_whole_chunks(stream, out)?;
    }
    Ok(())
}

/// Encrypts the whole `WRITE_CHUNK`s of `out` (full frames, full TLS
/// records) to be sent with the batch; the rest stays in `out`.
fn encrypt_whole_chunks(stream: &mut LinkWriter, out: &mut Vec<u8>) -> io::Result<()> {
    let whole = out.len() / WRITE_CHUNK * WRITE_CHUNK;
    if whole > 0 {
        stream.write_later(&out[..whole])?;
        out.drain(..whole);
    }
    Ok(())
}

/// Ends a batch with `mn`: its MN acknowledges sequence number `seq`.
fn end_batch(
    conn: &Conn,
    link: &Link,
    stream: &mut LinkWriter,
    out: &mut Vec<u8>,
    seq: u64,
) -> io::Result<()> {
    osmium_protocol::client::encode::line(out, &[b"mn"]);
    conn.inflight
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push_back((seq, Instant::now()));
    let r = stream.write_all(out);
    out.clear();
    link.sent_seq.fetch_max(seq, Relaxed);
    r
}

/// The reader: MN lines acknowledge batches; other lines are errors of
/// quiet commands. The workers an acknowledgement may release are woken
/// once the lines read so far are handled (one wake-up for the MN of
/// several batches that came together), before the next socket read.
fn read_acks(repl: &Replication, link: &Link, conn: &Conn, stream: LinkReader) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    let mut logged = 0u32;
    let slot = repl.target_slot(link);
    let mut unannounced = false;
    while !conn.broken.load(Relaxed) {
        if unannounced && !reader.buffer().contains(&b'\n') {
            unannounced = false;
            repl.acknowledged_by(slot, link.acked.load(Relaxed));
        }
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) if line.ends_with(b"\n") => {}
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => {
                if let Some(f) = frame_error(&e) {
                    let peer = link.addr.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    repl.auth_failed(&format!("{peer}: {f}"));
                }
                break;
            }
        }
        let text = line.trim_ascii_end();
        match text {
            _ if text.is_empty() => {}
            b"MN" => {
                let front = conn
                    .inflight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop_front();
                if let Some((seq, sent)) = front {
                    link.lag_us
                        .store(sent.elapsed().as_micros() as u64, Relaxed);
                    link.acked.fetch_max(seq, Relaxed);
                    unannounced = true;
                }
            }
            _ if matches!(outcome(&line), Outcome::Done | Outcome::Miss) => {}
            other => {
                link.errors.fetch_add(1, Relaxed);
                if logged < 10 {
                    logged += 1;
                    tracing::warn!(
                        "[replication] {} answered: {}",
                        link.addr.lock().unwrap_or_else(|e| e.into_inner()),
                        String::from_utf8_lossy(other)
                    );
                }
            }
        }
        line.clear();
    }
    conn.broken.store(true, Relaxed);
    link.queue.poke();
}
