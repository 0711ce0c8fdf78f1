"""Proxies in front of memcached-protocol servers, with real clients:

- nutcracker (twemproxy 0.5.0, Debian's package) in front of three osmium
  servers passes what three client libraries do through it (pymemcache,
  pylibmc, python-memcached: text protocol, the commands nutcracker
  forwards), exactly as in front of three memcached 1.6.45 servers;
- osmium-proxy in front of three memcached 1.6.45 servers (routing only) and
  in front of three osmium servers passes the same;
- every key lands on the same server (by name) whichever proxy placed it and
  whichever servers are behind it: osmium-proxy places keys as nutcracker
  does, weighted, with and without server names.
"""
import pylibmc
import memcache
import pytest
from pymemcache.client.base import Client

from support import servers

from .proxies import Proxy, pool_yaml

COMBOS = ["nutcracker+osmium", "nutcracker+memcached", "osmium-proxy+memcached",
          "osmium-proxy+osmium"]


def start_backends(kind, n=3):
    out = []
    try:
        for _ in range(n):
            out.append(servers.Server(kind, ["-m", "64", "-t", "2"]))
    except BaseException:
        for s in out:
            s.stop()
        raise
    return out


@pytest.fixture(scope="module", params=COMBOS)
def cluster(request):
    proxy_kind, backend_kind = request.param.split("+")
    backends = start_backends(backend_kind)
    port = servers.free_port()
    try:
        proxy = Proxy(proxy_kind, pool_yaml(port, backends), port)
    except BaseException:
        for b in backends:
            b.stop()
        raise
    proxy.backends = backends
    yield proxy
    proxy.stop()
    for b in backends:
        b.stop()


def client(addr):
    return Client(addr, connect_timeout=5, timeout=10, default_noreply=False)


@pytest.fixture
def mc(cluster):
    c = client(cluster.address)
    yield c
    c.close()


def holders(backends, keys):
    """{key: index of the backend that holds it} (each key on exactly one)."""
    found = {}
    for i, b in enumerate(backends):
        c = client(b.address)
        for start in range(0, len(keys), 100):
            for k in c.get_many(keys[start:start + 100]):
                assert k not in found, f"{k} on two servers"
                found[k] = i
        c.close()
    return found


def test_set_get_delete(mc):
    assert mc.set("px_a", b"hello") is True
    assert mc.get("px_a") == b"hello"
    assert mc.get("px_missing") is None
    assert mc.delete("px_a") is True
    assert mc.delete("px_a") is False
    assert mc.get("px_a") is None


def test_multi_get_spans_every_server_and_keeps_order(cluster, mc):
    data = {f"px_multi_{i:03d}": f"value-{i}".encode() * (i % 7 + 1) for i in range(300)}
    assert mc.set_many(data) == []
    keys = list(data) + ["px_multi_missing"]
    assert mc.get_many(keys) == data
    where = holders(cluster.backends, list(data))
    assert len(where) == len(data)
    assert set(where.values()) == {0, 1, 2}, "keys should spread over all three servers"


def test_storage_commands(mc):
    assert mc.add("px_add", b"1") is True
    assert mc.add("px_add", b"2") is False
    assert mc.replace("px_add", b"3") is True
    assert mc.replace("px_nothere", b"3") is False
    assert mc.append("px_add", b"4") is True
    assert mc.prepend("px_add", b"2") is True
    assert mc.get("px_add") == b"234"
    assert mc.set("px_n", b"10") is True
    assert mc.incr("px_n", 5) == 15
    assert mc.decr("px_n", 20) == 0
    assert mc.incr("px_none", 1) is None
    assert mc.touch("px_n", 100) is True
    assert mc.touch("px_none", 100) is False


def test_gets_cas(mc):
    assert mc.set("px_cas", b"v1") is True
    value, token = mc.gets("px_cas")
    assert value == b"v1"
    assert mc.cas("px_cas", b"v2", token) is True
    assert mc.cas("px_cas", b"v3", token) is False
    assert mc.get("px_cas") == b"v2"


def test_noreply_then_large_and_binary_values(mc):
    mc.set("px_noreply", b"quiet", noreply=True)
    big = bytes(range(256)) * 800  # 200 KiB, every byte value
    assert mc.set("px_big", big) is True
    assert mc.get("px_noreply") == b"quiet"
    assert mc.get("px_big") == big
    assert mc.set("px_crlf", b"a\r\nEND\r\nb") is True
    assert mc.get("px_crlf") == b"a\r\nEND\r\nb"


def test_pylibmc_through_the_proxy(cluster):
    c = pylibmc.Client([f"127.0.0.1:{cluster.port}"], behaviors={"cas": True, "tcp_nodelay": True})
    data = {f"plx_{i}": f"v{i}" for i in range(100)}
    assert c.set_multi(data) == []
    assert c.get_multi(list(data)) == data
    c.set("plx_n", 5)
    assert c.incr("plx_n", 2) == 7
    value, token = c.gets("plx_cas") if c.set("plx_cas", "a") else (None, None)
    assert value == "a"
    assert c.cas("plx_cas", "b", token) is True
    assert c.get("plx_cas") == "b"
    assert c.delete("plx_cas") is True
    assert c.get("plx_cas") is None
    c.disconnect_all()


def test_python_memcached_through_the_proxy(cluster):
    c = memcache.Client([f"127.0.0.1:{cluster.port}"])
    assert c.set("pyx_a", "hello")
    assert c.get("pyx_a") == "hello"
    assert c.set_multi({f"pyx_{i}": i for i in range(50)}) == []
    assert c.get_multi([f"pyx_{i}" for i in range(50)]) == {f"pyx_{i}": i for i in range(50)}
    assert c.incr("pyx_1", 10) == 11
    assert c.delete("pyx_a")
    assert c.get("pyx_a") is None
    c.disconnect_all()


@pytest.mark.parametrize("hash_name", ["md5", "fnv1a_64", "murmur"])
@pytest.mark.parametrize("names", [True, False], ids=["named", "host-port"])
def test_every_proxy_places_keys_alike(names, hash_name):
    """The same keys through nutcracker and osmium-proxy, weights 1, 2, 3:
    each key on the same server. Named servers: behind osmium servers and
    behind memcached servers alike (placement follows the names)."""
    keys = [f"place_{i}" for i in range(2000)]
    kinds = ["osmium", "memcached"] if names else ["osmium"]
    maps = {}
    for backend_kind in kinds:
        backends = start_backends(backend_kind)
        try:
            for proxy_kind in ["nutcracker", "osmium-proxy"]:
                for b in backends:
                    client(b.address).flush_all()
                port = servers.free_port()
                proxy = Proxy(proxy_kind, pool_yaml(port, backends, names=names, weights=[1, 2, 3],
                                                   hash=hash_name),
                              port)
                try:
                    c = client(proxy.address)
                    for start in range(0, len(keys), 200):
                        assert c.set_many({k: b"x" for k in keys[start:start + 200]}) == []
                    c.close()
                finally:
                    proxy.stop()
                maps[f"{proxy_kind}+{backend_kind}"] = holders(backends, keys)
        finally:
            for b in backends:
                b.stop()
    reference = maps["nutcracker+osmium"]
    assert len(reference) == len(keys)
    for name, m in maps.items():
        differ = [k for k in keys if m.get(k) != reference[k]]
        assert not differ, f"{name}: {len(differ)} keys placed elsewhere than nutcracker, e.g. {differ[:5]}"
