"""meta-memcache (a pure-meta-protocol client: mg/ms/md/ma/mn, with the
meta_memcache_socket extension) against genuine memcached and osmium.

What it sends, per feature: get -> `mg k v t f l h` (+`T` touch, `R`
recache, `N` lease/vivify), set -> `ms k S T F [C] [M]`, delete ->
`md k [C] [I T]` (stale), delta -> `ma k D [M-] [N J] [v]`, multi_get ->
pipelined `mg` + `mn`, no_reply -> `q` + `mn`; keys with spaces or non-ASCII
go base64-encoded (`b` flag), keys of 187+ bytes are hashed by the client
(then base64). Expected values are what memcached 1.6 answers.
"""
import time

import pytest
from meta_memcache import (CacheClient, Conflict, Key, MemcacheServerError, Miss, NotStored,
                           RequestFlags, ServerAddress, SetMode, Success, Value,
                           connection_pool_factory_builder)
from meta_memcache.base.base_serializer import BaseSerializer, EncodedValue
from meta_memcache.configuration import LeasePolicy, RecachePolicy, StalePolicy
from meta_memcache.connection.providers import HashRingConnectionPoolProvider
from meta_memcache.executors.default import DefaultExecutor
from meta_memcache.routers.default import DefaultRouter
from meta_memcache.serializer import MixedSerializer
from meta_memcache_socket import build_meta_get

from .helpers import ALL_BYTES, CORE_STATS, TRICKY, VERSION_RE, raw_exchange, raw_get


class RawSerializer(BaseSerializer):
    """Bytes in, bytes out, flags 0, no compression."""

    def serialize(self, key, value):
        return EncodedValue(data=value, encoding_id=0)

    def unserialize(self, data, encoding_id):
        return bytes(data)


class FlagsSerializer(BaseSerializer):
    """Values are (bytes, flags) pairs; the flags go in the client flag."""

    def serialize(self, key, value):
        data, flags = value
        return EncodedValue(data=data, encoding_id=flags)

    def unserialize(self, data, encoding_id):
        return bytes(data), encoding_id


class Client:
    """A meta-memcache CacheClient over `servers`, plus its connection pools
    (for raw commands and for closing the connections)."""

    def __init__(self, servers, serializer=None, raise_on_server_error=True):
        self.pools = {}
        # read_buffer_size: with the default 4096, meta_memcache_socket 0.3.1
        # needs ~24 s to read a 1 MB value (against either server); 64 KiB
        # reads it in milliseconds.
        factory = connection_pool_factory_builder(connection_timeout=5, recv_timeout=10,
                                                  read_buffer_size=65536)

        def pool_for(address):
            pool = factory(address)
            self.pools[address.port] = pool
            return pool

        addresses = [ServerAddress(host="127.0.0.1", port=s.port) for s in servers]
        executor = DefaultExecutor(serializer=serializer or MixedSerializer(),
                                   raise_on_server_error=raise_on_server_error)
        router = DefaultRouter(
            pool_provider=HashRingConnectionPoolProvider(
                server_pool={a: pool_for(a) for a in addresses}),
            executor=executor)
        self.cache = CacheClient(router=router)

    def raw(self, port, command, multi_line=False):
        with self.pools[port].get_connection() as conn:
            return conn.raw_cmd(command, multi_line=multi_line)

    def close(self):
        for pool in self.pools.values():
            while pool._pool:
                pool._discard_connection(pool._pool.popleft())


@pytest.fixture
def client(server):
    c = Client([server])
    yield c
    c.close()


@pytest.fixture
def mc(client):
    return client.cache


@pytest.fixture
def rawc(server):
    c = Client([server], serializer=RawSerializer())
    yield c.cache
    c.close()


def test_set_get(server, mc):
    assert mc.set("mm_a", b"hello", ttl=0) is True
    assert mc.get("mm_a") == b"hello"
    assert mc.set("mm_a", b"world", ttl=0) is True
    assert mc.get("mm_a") == b"world"
    assert mc.get("mm_missing") is None
    assert mc.set("mm_str", "text \u00e9", ttl=0) is True
    assert mc.get("mm_str") == "text \u00e9"
    assert mc.set("mm_int", 42, ttl=0) is True
    assert mc.get("mm_int") == 42
    assert mc.set("mm_list", [1, "two"], ttl=0) is True
    assert mc.get("mm_list") == [1, "two"]
    assert mc.get_typed("mm_int", int) == 42
    assert mc.get_typed("mm_int", str) is None
    with pytest.raises(ValueError):
        mc.get_typed("mm_int", str, error_on_type_mismatch=True)
    # the text protocol reads what the meta set stored
    assert raw_get(server.address, "mm_a") == (16, b"world")  # MixedSerializer BINARY


def test_multi_get_100_keys(mc):
    data = {f"mm_multi_{i:03d}": f"value-{i}".encode() * (i + 1) for i in range(100)}
    for k, v in data.items():
        assert mc.set(k, v, ttl=0) is True
    keys = list(data) + ["mm_multi_missing_1", "mm_multi_missing_2"]
    got = mc.multi_get(keys)
    assert {k.key: v for k, v in got.items()} == {**data, "mm_multi_missing_1": None,
                                                   "mm_multi_missing_2": None}
    with_cas = mc.multi_get_cas(list(data))
    assert {k.key: v for k, (v, _c) in with_cas.items()} == data
    assert len({c for _v, c in with_cas.values()}) == 100


def test_set_modes(mc):
    mc.delete("mm_mode")
    assert mc.set("mm_mode", b"x", ttl=0, set_mode=SetMode.REPLACE) is False
    assert mc.set("mm_mode", b"x", ttl=0, set_mode=SetMode.APPEND) is False
    assert mc.set("mm_mode", b"x", ttl=0, set_mode=SetMode.PREPEND) is False
    assert mc.get("mm_mode") is None
    assert mc.set("mm_mode", b"mid", ttl=0, set_mode=SetMode.ADD) is True
    assert mc.set("mm_mode", b"other", ttl=0, set_mode=SetMode.ADD) is False
    assert mc.refill("mm_mode", b"other", ttl=0) is False  # refill is an ADD
    assert mc.set("mm_mode", b"_end", ttl=0, set_mode=SetMode.APPEND) is True
    assert mc.set("mm_mode", b"start_", ttl=0, set_mode=SetMode.PREPEND) is True
    assert mc.get("mm_mode") == b"start_mid_end"
    assert mc.set("mm_mode", b"rep", ttl=0, set_mode=SetMode.REPLACE) is True
    assert mc.get("mm_mode") == b"rep"
    assert mc.refill("mm_mode_new", b"filled", ttl=0) is True
    assert mc.get("mm_mode_new") == b"filled"


def test_cas(mc):
    token = mc.set_cas("mm_cas", b"v1", ttl=0)
    assert isinstance(token, int) and token > 0
    assert mc.get_cas("mm_cas") == (b"v1", token)
    assert mc.set("mm_cas", b"v2", ttl=0, cas_token=token) is True  # fresh
    assert mc.set("mm_cas", b"v3", ttl=0, cas_token=token) is False  # stale
    assert mc.get("mm_cas") == b"v2"
    value, token2 = mc.get_cas("mm_cas")
    assert token2 != token
    new = mc.set_cas("mm_cas", b"v4", ttl=0, cas_token=token2)
    assert new not in (None, token, token2)
    assert mc.get_cas("mm_cas") == (b"v4", new)
    assert mc.set_cas("mm_cas", b"v5", ttl=0, cas_token=token2) is None  # stale
    # missing key: NF, not stored
    assert mc.get_cas("mm_cas_missing") == (None, None)
    assert mc.set("mm_cas_missing", b"x", ttl=0, cas_token=token) is False
    assert mc.get("mm_cas_missing") is None
    # raw responses: EX for a stale token, NF for a missing key
    assert isinstance(mc.meta_set(Key("mm_cas"), b"x", flags=RequestFlags(cas_token=token)),
                      Conflict)
    assert isinstance(mc.meta_set(Key("mm_cas_missing"), b"x", flags=RequestFlags(cas_token=token)),
                      Miss)
    # delete with a cas token
    assert mc.delete("mm_cas", cas_token=token) is False
    assert mc.delete("mm_cas", cas_token=new) is True
    assert mc.get("mm_cas") is None


def test_delta(mc):
    mc.set("mm_num", 10, ttl=0)
    assert mc.delta("mm_num", 5) is True
    assert mc.get("mm_num") == 15
    assert mc.delta_and_get("mm_num", -3) == 12
    assert mc.delta_and_get("mm_num", -100) == 0  # clamps at 0
    assert mc.delta_and_get("mm_num", 7) == 7
    mc.set("mm_wrap", 18446744073709551615, ttl=0)
    assert mc.delta_and_get("mm_wrap", 1) == 0  # wraps at 2^64
    assert mc.get("mm_wrap") == 0
    mc.set("mm_wrap", 18446744073709551610, ttl=0)
    assert mc.delta_and_get("mm_wrap", 10) == 4


def test_delta_missing(server, mc):
    mc.delete("mm_num_missing")
    assert mc.delta("mm_num_missing", 1) is False
    assert mc.delta_and_get("mm_num_missing", 1) is None
    assert mc.get("mm_num_missing") is None
    # N/J autovivify: created with the initial value, no delta applied
    assert mc.delta_initialize_and_get("mm_num_missing", 5, 100, 60) == 100
    assert mc.delta_initialize_and_get("mm_num_missing", 5, 100, 60) == 105
    assert mc.delta_initialize("mm_num_missing", -5, 100, 60) is True
    assert raw_get(server.address, "mm_num_missing") == (0, b"100")
    r = mc.meta_get(Key("mm_num_missing"), flags=RequestFlags(return_ttl=True))
    assert isinstance(r, Success) and 55 <= r.flags.ttl <= 60


def test_delta_non_numeric(server):
    c = Client([server])
    c.cache.set("mm_nan", b"abc", ttl=0)
    # CLIENT_ERROR: the client drops the connection and raises
    with pytest.raises(MemcacheServerError):
        c.cache.delta_and_get("mm_nan", 1)
    with pytest.raises(MemcacheServerError):
        c.cache.delta("mm_nan", -1)
    assert c.cache.get("mm_nan") == b"abc"
    c.close()


def test_delete_and_invalidate(mc):
    mc.set("mm_del", b"x", ttl=0)
    assert mc.delete("mm_del") is True
    assert mc.get("mm_del") is None
    assert mc.delete("mm_del") is False  # NF
    assert mc.invalidate("mm_del") is True  # NF counts as done
    mc.set("mm_del", b"x", ttl=0)
    assert mc.invalidate("mm_del") is True
    assert mc.get("mm_del") is None
    assert isinstance(mc.meta_delete(Key("mm_del")), Miss)


def test_touch(mc):
    mc.set("mm_touch", b"x", ttl=100)
    assert mc.touch("mm_touch", 200) is True
    r = mc.meta_get(Key("mm_touch"), flags=RequestFlags(return_ttl=True))
    assert isinstance(r, Success) and 195 <= r.flags.ttl <= 200
    assert mc.touch("mm_touch_missing", 100) is False
    # get with touch_ttl: mg ... T
    assert mc.get("mm_touch", touch_ttl=50) == b"x"
    r = mc.meta_get(Key("mm_touch"), flags=RequestFlags(return_ttl=True))
    assert 45 <= r.flags.ttl <= 50


def test_meta_get_flags(server, mc):
    mc.set("mm_flags", b"hello", ttl=100)
    r = mc.meta_get(Key("mm_flags"), flags=RequestFlags(
        return_value=True, return_ttl=True, return_client_flag=True, return_cas_token=True,
        return_size=True, return_fetched=True, return_last_access=True, opaque=b"op42"))
    assert isinstance(r, Value)
    assert r.value == b"hello" and r.size == 5
    assert r.flags.client_flag == 16 and r.flags.size == 5
    assert 95 <= r.flags.ttl <= 100
    assert r.flags.fetched is False  # never fetched since set
    assert r.flags.last_access >= 0
    assert r.flags.opaque == b"op42"
    assert r.flags.cas_token == mc.get_cas("mm_flags")[1]
    r = mc.meta_get(Key("mm_flags"), flags=RequestFlags(return_fetched=True, no_update_lru=True))
    assert isinstance(r, Success) and r.flags.fetched is True
    mc.set("mm_forever", b"x", ttl=0)
    r = mc.meta_get(Key("mm_forever"), flags=RequestFlags(return_ttl=True))
    assert r.flags.ttl == -1
    assert isinstance(mc.meta_get(Key("mm_flags_missing"), flags=RequestFlags(return_value=True)),
                      Miss)


def test_no_reply(mc):
    # ms/md/ma with q are followed by mn; the next read stays in sync
    assert mc.set("mm_nr", b"1", ttl=0, no_reply=True) is True
    assert mc.delta("mm_nr", 5, no_reply=True) is True
    assert mc.get("mm_nr") == b"6"
    assert mc.delete("mm_nr", no_reply=True) is True
    assert mc.get("mm_nr") is None


def test_lease(server):
    a, b = Client([server]), Client([server])
    a.cache.invalidate("mm_lease")
    waits = []
    policy = LeasePolicy(ttl=30, miss_retries=2, miss_retry_wait=0.01, miss_max_retry_wait=0.01)
    # the first miss wins the lease (N vivify -> W); the next reader loses (Z)
    assert a.cache.get_or_lease("mm_lease", policy, lease_wait_fn=waits.append) is None
    assert b.cache.get_or_lease("mm_lease", policy, lease_wait_fn=waits.append) is None
    assert waits  # the loser waited and retried
    assert b.cache.refill("mm_lease", b"late", ttl=100) is False  # the placeholder is there
    assert a.cache.set("mm_lease", b"filled", ttl=100) is True
    assert b.cache.get_or_lease("mm_lease", policy, lease_wait_fn=waits.append) == b"filled"
    a.close()
    b.close()


def test_recache(server):
    a, b = Client([server]), Client([server])
    policy = RecachePolicy(ttl=30)
    a.cache.set("mm_recache", b"v", ttl=20)  # ttl below the recache ttl
    assert a.cache.get("mm_recache", recache_policy=policy) is None  # won the recache (W)
    assert b.cache.get("mm_recache", recache_policy=policy) == b"v"  # lost (Z): old value
    assert a.cache.get("mm_recache", recache_policy=policy) == b"v"
    a.cache.set("mm_recache", b"v2", ttl=100)
    assert b.cache.get("mm_recache", recache_policy=policy) == b"v2"
    a.close()
    b.close()


def test_stale(server):
    a, b = Client([server]), Client([server])
    a.cache.set("mm_stale", b"v", ttl=100)
    assert a.cache.delete("mm_stale", stale_policy=StalePolicy(mark_stale_on_deletion_ttl=30))
    # md I: the item stays, stale; the first reader wins the refresh (X W)
    assert a.cache.get("mm_stale") is None
    assert b.cache.get("mm_stale") == b"v"  # others still get the stale value
    r = a.cache.meta_get(Key("mm_stale"),
                         flags=RequestFlags(return_value=True, return_client_flag=True))
    assert r.value == b"v" and r.flags.stale is True and r.flags.win is False
    # a CAS mismatch can store the value as stale instead of failing
    a.cache.set("mm_stale2", b"v1", ttl=100)
    _v, token = a.cache.get_cas("mm_stale2")
    a.cache.set("mm_stale2", b"v2", ttl=100)
    assert a.cache.set("mm_stale2", b"v3", ttl=100, cas_token=token,
                       stale_policy=StalePolicy(mark_stale_on_cas_mismatch=True)) is True
    r = a.cache.meta_get(Key("mm_stale2"),
                         flags=RequestFlags(return_value=True, return_client_flag=True))
    assert r.value == b"v3" and r.flags.stale is True and r.flags.win is True
    a.close()
    b.close()


def test_expiry(mc):
    mc.set("mm_exp_short", b"x", ttl=2)
    mc.set("mm_exp_long", b"x", ttl=100)
    mc.set("mm_exp_touched", b"x", ttl=100)
    assert mc.touch("mm_exp_touched", 2) is True
    mc.set("mm_exp_get_touched", b"x", ttl=2)
    assert mc.get("mm_exp_get_touched", touch_ttl=100) == b"x"
    assert mc.get("mm_exp_short") == b"x"
    time.sleep(3.1)
    assert mc.get("mm_exp_short") is None
    assert mc.get("mm_exp_touched") is None
    assert mc.get("mm_exp_long") == b"x"
    assert mc.get("mm_exp_get_touched") == b"x"
    assert mc.set("mm_exp_short", b"y", ttl=0, set_mode=SetMode.ADD) is True
    assert mc.touch("mm_exp_touched", 10) is False


def test_binary_values(server, rawc):
    for key, value in (("mm_bytes", ALL_BYTES), ("mm_tricky", TRICKY), ("mm_end", b"\r\nEND\r\n"),
                       ("mm_bytes_big", ALL_BYTES * 1000)):
        assert rawc.set(key, value, ttl=0) is True
        assert rawc.get(key) == value
        assert raw_get(server.address, key) == (0, value)
    got = rawc.multi_get(["mm_end", "mm_tricky", "mm_bytes"])
    assert {k.key: v for k, v in got.items()} == {
        "mm_end": b"\r\nEND\r\n", "mm_tricky": TRICKY, "mm_bytes": ALL_BYTES}


def test_one_million_byte_value(server, rawc):
    value = bytes(i % 251 for i in range(1_000_000))
    assert rawc.set("mm_1m", value, ttl=0) is True
    assert rawc.get("mm_1m") == value
    assert raw_get(server.address, "mm_1m") == (0, value)
    r = rawc.meta_get(Key("mm_1m"), flags=RequestFlags(return_size=True))
    assert r.flags.size == 1_000_000


def test_two_megabyte_value_rejected(server):
    c = Client([server], serializer=RawSerializer())
    c.cache.set("mm_2m", b"old", ttl=0)
    # SERVER_ERROR object too large for cache: the client raises ...
    with pytest.raises(MemcacheServerError):
        c.cache.set("mm_2m", b"x" * (2 * 1024 * 1024), ttl=0)
    assert c.cache.get("mm_2m") is None  # the old value is gone too
    c.close()
    # ... or, with raise_on_server_error=False, reports "not stored"
    c = Client([server], serializer=RawSerializer(), raise_on_server_error=False)
    assert c.cache.set("mm_2m", b"x" * (2 * 1024 * 1024), ttl=0) is False
    assert c.cache.set("mm_after_2m", b"ok", ttl=0) is True
    assert c.cache.get("mm_after_2m") == b"ok"
    c.close()


def test_compressed_values(server, mc):
    value = b"compressible " * 10000
    assert mc.set("mm_zlib", value, ttl=0) is True
    flags, stored = raw_get(server.address, "mm_zlib")
    assert flags == 16 | 8 and len(stored) < len(value)  # BINARY | ZLIB
    assert mc.get("mm_zlib") == value


def test_client_flags(server):
    c = Client([server], serializer=FlagsSerializer())
    for flags in (0, 1, 12345, 2**16, 2**31, 2**32 - 1):
        assert c.cache.set("mm_cflags", (b"v", flags), ttl=0) is True
        assert raw_get(server.address, "mm_cflags") == (flags, b"v")
        assert c.cache.get("mm_cflags") == (b"v", flags)
    # flags set by the text protocol come back in the meta `f` flag
    raw_exchange(server.address, b"set mm_cflags_text 4242 0 2\r\nhi\r\n",
                 terminators=(b"STORED\r\n",))
    assert c.cache.get("mm_cflags_text") == (b"hi", 4242)
    c.close()


def test_keys(server, mc):
    # 186-byte keys go as they are; longer ones are hashed and base64-encoded
    # (`b` flag), and so are keys with spaces, control or non-ASCII characters
    long186 = "l" * 186
    assert build_meta_get(long186) == b"mg " + long186.encode() + b"\r\n"
    assert build_meta_get("k" * 250).endswith(b" b\r\n")
    keys = {long186: b"186", "k" * 250: b"250", "mm key with spaces": b"spaces",
            "mm_\u00fcn\u00efcode": b"unicode", "mm_ctl\x01\x7f": b"control"}
    for k, v in keys.items():
        assert mc.set(k, v, ttl=0) is True
    got = mc.multi_get(list(keys))
    assert {k.key: v for k, v in got.items()} == keys
    for k, v in keys.items():
        assert mc.get(k) == v
    assert raw_get(server.address, long186) == (16, b"186")
    # the binary key is stored as its decoded bytes
    assert raw_get(server.address, "mm_\u00fcn\u00efcode".encode()) == (16, b"unicode")
    assert mc.delete("mm key with spaces") is True
    assert mc.get("mm key with spaces") is None


def test_raw_commands_and_stats(server, client):
    # meta_memcache_socket's raw passthrough: version, stats
    version = client.raw(server.port, b"version")
    assert version.startswith(b"VERSION ") and VERSION_RE.match(version[8:].decode().strip())
    stats = dict(line.split(b" ", 2)[1:] for line in
                 client.raw(server.port, b"stats", multi_line=True).split(b"\r\n") if line)
    for name in CORE_STATS:
        assert name.encode() in stats, f"stats lacks {name}"
    assert int(stats[b"pid"]) == server.pid
    assert client.raw(server.port, b"mn") == b"MN"
    # the connection is still in sync for the client
    assert client.cache.set("mm_raw", b"x", ttl=0) is True
    assert client.cache.get("mm_raw") == b"x"


def test_meta_stats_counters(fresh_server):
    c = Client([fresh_server])
    for i in range(10):
        c.cache.set(f"mm_st_{i}", b"x" * 10, ttl=0)
    for i in range(7):
        assert c.cache.get(f"mm_st_{i}") == b"x" * 10
    for i in range(3):
        assert c.cache.get(f"mm_st_missing_{i}") is None
    stats = dict(line.split(b" ", 2)[1:] for line in
                 c.raw(fresh_server.port, b"stats", multi_line=True).split(b"\r\n") if line)
    assert int(stats[b"curr_items"]) == 10
    assert int(stats[b"total_items"]) == 10
    assert int(stats[b"cmd_set"]) == 10
    assert int(stats[b"cmd_get"]) == 10
    assert int(stats[b"get_hits"]) == 7
    assert int(stats[b"get_misses"]) == 3
    c.close()


# --------------------------------------------------------------------------
# Two servers: the client's hash ring (uhashring) spreads keys over both.
# --------------------------------------------------------------------------

def test_two_servers(server_pair):
    c = Client(server_pair)
    data = {f"mm2_{i:03d}": f"v{i}".encode() for i in range(100)}
    for k, v in data.items():
        assert c.cache.set(k, v, ttl=0) is True
    got = c.cache.multi_get(list(data))
    assert {k.key: v for k, v in got.items()} == data
    counts = {s.port: 0 for s in server_pair}
    for k, v in data.items():
        on = [s for s in server_pair if raw_get(s.address, k) is not None]
        assert len(on) == 1, f"{k} is on {len(on)} servers"
        assert raw_get(on[0].address, k) == (16, v)
        counts[on[0].port] += 1
    assert all(n >= 20 for n in counts.values()), counts
    for k in list(data)[:10]:
        assert c.cache.delta_initialize_and_get(k + "_n", 1, 5, 60) == 5
        assert c.cache.delta_and_get(k + "_n", 1) == 6
        assert c.cache.delete(k) is True
    assert all(v is None for v in c.cache.multi_get(list(data)[:10]).values())
    c.close()


def test_response_types(mc):
    assert isinstance(mc.meta_set(Key("mm_rt"), b"x", flags=RequestFlags(mode=SetMode.ADD.value)),
                      (Success, NotStored))
    assert isinstance(mc.meta_set(Key("mm_rt"), b"x", flags=RequestFlags(mode=SetMode.ADD.value)),
                      NotStored)
    assert isinstance(mc.meta_arithmetic(Key("mm_rt_missing"),
                                         flags=RequestFlags(ma_delta_value=1)), Miss)
