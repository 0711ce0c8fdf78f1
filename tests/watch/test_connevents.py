"""The `connevents` stream as memcached 1.6.45 writes it: `conn_new`, and
`conn_close` with the reason memcached gives for each cause (logger.c's
`reason_map`; memcached.c, proto_text.c and proto_bin.c set it): `normal`
when the client closes its end or sends `quit`, `idle_timeout`, `shutdown`
for the connection that sent it, and `error` for everything else (an HTTP
request line, a line too long, a bad binary packet, a reset, a TLS error,
which `type=conntlserr` reports first).

Covers memcached's t/watcher.t connection cases. Every test runs against
both servers (tests/watch/conftest.py).
"""
import os
import re
import signal
import socket
import struct
import subprocess
import time

import pytest

from support import servers

from .test_watch import command, connect, norm, watch

REASON = re.compile(r" type=conn_close rip=(\S*) rport=(\d+) transport=(\w+) reason=(\w+) cfd=(\d+)$")


def binary(opcode, key=b"", body_len=None, magic=0x80):
    """A binary request header (and key) as memcached's protocol_binary.h lays it out."""
    body = len(key) if body_len is None else body_len
    return struct.pack(">BBHBBHIIQ", magic, opcode, len(key), 0, 0, 0, body, 0, 0) + key


def drain(sock):
    """Reads until the server closes the connection."""
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass


def quit_text(c):
    c.sendall(b"version\r\nquit\r\n")
    drain(c)


def client_closes(c):
    command(c, b"version\r\n")
    c.shutdown(socket.SHUT_WR)
    drain(c)


def closes_inside_a_value(c):
    c.sendall(b"set k 0 0 10\r\nabc")
    time.sleep(0.05)
    c.shutdown(socket.SHUT_WR)
    drain(c)


def http_request(c):
    # memcached's answer to a browser: close, no reply (t/watcher.t).
    c.sendall(b"GET / HTTP/1.1\r\n")
    drain(c)


def line_too_long(c):
    c.sendall(b"x" * 5000)
    drain(c)


def quit_binary(c):
    c.sendall(binary(0x07))
    drain(c)


def bad_magic(c):
    # A binary client (its first byte) whose next packet is not a request.
    c.sendall(binary(0x0a) + binary(0x0a, magic=0x81))
    drain(c)


def key_longer_than_body(c):
    c.sendall(binary(0x00, b"ab", body_len=1))
    drain(c)


def reset(c):
    command(c, b"version\r\n")
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


CASES = [
    (quit_text, "normal"),
    (client_closes, "normal"),
    (closes_inside_a_value, "normal"),
    (quit_binary, "normal"),
    (http_request, "error"),
    (line_too_long, "error"),
    (bad_magic, "error"),
    (key_longer_than_body, "error"),
    (reset, "error"),
]


@pytest.fixture
def server(kind):
    with servers.Server(kind, ["-m", "64", "-A"]) as s:
        yield s


def close_line(w, port):
    """The watcher's conn_new and conn_close lines of the client on `port`."""
    got = [l for l in w.until(f"rport={port} transport=tcp reason=", timeout=10)
           if f" rport={port} " in l]
    assert len(got) == 2, got
    return got


@pytest.mark.parametrize("act,reason", CASES, ids=[c[0].__name__ for c in CASES])
def test_each_close_is_logged_with_memcacheds_reason(server, act, reason):
    w = watch(server, b"connevents")
    c = connect(server)
    port = c.getsockname()[1]
    act(c)
    c.close()
    new, close = close_line(w, port)
    assert norm(new) == "ts=T gid=G type=conn_new rip=127.0.0.1 rport=P transport=tcp cfd=C"
    assert norm(close) == ("ts=T gid=G type=conn_close rip=127.0.0.1 rport=P transport=tcp "
                           f"reason={reason} cfd=C")
    assert new.split(" cfd=")[1] == close.split(" cfd=")[1]


def test_an_idle_connection_closed_by_the_timeout(kind):
    with servers.Server(kind, ["-m", "64", "-o", "idle_timeout=1"]) as server:
        w = watch(server, b"connevents")
        c = connect(server)
        port = c.getsockname()[1]
        drain(c)
        _, close = close_line(w, port)
        assert REASON.search(close).group(4) == "idle_timeout", close


def test_the_connection_that_asked_for_a_graceful_shutdown(server):
    w = watch(server, b"connevents")
    c = connect(server)
    port = c.getsockname()[1]
    c.sendall(b"shutdown graceful\r\n")
    drain(c)
    _, close = close_line(w, port)
    assert REASON.search(close).group(4) == "shutdown", close
    server.proc.wait(timeout=20)


def test_a_tls_error_is_logged_before_the_close(kind, tmp_path):
    from support.tls import Certs
    certs = Certs(tmp_path)
    with servers.Server(kind, certs.server_args()) as server:
        ctx = certs.client_context()
        w = ctx.wrap_socket(socket.create_connection(server.address, timeout=5),
                            server_hostname="localhost")
        w.sendall(b"watch connevents\r\n")
        buf = b""
        while not buf.startswith(b"OK\r\n"):
            chunk = w.recv(4096)
            assert chunk, buf
            buf += chunk
        c = ctx.wrap_socket(socket.create_connection(server.address, timeout=5),
                            server_hostname="localhost")
        port = c.getsockname()[1]
        c.sendall(b"version\r\n")
        assert c.recv(100).startswith(b"VERSION ")
        # An application-data record no key made: the server cannot
        # decrypt it.
        raw = socket.socket(fileno=os.dup(c.fileno()))
        raw.sendall(b"\x17\x03\x03\x00\x05hello")
        drain(raw)
        raw.close()
        c.close()
        buf = buf[4:]
        deadline = time.time() + 10
        while f"rport={port} transport=tcp reason=".encode() not in buf:
            assert time.time() < deadline, buf
            buf += w.recv(65536)
        got = [l for l in buf.decode().splitlines() if "conntlserr" in l or f"rport={port} " in l]
        new, err, close = got
        cfd = new.split(" cfd=")[1]
        assert re.search(r" type=conntlserr fd=(\d+) msg=\S", err), err
        assert err.split(" fd=")[1].split(" ")[0] == cfd
        assert close.endswith(f" reason=error cfd={cfd}"), close
        w.close()


def test_unix_socket_connections_are_local(kind, tmp_path):
    binary_path = servers.require_memcached() if kind == "memcached" else servers.OSMIUM_BIN
    path = str(tmp_path / "sock")
    argv = [binary_path, "-s", path, "-m", "64"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        w = socket.socket(socket.AF_UNIX)
        while True:
            try:
                w.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                assert time.time() < deadline and proc.poll() is None, "no unix socket"
                time.sleep(0.02)
        w.settimeout(5)
        w.sendall(b"watch connevents\r\n")
        assert w.recv(4) == b"OK\r\n"
        c = socket.socket(socket.AF_UNIX)
        c.connect(path)
        c.settimeout(5)
        c.sendall(b"quit\r\n")
        drain(c)
        c.close()
        buf = b""
        while b"type=conn_close" not in buf:
            buf += w.recv(65536)
        new, close = [norm(l) for l in buf.decode().splitlines()[:2]]
        assert new == "ts=T gid=G type=conn_new rip=unix rport=P transport=local cfd=C"
        assert close == ("ts=T gid=G type=conn_close rip=unix rport=P transport=local "
                         "reason=normal cfd=C")
        w.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
