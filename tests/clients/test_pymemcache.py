"""pymemcache (text protocol) against genuine memcached and osmium.

Every test runs once per server kind; the expected values are what memcached
1.6 answers, so a failure on osmium only is a compatibility difference.
"""
import time

import pytest
from pymemcache import serde
from pymemcache.client.base import Client
from pymemcache.exceptions import (MemcacheClientError, MemcacheIllegalInputError,
                                   MemcacheServerError)

from .helpers import ALL_BYTES, CORE_STATS, TRICKY, VERSION_RE, raw_get


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
