"""Fixtures shared by the attack suite: servers come from tests/support/servers.py
(started on free loopback ports, stopped by PID), as in every other suite."""
import os

import pytest

from support import servers

KINDS = [k.strip() for k in os.environ.get("SECURITY_TEST_SERVERS", "memcached,osmium").split(",")
         if k.strip()]


@pytest.fixture(params=KINDS)
def kind(request):
    """Both servers, for attacks on a surface memcached 1.6.45 has too."""
    if request.param == "memcached":
        servers.require_memcached()
    return request.param
