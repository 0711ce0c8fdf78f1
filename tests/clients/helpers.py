"""Small raw-protocol helpers shared by the client-library suites.

The client libraries hide some of what the server sends (the flags field, for
one); these helpers read it straight off the wire so a test can check that the
server stored exactly what the client library serialised.
"""
import re
import socket

VERSION_RE = re.compile(r"^\d+\.\d+\.\d+\S*$")
ALL_BYTES = bytes(range(256))
TRICKY = b"a\r\nEND\r\nb\r\nVALUE x 0 1\r\n\r\n\x00"


def raw_exchange(address, payload, terminators=(b"END\r\n",), timeout=5.0):
    """Send `payload` on a fresh connection and read until the reply ends with
    one of `terminators`."""
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(payload)
        buf = b""
        while not any(buf.endswith(t) for t in terminators):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf


def raw_get(address, key):
    """(flags, value) of `key` read with a plain `get`, or None on a miss."""
    if isinstance(key, str):
        key = key.encode()
    reply = raw_exchange(address, b"get " + key + b"\r\n")
    if reply == b"END\r\n":
        return None
    header, rest = reply.split(b"\r\n", 1)
    parts = header.split()
    assert parts[0] == b"VALUE" and parts[1] == key, reply[:200]
    flags, length = int(parts[2]), int(parts[3])
    value = rest[:length]
    assert rest[length:] == b"\r\nEND\r\n", reply[:200]
    return flags, value


# Stats that every memcached-compatible server is expected to report and that
# client libraries and tools (memcstat, dashboards) read.
CORE_STATS = (
    "pid", "uptime", "time", "version", "curr_connections", "total_connections",
    "cmd_get", "cmd_set", "get_hits", "get_misses", "curr_items", "total_items",
    "bytes", "limit_maxbytes", "threads", "evictions",
)
