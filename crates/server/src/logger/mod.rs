//! Log watchers: memcached's `watch` command and the log lines it streams.
//!
//! A connection that runs `watch [streams...]` stops being a client and
//! becomes a log stream: it gets `OK\r\n`, then one `\n`-ended line per
//! event of the streams it asked for, in memcached 1.6.45's `logger.c`
//! formats (`ts=<sec>.<usec> gid=<n> type=... key=<uri-encoded> ...`).
//!
//! Three parts, as in memcached:
//!
//! - **Producers** (workers, and other threads through one shared slot)
//!   build each line into their own bounded buffer ([`Logger::log`]): no
//!   heap allocation per line, the buffer's lock held only by its thread
//!   and, for a swap, the dispatcher. A full buffer drops the line
//!   (`log_worker_dropped`). A producer first checks [`Logger::watching`],
//!   one relaxed load of the mask of streams some watcher asked for: a
//!   stream nobody watches costs that load and nothing else.
//! - **The dispatcher** (`dispatch`, thread `osmium-logger`) takes the
//!   producers' buffers, copies each line into the bounded buffer
//!   (256 KiB) of every watcher that asked for its stream and started
//!   before it (`gid`), and writes the watchers' sockets without blocking.
//!   A watcher whose buffer has no room for a line skips it; the next line
//!   that fits is preceded by `skipped=N` (memcached's flow control).
//! - **Watchers**: at most [`WATCHER_LIMIT`]; the socket is handed over by
//!   its worker (`transport::worker`), and closed when the peer closes.
//!
//! `proxyreqs`, `proxyevents`, `proxyuser` and `rawcmds` are accepted as
//! memcached accepts them; osmium has no proxy and memcached 1.6.45 logs
//! no raw commands, so they never carry a line.

mod conn_events;
mod dispatch;

use std::io::Write;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) use crate::compose::dump::uri_encode;
pub(crate) use conn_events::{conn_close, conn_new, tls_error, CloseReason};
pub(crate) use dispatch::spawn;

use crate::transport::stream::Stream;

/// memcached's stream flags (`logger.h`).
pub(crate) const SYSEVENTS: u16 = 1 << 1;
pub(crate) const FETCHERS: u16 = 1 << 2;
pub(crate) const MUTATIONS: u16 = 1 << 3;
pub(crate) const CONNEVENTS: u16 = 1 << 5;
pub(crate) const EVICTIONS: u16 = 1 << 6;
pub(crate) const RAWCMDS: u16 = 1 << 9;
pub(crate) const PROXYREQS: u16 = 1 << 10;
pub(crate) const PROXYEVENTS: u16 = 1 << 11;
pub(crate) const PROXYUSER: u16 = 1 << 12;
pub(crate) const DELETIONS: u16 = 1 << 13;

/// At most this many watchers at once (memcached's `WATCHER_LIMIT`).
pub(crate) const WATCHER_LIMIT: usize = 20;
/// A producer's buffer, allocated when it first logs. memcached's
/// `worker_logbuf_size` is 64 KiB of entries not yet rendered; rendered
/// lines take about 2.5 times as much.
const PRODUCER_BUF: usize = 256 * 1024;
/// A watcher's buffer (memcached's `watcher_logbuf_size` default).
pub(crate) const WATCHER_BUF: usize = 256 * 1024;
/// Room a line may take: a 250-byte key URI-encoded is 750 bytes.
const MAX_LINE: usize = 1536;
/// A line's header in a producer buffer: flags, gid, length.
const HEADER: usize = 2 + 8 + 2;

/// memcached's `watch` arguments: the stream names, each matched as
/// memcached matches it (`strncmp(name, token, len(token))`: any prefix,
/// the empty one too, of the first name in memcached's order). None: a
/// token that names no stream (memcached answers `ERROR`).
pub(crate) fn parse_streams<'a>(mut tokens: impl Iterator<Item = &'a [u8]>) -> Option<u16> {
    const NAMES: [(&[u8], u16); 10] = [
        (b"rawcmds", RAWCMDS),
        (b"evictions", EVICTIONS),
        (b"fetchers", FETCHERS),
        (b"mutations", MUTATIONS),
        (b"sysevents", SYSEVENTS),
        (b"connevents", CONNEVENTS),
        (b"proxyreqs", PROXYREQS),
        (b"proxyevents", PROXYEVENTS),
        (b"proxyuser", PROXYUSER),
        (b"deletions", DELETIONS),
    ];
    let mut flags = 0;
    let mut any = false;
    for t in tokens.by_ref() {
        any = true;
        let (_, f) = NAMES.iter().find(|(name, _)| name.starts_with(t))?;
        flags |= f;
    }
    Some(if any { flags } else { FETCHERS })
}

/// A producer's buffer of finished lines.
struct LogBuf {
    data: Vec<u8>,
    written: u64,
    dropped: u64,
    /// The dispatcher was woken to take this buffer (it is half full).
    woke: bool,
}

/// A watcher waiting for the dispatcher to take it.
struct NewWatcher {
    stream: Stream,
    fd: i32,
    flags: u16,
    min_gid: u64,
}

/// The watchers' counters (`stats`: `log_*`).
#[derive(Default)]
pub(crate) struct LogStats {
    pub worker_dropped: AtomicU64,
    pub worker_written: AtomicU64,
    pub watcher_skipped: AtomicU64,
    pub watcher_sent: AtomicU64,
}

/// The shared half of the log watchers (see the module comment).
pub(crate) struct Logger {
    /// The streams some watcher asked for.
    mask: AtomicU16,
    gid: AtomicU64,
    /// One per worker, and a last one for every other thread.
    bufs: Box<[Mutex<LogBuf>]>,
    incoming: Mutex<Vec<NewWatcher>>,
    wake: Condvar,
    /// Watchers open (taken or waiting to be).
    watchers: AtomicUsize,
    pub stats: LogStats,
    /// Set at a stop: the dispatcher sends what it holds and ends.
    stopping: std::sync::atomic::AtomicBool,
    /// Told the new mask when it changes (the store's events follow it).
    on_mask: OnceLock<MaskHook>,
}

type MaskHook = Box<dyn Fn(u16) + Send + Sync>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Logger {
    /// A logger for `workers` worker threads.
    pub(crate) fn new(workers: usize) -> Logger {
        Logger {
            mask: AtomicU16::new(0),
            gid: AtomicU64::new(0),
            bufs: (0..=workers)
                .map(|_| {
                    Mutex::new(LogBuf {
                        data: Vec::new(),
                        written: 0,
                        dropped: 0,
                        woke: false,
                    })
                })
                .collect(),
            incoming: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            watchers: AtomicUsize::new(0),
            stats: LogStats::default(),
            on_mask: OnceLock::new(),
            stopping: Default::default(),
        }
    }

    /// Whether some watcher asked for one of `streams`: the one check a
    /// producer makes before it builds a line.
    #[inline(always)]
    pub(crate) fn watching(&self, streams: u16) -> bool {
        self.mask.load(Relaxed) & streams != 0
    }

    /// Asks the dispatcher to send the lines it holds (what the watchers'
    /// sockets take at once) and end.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Relaxed);
        let _guard = lock(&self.incoming);
        self.wake.notify_one();
    }

    /// Sets what hears of the watched streams when they change (once).
    pub(crate) fn on_mask_change(&self, f: impl Fn(u16) + Send + Sync + 'static) {
        let _ = self.on_mask.set(Box::new(f));
    }

    fn set_mask(&self, mask: u16) {
        self.mask.store(mask, Relaxed);
        if let Some(f) = self.on_mask.get() {
            f(mask);
        }
    }

    /// The producer slot of threads that are not workers.
    pub(crate) fn other_slot(&self) -> usize {
        self.bufs.len() - 1
    }

    /// Watchers open (`log_watchers`).
    pub(crate) fn watcher_count(&self) -> usize {
        self.watchers.load(Relaxed)
    }

    /// Records a line of stream `stream` built by `body` (the part after
    /// `ts=... gid=... `, without its `\n`) in producer slot `slot` (a
    /// worker's index, or [`Logger::other_slot`]). Dropped, and counted,
    /// when the slot's buffer is full.
    pub(crate) fn log(&self, slot: usize, stream: u16, body: impl FnOnce(&mut Vec<u8>)) {
        let Some(buf) = self.bufs.get(slot) else {
            return;
        };
        let mut b = lock(buf);
        if b.data.capacity() == 0 {
            b.data.reserve_exact(PRODUCER_BUF);
        }
        if b.data.capacity() - b.data.len() < HEADER + MAX_LINE {
            b.dropped += 1;
            return;
        }
        let gid = self.gid.fetch_add(1, Relaxed) + 1;
        let start = b.data.len();
        b.data.extend_from_slice(&stream.to_le_bytes());
        b.data.extend_from_slice(&gid.to_le_bytes());
        b.data.extend_from_slice(&[0, 0]);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // memcached's `ts=%lld.%d`: microseconds unpadded.
        let _ = write!(
            b.data,
            "ts={}.{} gid={} ",
            t.as_secs(),
            t.subsec_micros(),
            gid
        );
        body(&mut b.data);
        let line = b.data.len() - start - HEADER;
        if line >= MAX_LINE {
            // Not a line memcached would make (its scratch is bounded too).
            b.data.truncate(start);
            b.dropped += 1;
            return;
        }
        b.data.push(b'\n');
        let len = (line + 1) as u16;
        b.data[start + 10..start + 12].copy_from_slice(&len.to_le_bytes());
        b.written += 1;
        if b.data.len() > PRODUCER_BUF / 2 && !b.woke {
            // A burst (a get of thousands of keys): the dispatcher takes
            // the buffer now rather than at its next round.
            b.woke = true;
            self.wake.notify_one();
        }
    }

    /// A line from a thread that is not a worker.
    pub(crate) fn log_other(&self, stream: u16, body: impl FnOnce(&mut Vec<u8>)) {
        if self.watching(stream) {
            self.log(self.other_slot(), stream, body);
        }
    }

    /// Takes one of the [`WATCHER_LIMIT`] places for a watcher; false
    /// when none is left (memcached's `WATCHER_TOO_MANY`).
    pub(crate) fn reserve(&self) -> bool {
        self.watchers
            .fetch_update(Relaxed, Relaxed, |n| (n < WATCHER_LIMIT).then_some(n + 1))
            .is_ok()
    }

    /// Gives back a place [`Logger::reserve`] took and no watcher used.
    pub(crate) fn unreserve(&self) {
        self.watchers.fetch_sub(1, Relaxed);
    }

    /// A `sysevents` line from a thread that is not a worker.
    pub(crate) fn sysevent(&self, line: std::fmt::Arguments<'_>) {
        self.log_other(SYSEVENTS, |b| {
            let _ = b.write_fmt(line);
        });
    }

    /// Makes `stream` (connection `fd`) a watcher of `flags`, in a place
    /// [`Logger::reserve`] took: its `OK` is the first thing it is sent,
    /// then the lines logged from now on.
    pub(crate) fn add_watcher(&self, stream: Stream, fd: i32, flags: u16) {
        let mut incoming = lock(&self.incoming);
        // As memcached: the watcher sees lines from the next gid on.
        let min_gid = self.gid.fetch_add(1, Relaxed) + 1;
        incoming.push(NewWatcher {
            stream,
            fd,
            flags,
            min_gid,
        });
        let mask = self.mask.load(Relaxed) | flags;
        self.set_mask(mask);
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Option<u16> {
        parse_streams(line.split(' ').filter(|t| !t.is_empty()).map(str::as_bytes))
    }

    #[test]
    fn streams_are_matched_as_memcached_matches_them() {
        assert_eq!(parse(""), Some(FETCHERS));
        assert_eq!(parse("fetchers mutations"), Some(FETCHERS | MUTATIONS));
        assert_eq!(parse("evict"), Some(EVICTIONS));
        assert_eq!(parse("proxy"), Some(PROXYREQS));
        assert_eq!(parse("r"), Some(RAWCMDS));
        assert_eq!(
            parse("deletions connevents sysevents"),
            Some(DELETIONS | CONNEVENTS | SYSEVENTS)
        );
        assert_eq!(parse("fetchersx"), None);
        assert_eq!(parse("noreply"), None);
    }

    #[test]
    fn a_line_is_framed_with_its_time_and_gid() {
        let l = Logger::new(1);
        l.mask.store(FETCHERS, Relaxed);
        l.log(0, FETCHERS, |b| b.extend_from_slice(b"type=x"));
        let b = lock(&l.bufs[0]);
        let len = u16::from_le_bytes([b.data[10], b.data[11]]) as usize;
        let line = std::str::from_utf8(&b.data[HEADER..HEADER + len]).unwrap();
        assert!(line.starts_with("ts="), "{line}");
        assert!(line.ends_with(" gid=1 type=x\n"), "{line}");
        assert_eq!(b.data.capacity(), PRODUCER_BUF);
    }
}
