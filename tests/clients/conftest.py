"""Fixtures for the client-library compatibility suites.

Every suite runs against BOTH genuine memcached (the oracle) and osmium, with
identical assertions: a test that passes on one and fails on the other shows a
behavioural difference a real client would see. See README.md for the suites.

The text-protocol suites of pymemcache, pylibmc and python-memcached also run
through a proxy in front of three osmium servers: nutcracker (twemproxy, as
deployments run it) and osmium-proxy, each routing by ketama (a module opts in
with THROUGH_PROXIES = True). A test that needs what no proxy forwards (stats)
or one server's process is marked `direct` and runs against the servers only;
`proxies("osmium-proxy")` names the proxies a test runs through (nutcracker
0.5.0 refuses the meta commands and flush_all). osmium-proxy serves them
after a reload (SIGHUP, the same file read again), so that the suites also
check a reloaded proxy.

Environment:
  CLIENT_TEST_SERVERS  comma-separated subset of "memcached,osmium" (default both)
  CLIENT_TEST_PROXIES  comma-separated subset of "nutcracker,osmium-proxy" in front
                       of three osmium servers, for the modules that opt in
                       (default both; empty: none)
  OSMIUM_BIN / MEMCACHED_BIN  override the binaries (see tests/support/servers.py;
                              memcached defaults to the oracle built by
                              scripts/build-memcached.sh)
If the osmium binary is missing its tests are skipped, except under CI=true (or
OSMIUM_REQUIRED=1), where a missing binary is an error. The same holds for
memcached (under CI=true only; see servers.require_memcached()).
"""
import os

import pytest

from support import servers
from support.sasl import start_sasl_server

KINDS = [k.strip() for k in os.environ.get("CLIENT_TEST_SERVERS", "memcached,osmium").split(",")
         if k.strip()]

# Arguments both servers get for the shared per-module instance: memcached's
# defaults written out (64 MB, 1 MB item size limit implied), 2 worker threads.
SERVER_ARGS = ["-m", "64", "-t", "2"]


def _require_binary(kind):
    if kind == "memcached":
        servers.require_memcached()
        return
    binary = servers.OSMIUM_BIN
    if os.path.isfile(binary) and os.access(binary, os.X_OK):
        return
    msg = f"{kind} binary not found at {binary}"
    if not (os.environ.get("CI") == "true" or os.environ.get("OSMIUM_REQUIRED")):
        pytest.skip(msg + " (build it with `cargo build --release --workspace`)")
    pytest.fail(msg)


def start_server(kind, args=SERVER_ARGS):
    _require_binary(kind)
    return servers.Server(kind, args)


PROXIES = [p.strip() for p in os.environ.get("CLIENT_TEST_PROXIES",
                                             "nutcracker,osmium-proxy").split(",")
           if p.strip()]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "direct: needs the server itself (a command no proxy forwards, "
        "its process), not run through a proxy")
    config.addinivalue_line(
        "markers", "proxies(*names): run through these proxies only (of nutcracker, "
        "osmium-proxy)")


def pytest_generate_tests(metafunc):
    """`server` is each server kind, and for a module with THROUGH_PROXIES
    and a test not marked `direct`, also each proxy in front of three
    osmium servers."""
    if "server" not in metafunc.fixturenames:
        return
    kinds = list(KINDS)
    if getattr(metafunc.module, "THROUGH_PROXIES", False) and \
            metafunc.definition.get_closest_marker("direct") is None:
        only = metafunc.definition.get_closest_marker("proxies")
        kinds += [f"{p}+osmium" for p in PROXIES if only is None or p in only.args]
    metafunc.parametrize("server", kinds, indirect=True, scope="module")


class ProxiedServers:
    """A proxy (nutcracker or osmium-proxy, ketama over md5) in front of
    three osmium servers: `address` and `port` are the proxy's, which is
    what a client of this object talks to."""

    def __init__(self, proxy_kind):
        from cluster.proxies import Proxy, pool_yaml
        self.kind = f"{proxy_kind}+osmium"
        self.backends = []
        try:
            for _ in range(3):
                self.backends.append(start_server("osmium"))
            port = servers.free_port()
            self.proxy = Proxy(proxy_kind, pool_yaml(port, self.backends), port)
            if proxy_kind == "osmium-proxy":
                self.proxy.reload()
        except BaseException:
            if getattr(self, "proxy", None) is not None:
                self.proxy.stop()
            for b in self.backends:
                b.stop()
            raise
        self.port = self.proxy.port  # another port if `port` was taken meanwhile
        self.address = ("127.0.0.1", self.port)
        self.pid = self.proxy.pid

    def stop(self):
        self.proxy.stop()
        for b in self.backends:
            b.stop()


@pytest.fixture(scope="module")
def server(request):
    """One server of each kind per test module, shared by that module's
    tests (or a proxy in front of three, see `pytest_generate_tests`)."""
    if request.param.endswith("+osmium"):
        srv = ProxiedServers(request.param[:-len("+osmium")])
    else:
        srv = start_server(request.param)
    yield srv
    srv.stop()


@pytest.fixture(scope="module", params=KINDS)
def server_pair(request):
    """Two servers of the same kind per test module, for the clients' key
    distribution over several servers (consistent hashing)."""
    first = start_server(request.param)
    try:
        second = start_server(request.param)
    except BaseException:
        first.stop()
        raise
    yield first, second
    first.stop()
    second.stop()


# Credentials of the one user of `sasl_server`.
SASL_USER, SASL_PASSWORD = "osmium_user", "s3cret-Pass"


@pytest.fixture(scope="module", params=KINDS)
def sasl_server(request):
    """One server of each kind per test module started with SASL (-S, one
    user SASL_USER / SASL_PASSWORD; see tests/support/sasl.py). Binary
    protocol only."""
    _require_binary(request.param)
    srv = start_sasl_server(request.param, SASL_USER, SASL_PASSWORD)
    yield srv
    srv.stop()


@pytest.fixture
def fresh_server(server):
    """A brand-new server of the same kind as `server`, for tests that assert
    absolute counters (stats)."""
    srv = start_server(server.kind)
    yield srv
    srv.stop()
