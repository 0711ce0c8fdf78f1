#!/usr/bin/env python3
"""Capture genuine memcached's stats outputs into reference/memcached-<version>-stats.txt.

  python3 tests/conformance/capture_stats.py

Starts memcached with `-m 64 -t 4` (plus the suite's usual -p/-U/-l), runs a short
scripted sequence so the counters and slab tables are not empty, then records the
exact reply bytes of each stats sub-command.  The file is for the osmium author:
the list and ORDER of stat names, and example values.
"""
import os
import socket
import time

import conformance_harness as H

OUT_DIR = os.path.join(H.HERE, "reference")

SCRIPT = [
    b"set foo:a 0 0 5\r\nhello\r\n",
    b"set foo:b 7 0 3\r\nabc\r\n",
    b"set bar:c 0 0 2\r\n10\r\n",
    b"set big 0 0 100000\r\n" + b"x" * 100000 + b"\r\n",
    b"get foo:a foo:b nope\r\n",
    b"gets bar:c\r\n",
    b"incr bar:c 5\r\n",
    b"decr bar:c 1\r\n",
    b"incr nope 1\r\n",
    b"decr nope 1\r\n",
    b"touch foo:a 100\r\n",
    b"touch nope 100\r\n",
    b"cas foo:b 0 0 1 1\r\nz\r\n",
    b"cas nope 0 0 1 1\r\nz\r\n",
    b"delete foo:b\r\n",
    b"delete nope\r\n",
    b"gat 100 foo:a\r\n",
]

COMMANDS = [
    b"stats\r\n",
    b"stats settings\r\n",
    b"stats items\r\n",
    b"stats slabs\r\n",
    b"stats conns\r\n",
    b"stats sizes\r\n",
    b"stats detail on\r\n",
    b"get foo:a foo:zz\r\n",
    b"set foo:n 0 0 1\r\n1\r\n",
    b"delete foo:zz\r\n",
    b"stats detail dump\r\n",
    b"stats detail off\r\n",
    b"stats detail\r\n",
    b"stats foo\r\n",
    b"stats cachedump 1 10\r\n",
    b"stats reset\r\n",
    b"stats\r\n",
]


def talk(sock, data):
    sock.sendall(data + H.SENTINEL)
    buf = b""
    sock.settimeout(3)
    while not H.SENTINEL_RE.search(buf[-300:]):
        d = sock.recv(1 << 20)
        if not d:
            break
        buf += d
    m = H.SENTINEL_RE.search(buf[-300:])
    return buf[:len(buf) - len(m.group(0))] if m else buf


def _shown(arg):
    """A path inside the repository relative to its root (the file is committed)."""
    if os.path.isabs(arg) and arg.startswith(H.servers.ROOT + os.sep):
        return os.path.relpath(arg, H.servers.ROOT)
    return arg


def main():
    srv = H.servers.Server("memcached", ["-m", "64", "-t", "4"])
    try:
        s = socket.create_connection(srv.address)
        s.sendall(b"version\r\n")
        version = s.recv(100).decode().split()[1]
        for cmd in SCRIPT:
            talk(s, cmd)
        time.sleep(1.1)  # let uptime/secs_since_last_cmd move so volatile fields are recognisable
        out = [f"# Genuine memcached {version} stats outputs, captured by tests/conformance/capture_stats.py",
               f"# Server command line: {' '.join(_shown(a) for a in srv.cmd)}",
               "# Preceded by this scripted sequence on the same connection:"]
        for cmd in SCRIPT:
            c = cmd if len(cmd) < 200 else cmd[:40] + b"...(%d bytes)" % len(cmd)
            out.append("#   " + repr(c)[2:-1])
        out.append("# Each block: '>>> command' then the exact reply, one line per \\r\\n-terminated line")
        out.append("# (every reply line below ended with \\r\\n on the wire).")
        for cmd in COMMANDS:
            rep = talk(s, cmd)
            out.append("")
            out.append(">>> " + repr(cmd)[2:-1])
            for line in rep.split(b"\r\n")[:-1] if rep.endswith(b"\r\n") else rep.split(b"\r\n"):
                out.append(line.decode("latin-1"))
        s.close()
    finally:
        srv.stop()
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, f"memcached-{version}-stats.txt")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print(path)


if __name__ == "__main__":
    main()
