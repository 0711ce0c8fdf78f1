"""The start harness of servers.py: a reserved free port, and a start whose
port was taken meanwhile retried on another, against a stand-in server (this
Python), memcached, osmium, osmium-proxy and nutcracker. The taken port is
held by a listener of the test and handed to the start by force_next_port
(or, for a proxy, as the port its YAML listens on)."""
import os
import socket
import sys

import pytest

from support import servers

# A stand-in server: binds argv[1] as the real ones do (SO_REUSEADDR) or
# says why it cannot (Python's "Address already in use"), then waits.
FAKE = ("import socket, sys, time\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(60)\n")


def fake(port):
    return [sys.executable, "-c", FAKE, str(port)]


@pytest.fixture
def taken():
    """A loopback port held by a listener for the test's duration."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_reserved_port_is_given_to_no_other_bind_but_a_server_binds_it():
    port = servers.free_port()
    for _ in range(2000):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            assert s.getsockname()[1] != port
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_start_whose_port_is_taken_is_retried_on_another(taken):
    servers.force_next_port(taken)
    proc, port = servers.start_process(fake, name="fake")
    try:
        assert servers.last_attempts == 2
        assert port != taken
        assert servers.listens_on(proc.pid, port)
    finally:
        servers.stop_process(proc)
    assert proc.returncode == -15  # SIGTERM


def test_a_start_that_fails_for_another_reason_says_why_at_once():
    with pytest.raises(RuntimeError, match="unknown option") as e:
        servers.start_process(lambda p: [sys.executable, "-c", "import sys; sys.exit('unknown option -Z')"])
    assert "attempts" not in str(e.value)


def test_a_port_taken_throughout_fails_after_the_attempts(taken):
    with pytest.raises(RuntimeError, match="(?s)did not start in 2 attempts.*already in use"):
        servers.start_process(fake, port=taken, same_port=True, attempts=2)


@pytest.mark.parametrize("kind", ["osmium", "memcached"])
def test_a_server_whose_port_was_taken_starts_on_another(kind, taken):
    if kind == "osmium" and not os.path.exists(servers.OSMIUM_BIN):
        pytest.skip(f"{servers.OSMIUM_BIN} is not built")
    servers.force_next_port(taken)
    with servers.Server(kind) as srv:
        assert servers.last_attempts == 2
        assert srv.port != taken
        with socket.create_connection(srv.address, timeout=5) as c:
            c.sendall(b"version\r\n")
            assert c.recv(100).startswith(b"VERSION ")


@pytest.mark.parametrize("kind", ["osmium-proxy", "nutcracker"])
def test_a_proxy_whose_ports_were_taken_starts_on_others(kind, taken):
    from cluster.proxies import Proxy, pool_yaml
    with servers.Server("memcached") as backend:
        # Its listen port...
        proxy = Proxy(kind, pool_yaml(taken, [backend]), taken)
        try:
            assert servers.last_attempts == 2
            assert proxy.port != taken
            with socket.create_connection(proxy.address, timeout=5) as c:
                c.sendall(b"set k 0 0 1\r\nv\r\n")
                assert c.recv(100) == b"STORED\r\n"
        finally:
            proxy.stop()
        # ...and its stats port.
        port = servers.free_port()
        servers.force_next_port(taken)
        proxy = Proxy(kind, pool_yaml(port, [backend]), port)
        try:
            assert servers.last_attempts == 2
            assert proxy.stats_port != taken
        finally:
            proxy.stop()
