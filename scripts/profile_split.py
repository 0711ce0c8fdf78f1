#!/usr/bin/env python3
"""Where a request's server CPU goes: the split seed 000 (Mercury) draws.

Starts a server (osmium, memcached or the floor), preloads it and drives
it with `osmium-bench load --addr ... --pid ...` while `perf record`
samples the server; then sorts every sampled symbol into stages and prints
each stage's share of the server's time and its microseconds per request
(share x the CPU per request that `load` measured from /proc):

  network stack  kernel code (syscalls, TCP/IP over loopback, epoll, wake-ups)
  parse          request framing, tokenizing, number parsing, the prefetch peek
  hash           the key hash (xxh3)
  engine         the store: index lookup, item access, eviction bookkeeping
  respond        reply encoding and copying values into the output buffer
  event loop     the worker loop, sessions, buffers (what is left of osmium)
  libc           syscall wrappers and memcpy not attributed above

perf samples with cpu-clock only on this VM, and it costs some CPU itself,
so the shares matter more than the absolute figures.

Usage (from the repository root, after `cargo build --release --workspace`):
    python3 scripts/profile_split.py [--server osmium|memcached|floor]
        [--seconds 5] [-- extra load options, e.g. --depth 16]
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict

STAGES = [
    ("hash", re.compile(r"xxh3|xxhash|hash_key")),
    ("parse", re.compile(r"osmium_protocol::(text|meta|binary::(scan|decode|parse)|numbers|peek)|Tokens|parse_|scan_line|memchr|try_read_command|tokenize|safe_strto")),
    ("respond", re.compile(r"encode|value_header|put_hit|itoa|fmt|memmove|memcpy|extend_from_slice|process_get_command|add_iov|resp_")),
    ("engine", re.compile(r"osmium_store|item_get|assoc_find|do_item|item_|lru_|slabs_|hash_")),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage_of(dso, sym):
    if dso.startswith("[kernel"):
        return "network stack"
    for name, pattern in STAGES:
        if pattern.search(sym):
            return name
    if "libc" in dso:
        return "libc"
    return "event loop"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="osmium", choices=["osmium", "memcached", "floor"])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = [x for x in a.rest if x != "--"]
    bench = "target/release/osmium-bench"
    port = free_port()
    cmd = {
        "osmium": ["target/release/osmium", "-u", "root", "-t", "1", "-m", "1024", "-U", "0"],
        "memcached": ["/usr/bin/memcached", "-u", "root", "-t", "1", "-m", "1024", "-U", "0"],
        "floor": [bench, "floor"],
    }[a.server] + ["-p", str(port)] + ([] if a.server == "floor" else ["-l", "127.0.0.1"])
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    data = f"/tmp/profile_split.{os.getpid()}.data"
    try:
        time.sleep(0.5)
        addr = f"127.0.0.1:{port}"
        load = [bench, "load", "--addr", addr, "--pid", str(server.pid)] + extra
        # Preload and warm up without the profiler.
        subprocess.run(load + ["--duration", "1"], check=True, capture_output=True)
        perf = subprocess.Popen(
            ["perf", "record", "-q", "-e", "cpu-clock", "-F", "4999", "-p", str(server.pid), "-o", data],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        out = subprocess.run(load + ["--preload", "false", "--duration", str(a.seconds), "--warmup", "0.2"],
                             check=True, capture_output=True, text=True).stdout
        perf.send_signal(signal.SIGINT)
        perf.wait()
        m = re.search(r"cpu\s+([\d.]+) us/req", out)
        cpu = float(m.group(1)) if m else float("nan")
        rep = subprocess.run(
            ["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym", "--stdio", "-g", "none"],
            check=True, capture_output=True, text=True).stdout
    finally:
        server.kill()
        server.wait()
        if os.path.exists(data):
            os.unlink(data)
    shares = defaultdict(float)
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*)", line)
        if m:
            shares[stage_of(m.group(2), m.group(3))] += float(m.group(1))
    total = sum(shares.values()) or 1.0
    print(f"{a.server}: {out.strip()}")
    print(f"{'stage':>14} {'share':>7} {'us/req':>7}")
    for name in ["network stack", "parse", "hash", "engine", "respond", "event loop", "libc"]:
        share = shares.get(name, 0.0) / total
        print(f"{name:>14} {share * 100:6.1f}% {share * cpu:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
