//! Starting and stopping the server: [`start`] binds the listeners, builds
//! the store and the shared state, starts the worker threads and the
//! maintenance thread; [`Started::serve`] runs the acceptor on the calling
//! thread until a signal, `shutdown` or a stop request asks it to stop,
//! then stops and joins the threads `start` started (replication's link
//! threads, told to stop, end on their own).
//!
//! Threads:
//! * main (`osmium-acceptor` for an in-process server): the acceptor
//!   (listening sockets, `-c`, dealing connections),
//!   asleep until a connection, a stop request or a signal comes (the
//!   signals' wake-up socket is in its poll; no timer);
//! * `osmium-worker-N` (`-t`): one event loop each (`transport::worker`);
//! * `osmium-clean`: compacts mostly dead segments ahead of the writers'
//!   need (`Store::clean_ahead`), woken when free segments run low (and
//!   once a second at most otherwise);
//! * `osmium-metrics` (`--metrics-addr`): serves `/metrics` (`metrics`);
//! * `osmium-upgrade` (after SIGUSR2): the check of the new binary
//!   (`upgrade`), while the acceptor serves on;
//! * `osmium-maint`: ticks the clock every 100 ms; every 500 ms backs full
//!   regions of item memory with huge pages, frees wholly expired segments,
//!   walks a few others for expired items, and hands freed buffer memory
//!   back to the system. Those walks yield the CPU every few hundred items
//!   (`Store::reclaim_step`), so that the maintainer, sharing a core with a
//!   worker or a client, never keeps it waiting for more than ~50 µs.

use std::io;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use mio::{Events, Interest, Poll, Token, Waker};

use osmium_store::{BackingKind, Restart, Store, StoreConfig};

use crate::auth::AuthConfig;
use crate::context::{Shared, StopRequest};
use crate::daemon;
use crate::process::{self, Host, Signals};
use crate::replication::auth::Secret;
use crate::replication::stream::{LinkStream, NoiseHalves};
use crate::service;
use crate::settings::{ItemMemory, Settings};
use crate::tls_context::TlsContext;
use crate::transport::carried::Carried;
use crate::transport::listen::{self, dispatch};
use crate::transport::worker::{self, WorkerHandle};
use crate::upgrade::check::{Checked, Checking};
use crate::upgrade::quiesced::{listener_rec, udp_rec, Quiesced};

const WAKE: Token = Token(usize::MAX);
/// The acceptor's token for the signals' wake-up socket.
const SIGNALLED: Token = Token(usize::MAX - 1);

/// The background cleaner's nice value (the workers run at 0).
const CLEANER_NICE: i32 = 10;

/// A server that is listening and serving, its acceptor not yet running:
/// what [`start`] made and [`Started::serve`] runs until a stop.
pub(crate) struct Started {
    pub shared: Arc<Shared>,
    host: Host,
    /// The signals' flags (`Host::Process` only).
    signals: Option<Signals>,
    /// Readable when a signal came (registered as `SIGNALLED`).
    signalled: Option<mio::net::UnixStream>,
    listeners: Vec<listen::Listener>,
    /// A duplicate of every UDP socket (the workers serve their own), for
    /// an upgrade to carry.
    udp_sockets: Vec<std::net::UdpSocket>,
    poll: Poll,
    workers: Vec<WorkerHandle>,
    maintenance: std::thread::JoinHandle<()>,
    cleaner: Option<std::thread::JoinHandle<()>>,
    logger: std::thread::JoinHandle<()>,
    metrics: Option<crate::metrics::Endpoint>,
    /// Removed when dropped, at the stop.
    pid_file: Option<daemon::PidFile>,
    /// Where the TCP listeners (TLS ones included) and the UDP sockets
    /// are bound, and the metrics endpoint.
    pub tcp_addrs: Vec<SocketAddr>,
    pub udp_addrs: Vec<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
}

/// Binds the listeners, builds the store and the shared state and starts
/// every thread but the acceptor; the server answers once this returns
/// (and the acceptor runs: [`Started::serve`]). As `host` allows: the
/// signal handlers, `-d`, `-u`, `-k`, `-r` and the service manager's
/// notifications belong to the process. `handed_over`: what a binary
/// upgrade's state hands the start (the caller closes the state's fds).
pub(crate) fn start(
    settings: Settings,
    auth: AuthConfig,
    tls: Option<Arc<TlsContext>>,
    secret: Option<Secret>,
    metrics_token: Option<crate::metrics::Token>,
    host: Host,
    handed_over: HandedOver<'_>,
) -> io::Result<Started> {
    let HandedOver {
        memory: handed_over,
        flash_meta: flash_handed_over,
        sockets: mut carried,
    } = handed_over;
    for w in &settings.warnings {
        tracing::warn!("{w}");
    }
    let mut signals = match host {
        Host::Process => Some(Signals::install()?),
        Host::Embedded => None,
    };
    // Bind first so that a bad address fails before daemonizing.
    let mut listeners = listen::bind_tcp(&settings, tls.as_ref(), &mut carried)?;
    let udp_sockets = listen::bind_udp(&settings, &mut carried)?;
    let metrics_listener = crate::metrics::bind(&settings)?;
    // Started as root, the log file waits for the `-u` user (`main`); a
    // daemon keeps stderr for it.
    let log_later = settings
        .logfile
        .as_deref()
        .filter(|_| process::running_as_root());
    if log_later.is_some() {
        daemon::keep_stderr();
    }
    if settings.daemon {
        if service::manager_is_notified() {
            // The process systemd started must be the one that says
            // READY=1 (NotifyAccess=main), and stay: a daemon's parent
            // exiting would end a Type=notify start.
            tracing::warn!(
                "-d ignored: NOTIFY_SOCKET is set (a Type=notify service): \
                 osmium stays in the foreground"
            );
        } else {
            daemon::daemonize()?;
        }
    }
    if host == Host::Process {
        process::apply_process_flags(&settings);
    }
    if let Some(user) = &settings.user {
        process::drop_privileges(user)?;
    }
    if let Some(path) = log_later {
        crate::log::open_file(path).map_err(io::Error::other)?;
    }
    // As memcached: the unix socket is made after dropping privileges.
    let before_unix = carried.taken();
    if let Some(l) = listen::bind_unix(&settings, &mut carried)? {
        listeners.push(l);
    }
    let unix_carried = carried.taken() > before_unix;
    if carried.taken() > 0 {
        tracing::warn!(
            "upgrade: {} listening sockets carried over (not bound again)",
            carried.taken()
        );
    }
    let tcp_addrs = listeners
        .iter()
        .filter_map(listen::Listener::tcp_addr)
        .collect();
    let udp_addrs = udp_sockets
        .iter()
        .filter_map(|s| s.local_addr().ok())
        .collect();
    let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
    let udp_endpoints = udp_sockets.len() * settings.threads_per_udp;
    let udp_kept = udp_sockets
        .iter()
        .map(std::net::UdpSocket::try_clone)
        .collect::<io::Result<Vec<_>>>()?;
    let mut udp_per_worker = listen::deal_udp_sockets(udp_sockets, &settings)?.into_iter();

    let backing = match (&settings.memory_file, settings.item_memory) {
        (Some(path), _) => BackingKind::File(path.into()),
        (None, ItemMemory::Memfd) => BackingKind::Memfd,
        (None, ItemMemory::Anonymous) => BackingKind::Anonymous,
    };
    let taken_over = handed_over.filter(|_| backing == BackingKind::Memfd);
    let flash_taken_over = flash_handed_over.filter(|_| backing == BackingKind::Memfd);
    if handed_over.is_some() && taken_over.is_none() {
        tracing::warn!(
            "[restart] the item memory handed over is not taken: -o item_memory=anonymous"
        );
    }
    let config = StoreConfig {
        memory_limit: settings.memory_limit,
        item_size_max: settings.item_size_max,
        evictions: settings.evictions,
        use_cas: settings.use_cas,
        write_heads: settings.threads,
        backing,
        recovery_threads: settings.threads,
        flash: settings.flash.clone(),
        clean: settings.clean,
        compression: settings.compression,
        compress_dicts: settings.compress_dicts,
        ..StoreConfig::default()
    };
    let opened = match (taken_over, flash_taken_over) {
        (None, None) => Store::open(config),
        (memory, flash_meta) => Store::open_handed_over(config, memory, flash_meta),
    };
    let (store, restart) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            // A refused start leaves no file behind: the store removed
            // what it made, and the `-s` socket file made above goes too
            // (not one an upgrade carried: the old image it goes back to
            // listens on it).
            if let Some(path) = settings.unix_socket.as_ref().filter(|_| !unix_carried) {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
    };
    report_restart(&restart, settings.memory_file.as_deref());
    let store = Arc::new(store);
    let shared = Arc::new(Shared::new(settings, store, auth, tls, secret));
    let settings = &shared.settings;
    // memcached counts its listening sockets and per-worker UDP sockets as
    // connections too.
    shared
        .global
        .set_server_conns((listeners.len() + udp_endpoints) as u64);
    for l in &listeners {
        let tls = matches!(l, listen::Listener::Tls(..));
        shared.conns.add_listener(l.fd(), l.kind(), tls);
    }

    let workers: Vec<WorkerHandle> = (0..settings.threads)
        .map(|i| {
            let udp = udp_per_worker.next().unwrap_or_default();
            worker::spawn(i, shared.clone(), udp)
        })
        .collect::<io::Result<_>>()?;

    let maintenance = spawn_maintenance(shared.clone())?;
    crate::execute::report_store_events(&shared);
    report_link_events(&shared);
    crate::reload::report_target_changes(&shared);
    let logger = crate::logger::spawn(shared.clone())?;
    let cleaner = spawn_cleaner(shared.clone())?;
    start_replication(&shared.replication, &shared, &workers);
    let metrics = match metrics_listener {
        Some(l) => Some(crate::metrics::spawn(l, shared.clone(), metrics_token)?),
        None => None,
    };

    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    let _ = shared.acceptor_waker.set(waker);
    for (i, l) in listeners.iter_mut().enumerate() {
        poll.registry().register(l, Token(i), Interest::READABLE)?;
    }
    // The acceptor sleeps until a connection, a stop request or a signal
    // comes (no timer: an idle server stays asleep).
    let mut signalled = signals.as_mut().and_then(Signals::take_wake);
    if let Some(s) = signalled.as_mut() {
        poll.registry().register(s, SIGNALLED, Interest::READABLE)?;
    }
    if shared.verbose() > 0 {
        for l in &listeners {
            tracing::info!("osmium listening on {}", l.describe());
        }
    }
    if shared.verbose() > 1 {
        for l in &listeners {
            tracing::debug!(
                "<{} server listening ({})",
                l.fd(),
                shared.settings.binding_protocol
            );
        }
    }

    // As memcached: the pid file once the listeners are bound and the
    // process is the `-u` user; here also only once nothing is left that
    // could fail the start (a failed start leaves none). Removed when
    // it drops, at the stop.
    let pid_file = shared
        .settings
        .pidfile
        .as_deref()
        .and_then(daemon::PidFile::write);
    if host == Host::Process {
        daemon::report_ready();
        service::ready();
    }
    // Last, once nothing can fail the start: a start that fails hands
    // the connections back to the old image unread.
    deal_carried_conns(&shared, &workers, carried.take_conns());
    Ok(Started {
        shared,
        host,
        signals,
        signalled,
        listeners,
        udp_sockets: udp_kept,
        poll,
        workers,
        maintenance,
        cleaner,
        logger,
        metrics,
        pid_file,
        tcp_addrs,
        udp_addrs,
        metrics_addr,
    })
}

/// What a binary upgrade's state hands a start (nothing, for a start
/// from the command line).
#[derive(Default)]
pub(crate) struct HandedOver<'a> {
    /// The memfd of item memory, whose cache the store takes over (it
    /// maps a duplicate).
    pub memory: Option<BorrowedFd<'a>>,
    /// The memfd of the flash tier's metadata, whose tier the store takes
    /// over (it maps a duplicate).
    pub flash_meta: Option<BorrowedFd<'a>>,
    /// The listening sockets, taken instead of binding where their kind
    /// and address match, and the client connections, dealt to the
    /// workers.
    pub sockets: Carried,
}

/// What ended the acceptor's loop.
enum Turn {
    /// A stop was requested.
    Stop(StopRequest),
    /// The new binary passed its check: the upgrade goes on.
    Upgrade(Checked),
}

/// How [`Started::serve`] ended: the server stopped, or a new binary
/// passed its check and the caller runs the upgrade
/// (`upgrade::serve`).
pub(crate) enum Served {
    Stopped(StopRequest),
    Upgrade(Box<Started>, Checked),
}

impl Started {
    /// Runs the acceptor on the calling thread until a signal, `shutdown`
    /// or [`Shared::request_stop`] asks the server to stop; then stops
    /// every thread it started, writes the memory file out (`-e`) and
    /// closes the listeners. Returns how it was asked to stop. A binary
    /// upgrade (SIGUSR2) does not return: the process goes on in the new
    /// image, or, if no image could be run, serves on here.
    pub(crate) fn serve(mut self) -> io::Result<Served> {
        Ok(match self.accept()? {
            Turn::Stop(how) => Served::Stopped(self.stop(how)),
            Turn::Upgrade(checked) => Served::Upgrade(Box::new(self), checked),
        })
    }

    /// The acceptor's loop: connections dealt to the workers, signals
    /// answered, until a stop or an upgrade.
    fn accept(&mut self) -> io::Result<Turn> {
        let Started {
            ref shared,
            ref signals,
            ref mut signalled,
            ref listeners,
            ref mut poll,
            ref workers,
            ..
        } = *self;
        let settings = &shared.settings;
        let mut events = Events::with_capacity(256);
        let mut next_worker = 0;
        // The upgrade whose new binary is being checked (SIGUSR2).
        let mut checking: Option<Checking> = None;
        loop {
            if let Err(e) = poll.poll(&mut events, None) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            // Emptied before the flags are read, so a signal after this read
            // raises a new edge and is seen on the next turn.
            if let Some(s) = signalled.as_mut() {
                while matches!(io::Read::read(s, &mut [0u8; 64]), Ok(n) if n > 0) {}
            }
            if signals.as_ref().is_some_and(Signals::take_hangup) {
                service::reloading();
                if let Some(tls) = &shared.tls {
                    if let Err(e) = tls.refresh() {
                        tracing::warn!("Could not reload TLS certificates on SIGHUP: {e}");
                    }
                }
                crate::reload::config_file(shared);
                service::ready();
            }
            if let Some(how) = signals.as_ref().and_then(Signals::requested) {
                shared.request_stop(how);
            }
            if let Some(how) = shared.stop_requested() {
                return Ok(Turn::Stop(how));
            }
            if signals.as_ref().is_some_and(Signals::take_upgrade) {
                if checking.is_some() {
                    tracing::warn!("upgrade already running: SIGUSR2 ignored");
                } else {
                    // To a service manager an upgrade is a reload, which
                    // READY=1 ends: the new image's once it serves, or
                    // this one's after a refusal. Never STOPPING=1: the
                    // service goes on in this process.
                    service::reloading();
                    checking = Checking::begin(shared);
                    if checking.is_none() {
                        service::ready();
                    }
                }
            }
            if let Some(outcome) = checking.as_ref().and_then(Checking::outcome) {
                checking = None;
                match outcome {
                    Some(checked) => return Ok(Turn::Upgrade(checked)),
                    None => service::ready(),
                }
            }
            for ev in events.iter() {
                if ev.token() == WAKE {
                    continue;
                }
                if ev.token() == SIGNALLED {
                    continue;
                }
                let listener = &listeners[ev.token().0];
                loop {
                    match listener.accept() {
                        Ok(stream) => {
                            dispatch(stream, settings, &shared.global, workers, &mut next_worker);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            // EMFILE and friends: back off briefly.
                            if shared.verbose() > 0 {
                                tracing::info!("accept failed: {e}");
                            }
                            std::thread::sleep(Duration::from_millis(10));
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Stops every thread, writes the memory file out (`-e`), closes the
    /// listeners; `how`, as asked.
    fn stop(self, how: StopRequest) -> StopRequest {
        let Started {
            shared,
            host,
            listeners,
            workers,
            maintenance,
            cleaner,
            logger,
            metrics,
            pid_file,
            ..
        } = self;
        let settings = &shared.settings;
        if host == Host::Process {
            service::stopping();
        }
        match how {
            StopRequest::Graceful => tracing::warn!("Gracefully stopping"),
            StopRequest::Exit | StopRequest::Upgrade if shared.verbose() > 0 => {
                tracing::info!("Exiting normally")
            }
            StopRequest::Exit | StopRequest::Upgrade => {}
        }
        shared.logger.sysevent(format_args!(
            "type=shutdown mode={}",
            match how {
                StopRequest::Graceful => "graceful",
                StopRequest::Exit | StopRequest::Upgrade => "exit",
            }
        ));
        // Nothing moves items while the memory file is written out.
        stop_threads(&shared, workers, maintenance, metrics, cleaner);
        // With -e: every page written out and the file marked whole (a kill
        // would have kept the cache too, but only a stop survives a system
        // crash that follows).
        let items = shared.store.stats().curr_items;
        match shared.store.close() {
            Err(e) => tracing::warn!("[restart] failed to write the memory file out: {e}"),
            Ok(()) if settings.memory_file.is_some() => {
                // The cache the next start takes over (a warm restart).
                shared
                    .logger
                    .sysevent(format_args!("type=warm_restart state=saved items={items}"));
            }
            Ok(()) => {}
        }
        shared.logger.stop();
        let _ = logger.join();
        drop(pid_file);
        drop(listeners);
        how
    }

    /// An upgrade's t1-t3: the server stops serving at a request boundary
    /// and hands over what the new image takes. The threads stop as a
    /// graceful stop stops them, without writing the memory file out or
    /// marking it closed (a worker sees the stop only between two turns
    /// of its loop: no request is half run). With `carry_conns` each
    /// worker hands its client connections over (`worker::carry`: those
    /// it cannot carry it closes); without, all are closed. The listening
    /// sockets (the UDP ones through the acceptor's duplicates) are kept,
    /// their fds forgotten, not closed, and the pid file is left for the
    /// new image. `deadline` is not waited for: no request is running.
    pub(crate) fn quiesce(self, deadline: std::time::Instant, carry_conns: bool) -> Quiesced {
        let _ = deadline;
        let Started {
            shared,
            listeners,
            udp_sockets,
            workers,
            maintenance,
            cleaner,
            logger,
            metrics,
            pid_file,
            ..
        } = self;
        shared
            .carry_conns
            .store(carry_conns, std::sync::atomic::Ordering::SeqCst);
        shared.request_stop(StopRequest::Upgrade);
        let conns = stop_threads(&shared, workers, maintenance, metrics, cleaner);
        shared.logger.stop();
        let _ = logger.join();
        // The new image (or the old one again) writes it anew, and
        // removes it at its stop.
        std::mem::forget(pid_file);
        let listeners = listeners
            .into_iter()
            .map(listener_rec)
            .chain(udp_sockets.into_iter().map(udp_rec))
            .collect();
        Quiesced {
            conns,
            listeners,
            watchers: Vec::new(),
            repl: Vec::new(),
            counters: Vec::new(),
            live: Vec::new(),
            store: shared.store.clone(),
            closed: 0,
        }
    }
}

/// Stops, in this order, replication's threads, the workers (they see
/// the stop request once woken), the maintenance thread, the metrics
/// endpoint and the cleaner: after it nothing but the logger moves items
/// or serves. The connections the workers hand over (an upgrade's stop
/// with `Shared::carry_conns`; none otherwise).
fn stop_threads(
    shared: &Shared,
    workers: Vec<WorkerHandle>,
    maintenance: std::thread::JoinHandle<()>,
    metrics: Option<crate::metrics::Endpoint>,
    cleaner: Option<std::thread::JoinHandle<()>>,
) -> Vec<osmium_upgrade::ConnRec> {
    shared.replication.stop();
    for w in &workers {
        let _ = w.waker.wake();
    }
    let mut conns = Vec::new();
    for w in workers {
        conns.extend(w.thread.join().unwrap_or_default());
    }
    maintenance.thread().unpark();
    let _ = maintenance.join();
    if let Some(m) = metrics {
        m.stop();
    }
    if let Some(c) = cleaner {
        shared.store.wake_cleaner();
        let _ = c.join();
    }
    conns
}

/// Deals the client connections an upgrade carried to the workers,
/// round-robin, as the acceptor deals accepted ones; each runs the input
/// it carried first.
fn deal_carried_conns(
    shared: &Shared,
    workers: &[WorkerHandle],
    conns: Vec<osmium_upgrade::ConnRec>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let (mut dealt, mut lost) = (0, 0);
    for rec in conns {
        let Some(stream) = crate::transport::carried::conn_stream(&rec) else {
            lost += 1;
            continue;
        };
        let w = &workers[dealt % workers.len()];
        shared.global.curr_connections.fetch_add(1, Relaxed);
        let conn = worker::NewConn {
            stream,
            peer: 0,
            carried: Some(Box::new(rec)),
        };
        if w.sender.send(conn).is_ok() {
            let _ = w.waker.wake();
            dealt += 1;
        } else {
            shared.global.curr_connections.fetch_sub(1, Relaxed);
            lost += 1;
        }
    }
    if dealt + lost > 0 {
        tracing::warn!("upgrade: {dealt} client connections carried over, {lost} lost");
    }
}

/// Starts replication's links and pulls; a pulled connection goes to the
/// workers round-robin, as an accepted one.
fn start_replication(
    r: &Arc<crate::replication::Replication>,
    shared: &Arc<Shared>,
    workers: &[WorkerHandle],
) {
    let wakers: Vec<Arc<Waker>> = workers.iter().map(|w| w.waker.clone()).collect();
    let targets: Vec<_> = workers
        .iter()
        .map(|w| (w.sender.clone(), w.waker.clone()))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let shared = shared.clone();
    let handoff = move |stream: LinkStream, peer: u8| -> bool {
        use crate::transport::stream::Stream;
        use std::sync::atomic::Ordering::Relaxed;
        if stream.tcp().set_nonblocking(true).is_err() {
            return false;
        }
        let stream = match stream {
            // A follow link is proven by its handshake (Noise on plain
            // TCP) or its TLS session: never plain.
            LinkStream::Plain(_) => return false,
            // Its keys and what it already received go on in the worker.
            LinkStream::Noise(tcp, halves) => {
                let NoiseHalves { outbound, inbound } = *halves;
                Stream::Noise(Box::new(crate::transport::noise::NoiseConn::new(
                    mio::net::TcpStream::from_std(tcp),
                    outbound,
                    inbound,
                )))
            }
            // The follow link over TLS: its session goes on in the worker.
            LinkStream::Tls(tcp, session) => match (*session, &shared.tls) {
                (rustls::Connection::Client(session), Some(ctx)) => Stream::Tls(Box::new(
                    crate::transport::tls::TlsStream::established_client(
                        mio::net::TcpStream::from_std(tcp),
                        session,
                        ctx,
                    ),
                )),
                _ => return false,
            },
        };
        let stream = worker::NewConn {
            stream,
            peer,
            carried: None,
        };
        let (sender, waker) = &targets[next.fetch_add(1, Relaxed) % targets.len()];
        shared.global.curr_connections.fetch_add(1, Relaxed);
        if sender.send(stream).is_err() {
            shared.global.curr_connections.fetch_sub(1, Relaxed);
            return false;
        }
        let _ = waker.wake();
        true
    };
    r.start(wakers, Box::new(handoff));
}

/// Replication links going up and down, as `sysevents` lines:
/// `type=replication_link role=target|feed peer=<address> state=up|down`
/// (`reason=<why, URI-encoded>` when down).
fn report_link_events(shared: &Arc<Shared>) {
    let weak = Arc::downgrade(shared);
    shared
        .replication
        .on_link_change(Box::new(move |role, peer, up, why| {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            shared.logger.log_other(crate::logger::SYSEVENTS, |b| {
                b.extend_from_slice(b"type=replication_link role=");
                b.extend_from_slice(role.as_bytes());
                b.extend_from_slice(b" peer=");
                crate::logger::uri_encode(peer.as_bytes(), b);
                b.extend_from_slice(if up { b" state=up" } else { b" state=down" });
                if let Some(why) = why {
                    b.extend_from_slice(b" reason=");
                    crate::logger::uri_encode(why.as_bytes(), b);
                }
            });
        }));
}

/// Says what became of a memory file's cache at start (memcached prints
/// its restart lines the same way, on standard error).
/// The `[restart]` lines: why a cache was not taken over, what the flash
/// tier and item memory (the `-e` file, else the memfd a binary upgrade
/// handed over) gave back.
fn report_restart(restart: &Restart, file: Option<&str>) {
    if let Some(note) = &restart.note {
        tracing::warn!("[restart] {note}");
    }
    if let Some(f) = &restart.flash {
        if let Some(note) = &f.note {
            tracing::warn!("[restart] {note}");
        }
        if f.taken_over {
            tracing::warn!(
                "[restart] {} items back on flash (after {})",
                f.items,
                if f.crashed {
                    "a crash"
                } else {
                    "a graceful stop"
                }
            );
        }
    }
    if let Some(r) = &restart.recovered {
        let (source, after) = match (file, r.graceful) {
            (Some(file), true) => (file, "a graceful stop"),
            (Some(file), false) => (file, "a crash"),
            (None, true) => ("the item memory handed over", "a hand-over"),
            (None, false) => (
                "the item memory handed over",
                "an image that took it over and stopped",
            ),
        };
        tracing::warn!(
            "[restart] {} items back from {source} in {:.1} ms ({} segments, after {after}; {} expired or flushed, {} damaged)",
            r.items,
            r.elapsed.as_secs_f64() * 1000.0,
            r.segments,
            r.stale,
            r.damaged,
        );
    }
}

/// Starts the background cleaner (`osmium-clean`), which compacts mostly
/// dead segments ahead of the writers' need (`Store::clean_ahead`), woken
/// when free segments run low; None with `-o no_compact_background`.
fn spawn_cleaner(shared: Arc<Shared>) -> io::Result<Option<std::thread::JoinHandle<()>>> {
    if !shared.settings.clean.background {
        return Ok(None);
    }
    let handle = std::thread::Builder::new()
        .name("osmium-clean".into())
        .spawn(move || {
            // Below the workers: on a machine whose cores they keep busy,
            // a compaction waits for an idle moment (or a writer does it
            // when it must) rather than delay their requests.
            process::lower_this_thread(CLEANER_NICE);
            let store = &shared.store;
            while shared.stop_requested().is_none() {
                if !store.clean_ahead() {
                    // Woken by a writer when free segments run low, and
                    // by the stop; the timeout is only a fallback, long
                    // so that an idle server stays asleep.
                    store.wait_for_cleaning(Duration::from_secs(1));
                }
            }
        })?;
    Ok(Some(handle))
}

/// Starts the maintenance thread (`osmium-maint`); the stop unparks it.
fn spawn_maintenance(shared: Arc<Shared>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("osmium-maint".into())
        .spawn(move || {
            let store = &shared.store;
            let crawl = shared.settings.lru_crawler;
            let mut cursor = 0usize;
            let mut ticks = 0u64;
            while shared.stop_requested().is_none() {
                // Wake every 100 ms, and just after each second turns over
                // so that the clock follows it closely, as memcached's timer.
                // Parked rather than asleep: the stop wakes it at once.
                let nap = store.clock().until_next_second();
                std::thread::park_timeout(nap.min(Duration::from_millis(100)));
                if shared.stop_requested().is_some() {
                    break;
                }
                store.tick_clock();
                if let Some(h) = &shared.hotkeys {
                    h.tick();
                }
                ticks += 1;
                if !ticks.is_multiple_of(5) {
                    continue;
                }
                crate::buffers::trim_memory();
                // Back one full region of item memory with huge pages: the
                // kernel copies the region holding the process's memory
                // map lock, and a worker that faults in memory meanwhile (a
                // SET into a fresh segment) waits for it. Sixteen at a time
                // stalled SETs for milliseconds (p99.9 4-6 ms at depth 16);
                // one every 500 ms costs ~0.1 % of requests a short wait
                // and collapses 1 GiB of items in about four minutes.
                store.collapse_memory(1);
                // Free segments whose items have all expired (from their
                // headers alone); then walk a few sealed segments per second
                // for the expired items of mixed ones, covering the whole
                // cache about once a minute.
                if crawl {
                    store.reclaim_expired_segments();
                    let sealed = store.sealed_segments();
                    let per_step = sealed.div_ceil(120).max(1);
                    for _ in 0..per_step {
                        store.reclaim_step(cursor);
                        cursor = cursor.wrapping_add(1);
                    }
                }
            }
        })
}
