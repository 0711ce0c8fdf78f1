"""Fixtures for the log watcher suite: each test runs against genuine
memcached 1.6.45 and osmium (started the same way, by tests/support/servers.py)
unless it tests what only osmium logs (its own sysevents)."""
import os

import pytest

from support import servers

KINDS = [k.strip() for k in os.environ.get("WATCH_TEST_SERVERS", "memcached,osmium").split(",")
         if k.strip()]


@pytest.fixture(params=KINDS)
def kind(request):
    if request.param == "memcached":
        servers.require_memcached()
    return request.param
