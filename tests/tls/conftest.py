"""Fixtures for the TLS suite: certificates made with the `openssl` command
(a CA, a server certificate for 127.0.0.1/localhost, a client certificate
signed by the CA, and a second server certificate for reload tests), and
servers started with `-Z` the same way for memcached 1.6.45 and osmium.

Every test runs against both servers unless it tests what only osmium
promises (an atomic reload, the kernel-TLS refusal); see README.md.
"""
import os

import pytest

from support import servers
from support.tls import Certs

KINDS = [k.strip() for k in os.environ.get("TLS_TEST_SERVERS", "memcached,osmium").split(",")
         if k.strip()]


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("tls-certs"))


@pytest.fixture(params=KINDS)
def kind(request):
    if request.param == "memcached":
        servers.require_memcached()
    return request.param
