"""python-memcached (`import memcache`) against genuine memcached and osmium.
Expected values are what memcached 1.6 answers."""
import time

import memcache
import pytest

from .helpers import ALL_BYTES, CORE_STATS, TRICKY, VERSION_RE, raw_get

# Also run through nutcracker and osmium-proxy in front of three servers
# (conftest.py); tests marked `direct` need the server itself.
THROUGH_PROXIES = True


def make_client(srv, **kw):
    kw.setdefault("cache_cas", True)
    kw.setdefault("socket_timeout", 10)
    kw.setdefault("dead_retry", 0)
    return memcache.Client([f"127.0.0.1:{srv.port}"], **kw)


@pytest.fixture
def mc(server):
    c = make_client(server)
    yield c
    c.disconnect_all()


def test_set_get(mc):
    assert mc.set("py_a", b"hello") is True
    assert mc.get("py_a") == b"hello"
    assert mc.set("py_a", b"world") is True
    assert mc.get("py_a") == b"world"
    assert mc.get("py_missing") is None
    assert mc.set("py_empty", b"") is True
    assert mc.get("py_empty") == b""


def test_get_multi_100_keys(mc):
    data = {f"py_multi_{i:03d}": f"value-{i}".encode() * (i + 1) for i in range(100)}
    assert mc.set_multi(data) == []
    keys = list(data) + ["py_multi_missing_1", "py_multi_missing_2"]
    assert mc.get_multi(keys) == data
    # key_prefix variant
    assert mc.get_multi([f"{i:03d}" for i in range(100)], key_prefix="py_multi_") == {
        f"{i:03d}": v for i, v in enumerate(data.values())}


def test_get_multi_100_max_length_keys(mc):
    data = {(f"py_long_{i:03d}_").ljust(250, "x"): str(i).encode() for i in range(100)}
    assert mc.set_multi(data) == []
    assert mc.get_multi(list(data)) == data


def test_add(mc):
    assert mc.add("py_add", b"1") is True
    assert mc.add("py_add", b"2") is False
    assert mc.get("py_add") == b"1"


def test_replace(mc):
    assert mc.replace("py_repl", b"1") is False
    assert mc.get("py_repl") is None
    mc.set("py_repl", b"1")
    assert mc.replace("py_repl", b"2") is True
    assert mc.get("py_repl") == b"2"


def test_append_prepend(mc):
    assert mc.append("py_ap_missing", b"x") is False
    assert mc.prepend("py_ap_missing", b"x") is False
    assert mc.get("py_ap_missing") is None
    mc.set("py_ap", b"mid")
    assert mc.append("py_ap", b"_end") is True
    assert mc.prepend("py_ap", b"start_") is True
    assert mc.get("py_ap") == b"start_mid_end"
    assert mc.append("py_ap", b"\r\nEND\r\n") is True
    assert mc.get("py_ap") == b"start_mid_end\r\nEND\r\n"


def test_cas(server, mc):
    mc.set("py_cas", b"v1")
    assert mc.gets("py_cas") == b"v1"
    token = mc.cas_ids[b"py_cas"]
    assert isinstance(token, int) and token > 0
    assert mc.cas("py_cas", b"v2") is True  # fresh token
    assert mc.get("py_cas") == b"v2"
    # stale: another client changed the item after our gets
    assert mc.gets("py_cas") == b"v2"
    other = make_client(server)
    assert other.set("py_cas", b"other") is True
    assert mc.cas("py_cas", b"v3") is False
    assert mc.get("py_cas") == b"other"
    # missing: deleted after our gets -> NOT_FOUND -> False, nothing stored
    assert mc.gets("py_cas") == b"other"
    assert other.delete("py_cas") == 1
    assert mc.cas("py_cas", b"v4") is False
    assert mc.get("py_cas") is None
    other.disconnect_all()
    # gets of a missing key
    assert mc.gets("py_cas_missing") is None


def test_incr_decr(mc):
    mc.set("py_num", b"10")
    assert mc.incr("py_num", 5) == 15
    assert mc.decr("py_num", 3) == 12
    assert mc.get("py_num") == b"12"
    mc.set("py_num_int", 10)
    assert mc.incr("py_num_int") == 11
    assert mc.get("py_num_int") == 11


def test_incr_wraps_at_2_64(mc):
    mc.set("py_wrap", b"18446744073709551615")
    assert mc.incr("py_wrap", 1) == 0
    mc.set("py_wrap2", b"18446744073709551610")
    assert mc.incr("py_wrap2", 10) == 4
    mc.set("py_big", b"18446744073709551614")
    assert mc.incr("py_big", 1) == 18446744073709551615


def test_incr_shrink_pads_in_place(mc):
    mc.set("py_pad", b"1000")
    assert mc.decr("py_pad", 1) == 999
    assert mc.get("py_pad") == b"999 "


def test_decr_clamps_at_zero(mc):
    mc.set("py_clamp", b"5")
    assert mc.decr("py_clamp", 10) == 0
    assert mc.decr("py_clamp", 1) == 0
    assert int(mc.get("py_clamp")) == 0


def test_incr_decr_missing(mc):
    assert mc.incr("py_num_missing", 1) is None
    assert mc.decr("py_num_missing", 1) is None
    assert mc.get("py_num_missing") is None


def test_incr_decr_non_numeric(mc):
    # python-memcached int()s the reply line, so the server's exact error
    # line shows up in the ValueError.
    mc.set("py_nan", b"abc")
    with pytest.raises(ValueError, match="CLIENT_ERROR cannot increment or decrement non-numeric value"):
        mc.incr("py_nan", 1)
    with pytest.raises(ValueError, match="CLIENT_ERROR cannot increment or decrement non-numeric value"):
        mc.decr("py_nan", 1)
    assert mc.get("py_nan") == b"abc"
    assert mc.set("py_nan2", b"1") is True and mc.get("py_nan2") == b"1"


def test_delete(mc):
    mc.set("py_del", b"x")
    assert mc.delete("py_del") == 1
    assert mc.get("py_del") is None
    assert mc.delete("py_del") == 0
    mc.set_multi({"py_del1": b"1", "py_del2": b"2"})
    assert mc.delete_multi(["py_del1", "py_del2"]) == 1
    assert mc.get_multi(["py_del1", "py_del2"]) == {}


def test_touch(mc):
    mc.set("py_touch", b"x")
    assert mc.touch("py_touch", 100) == 1
    assert mc.get("py_touch") == b"x"
    assert mc.touch("py_touch_missing", 100) == 0


def test_noreply(mc):
    assert mc.set("py_nr", b"1", noreply=True) is True
    assert mc.set_multi({"py_nr2": b"2", "py_nr3": b"3"}, noreply=True) == []
    assert mc.delete("py_nr3", noreply=True) == 1
    assert mc.get_multi(["py_nr", "py_nr2", "py_nr3"]) == {"py_nr": b"1", "py_nr2": b"2"}


def test_expiry(mc):
    mc.set("py_exp_short", b"x", time=1)
    mc.set("py_exp_long", b"x", time=100)
    mc.set("py_exp_forever", b"x", time=0)
    mc.set("py_exp_touched_short", b"x", time=100)
    assert mc.touch("py_exp_touched_short", 1) == 1
    # ttl 2, not 1: with a 1 s clock a ttl-1 item may expire before the touch
    mc.set("py_exp_touched_long", b"x", time=2)
    assert mc.touch("py_exp_touched_long", 100) == 1
    assert mc.add("py_exp_add", b"first", time=1) is True
    mc.set("py_exp_2s", b"x", time=2)
    assert mc.get("py_exp_2s") == b"x"  # 2 is relative, not a unix time
    t0 = time.monotonic()
    time.sleep(2.1)
    assert time.monotonic() - t0 >= 2.1
    assert mc.get("py_exp_short") is None
    assert mc.get("py_exp_touched_short") is None
    assert mc.get("py_exp_add") is None
    assert mc.get_multi(["py_exp_short", "py_exp_touched_short"]) == {}
    assert mc.gets("py_exp_short") is None
    assert mc.get("py_exp_long") == b"x"
    assert mc.get("py_exp_forever") == b"x"
    assert mc.get("py_exp_touched_long") == b"x"
    assert mc.add("py_exp_add", b"second") is True
    assert mc.get("py_exp_add") == b"second"
    assert mc.replace("py_exp_short", b"y") is False
    assert mc.append("py_exp_touched_short", b"y") is False
    assert mc.touch("py_exp_short", 10) == 0


def test_binary_values(mc):
    mc.set("py_bytes", ALL_BYTES)
    assert mc.get("py_bytes") == ALL_BYTES
    mc.set("py_tricky", TRICKY)
    assert mc.get("py_tricky") == TRICKY
    mc.set("py_end", b"\r\nEND\r\n")
    assert mc.get_multi(["py_end", "py_tricky", "py_bytes"]) == {
        "py_end": b"\r\nEND\r\n", "py_tricky": TRICKY, "py_bytes": ALL_BYTES}
    big = ALL_BYTES * 1000
    mc.set("py_bytes_big", big)
    assert mc.get("py_bytes_big") == big


def test_one_million_byte_value(mc):
    value = bytes(i % 251 for i in range(1_000_000))
    assert mc.set("py_1m", value) is True
    assert mc.get("py_1m") == value
    assert mc.get_multi(["py_1m", "py_missing"]) == {"py_1m": value}


def test_two_megabyte_value_rejected_by_client(mc):
    # python-memcached refuses values over 1 MB itself and returns 0.
    assert mc.set("py_2m", b"x" * (2 * 1024 * 1024)) == 0
    assert mc.get("py_2m") is None


def test_two_megabyte_value_rejected_by_server(server):
    # With the client-side limit off the value is sent; the server answers
    # SERVER_ERROR, which python-memcached reports as False.
    c = make_client(server, server_max_value_length=0)
    c.set("py_2m_srv", b"old")
    assert c.set("py_2m_srv", b"x" * (2 * 1024 * 1024)) is False
    assert c.get("py_2m_srv") is None  # memcached drops the old value too
    assert c.set("py_after_2m", b"ok") is True
    assert c.get("py_after_2m") == b"ok"
    c.disconnect_all()


def test_key_length(mc):
    key = "k" * 250
    assert mc.set(key, b"v250") is True
    assert mc.get(key) == b"v250"
    assert mc.get_multi([key]) == {key: b"v250"}
    assert mc.delete(key) == 1
    with pytest.raises(memcache.Client.MemcachedKeyLengthError):
        mc.set("k" * 251, b"v")


@pytest.mark.parametrize("value,flags", [
    (b"raw bytes", 0), ("text \u00e9", 16), (42, 2), (2**70, 2), (True, 1), ([1, "two"], 1),
], ids=["bytes", "str", "int", "bigint", "bool", "list"])
def test_serialisation_flags(server, mc, value, flags):
    assert mc.set("py_serde", value) is True
    got = mc.get("py_serde")
    assert got == value and type(got) is type(value)
    assert raw_get(server.address, "py_serde")[0] == flags


@pytest.mark.proxies("osmium-proxy")  # nutcracker refuses flush_all
def test_flush_all(mc):
    mc.set_multi({f"py_flush_{i}": b"x" for i in range(10)})
    mc.flush_all()
    assert mc.get_multi([f"py_flush_{i}" for i in range(10)]) == {}
    assert mc.add("py_flush_0", b"y") is True
    assert mc.get("py_flush_0") == b"y"


def test_stats(fresh_server):
    c = make_client(fresh_server)
    for i in range(10):
        c.set(f"py_st_{i}", b"x" * 10)
    for i in range(7):
        assert c.get(f"py_st_{i}") == b"x" * 10
    for i in range(3):
        assert c.get(f"py_st_missing_{i}") is None
    [(name, stats)] = c.get_stats()
    assert name.startswith(f"127.0.0.1:{fresh_server.port}")
    for key in CORE_STATS:
        assert key in stats, f"stats lacks {key}"
    assert int(stats["curr_items"]) == 10
    assert int(stats["total_items"]) == 10
    assert int(stats["get_hits"]) == 7
    assert int(stats["get_misses"]) == 3
    assert int(stats["cmd_get"]) == 10
    assert int(stats["cmd_set"]) == 10
    assert int(stats["pid"]) == fresh_server.pid
    assert int(stats["limit_maxbytes"]) == 64 * 1024 * 1024
    assert int(stats["threads"]) == 2
    c.disconnect_all()


@pytest.mark.direct  # reads a server's stats
def test_version(mc):
    [(_name, stats)] = mc.get_stats()
    assert VERSION_RE.match(stats["version"]), stats["version"]
