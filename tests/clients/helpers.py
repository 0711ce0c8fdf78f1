"""Small raw-protocol helpers shared by the client-library suites.

The client libraries hide some of what the server sends (the flags field, for
one); these helpers read it straight off the wire so a test can check that the
server stored exactly what the client library serialised.
"""
import re
import socket
import struct

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


# --- binary protocol --------------------------------------------------------

# magic opcode keylen extlen datatype status(response)/vbucket(request) bodylen opaque cas
BIN_HEADER = struct.Struct("!BBHBBHLLQ")
BIN_GET, BIN_SET, BIN_NOOP, BIN_VERSION, BIN_STAT = 0x00, 0x01, 0x0A, 0x0B, 0x10
BIN_SASL_LIST_MECHS, BIN_SASL_AUTH = 0x20, 0x21
BIN_STATUS_OK, BIN_STATUS_NOT_FOUND, BIN_STATUS_AUTH_ERROR = 0x00, 0x01, 0x20


def bin_request(opcode, key=b"", extras=b"", value=b"", opaque=0, cas=0):
    """One binary-protocol request packet."""
    body = extras + key + value
    return BIN_HEADER.pack(0x80, opcode, len(key), len(extras), 0, 0, len(body), opaque, cas) + body


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def bin_read_response(sock):
    """(opcode, status, key, extras, value, cas) of one binary response."""
    magic, opcode, keylen, extlen, _dt, status, bodylen, _opaque, cas = BIN_HEADER.unpack(
        _recv_exact(sock, BIN_HEADER.size))
    assert magic == 0x81, f"response magic {magic:#x}"
    body = _recv_exact(sock, bodylen)
    key = body[extlen:extlen + keylen]
    return (opcode, status, key, body[:extlen], body[extlen + keylen:], cas)


def bin_exchange(address, *packets, timeout=5.0):
    """Send the request packets on a fresh connection; one response each."""
    with socket.create_connection(address, timeout=timeout) as s:
        s.sendall(b"".join(packets))
        return [bin_read_response(s) for _ in packets]
