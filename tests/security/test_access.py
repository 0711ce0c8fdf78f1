"""Attacks on the surface osmium shares with memcached: a client without
credentials on a `-Y` server, a client without SASL on a `-S` server, and a
client asking for dumps on a `-X` server. Each runs against memcached 1.6.45
and osmium (the `kind` fixture) and asserts the same refusal from both, and
that nothing stored was read, changed or lost.

Where only osmium has the command (`stats hotkeys`, `replica_follow`,
`mgdump`-style dumps of its own), it is tried on osmium alone.
"""
import os
import socket
import struct
import tempfile

import pytest

from support import servers
from support.sasl import start_sasl_server

USER, PASSWORD = "alice", "s3cret-pw"
SECRET_VALUE = b"pwreset=7f3a9c"


def connect(server):
    s = socket.create_connection(server.address, timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_until(s, end):
    out = b""
    while not out.endswith(end):
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def line(s, req):
    s.sendall(req)
    return read_until(s, b"\r\n")


def read_to_close(s):
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    except (ConnectionResetError, socket.timeout):
        return out


@pytest.fixture
def authfile():
    fd, path = tempfile.mkstemp(prefix="osmium-security-authfile-")
    os.write(fd, f"{USER}:{PASSWORD}\n".encode())
    os.close(fd)
    yield path
    os.unlink(path)


def login(s):
    token = f"{USER} {PASSWORD}".encode()
    assert line(s, b"set auth 0 0 %d\r\n%s\r\n" % (len(token), token)) == b"STORED\r\n"


# Everything an unauthenticated `-Y` client may try: reads, writes, meta
# commands, stats of every kind, dumps, watchers, admin commands.
UNAUTHENTICATED_TRIES = [
    b"get session:alice\r\n",
    b"gets session:alice\r\n",
    b"gat 0 session:alice\r\n",
    b"mg session:alice v\r\n",
    b"ms session:alice 2\r\nxx\r\n",
    b"md session:alice\r\n",
    b"delete session:alice\r\n",
    b"incr counter 1\r\n",
    b"touch session:alice 10\r\n",
    b"stats\r\n",
    b"stats items\r\n",
    b"stats slabs\r\n",
    b"stats settings\r\n",
    b"stats detail dump\r\n",
    b"stats cachedump 1 10\r\n",
    b"lru_crawler metadump all\r\n",
    b"mn\r\n",
    b"watch fetchers\r\n",
    b"flush_all\r\n",
    b"verbosity 1\r\n",
    b"shutdown\r\n",
    b"version\r\n",
]


def test_attack_unauthenticated_client_on_a_Y_server_reads_and_changes_nothing(kind, authfile):
    with servers.Server(kind, ["-Y", authfile]) as srv:
        owner = connect(srv)
        login(owner)
        assert line(owner, b"set session:alice 0 0 %d\r\n%s\r\n"
                    % (len(SECRET_VALUE), SECRET_VALUE)) == b"STORED\r\n"
        assert line(owner, b"set counter 0 0 1\r\n5\r\n") == b"STORED\r\n"

        for req in UNAUTHENTICATED_TRIES:
            attacker = connect(srv)
            attacker.settimeout(2)
            attacker.sendall(req)
            got = read_until(attacker, b"\r\n")
            assert SECRET_VALUE not in got, (req, got)
            # Both servers may close the connection on the meta commands
            # that change items (and `mn`), with or without the refusal
            # (memcached 1.6.45 does either); everything else is refused
            # in words.
            if req.split()[0] in (b"ms", b"md", b"mn"):
                assert got in (b"", b"CLIENT_ERROR unauthenticated\r\n"), (req, got)
            else:
                assert got == b"CLIENT_ERROR unauthenticated\r\n", (req, got)
            attacker.close()
        attacker = connect(srv)
        # A wrong password is refused and counted; it does not log in.
        token = f"{USER} wrong".encode()
        got = line(attacker, b"set x 0 0 %d\r\n%s\r\n" % (len(token), token))
        assert got == b"CLIENT_ERROR authentication failure\r\n"
        assert line(attacker, b"get session:alice\r\n") == b"CLIENT_ERROR unauthenticated\r\n"

        # The server still runs, and the owner's items are as they were.
        owner.sendall(b"get session:alice counter\r\n")
        got = read_until(owner, b"END\r\n")
        assert got == (b"VALUE session:alice 0 %d\r\n%s\r\nVALUE counter 0 1\r\n5\r\nEND\r\n"
                       % (len(SECRET_VALUE), SECRET_VALUE))
        owner.sendall(b"stats\r\n")
        stats = read_until(owner, b"END\r\n")
        assert b"STAT auth_errors 1\r\n" in stats, stats


def test_attack_unauthenticated_Y_client_asks_osmium_for_its_own_commands(authfile):
    """osmium's own commands (hot keys, replication, its dumps) are behind -Y too."""
    with servers.Server("osmium", ["-Y", authfile]) as srv:
        attacker = connect(srv)
        for req in [b"stats hotkeys\r\n", b"replica_follow 2\r\n", b"replica_link x\r\n",
                    b"replica_targets 127.0.0.1:1\r\n", b"lru_crawler mgdump 3\r\n",
                    b"stats conns\r\n"]:
            assert line(attacker, req) == b"CLIENT_ERROR unauthenticated\r\n", req


def binary_request(opcode, key=b"", value=b"", extras=b"", opaque=0):
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), len(extras), 0, 0, len(body),
                       opaque, 0) + body


def binary_reply(s):
    head = b""
    while len(head) < 24:
        chunk = s.recv(24 - len(head))
        if not chunk:
            return None
        head += chunk
    (magic, opcode, keylen, extlen, _dt, status, bodylen, opaque, cas) = struct.unpack(
        ">BBHBBHIIQ", head)
    body = b""
    while len(body) < bodylen:
        chunk = s.recv(bodylen - len(body))
        if not chunk:
            break
        body += chunk
    return opcode, status, body


GET, SET, DELETE, NOOP, STAT, FLUSH = 0x00, 0x01, 0x04, 0x0a, 0x10, 0x08
SASL_AUTH = 0x21
AUTH_ERROR = 0x20


def test_attack_client_without_sasl_on_an_S_server_gets_nothing(kind):
    srv = start_sasl_server(kind, USER, PASSWORD)
    try:
        owner = connect(srv)
        owner.sendall(binary_request(SASL_AUTH, key=b"PLAIN",
                                     value=b"\0" + USER.encode() + b"\0" + PASSWORD.encode()))
        assert binary_reply(owner)[1] == 0
        owner.sendall(binary_request(SET, key=b"session:alice", value=SECRET_VALUE,
                                     extras=struct.pack(">II", 0, 0)))
        assert binary_reply(owner)[1] == 0

        # Each unauthenticated binary command: an authentication error, no
        # data, and (both servers) the connection closed after it.
        for opcode, key in [(GET, b"session:alice"), (DELETE, b"session:alice"),
                            (FLUSH, b""), (STAT, b""), (NOOP, b"")]:
            attacker = connect(srv)
            extras = struct.pack(">I", 0) if opcode == FLUSH else b""
            attacker.sendall(binary_request(opcode, key=key, extras=extras))
            got = binary_reply(attacker)
            assert got is not None and got[1] == AUTH_ERROR, (opcode, got)
            assert SECRET_VALUE not in got[2]
            attacker.close()

        # A wrong password fails and does not log the connection in.
        attacker = connect(srv)
        attacker.sendall(binary_request(SASL_AUTH, key=b"PLAIN",
                                        value=b"\0" + USER.encode() + b"\0wrong"))
        assert binary_reply(attacker)[1] == AUTH_ERROR
        attacker.close()

        # The text protocol is never answered under -S: nothing comes back
        # but the connection's end.
        attacker = connect(srv)
        attacker.sendall(b"get session:alice\r\nstats\r\nflush_all\r\n" + b" " * 24)
        assert SECRET_VALUE not in read_to_close(attacker)

        owner.sendall(binary_request(GET, key=b"session:alice"))
        opcode, status, body = binary_reply(owner)
        assert status == 0 and body.endswith(SECRET_VALUE)
    finally:
        srv.stop()


def test_attack_dumps_on_an_X_server_are_refused(kind):
    with servers.Server(kind, ["-X"]) as srv:
        s = connect(srv)
        assert line(s, b"set session:alice 0 0 %d\r\n%s\r\n"
                    % (len(SECRET_VALUE), SECRET_VALUE)) == b"STORED\r\n"
        assert line(s, b"lru_crawler metadump all\r\n") == b"ERROR metadump not allowed\r\n"
        assert line(s, b"lru_crawler metadump 1\r\n") == b"ERROR metadump not allowed\r\n"
        got = line(s, b"stats cachedump 1 0\r\n")
        assert got == b"CLIENT_ERROR stats cachedump not allowed\r\n", got
        assert line(s, b"lru_crawler mgdump all\r\n") == b"ERROR key dump not allowed\r\n"
        # The connection survives, and the item is as it was.
        s.sendall(b"get session:alice\r\n")
        assert SECRET_VALUE in read_until(s, b"END\r\n")


def test_attack_replication_follow_on_an_X_server_is_refused():
    """A full copy is a dump: -X refuses it even to a replication peer."""
    with servers.Server("osmium", ["-X"]) as srv:
        s = connect(srv)
        assert line(s, b"replica_follow 2\r\n") == b"ERROR\r\n"
