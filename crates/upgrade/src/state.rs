//! The hand-over state ([`State`]) and its records, as the old image
//! writes them into a sealed memfd ([`State::write`]) and the new image
//! reads them ([`State::read`]); [`State::encode`] and [`State::decode`]
//! are the same without the memfd (tests, the fuzz target).
//!
//! | tag | record | |
//! | --- | --- | --- |
//! | 1 | `Origin` | once |
//! | 2 | `CommandLine` | once |
//! | 3 | `Memory` | at most once |
//! | 4 | `FlashMeta` | at most once |
//! | 5 | `OldExe` | once |
//! | 6 | `Listener` | any number |
//! | 7 | `Conn` | any number |
//! | 8 | `Watcher` | any number |
//! | 9 | `ReplQueue` | any number |
//! | 10 | `Counters` | at most once, skippable |
//! | 11 | `Secrets` | at most once, skippable |
//! | 12 | `LiveSettings` | at most once, skippable |
//!
//! A record this build does not know is refused unless its writer marked
//! it skippable; a skippable one is kept in [`State::extra`] and written
//! again as it came (so a build between two others passes it on).

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use crate::tlv::{self, Reader, StateError, Writer, SKIPPABLE};

const ORIGIN: u16 = 1;
const COMMAND_LINE: u16 = 2;
const MEMORY: u16 = 3;
const FLASH_META: u16 = 4;
const OLD_EXE: u16 = 5;
const LISTENER: u16 = 6;
const CONN: u16 = 7;
const WATCHER: u16 = 8;
const REPL_QUEUE: u16 = 9;
const COUNTERS: u16 = 10;
const SECRETS: u16 = 11;
const LIVE_SETTINGS: u16 = 12;

/// Everything the old image hands to the new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// Where the state comes from.
    pub origin: Origin,
    /// The command line the new image parses.
    pub command_line: CommandLine,
    /// Item memory (a memfd, or the `-e` file's fd); None: the cache
    /// starts empty.
    pub memory: Option<MemoryRec>,
    /// The flash tier's metadata in a memfd (with item memory in a
    /// memfd; `FILE.flash` beside a memory file is taken over by its
    /// path); None: the tier starts empty.
    pub flash_meta: Option<MemoryRec>,
    /// An `O_PATH` fd on the old image: the new image execs it to hand
    /// the state back when it cannot take it over.
    pub old_exe: RawFd,
    /// Listening and UDP sockets.
    pub listeners: Vec<ListenerRec>,
    /// Client connections.
    pub conns: Vec<ConnRec>,
    /// `watch` connections.
    pub watchers: Vec<WatcherRec>,
    /// Replication queues.
    pub repl: Vec<ReplQueueRec>,
    /// Counters by their stats row name.
    pub counters: Vec<(String, u64)>,
    /// Files read before root was dropped, by path.
    pub secrets: Vec<(String, Vec<u8>)>,
    /// Settings changed at run time: name, value as a command would say it.
    pub live: Vec<(String, String)>,
    /// Skippable records of other builds, passed on.
    pub extra: Vec<RawRecord>,
}

/// Where the state comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The old image's osmium version.
    pub version: String,
    /// The old image's file: (st_dev, st_ino).
    pub exe: (u64, u64),
    /// The process (the same before and after).
    pub pid: u32,
    /// When the server first started (unix seconds), before any upgrade.
    pub first_start: i64,
    /// Upgrades done since the first start.
    pub upgrades: u64,
    /// Upgrades that failed since the first start.
    pub failures: u64,
    /// Set by a new image that hands the state back: why.
    pub failed: Option<String>,
}

/// The command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// As started (what a SIGHUP re-reads).
    pub argv: Vec<OsString>,
    /// As parsed at start (the new image parses this).
    pub expanded: Vec<OsString>,
    /// A hash of the settings that shape the store, as a cross-check.
    pub store_fingerprint: u64,
}

/// Memory handed over by fd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRec {
    /// The file descriptor, kept across the exec.
    pub fd: RawFd,
    /// The file's path (`-e`); None: a memfd.
    pub path: Option<PathBuf>,
    /// Handed over at rest (no write in flight).
    pub consistent: bool,
}

/// What a listening socket is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerKind {
    /// Plain TCP.
    Tcp,
    /// TLS over TCP.
    Tls {
        /// The TLS mode (the server's numbering).
        mode: u8,
    },
    /// A unix socket.
    Unix {
        /// Its file.
        path: PathBuf,
    },
    /// A UDP socket.
    Udp,
    /// The metrics endpoint.
    Metrics,
    /// An osmium-proxy pool's listener.
    ProxyPool {
        /// The pool's name.
        pool: String,
    },
    /// osmium-proxy's stats port.
    ProxyStats,
}

/// A listening (or UDP) socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerRec {
    /// The file descriptor, kept across the exec.
    pub fd: RawFd,
    /// What it listens for.
    pub kind: ListenerKind,
    /// The local address as bound.
    pub local: String,
}

/// A client connection at a request boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRec {
    /// The file descriptor, kept across the exec.
    pub fd: RawFd,
    /// A unix socket (else TCP).
    pub unix: bool,
    /// The peer's address, for logs and `stats conns`.
    pub peer: String,
    /// Negotiating, text or binary (the server's numbering).
    pub protocol: u8,
    /// Authenticated (SASL or `-Y`).
    pub authenticated: bool,
    /// The SASL exchange's state (the server's numbering).
    pub sasl: u8,
    /// `-Y` login: the pending block's length.
    pub login_pending: Option<u32>,
    /// Bytes of a refused data block still to swallow.
    pub swallow: u64,
    /// Closed once its output is sent.
    pub close_after_write: bool,
    /// Its replication peer role (the server's numbering).
    pub repl_peer: u8,
    /// When it was last active (the server's clock).
    pub last_active: u32,
    /// Read, not yet run (complete requests and a partial one).
    pub input: Vec<u8>,
    /// Composed, not yet sent.
    pub output: Vec<u8>,
    /// osmium-proxy's client state.
    pub proxy: Option<ProxyConnRec>,
}

/// An osmium-proxy client's own state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConnRec {
    /// The pool it connected to.
    pub pool: String,
    /// Speaks the binary protocol.
    pub binary: bool,
    /// Closed once its output is sent.
    pub closing: bool,
    /// Sent `quit`.
    pub quit: bool,
    /// Its peer closed its side.
    pub eof: bool,
}

/// A `watch` connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherRec {
    /// The file descriptor, kept across the exec.
    pub fd: RawFd,
    /// A unix socket (else TCP).
    pub unix: bool,
    /// Its flags.
    pub flags: u16,
}

/// A replication target's keys not yet shipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplQueueRec {
    /// The target, `HOST:PORT`.
    pub target: String,
    /// The keys.
    pub keys: Vec<Vec<u8>>,
}

/// A skippable record of another build, kept as it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// Its tag.
    pub tag: u16,
    /// Its flags.
    pub flags: u16,
    /// Its contents.
    pub bytes: Vec<u8>,
}

impl CommandLine {
    /// The command line as given, `argv`, for the new image to parse
    /// (a configuration file it names is read again there), and the
    /// hash of the settings that shape the store (0 without a store).
    pub fn as_given(argv: &[OsString], store_fingerprint: u64) -> CommandLine {
        CommandLine {
            argv: argv.to_vec(),
            expanded: argv.to_vec(),
            store_fingerprint,
        }
    }
}

impl State {
    /// A state with nothing handed over but its origin, command line and
    /// the old image.
    pub fn new(origin: Origin, command_line: CommandLine, old_exe: RawFd) -> State {
        State {
            origin,
            command_line,
            memory: None,
            flash_meta: None,
            old_exe,
            listeners: Vec::new(),
            conns: Vec::new(),
            watchers: Vec::new(),
            repl: Vec::new(),
            counters: Vec::new(),
            secrets: Vec::new(),
            live: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// Writes the document into a memfd `osmium-upgrade-state`, sealed
    /// against any change, its close-on-exec flag cleared for the exec.
    pub fn write(&self) -> io::Result<OwnedFd> {
        let doc = self.encode();
        // SAFETY: memfd_create takes a NUL-terminated name and flags; the
        // fd it returns is new and ours.
        let fd = unsafe {
            libc::memfd_create(
                c"osmium-upgrade-state".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned to us and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut file = std::fs::File::from(fd);
        io::Write::write_all(&mut file, &doc)?;
        let fd = OwnedFd::from(file);
        let seals =
            libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on an fd we own, with an integer argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        crate::keep_fd(fd.as_raw_fd())?;
        Ok(fd)
    }

    /// Reads and checks the document in `fd` (from its start; the fd's
    /// offset is not used, so it can be read again).
    pub fn read(fd: RawFd) -> Result<State, StateError> {
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat fills the struct it is given.
        if unsafe { libc::fstat(fd, stat.as_mut_ptr()) } != 0 {
            return Err(StateError::NotState);
        }
        // SAFETY: fstat returned 0, so it filled the struct.
        let size = unsafe { stat.assume_init() }.st_size;
        let size = usize::try_from(size).map_err(|_| StateError::NotState)?;
        let mut doc = vec![0u8; size];
        let mut at = 0;
        while at < size {
            // SAFETY: pread writes at most `size - at` bytes into the
            // buffer we own, from `at` on.
            let n = unsafe {
                libc::pread(
                    fd,
                    doc[at..].as_mut_ptr().cast(),
                    size - at,
                    at as libc::off_t,
                )
            };
            match n {
                n if n > 0 => at += n as usize,
                0 => return Err(StateError::Damaged),
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => return Err(StateError::NotState),
            }
        }
        State::decode(&doc)
    }

    /// The document's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        let o = &self.origin;
        w.begin(ORIGIN, 0);
        w.str(&o.version);
        w.u64(o.exe.0);
        w.u64(o.exe.1);
        w.u32(o.pid);
        w.i64(o.first_start);
        w.u64(o.upgrades);
        w.u64(o.failures);
        w.option(o.failed.as_deref(), |w, why| w.str(why));
        w.end();

        let c = &self.command_line;
        w.begin(COMMAND_LINE, 0);
        w.list(&c.argv, |w, a| w.bytes(a.as_bytes()));
        w.list(&c.expanded, |w, a| w.bytes(a.as_bytes()));
        w.u64(c.store_fingerprint);
        w.end();

        for (tag, memory) in [(MEMORY, &self.memory), (FLASH_META, &self.flash_meta)] {
            if let Some(m) = memory {
                w.begin(tag, 0);
                w.i32(m.fd);
                w.option(m.path.as_ref(), |w, p| w.bytes(p.as_os_str().as_bytes()));
                w.bool(m.consistent);
                w.end();
            }
        }

        w.begin(OLD_EXE, 0);
        w.i32(self.old_exe);
        w.end();

        for l in &self.listeners {
            w.begin(LISTENER, 0);
            w.i32(l.fd);
            match &l.kind {
                ListenerKind::Tcp => w.u8(0),
                ListenerKind::Tls { mode } => {
                    w.u8(1);
                    w.u8(*mode);
                }
                ListenerKind::Unix { path } => {
                    w.u8(2);
                    w.bytes(path.as_os_str().as_bytes());
                }
                ListenerKind::Udp => w.u8(3),
                ListenerKind::Metrics => w.u8(4),
                ListenerKind::ProxyPool { pool } => {
                    w.u8(5);
                    w.str(pool);
                }
                ListenerKind::ProxyStats => w.u8(6),
            }
            w.str(&l.local);
            w.end();
        }

        for c in &self.conns {
            w.begin(CONN, 0);
            w.i32(c.fd);
            w.bool(c.unix);
            w.str(&c.peer);
            w.u8(c.protocol);
            w.bool(c.authenticated);
            w.u8(c.sasl);
            w.option(c.login_pending, |w, v| w.u32(v));
            w.u64(c.swallow);
            w.bool(c.close_after_write);
            w.u8(c.repl_peer);
            w.u32(c.last_active);
            w.bytes(&c.input);
            w.bytes(&c.output);
            w.option(c.proxy.as_ref(), |w, p| {
                w.str(&p.pool);
                w.bool(p.binary);
                w.bool(p.closing);
                w.bool(p.quit);
                w.bool(p.eof);
            });
            w.end();
        }

        for x in &self.watchers {
            w.begin(WATCHER, 0);
            w.i32(x.fd);
            w.bool(x.unix);
            w.u16(x.flags);
            w.end();
        }

        for q in &self.repl {
            w.begin(REPL_QUEUE, 0);
            w.str(&q.target);
            w.list(&q.keys, |w, k| w.bytes(k));
            w.end();
        }

        if !self.counters.is_empty() {
            w.begin(COUNTERS, SKIPPABLE);
            w.list(&self.counters, |w, (name, v)| {
                w.str(name);
                w.u64(*v);
            });
            w.end();
        }
        if !self.secrets.is_empty() {
            w.begin(SECRETS, SKIPPABLE);
            w.list(&self.secrets, |w, (path, bytes)| {
                w.str(path);
                w.bytes(bytes);
            });
            w.end();
        }
        if !self.live.is_empty() {
            w.begin(LIVE_SETTINGS, SKIPPABLE);
            w.list(&self.live, |w, (name, value)| {
                w.str(name);
                w.str(value);
            });
            w.end();
        }
        for r in &self.extra {
            w.raw(r.tag, r.flags, &r.bytes);
        }
        tlv::seal(crate::FORMAT, *crate::READS.start(), &w.finish())
    }

    /// Reads a document's bytes: the header, the checksum, then every
    /// record. Never panics, whatever the bytes.
    pub fn decode(doc: &[u8]) -> Result<State, StateError> {
        let body = tlv::open(doc)?;
        let mut origin = None;
        let mut command_line = None;
        let mut old_exe = None;
        let mut state = State::new(placeholder_origin(), placeholder_command_line(), -1);
        let mut seen = [false; 13];
        for record in tlv::records(body) {
            let record = record?;
            let tag = record.tag;
            let mut r = Reader::new(tag, record.bytes);
            let once = matches!(
                tag,
                ORIGIN
                    | COMMAND_LINE
                    | MEMORY
                    | FLASH_META
                    | OLD_EXE
                    | COUNTERS
                    | SECRETS
                    | LIVE_SETTINGS
            );
            if once {
                if seen[tag as usize] {
                    return Err(r.refuse("given twice"));
                }
                seen[tag as usize] = true;
            }
            match tag {
                ORIGIN => origin = Some(read_origin(&mut r)?),
                COMMAND_LINE => {
                    command_line = Some(CommandLine {
                        argv: r.list(|r| Ok(OsString::from_vec(r.bytes()?.to_vec())))?,
                        expanded: r.list(|r| Ok(OsString::from_vec(r.bytes()?.to_vec())))?,
                        store_fingerprint: r.u64()?,
                    })
                }
                MEMORY => state.memory = Some(read_memory(&mut r)?),
                FLASH_META => state.flash_meta = Some(read_memory(&mut r)?),
                OLD_EXE => old_exe = Some(r.fd()?),
                LISTENER => state.listeners.push(read_listener(&mut r)?),
                CONN => state.conns.push(read_conn(&mut r)?),
                WATCHER => state.watchers.push(WatcherRec {
                    fd: r.fd()?,
                    unix: r.bool()?,
                    flags: r.u16()?,
                }),
                REPL_QUEUE => state.repl.push(ReplQueueRec {
                    target: r.string()?,
                    keys: r.list(|r| Ok(r.bytes()?.to_vec()))?,
                }),
                COUNTERS => state.counters = r.list(|r| Ok((r.string()?, r.u64()?)))?,
                SECRETS => state.secrets = r.list(|r| Ok((r.string()?, r.bytes()?.to_vec())))?,
                LIVE_SETTINGS => state.live = r.list(|r| Ok((r.string()?, r.string()?)))?,
                _ if record.flags & tlv::SKIPPABLE != 0 => {
                    state.extra.push(RawRecord {
                        tag,
                        flags: record.flags,
                        bytes: record.bytes.to_vec(),
                    });
                    continue;
                }
                _ => return Err(r.refuse("unknown to this build, and not skippable")),
            }
            r.done()?;
        }
        let missing = |tag: u16, name: &str| StateError::Record {
            tag,
            why: format!("no {name} record"),
        };
        state.origin = origin.ok_or_else(|| missing(ORIGIN, "Origin"))?;
        state.command_line = command_line.ok_or_else(|| missing(COMMAND_LINE, "CommandLine"))?;
        state.old_exe = old_exe.ok_or_else(|| missing(OLD_EXE, "OldExe"))?;
        Ok(state)
    }
}

fn placeholder_origin() -> Origin {
    Origin {
        version: String::new(),
        exe: (0, 0),
        pid: 0,
        first_start: 0,
        upgrades: 0,
        failures: 0,
        failed: None,
    }
}

fn placeholder_command_line() -> CommandLine {
    CommandLine {
        argv: Vec::new(),
        expanded: Vec::new(),
        store_fingerprint: 0,
    }
}

fn read_origin(r: &mut Reader<'_>) -> Result<Origin, StateError> {
    Ok(Origin {
        version: r.string()?,
        exe: (r.u64()?, r.u64()?),
        pid: r.u32()?,
        first_start: r.i64()?,
        upgrades: r.u64()?,
        failures: r.u64()?,
        failed: r.option(|r| r.string())?,
    })
}

fn read_memory(r: &mut Reader<'_>) -> Result<MemoryRec, StateError> {
    Ok(MemoryRec {
        fd: r.fd()?,
        path: r.option(|r| Ok(PathBuf::from(OsString::from_vec(r.bytes()?.to_vec()))))?,
        consistent: r.bool()?,
    })
}

fn read_listener(r: &mut Reader<'_>) -> Result<ListenerRec, StateError> {
    let fd = r.fd()?;
    let kind = match r.u8()? {
        0 => ListenerKind::Tcp,
        1 => ListenerKind::Tls { mode: r.u8()? },
        2 => ListenerKind::Unix {
            path: PathBuf::from(OsString::from_vec(r.bytes()?.to_vec())),
        },
        3 => ListenerKind::Udp,
        4 => ListenerKind::Metrics,
        5 => ListenerKind::ProxyPool { pool: r.string()? },
        6 => ListenerKind::ProxyStats,
        k => return Err(r.refuse(format!("listener kind {k}"))),
    };
    Ok(ListenerRec {
        fd,
        kind,
        local: r.string()?,
    })
}

fn read_conn(r: &mut Reader<'_>) -> Result<ConnRec, StateError> {
    Ok(ConnRec {
        fd: r.fd()?,
        unix: r.bool()?,
        peer: r.string()?,
        protocol: r.u8()?,
        authenticated: r.bool()?,
        sasl: r.u8()?,
        login_pending: r.option(|r| r.u32())?,
        swallow: r.u64()?,
        close_after_write: r.bool()?,
        repl_peer: r.u8()?,
        last_active: r.u32()?,
        input: r.bytes()?.to_vec(),
        output: r.bytes()?.to_vec(),
        proxy: r.option(|r| {
            Ok(ProxyConnRec {
                pool: r.string()?,
                binary: r.bool()?,
                closing: r.bool()?,
                quit: r.bool()?,
                eof: r.bool()?,
            })
        })?,
    })
}

#[cfg(test)]
mod tests;
