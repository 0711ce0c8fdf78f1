//! What the server's threads share ([`Shared`]: the store, the settings,
//! the counters, authentication, the socket registry, the stop request)
//! and what one worker's request handlers see ([`WorkerCtx`]: its own
//! counters, write head, buffer pool and hot-key sampler).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use mio::Waker;
use osmium_protocol::replication_link::Transport;
use osmium_store::Store;

use crate::auth::AuthConfig;
use crate::buffers::{BufferPool, PublishedPoolStats};
use crate::conns::Registry;
use crate::hotkeys::{HotKeys, Sampler};
use crate::logger::Logger;
use crate::replication::auth::{PeerAuth, Secret};
use crate::replication::fresh_writes::WriteGate;
use crate::replication::{Replication, Wait, COPY_ITEMS, PEER_NONE};
use crate::settings::Settings;
use crate::stats::counters::{GlobalStats, ThreadStats, Totals};
use crate::stats::latency::{self, Cmd, Latency};
use crate::stats::prefix::PrefixStats;
use crate::tls_context::TlsContext;

/// How the server was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopRequest {
    /// SIGTERM, SIGINT, `shutdown`: stop now.
    Exit,
    /// SIGUSR1, `shutdown graceful`: stop once the workers are done (and,
    /// with a memory file, keep the cache for the next start).
    Graceful,
    /// SIGUSR2, once the new binary passed its check: the threads stop
    /// for a binary upgrade in place (`crate::upgrade`), the process
    /// goes on in the new image.
    Upgrade,
}

/// State shared by every thread.
pub(crate) struct Shared {
    pub settings: Settings,
    pub store: Arc<Store>,
    /// -S and -Y.
    pub auth: AuthConfig,
    /// One per worker.
    pub threads: Vec<Arc<ThreadStats>>,
    /// Each worker's latency histograms (`/metrics`).
    pub latency: Vec<Arc<Latency>>,
    /// Each worker's buffer pool figures.
    pub pools: Vec<Arc<PublishedPoolStats>>,
    /// Memory each worker's connections hold in unsent replies.
    pub output_held: Vec<Arc<AtomicUsize>>,
    pub global: GlobalStats,
    /// `-v`, changed at run time by `verbosity`.
    pub verbosity: AtomicU32,
    pub accepting: AtomicBool,
    /// `stats detail`.
    pub prefix: PrefixStats,
    /// Every open socket (`stats conns`).
    pub conns: Registry,
    stop: AtomicU8,
    /// An upgrade's stop: the workers hand their connections over
    /// (`Started::quiesce`) instead of closing them.
    pub carry_conns: AtomicBool,
    /// Wakes the acceptor's event loop (a stop request).
    pub acceptor_waker: OnceLock<Arc<Waker>>,
    /// Replication (`--replicate-to`; without it, only follow links).
    pub replication: Arc<Replication>,
    /// `-Z`: the certificates and TLS counters.
    pub tls: Option<Arc<TlsContext>>,
    /// Every worker's hot-key summaries (None: `-o hotkeys_top=0`).
    pub hotkeys: Option<Arc<HotKeys>>,
    /// Log watchers (`watch`).
    pub logger: Logger,
}

impl Shared {
    pub(crate) fn new(
        settings: Settings,
        store: Arc<Store>,
        auth: AuthConfig,
        tls: Option<Arc<TlsContext>>,
        secret: Option<Secret>,
    ) -> Shared {
        let threads = (0..settings.threads)
            .map(|_| Arc::new(ThreadStats::default()))
            .collect();
        latency::calibrate();
        let latency = (0..settings.threads)
            .map(|_| Arc::new(Latency::default()))
            .collect();
        let pools = (0..settings.threads)
            .map(|_| Arc::new(PublishedPoolStats::default()))
            .collect();
        let output_held = (0..settings.threads)
            .map(|_| Arc::new(AtomicUsize::new(0)))
            .collect();
        let replication = Replication::new(&settings, store.clone(), secret, tls.clone());
        let hotkeys = HotKeys::new(
            settings.hotkeys.top,
            settings.hotkeys.sample,
            settings.threads,
        );
        Shared {
            logger: Logger::new(settings.threads),
            tls,
            hotkeys,
            replication,
            verbosity: AtomicU32::new(settings.verbose),
            prefix: PrefixStats::new(settings.prefix_delimiter, settings.detail_enabled),
            settings,
            store,
            auth,
            threads,
            latency,
            pools,
            output_held,
            global: GlobalStats::default(),
            accepting: AtomicBool::new(true),
            conns: Registry::default(),
            stop: AtomicU8::new(0),
            carry_conns: AtomicBool::new(false),
            acceptor_waker: OnceLock::new(),
        }
    }

    /// Asks every thread to stop; the first request decides how.
    pub(crate) fn request_stop(&self, how: StopRequest) {
        let v = match how {
            StopRequest::Exit => 1,
            StopRequest::Graceful => 2,
            StopRequest::Upgrade => 3,
        };
        let _ = self
            .stop
            .compare_exchange(0, v, Ordering::SeqCst, Ordering::SeqCst);
        if let Some(w) = self.acceptor_waker.get() {
            let _ = w.wake();
        }
    }

    /// Whether (and how) a stop was requested.
    #[inline]
    pub(crate) fn stop_requested(&self) -> Option<StopRequest> {
        match self.stop.load(Ordering::Relaxed) {
            0 => None,
            1 => Some(StopRequest::Exit),
            2 => Some(StopRequest::Graceful),
            _ => Some(StopRequest::Upgrade),
        }
    }

    #[inline]
    pub(crate) fn verbose(&self) -> u32 {
        self.verbosity.load(Ordering::Relaxed)
    }

    /// The `n` hottest keys now, hottest first, with their read, write
    /// and byte rates (none with `-o hotkeys_top=0`): for the metrics
    /// endpoint (`stats hotkeys` writes its rows through
    /// `hotkeys::stats_rows`).
    pub(crate) fn hot_keys(&self, n: usize) -> Vec<crate::hotkeys::HotKey> {
        crate::hotkeys::top(self.hotkeys.as_deref(), n)
    }

    /// Every worker's counters, summed.
    pub(crate) fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in &self.threads {
            s.add_to(&mut t);
        }
        t
    }
}

/// What one worker's request handlers see.
pub(crate) struct WorkerCtx {
    pub shared: Arc<Shared>,
    pub stats: Arc<ThreadStats>,
    /// This worker's latency histograms.
    pub latency: Arc<Latency>,
    /// When the request being run started (`stats::latency::now`).
    lap: std::cell::Cell<u64>,
    /// This worker's write head in the store.
    pub head: usize,
    /// This worker's connection buffers.
    pub pool: BufferPool,
    /// Memory held by this worker's connections' unsent output (see
    /// `Session::must_yield`; written by this worker only, read by `stats`).
    pub queued_output: Arc<AtomicUsize>,
    /// Flash reads the request that just stopped with `Next::AwaitFlash`
    /// waits for (the worker takes them).
    pub flash_wanted: std::cell::RefCell<Vec<osmium_store::flash::FlashRead>>,
    /// Whether this worker reads flash asynchronously (it has a ring).
    pub flash_async: std::cell::Cell<bool>,
    /// A binary upgrade's quiesce finishes the requests waiting for flash
    /// reads (`transport::worker::carry`): a connection runs at most one
    /// request per turn and reads nothing more from its socket.
    pub finishing: std::cell::Cell<bool>,
    /// `Shared::replication` when it is on.
    pub repl: Option<Arc<Replication>>,
    /// What the connection being run is to replication (`PEER_*`): its
    /// writes are queued only from a client (`PEER_NONE`).
    pub peer: std::cell::Cell<u8>,
    /// What the connection being run showed of itself to replication
    /// (`replication::auth`): the connection's own state, lent while it
    /// runs (`peers` only).
    pub peer_auth: std::cell::RefCell<PeerAuth>,
    /// Where the connection being run stands in sending a full copy
    /// (`replication::COPY_*`; peers only, lent as `peer` is).
    pub copy: std::cell::Cell<u8>,
    /// This server may have replication peers (`Replication::has_peers`):
    /// `peer`, `peer_auth` and `copy` are the connection's, swapped in and
    /// out around each run.
    pub peers: bool,
    /// `replica_hello` succeeded on plain TCP: the worker turns the
    /// connection into these Noise frames once the answer is out.
    pub noise_upgrade: std::cell::RefCell<Option<Transport>>,
    /// The write just run changed nothing (a miss, a failed condition):
    /// it is not queued for replication nor recorded against copies
    /// coming in (`changed_nothing`).
    pub write_missed: std::cell::Cell<bool>,
    /// Sync mode: the acknowledgements the requests just run wait for.
    repl_wait: std::cell::RefCell<Wait>,
    repl_pending: std::cell::Cell<bool>,
    /// Writes were queued for replication since the worker last woke the
    /// senders (`take_repl_queued`).
    repl_queued: std::cell::Cell<bool>,
    /// `replica_follow <seconds>` asked for the connection to become a
    /// feed (kept that long once synced).
    pub handover: std::cell::Cell<Option<u64>>,
    /// This worker's hot-key sampler (None: hot keys off).
    pub hot: Option<Sampler>,
    /// `watch` asked for the connection to become a log watcher of these
    /// streams.
    pub watch: std::cell::Cell<Option<u16>>,
    /// The descriptor of the connection being run (the watchers' `cfd`).
    pub cfd: std::cell::Cell<i32>,
}

/// Output a worker lets its connections queue in all before a connection
/// that already has output waiting stops running requests (a client that
/// does not read its replies holds its output in server memory).
pub(crate) const WORKER_OUTPUT_BUDGET: usize = 8 << 20;

impl WorkerCtx {
    pub(crate) fn new(shared: Arc<Shared>, index: usize) -> WorkerCtx {
        let limit = shared.settings.read_buf_mem_limit / shared.settings.threads.max(1);
        WorkerCtx {
            stats: shared.threads[index].clone(),
            latency: shared.latency[index].clone(),
            lap: std::cell::Cell::new(0),
            pool: BufferPool::new(limit, shared.pools[index].clone()),
            head: index,
            queued_output: shared.output_held[index].clone(),
            flash_wanted: std::cell::RefCell::new(Vec::new()),
            flash_async: std::cell::Cell::new(false),
            finishing: std::cell::Cell::new(false),
            repl: shared
                .replication
                .is_on()
                .then(|| shared.replication.clone()),
            peer: std::cell::Cell::new(PEER_NONE),
            peer_auth: std::cell::RefCell::new(PeerAuth::default()),
            copy: std::cell::Cell::new(0),
            peers: shared.replication.has_peers(),
            noise_upgrade: std::cell::RefCell::new(None),
            write_missed: std::cell::Cell::new(false),
            repl_wait: std::cell::RefCell::new(Wait::default()),
            repl_pending: std::cell::Cell::new(false),
            repl_queued: std::cell::Cell::new(false),
            handover: std::cell::Cell::new(None),
            hot: shared
                .hotkeys
                .as_ref()
                .map(|h| Sampler::new(h.clone(), index)),
            watch: std::cell::Cell::new(None),
            cfd: std::cell::Cell::new(0),
            shared,
        }
    }

    /// A connection's batch of requests starts (one clock read).
    #[inline]
    pub(crate) fn lap_start(&self) {
        self.lap.set(latency::now());
    }

    /// The request of kind `cmd` has run: its time since the batch
    /// started or the request before it ended (one clock read).
    #[inline]
    pub(crate) fn lap(&self, cmd: Cmd) {
        let now = latency::now();
        self.latency.command(cmd, self.lap.get(), now);
        self.lap.set(now);
    }

    #[inline]
    pub(crate) fn store(&self) -> &Store {
        &self.shared.store
    }

    /// A write of `key` was applied: queue it for replication (client
    /// connections only).
    #[inline]
    pub(crate) fn replicate_key(&self, key: &[u8]) {
        if let Some(r) = &self.repl {
            if self.peer.get() == PEER_NONE {
                self.repl_queued.set(true);
                if r.written_key(key, &mut self.repl_wait.borrow_mut()) {
                    self.repl_pending.set(true);
                }
            }
        }
    }

    /// The write being run changed nothing (see `write_missed`).
    #[inline]
    pub(crate) fn changed_nothing(&self) {
        self.write_missed.set(true);
    }

    /// A write of `key` is about to apply: while a full copy comes in, it
    /// is recorded once it changed the key (`WriteGate::wrote`: a
    /// client's, a peer's stream) or, a copy's item, checked against the
    /// record (`replication::fresh_writes`). Keep the gate until the write
    /// applied. With nothing coming in, one relaxed load.
    #[inline]
    pub(crate) fn write_gate(&self, key: &[u8]) -> WriteGate<'_> {
        match &self.repl {
            Some(r) if r.fresh_writes().recording() => r.fresh_writes().gate(key, false),
            _ => WriteGate::Open,
        }
    }

    /// As `write_gate`, for an `ms` or `md`, the commands a full copy
    /// sends: on a peer connection sending its copy's items, a copy item.
    #[inline]
    pub(crate) fn store_gate(&self, key: &[u8]) -> WriteGate<'_> {
        match &self.repl {
            Some(r) if r.fresh_writes().recording() => {
                let copy = self.peer.get() != PEER_NONE && self.copy.get() & COPY_ITEMS != 0;
                r.fresh_writes().gate(key, copy)
            }
            _ => WriteGate::Open,
        }
    }

    /// A flush_all is about to apply (see `write_gate`).
    pub(crate) fn flush_gate(&self) -> WriteGate<'_> {
        match &self.repl {
            Some(r) if r.fresh_writes().recording() => r.fresh_writes().gate_flush(),
            _ => WriteGate::Open,
        }
    }

    /// A flush_all was applied.
    pub(crate) fn replicate_flush(&self, delay: i64) {
        if let Some(r) = &self.repl {
            if self.peer.get() == PEER_NONE {
                self.repl_queued.set(true);
                if r.written_flush(delay, &mut self.repl_wait.borrow_mut()) {
                    self.repl_pending.set(true);
                }
            }
        }
    }

    /// Whether writes were queued for replication since the last call
    /// (the worker then wakes the senders: `Replication::wake_senders`).
    #[inline]
    pub(crate) fn take_repl_queued(&self) -> bool {
        self.repl_queued.replace(false)
    }

    /// Sync mode: adds what the requests just run wait for to `into`;
    /// false when they wait for nothing.
    #[inline]
    pub(crate) fn take_repl_wait(&self, into: &mut Wait) -> bool {
        if !self.repl_pending.replace(false) {
            return false;
        }
        let mut w = self.repl_wait.borrow_mut();
        for (into, w) in into.iter_mut().zip(w.iter_mut()) {
            *into = (*into).max(std::mem::take(w));
        }
        true
    }

    /// Hot keys: a read of `key` that sent `bytes` of value.
    #[inline]
    pub(crate) fn hot_read(&self, key: &[u8], bytes: usize) {
        if let Some(h) = &self.hot {
            h.read(key, bytes);
        }
    }

    /// Hot keys: a write of `key` that received `bytes` of value.
    #[inline]
    pub(crate) fn hot_write(&self, key: &[u8], bytes: usize) {
        if let Some(h) = &self.hot {
            h.write(key, bytes);
        }
    }

    /// Memory this worker's connections hold in unsent replies.
    #[inline]
    pub(crate) fn output_held(&self) -> usize {
        self.queued_output.load(Ordering::Relaxed)
    }

    /// Records that a connection's unsent replies went from `before` to
    /// `after` bytes of memory.
    #[inline]
    pub(crate) fn output_changed(&self, before: usize, after: usize) {
        let held = (self.output_held() + after).saturating_sub(before);
        self.queued_output.store(held, Ordering::Relaxed);
    }
}
