//! The migration of one move, on its own thread with its own blocking
//! connections (`conn`: TLS with the pool's `tls.servers`). It first waits
//! for the migration of the move it replaced (a reload while that one
//! ran) to stop, then tries each source the move lists (`Move::sources`)
//! and marks it reachable or not (the loop sends warm reads only to a
//! reachable one), then lists each: `lru_crawler mgdump hash` with
//! osmium's key filter when the move has one earlier ring (only the
//! ranges that left the server; memcached refuses the filter and lists
//! all), everything it holds otherwise; retried while the server's
//! crawler is busy. For each key listed on server `x`:
//!
//! - moved from `x` (its source is `x`, its owner now another server):
//!   copied, in pipelined batches:
//!   1. skipped if settled (a client wrote or deleted it: only the old
//!      copy is dropped);
//!   2. `mg k s v f t c` on `x` (a miss: the key expired, was evicted or
//!      deleted; a copy its new owner still holds is deleted, cas-checked,
//!      and the key settles with nothing to copy);
//!   3. `ms k <len> F<f> T<ttl> ME c` (add) on the new owner;
//!   4. the key is settled; if a client settled it first, `md k C<cas> q`
//!      removes the copy unless a client write already replaced it;
//!   5. the old copy on `x` dropped a little later (so a warm read sent
//!      just before the key settled still finds it);
//! - on `x` but neither its source nor its settled owner (a chain of
//!   rings only; a copy a stopped move left): stale, dropped, unless `x`
//!   may hold replicas (osmium replicating, or taking replication links).
//!
//! An add refused because the new owner holds a copy the move did not
//! write (left from an earlier placement) replaces it with a cas-checked
//! set instead. Every drop is `md k C<cas> q` with the cas the migration
//! read from that server (for a key it did not read, a `mg k c` first),
//! skipped when a later move settled the key (or, for a copy on the key's
//! owner, when this one did): a client write that came meanwhile is never
//! deleted. On a server that replicates it goes over a replication peer
//! connection (see `drop`).
//!
//! The loop's priority copies (a parked request's key) are done between
//! batches and answered with the key's hash, and a wake of the loop. The
//! sources are listed again until a pass finds no moved key left (a
//! crawler can miss an item that changed LRU during its walk), at most
//! [`PASSES`] times. A replaced (cancelled) migration stops at its next
//! batch, drops what it copied, and writes nothing a newer move settled.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use osmium_protocol::client::frame::{frame, Action};
use osmium_protocol::client::{encode, reply};

use super::chain::{Reach, DOWN, UP};
use super::conn::{Conn, MigrationTls};
use super::drop::{self, DropVia};
use super::{key_hash, Move, Progress, Settle};
use crate::config::{Addr, PoolConfig};
use osmium_placement::filter::UNFILTERED_MGDUMP;

/// Keys per pipelined batch.
const BATCH: usize = 128;
/// How long an old copy is kept after its key settled.
const GRACE: Duration = Duration::from_millis(50);
/// Listings of the sources at most.
pub const PASSES: usize = 3;
/// How long a busy crawler is waited for.
const BUSY_WAIT: Duration = Duration::from_secs(60);
/// memcached reads a TTL above this as an absolute Unix time.
const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// What a migration is given.
pub struct Plan {
    /// The chain of rings, the sources and the settled set (the loop's
    /// clone: the sets are shared).
    pub mv: Move,
    /// The pool's configuration now (its name, its secret).
    pub new: PoolConfig,
    /// TLS to the servers (`tls.servers`).
    pub tls: Option<MigrationTls>,
    /// Whether each source is reachable (found out here).
    pub reach: Arc<Reach>,
    /// What the migration has done, shared with the loop.
    pub progress: Arc<Progress>,
    /// Keys the loop waits for (parked requests).
    pub priority: Receiver<Vec<u8>>,
    /// The hash of each priority key once copied (or found gone).
    pub copied: Sender<u64>,
    /// Woken after sending on `copied` and when the migration ends.
    pub waker: Option<Arc<mio::Waker>>,
    /// The migration of the move this one replaced: waited for first.
    pub replaced: Option<std::thread::JoinHandle<()>>,
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

/// An item read from a source.
struct Item {
    flags: u32,
    /// memcached's `t`: seconds left, -1 for never.
    ttl: i64,
    /// Its cas on the source (for the drop of the old copy).
    cas: Option<u64>,
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

/// A copy to drop once its grace is over.
struct OldCopy {
    at: Instant,
    /// The source it is on.
    on: usize,
    key: Vec<u8>,
    /// Its cas there, when the migration read it.
    cas: Option<u64>,
    /// The source is the key's owner now: kept if this move settled it.
    owner_here: bool,
}

struct Migration {
    plan: Plan,
    /// Connections by server address (`Addr` display).
    conns: Vec<(String, Conn)>,
    drops: VecDeque<OldCopy>,
    /// Moved keys met in the current pass.
    met: u64,
    /// How each source's copies are dropped (`drop`), once known.
    drop_via: Vec<Option<DropVia>>,
    /// Whether each source may hold replicas (its stale copies kept).
    replicas: Vec<Option<bool>>,
    /// The pool's `replication_secret:`, for peer connections.
    secret: Option<Arc<osmium_protocol::replication_link::Secret>>,
}

impl Migration {
    fn new(plan: Plan) -> Migration {
        let secret = crate::peer::load_secret(&plan.new).unwrap_or_else(|e| {
            tracing::warn!("migration: {e}");
            None
        });
        let n = plan.mv.sources.len();
        Migration {
            drop_via: (0..n).map(|_| None).collect(),
            replicas: vec![None; n],
            secret,
            plan,
            conns: Vec::new(),
            drops: VecDeque::new(),
            met: 0,
        }
    }

    fn pool(&self) -> &str {
        &self.plan.new.name
    }

    fn addr(&self, s: usize) -> Addr {
        self.plan.mv.sources[s].addr.clone()
    }

    fn name(&self, s: usize) -> &str {
        &self.plan.mv.sources[s].name
    }

    fn run(&mut self) {
        if let Some(before) = self.plan.replaced.take() {
            // It stops at its next batch (its cancel flag is set).
            let _ = before.join();
        }
        let listed: Vec<usize> = (0..self.plan.mv.sources.len())
            .filter(|&s| self.plan.mv.sources[s].listed)
            .collect();
        for &s in &listed {
            let state = if self.open(s).is_ok() { UP } else { DOWN };
            self.plan.reach.set(s, state);
        }
        for pass in 0..PASSES {
            self.met = 0;
            for &s in &listed {
                if self.plan.progress.cancelled() {
                    self.drop_old(true);
                    return;
                }
                if let Err(e) = self.list(s) {
                    if self.open(s).is_err() {
                        self.plan.reach.set(s, DOWN);
                    }
                    tracing::warn!(
                        "pool {}: migration could not list server {}: {e}",
                        self.pool(),
                        self.name(s)
                    );
                }
                self.priorities();
            }
            self.drop_old(true);
            tracing::debug!(
                "pool {}: migration pass {pass}: {} moved keys met",
                self.pool(),
                self.met
            );
            if self.met == 0 {
                break;
            }
        }
        self.priorities();
    }

    /// The connection to source `s`, opened if needed.
    fn open(&mut self, s: usize) -> io::Result<&mut Conn> {
        let addr = self.addr(s);
        let name = addr.to_string();
        let i = match self.conns.iter().position(|(a, _)| *a == name) {
            Some(i) => i,
            None => {
                let c = self.connect(s, &addr)?;
                self.conns.push((name, c));
                self.conns.len() - 1
            }
        };
        Ok(&mut self.conns[i].1)
    }

    fn connect(&self, s: usize, addr: &Addr) -> io::Result<Conn> {
        let tls = match &self.plan.tls {
            None => None,
            Some(t) => match t.names.get(s).and_then(Option::as_ref) {
                Some(name) => Some((&t.config, name)),
                None => {
                    return Err(io::Error::other(
                        "no name to verify its certificate against (tls.servers.server_name)",
                    ))
                }
            },
        };
        Conn::open(addr, tls)
    }

    /// Forgets source `s`'s connection after an error (opened again when
    /// needed).
    fn forget(&mut self, s: usize) {
        let name = self.addr(s).to_string();
        self.conns.retain(|(a, _)| *a != name);
    }

    /// Lists source `s` and migrates its moved keys.
    fn list(&mut self, s: usize) -> io::Result<()> {
        let mut commands = self.plan.mv.dump_commands(s);
        let mut i = 0;
        while i < commands.len() && !self.plan.progress.cancelled() {
            if self.list_one(s, commands[i].as_bytes())? {
                i += 1;
            } else if commands[i] != UNFILTERED_MGDUMP {
                tracing::debug!(
                    "pool {}: server {} refused the dump filter: all its keys listed",
                    self.pool(),
                    self.name(s)
                );
                commands = vec![UNFILTERED_MGDUMP.to_string()];
                i = 0;
            } else {
                return Err(io::Error::other("the unfiltered dump refused"));
            }
        }
        Ok(())
    }

    /// Lists source `s` by one dump command and migrates its moved keys;
    /// false when the server answers the command `ERROR`.
    fn list_one(&mut self, s: usize, command: &[u8]) -> io::Result<bool> {
        let addr = self.addr(s);
        let started = Instant::now();
        let mut line = Vec::new();
        let mut dump = loop {
            let mut c = self.connect(s, &addr)?;
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
            if started.elapsed() > BUSY_WAIT || self.plan.progress.cancelled() {
                let l = String::from_utf8_lossy(&line);
                return Err(io::Error::other(format!("dump refused: {}", l.trim_end())));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let chained = self.plan.mv.depth() > 1;
        let mut batch: Vec<(Vec<u8>, usize)> = Vec::with_capacity(BATCH);
        let mut n = 0usize;
        loop {
            if line.starts_with(b"EN\r\n") || self.plan.progress.cancelled() {
                break;
            }
            if let Some(key) = dump_key(&line) {
                let src = self.plan.mv.source_of(&key);
                let owner = self.plan.mv.owner_of(&key);
                if src == s && owner != s {
                    self.met += 1;
                    batch.push((key, s));
                    if batch.len() == BATCH {
                        self.migrate(std::mem::take(&mut batch));
                    }
                } else if chained && src != s {
                    self.stale(s, key, owner == s);
                }
            }
            n += 1;
            if n.is_multiple_of(64) {
                self.priorities();
                self.drop_old(false);
            }
            dump.line(&mut line)?;
        }
        self.migrate(batch);
        Ok(true)
    }

    /// A copy of `key` on source `s`, which is not its source: stale
    /// unless this move settled it on its owner `s` (copied, or written
    /// by a client); dropped unless `s` may hold replicas.
    fn stale(&mut self, s: usize, key: Vec<u8>, owner_here: bool) {
        let settled = &self.plan.mv.settled;
        if owner_here && settled.settled_here_or_later(key_hash(&key)) {
            return;
        }
        if self.may_hold_replicas(s) {
            return;
        }
        self.drops.push_back(OldCopy {
            at: Instant::now(),
            on: s,
            key,
            cas: None,
            owner_here,
        });
    }

    /// Whether source `s` replicates or takes replication links (then a
    /// copy that is not its own may be a replica, and is kept).
    fn may_hold_replicas(&mut self, s: usize) -> bool {
        if let Some(r) = self.replicas[s] {
            return r;
        }
        let r = self.open(s).and_then(|c| {
            let settings = c.stats(b"stats settings\r\n")?;
            let stats = c.stats(b"stats\r\n")?;
            Ok(drop::replicates(&settings) || drop::takes_replication_links(&stats))
        });
        // Not known (no answer): kept.
        let r = r.unwrap_or(true);
        self.replicas[s] = Some(r);
        r
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
            .filter_map(|k| Some((k.clone(), self.plan.mv.moved_from(k)?)))
            .collect();
        self.migrate(batch);
        for k in &keys {
            // Copied, gone, or not copied after an error: the key is
            // settled either way, so the parked request goes ahead.
            let h = key_hash(k);
            self.plan.mv.settled.settle(h);
            let _ = self.plan.copied.send(h);
        }
        if let Some(w) = &self.plan.waker {
            let _ = w.wake();
        }
    }

    /// Migrates `keys` (each with its source).
    fn migrate(&mut self, mut keys: Vec<(Vec<u8>, usize)>) {
        keys.sort_by_key(|k| k.1);
        let mut at = 0;
        while at < keys.len() {
            let s = keys[at].1;
            let end = at + keys[at..].iter().take_while(|k| k.1 == s).count();
            if let Err(e) = self.migrate_from(s, &keys[at..end]) {
                tracing::warn!("pool {}: migration from {}: {e}", self.pool(), self.name(s));
                self.forget(s);
            }
            at = end;
        }
    }

    fn migrate_from(&mut self, s: usize, keys: &[(Vec<u8>, usize)]) -> io::Result<()> {
        let settled = self.plan.mv.settled.clone();
        let now = Instant::now();
        // Settled by a client: only the old copy goes.
        let mut todo = Vec::with_capacity(keys.len());
        for (k, _) in keys {
            if settled.settled_here_or_later(key_hash(k)) {
                self.drops.push_back(OldCopy {
                    at: now,
                    on: s,
                    key: k.clone(),
                    cas: None,
                    owner_here: false,
                });
            } else {
                todo.push(k.as_slice());
            }
        }
        if todo.is_empty() {
            return Ok(());
        }
        let mut req = Vec::new();
        for k in &todo {
            meta(&mut req, "mg", k, "s v f t c");
        }
        let mut items: Vec<Option<Item>> = Vec::with_capacity(todo.len());
        {
            let c = self.open(s)?;
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
                        cas: flag(&line, b'c').map(|c| c as u64),
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
        // Gone from the source (expired, evicted, deleted): nothing to
        // copy; a copy its owner may still hold (a stopped move's, its
        // drop not done yet) goes first, then the key settles.
        let gone: Vec<&[u8]> = todo
            .iter()
            .zip(&items)
            .filter(|(_, item)| item.is_none())
            .map(|(k, _)| *k)
            .collect();
        if !gone.is_empty() {
            self.clear_owners(&gone)?;
        }
        // Adds, grouped by new owner.
        let mut by_new: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, (k, item)) in todo.iter().zip(&items).enumerate() {
            if item.is_none() {
                continue;
            }
            let n = self.plan.mv.owner_of(k);
            match by_new.iter_mut().find(|(x, _)| *x == n) {
                Some((_, v)) => v.push(i),
                None => by_new.push((n, vec![i])),
            }
        }
        for (n, list) in by_new {
            if let Err(e) = self.add_all(n, s, &todo, &items, &list) {
                self.forget(n);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Keys their source does not have: any copy on their owner (stale,
    /// since the source holds the latest of an unsettled key) is deleted,
    /// cas-checked and unless a client settled the key meanwhile; then
    /// they settle.
    fn clear_owners(&mut self, keys: &[&[u8]]) -> io::Result<()> {
        let settled = self.plan.mv.settled.clone();
        let mut by_owner: Vec<(usize, Vec<&[u8]>)> = Vec::new();
        for &k in keys {
            let n = self.plan.mv.owner_of(k);
            match by_owner.iter_mut().find(|(x, _)| *x == n) {
                Some((_, v)) => v.push(k),
                None => by_owner.push((n, vec![k])),
            }
        }
        for (n, list) in by_owner {
            let r = self.clear_on(n, &list, &settled);
            if r.is_err() {
                self.forget(n);
            }
            r?;
        }
        Ok(())
    }

    fn clear_on(&mut self, n: usize, keys: &[&[u8]], settled: &super::Settled) -> io::Result<()> {
        let mut req = Vec::new();
        for k in keys {
            meta(&mut req, "mg", k, "c");
        }
        let c = self.open(n)?;
        c.send(&req)?;
        let mut line = Vec::new();
        let mut undo = Vec::new();
        for k in keys {
            c.line(&mut line)?;
            let Some(cas) = line.starts_with(b"HD").then(|| flag(&line, b'c')).flatten() else {
                continue;
            };
            if !settled.settled_here_or_later(key_hash(k)) {
                meta(&mut undo, "md", k, &format!("C{cas} q"));
            }
        }
        if !undo.is_empty() {
            undo.extend_from_slice(b"mn\r\n");
            c.send(&undo)?;
            c.until_mn()?;
        }
        for k in keys {
            settled.settle(key_hash(k));
        }
        Ok(())
    }

    /// Adds `list` (indexes into `todo`/`items`) on source `n` (their new
    /// owner), then settles them; their copies on `s` are to be dropped.
    fn add_all(
        &mut self,
        n: usize,
        s: usize,
        todo: &[&[u8]],
        items: &[Option<Item>],
        list: &[usize],
    ) -> io::Result<()> {
        let settled = self.plan.mv.settled.clone();
        let progress = self.plan.progress.clone();
        let mut req = Vec::new();
        for &i in list {
            items[i].as_ref().unwrap().store(&mut req, todo[i], "ME");
        }
        let c = self.open(n)?;
        c.send(&req)?;
        let mut line = Vec::new();
        let mut undo = Vec::new();
        let mut stale = Vec::new();
        let mut copied = Vec::new();
        for &i in list {
            c.line(&mut line)?;
            let h = key_hash(todo[i]);
            if line.starts_with(b"HD") {
                let cas = flag(&line, b'c').unwrap_or(0);
                match settled.settle(h) {
                    // Copied: the key reads from here now.
                    Settle::New if !settled.settled_later(h) => copied.push(i),
                    // A client settled it first (its write replaces the
                    // copy, or the copy is undone), or a newer move did.
                    Settle::New | Settle::Already => {
                        meta(&mut undo, "md", todo[i], &format!("C{cas} q"));
                        copied.push(i);
                    }
                    // Replaced by a newer move before it settled: the key
                    // stays where that move reads it; the copy goes.
                    Settle::Frozen => meta(&mut undo, "md", todo[i], &format!("C{cas} q")),
                }
            } else if line.starts_with(b"NS") {
                if settled.settled_here_or_later(h) {
                    copied.push(i);
                } else if !settled.is_frozen() {
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
            let h = key_hash(k);
            let item = items[i].as_ref().unwrap();
            let mut req = Vec::new();
            meta(&mut req, "mg", k, "c");
            c.send(&req)?;
            c.line(&mut line)?;
            let Some(cas) = line.starts_with(b"HD").then(|| flag(&line, b'c')).flatten() else {
                continue;
            };
            if settled.settled_here_or_later(h) {
                copied.push(i);
                continue;
            }
            req.clear();
            item.store(&mut req, k, &format!("MS C{cas}"));
            c.send(&req)?;
            c.line(&mut line)?;
            if line.starts_with(b"HD") {
                let ours = flag(&line, b'c').unwrap_or(0);
                let settle = settled.settle(h);
                if settle != Settle::New || settled.settled_later(h) {
                    req.clear();
                    meta(&mut req, "md", k, &format!("C{ours} q"));
                    req.extend_from_slice(b"mn\r\n");
                    c.send(&req)?;
                    c.until_mn()?;
                }
                if settle != Settle::Frozen {
                    copied.push(i);
                }
            }
        }
        let now = Instant::now();
        for i in copied {
            progress.moved_keys.fetch_add(1, Ordering::Relaxed);
            let item = items[i].as_ref();
            let len = item.map_or(0, |it| it.data.len() - 2);
            progress
                .moved_bytes
                .fetch_add(len as u64, Ordering::Relaxed);
            self.drops.push_back(OldCopy {
                at: now,
                on: s,
                key: todo[i].to_vec(),
                cas: item.and_then(|it| it.cas),
                owner_here: false,
            });
        }
        Ok(())
    }

    /// Drops the copies whose grace is over (all of them with `all`, after
    /// waiting out the last grace).
    fn drop_old(&mut self, all: bool) {
        if all {
            if let Some(d) = self.drops.back() {
                let left = (d.at + GRACE).saturating_duration_since(Instant::now());
                std::thread::sleep(left);
            }
        }
        let now = Instant::now();
        let mut by_source: Vec<(usize, Vec<OldCopy>)> = Vec::new();
        while let Some(d) = self.drops.front() {
            if !all && d.at + GRACE > now {
                break;
            }
            let d = self.drops.pop_front().unwrap();
            match by_source.iter_mut().find(|(x, _)| *x == d.on) {
                Some((_, v)) => v.push(d),
                None => by_source.push((d.on, vec![d])),
            }
        }
        for (s, list) in by_source {
            if let Err(e) = self.drop_on(s, list) {
                tracing::warn!(
                    "pool {}: dropping old copies on {}: {e}",
                    self.pool(),
                    self.name(s)
                );
                self.forget(s);
            }
        }
    }

    /// Drops `list` (copies on source `s`): each cas-checked, and kept
    /// when a later move (or, on the key's owner, this one) settled it.
    fn drop_on(&mut self, s: usize, mut list: Vec<OldCopy>) -> io::Result<()> {
        let via = match self.drop_via[s].take() {
            Some(v) => v,
            None => self.choose_drop(s),
        };
        if matches!(via, DropVia::Keep) {
            self.drop_via[s] = Some(via);
            return Ok(());
        }
        // The cas of the copies the migration did not read.
        let unread: Vec<usize> = (0..list.len()).filter(|&i| list[i].cas.is_none()).collect();
        if !unread.is_empty() {
            let mut req = Vec::new();
            for &i in &unread {
                meta(&mut req, "mg", &list[i].key, "c");
            }
            let c = match self.open(s) {
                Ok(c) => c,
                Err(e) => {
                    self.drop_via[s] = Some(via);
                    return Err(e);
                }
            };
            let sent = c.send(&req);
            let mut line = Vec::new();
            let mut read = sent.map(|_| ());
            for &i in &unread {
                if read.is_err() {
                    break;
                }
                read = c.line(&mut line);
                if read.is_ok() && line.starts_with(b"HD") {
                    list[i].cas = flag(&line, b'c').map(|c| c as u64);
                }
            }
            if let Err(e) = read {
                self.drop_via[s] = Some(via);
                return Err(e);
            }
        }
        let settled = self.plan.mv.settled.clone();
        let mut req = Vec::new();
        for d in &list {
            let Some(cas) = d.cas else {
                continue; // gone already
            };
            let h = key_hash(&d.key);
            if settled.settled_later(h) || (d.owner_here && settled.contains(h)) {
                continue;
            }
            meta(&mut req, "md", &d.key, &format!("C{cas} q"));
        }
        if req.is_empty() {
            self.drop_via[s] = Some(via);
            return Ok(());
        }
        req.extend_from_slice(b"mn\r\n");
        match via {
            DropVia::Peer(mut c) => {
                let r = drop::send_batch(&mut c, &req);
                // A failed peer connection is made again next time.
                if r.is_ok() {
                    self.drop_via[s] = Some(DropVia::Peer(c));
                }
                r
            }
            other => {
                self.drop_via[s] = Some(other);
                let c = self.open(s)?;
                c.send(&req)?;
                c.until_mn().map(|_| ())
            }
        }
    }

    /// How source `s`'s copies are dropped, from its `stats settings` (see
    /// `drop`). A server that does not answer is dropped from plainly (its
    /// deletes fail as its reads did).
    fn choose_drop(&mut self, s: usize) -> DropVia {
        let settings = self.open(s).and_then(|c| c.stats(b"stats settings\r\n"));
        let addr = self.addr(s);
        match settings {
            Ok(st) if drop::replicates(&st) => {
                drop::for_replicating(&addr, self.secret.as_ref(), self.pool(), self.name(s))
            }
            Ok(_) => DropVia::Plain,
            Err(_) => {
                self.forget(s);
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
        assert_eq!(flag(b"VA 3 s3 f7 t-1 c9\r\n", b't'), Some(-1));
        assert_eq!(flag(b"VA 3 s3 f7 t-1 c9\r\n", b'c'), Some(9));
        assert_eq!(flag(b"HD c42\r\n", b'c'), Some(42));
        let item = Item {
            flags: 1,
            ttl: -1,
            cas: None,
            data: b"xy\r\n".to_vec(),
        };
        let mut out = Vec::new();
        item.store(&mut out, b"k", "ME");
        assert_eq!(out, b"ms k 2 F1 T0 ME c\r\nxy\r\n");
    }
}
