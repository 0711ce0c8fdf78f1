"""pymemcache (text protocol) against genuine memcached and osmium.

Every test runs once per server kind; the expected values are what memcached
1.6 answers, so a failure on osmium only is a compatibility difference.

Also: HashClient over two servers of one kind (keys spread over both, every
operation through the HashClient), and the meta protocol (mg/ms/md/ma/mn/me)
sent with pymemcache's raw_command.
"""
import re
import time

import pytest
from pymemcache import serde
from pymemcache.client.base import Client
from pymemcache.client.hash import HashClient
from pymemcache.exceptions import (MemcacheClientError, MemcacheIllegalInputError,
                                   MemcacheServerError)

from .helpers import ALL_BYTES, CORE_STATS, TRICKY, VERSION_RE, raw_exchange, raw_get

# Also run through nutcracker and osmium-proxy in front of three servers
# (conftest.py); tests marked `direct` need the server itself.
THROUGH_PROXIES = True


def make_client(srv, **kw):
    kw.setdefault("default_noreply", False)
    kw.setdefault("connect_timeout", 5)
    kw.setdefault("timeout", 10)
    return Client(srv.address, **kw)


@pytest.fixture
def mc(server):
    c = make_client(server)
    yield c
    c.close()


class FlagsSerde:
    """Passes bytes through and reports the flags the server returned."""

    def serialize(self, key, value):
        return value, 0

    def deserialize(self, key, value, flags):
        return value, flags


def test_set_get(mc):
    assert mc.set("pm_a", b"hello") is True
    assert mc.get("pm_a") == b"hello"
    assert mc.set("pm_a", b"world") is True
    assert mc.get("pm_a") == b"world"
    assert mc.get("pm_missing") is None
    assert mc.set("pm_empty", b"") is True
    assert mc.get("pm_empty") == b""


def test_get_many_100_keys(mc):
    data = {f"pm_multi_{i:03d}": f"value-{i}".encode() * (i + 1) for i in range(100)}
    assert mc.set_many(data) == []
    keys = list(data) + ["pm_multi_missing_1", "pm_multi_missing_2"]
    assert mc.get_many(keys) == data
    got = mc.gets_many(list(data))
    assert {k: v for k, (v, _cas) in got.items()} == data
    assert all(isinstance(cas, bytes) and cas.isdigit() for _v, cas in got.values())


def test_get_many_100_max_length_keys(mc):
    # One `get` line of ~25 KB: longer than any single-key command.
    data = {(f"pm_long_{i:03d}_").ljust(250, "x"): str(i).encode() for i in range(100)}
    assert mc.set_many(data) == []
    assert mc.get_many(list(data)) == data


def test_add(mc):
    assert mc.add("pm_add", b"1") is True
    assert mc.add("pm_add", b"2") is False
    assert mc.get("pm_add") == b"1"


def test_replace(mc):
    assert mc.replace("pm_repl", b"1") is False
    assert mc.get("pm_repl") is None
    mc.set("pm_repl", b"1")
    assert mc.replace("pm_repl", b"2") is True
    assert mc.get("pm_repl") == b"2"


def test_append_prepend(mc):
    assert mc.append("pm_ap_missing", b"x") is False
    assert mc.prepend("pm_ap_missing", b"x") is False
    assert mc.get("pm_ap_missing") is None
    mc.set("pm_ap", b"mid")
    assert mc.append("pm_ap", b"_end") is True
    assert mc.prepend("pm_ap", b"start_") is True
    assert mc.get("pm_ap") == b"start_mid_end"
    assert mc.append("pm_ap", b"\r\nEND\r\n") is True
    assert mc.get("pm_ap") == b"start_mid_end\r\nEND\r\n"


def test_append_keeps_flags(server, mc):
    mc.set("pm_ap_flags", b"a", flags=77)
    mc.append("pm_ap_flags", b"b", flags=5)
    assert raw_get(server.address, "pm_ap_flags") == (77, b"ab")


def test_cas(mc):
    mc.set("pm_cas", b"v1")
    value, token = mc.gets("pm_cas")
    assert value == b"v1" and token.isdigit()
    # fresh token: stored
    assert mc.cas("pm_cas", b"v2", token) is True
    assert mc.get("pm_cas") == b"v2"
    # the same token again is now stale
    assert mc.cas("pm_cas", b"v3", token) is False
    assert mc.get("pm_cas") == b"v2"
    # a plain set also changes the token
    value, token2 = mc.gets("pm_cas")
    assert token2 != token
    mc.set("pm_cas", b"v4")
    assert mc.cas("pm_cas", b"v5", token2) is False
    assert mc.get("pm_cas") == b"v4"
    # missing key
    assert mc.gets("pm_cas_missing") == (None, None)
    assert mc.cas("pm_cas_missing", b"x", token) is None
    assert mc.get("pm_cas_missing") is None


def test_cas_tokens_unique(mc):
    tokens = set()
    for i in range(20):
        mc.set(f"pm_cas_u{i}", b"x")
        tokens.add(mc.gets(f"pm_cas_u{i}")[1])
    assert len(tokens) == 20


def test_incr_decr(mc):
    mc.set("pm_num", b"10")
    assert mc.incr("pm_num", 5) == 15
    assert mc.decr("pm_num", 3) == 12
    assert mc.get("pm_num") == b"12"
    assert mc.incr("pm_num", 0) == 12


def test_incr_wraps_at_2_64(mc):
    mc.set("pm_wrap", b"18446744073709551615")
    assert mc.incr("pm_wrap", 1) == 0
    mc.set("pm_wrap2", b"18446744073709551610")
    assert mc.incr("pm_wrap2", 10) == 4
    mc.set("pm_big", b"18446744073709551614")
    assert mc.incr("pm_big", 1) == 18446744073709551615


def test_incr_grows_value_length(mc):
    mc.set("pm_grow", b"99")
    assert mc.incr("pm_grow", 1) == 100
    assert mc.get("pm_grow") == b"100"


def test_incr_shrink_pads_in_place(mc):
    # memcached rewrites a shrinking counter in place, padding with spaces
    # to the old length; clients that `get` the counter see those spaces.
    mc.set("pm_pad", b"100")
    assert mc.decr("pm_pad", 1) == 99
    assert mc.get("pm_pad") == b"99 "
    mc.set("pm_pad2", b"18446744073709551615")
    assert mc.incr("pm_pad2", 1) == 0
    assert mc.get("pm_pad2") == b"0" + b" " * 19


def test_decr_clamps_at_zero(mc):
    mc.set("pm_clamp", b"5")
    assert mc.decr("pm_clamp", 10) == 0
    assert mc.decr("pm_clamp", 1) == 0
    assert int(mc.get("pm_clamp")) == 0


def test_incr_decr_missing(mc):
    assert mc.incr("pm_num_missing", 1) is None
    assert mc.decr("pm_num_missing", 1) is None
    assert mc.get("pm_num_missing") is None


def test_incr_decr_non_numeric(mc):
    mc.set("pm_nan", b"abc")
    with pytest.raises(MemcacheClientError) as e:
        mc.incr("pm_nan", 1)
    assert e.value.args[0] == b"cannot increment or decrement non-numeric value"
    with pytest.raises(MemcacheClientError) as e:
        mc.decr("pm_nan", 1)
    assert e.value.args[0] == b"cannot increment or decrement non-numeric value"
    assert mc.get("pm_nan") == b"abc"
    # the connection is still in sync
    assert mc.set("pm_nan2", b"1") is True and mc.get("pm_nan2") == b"1"


def test_delete(mc):
    mc.set("pm_del", b"x")
    assert mc.delete("pm_del") is True
    assert mc.get("pm_del") is None
    assert mc.delete("pm_del") is False
    mc.set_many({"pm_del1": b"1", "pm_del2": b"2"})
    assert mc.delete_many(["pm_del1", "pm_del2", "pm_del3"]) is True
    assert mc.get_many(["pm_del1", "pm_del2"]) == {}


def test_touch(mc):
    mc.set("pm_touch", b"x")
    assert mc.touch("pm_touch", 100) is True
    assert mc.get("pm_touch") == b"x"
    assert mc.touch("pm_touch_missing", 100) is False


def test_noreply_commands(mc):
    assert mc.set("pm_nr", b"1", noreply=True) is True
    assert mc.add("pm_nr", b"2", noreply=True) is True
    assert mc.append("pm_nr", b"0", noreply=True) is True
    assert mc.incr("pm_nr", 5, noreply=True) is None
    assert mc.get("pm_nr") == b"15"
    assert mc.delete("pm_nr", noreply=True) is True
    assert mc.get("pm_nr") is None


def test_expiry(mc):
    # One sleep covers: relative exptime, touch to a short ttl, add of an
    # expired key, and long/zero ttls that must survive.
    mc.set("pm_exp_short", b"x", expire=1)
    mc.set("pm_exp_long", b"x", expire=100)
    mc.set("pm_exp_forever", b"x", expire=0)
    mc.set("pm_exp_touched_short", b"x", expire=100)
    assert mc.touch("pm_exp_touched_short", 1) is True
    # ttl 2, not 1: with a 1 s clock a ttl-1 item may expire before the touch
    mc.set("pm_exp_touched_long", b"x", expire=2)
    assert mc.touch("pm_exp_touched_long", 100) is True
    assert mc.add("pm_exp_add", b"first", expire=1) is True
    mc.set("pm_exp_2s", b"x", expire=2)
    assert mc.get("pm_exp_2s") == b"x"  # 2 is relative, not a unix time
    assert mc.get("pm_exp_long") == b"x"
    t0 = time.monotonic()
    time.sleep(2.1)
    assert time.monotonic() - t0 >= 2.1
    assert mc.get("pm_exp_short") is None
    assert mc.get("pm_exp_touched_short") is None
    assert mc.get("pm_exp_add") is None
    assert mc.get_many(["pm_exp_short", "pm_exp_touched_short"]) == {}
    assert mc.gets("pm_exp_short") == (None, None)
    assert mc.get("pm_exp_long") == b"x"
    assert mc.get("pm_exp_forever") == b"x"
    assert mc.get("pm_exp_touched_long") == b"x"
    # expired items neither block add nor satisfy replace/append/incr/touch
    assert mc.add("pm_exp_add", b"second") is True
    assert mc.get("pm_exp_add") == b"second"
    assert mc.replace("pm_exp_short", b"y") is False
    assert mc.append("pm_exp_touched_short", b"y") is False
    assert mc.touch("pm_exp_short", 10) is False


def test_binary_values(mc):
    mc.set("pm_bytes", ALL_BYTES)
    assert mc.get("pm_bytes") == ALL_BYTES
    mc.set("pm_tricky", TRICKY)
    assert mc.get("pm_tricky") == TRICKY
    mc.set("pm_end", b"\r\nEND\r\n")
    assert mc.get_many(["pm_end", "pm_tricky", "pm_bytes"]) == {
        "pm_end": b"\r\nEND\r\n", "pm_tricky": TRICKY, "pm_bytes": ALL_BYTES}
    big = ALL_BYTES * 1000
    mc.set("pm_bytes_big", big)
    assert mc.get("pm_bytes_big") == big


def test_one_million_byte_value(mc):
    value = bytes(i % 251 for i in range(1_000_000))
    assert mc.set("pm_1m", value) is True
    assert mc.get("pm_1m") == value
    assert mc.get_many(["pm_1m", "pm_a_missing"]) == {"pm_1m": value}


def test_two_megabyte_value_rejected(mc):
    with pytest.raises(MemcacheServerError) as e:
        mc.set("pm_2m", b"x" * (2 * 1024 * 1024))
    assert e.value.args[0] == b"object too large for cache"
    assert mc.get("pm_2m") is None
    # the 2 MB payload was swallowed, not parsed as commands
    assert mc.set("pm_after_2m", b"ok") is True
    assert mc.get("pm_after_2m") == b"ok"


def test_too_large_set_removes_old_value(mc):
    # memcached unlinks the old item when a `set` fails for size.
    mc.set("pm_2m_old", b"old")
    with pytest.raises(MemcacheServerError):
        mc.set("pm_2m_old", b"y" * (2 * 1024 * 1024))
    assert mc.get("pm_2m_old") is None


def test_key_length(mc):
    key = "k" * 250
    assert mc.set(key, b"v250") is True
    assert mc.get(key) == b"v250"
    assert mc.get_many([key]) == {key: b"v250"}
    assert mc.delete(key) is True
    with pytest.raises(MemcacheIllegalInputError):
        mc.set("k" * 251, b"v")


def test_flags_raw(server, mc):
    for flags in (0, 1, 12345, 2**16, 2**31, 2**32 - 1):
        assert mc.set("pm_flags", b"v", flags=flags) is True
        assert raw_get(server.address, "pm_flags") == (flags, b"v")
        c = make_client(server, serde=FlagsSerde())
        assert c.get("pm_flags") == (b"v", flags)
        c.close()


@pytest.mark.parametrize("value,flags", [
    (b"raw bytes", 0), ("text \u00e9", 16), (42, 2), (2**70, 2), ([1, "two"], 1), (True, 1),
], ids=["bytes", "str", "int", "bigint", "list", "bool"])
def test_pickle_serde_flags(server, value, flags):
    c = make_client(server, serde=serde.pickle_serde)
    assert c.set("pm_serde", value) is True
    assert c.get("pm_serde") == value
    assert type(c.get("pm_serde")) is type(value)
    assert raw_get(server.address, "pm_serde")[0] == flags
    c.close()


def test_default_serde(mc):
    # no serde: str and int are sent as their text, flags 0
    mc.set("pm_ser_int", 5)
    mc.set("pm_ser_str", "five")
    assert mc.get_many(["pm_ser_int", "pm_ser_str"]) == {"pm_ser_int": b"5", "pm_ser_str": b"five"}


@pytest.mark.proxies("osmium-proxy")  # nutcracker refuses flush_all
def test_flush_all(mc):
    mc.set_many({f"pm_flush_{i}": b"x" for i in range(10)})
    assert mc.flush_all() is True
    assert mc.get_many([f"pm_flush_{i}" for i in range(10)]) == {}
    assert mc.add("pm_flush_0", b"y") is True
    assert mc.get("pm_flush_0") == b"y"


def test_stats(server, fresh_server):
    c = make_client(fresh_server)
    for i in range(10):
        c.set(f"pm_st_{i}", b"x" * 10)
    for i in range(7):
        assert c.get(f"pm_st_{i}") == b"x" * 10
    for i in range(3):
        assert c.get(f"pm_st_missing_{i}") is None
    stats = c.stats()
    for name in CORE_STATS:
        assert name.encode() in stats, f"stats lacks {name}"
    assert stats[b"curr_items"] == 10
    assert stats[b"total_items"] == 10
    assert stats[b"cmd_set"] == 10
    assert stats[b"cmd_get"] == 10
    assert stats[b"get_hits"] == 7
    assert stats[b"get_misses"] == 3
    assert stats[b"pid"] == fresh_server.pid
    assert stats[b"limit_maxbytes"] == 64 * 1024 * 1024
    assert stats[b"threads"] == 2
    assert stats[b"bytes"] > 100
    assert stats[b"curr_connections"] >= 1
    assert stats[b"version"] == c.version()
    c.close()


def test_version(mc):
    version = mc.version()
    assert isinstance(version, bytes)
    assert VERSION_RE.match(version.decode()), version


# --------------------------------------------------------------------------
# HashClient over two servers of the same kind (rendezvous hashing). Every
# operation goes through the HashClient; raw per-server reads check where
# each key actually landed.
# --------------------------------------------------------------------------

def make_hash_client(pair, **kw):
    kw.setdefault("default_noreply", False)  # HashClient defaults to noreply=True
    kw.setdefault("connect_timeout", 5)
    kw.setdefault("timeout", 10)
    kw.setdefault("retry_attempts", 0)
    return HashClient([srv.address for srv in pair], **kw)


@pytest.fixture
def hc(server_pair):
    c = make_hash_client(server_pair)
    yield c
    c.close()


def node_of(srv):
    return f"127.0.0.1:{srv.port}"


def key_on(hc, srv, stem):
    """The first key `stem_N` that the HashClient routes to `srv`."""
    for i in range(1000):
        key = f"{stem}_{i}"
        if hc.hasher.get_node(key) == node_of(srv):
            return key
    raise AssertionError(f"no key {stem}_N maps to {node_of(srv)}")


def test_hash_keys_spread_over_both_servers(server_pair, hc):
    data = {f"ph_spread_{i:03d}": f"v{i}".encode() for i in range(100)}
    assert hc.set_many(data) == []
    assert hc.get_many(list(data) + ["ph_spread_missing"]) == data
    got = hc.gets_many(list(data))
    assert {k: v for k, (v, _cas) in got.items()} == data
    held = {srv.port: set() for srv in server_pair}
    for key, value in data.items():
        on = [srv for srv in server_pair if raw_get(srv.address, key) is not None]
        assert len(on) == 1, f"{key} is on {len(on)} servers"
        assert raw_get(on[0].address, key) == (0, value)
        assert node_of(on[0]) == hc.hasher.get_node(key)
        held[on[0].port].add(key)
    # rendezvous hashing over 2 nodes: each gets roughly half of 100 keys
    assert all(len(keys) >= 20 for keys in held.values()), {p: len(k) for p, k in held.items()}


def test_hash_storage_commands(server_pair, hc):
    for srv in server_pair:
        k = key_on(hc, srv, "ph_store")
        assert hc.set(k, b"v1") is True
        assert hc.get(k) == b"v1"
        assert hc.add(k, b"v2") is False
        assert hc.replace(k, b"v3") is True
        assert hc.append(k, b"_end") is True
        assert hc.prepend(k, b"start_") is True
        assert hc.get(k) == b"start_v3_end"
        assert raw_get(srv.address, k) == (0, b"start_v3_end")
        missing = key_on(hc, srv, "ph_store_missing")
        assert hc.replace(missing, b"x") is False
        assert hc.append(missing, b"x") is False
        assert hc.prepend(missing, b"x") is False
        assert hc.add(missing, b"new") is True
        assert hc.get(missing) == b"new"
        assert hc.get(key_on(hc, srv, "ph_store_none")) is None


def test_hash_cas(hc, server_pair):
    for srv in server_pair:
        k = key_on(hc, srv, "ph_cas")
        hc.set(k, b"v1")
        value, token = hc.gets(k)
        assert value == b"v1" and token.isdigit()
        assert hc.cas(k, b"v2", token) is True
        assert hc.cas(k, b"v3", token) is False  # stale
        assert hc.get(k) == b"v2"
        missing = key_on(hc, srv, "ph_cas_missing")
        assert hc.gets(missing) == (None, None)
        assert hc.cas(missing, b"x", token) is None


def test_hash_incr_decr(hc, server_pair):
    for srv in server_pair:
        k = key_on(hc, srv, "ph_num")
        hc.set(k, b"10")
        assert hc.incr(k, 5) == 15
        assert hc.decr(k, 20) == 0  # clamps at 0
        hc.set(k, b"18446744073709551615")
        assert hc.incr(k, 2) == 1  # wraps at 2^64
        missing = key_on(hc, srv, "ph_num_missing")
        assert hc.incr(missing, 1) is None
        assert hc.decr(missing, 1) is None
        nan = key_on(hc, srv, "ph_nan")
        hc.set(nan, b"abc")
        with pytest.raises(MemcacheClientError) as e:
            hc.incr(nan, 1)
        assert e.value.args[0] == b"cannot increment or decrement non-numeric value"
        assert hc.get(nan) == b"abc"


def test_hash_delete_touch(hc, server_pair):
    keys = []
    for srv in server_pair:
        k = key_on(hc, srv, "ph_del")
        keys.append(k)
        hc.set(k, b"x")
        assert hc.touch(k, 100) is True
        assert hc.delete(k) is True
        assert hc.delete(k) is False
        assert hc.touch(k, 100) is False
        assert raw_get(srv.address, k) is None
    hc.set_many({k: b"y" for k in keys})
    assert hc.get_many(keys) == {k: b"y" for k in keys}
    assert hc.delete_many(keys) is True
    assert hc.get_many(keys) == {}


def test_hash_values_and_keys(hc, server_pair):
    big = bytes(i % 251 for i in range(1_000_000))
    for srv in server_pair:
        values = {
            key_on(hc, srv, "ph_bytes"): ALL_BYTES,
            key_on(hc, srv, "ph_tricky"): TRICKY,
            key_on(hc, srv, "ph_1m"): big,
            key_on(hc, srv, "ph_long".ljust(240, "x")): b"250-byte key",
        }
        assert all(len(k) <= 250 for k in values)
        for k, v in values.items():
            assert hc.set(k, v) is True
            assert raw_get(srv.address, k) == (0, v)
        assert hc.get_many(list(values)) == values
        too_big = key_on(hc, srv, "ph_2m")
        with pytest.raises(MemcacheServerError) as e:
            hc.set(too_big, b"x" * (2 * 1024 * 1024))
        assert e.value.args[0] == b"object too large for cache"
        assert hc.get(too_big) is None
    with pytest.raises(MemcacheIllegalInputError):
        hc.set("k" * 251, b"v")


def test_hash_flags(hc, server_pair):
    for srv in server_pair:
        k = key_on(hc, srv, "ph_flags")
        for flags in (0, 1, 2**31, 2**32 - 1):
            assert hc.set(k, b"v", flags=flags) is True
            assert raw_get(srv.address, k) == (flags, b"v")


def test_hash_pickle_serde(server_pair):
    c = make_hash_client(server_pair, serde=serde.pickle_serde)
    for srv in server_pair:
        for i, value in enumerate([b"raw", "text \u00e9", 42, [1, "two"]]):
            k = key_on(c, srv, f"ph_serde{i}")
            assert c.set(k, value) is True
            assert c.get(k) == value
    c.close()


def test_hash_expiry(hc, server_pair):
    short = [key_on(hc, srv, "ph_exp_short") for srv in server_pair]
    long = [key_on(hc, srv, "ph_exp_long") for srv in server_pair]
    touched = [key_on(hc, srv, "ph_exp_touched") for srv in server_pair]
    for k in short:
        hc.set(k, b"x", expire=2)
    for k in long:
        hc.set(k, b"x", expire=100)
    for k in touched:
        hc.set(k, b"x", expire=100)
        assert hc.touch(k, 2) is True
    assert hc.get_many(short + long + touched) == {k: b"x" for k in short + long + touched}
    time.sleep(3.1)
    assert hc.get_many(short + touched) == {}
    assert hc.get_many(long) == {k: b"x" for k in long}
    for k in short:
        assert hc.add(k, b"again") is True


def test_hash_flush_all(hc, server_pair):
    keys = [key_on(hc, srv, "ph_flush") for srv in server_pair]
    for k in keys:
        hc.set(k, b"x")
    hc.flush_all()
    assert hc.get_many(keys) == {}
    for srv, k in zip(server_pair, keys):
        assert raw_get(srv.address, k) is None


def test_hash_per_server_stats(server_pair, hc):
    # HashClient has no stats(): the per-server clients it routes to do.
    for srv in server_pair:
        k = key_on(hc, srv, "ph_stats")
        hc.set(k, b"x")
        client = hc.clients[node_of(srv)]
        stats = client.stats()
        assert stats[b"pid"] == srv.pid
        assert stats[b"curr_items"] >= 1
        assert VERSION_RE.match(client.version().decode())


# --------------------------------------------------------------------------
# Meta commands (mg/ms/md/ma/mn/me) through pymemcache's raw_command.
#
# raw_command(cmd, end_tokens) sends `cmd\r\n` and returns what the server
# answered up to the end token. Each test command is followed by `mn`, so the
# end token is the `MN\r\n` that closes the pipeline, and the returned bytes
# are exactly the replies to the meta command(s) before it (quiet-mode misses
# leave nothing). pymemcache's segment reader keeps only the recv() that holds
# the end token, so replies read this way stay well below its 4096-byte read
# size, and error replies (raised by pymemcache as CLIENT_ERROR/SERVER_ERROR,
# after which it closes the connection) are read as a single line.
# --------------------------------------------------------------------------

def meta(mc, command):
    if isinstance(command, str):
        command = command.encode()
    return mc.raw_command(command + b"\r\nmn", b"MN\r\n")


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_noop(mc):
    assert mc.raw_command("mn", "\r\n") == b"MN"
    assert meta(mc, "mg pm_m_noop_missing q") == b""  # only the closing MN
    assert mc.set("pm_m_noop", b"in sync") is True and mc.get("pm_m_noop") == b"in sync"


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_set_get(mc):
    assert meta(mc, "ms pm_m1 5 T0 F30\r\nhello") == b"HD\r\n"
    assert meta(mc, "mg pm_m1 v") == b"VA 5\r\nhello\r\n"
    assert meta(mc, "mg pm_m1") == b"HD\r\n"  # no flags: hit, nothing returned
    reply = meta(mc, "mg pm_m1 v f t s k c")
    m = re.fullmatch(rb"VA 5 f30 t-1 s5 kpm_m1 c(\d+)\r\nhello\r\n", reply)
    assert m, reply
    # the text protocol sees the same item
    assert mc.gets("pm_m1") == (b"hello", m.group(1))
    assert raw_get(mc.server, "pm_m1") == (30, b"hello")
    assert meta(mc, "mg pm_m1 s f") == b"HD s5 f30\r\n"
    # opaque and key echo, base64 key
    assert meta(mc, "mg pm_m1 k v O123") == b"VA 5 kpm_m1 O123\r\nhello\r\n"
    assert meta(mc, "ms cG1fbTI= 2 b\r\nhi") == b"HD\r\n"  # key "pm_m2"
    assert mc.get("pm_m2") == b"hi"
    assert meta(mc, "mg cG1fbTI= b v k") == b"VA 2 kcG1fbTI= b\r\nhi\r\n"


# pymemcache's raw_command drops the first part of a reply that arrives in two
# segments (its _readsegment); a proxy writes replies as they come.
@pytest.mark.direct
def test_meta_get_miss_and_quiet(mc):
    assert meta(mc, "mg pm_m_missing v") == b"EN\r\n"
    assert meta(mc, "mg pm_m_missing v q") == b""
    mc.set("pm_m_q", b"here")
    # a quiet hit is still answered; quiet misses are not
    assert meta(mc, "mg pm_m_missing v q\r\nmg pm_m_q v q k\r\nmg pm_m_missing2 q") == \
        b"VA 4 kpm_m_q\r\nhere\r\n"


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_set_modes(mc):
    mc.delete("pm_m_mode")
    assert meta(mc, "ms pm_m_mode 1 MR\r\nx") == b"NS\r\n"  # replace: missing
    assert meta(mc, "ms pm_m_mode 1 MA\r\nx") == b"NS\r\n"  # append: missing
    assert meta(mc, "ms pm_m_mode 3 ME\r\nmid") == b"HD\r\n"  # add
    assert meta(mc, "ms pm_m_mode 3 ME\r\nnew") == b"NS\r\n"  # add: exists
    assert meta(mc, "ms pm_m_mode 4 MA\r\n_end") == b"HD\r\n"
    assert meta(mc, "ms pm_m_mode 6 MP\r\nstart_") == b"HD\r\n"
    assert mc.get("pm_m_mode") == b"start_mid_end"
    assert meta(mc, "ms pm_m_mode 3 MR\r\nrep") == b"HD\r\n"
    assert meta(mc, "ms pm_m_mode 3 MS\r\nset") == b"HD\r\n"
    assert mc.get("pm_m_mode") == b"set"
    assert meta(mc, "ms pm_m_mode 1 q\r\nq") == b""  # quiet success
    assert mc.get("pm_m_mode") == b"q"


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_cas(mc):
    assert meta(mc, "ms pm_m_cas 2\r\nv1") == b"HD\r\n"
    reply = meta(mc, "mg pm_m_cas c")
    token = int(re.fullmatch(rb"HD c(\d+)\r\n", reply).group(1))
    assert meta(mc, f"ms pm_m_cas 2 C{token + 1000}\r\nv2") == b"EX\r\n"  # stale
    assert meta(mc, f"ms pm_m_cas 2 C{token} c\r\nv3").startswith(b"HD c")
    assert mc.get("pm_m_cas") == b"v3"
    assert meta(mc, f"ms pm_m_cas 2 C{token}\r\nv4") == b"EX\r\n"  # token now stale
    assert meta(mc, f"ms pm_m_cas_missing 2 C{token}\r\nv5") == b"NF\r\n"
    assert mc.get("pm_m_cas_missing") is None
    # a text-protocol gets token works for meta and vice versa
    _v, text_token = mc.gets("pm_m_cas")
    assert meta(mc, b"ms pm_m_cas 2 C" + text_token + b"\r\nv6") == b"HD\r\n"
    new_token = int(re.fullmatch(rb"HD c(\d+)\r\n", meta(mc, "mg pm_m_cas c")).group(1))
    assert mc.cas("pm_m_cas", b"v7", new_token) is True


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_delete(mc):
    mc.set("pm_m_del", b"x")
    assert meta(mc, "md pm_m_del") == b"HD\r\n"
    assert meta(mc, "md pm_m_del") == b"NF\r\n"
    assert mc.get("pm_m_del") is None
    mc.set("pm_m_del", b"x")
    assert meta(mc, "md pm_m_del q") == b""
    assert mc.get("pm_m_del") is None
    mc.set("pm_m_del", b"x")
    token = int(re.fullmatch(rb"HD c(\d+)\r\n", meta(mc, "mg pm_m_del c")).group(1))
    assert meta(mc, f"md pm_m_del C{token + 1000}") == b"EX\r\n"
    assert meta(mc, f"md pm_m_del C{token}") == b"HD\r\n"
    assert mc.get("pm_m_del") is None


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_arithmetic(mc):
    mc.delete("pm_m_num")
    assert meta(mc, "ma pm_m_num") == b"NF\r\n"
    assert meta(mc, "ma pm_m_num v") == b"NF\r\n"
    assert meta(mc, "ma pm_m_num N0 J10 v") == b"VA 2\r\n10\r\n"  # autovivify
    assert meta(mc, "ma pm_m_num v D5") == b"VA 2\r\n15\r\n"
    assert meta(mc, "ma pm_m_num") == b"HD\r\n"
    assert mc.get("pm_m_num") == b"16"
    assert meta(mc, "ma pm_m_num v MD D100") == b"VA 1\r\n0\r\n"  # clamps at 0
    assert meta(mc, "ma pm_m_num v M- D1") == b"VA 1\r\n0\r\n"
    assert meta(mc, "ma pm_m_num q D3") == b""
    assert meta(mc, "ma pm_m_num v MI") == b"VA 1\r\n4\r\n"
    mc.set("pm_m_wrap", b"18446744073709551615")
    assert meta(mc, "ma pm_m_wrap v") == b"VA 1\r\n0\r\n"  # wraps at 2^64
    assert mc.get("pm_m_wrap") == b"0" + b" " * 19
    mc.set("pm_m_nan", b"abc")
    with pytest.raises(MemcacheClientError) as e:
        mc.raw_command("ma pm_m_nan v", "\r\n")
    assert e.value.args[0] == b"cannot increment or decrement non-numeric value"
    assert mc.get("pm_m_nan") == b"abc"
    reply = meta(mc, "ma pm_m_num t c v")
    assert re.fullmatch(rb"VA 1 t-1 c\d+\r\n5\r\n", reply), reply


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_ttl_and_touch(mc):
    assert meta(mc, "ms pm_m_ttl 1 T100\r\nx") == b"HD\r\n"
    assert meta(mc, "mg pm_m_ttl t v T200") == b"VA 1 t100\r\nx\r\n"  # ttl before the touch
    assert meta(mc, "mg pm_m_ttl t") == b"HD t200\r\n"
    assert meta(mc, "ms pm_m_ttl 1 T0\r\nx") == b"HD\r\n"
    assert meta(mc, "mg pm_m_ttl t") == b"HD t-1\r\n"
    assert meta(mc, "mg pm_m_ttl_missing t T10") == b"EN\r\n"
    # a negative ttl stores an already-expired item
    assert meta(mc, "ms pm_m_ttl 1 T-1\r\ny") == b"HD\r\n"
    assert meta(mc, "mg pm_m_ttl v") == b"EN\r\n"


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_expiry(mc):
    meta(mc, "ms pm_m_exp 1 T2\r\nx")
    meta(mc, "ms pm_m_exp_touched 1 T100\r\nx")
    assert meta(mc, "mg pm_m_exp_touched T2") == b"HD\r\n"
    meta(mc, "ms pm_m_exp_long 1 T2\r\nx")
    assert meta(mc, "mg pm_m_exp_long T100") == b"HD\r\n"
    time.sleep(3.1)
    assert meta(mc, "mg pm_m_exp v") == b"EN\r\n"
    assert meta(mc, "mg pm_m_exp_touched v") == b"EN\r\n"
    assert meta(mc, "mg pm_m_exp_long v") == b"VA 1\r\nx\r\n"


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_vivify_and_stale(mc):
    mc.delete("pm_m_viv")
    # miss with N: the first client wins the right to fill (W), others see Z
    assert meta(mc, "mg pm_m_viv s v N30") == b"VA 0 s0 W\r\n\r\n"
    assert meta(mc, "mg pm_m_viv s v N30") == b"VA 0 s0 Z\r\n\r\n"
    # md I marks stale: next reader wins (X W), then (Z X); a set clears it
    mc.set("pm_m_stale", b"abc")
    assert meta(mc, "md pm_m_stale I T30") == b"HD\r\n"
    assert meta(mc, "mg pm_m_stale v") == b"VA 3 X W\r\nabc\r\n"
    assert meta(mc, "mg pm_m_stale v") == b"VA 3 Z X\r\nabc\r\n"
    assert meta(mc, "ms pm_m_stale 3 I\r\nnew") == b"HD\r\n"
    assert meta(mc, "mg pm_m_stale v") == b"VA 3\r\nnew\r\n"


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_values(mc):
    for key, value in (("pm_m_bytes", ALL_BYTES), ("pm_m_tricky", TRICKY),
                       ("pm_m_end", b"\r\nEND\r\n"), ("pm_m_empty", b"")):
        assert meta(mc, f"ms {key} {len(value)}\r\n".encode() + value) == b"HD\r\n"
        assert meta(mc, f"mg {key} v") == f"VA {len(value)}\r\n".encode() + value + b"\r\n"
        assert mc.get(key) == value


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_big_values(server, mc):
    value = bytes(i % 251 for i in range(1_000_000))
    # A fresh socket: pymemcache's raw_command keeps only the read holding
    # the end token, and after a 1 MB write HD and MN may come apart.
    reply = raw_exchange(server.address, b"ms pm_m_1m 1000000\r\n" + value + b"\r\nmn\r\n",
                         terminators=(b"MN\r\n",))
    assert reply == b"HD\r\nMN\r\n"
    assert meta(mc, "mg pm_m_1m s") == b"HD s1000000\r\n"
    assert mc.get("pm_m_1m") == value
    # The error line may come before the server has swallowed the 2 MB, so
    # read just that line (pymemcache then closes the connection).
    with pytest.raises(MemcacheServerError) as e:
        mc.raw_command(b"ms pm_m_2m 2097152\r\n" + b"x" * 2097152, b"\r\n")
    assert e.value.args[0] == b"object too large for cache"
    assert meta(mc, "mg pm_m_2m v") == b"EN\r\n"
    # on one connection: the 2 MB value (2097152 bytes that look like `mn`
    # commands) is swallowed, not parsed as commands
    reply = raw_exchange(server.address, b"ms pm_m_2m 2097152 T0\r\n" + b"mn\r\n" * 524288 +
                         b"\r\nmg pm_m_2m v\r\nmn\r\n", terminators=(b"MN\r\n",))
    assert reply == b"SERVER_ERROR object too large for cache\r\nEN\r\nMN\r\n"


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_key_length(mc):
    key = "m" * 250
    assert meta(mc, f"ms {key} 2\r\nok") == b"HD\r\n"
    assert meta(mc, f"mg {key} v") == b"VA 2\r\nok\r\n"
    assert mc.get(key) == b"ok"
    with pytest.raises(MemcacheClientError) as e:
        mc.raw_command(f"mg {'m' * 251} v", "\r\n")
    assert e.value.args[0] == b"bad command line format"
    assert mc.get(key) == b"ok"


@pytest.mark.proxies("osmium-proxy")  # nutcracker 0.5.0 has no meta commands
def test_meta_debug(mc):
    mc.set("pm_m_me", b"hello", expire=100)
    reply = meta(mc, "me pm_m_me")
    assert re.fullmatch(rb"ME pm_m_me exp=-?\d+ la=\d+ cas=\d+ fetch=(yes|no) cls=\d+ size=\d+\r\n",
                        reply), reply
    assert meta(mc, "me pm_m_me_missing") == b"EN\r\n"
