#!/usr/bin/env python3
"""Peak resident memory of osmium and memcached under the front-door
scenarios, one server after the other, same machine, same -m:

  1. 5,000 clients each get a 10 KiB value from a full -m 64 cache
     (connect, ask, wait a second, read), then close;
  2. one client sends `get ` followed by 300 MB without a newline: one
     endless key, or (`--many-keys`, osmium only by default) short keys
     separated by spaces; then the newline;
  3. 300 clients with 4 KiB receive buffers each pipeline 300 gets of
     10 KiB values (3 MB of replies) and read nothing for 1.5 s.

Prints, per server and scenario, the peak RSS sampled every 10 ms, and the
RSS 3 s after the clients closed. The bound osmium's tests assert is
1.1 x -m + 64 MB (134.4 MiB at -m 64).

Usage (from the repository root, after `cargo build --release --workspace`
and `bash scripts/build-memcached.sh`):

    python3 scripts/rss_front_door.py [--servers osmium,memcached]
"""
import argparse
import os
import resource
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support import servers  # noqa: E402

MEMORY_MB = 64
VALUE = 10 * 1024
ITEMS = 7500


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Peak:
    """Samples a process's RSS every 10 ms until stopped."""

    def __init__(self, pid):
        self.pid, self.peak, self.running = pid, 0, True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            self.peak = max(self.peak, rss_kb(self.pid))
            time.sleep(0.01)

    def stop(self):
        self.running = False
        self.thread.join()
        return max(self.peak, rss_kb(self.pid))


def connect(port, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    return s


def read_until(s, end):
    out = b""
    while not out.endswith(end):
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        out += chunk
    return out


def fill(port):
    c = connect(port)
    value = b"v" * VALUE
    for i in range(ITEMS):
        c.sendall(b"set key%d 0 0 %d noreply\r\n%s\r\n" % (i, VALUE, value))
    c.sendall(b"version\r\n")
    read_until(c, b"\r\n")
    c.close()


def many_clients(srv):
    peak = Peak(srv.pid)
    conns = [connect(srv.port) for _ in range(5000)]
    for i, c in enumerate(conns):
        c.sendall(b"get key%d\r\n" % (ITEMS - 1 - i % 3000))
    time.sleep(1)
    for c in conns:
        read_until(c, b"END\r\n")
    during = peak.stop()
    for c in conns:
        c.close()
    time.sleep(3)
    return during, rss_kb(srv.pid)


def long_get_line(srv, many_keys):
    peak = Peak(srv.pid)
    if many_keys:
        chunk = b"".join(b"k%06d " % (i % 1000000) for i in range((1 << 20) // 8))
    else:
        chunk = b"k" * (1 << 20)
    c = connect(srv.port)
    c.sendall(b"get ")
    for _ in range(300):
        c.sendall(chunk)
    c.sendall(b"\r\n")
    read_until(c, b"\r\n")
    during = peak.stop()
    c.close()
    time.sleep(3)
    return during, rss_kb(srv.pid)


def slow_readers(srv):
    peak = Peak(srv.pid)
    gets = b"".join(b"get key%d\r\n" % (ITEMS - 1 - i) for i in range(300))
    conns = []
    for _ in range(300):
        c = connect(srv.port, rcvbuf=4096)
        c.sendall(gets)
        conns.append(c)
    time.sleep(1.5)
    for c in conns:
        ends, tail = 0, b""
        while ends < 300:
            chunk = c.recv(1 << 16)
            if not chunk:
                break
            tail += chunk
            ends += tail.count(b"END\r\n")
            tail = tail[-4:]
    during = peak.stop()
    for c in conns:
        c.close()
    time.sleep(3)
    return during, rss_kb(srv.pid)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", default="osmium,memcached")
    ap.add_argument("--many-keys", default="osmium",
                    help="servers to send the 300 MB line as short keys (memcached 1.6.45 "
                         "allocates a response per key: 37.5 M keys took 24 GB here until "
                         "the kernel killed it)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 20000)), hard))
    limit = MEMORY_MB * 1.1 + 64
    print(f"bound: {limit:.1f} MiB (1.1 x -m {MEMORY_MB} + 64)")
    print(f"{'server':<10} {'scenario':<34} {'peak MiB':>9} {'after MiB':>10}")
    for kind in args.servers.split(","):
        scenarios = [
            ("5,000 clients, 10 KiB gets", many_clients),
            ("300 MB get line, one key", lambda srv: long_get_line(srv, False)),
        ]
        if kind in args.many_keys.split(","):
            scenarios.append(("300 MB get line, short keys", lambda srv: long_get_line(srv, True)))
        scenarios.append(("300 slow readers, 3 MB each", slow_readers))
        for name, scenario in scenarios:
            extra = ["-m", str(MEMORY_MB), "-c", "12000", "-t", "4"]
            with servers.Server(kind, extra) as srv:
                fill(srv.port)
                full = rss_kb(srv.pid)
                during, after = scenario(srv)
                print(f"{kind:<10} {name:<34} {during / 1024:>9.1f} {after / 1024:>10.1f}"
                      f"   (full cache {full / 1024:.1f})", flush=True)


if __name__ == "__main__":
    main()
