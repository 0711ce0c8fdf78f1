"""gomemcache (Go, text protocol) against genuine memcached and osmium, in
plaintext and over TLS.

The suite itself is tests/clients/go/gomemcache_test.go (and tls_test.go). It
is compiled once (`go test -c`, modules pinned by go.mod/go.sum and fetched
by scripts/test-all.sh's install step) and the test binary runs once per
server kind with MEMCACHED_SERVERS=127.0.0.1:PORT.

Over TLS, each kind runs with `-Z` (certificates from tests/support/tls.py,
made with the `openssl` command) and an extra `mtls:` listener; the binary
runs the same cases with MEMCACHED_TLS_CA set, so gomemcache dials through
crypto/tls: on the `-Z` listener (TLS 1.3, and capped at TLS 1.2) and on the
`mtls:` listener with a client certificate. Each TLS run also checks that a
client trusting another CA fails its dial while the server keeps serving,
and on `mtls:` that a client without a certificate is refused.
"""
import os

import pytest

from support import servers
from support.tls import Certs

from .conftest import KINDS, SERVER_ARGS, start_server
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


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("go-tls-certs"))


class TlsServer:
    """A server of one kind started with `-Z` (verify mode 0 on its main
    port) and an `mtls:` listener on `mtls_port`."""

    def __init__(self, kind, certs):
        self.mtls_port = servers.free_port()
        self.server = start_server(kind, SERVER_ARGS + certs.server_args() +
                                   ["-l", f"mtls:127.0.0.1:{self.mtls_port}"])
        self.kind = kind

    def stop(self):
        self.server.stop()


@pytest.fixture(scope="module", params=KINDS)
def tls_server(request, certs):
    srv = TlsServer(request.param, certs)
    yield srv
    srv.stop()


@pytest.mark.parametrize("listener", ["tls", "tls1.2", "mtls"])
def test_gomemcache_over_tls(tls_server, certs, go_test_binary, listener):
    port = tls_server.mtls_port if listener == "mtls" else tls_server.server.port
    env = {"MEMCACHED_SERVERS": f"127.0.0.1:{port}", "MEMCACHED_KIND": tls_server.kind,
           "MEMCACHED_TLS_CA": certs.path("ca.pem"),
           # rogue.pem is a self-signed certificate: as a CA it signed nothing
           # the server presents.
           "MEMCACHED_TLS_UNTRUSTED_CA": certs.path("rogue.pem")}
    if listener == "tls1.2":
        env["MEMCACHED_TLS_MAX_VERSION"] = "1.2"
    if listener == "mtls":
        env["MEMCACHED_TLS_CERT"] = certs.path("client.pem")
        env["MEMCACHED_TLS_KEY"] = certs.path("client.key")
    run([go_test_binary, "-test.v", "-test.count=1", "-test.timeout=300s"], GO_DIR,
        f"gomemcache suite over {listener} against {tls_server.kind}", env=env, timeout=400)
    # The refused handshakes did not take the server down.
    assert tls_server.server.proc.poll() is None, f"{tls_server.kind} exited"
