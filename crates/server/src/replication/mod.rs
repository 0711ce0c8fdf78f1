//! Server-side ring replication (`--replicate-to HOST:PORT`,
//! `--replication async|sync`): what the executor tells it, the links'
//! threads, the catch-up pull, and its stats.
//!
//! ```text
//!   execute ──key written──▶ Link.queue (per target, keys only) ──sender thread──▶ target
//!                                           reads the key's *current* state: ms ... E<cas> q / md q
//!   worker (sync mode) holds the replies until every reachable target's MN covers the write
//!   start: pull (replica_follow) from each target: its full copy arrives as a peer connection
//!   while a copy comes in: keys written here are recorded, the copy skips them (`fresh_writes`)
//! ```
//!
//! Workers ship no values: the sender reads each key when it sends it, so
//! a replica converges to the primary's latest state whatever order the
//! workers queued their keys in, and a full copy followed by the queue
//! needs no snapshot (`link`). Writes that arrive on a peer connection
//! (`replica_link`, a follow link) are applied and not queued, so a ring
//! A→B→C→A does not loop.
//!
//! Every link starts with a handshake that proves both ends: with a
//! `--replication-secret`, a Noise handshake with the secret as its
//! pre-shared key (`auth`, `osmium_protocol::replication_link`), after
//! which every byte of the link on plain TCP is a Noise frame, and under
//! `-Z` the TLS session carries it, the handshake bound to the session;
//! under `-Z` without a secret, the certificates (`-o replication_peers`,
//! `-o replication_ca`). Without `-Z` the secret is required. What each
//! kind of connection may run is `rights`. See docs/replication.md ("How
//! it works") and docs/SECURITY.md.
//!
//! **Sync mode's flow control never wedges** (the invariant: no
//! connection waits for a reply that needs its own unread input, however
//! much its client pipelines). A held connection (`transport::worker`,
//! `repl_held`) waits for exactly one thing: the MN of each up target
//! covering writes it already ran, whose replies are already composed.
//! That MN needs nothing of the held connection, nor of any worker:
//!
//! - the target applies the writes on a peer connection, whose writes are
//!   never queued (`WorkerCtx::replicate_key`), so it is never held itself;
//!   its worker only ever yields it, and a yield still runs it;
//! - each link's MN are read by the link's own ack thread (`link`), which
//!   reads whatever workers do; it wakes them, it never waits for them;
//! - the sender waits only for the target (the copy-ahead bound waits for
//!   MN, the socket write for the target's peer connection), never for a
//!   worker: a write queues a key under the queue's mutex and goes on;
//! - a link that makes no progress is down within `ACK_TIMEOUT`, and a
//!   down link covers every wait (`Link::covers`);
//! - the one lock a peer connection's write may wait for is a key stripe
//!   of `fresh_writes`, held by another thread only for one store
//!   operation, during which it waits for nothing.
//!
//! So every hold ends. When it does, the worker sends the held replies
//! before it runs another request of that connection (what it holds is
//! bounded by one run: `-R` requests or the output limits) and reads the
//! socket again: a readable event that came during the hold clears
//! `drained`, so data the client sent meanwhile is read without another
//! edge. The one reply that waits for the connection's own input is
//! memcached's: replies are not written while a data block is incomplete
//! (`Session::holds_output`), and that block is the client's to finish;
//! it is read as soon as it arrives, held or not.
//!
//! Who is a peer, on the accepting end:
//!
//! ```text
//!                      handshake (secret)   client certificate named by
//!                                           replication_peers / replication_ca
//!   no -Z, secret          required                 —
//!   -Z, secret             required           required when either is set
//!   -Z, no secret              —                   required
//!   no secret, no names    nobody is a peer (the private commands are unknown)
//! ```

pub(crate) mod auth;
mod encode;
pub(crate) mod fresh_writes;
pub(crate) mod held;
mod link;
mod pull;
mod queue;
pub(crate) mod rights;
pub(crate) mod stream;
pub(crate) mod targets;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use mio::Waker;
use osmium_store::Store;

use crate::compose::stat_rows::StatRows;
use crate::settings::{Settings, MAX_REPLICA_TARGETS};
use crate::tls_context::TlsContext;
use auth::Secret;
use fresh_writes::FreshWrites;
use held::HeldWaits;
use link::Link;
use osmium_protocol::replication_link::{self, Role};
use stream::LinkStream;

/// The most follow links served at once.
const FEED_SLOTS: usize = 4;

/// What a connection is to replication (`WorkerCtx::peer`; what each
/// may run: `rights`): a client.
pub(crate) const PEER_NONE: u8 = 0;
/// A target link of another server (`replica_link`).
pub(crate) const PEER_LINK: u8 = 1;
/// osmium-proxy's peer connection (handshake role `proxy`).
pub(crate) const PEER_PROXY: u8 = 2;
/// A follower before its `replica_follow` (handshake role `follow`).
pub(crate) const PEER_FOLLOWER: u8 = 3;
/// This server's follow link to target `i` is `PEER_FOLLOW + i`.
pub(crate) const PEER_FOLLOW: u8 = 4;

/// A peer connection's full copy coming in (`WorkerCtx::copy`): it began
/// (`replica_copy on`) and has not ended (`replica_synced`, or the
/// connection closing) ...
pub(crate) const COPY_OPEN: u8 = 1;
/// ... and the `ms`/`md` it sends now are the copy's items, not writes
/// (`replica_copy on`, until `replica_copy off`): see `fresh_writes`.
pub(crate) const COPY_ITEMS: u8 = 2;

/// Link slots for targets: twice the most targets, so that the links of
/// targets a live change removed can finish closing while the new ones
/// start (`targets`).
pub(crate) const TARGET_SLOTS: usize = 2 * MAX_REPLICA_TARGETS;
// `Replication::mask` has a bit per slot.
const _: () = assert!(TARGET_SLOTS <= 8);

/// The sequence numbers a sync-mode write waits for, per target slot (0:
/// none).
pub(crate) type Wait = [u64; TARGET_SLOTS];

/// Hands a pulled connection to a worker as a peer (`PEER_FOLLOW + i`).
pub(crate) type Handoff = Box<dyn Fn(LinkStream, u8) -> bool + Send + Sync>;

pub(crate) struct Replication {
    /// `--replication sync` (changed live by a reload).
    sync: AtomicBool,
    /// Started with `--replicate-to`: the workers tell it of writes.
    on: bool,
    /// `TARGET_SLOTS` target links; those in `mask` are the current
    /// targets.
    targets: Vec<Arc<Link>>,
    /// Bit i: slot i is a current target (one load per write).
    mask: AtomicU8,
    /// The current targets' slots, in `--replicate-to` order (`stats`
    /// numbers them so); held while the targets change.
    order: Mutex<Vec<usize>>,
    feeds: Vec<Arc<Link>>,
    /// `--replica-follow-seconds`, asked of the targets when pulling.
    follow: u64,
    store: Arc<Store>,
    /// How this server names itself in `replica_link`.
    name: String,
    wakers: OnceLock<Vec<Arc<Waker>>>,
    /// What each worker's held replies wait for (sync mode), so that an
    /// MN wakes only the workers it may release.
    held: OnceLock<HeldWaits>,
    handoff: OnceLock<Handoff>,
    stop: AtomicBool,
    verbose: AtomicU8,
    /// `--replication-secret` (required with `--replicate-to` unless `-Z`
    /// names the peers by certificate): the Noise handshake's PSK.
    secret: Option<Secret>,
    /// `-Z`: every link is TLS, the target's certificate verified.
    tls: Option<Arc<TlsContext>>,
    /// Failed handshakes (`replica_auth_failures`): a peer's refused here
    /// (wrong secret, reflected, a certificate not named), a server of
    /// ours that failed to prove itself, or a link frame that failed to
    /// authenticate.
    auth_failures: AtomicU64,
    /// Commands refused on replication connections (`rights`).
    link_refusals: AtomicU64,
    /// Outgoing TLS handshakes that failed, for any reason
    /// (`replica_ssl_handshake_errors`).
    ssl_failures: AtomicU64,
    /// Told when a link goes up or down (the log watchers' `sysevents`).
    link_hook: OnceLock<LinkHook>,
    /// Told when the targets change.
    targets_hook: OnceLock<targets::TargetHook>,
    /// The writes a full copy coming in must not replace.
    fresh: FreshWrites,
}

/// A link went up or down: (`target` or `feed`, the peer's address, up,
/// why it went down).
pub(crate) type LinkHook = Box<dyn Fn(&str, &str, bool, Option<&str>) + Send + Sync>;

impl Replication {
    /// Sets what is told when a link goes up or down (once).
    pub(crate) fn on_link_change(&self, hook: LinkHook) {
        let _ = self.link_hook.set(hook);
    }

    /// A link went up, or down (with why).
    pub(crate) fn link_changed(&self, role: &str, peer: &str, down: Option<&str>) {
        if let Some(h) = self.link_hook.get() {
            h(role, peer, down.is_none(), down);
        }
    }

    /// Without `--replicate-to` it has no targets and is not told of
    /// writes (`is_on`): it only serves follow links a full copy (with a
    /// secret to check them by).
    pub(crate) fn new(
        settings: &Settings,
        store: Arc<Store>,
        secret: Option<Secret>,
        tls: Option<Arc<TlsContext>>,
    ) -> Arc<Replication> {
        let targets: Vec<Arc<Link>> = (0..TARGET_SLOTS).map(|_| Arc::default()).collect();
        let n = settings.replicate_to.len().min(MAX_REPLICA_TARGETS);
        for (l, a) in targets.iter().zip(&settings.replicate_to[..n]) {
            *l.addr.lock().unwrap_or_else(|e| e.into_inner()) = a.clone();
            l.active.store(true, Relaxed);
        }
        Arc::new(Replication {
            sync: AtomicBool::new(settings.replication_sync),
            on: n > 0,
            targets,
            mask: AtomicU8::new(((1u16 << n) - 1) as u8),
            order: Mutex::new((0..n).collect()),
            feeds: (0..FEED_SLOTS).map(|_| Arc::default()).collect(),
            follow: settings.replica_follow_seconds,
            store,
            name: format!("osmium-{}-{}", std::process::id(), settings.port),
            wakers: OnceLock::new(),
            held: OnceLock::new(),
            handoff: OnceLock::new(),
            stop: AtomicBool::new(false),
            verbose: AtomicU8::new(settings.verbose.min(2) as u8),
            secret,
            tls,
            auth_failures: AtomicU64::new(0),
            link_refusals: AtomicU64::new(0),
            ssl_failures: AtomicU64::new(0),
            link_hook: OnceLock::new(),
            targets_hook: OnceLock::new(),
            // Recording from the start: a client may write before the
            // catch-up pull connects.
            fresh: FreshWrites::new(n > 0),
        })
    }

    /// The writes a full copy coming in must not replace.
    #[inline]
    pub(crate) fn fresh_writes(&self) -> &FreshWrites {
        &self.fresh
    }

    /// A peer connection began sending a full copy (`replica_copy on`).
    /// Only a server with targets records its writes against it (without,
    /// nothing on the request path changes).
    pub(crate) fn copy_started(&self) {
        if self.is_on() {
            self.fresh.copy_opened();
        }
    }

    /// A copy that `copy_started` ended (`replica_synced`, or its
    /// connection closed).
    pub(crate) fn copy_ended(&self) {
        if self.is_on() {
            self.fresh.copy_closed();
        }
    }

    /// Whether every current target's catch-up pull delivered its copy.
    fn caught_up(&self) -> bool {
        let order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        order.iter().all(|&i| self.targets[i].synced.load(Relaxed))
    }

    /// Tells `fresh_writes` whether a catch-up pull is still to deliver
    /// (after a target synced, or the targets changed).
    fn pulls_changed(&self) {
        self.fresh.set_pulls_pending(!self.caught_up());
    }

    /// The shared secret peers prove they hold (`auth`).
    pub(crate) fn secret(&self) -> Option<&Secret> {
        self.secret.as_ref()
    }

    /// Under `-Z`, whether `replication_peers` / `replication_ca` name
    /// the peers (a certificate they do not name is no peer's).
    pub(crate) fn names_required(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.names_peers())
    }

    /// Whether this server may have peer connections at all (the
    /// workers then keep each connection's standing).
    pub(crate) fn has_peers(&self) -> bool {
        self.secret.is_some() || self.names_required() || self.is_on()
    }

    /// A handshake or a link's frame failed (`what` says how and with
    /// whom): counted, and logged while there are few (the first ten,
    /// then at every power of two), so that a flood of bad handshakes
    /// cannot flood stderr.
    pub(crate) fn auth_failed(&self, what: &str) {
        let n = self.auth_failures.fetch_add(1, Relaxed) + 1;
        if n <= 10 || n.is_power_of_two() {
            tracing::warn!("[replication] authentication failed: {what} ({n} so far)");
        }
    }

    /// A replication connection of kind `peer` sent `line`, which its
    /// role does not carry (`rights`): logged while there are few, as
    /// failed handshakes are.
    pub(crate) fn link_refused(&self, peer: u8, line: &str) {
        let n = self.link_refusals.fetch_add(1, Relaxed) + 1;
        if n <= 10 || n.is_power_of_two() {
            let kind = rights::kind_name(peer);
            tracing::warn!(
                "[replication] a {kind} sent {:?}, which it does not carry: closed ({n} so far)",
                line.trim_end()
            );
        }
    }

    /// Whether the workers tell it of writes (`--replicate-to` given at
    /// start; a reload may change the targets, to none even, but not turn
    /// replication on).
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// `--replication sync`.
    pub(crate) fn is_sync(&self) -> bool {
        self.sync.load(Relaxed)
    }

    /// Starts the target senders and the catch-up pulls; `wakers` wake
    /// the workers (sync-mode acknowledgements), `handoff` gives a pulled
    /// connection to one.
    pub(crate) fn start(self: &Arc<Self>, wakers: Vec<Arc<Waker>>, handoff: Handoff) {
        let _ = self.held.set(HeldWaits::new(wakers.len()));
        let _ = self.wakers.set(wakers);
        let _ = self.handoff.set(handoff);
        let order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        for &i in order.iter() {
            self.spawn_target(i);
            self.pull(i);
        }
    }

    /// Starts the sender of target slot `i` (its `addr` set, `active`).
    fn spawn_target(self: &Arc<Self>, i: usize) {
        let link = &self.targets[i];
        let addr = link.addr.lock().unwrap_or_else(|e| e.into_inner()).clone();
        link.running.store(true, Relaxed);
        let (repl, link2) = (self.clone(), link.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("osmium-repl-{i}"))
            .spawn(move || {
                link::run_target(repl, link2.clone(), addr);
                link2.running.store(false, Relaxed);
            });
        if spawned.is_err() {
            link.running.store(false, Relaxed);
        }
    }

    /// Stops reconnecting (the server is stopping).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Relaxed);
    }

    fn stopping(&self) -> bool {
        self.stop.load(Relaxed)
    }

    fn verbose(&self) -> bool {
        self.verbose.load(Relaxed) > 0
    }

    /// A client wrote `key` (after the store applied it): queue it on
    /// every link; the sequence numbers to wait for go to `wait` in sync
    /// mode.
    #[inline]
    pub(crate) fn written_key(&self, key: &[u8], wait: &mut Wait) -> bool {
        if key.is_empty() || key.len() > 255 {
            return false;
        }
        self.written(wait, |q| q.push_key(key))
    }

    /// A client's flush_all.
    pub(crate) fn written_flush(&self, delay: i64, wait: &mut Wait) -> bool {
        self.written(wait, |q| q.push_flush(delay))
    }

    #[inline]
    fn written(&self, wait: &mut Wait, push: impl Fn(&queue::DirtyQueue) -> Option<u64>) -> bool {
        let mut waits = false;
        let mut mask = self.mask.load(Relaxed);
        let sync = mask != 0 && self.sync.load(Relaxed);
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            if let Some(seq) = push(&self.targets[i].queue) {
                if sync {
                    wait[i] = seq;
                    waits = true;
                }
            }
        }
        for f in &self.feeds {
            if f.active.load(Relaxed) {
                push(&f.queue);
            }
        }
        waits
    }

    /// Whether every target covers a write that waits for `wait` (in
    /// async mode, every write: a reload turned sync mode off).
    pub(crate) fn acknowledged(&self, wait: &Wait) -> bool {
        !self.is_sync() || self.targets.iter().zip(wait).all(|(t, &seq)| t.covers(seq))
    }

    fn wake_workers(&self) {
        if !self.is_sync() {
            return;
        }
        self.wake_all();
    }

    /// What the workers' held replies wait for (once started).
    #[inline]
    pub(crate) fn held_waits(&self) -> Option<&HeldWaits> {
        self.held.get()
    }

    /// The target slot of `link` (None: a feed, whose MN no write waits
    /// for).
    fn target_slot(&self, link: &Link) -> Option<usize> {
        self.targets.iter().position(|t| std::ptr::eq(&**t, link))
    }

    /// Target slot `slot` acknowledged everything up to `acked`: wakes
    /// the workers holding replies that may wait for it (`held`).
    fn acknowledged_by(&self, slot: Option<usize>, acked: u64) {
        if !self.is_sync() {
            return;
        }
        let (Some(slot), Some(held), Some(wakers)) = (slot, self.held.get(), self.wakers.get())
        else {
            return;
        };
        HeldWaits::fence();
        for (worker, w) in wakers.iter().enumerate() {
            if held.may_release(worker, slot, acked) {
                let _ = w.wake();
            }
        }
    }

    /// A worker's turn queued writes: wakes the senders sleeping on them
    /// (a push does not, so that a batch holds the turn's writes).
    pub(crate) fn wake_senders(&self) {
        let mut mask = self.mask.load(Relaxed);
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            self.targets[i].queue.wake_sender();
        }
        for f in &self.feeds {
            if f.active.load(Relaxed) {
                f.queue.wake_sender();
            }
        }
    }

    /// Wakes every worker (its held replies are checked again).
    fn wake_all(&self) {
        if let Some(w) = self.wakers.get() {
            for w in w {
                let _ = w.wake();
            }
        }
    }

    /// A `replica_follow` connection, taken from its worker: serve it as a
    /// feed (full copy, `replica_synced`, then this server's writes).
    /// False when every feed slot is taken (the connection is dropped).
    pub(crate) fn start_feed(self: &Arc<Self>, stream: LinkStream, follow: u64) -> bool {
        let Some(slot) = self.feeds.iter().find(|f| {
            f.active
                .compare_exchange(false, true, Relaxed, Relaxed)
                .is_ok()
        }) else {
            return false;
        };
        let _ = stream.tcp().set_nonblocking(false);
        // Without targets no write is queued: the copy is all it gets.
        let follow = if self.is_on() {
            Duration::from_secs(follow)
        } else {
            Duration::ZERO
        };
        let (repl, link) = (self.clone(), slot.clone());
        std::thread::Builder::new()
            .name("osmium-repl-feed".into())
            .spawn(move || link::run_feed(repl, link, stream, follow))
            .is_ok()
    }

    /// The follow link of target `i` delivered its full copy.
    pub(crate) fn synced_from(&self, peer: u8) {
        if let Some(t) = peer
            .checked_sub(PEER_FOLLOW)
            .and_then(|i| self.targets.get(i as usize))
        {
            if !t.synced.swap(true, Relaxed) {
                if self.verbose() {
                    tracing::info!("[replication] caught up from target {}", peer - PEER_FOLLOW);
                }
                self.pulls_changed();
            }
        }
    }

    /// A follow link closed: pull again if it had not synced.
    pub(crate) fn follow_closed(self: &Arc<Self>, peer: u8) {
        if let Some(i) = peer.checked_sub(PEER_FOLLOW).map(usize::from) {
            if self.targets.get(i).is_some_and(|t| !t.synced.load(Relaxed)) && !self.stopping() {
                self.pull(i);
            }
        }
    }

    fn pull(self: &Arc<Self>, i: usize) {
        let repl = self.clone();
        let _ = std::thread::Builder::new()
            .name(format!("osmium-pull-{i}"))
            .spawn(move || pull::run(&repl, i));
    }

    /// A connection to `addr` that proved it reaches a server of ours,
    /// for `role`: with `-Z`, TLS whose handshake verified the server's
    /// certificate (and, with `replication_peers`, that it names a peer);
    /// with a secret, then the link handshake (`replica_hello`), bound to
    /// the TLS session if there is one, after which plain TCP carries
    /// Noise frames. A failed proof is counted and logged; the caller
    /// treats any error as a failed connection.
    fn connect(&self, addr: &str, role: Role) -> std::io::Result<LinkStream> {
        let tcp = link::connect_to(addr)?;
        let _ = tcp.set_nodelay(true);
        tcp.set_read_timeout(Some(link::ACK_TIMEOUT * 2))?;
        tcp.set_write_timeout(Some(link::ACK_TIMEOUT * 2))?;
        let mut stream = match &self.tls {
            None => LinkStream::Plain(tcp),
            Some(tls) => {
                let Some(config) = tls.client_config() else {
                    return Err(std::io::Error::other("-Z without ssl_ca_cert"));
                };
                let name = stream::server_name(addr)?;
                let s =
                    stream::tls_client(tcp, config, name).map_err(|e| self.tls_failed(addr, e))?;
                if let LinkStream::Tls(_, conn) = &s {
                    if !tls.names_target(conn) {
                        let why = "its TLS certificate is not one replication_peers names";
                        self.auth_failed(&format!("{addr}: {why}"));
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::PermissionDenied,
                            why,
                        ));
                    }
                }
                s
            }
        };
        if let Some(secret) = self.secret() {
            let binding = match &stream {
                LinkStream::Tls(_, conn) => Some(stream::tls_binding(conn)?),
                _ => None,
            };
            let binding = binding.as_ref().map(|b| &b[..]);
            match replication_link::connect_handshake(&mut stream, secret, role, binding) {
                Ok(transport) => stream = stream.after_handshake(transport),
                Err(e) => {
                    if e.is_auth_failure() {
                        self.auth_failed(&format!("{addr}: {e}"));
                    }
                    let e = std::io::Error::from(e);
                    return Err(self.tls_failed(addr, e));
                }
            }
        }
        stream.tcp().set_read_timeout(None)?;
        Ok(stream)
    }

    /// Counts an error of a link's TLS session (`e`, returned): a failed
    /// handshake in `replica_ssl_handshake_errors`, and, when it says a
    /// certificate was refused (the server's here, or this server's
    /// there), in `replica_auth_failures` too, logged.
    fn tls_failed(&self, addr: &str, e: std::io::Error) -> std::io::Error {
        let Some(err) = stream::tls_error(&e) else {
            return e;
        };
        self.ssl_failures.fetch_add(1, Relaxed);
        let refused = match err {
            rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
                Some("its TLS certificate did not verify against ssl_ca_cert")
            }
            rustls::Error::AlertReceived(_) => Some("it refused this server's TLS certificate"),
            _ => None,
        };
        if let Some(what) = refused {
            self.auth_failed(&format!("{addr}: {what} ({err})"));
            return std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{what} ({err})"),
            );
        }
        e
    }

    /// `replication_mode`, `replication_catchup`, `replica_copy_skipped`,
    /// `replica_N_*`, `replica_follow_links`, `replica_auth_failures`.
    /// Without `--replicate-to` only the last two, and only with a secret
    /// or peers named by certificate (which let the server serve follow
    /// links): else `stats` stays memcached's. A proxy reads a missing
    /// `replication_catchup` as caught up.
    pub(crate) fn stats(&self, out: &mut StatRows) {
        if !self.is_on() {
            if self.secret.is_some() || self.names_required() {
                self.link_stats(out);
            }
            return;
        }
        let mode = if self.is_sync() { "sync" } else { "async" };
        out.push("replication_mode", mode);
        let order = self.order.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let done = order.iter().all(|&i| self.targets[i].synced.load(Relaxed));
        let catchup = if done { "done" } else { "pulling" };
        out.push("replication_catchup", catchup);
        out.push("replica_copy_skipped", self.fresh.skipped());
        for (i, t) in order.iter().map(|&slot| &self.targets[slot]).enumerate() {
            let (backlog, seq) = t.queue.backlog();
            let up = t.up.load(Relaxed);
            let acked = t.acked.load(Relaxed);
            let addr = t.addr.lock().unwrap_or_else(|e| e.into_inner());
            out.push(format_args!("replica_{i}_addr"), &*addr);
            drop(addr);
            out.push(
                format_args!("replica_{i}_link"),
                if up { "up" } else { "down" },
            );
            out.push(format_args!("replica_{i}_backlog"), backlog);
            out.push(
                format_args!("replica_{i}_seq_lag"),
                if up { seq.saturating_sub(acked) } else { 0 },
            );
            out.push(format_args!("replica_{i}_lag_us"), t.lag_us.load(Relaxed));
            out.push(format_args!("replica_{i}_sent"), t.sent.load(Relaxed));
            out.push(format_args!("replica_{i}_acked"), acked);
            out.push(format_args!("replica_{i}_errors"), t.errors.load(Relaxed));
            out.push(
                format_args!("replica_{i}_full_copies"),
                t.full_copies.load(Relaxed),
            );
            out.push(
                format_args!("replica_{i}_reconnects"),
                t.reconnects.load(Relaxed),
            );
        }
        self.link_stats(out);
    }

    /// `replica_follow_links`, `replica_auth_failures`, and with `-Z`
    /// `replica_ssl_handshake_errors`.
    fn link_stats(&self, out: &mut StatRows) {
        let feeds = self.feeds.iter().filter(|f| f.active.load(Relaxed)).count();
        out.push("replica_follow_links", feeds);
        out.push("replica_auth_failures", self.auth_failures.load(Relaxed));
        if self.tls.is_some() {
            out.push(
                "replica_ssl_handshake_errors",
                self.ssl_failures.load(Relaxed),
            );
        }
    }
}
