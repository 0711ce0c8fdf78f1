//! The migration of one move, on its own thread with its own blocking
//! connections: each old owner lists its keys (`lru_crawler mgdump hash`
//! with osmium's key filter, so only the ranges that left it; memcached
//! refuses the filter and lists all; retried while the server's crawler
//! is busy), the keys whose owner
//! changed are kept (re-checked against both rings), and per key, in
//! pipelined batches:
//!
//! 1. skipped if settled (a client wrote or deleted it: only the old copy
//!    is dropped);
//! 2. `mg k s v f t` on the old owner (a miss: the key expired or was
//!    evicted, it is settled with nothing to copy);
//! 3. `ms k <len> F<f> T<ttl> ME c` (add) on the new owner;
//! 4. the key is settled; if a client settled it first, `md k C<cas> q`
//!    removes the copy unless a client write already replaced it;
//! 5. `md k q` on the old owner, a little later (so a warm read sent just
//!    before the key settled still finds it), so that no stale copy is
//!    left to be found by a later move back (on a server that replicates,
//!    over a replication peer connection, see `drop`).
//!
//! An add refused because the new owner holds a copy the move did not
//! write (left from an earlier placement) replaces it with a cas-checked
//! set instead. The loop's priority copies (a parked request's key) are
//! done between batches and answered with the key's hash, and a wake of
//! the loop. The old owners are listed again until a pass finds no moved
//! key left (a crawler can miss an item that changed LRU during its walk),
//! at most [`PASSES`] times.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use osmium_protocol::client::frame::{frame, Action};
use osmium_protocol::client::{encode, reply};

use super::drop::{self, DropVia};
use super::{key_hash, Progress, Settled};
use crate::config::{Addr, PoolConfig};
use crate::ring::{dump_commands, Ring};
use osmium_placement::filter::UNFILTERED_MGDUMP;

/// Keys per pipelined batch.
const BATCH: usize = 128;
/// How long an old copy is kept after its key settled.
const GRACE: Duration = Duration::from_millis(50);
/// Listings of the old owners at most.
pub const PASSES: usize = 3;
/// How long a busy crawler is waited for.
const BUSY_WAIT: Duration = Duration::from_secs(60);
/// Socket timeouts.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// memcached reads a TTL above this as an absolute Unix time.
const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// What a migration is given.
pub struct Plan {
    pub old: PoolConfig,
    /// Old servers not listed (out of reach), by old ring index.
    pub skip: Vec<bool>,
    pub new: PoolConfig,
    pub settled: Arc<Settled>,
    pub progress: Arc<Progress>,
    /// Keys the loop waits for (parked requests).
    pub priority: Receiver<Vec<u8>>,
    /// The hash of each priority key once copied (or found gone).
    pub copied: Sender<u64>,
    /// Woken after sending on `copied` and when the migration ends.
    pub waker: Option<Arc<mio::Waker>>,
}

/// Starts the migration's thread.
pub fn spawn(plan: Plan) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("migrate-{}", plan.new.name))
        .spawn(move || {
            let progress = plan.progress.clone();
            let waker = plan.waker.clone();
            let mut m = Migration::new(plan);
            m.run();
            progress.done.store(true, Ordering::Release);
            if let Some(w) = waker {
                let _ = w.wake();
            }
        })
}

trait Rw: Read + Write + Send {}
impl<T: Read + Write + Send> Rw for T {}

/// A blocking connection to one server.
struct Conn {
    r: BufReader<Box<dyn Rw>>,
}

impl Conn {
    fn open(addr: &Addr) -> io::Result<Conn> {
        let s: Box<dyn Rw> = match addr {
            Addr::Tcp { host, port } => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                let mut found = None;
                for a in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&a, IO_TIMEOUT) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = found.ok_or(last)?;
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                Box::new(s)
            }
            Addr::Unix(p) => {
                let s = UnixStream::connect(p)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                Box::new(s)
            }
        };
        Ok(Conn {
            r: BufReader::with_capacity(64 << 10, s),
        })
    }

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let w = self.r.get_mut();
        w.write_all(bytes)?;
        w.flush()
    }

    /// The next line, with its line end.
    fn line(&mut self, line: &mut Vec<u8>) -> io::Result<()> {
        line.clear();
        if self.r.read_until(b'\n', line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    fn exact(&mut self, n: usize, out: &mut Vec<u8>) -> io::Result<()> {
        out.resize(n, 0);
        self.r.read_exact(out)
    }

    /// Reads lines up to `MN` (after a batch of quiet commands); how many
    /// other lines (failures) came before it.
    fn until_mn(&mut self) -> io::Result<usize> {
        let mut line = Vec::new();
        let mut others = 0;
        loop {
            self.line(&mut line)?;
            if line.starts_with(b"MN") {
                return Ok(others);
            }
            others += 1;
        }
    }
}

/// A meta command: `<cmd> <key> [<size>] [b] <args>\r\n` (for `ms`, `args`
/// starts with the data size), written by the client-side codec: a key
/// a text line cannot carry goes base64 with the `b` flag.
fn meta(out: &mut Vec<u8>, cmd: &str, key: &[u8], args: &str) {
    let mut args = args.split(' ').filter(|a| !a.is_empty());
    let size = if cmd == "ms" {
        args.next().and_then(|n| n.parse().ok())
    } else {
        None
    };
    let long = key.is_empty() || key.len() > 250;
    let mut m = encode::meta(out, cmd.as_bytes(), key, size, long);
    for a in args {
        m = m.token(a.as_bytes());
    }
    m.end();
}

/// The value of flag `letter` in a meta reply line.
fn flag(line: &[u8], letter: u8) -> Option<i64> {
    std::str::from_utf8(reply::meta_flag(line, letter)?)
        .ok()?
        .trim_end()
        .parse()
        .ok()
}

/// An item read from an old owner.
struct Item {
    flags: u32,
    /// memcached's `t`: seconds left, -1 for never.
    ttl: i64,
    /// The value with its `\r\n`.
    data: Vec<u8>,
}

impl Item {
    /// The `T` to store it with.
    fn exptime(&self) -> i64 {
        match self.ttl {
            t if t < 0 => 0,
            0 => 1,
            t if t > REALTIME_MAXDELTA => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                now + t
            }
            t => t,
        }
    }

    fn store(&self, out: &mut Vec<u8>, key: &[u8], mode: &str) {
        let len = self.data.len() - 2;
        let args = format!("{len} F{} T{} {mode} c", self.flags, self.exptime());
        meta(out, "ms", key, &args);
        out.extend_from_slice(&self.data);
    }
}

struct Migration {
    plan: Plan,
    old_ring: Ring,
    new_ring: Ring,
    old_to_new: Vec<Option<usize>>,
    /// Connections by server address (`Addr` display).
    conns: Vec<(String, Conn)>,
    /// Old copies to drop once their grace is over: when, old server, key.
    drops: VecDeque<(Instant, usize, Vec<u8>)>,
    /// Moved keys met in the current pass.
    met: u64,
    /// How each old server's copies are dropped (`drop`), once known.
    drop_via: Vec<Option<DropVia>>,
    /// The pool's `replication_secret:`, for peer connections.
    secret: Option<Arc<osmium_protocol::replication_auth::Secret>>,
}

impl Migration {
    fn new(plan: Plan) -> Migration {
        let old_to_new = plan
            .old
            .servers
            .iter()
            .map(|s| plan.new.servers.iter().position(|n| n.name == s.name))
            .collect();
        let secret = crate::peer::load_secret(&plan.new).unwrap_or_else(|e| {
            tracing::warn!("migration: {e}");
            None
        });
        Migration {
            drop_via: plan.old.servers.iter().map(|_| None).collect(),
            secret,
            old_ring: Ring::new(&plan.old),
            new_ring: Ring::new(&plan.new),
            old_to_new,
            plan,
            conns: Vec::new(),
            drops: VecDeque::new(),
            met: 0,
        }
    }

    fn moved_from(&self, key: &[u8]) -> Option<usize> {
        super::moved_from(&self.old_ring, &self.new_ring, &self.old_to_new, key)
    }

    fn run(&mut self) {
        for pass in 0..PASSES {
            self.met = 0;
            for o in 0..self.plan.old.servers.len() {
                if self.plan.progress.cancelled() {
                    return;
                }
                if self.plan.skip.get(o).copied().unwrap_or(false) {
                    continue;
                }
                if let Err(e) = self.list(o) {
                    tracing::warn!(
                        "pool {}: migration could not list server {}: {e}",
                        self.plan.new.name,
                        self.plan.old.servers[o].name
                    );
                }
                self.priorities();
            }
            self.drop_old(true);
            tracing::debug!(
                "pool {}: migration pass {pass}: {} moved keys met",
                self.plan.new.name,
                self.met
            );
            if self.met == 0 {
                break;
            }
        }
        self.priorities();
    }

    fn conn(&mut self, addr: &Addr) -> io::Result<&mut Conn> {
        let name = addr.to_string();
        let i = match self.conns.iter().position(|(a, _)| *a == name) {
            Some(i) => i,
            None => {
                self.conns.push((name, Conn::open(addr)?));
                self.conns.len() - 1
            }
        };
        Ok(&mut self.conns[i].1)
    }

    /// Forgets a connection after an error (opened again when needed).
    fn forget(&mut self, addr: &Addr) {
        let name = addr.to_string();
        self.conns.retain(|(a, _)| *a != name);
    }

    /// Lists old server `o` and migrates its moved keys.
    fn list(&mut self, o: usize) -> io::Result<()> {
        let name = self.plan.old.servers[o].name.clone();
        // Only the keys of the ranges that left the server, by osmium's
        // dump filter; memcached refuses the filter (`ERROR`): all its keys.
        let mut commands = dump_commands(&self.old_ring, &self.new_ring, &name);
        let mut i = 0;
        while i < commands.len() {
            if self.list_one(o, commands[i].as_bytes())? {
                i += 1;
            } else if commands[i] != UNFILTERED_MGDUMP {
                tracing::debug!(
                    "pool {}: server {name} refused the dump filter: all its keys listed",
                    self.plan.new.name
                );
                commands = vec![UNFILTERED_MGDUMP.to_string()];
                i = 0;
            } else {
                return Err(io::Error::other("the unfiltered dump refused"));
            }
        }
        Ok(())
    }

    /// Lists old server `o` by one dump command and migrates its moved
    /// keys; false when the server answers the command `ERROR`.
    fn list_one(&mut self, o: usize, command: &[u8]) -> io::Result<bool> {
        let addr = self.plan.old.servers[o].addr.clone();
        let started = Instant::now();
        let mut line = Vec::new();
        let mut dump = loop {
            let mut c = Conn::open(&addr)?;
            c.send(command)?;
            c.line(&mut line)?;
            if line.starts_with(b"ERROR") {
                return Ok(false);
            }
            if line.starts_with(b"OK") {
                c.line(&mut line)?;
                break c;
            }
            if line.starts_with(b"mg ") || line.starts_with(b"EN\r\n") {
                break c;
            }
            if started.elapsed() > BUSY_WAIT {
                let l = String::from_utf8_lossy(&line);
                return Err(io::Error::other(format!("dump refused: {}", l.trim_end())));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut batch: Vec<(Vec<u8>, usize)> = Vec::with_capacity(BATCH);
        let mut n = 0usize;
        loop {
            if line.starts_with(b"EN\r\n") || self.plan.progress.cancelled() {
                break;
            }
            if let Some(key) = dump_key(&line) {
                if self.moved_from(&key) == Some(o) {
                    self.met += 1;
                    batch.push((key, o));
                    if batch.len() == BATCH {
                        self.migrate(std::mem::take(&mut batch));
                    }
                }
            }
            n += 1;
            if n % 64 == 0 {
                self.priorities();
                self.drop_old(false);
            }
            dump.line(&mut line)?;
        }
        self.migrate(batch);
        Ok(true)
    }

    /// Copies the keys the loop is waiting for, and tells it.
    fn priorities(&mut self) {
        let mut keys = Vec::new();
        while let Ok(k) = self.plan.priority.try_recv() {
            keys.push(k);
        }
        if keys.is_empty() {
            return;
        }
        let batch = keys
            .iter()
            .filter_map(|k| Some((k.clone(), self.moved_from(k)?)))
            .collect();
        self.migrate(batch);
        for k in &keys {
            // Copied, gone, or not copied after an error: the key is
            // settled either way, so the parked request goes ahead.
            let h = key_hash(k);
            self.plan.settled.insert(h);
            let _ = self.plan.copied.send(h);
        }
        if let Some(w) = &self.plan.waker {
            let _ = w.wake();
        }
    }

    /// Migrates `keys` (each with its old owner).
    fn migrate(&mut self, mut keys: Vec<(Vec<u8>, usize)>) {
        keys.sort_by_key(|k| k.1);
        let mut at = 0;
        while at < keys.len() {
            let o = keys[at].1;
            let end = at + keys[at..].iter().take_while(|k| k.1 == o).count();
            if let Err(e) = self.migrate_from(o, &keys[at..end]) {
                tracing::warn!(
                    "pool {}: migration from {}: {e}",
                    self.plan.new.name,
                    self.plan.old.servers[o].name
                );
                let addr = self.plan.old.servers[o].addr.clone();
                self.forget(&addr);
            }
            at = end;
        }
    }

    fn migrate_from(&mut self, o: usize, keys: &[(Vec<u8>, usize)]) -> io::Result<()> {
        let settled = self.plan.settled.clone();
        let now = Instant::now();
        // Settled by a client: only the old copy goes.
        let mut todo = Vec::with_capacity(keys.len());
        for (k, _) in keys {
            if settled.contains(key_hash(k)) {
                self.drops.push_back((now, o, k.clone()));
            } else {
                todo.push(k.as_slice());
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        let old_addr = self.plan.old.servers[o].addr.clone();
        let mut req = Vec::new();
        for k in &todo {
            meta(&mut req, "mg", k, "s v f t");
        }
        let mut items: Vec<Option<Item>> = Vec::with_capacity(todo.len());
        {
            let c = self.conn(&old_addr)?;
            c.send(&req)?;
            let mut line = Vec::new();
            for _ in &todo {
                c.line(&mut line)?;
                if line.starts_with(b"VA ") {
                    let size = reply::meta_value_len(&line)
                        .ok_or_else(|| io::Error::other("bad VA line"))?;
                    let mut data = Vec::new();
                    c.exact(size + 2, &mut data)?;
                    items.push(Some(Item {
                        flags: flag(&line, b'f').unwrap_or(0) as u32,
                        ttl: flag(&line, b't').unwrap_or(-1),
                        data,
                    }));
                } else if line.starts_with(b"EN") {
                    items.push(None);
                } else {
                    return Err(io::Error::other(format!(
                        "mg answered {}",
                        String::from_utf8_lossy(&line).trim_end()
                    )));
                }
            }
        }
        // Adds, grouped by new owner.
        let mut by_new: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, (k, item)) in todo.iter().zip(&items).enumerate() {
            if item.is_none() {
                // Expired or evicted: nothing to copy, the new owner is
                // as right as the old one.
                settled.insert(key_hash(k));
                continue;
            }
            let n = self.new_ring.server_of(k);
            match by_new.iter_mut().find(|(s, _)| *s == n) {
                Some((_, v)) => v.push(i),
                None => by_new.push((n, vec![i])),
            }
        }
        for (n, list) in by_new {
            let new_addr = self.plan.new.servers[n].addr.clone();
            if let Err(e) = self.add_all(&new_addr, o, &todo, &items, &list) {
                self.forget(&new_addr);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Adds `list` (indexes into `todo`/`items`) on the new owner at
    /// `addr`, then settles them.
    fn add_all(
        &mut self,
        addr: &Addr,
        o: usize,
        todo: &[&[u8]],
        items: &[Option<Item>],
        list: &[usize],
    ) -> io::Result<()> {
        let settled = self.plan.settled.clone();
        let progress = self.plan.progress.clone();
        let mut req = Vec::new();
        for &i in list {
            items[i].as_ref().unwrap().store(&mut req, todo[i], "ME");
        }
        let c = self.conn(addr)?;
        c.send(&req)?;
        let mut line = Vec::new();
        let mut undo = Vec::new();
        let mut stale = Vec::new();
        let mut copied = Vec::new();
        for &i in list {
            c.line(&mut line)?;
            let k = todo[i];
            if line.starts_with(b"HD") {
                let cas = flag(&line, b'c').unwrap_or(0);
                if settled.insert(key_hash(k)) {
                    copied.push(i);
                } else {
                    meta(&mut undo, "md", k, &format!("C{cas} q"));
                    copied.push(i);
                }
            } else if line.starts_with(b"NS") {
                if settled.contains(key_hash(k)) {
                    copied.push(i);
                } else {
                    stale.push(i);
                }
            } else {
                tracing::debug!(
                    "migration: add of a key answered {}",
                    String::from_utf8_lossy(&line).trim_end()
                );
            }
        }
        if !undo.is_empty() {
            undo.extend_from_slice(b"mn\r\n");
            c.send(&undo)?;
            c.until_mn()?;
        }
        // A copy the move did not write: replaced unless a client wrote.
        for i in stale {
            let k = todo[i];
            let item = items[i].as_ref().unwrap();
            let mut req = Vec::new();
            meta(&mut req, "mg", k, "c");
            c.send(&req)?;
            c.line(&mut line)?;
            let Some(cas) = line.starts_with(b"HD").then(|| flag(&line, b'c')).flatten() else {
                continue;
            };
            if settled.contains(key_hash(k)) {
                copied.push(i);
                continue;
            }
            req.clear();
            item.store(&mut req, k, &format!("MS C{cas}"));
            c.send(&req)?;
            c.line(&mut line)?;
            if line.starts_with(b"HD") {
                let ours = flag(&line, b'c').unwrap_or(0);
                if !settled.insert(key_hash(k)) {
                    req.clear();
                    meta(&mut req, "md", k, &format!("C{ours} q"));
                    req.extend_from_slice(b"mn\r\n");
                    c.send(&req)?;
                    c.until_mn()?;
                }
                copied.push(i);
            }
        }
        let now = Instant::now();
        for i in copied {
            progress.moved_keys.fetch_add(1, Ordering::Relaxed);
            let len = items[i].as_ref().map_or(0, |it| it.data.len() - 2);
            progress
                .moved_bytes
                .fetch_add(len as u64, Ordering::Relaxed);
            self.drops.push_back((now, o, todo[i].to_vec()));
        }
        Ok(())
    }

    /// Drops the old copies whose grace is over (all of them with `all`,
    /// after waiting out the last grace).
    fn drop_old(&mut self, all: bool) {
        if all {
            if let Some(&(t, _, _)) = self.drops.back() {
                let left = (t + GRACE).saturating_duration_since(Instant::now());
                std::thread::sleep(left);
            }
        }
        let now = Instant::now();
        let mut by_old: Vec<(usize, Vec<u8>)> = Vec::new();
        while let Some((t, o, _)) = self.drops.front() {
            if !all && *t + GRACE > now {
                break;
            }
            let o = *o;
            let (_, _, k) = self.drops.pop_front().unwrap();
            let req = match by_old.iter_mut().find(|(s, _)| *s == o) {
                Some((_, r)) => r,
                None => {
                    by_old.push((o, Vec::new()));
                    &mut by_old.last_mut().unwrap().1
                }
            };
            meta(req, "md", &k, "q");
        }
        for (o, mut req) in by_old {
            req.extend_from_slice(b"mn\r\n");
            let addr = self.plan.old.servers[o].addr.clone();
            let via = match self.drop_via[o].take() {
                Some(v) => v,
                None => self.choose_drop(o),
            };
            let r = match via {
                DropVia::Keep => {
                    self.drop_via[o] = Some(DropVia::Keep);
                    continue;
                }
                DropVia::Peer(mut c) => {
                    let r = drop::send_batch(&mut c, &req);
                    // A failed peer connection is made again next time.
                    if r.is_ok() {
                        self.drop_via[o] = Some(DropVia::Peer(c));
                    }
                    r
                }
                DropVia::Plain => {
                    self.drop_via[o] = Some(DropVia::Plain);
                    self.conn(&addr)
                        .and_then(|c| {
                            c.send(&req)?;
                            c.until_mn()
                        })
                        .map(|_| ())
                }
            };
            if let Err(e) = r {
                tracing::warn!(
                    "pool {}: dropping old copies on {}: {e}",
                    self.plan.new.name,
                    self.plan.old.servers[o].name
                );
                self.forget(&addr);
            }
        }
    }
}

impl Migration {
    /// How old server `o`'s copies are dropped, from its `stats settings`
    /// (see `drop`). A server that does not answer is dropped from plainly
    /// (its deletes fail as its reads did).
    fn choose_drop(&mut self, o: usize) -> DropVia {
        let addr = self.plan.old.servers[o].addr.clone();
        let settings = self.conn(&addr).and_then(|c| {
            c.send(b"stats settings\r\n")?;
            let mut all = Vec::new();
            let mut line = Vec::new();
            loop {
                c.line(&mut line)?;
                all.extend_from_slice(&line);
                if line.starts_with(b"END") || line.starts_with(b"ERROR") {
                    return Ok(all);
                }
            }
        });
        match settings {
            Ok(s) if drop::replicates(&s) => drop::for_replicating(
                &addr,
                self.secret.as_ref(),
                &self.plan.new.name,
                &self.plan.old.servers[o].name,
            ),
            Ok(_) => DropVia::Plain,
            Err(_) => {
                self.forget(&addr);
                DropVia::Plain
            }
        }
    }
}

/// The key of a dump line `mg <key>` or `mg <base64> b` (framed as the
/// request it is by the client-side codec, which decodes base64 keys).
fn dump_key(line: &[u8]) -> Option<Vec<u8>> {
    if !line.starts_with(b"mg ") {
        return None;
    }
    match frame(line, false)?.action {
        Action::Forward { key, .. } => Some(key.into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_dump_lines_and_writes_keys() {
        assert_eq!(dump_key(b"mg abc\r\n").unwrap(), b"abc");
        assert_eq!(dump_key(b"mg AAE= b\r\n").unwrap(), &[0u8, 1]);
        assert!(dump_key(b"EN\r\n").is_none());
        let mut out = Vec::new();
        meta(&mut out, "mg", b"a b", "s v");
        assert_eq!(out, b"mg YSBi b s v\r\n");
        assert_eq!(flag(b"VA 3 s3 f7 t-1\r\n", b't'), Some(-1));
        assert_eq!(flag(b"HD c42\r\n", b'c'), Some(42));
        let item = Item {
            flags: 1,
            ttl: -1,
            data: b"xy\r\n".to_vec(),
        };
        let mut out = Vec::new();
        item.store(&mut out, b"k", "ME");
        assert_eq!(out, b"ms k 2 F1 T0 ME c\r\nxy\r\n");
    }
}
