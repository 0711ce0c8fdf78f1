"""A replicated ring of three osmium servers behind osmium-proxy, under a
write and read load, with one server killed (kill -9) and started again:

- sync replication: no acknowledged write is lost (every key reads back, through
  the proxy, as the last value acknowledged for it, or as a later write whose
  reply was lost in the failure);
- reads are answered throughout: osmium-proxy sends a read that meets the
  failing server to its replica (the fraction answered while the server was
  down is printed, and must be all of them);
- the restarted server catches up (`STAT replication_catchup done`) and takes
  its keys back: afterwards it holds the latest value of every key it owns.

Server i is started `--replicate-to` server i+1 (the last to the first), the
order of the proxy's `servers:` list, which is all osmium-proxy needs to send a
dead server's keys to the server holding their copies.
"""
import atexit
import os
import random
import signal
import socket
import tempfile
import threading
import time

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheError

from support import servers

from .proxies import Proxy, pool_yaml

WRITERS = 3
READERS = 2


def replication_secret():
    """The ring's shared secret: a file readable by its owner only (the
    servers refuse any other), made once per run."""
    global _SECRET
    if _SECRET is None:
        fd, _SECRET = tempfile.mkstemp(prefix="osmium-replication-secret-")
        os.write(fd, os.urandom(32).hex().encode() + b"\n")
        os.close(fd)  # mkstemp makes it mode 0600
        atexit.register(os.unlink, _SECRET)
    return _SECRET


_SECRET = None


def ring_args(ports, i, mode):
    return ["-m", "64", "-t", "2", "--replicate-to", f"127.0.0.1:{ports[(i + 1) % len(ports)]}",
            "--replication", mode, "--replication-secret", replication_secret()]


def stat(addr, name):
    with socket.create_connection(addr, timeout=2) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    for line in data.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == name:
            return parts[2]
    return None


def client(addr):
    # Well above the proxy's `timeout` (400 ms), after which it sends a read
    # to the replica: a read is unanswered only if that fails too.
    return Client(addr, connect_timeout=3, timeout=3, default_noreply=False)


class Load:
    """Writers set their own keys with increasing values (so the last
    acknowledged value of every key is known); readers get keys written."""

    def __init__(self, addr, keys_per_writer=400):
        self.addr = addr
        self.stop = threading.Event()
        self.acked = {}   # key -> last acknowledged value
        self.maybe = {}   # key -> values whose write failed (may have landed)
        self.lock = threading.Lock()
        self.reads = []   # (time, answered: bool)
        self.keys_per_writer = keys_per_writer
        self.threads = [threading.Thread(target=self.writer, args=(w,)) for w in range(WRITERS)]
        self.threads += [threading.Thread(target=self.reader, args=(r,)) for r in range(READERS)]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()

    def writer(self, w):
        c = client(self.addr)
        n = 0
        while not self.stop.is_set():
            key = f"fo_{w}_{n % self.keys_per_writer}"
            value = f"{w}-{n}".encode()
            n += 1
            try:
                ok = c.set(key, value)
            except (MemcacheError, OSError):
                ok = False
                c.close()
            with self.lock:
                if ok:
                    self.acked[key] = value
                    self.maybe.pop(key, None)
                else:
                    self.maybe.setdefault(key, set()).add(value)

    def reader(self, r):
        c = client(self.addr)
        rng = random.Random(r)
        while not self.stop.is_set():
            with self.lock:
                keys = list(self.acked)
            if not keys:
                time.sleep(0.01)
                continue
            try:
                c.get(rng.choice(keys))
                answered = True
            except (MemcacheError, OSError):
                answered = False
                c.close()
            self.reads.append((time.time(), answered))


@pytest.fixture
def ring():
    ports = [servers.free_port() for _ in range(3)]
    started = []
    try:
        for i, port in enumerate(ports):
            started.append(servers.Server("osmium", ring_args(ports, i, "sync"), port=port))
    except BaseException:
        for s in started:
            s.stop()
        raise
    yield ports, started
    for s in started:
        s.stop()


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_kill_9_of_one_server_in_sync_mode_loses_no_acknowledged_write(ring):
    ports, procs = ring
    proxy_port = servers.free_port()
    yaml = pool_yaml(proxy_port, procs, extra="auto_eject_hosts: true\nfailover: replica\n")
    yaml = yaml.replace("timeout: 2000", "timeout: 400").replace(
        "server_retry_timeout: 1000", "server_retry_timeout: 300")
    proxy = Proxy("osmium-proxy", yaml, proxy_port)
    try:
        for s in procs:
            wait_for(lambda s=s: stat(s.address, "replication_catchup") == "done", 10,
                     f"server {s.port} to catch up at start")
        load = Load(proxy.address)
        load.start()
        time.sleep(1.0)
        victim = procs[1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.proc.wait()
        killed_at = time.time()
        time.sleep(2.0)
        procs[1] = servers.Server("osmium", ring_args(ports, 1, "sync"), port=ports[1])
        restarted_at = time.time()
        wait_for(lambda: stat(procs[1].address, "replication_catchup") == "done", 20,
                 "the restarted server to catch up")
        time.sleep(1.5)  # the proxy's retry, then writes to the server again
        load.finish()
        during = [ok for (t, ok) in load.reads if killed_at <= t <= restarted_at]
        answered = sum(during) / max(1, len(during))
        print(f"\nreads while a server was down: {len(during)}, answered {answered:.3%}; "
              f"writes acknowledged: {len(load.acked)} keys")
        assert during, "no reads while the server was down"
        assert answered == 1.0, f"only {answered:.3%} of reads answered during the failover"
        # Every acknowledged write is there, through the proxy.
        c = client(proxy.address)
        keys = sorted(load.acked)
        got = {}
        for start in range(0, len(keys), 100):
            got.update(c.get_many(keys[start:start + 100]))
        lost = [k for k in keys
                if got.get(k) != load.acked[k] and got.get(k) not in load.maybe.get(k, set())]
        assert not lost, f"{len(lost)} acknowledged writes lost, e.g. " + ", ".join(
            f"{k}: {load.acked[k]!r} read {got.get(k)!r}" for k in lost[:5])
        time.sleep(0.5)  # the follow link streams what the ring wrote last
        # The restarted server holds the latest value of the keys it owns
        # (those the proxy now sends to it): read it directly.
        direct = client(procs[1].address)
        own = {}
        for start in range(0, len(keys), 100):
            own.update(direct.get_many(keys[start:start + 100]))
        assert own, "the restarted server holds none of the keys"
        stale = [k for k, v in own.items() if v != got[k]]
        assert not stale, f"{len(stale)} keys stale on the restarted server, e.g. {stale[:5]}"
    finally:
        proxy.stop()
