"""gomemcache (Go, text protocol) against genuine memcached and osmium.

The suite itself is tests/clients/go/gomemcache_test.go. It is compiled once
(`go test -c`, modules pinned by go.mod/go.sum and fetched by
scripts/test-all.sh's install step) and the test binary runs once per server
kind with MEMCACHED_SERVERS=127.0.0.1:PORT.
"""
import os

import pytest

from .runners import CLIENTS_DIR, require_tools, run, server_env

GO_DIR = os.path.join(CLIENTS_DIR, "go")


@pytest.fixture(scope="module")
def go_test_binary(tmp_path_factory):
    (go,) = require_tools("go")
    binary = str(tmp_path_factory.mktemp("go") / "gomemcache.test")
    # -mod=readonly: go.mod and go.sum are committed and must already be complete.
    run([go, "test", "-mod=readonly", "-c", "-o", binary, "."], GO_DIR,
        "compiling the Go client suite")
    run([go, "vet", "-mod=readonly", "."], GO_DIR, "go vet of the Go client suite")
    return binary


def test_gomemcache(server, go_test_binary):
    run([go_test_binary, "-test.v", "-test.count=1", "-test.timeout=300s"], GO_DIR,
        f"gomemcache suite against {server.kind}", env=server_env(server), timeout=400)
