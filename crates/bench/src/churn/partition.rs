//! Disjoint key partitions, the churn of modes (a) and (c): key `c:<i>`
//! belongs to connection `i mod conns`, and only that connection ever
//! writes it, so the client knows exactly which keys exist and with which
//! version. This module owns a partition's state (per key: the version
//! last sent and the version the server holds, or deleted, or unknown
//! after an error reply), the load (every key set once), the churn worker
//! (a uniformly random key of the partition per op: a delete with
//! probability `delete_ratio`, else a set of the next version with a
//! freshly drawn size; pipelined at a depth, optionally timing every
//! reply), and the final verify (every key fetched: live keys must come
//! back with exactly their version's bytes, deleted keys must miss).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::wire::{Client, Errors, Reply};
use super::{check_value, write_hash, SizeMix};

/// `stored[j]` of a key that is not on the server (deleted, never set).
const GONE: u32 = 0;
/// `stored[j]` after an error reply: the key may or may not be there.
const UNKNOWN: u32 = u32::MAX;

/// Sets per write of the load.
const LOAD_BATCH: usize = 256;
/// Bytes per write of the load (and of the verify's expected replies).
const WRITE_BYTES: usize = 1 << 20;

/// The keys of one connection and what the server holds of them.
pub(crate) struct Partition {
    pub index: u64,
    pub conns: u64,
    seed: u64,
    mix: SizeMix,
    /// Per local key j (id `index + j * conns`): the version last sent.
    sent: Vec<u32>,
    /// Per local key: the version stored, [`GONE`] or [`UNKNOWN`].
    stored: Vec<u32>,
    pub live_keys: u64,
    pub live_bytes: u64,
    /// Keys whose state an error reply left unknown.
    pub unknown: u64,
}

/// What the sampler reads while a churn runs (per partition).
#[derive(Default)]
pub(crate) struct Progress {
    pub ops: AtomicU64,
    pub live_keys: AtomicU64,
    pub live_bytes: AtomicU64,
}

impl Progress {
    /// Sums over every partition: (ops, live keys, live value bytes).
    pub(crate) fn sum(all: &[Progress]) -> (u64, u64, u64) {
        all.iter().fold((0, 0, 0), |(o, k, b), p| {
            (
                o + p.ops.load(Relaxed),
                k + p.live_keys.load(Relaxed),
                b + p.live_bytes.load(Relaxed),
            )
        })
    }
}

/// What a churn did.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChurnCounts {
    pub sets: u64,
    pub deletes: u64,
    /// Deletes of keys believed live that answered NOT_FOUND: live keys the
    /// server had dropped, seen during the churn.
    pub lost_seen: u64,
    /// Deletes of keys believed deleted that answered DELETED.
    pub zombies_seen: u64,
    pub errors: Errors,
    /// Latency of every op (ns, from its batch's write to its reply).
    pub hist: Option<Histogram<u64>>,
}

impl ChurnCounts {
    pub(crate) fn ops(&self) -> u64 {
        self.sets + self.deletes
    }

    pub(crate) fn add(&mut self, o: &ChurnCounts) -> Result<(), String> {
        self.sets += o.sets;
        self.deletes += o.deletes;
        self.lost_seen += o.lost_seen;
        self.zombies_seen += o.zombies_seen;
        self.errors.add(&o.errors);
        match (&mut self.hist, &o.hist) {
            (Some(a), Some(b)) => a.add(b).map_err(|e| e.to_string())?,
            (None, Some(b)) => self.hist = Some(b.clone()),
            _ => {}
        }
        Ok(())
    }
}

/// How a churn runs.
#[derive(Clone, Copy)]
pub(crate) struct ChurnCfg {
    pub delete_ratio: f64,
    /// Ops per pipelined batch.
    pub depth: usize,
    pub until: Instant,
    /// Time every reply.
    pub timed: bool,
    /// Salt of the generator (a different stream per phase).
    pub salt: u64,
}

/// What a verify found.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Verify {
    /// Live keys, as the client knows them.
    pub live: u64,
    /// Of those: back with exactly their bytes.
    pub ok: u64,
    /// Missing.
    pub lost: u64,
    /// Back with other bytes (another version, another key's, corrupt).
    pub wrong: u64,
    /// Deleted keys that came back.
    pub zombies: u64,
    /// Keys not checked (an error reply left their state unknown).
    pub unknown: u64,
}

impl Verify {
    fn add(&mut self, o: &Verify) {
        self.live += o.live;
        self.ok += o.ok;
        self.lost += o.lost;
        self.wrong += o.wrong;
        self.zombies += o.zombies;
        self.unknown += o.unknown;
    }
}

/// A new latency histogram (ns, 1 ns to 60 s).
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

impl Partition {
    /// `keys` keys split over `conns` partitions.
    pub(crate) fn split(keys: u64, conns: u64, seed: u64, mix: &SizeMix) -> Vec<Partition> {
        (0..conns)
            .map(|index| {
                let n = (keys + conns - 1 - index) / conns;
                Partition {
                    index,
                    conns,
                    seed,
                    mix: mix.clone(),
                    sent: vec![0; n as usize],
                    stored: vec![GONE; n as usize],
                    live_keys: 0,
                    live_bytes: 0,
                    unknown: 0,
                }
            })
            .collect()
    }

    fn id(&self, j: usize) -> u64 {
        self.index + j as u64 * self.conns
    }

    /// Value size of key `id` at `version`.
    pub(crate) fn size(&self, id: u64, version: u32) -> usize {
        self.mix.draw(write_hash(self.seed, id, version))
    }

    /// The ids the client knows to be live.
    pub(crate) fn live_ids(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.stored.len())
            .filter(|&j| !matches!(self.stored[j], GONE | UNKNOWN))
            .map(|j| self.id(j))
    }

    /// Queues a set of local key `j` at its next version.
    fn queue_set(&mut self, c: &mut Client, j: usize) -> u32 {
        let v = match self.sent[j].wrapping_add(1) {
            GONE | UNKNOWN => 1,
            v => v,
        };
        self.sent[j] = v;
        let id = self.id(j);
        c.set(id, v, self.size(id, v));
        v
    }

    fn forget(&mut self, j: usize) {
        match self.stored[j] {
            GONE => {}
            UNKNOWN => self.unknown -= 1,
            v => {
                self.live_keys -= 1;
                self.live_bytes -= self.size(self.id(j), v) as u64;
            }
        }
    }

    fn set_state(&mut self, j: usize, state: u32) {
        self.forget(j);
        match state {
            GONE => {}
            UNKNOWN => self.unknown += 1,
            v => {
                self.live_keys += 1;
                self.live_bytes += self.size(self.id(j), v) as u64;
            }
        }
        self.stored[j] = state;
    }

    fn publish(&self, p: Option<&Progress>, ops: u64) {
        if let Some(p) = p {
            p.ops.store(ops, Relaxed);
            p.live_keys.store(self.live_keys, Relaxed);
            p.live_bytes.store(self.live_bytes, Relaxed);
        }
    }

    /// Sets every key of the partition once, pipelined, paced to `mbps`
    /// MB/s of values (0: unpaced); the set errors.
    pub(crate) fn load(&mut self, addr: SocketAddr, mbps: f64) -> Result<Errors, String> {
        let mut c = Client::connect(addr)?;
        let start = Instant::now();
        let mut sent = 0usize;
        let mut errors = Errors::default();
        let mut batch: Vec<(usize, u32)> = Vec::with_capacity(LOAD_BATCH);
        let n = self.stored.len();
        for j in 0..n {
            let v = self.queue_set(&mut c, j);
            batch.push((j, v));
            if batch.len() >= LOAD_BATCH || c.queued() >= WRITE_BYTES || j + 1 == n {
                sent += c.queued();
                c.flush()?;
                for &(j, v) in &batch {
                    match c.read_store()? {
                        Reply::Stored => self.set_state(j, v),
                        other => {
                            errors.note(format!("set: {other:?}"));
                            self.set_state(j, UNKNOWN);
                        }
                    }
                }
                batch.clear();
                if mbps > 0.0 {
                    let due = start + Duration::from_secs_f64(sent as f64 / (mbps * 1e6));
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                }
            }
        }
        Ok(errors)
    }

    /// Churns the partition until `cfg.until`, publishing to `progress`
    /// after every batch.
    pub(crate) fn churn(
        &mut self,
        addr: SocketAddr,
        cfg: ChurnCfg,
        progress: Option<&Progress>,
    ) -> Result<ChurnCounts, String> {
        let mut c = Client::connect(addr)?;
        let mut rng = SmallRng::seed_from_u64(
            self.seed ^ cfg.salt ^ self.index.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let mut out = ChurnCounts {
            hist: cfg.timed.then(histogram),
            ..ChurnCounts::default()
        };
        let n = self.stored.len();
        if n == 0 {
            return Ok(out);
        }
        // (local key, version set, or None for a delete)
        let mut batch: Vec<(usize, Option<u32>)> = Vec::with_capacity(cfg.depth);
        while Instant::now() < cfg.until {
            batch.clear();
            for _ in 0..cfg.depth {
                let j = rng.gen_range(0..n);
                if rng.gen_bool(cfg.delete_ratio) {
                    c.delete(self.id(j));
                    batch.push((j, None));
                } else {
                    let v = self.queue_set(&mut c, j);
                    batch.push((j, Some(v)));
                }
            }
            let sent = Instant::now();
            c.flush()?;
            for &(j, op) in &batch {
                let reply = match op {
                    Some(_) => c.read_store()?,
                    None => c.read_delete()?,
                };
                if let Some(h) = out.hist.as_mut() {
                    h.saturating_record((sent.elapsed().as_nanos() as u64).max(1));
                }
                match (op, reply) {
                    (Some(v), Reply::Stored) => {
                        out.sets += 1;
                        self.set_state(j, v);
                    }
                    (None, Reply::Deleted) => {
                        out.deletes += 1;
                        if self.stored[j] == GONE {
                            out.zombies_seen += 1;
                        }
                        self.set_state(j, GONE);
                    }
                    (None, Reply::NotFound) => {
                        out.deletes += 1;
                        if self.stored[j] != GONE && self.stored[j] != UNKNOWN {
                            out.lost_seen += 1;
                        }
                        self.set_state(j, GONE);
                    }
                    (op, other) => {
                        if op.is_some() {
                            out.sets += 1;
                        } else {
                            out.deletes += 1;
                        }
                        out.errors.note(format!("{other:?}"));
                        self.set_state(j, UNKNOWN);
                    }
                }
            }
            self.publish(progress, out.ops());
        }
        Ok(out)
    }

    /// Fetches every key of the partition (pipelined `get`s) and compares
    /// it with what the client knows.
    pub(crate) fn verify(&self, addr: SocketAddr) -> Result<Verify, String> {
        let mut c = Client::connect(addr)?;
        let mut out = Verify::default();
        let n = self.stored.len();
        let mut batch: Vec<usize> = Vec::with_capacity(100);
        let mut expected = 0usize;
        for j in 0..n {
            match self.stored[j] {
                UNKNOWN => {
                    out.unknown += 1;
                    continue;
                }
                GONE => expected += 64,
                v => expected += self.size(self.id(j), v) + 64,
            }
            c.get(self.id(j));
            batch.push(j);
            if batch.len() < 100 && expected < WRITE_BYTES && j + 1 < n {
                continue;
            }
            c.flush()?;
            for &j in &batch {
                let reply = c.read_get()?;
                let state = self.stored[j];
                if state != GONE {
                    out.live += 1;
                }
                match reply {
                    Reply::Miss if state == GONE => {}
                    Reply::Miss => out.lost += 1,
                    Reply::Hit if state == GONE => out.zombies += 1,
                    Reply::Hit => {
                        let id = self.id(j);
                        if check_value(id, &c.value) == Some(state)
                            && c.value.len() == self.size(id, state)
                        {
                            out.ok += 1;
                        } else {
                            out.wrong += 1;
                        }
                    }
                    other => return Err(format!("verify: {other:?} to a get")),
                }
            }
            batch.clear();
            expected = 0;
        }
        if !batch.is_empty() {
            return Err("verify: a batch was left unsent".into());
        }
        Ok(out)
    }
}

/// Runs `f` on every partition on its own thread; the results in order.
pub(crate) fn each<T: Send>(
    parts: &mut [Partition],
    f: impl Fn(&mut Partition) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = parts.iter_mut().map(|p| s.spawn(move || f(p))).collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a client thread panicked".into()))
            })
            .collect()
    })
}

/// Verifies every partition, in parallel.
pub(crate) fn verify_all(parts: &mut [Partition], addr: SocketAddr) -> Result<Verify, String> {
    let mut out = Verify::default();
    for v in each(parts, |p| p.verify(addr))? {
        out.add(&v);
    }
    Ok(out)
}

/// Loads every partition, in parallel, `mbps` MB/s in all (0: unpaced);
/// the set errors.
pub(crate) fn load_all(
    parts: &mut [Partition],
    addr: SocketAddr,
    mbps: f64,
) -> Result<Errors, String> {
    let mut out = Errors::default();
    let each_mbps = mbps / parts.len().max(1) as f64;
    for e in each(parts, |p| p.load(addr, each_mbps))? {
        out.add(&e);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_disjoint_and_cover_the_keys() {
        let mix: SizeMix = "1:8-8".parse().unwrap();
        let parts = Partition::split(10, 4, 1, &mix);
        let mut ids: Vec<u64> = parts
            .iter()
            .flat_map(|p| (0..p.sent.len()).map(|j| p.id(j)).collect::<Vec<_>>())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..10).collect::<Vec<u64>>());
    }

    #[test]
    fn live_counts_follow_the_states() {
        let mix: SizeMix = "1:10-10".parse().unwrap();
        let mut p = Partition::split(4, 1, 1, &mix).pop().unwrap();
        p.set_state(0, 1);
        p.set_state(1, 1);
        p.set_state(0, 2);
        assert_eq!((p.live_keys, p.live_bytes), (2, 20));
        p.set_state(1, UNKNOWN);
        p.set_state(0, GONE);
        assert_eq!((p.live_keys, p.live_bytes, p.unknown), (0, 0, 1));
        p.set_state(1, 3);
        assert_eq!(p.live_ids().collect::<Vec<_>>(), [1]);
    }
}
