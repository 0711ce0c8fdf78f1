#!/usr/bin/env python3
"""How fast osmium-proxy's admin token can be guessed on its stats port, and
how much log the guessing writes.

    python3 scripts/proxy_admin_guess.py [--bin target/release/osmium-proxy]
        [--seconds 5] [--connections 1,16]

For each connection count N: a fresh osmium-proxy (one pool, a placeholder
server, `--admin-token-file`, `-o LOG`), then N threads of one address
(127.0.0.1), each connecting to the stats port again and again and sending
`reload <wrong token>` right after connecting, for --seconds. Prints, per N:
tries answered per second, tokens actually compared per second (`ERROR bad
token` answers; a try refused unchecked is not a guess), and the log bytes
per 1,000 tries. Loopback only; the proxy is stopped by PID.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support import servers  # noqa: E402


def start(binary, workdir):
    token = os.path.join(workdir, "token")
    with open(token, "w") as f:
        f.write("the-right-token-0123456789abcdef\n")
    os.chmod(token, 0o600)
    log = os.path.join(workdir, "proxy.log")
    conf = os.path.join(workdir, "pool.yml")

    def argv(port):
        with open(conf, "w") as f:
            f.write(f"p:\n  listen: 127.0.0.1:{port}\n  servers:\n   - 127.0.0.1:9:1 placeholder\n")
        argv.stats = servers.free_port()
        return [binary, "-c", conf, "-a", "127.0.0.1", "-s", str(argv.stats),
                "--admin-token-file", token, "-o", log]

    proc, _ = servers.start_process(argv, name="osmium-proxy")
    return proc, argv.stats, log


def one_try(stats_port):
    """One connection, one wrong token: the answer line."""
    with socket.create_connection(("127.0.0.1", stats_port), timeout=30) as s:
        s.sendall(b"reload wrong-guess\r\n")
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return got.rsplit(b"\n", 2)[-2] if got.count(b"\n") >= 2 else got


def run(binary, connections, seconds):
    with tempfile.TemporaryDirectory(prefix="osmium-admin-guess-") as d:
        proc, stats_port, log = start(binary, d)
        try:
            counts = {"bad token": 0, "refused": 0, "other": 0}
            lock = threading.Lock()
            stop = time.monotonic() + seconds

            def guesser():
                while time.monotonic() < stop:
                    try:
                        line = one_try(stats_port)
                    except OSError:
                        line = b""
                    kind = ("bad token" if b"bad token" in line
                            else "refused" if line.startswith(b"ERROR") else "other")
                    with lock:
                        counts[kind] += 1

            started = time.monotonic()
            threads = [threading.Thread(target=guesser) for _ in range(connections)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.monotonic() - started
            time.sleep(0.2)
            log_bytes = os.path.getsize(log) if os.path.exists(log) else 0
        finally:
            servers.stop_process(proc)
    tries = sum(counts.values())
    print(f"{connections:>3} connection(s), {took:.1f} s: {tries / took:,.0f} tries/s answered, "
          f"{counts['bad token'] / took:,.2f} tokens compared/s "
          f"(bad token {counts['bad token']}, refused unchecked {counts['refused']}, "
          f"other {counts['other']}); log {log_bytes:,} bytes = "
          f"{1000 * log_bytes / max(tries, 1):,.0f} bytes per 1,000 tries")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(servers.ROOT, "target", "release", "osmium-proxy"))
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", default="1,16")
    a = ap.parse_args()
    for n in [int(x) for x in a.connections.split(",")]:
        run(a.bin, n, a.seconds)


if __name__ == "__main__":
    main()
