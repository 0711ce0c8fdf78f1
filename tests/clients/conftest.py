"""Fixtures for the client-library compatibility suites.

Every suite runs against BOTH genuine memcached (the oracle) and osmium, with
identical assertions: a test that passes on one and fails on the other shows a
behavioural difference a real client would see. See README.md for the suites.

Environment:
  CLIENT_TEST_SERVERS  comma-separated subset of "memcached,osmium" (default both)
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


@pytest.fixture(scope="module", params=KINDS)
def server(request):
    """One server of each kind per test module, shared by that module's tests."""
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
