"""spymemcached and xmemcached (Java; text and binary protocol, SASL PLAIN)
against genuine memcached and osmium.

The suite is the Maven project tests/clients/java (JUnit 5; every dependency
and plugin version pinned in pom.xml). Dependencies are fetched and the tests
compiled once (`mvn test-compile`; scripts/test-all.sh's install step
pre-fetches them), then `mvn test` runs once per server kind with
MEMCACHED_SERVERS=127.0.0.1:PORT, three more servers of the kind for
spymemcached's ketama (MEMCACHED_KETAMA_SERVERS) and a SASL server of the same kind
(MEMCACHED_SASL_SERVERS, _USER, _PASSWORD, or MEMCACHED_SASL_ERROR when it
could not be started).
"""
import os

import pytest

from .runners import CLIENTS_DIR, SaslServerSlot, require_tools, run, server_env

JAVA_DIR = os.path.join(CLIENTS_DIR, "java")


@pytest.fixture(scope="module")
def mvn():
    mvn, _java = require_tools("mvn", "java")
    run([mvn, "-B", "-q", "-Dstyle.color=never", "test-compile"], JAVA_DIR, "compiling the Java client suite")
    return mvn


@pytest.fixture(scope="module")
def sasl(server):
    slot = SaslServerSlot(server.kind)
    yield slot
    slot.stop()


@pytest.fixture(scope="module")
def ketama_servers(server):
    """Three more servers of the kind, for spymemcached's ketama
    (MEMCACHED_KETAMA_SERVERS)."""
    from .conftest import start_server
    started = []
    try:
        for _ in range(3):
            started.append(start_server(server.kind))
        yield started
    finally:
        for s in started:
            s.stop()


def test_java_clients(server, sasl, ketama_servers, mvn):
    env = server_env(server)
    env.update(sasl.env())
    env["MEMCACHED_KETAMA_SERVERS"] = " ".join(f"127.0.0.1:{s.port}" for s in ketama_servers)
    run([mvn, "-B", "-Dstyle.color=never", "test"], JAVA_DIR, f"Java client suite against {server.kind}", env=env,
        timeout=600)
