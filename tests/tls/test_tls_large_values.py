"""Large values over TLS, checked against memcached and osmium alike (see
README.md): a 1 MiB value, pipelines of 100 KiB GETs, and a client that
reads slowly while its values are overwritten and evicted. osmium feeds
large values to the TLS records straight from item memory while the
request holds them, and copies what the connection did not take; either
way the client must get, whole, the value each GET found."""
import os
import socket
import threading
import time

import pytest

from support import servers

KIB = 1024


def connect(port, ctx, rcvbuf=None, timeout=30):
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        # Before connecting, so the window is small from the start.
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(timeout)
    raw.connect(("127.0.0.1", port))
    return ctx.wrap_socket(raw, server_hostname="localhost")


def recv_exact(sock, n):
    parts = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError(f"connection closed with {n} bytes to come")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def recv_line(sock, pending):
    """One line (with its \\r\\n) and what was read after it."""
    while b"\r\n" not in pending:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise EOFError("connection closed mid-line")
        pending += chunk
    end = pending.index(b"\r\n") + 2
    return pending[:end], pending[end:]


def value_of(key, version, size):
    """A value that says which key and version it is all along."""
    unit = b"%s:%d;" % (key, version)
    return (unit * (size // len(unit) + 1))[:size]


def store(sock, key, value):
    sock.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
    line, rest = recv_line(sock, b"")
    assert (line, rest) == (b"STORED\r\n", b"")


@pytest.fixture
def server(kind, certs):
    with servers.Server(kind, certs.server_args() + ["-I", "2m", "-m", "64"]) as s:
        yield s


def test_a_one_mebibyte_value_over_tls(server, certs):
    big = os.urandom(1 << 20)
    with connect(server.port, certs.client_context()) as s:
        store(s, b"big", big)
        s.sendall(b"get big\r\n")
        head = b"VALUE big 0 %d\r\n" % len(big)
        assert recv_exact(s, len(head) + len(big) + 7) == head + big + b"\r\nEND\r\n"
        s.sendall(b"mg big v\r\n")
        head = b"VA %d\r\n" % len(big)
        assert recv_exact(s, len(head) + len(big) + 2) == head + big + b"\r\n"
        # Two of them in one reply, then a small request behind it.
        s.sendall(b"gets big big\r\nversion\r\n")
        one_head, rest = recv_line(s, b"")
        assert one_head.startswith(b"VALUE big 0 %d " % len(big))
        body = rest + recv_exact(s, len(big) + 2 - len(rest))
        assert body == big + b"\r\n"
        assert recv_exact(s, len(one_head)) == one_head
        assert recv_exact(s, len(big) + 2) == big + b"\r\n"
        line, rest = recv_line(s, b"")
        assert line == b"END\r\n"
        line, rest = recv_line(s, rest)
        assert line.startswith(b"VERSION ") and rest == b""


def test_pipelined_100k_gets_over_tls(server, certs):
    keys = [b"p%d" % i for i in range(16)]
    values = {k: value_of(k, 0, 100 * KIB + i) for i, k in enumerate(keys)}
    with connect(server.port, certs.client_context()) as s:
        for k in keys:
            store(s, k, values[k])
        asked = [keys[(i * 7) % len(keys)] for i in range(160)]
        requests = b"".join(b"get %s\r\n" % k for k in asked)
        # And every key in one multi-get, then a small reply behind it.
        requests += b"get " + b" ".join(keys) + b"\r\nversion\r\n"
        want = b"".join(b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(values[k]), values[k])
                        for k in asked)
        want += b"".join(b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(values[k]), values[k])
                         for k in keys) + b"END\r\n"
        s.sendall(requests)
        got = recv_exact(s, len(want))
        assert got == want
        line, rest = recv_line(s, b"")
        assert line.startswith(b"VERSION ") and rest == b""


def test_a_slow_reader_gets_the_values_its_gets_found_while_they_are_overwritten(server, certs):
    """A client asks for many 100 KiB values and reads slowly through a
    small window, while another overwrites those keys again and again and
    fills the cache past its memory (evicting them). Every reply must be
    one whole version of the key it names (or a miss): never a value
    rewritten under a reply that was still queued."""
    keys = [b"s%d" % i for i in range(24)]
    size = 100 * KIB
    with connect(server.port, certs.client_context()) as w:
        for k in keys:
            store(w, k, value_of(k, 0, size))
    stop = threading.Event()
    errors = []

    def churn():
        try:
            with connect(server.port, certs.client_context()) as w:
                version = 1
                while not stop.is_set():
                    for k in keys:
                        store(w, k, value_of(k, version, size))
                    for i in range(40):
                        filler = b"f%d" % (version * 40 + i)
                        store(w, filler, value_of(filler, version, size))
                    version += 1
        except Exception as e:  # reported by the test below
            errors.append(e)

    asked = [keys[i % len(keys)] for i in range(240)]
    writer = threading.Thread(target=churn)
    with connect(server.port, certs.client_context(), rcvbuf=16 * KIB) as r:
        r.sendall(b"".join(b"get %s\r\n" % k for k in asked))
        writer.start()
        try:
            # Nothing read for a while: the server's queue backs up.
            time.sleep(1.0)
            pending = b""
            for i, k in enumerate(asked):
                line, pending = recv_line(r, pending)
                if line == b"END\r\n":
                    continue  # evicted before the GET ran: a miss
                assert line.startswith(b"VALUE %s 0 " % k), (i, line[:60])
                n = int(line.split()[3])
                if len(pending) < n + 2:
                    pending += recv_exact(r, n + 2 - len(pending))
                block, pending = pending[:n + 2], pending[n + 2:]
                version = int(block.split(b";", 1)[0].split(b":")[1])
                assert block == value_of(k, version, n) + b"\r\n", (i, k, version)
                line, pending = recv_line(r, pending)
                assert line == b"END\r\n"
                if i % 16 == 0:
                    time.sleep(0.02)
            assert pending == b""
        finally:
            stop.set()
            writer.join()
    assert not errors, errors
