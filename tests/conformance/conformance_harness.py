"""Conformance harness: replay parsed cases over TCP, TLS and UDP against
the servers of a pool, and check the normalised replies.

The suite lives in three modules: case_format.py (case files: templates,
binary packets, steps), this one (connections, running a case, the
servers), replies.py (what came back, normalised and compared); this one
re-exports what the others define, so test_conformance.py, conftest.py,
run.py and capture_stats.py stay thin wrappers over `H.*`.  The case-file
format and the normalisations are documented in README.md (keep the two
in sync).
"""
import os
import re
import shlex
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/ -> import support.servers
from support import servers  # noqa: E402
from support.tls import ThreadSafeTlsSocket  # noqa: E402
from case_format import (  # noqa: E402,F401  (re-exported: H.parse_file, H.load_cases, ...)
    BASE_ARGS, BIN_SENTINEL, BIN_SENTINEL_REPLY, CASES_DIR, Case, CaseError, Step, Template,
    bin_sentinel_done, build_bin, load_cases, parse_bin_spec, parse_file,
)
from replies import (  # noqa: E402,F401  (re-exported: H.normalise, H.compare, ...)
    CLOSED, NO_SENTINEL, UDP_HEADER, Reply, compare, first_diff, normalise, render_dgram,
    reply_cas_values, segments, transcript,
)



SENTINEL = b"version\r\n"
SENTINEL_RE = re.compile(rb"(?:\A|(?<=\n))VERSION [^\r\n]*\r\n\Z")

IDLE_S = 0.15           # idle read: reply is complete after this long without new bytes
IDLE_CAP_S = 3.0        # idle read: overall cap
SENTINEL_IDLE_S = 1.0   # sentinel read: give up after this long without new bytes
SENTINEL_CAP_S = 10.0   # sentinel read: overall cap (multi-megabyte values)
DEFAULT_PAUSE_MS = 10   # pause between the writes of a split send

TARGETS = ("both", "memcached-self", "memcached", "osmium")


# --------------------------------------------------------------------------
# Talking to a server
# --------------------------------------------------------------------------

def _chunks(payload, opts):
    if "at" in opts:
        cuts = [0] + [a for a in opts["at"] if 0 < a < len(payload)] + [len(payload)]
        return [payload[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
    if "split" in opts:
        n = max(1, opts["split"])
        return [payload[i:i + n] for i in range(0, len(payload), n)]
    return [payload] if payload else []


# Servers of a TLS pool: their port and the client context to reach them.
TLS_PORTS = {}


def _connect(address, timeout):
    """A client socket to a server: TLS when the server is one of a TLS
    pool's (the conformance suite run over TLS)."""
    sock = socket.create_connection(address, timeout=timeout)
    ctx = TLS_PORTS.get(address[1])
    if ctx is not None:
        # The exchange sends from one thread while it reads in another.
        sock = ThreadSafeTlsSocket(sock, ctx)
    return sock


class Connection:
    def __init__(self, address, proto=None):
        self.sock = _connect(address, timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.closed = False
        # 'text' or 'binary': fixed by the server's -B, else decided by the
        # first byte sent (0x80 = binary), as memcached negotiates.
        self.proto = proto

    @classmethod
    def dead(cls):
        c = cls.__new__(cls)
        c.sock = socket.socket()
        c.closed = True
        c.proto = None
        return c

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def exchange(self, payload, opts):
        """Send payload (maybe in pieces), then read the reply per opts."""
        if self.proto is None and payload:
            self.proto = "binary" if payload[0] == 0x80 else "text"
        kind = self.proto or "text"
        binary = kind == "binary"
        sentinel = BIN_SENTINEL if binary else SENTINEL
        if self.closed:
            return Reply(b"", closed=True, kind=kind)
        idle = "idle" in opts
        noread = "noread" in opts
        pieces = _chunks(payload, opts)
        pause = opts.get("pause", DEFAULT_PAUSE_MS) / 1000.0
        use_sentinel = not idle and not noread
        done = threading.Event()
        send_err = []

        def writer():
            try:
                for i, p in enumerate(pieces):
                    if i:
                        time.sleep(pause)
                    self.sock.sendall(p)
                if "wait" in opts:
                    time.sleep(opts["wait"] / 1000.0)
                if use_sentinel:
                    self.sock.sendall(sentinel)
            except OSError as e:
                send_err.append(e)
            finally:
                done.set()

        self.sock.settimeout(None)
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        if noread:
            t.join()
            return None
        buf = bytearray()
        closed = False
        # If the payload itself may contain a version command, the first
        # "VERSION x" at the end of the buffer may be its reply rather than the
        # sentinel's: then read on until the line is followed by nothing for
        # IDLE_S and strip only the last one.
        sentinel_fast = use_sentinel and (binary or b"version" not in payload)
        if sentinel_fast:
            idle_s, cap_s = SENTINEL_IDLE_S, SENTINEL_CAP_S
        elif use_sentinel:
            idle_s, cap_s = IDLE_S, SENTINEL_CAP_S
        else:
            idle_s = (opts["idle"] / 1000.0) if opts.get("idle") not in (None, True) else IDLE_S
            cap_s = IDLE_CAP_S
        start = None
        last_rx = None
        while True:
            now = time.monotonic()
            if sentinel_fast and done.is_set() and (
                    bin_sentinel_done(buf) if binary else SENTINEL_RE.search(buf[-300:])):
                break
            if done.is_set():
                if start is None:
                    start = now
                ref = max(start, last_rx or start)
                remaining = min(ref + idle_s - now, start + cap_s - now)
                if remaining <= 0:
                    break
                timeout = remaining
            else:
                timeout = 0.02
            self.sock.settimeout(timeout)
            try:
                d = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
                closed = True
                break
            if not d:
                closed = True
                break
            buf += d
            last_rx = time.monotonic()
        t.join()
        if closed:
            self.closed = True
        data = bytes(buf)
        no_sentinel = False
        if use_sentinel and not closed:
            if binary:
                if bin_sentinel_done(data):
                    data = data[:-len(BIN_SENTINEL_REPLY)]
                else:
                    no_sentinel = True
            else:
                m = SENTINEL_RE.search(data[-300:])
                if m:
                    data = data[:len(data) - (len(m.group(0)))]
                else:
                    no_sentinel = True
        return Reply(data, closed=closed, no_sentinel=no_sentinel, kind=kind)


UDP_GRACE_S = 0.03      # udp read: after a complete message, wait this long for more datagrams


class UdpClient:
    """One client UDP socket, connected to the server's UDP port."""

    def __init__(self, address):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.connect(address)
        self.next_rid = 1

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _recv_pending(self, dgrams):
        """Add datagrams that are already queued (no waiting)."""
        self.sock.setblocking(False)
        try:
            while True:
                dgrams.append(self.sock.recv(1 << 17))
        except (BlockingIOError, ConnectionRefusedError):
            pass
        finally:
            self.sock.setblocking(True)

    def exchange(self, payload, opts):
        rid = opts.get("rid")
        if rid is None:
            rid = self.next_rid
        self.next_rid = (rid + 1) & 0xFFFF
        if "noframe" not in opts:
            payload = UDP_HEADER.pack(rid, opts.get("seq", 0), opts.get("total", 1),
                                      opts.get("rsv", 0)) + payload
        refused = False
        try:
            self.sock.send(payload)
        except ConnectionRefusedError:
            refused = True
        if "wait" in opts:
            time.sleep(opts["wait"] / 1000.0)
        if "noread" in opts:
            return None
        dgrams = []
        idle_s = (opts["idle"] / 1000.0) if opts.get("idle") not in (None, True) else IDLE_S
        use_idle = "idle" in opts
        start = time.monotonic()
        last = start
        complete_at = None
        while not refused:
            now = time.monotonic()
            if complete_at is None and not use_idle and _udp_complete(dgrams, rid):
                complete_at = now
            if complete_at is not None:
                deadline = complete_at + UDP_GRACE_S
            else:
                deadline = last + idle_s
            deadline = min(deadline, start + IDLE_CAP_S)
            if now >= deadline:
                break
            self.sock.settimeout(deadline - now)
            try:
                dgrams.append(self.sock.recv(1 << 17))
                last = time.monotonic()
            except socket.timeout:
                continue
            except ConnectionRefusedError:
                refused = True
        data = b"".join(render_dgram(d) for d in dgrams) + (b"<udp-refused>" if refused else b"")
        return Reply(data, kind="udp", dgrams=dgrams)


def _udp_complete(dgrams, rid):
    """True when every datagram of the (first) reply message to request rid is in."""
    seqs = set()
    total = None
    for d in dgrams:
        if len(d) >= 8:
            r, seq, tot, _ = UDP_HEADER.unpack(d[:8])
            if r == rid:
                seqs.add(seq)
                total = tot if total is None else total
    return total is not None and len(seqs) >= total


class TickWatcher:
    """Watches one server's clock (the `time` stat) from a private connection
    while somebody waits for the clock to advance; see the `tick` step."""

    POLL_S = 0.004

    def __init__(self, address):
        self.address = address
        self.cond = threading.Condition()
        self.ticks = 0
        # The server's `time` when the last tick was seen, and when (monotonic).
        self.tick_time = None
        self.waiting = 0
        self.stopped = False
        self.thread = None

    def _stat_time(self, sock):
        sock.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            d = sock.recv(65536)
            if not d:
                raise OSError("connection closed")
            buf += d
        m = re.search(rb"\r\nSTAT time (\d+)\r\n", buf)
        return int(m.group(1)) if m else None

    def _run(self):
        sock = None
        last = None
        while True:
            with self.cond:
                while not self.waiting and not self.stopped:
                    last = None  # the clock may advance unseen while nobody waits
                    self.cond.wait()
                if self.stopped:
                    break
            try:
                if sock is None:
                    sock = _connect(self.address, timeout=3)
                t = self._stat_time(sock)
            except OSError:
                if sock:
                    sock.close()
                sock = None
                time.sleep(0.05)
                continue
            if last is not None and t != last:
                with self.cond:
                    self.ticks += 1
                    self.tick_time = (t, time.monotonic())
                    self.cond.notify_all()
            last = t
            time.sleep(self.POLL_S)
        if sock:
            sock.close()

    def wait(self, timeout=2.5):
        """Block until the server's clock advances (at most timeout seconds)."""
        with self.cond:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True)
                self.thread.start()
            # The watcher only counts changes it saw from a reading taken
            # while this waiter was registered, so a tick is a fresh one.
            self.waiting += 1
            self.cond.notify_all()
            target = self.ticks + 1
            deadline = time.monotonic() + timeout
            try:
                while self.ticks < target and not self.stopped:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.cond.wait(left)
                return True
            finally:
                self.waiting -= 1

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


def _read_exact_line(sock, expect, timeout=3.0):
    sock.settimeout(timeout)
    buf = b""
    deadline = time.monotonic() + timeout
    while len(buf) < len(expect) and time.monotonic() < deadline:
        try:
            d = sock.recv(4096)
        except socket.timeout:
            break
        if not d:
            break
        buf += d
    return buf


BIN_FLUSH = struct.pack(">BBHBBHIIQ", 0x80, 0x08, 0, 0, 0, 0, 0, 0, 0)
BIN_FLUSH_OK = struct.pack(">BBHBBHIIQ", 0x81, 0x08, 0, 0, 0, 0, 0, 0, 0)


def _prelude(case, conn, address):
    """flush_all before the case: in text on connection 1, or in binary when
    the server only speaks binary (-B binary), or on a separate text
    connection when connection 1 is going to speak binary."""
    if case.binding_protocol() == "binary":
        conn.sock.sendall(BIN_FLUSH)
        got = _read_exact_line(conn.sock, BIN_FLUSH_OK)
        if got != BIN_FLUSH_OK:
            raise CaseError(f"{case.name}: binary prelude flush got {got!r} from {address}")
        return
    first = next((s for s in case.steps if s.kind == "send" and "udp" not in s.opts
                  and s.opts.get("conn", 1) == 1), None)
    side = None
    if first is not None and case.binding_protocol() is None and first.template.parts:
        p0 = first.template.parts[0]
        if (isinstance(p0, tuple) and p0[0] == "bin") or (isinstance(p0, bytes) and p0[:1] == b"\x80"):
            side = Connection(address)
    sock = (side or conn).sock
    try:
        sock.sendall(b"flush_all\r\n")
        got = _read_exact_line(sock, b"OK\r\n")
    finally:
        if side:
            side.close()
    if got != b"OK\r\n":
        raise CaseError(f"{case.name}: prelude 'flush_all' got {got!r} from {address}")


def run_case_on(case, server):
    """Replay one case on one server; returns a list of (step_index, Reply)."""
    address = server.address
    proto = case.binding_protocol()
    conns = {1: Connection(address, proto)}
    udps = {}
    out = []
    ctx = {"cas": []}
    try:
        if case.prelude:
            _prelude(case, conns[1], address)
        for i, step in enumerate(case.steps):
            if step.kind == "sleep":
                time.sleep(step.seconds)
                continue
            if step.kind == "tick":
                if server.tick_watcher.wait():
                    ctx["tick"] = server.tick_watcher.tick_time
                continue
            if "udp" in step.opts:
                n = step.opts["udp"]
                if n not in udps:
                    udps[n] = UdpClient(server.udp_address)
                r = udps[n].exchange(step.template.expand(ctx), step.opts)
                if r is not None:
                    out.append((i, r))
                    _capture_cas(ctx, r)
                continue
            n = step.opts.get("conn", 1)
            if step.kind == "reconnect":
                if n in conns:
                    conns[n].close()
                try:
                    conns[n] = Connection(address, proto)
                    out.append((i, Reply(b"<connected>")))
                except OSError:
                    conns[n] = Connection.dead()
                    out.append((i, Reply(b"<refused>")))
                continue
            if n not in conns:
                conns[n] = Connection(address, proto)
            payload = step.template.expand(ctx)
            r = conns[n].exchange(payload, step.opts)
            if r is None:  # noread: its reply is read with the next step
                continue
            out.append((i, r))
            _capture_cas(ctx, r)
    finally:
        for c in list(conns.values()) + list(udps.values()):
            c.close()
    return out


def _capture_cas(ctx, reply):
    for cas in reply_cas_values(reply):
        if cas != b"0" and cas not in ctx["cas"]:
            ctx["cas"].append(cas)


# Servers
# --------------------------------------------------------------------------

class _Drained:
    """Keep a server's stderr pipe drained (verbosity output must never block it)."""

    def __init__(self, server):
        self.server = server
        self.tail = bytearray()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            while True:
                d = self.server.proc.stderr.read1(65536)
                if not d:
                    return
                self.tail += d
                del self.tail[:-65536]
        except (ValueError, OSError):
            return


def target_kinds(target):
    if target == "both":
        return ("memcached", "osmium")
    if target == "memcached-self":
        return ("memcached", "memcached")
    if target == "memcached":
        return ("memcached",)
    if target == "osmium":
        return ("osmium",)
    raise ValueError(f"unknown target {target!r}; one of {TARGETS}")


# More arguments for every osmium the suite starts (env
# CONFORMANCE_OSMIUM_ARGS, split as a shell would), e.g. "-o compression=all":
# the same cases must pass whatever osmium stores inside.
OSMIUM_EXTRA_ARGS = shlex.split(os.environ.get("CONFORMANCE_OSMIUM_ARGS", ""))


def osmium_missing():
    b = servers.OSMIUM_BIN
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        return b
    return None


class Pool:
    """One server per (kind slot, flag set, group), started lazily; with
    `certs` (support.tls.Certs), every server speaks TLS (`-Z`) and the
    cases run over it."""

    def __init__(self, target, certs=None):
        self.certs = certs
        self.target = target
        self.kinds = target_kinds(target)
        self.servers = {}
        self.stopping = []
        self.lock = threading.Lock()

    def get(self, case):
        key = case.server_key()
        with self.lock:
            if key not in self.servers:
                started = []
                try:
                    for kind in self.kinds:
                        tls = self.certs.server_args(ca=False) if self.certs else []
                        extra = OSMIUM_EXTRA_ARGS if kind == "osmium" else []
                        srv = servers.Server(kind, list(key[0]) + extra + tls,
                                             udp_port="auto" if key[1].endswith("+udp") else None)
                        # A port a stopped TLS server had may come back
                        # to a plain one: the map says what it is now.
                        if self.certs:
                            TLS_PORTS[srv.port] = self.certs.client_context()
                        else:
                            TLS_PORTS.pop(srv.port, None)
                        srv._drain = _Drained(srv)
                        srv.tick_watcher = TickWatcher(srv.address)
                        started.append(srv)
                except Exception:
                    for s in started:
                        s.stop()
                    raise
                self.servers[key] = started
            return self.servers[key]

    def release(self, case):
        """Stop a case's private ("group: fresh") servers, in the background:
        memcached takes about a second to exit after SIGTERM."""
        key = case.server_key()
        if key[1].startswith("fresh:"):
            with self.lock:
                pair = self.servers.pop(key, [])
            for srv in pair:
                srv.tick_watcher.stop()
                TLS_PORTS.pop(srv.port, None)
                t = threading.Thread(target=srv.stop, daemon=True)
                t.start()
                self.stopping.append(t)

    def stop_all(self):
        with self.lock:
            pairs = list(self.servers.values())
            self.servers.clear()
        for pair in pairs:
            for srv in pair:
                srv.tick_watcher.stop()
                TLS_PORTS.pop(srv.port, None)
        threads = [threading.Thread(target=srv.stop) for pair in pairs for srv in pair]
        for t in threads:
            t.start()
        for t in threads + self.stopping:
            t.join()


def labels(target):
    kinds = target_kinds(target)
    if len(kinds) == 2 and kinds[0] == kinds[1]:
        return (kinds[0] + "#1", kinds[1] + "#2")
    return kinds


def run_case(pool, case):
    """Run one case on every server of the target concurrently; returns results per server."""
    srvs = pool.get(case)
    try:
        with ThreadPoolExecutor(len(srvs)) as ex:
            futs = [ex.submit(run_case_on, case, s) for s in srvs]
            return [f.result() for f in futs]
    finally:
        pool.release(case)


def run_cases_concurrently(pool, cases):
    """Run many cases at once (used for the cases that sleep): {name: results}."""
    out = {}
    if not cases:
        return out
    with ThreadPoolExecutor(len(cases)) as ex:
        futs = {c.name: ex.submit(_safe_run, pool, c) for c in cases}
        for name, f in futs.items():
            out[name] = f.result()
    return out


def _safe_run(pool, case):
    try:
        return run_case(pool, case)
    except Exception as e:  # reported by the test item of that case
        return e


def check(case, target, results):
    """Return None when the servers agree, else the failure message."""
    names = labels(target)
    if isinstance(results, Exception):
        raise results
    first = results[0]
    for idx, r in first:
        if r.no_sentinel and names[0].startswith("memcached"):
            raise CaseError(f"case {case.name}: memcached did not answer the sentinel after step "
                            f"{idx + 1} ({case.steps[idx].where}); the case is out of sync there: "
                            f"use >[idle] or >[noread] for that step.\n{transcript(case, first)}")
    if len(results) == 2:
        return compare(case, names, results[0], results[1])
    return None
