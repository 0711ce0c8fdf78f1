"""memjs (Node.js, binary protocol, SASL PLAIN) against genuine memcached and
osmium.

The suite is tests/clients/node/memjs.test.js, run with node's built-in test
runner (`node --test`). memjs is pinned by package.json/package-lock.json and
installed with `npm ci` (by scripts/test-all.sh's install step, or here when
node_modules is missing). The runner runs once per server kind with
MEMCACHED_SERVERS=127.0.0.1:PORT and a SASL server of the same kind.
"""
import os

import pytest

from .runners import CLIENTS_DIR, SaslServerSlot, require_tools, run, server_env

NODE_DIR = os.path.join(CLIENTS_DIR, "node")


@pytest.fixture(scope="module")
def node():
    node, npm = require_tools("node", "npm")
    if not os.path.isfile(os.path.join(NODE_DIR, "node_modules", "memjs", "package.json")):
        run([npm, "ci", "--no-audit", "--no-fund"], NODE_DIR, "npm ci for the Node client suite")
    return node


@pytest.fixture(scope="module")
def sasl(server):
    slot = SaslServerSlot(server.kind)
    yield slot
    slot.stop()


def test_memjs(server, sasl, node):
    env = server_env(server)
    env.update(sasl.env())
    # --test-timeout: memjs can wait forever on a connection the server closed
    run([node, "--test", "--test-timeout=30000", "memjs.test.js"], NODE_DIR,
        f"memjs suite against {server.kind}", env=env, timeout=300)
