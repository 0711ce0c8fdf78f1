#!/usr/bin/env python3
"""The first `set` on a fresh server against the sets after it, for
memcached 1.6.45 and one or two osmium builds, alternating.

Each round starts every server afresh (in a new order each round: A B C,
then C B A, ...), on one loopback connection sends `version` (the
connection's own set-up out of the way), then times the first `set` and
the 200 after it, each a round trip. Prints, per server, the median over
the rounds of the first set's latency and of the later sets' median, the
ratio of the two, and the first set's ratio to memcached's.

Usage (from the repository root, after `cargo build --release -p
osmium-server` and `bash scripts/build-memcached.sh`):

    python3 scripts/first_request.py [--rounds 10] [--osmium-b PATH]

`--osmium-b` adds a second osmium build (an earlier one, say) as
`osmium-b`.
"""
import argparse
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support import servers  # noqa: E402

LATER = 200


def measure(kind, binary):
    """(first set, median of the later sets), in milliseconds."""
    if kind == "osmium-b":
        old = servers.OSMIUM_BIN
        servers.OSMIUM_BIN = binary
        try:
            server = servers.Server("osmium", ["-m", "64"])
        finally:
            servers.OSMIUM_BIN = old
    else:
        server = servers.Server(kind, ["-m", "64"])
    try:
        with socket.create_connection(server.address) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            f = s.makefile("rb")
            s.sendall(b"version\r\n")
            f.readline()
            times = []
            for i in range(LATER + 1):
                start = time.perf_counter()
                s.sendall(b"set key:%d 0 0 5\r\nhello\r\n" % i)
                assert f.readline() == b"STORED\r\n"
                times.append((time.perf_counter() - start) * 1e3)
        return times[0], statistics.median(times[1:])
    finally:
        server.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--osmium-b", help="a second osmium binary, run as osmium-b")
    a = p.parse_args()
    kinds = ["memcached", "osmium"] + (["osmium-b"] if a.osmium_b else [])
    got = {k: [] for k in kinds}
    for r in range(a.rounds):
        order = kinds if r % 2 == 0 else list(reversed(kinds))
        for k in order:
            got[k].append(measure(k, a.osmium_b))
    base = statistics.median(f for f, _ in got["memcached"])
    print(f"{'server':<10} {'first set':>10} {'later sets':>11} {'first/later':>12} "
          f"{'first/memcached':>16}   ({a.rounds} rounds, medians)")
    for k in kinds:
        first = statistics.median(f for f, _ in got[k])
        later = statistics.median(l for _, l in got[k])
        print(f"{k:<10} {first:>8.3f}ms {later:>9.3f}ms {first / later:>12.1f} "
              f"{first / base:>16.2f}")


if __name__ == "__main__":
    main()
