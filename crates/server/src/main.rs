//! The `osmium` binary: parses memcached's command line, builds the store,
//! starts the worker threads and the maintenance thread, and runs the
//! acceptor on the main thread until SIGTERM/SIGINT (or `shutdown`).
//!
//! Transports: TCP on every `-l` address (unless `-p 0`), UDP on the same
//! addresses with `-U` (each worker gets its own clone of every UDP socket,
//! or one worker per socket with several `-l`, as memcached), or with `-s`
//! a unix-domain socket instead of both.
//!
//! Threads:
//! * main: listening sockets (mio), accepts and deals connections to the
//!   workers round-robin, enforces `-c`;
//! * `osmium-worker-N` (`-t`): one event loop each (see `worker`, `udp`);
//! * `osmium-maint`: ticks the clock every 100 ms; every 500 ms backs full
//!   regions of item memory with huge pages, frees wholly expired segments
//!   and walks a few others for expired items. Those walks yield the CPU
//!   every few hundred items (`Store::reclaim_step`), so that the
//!   maintainer, sharing a core with a worker or a client, never keeps it
//!   waiting for more than ~50 µs.

mod auth;
mod binary;
mod direct;
mod meta;
mod prefix_stats;
mod session;
mod settings;
mod stats;
mod text;
mod udp;
mod worker;

use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mio::event::Source;
use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Registry, Token, Waker};

use osmium_store::{Store, StoreConfig};
use settings::{Action, Settings};
use stats::{GlobalStats, StatsContext, ThreadStats};
use worker::{Shared, Stream, WorkerHandle};

const WAKE: Token = Token(usize::MAX);

fn main() {
    let action = match settings::parse(std::env::args_os()) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{}", msg.trim_end());
            std::process::exit(64); // EX_USAGE, as memcached
        }
    };
    let settings = match action {
        Action::Print(text) => {
            print!("{text}");
            return;
        }
        Action::Run(s) => *s,
    };
    let auth = match auth::AuthConfig::load(&settings) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(1); // EXIT_FAILURE, as memcached
        }
    };
    if let Err(e) = run(settings, auth) {
        eprintln!("failed to start: {e}");
        std::process::exit(71); // EX_OSERR
    }
}

/// A listening socket of the acceptor.
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => l.accept().map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            Listener::Unix(l) => l.accept().map(|(s, _)| Stream::Unix(s)),
        }
    }

    fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Listener::Unix(l) => l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                .unwrap_or_default(),
        }
    }
}

impl Source for Listener {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.register(r, t, i),
            Listener::Unix(l) => l.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.reregister(r, t, i),
            Listener::Unix(l) => l.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.deregister(r),
            Listener::Unix(l) => l.deregister(r),
        }
    }
}

fn resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = (host, port).to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err(io::Error::other(format!("cannot resolve {host}")));
    }
    Ok(addrs)
}

/// TCP listeners on every `-l` address (none with `-p 0` or `-s`).
fn bind_tcp(settings: &Settings) -> io::Result<Vec<Listener>> {
    let mut listeners = Vec::new();
    if settings.port == 0 || settings.unix_socket.is_some() {
        return Ok(listeners);
    }
    for l in &settings.listen {
        for addr in resolve(&l.host, l.port)? {
            let domain = socket2::Domain::for_address(addr);
            let sock = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
            sock.set_reuse_address(true)?;
            if addr.is_ipv6() {
                sock.set_only_v6(true)?;
            }
            sock.bind(&addr.into())?;
            sock.listen(settings.backlog)?;
            sock.set_nonblocking(true)?;
            listeners.push(Listener::Tcp(TcpListener::from_std(sock.into())));
        }
    }
    Ok(listeners)
}

/// UDP sockets for `-U`, on the same addresses as TCP (a `-l host:port`
/// port applies to both, as in memcached).
fn bind_udp(settings: &Settings) -> io::Result<Vec<std::net::UdpSocket>> {
    let mut sockets = Vec::new();
    if settings.udp_port == 0 || settings.unix_socket.is_some() {
        return Ok(sockets);
    }
    for l in &settings.listen {
        let port = if l.explicit_port {
            l.port
        } else {
            settings.udp_port
        };
        for addr in resolve(&l.host, port)? {
            let domain = socket2::Domain::for_address(addr);
            let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, None)?;
            sock.set_reuse_address(true)?;
            if addr.is_ipv6() {
                sock.set_only_v6(true)?;
            }
            // memcached asks for the largest send buffer it can get.
            let _ = sock.set_send_buffer_size(udp::UDP_SEND_BUFFER_SIZE);
            sock.bind(&addr.into())?;
            sock.set_nonblocking(true)?;
            sockets.push(sock.into());
        }
    }
    Ok(sockets)
}

/// The `-s` listener, made as memcached's `server_socket_unix` does: a
/// stale socket file at the path is removed (any other kind of file makes
/// bind fail), and the file is created with the `-a` permission bits.
/// memcached leaves the file behind when it exits, and so does osmium.
fn bind_unix(settings: &Settings) -> io::Result<Option<Listener>> {
    use std::os::unix::fs::FileTypeExt;
    let Some(path) = &settings.unix_socket else {
        return Ok(None);
    };
    let fail = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("failed to listen on UNIX socket: {path}: {e}"),
        )
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    let sock =
        socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).map_err(fail)?;
    let addr = socket2::SockAddr::unix(path).map_err(fail)?;
    // SAFETY: umask only swaps the process's file-creation mask; no other
    // thread exists yet to create files meanwhile.
    let old_mask = unsafe { libc::umask(!(settings.unix_mask & 0o777) as libc::mode_t) };
    let bound = sock.bind(&addr);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old_mask) };
    bound.map_err(fail)?;
    sock.listen(settings.backlog).map_err(fail)?;
    sock.set_nonblocking(true).map_err(fail)?;
    let std_listener: std::os::unix::net::UnixListener = sock.into();
    Ok(Some(Listener::Unix(UnixListener::from_std(std_listener))))
}

/// Which UDP sockets each worker serves: every worker gets a clone of
/// every socket, or with several `-l` interfaces each socket goes to one
/// worker in turn (memcached's num_threads_per_udp).
fn deal_udp_sockets(
    sockets: Vec<std::net::UdpSocket>,
    settings: &Settings,
) -> io::Result<Vec<Vec<std::net::UdpSocket>>> {
    let mut per_worker: Vec<Vec<std::net::UdpSocket>> =
        (0..settings.threads).map(|_| Vec::new()).collect();
    let mut next = 0;
    for socket in sockets {
        for _ in 1..settings.threads_per_udp {
            per_worker[next % settings.threads].push(socket.try_clone()?);
            next += 1;
        }
        per_worker[next % settings.threads].push(socket);
        next += 1;
    }
    Ok(per_worker)
}

fn daemonize(settings: &Settings) -> io::Result<()> {
    // SAFETY: fork before any thread exists; the parent exits at once.
    match unsafe { libc::fork() } {
        -1 => return Err(io::Error::last_os_error()),
        0 => {}
        _ => std::process::exit(0),
    }
    // SAFETY: plain libc calls on our own process and descriptors.
    unsafe {
        if libc::setsid() == -1 {
            return Err(io::Error::last_os_error());
        }
        let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if devnull >= 0 {
            libc::dup2(devnull, 0);
            libc::dup2(devnull, 1);
            libc::dup2(devnull, 2);
            if devnull > 2 {
                libc::close(devnull);
            }
        }
    }
    if let Some(path) = &settings.pidfile {
        std::fs::write(path, format!("{}\n", std::process::id()))?;
    }
    Ok(())
}

fn drop_privileges(user: &str) -> io::Result<()> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Ok(()); // only meaningful when started as root
    }
    let name = std::ffi::CString::new(user).map_err(io::Error::other)?;
    // SAFETY: getpwnam returns a pointer into static storage or null; we
    // read it before any other getpw* call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(io::Error::other(format!(
            "can't find the user {user} to switch to"
        )));
    }
    // SAFETY: pw is non-null and valid until the next getpw* call.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    // SAFETY: plain libc calls.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM)
        {
            return Err(io::Error::last_os_error());
        }
        if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(io::Error::other(format!(
                "failed to assume identity of user {user}"
            )));
        }
    }
    Ok(())
}

fn apply_process_flags(settings: &Settings) {
    if settings.coredumps {
        let lim = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) } != 0 {
            eprintln!("failed to ensure corefile creation");
        }
    }
    if settings.lock_memory {
        // SAFETY: mlockall has no memory-safety preconditions.
        if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
            eprintln!(
                "warning: -k invalid, mlockall() failed: {}",
                io::Error::last_os_error()
            );
        }
    }
}

fn run(settings: Settings, auth: auth::AuthConfig) -> io::Result<()> {
    for w in &settings.warnings {
        eprintln!("{w}");
    }
    // Handle SIGTERM/SIGINT from before the port opens: a client that sees
    // the port may signal at once.
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, term.clone())?;
    }
    // Bind first so that a bad address fails before daemonizing.
    let mut listeners = bind_tcp(&settings)?;
    let udp_sockets = bind_udp(&settings)?;
    if settings.daemon {
        daemonize(&settings)?;
    }
    apply_process_flags(&settings);
    if let Some(user) = &settings.user {
        drop_privileges(user)?;
    }
    // As memcached: the unix socket is made after dropping privileges.
    if let Some(l) = bind_unix(&settings)? {
        listeners.push(l);
    }
    let udp_endpoints = udp_sockets.len() * settings.threads_per_udp;
    let mut udp_per_worker = deal_udp_sockets(udp_sockets, &settings)?.into_iter();

    let store = Arc::new(Store::new(StoreConfig {
        memory_limit: settings.memory_limit,
        item_size_max: settings.item_size_max,
        evictions: settings.evictions,
        use_cas: settings.use_cas,
        write_heads: settings.threads,
    }));
    let thread_stats: Vec<Arc<ThreadStats>> = (0..settings.threads)
        .map(|_| Arc::new(ThreadStats::default()))
        .collect();
    let global = Arc::new(GlobalStats::default());
    // memcached counts its listening sockets and per-worker UDP sockets as
    // connections too.
    global.set_server_conns((listeners.len() + udp_endpoints) as u64);
    let stats_ctx = Arc::new(StatsContext {
        verbosity: std::sync::atomic::AtomicU32::new(settings.verbose),
        settings: settings.clone(),
        store: store.clone(),
        threads: thread_stats.clone(),
        global: global.clone(),
        accepting: AtomicBool::new(true),
        prefix: prefix_stats::PrefixStats::new(settings.prefix_delimiter, settings.detail_enabled),
    });
    let shared = Arc::new(Shared {
        store: store.clone(),
        stats: stats_ctx,
        auth,
        shutdown: AtomicBool::new(false),
        acceptor_waker: std::sync::OnceLock::new(),
    });

    let workers: Vec<WorkerHandle> = thread_stats
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let udp = udp_per_worker.next().unwrap_or_default();
            worker::spawn(i, shared.clone(), st.clone(), udp)
        })
        .collect::<io::Result<_>>()?;

    spawn_maintenance(shared.clone())?;

    let mut poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
    let _ = shared.acceptor_waker.set(waker);
    for (i, l) in listeners.iter_mut().enumerate() {
        poll.registry().register(l, Token(i), Interest::READABLE)?;
    }
    if settings.verbose > 0 {
        for l in &listeners {
            eprintln!("osmium listening on {}", l.describe());
        }
    }

    let mut events = Events::with_capacity(256);
    let mut next_worker = 0;
    loop {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(100))) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if term.load(Ordering::Relaxed) || shared.shutdown.load(Ordering::Relaxed) {
            break;
        }
        for ev in events.iter() {
            if ev.token() == WAKE {
                continue;
            }
            let listener = &listeners[ev.token().0];
            loop {
                match listener.accept() {
                    Ok(stream) => {
                        dispatch(stream, &settings, &global, &workers, &mut next_worker);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // EMFILE and friends: back off briefly.
                        if settings.verbose > 0 {
                            eprintln!("accept failed: {e}");
                        }
                        std::thread::sleep(Duration::from_millis(10));
                        break;
                    }
                }
            }
        }
    }
    // Graceful stop: workers see the flag and return.
    shared.shutdown.store(true, Ordering::SeqCst);
    for w in &workers {
        let _ = w.waker.wake();
    }
    for w in workers {
        let _ = w.thread.join();
    }
    if settings.daemon {
        if let Some(p) = &settings.pidfile {
            let _ = std::fs::remove_file(p);
        }
    }
    Ok(())
}

fn dispatch(
    mut stream: Stream,
    settings: &Settings,
    global: &GlobalStats,
    workers: &[WorkerHandle],
    next: &mut usize,
) {
    let curr = global.curr_connections.load(Ordering::Relaxed) as usize;
    if curr >= settings.max_connections {
        // memcached's maxconns_fast refusal.
        let _ = stream.write(b"ERROR Too many open connections\r\n");
        global.rejected_connections.fetch_add(1, Ordering::Relaxed);
        return;
    }
    global.curr_connections.fetch_add(1, Ordering::Relaxed);
    global.total_connections.fetch_add(1, Ordering::Relaxed);
    global
        .connection_structures
        .fetch_max(curr as u64 + 1, Ordering::Relaxed);
    let w = &workers[*next % workers.len()];
    *next = next.wrapping_add(1);
    if w.sender.send(stream).is_ok() {
        let _ = w.waker.wake();
    } else {
        global.curr_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

fn spawn_maintenance(shared: Arc<Shared>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("osmium-maint".into())
        .spawn(move || {
            let store = &shared.store;
            let crawl = shared.stats.settings.lru_crawler;
            let mut cursor = 0usize;
            let mut ticks = 0u64;
            while !shared.shutdown.load(Ordering::Relaxed) {
                // Wake every 100 ms, and just after each second turns over
                // so that the clock follows it closely, as memcached's timer.
                let nap = store.clock().until_next_second();
                std::thread::sleep(nap.min(Duration::from_millis(100)));
                store.clock().tick();
                ticks += 1;
                if !ticks.is_multiple_of(5) {
                    continue;
                }
                // Back full regions of item memory with huge pages.
                store.collapse_memory(16);
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
        })?;
    Ok(())
}
