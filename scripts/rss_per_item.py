#!/usr/bin/env python3
"""Memory per item: osmium vs genuine memcached, in the same run.

Starts each server (`-m 1024 -t 4` by default) on a free loopback port,
measures its resident set size (VmRSS from /proc/PID/status) right after start
(after one round trip) and again after loading N items (default 1,000,000 items
with 16-byte keys `k%015d` and 64-byte values) with pipelined
`set ... noreply` batches over a few connections, then a round trip on every
connection, a `get` of the first and last key and a check of `stats`
curr_items. Prints a table and the osmium/memcached ratio.

    python3 scripts/rss_per_item.py                  # both servers
    python3 scripts/rss_per_item.py --servers memcached
    python3 scripts/rss_per_item.py --items 200000 --value-size 100 --json

Exit status: 0 if every requested server was measured and verified, 1 if a
server misbehaved (lost items, wrong value, error), 2 if a server could not be
started (e.g. the osmium binary is not built yet); figures for the servers that
did work are printed in every case.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from support import servers  # noqa: E402


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                parts = line.split()
                assert parts[2] == "kB", line
                return int(parts[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def key_of(i, key_size):
    return b"k%0*d" % (key_size - 1, i)


def value_of(key, value_size):
    # item-specific content, so a server cannot share storage between values
    reps = value_size // len(key) + 1
    return (key * reps)[:value_size]


def build_batches(items, key_size, value_size, batch):
    """Pre-built pipelined `set ... noreply` payloads, reused for every server."""
    out = []
    for start in range(0, items, batch):
        parts = []
        for i in range(start, min(start + batch, items)):
            k = key_of(i, key_size)
            parts.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, value_size, value_of(k, value_size)))
        out.append(b"".join(parts))
    return out


class Conn:
    """A connection whose replies are read by a background thread, so a server
    that (wrongly) answers noreply sets cannot dead-lock the loader."""

    def __init__(self, address):
        self.sock = socket.create_connection(address, timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.unexpected = 0  # bytes received before the reply we waited for
        self.cond = threading.Condition()
        self.closed = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                chunk = b""
            with self.cond:
                if not chunk:
                    self.closed = True
                    self.cond.notify_all()
                    return
                self.buf += chunk
                self.cond.notify_all()

    def request(self, payload, terminator, timeout=120):
        """Send `payload`; return the reply that ends with `terminator`,
        discarding (and counting) anything that came before it."""
        self.sock.sendall(payload)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                idx = self.buf.find(terminator)
                if idx >= 0:
                    end = idx + len(terminator)
                    reply, self.buf = self.buf[:end], self.buf[end:]
                    return reply
                if self.closed:
                    raise RuntimeError(f"connection closed while waiting for {terminator!r}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"timed out waiting for {terminator!r}")
                self.cond.wait(left)

    def version(self):
        """Round trip: all earlier commands on this connection are done."""
        reply = self.request(b"version\r\n", b"\r\n")
        while not reply.startswith(b"VERSION "):
            self.unexpected += len(reply)  # e.g. STORED for a noreply set
            reply = self.request(b"", b"\r\n")
        return reply[len(b"VERSION "):-2].decode()

    def send(self, payload):
        self.sock.sendall(payload)

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.reader.join(timeout=5)


def stats(conn):
    reply = conn.request(b"stats\r\n", b"END\r\n")
    out = {}
    for line in reply.split(b"\r\n"):
        if line.startswith(b"STAT "):
            _, name, value = line.decode().split(" ", 2)
            out[name] = value
    return out


def get(conn, key):
    reply = conn.request(b"get " + key + b"\r\n", b"END\r\n")
    if reply == b"END\r\n":
        return None
    header, rest = reply.split(b"\r\n", 1)
    length = int(header.split()[3])
    return rest[:length]


def measure(kind, args, batches, opts):
    res = {"server": kind, "args": " ".join(args)}
    with servers.Server(kind, args) as srv:
        res["pid"] = srv.pid
        conns = [Conn(srv.address) for _ in range(opts.connections)]
        try:
            res["version"] = conns[0].version()
            for c in conns[1:]:
                c.version()
            res["rss_before"] = rss_bytes(srv.pid)

            t0 = time.monotonic()
            errors = []

            def load(ci):
                try:
                    for b in batches[ci::len(conns)]:
                        conns[ci].send(b)
                    conns[ci].version()  # round trip: this connection's sets are done
                except Exception as e:  # noqa: BLE001
                    errors.append(f"connection {ci}: {e}")

            threads = [threading.Thread(target=load, args=(i,)) for i in range(len(conns))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            res["load_seconds"] = time.monotonic() - t0
            if errors:
                raise RuntimeError("; ".join(errors))

            problems = []
            unexpected = sum(c.unexpected for c in conns)
            if unexpected:
                problems.append(f"server sent {unexpected} bytes of replies to noreply sets")
            for i in (0, opts.items - 1):
                k = key_of(i, opts.key_size)
                got = get(conns[0], k)
                if got != value_of(k, opts.value_size):
                    problems.append(f"get {k.decode()} returned {got[:80]!r}" if got is not None
                                    else f"get {k.decode()} missed")
            st = stats(conns[0])
            res["rss_after"] = rss_bytes(srv.pid)
            res["curr_items"] = int(st.get("curr_items", -1))
            res["evictions"] = int(st.get("evictions", -1))
            if res["curr_items"] != opts.items:
                problems.append(f"stats curr_items is {st.get('curr_items')} (expected {opts.items};"
                                f" evictions {st.get('evictions')})")
            res["growth_per_item"] = (res["rss_after"] - res["rss_before"]) / opts.items
            res["problems"] = problems
        finally:
            for c in conns:
                c.close()
    return res


def mib(n):
    return f"{n / (1 << 20):.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--key-size", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=64)
    ap.add_argument("--memory", type=int, default=1024, help="-m for both servers (MB)")
    ap.add_argument("--threads", type=int, default=4, help="-t for both servers")
    ap.add_argument("--extra-args", default="", help="more arguments for both servers")
    ap.add_argument("--connections", type=int, default=4, help="loader connections")
    ap.add_argument("--batch", type=int, default=10_000, help="sets per pipelined write")
    ap.add_argument("--servers", default="memcached,osmium",
                    help="comma-separated, order of runs (default memcached,osmium)")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    opts = ap.parse_args()
    digits = len(str(max(opts.items - 1, 0)))
    if opts.key_size - 1 < digits or opts.key_size > 250:
        ap.error(f"--key-size must be in {digits + 1}..250 for {opts.items} items")

    args = ["-m", str(opts.memory), "-t", str(opts.threads)] + opts.extra_args.split()
    kinds = [k.strip() for k in opts.servers.split(",") if k.strip()]

    t0 = time.monotonic()
    batches = build_batches(opts.items, opts.key_size, opts.value_size, opts.batch)
    print(f"built {opts.items} sets ({sum(map(len, batches)) / 1e6:.0f} MB of commands: "
          f"{opts.key_size}-byte keys, {opts.value_size}-byte values) in "
          f"{time.monotonic() - t0:.1f}s; server args: {' '.join(args)}", flush=True)

    results, status = [], 0
    for kind in kinds:
        binary = (servers.MEMCACHED_BIN or servers.ORACLE_BIN) if kind == "memcached" else servers.OSMIUM_BIN
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            hint = (" (build it with `cargo build --release --workspace`)" if kind == "osmium"
                    else " (build it with `bash scripts/build-memcached.sh`)")
            print(f"{kind}: SKIPPED: binary not found at {binary}{hint}", flush=True)
            results.append({"server": kind, "skipped": f"binary not found at {binary}"})
            status = max(status, 2)
            continue
        try:
            res = measure(kind, args, batches, opts)
        except Exception as e:  # noqa: BLE001
            print(f"{kind}: FAILED: {e}", flush=True)
            results.append({"server": kind, "failed": str(e)})
            status = max(status, 1)
            continue
        print(f"{kind} {res['version']} (pid {res['pid']}): loaded in {res['load_seconds']:.1f}s "
              f"({opts.items / res['load_seconds']:,.0f} sets/s)", flush=True)
        for p in res["problems"]:
            print(f"{kind}: PROBLEM: {p}", flush=True)
            status = max(status, 1)
        results.append(res)

    measured = {r["server"]: r for r in results if "rss_after" in r}
    print()
    header = (f"{'server':<10} {'RSS before':>12} {'RSS after':>12} {'growth/item':>12} "
              f"{'curr_items':>11} {'load s':>7}")
    print(header)
    print("-" * len(header))
    for r in results:
        if "rss_after" in r:
            print(f"{r['server']:<10} {mib(r['rss_before']) + ' MiB':>12} {mib(r['rss_after']) + ' MiB':>12} "
                  f"{r['growth_per_item']:>10.1f} B {r['curr_items']:>11} {r['load_seconds']:>7.1f}")
        else:
            print(f"{r['server']:<10} {'-- ' + ('skipped' if 'skipped' in r else 'failed'):>12}")
    if "osmium" in measured and "memcached" in measured:
        o, m = measured["osmium"], measured["memcached"]
        print(f"\nratio osmium/memcached: growth per item {o['growth_per_item'] / m['growth_per_item']:.3f}, "
              f"RSS after load {o['rss_after'] / m['rss_after']:.3f}")
    else:
        print("\nratio osmium/memcached: n/a (both servers are needed)")
    if opts.json:
        print(json.dumps({"items": opts.items, "key_size": opts.key_size, "value_size": opts.value_size,
                          "server_args": args, "results": results}, indent=2))
    return status


if __name__ == "__main__":
    sys.exit(main())
