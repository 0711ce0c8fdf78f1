"""pylibmc (libmemcached, text protocol: binary=False) against genuine
memcached and osmium. Expected values are what memcached 1.6 answers."""
import time

import pylibmc
import pytest

from .helpers import ALL_BYTES, CORE_STATS, TRICKY, VERSION_RE, raw_get

# Also run through nutcracker and osmium-proxy in front of three servers
# (conftest.py); tests marked `direct` need the server itself.
THROUGH_PROXIES = True


def make_client(srv, **behaviors):
    b = {"cas": True, "tcp_nodelay": True}
    b.update(behaviors)
    return pylibmc.Client([f"127.0.0.1:{srv.port}"], binary=False, behaviors=b)


@pytest.fixture
def mc(server):
    c = make_client(server)
    yield c
    c.disconnect_all()


def test_text_protocol(mc):
    assert mc.binary is False


def test_set_get(mc):
    assert mc.set("pl_a", b"hello") is True
    assert mc.get("pl_a") == b"hello"
    assert mc.set("pl_a", b"world") is True
    assert mc.get("pl_a") == b"world"
    assert mc.get("pl_missing") is None
    assert mc.get("pl_missing", b"dflt") == b"dflt"
    assert mc.set("pl_empty", b"") is True
    assert mc.get("pl_empty") == b""


def test_get_multi_100_keys(mc):
    data = {f"pl_multi_{i:03d}": f"value-{i}".encode() * (i + 1) for i in range(100)}
    assert mc.set_multi(data) == []
    keys = list(data) + ["pl_multi_missing_1", "pl_multi_missing_2"]
    assert mc.get_multi(keys) == data


def test_get_multi_100_max_length_keys(mc):
    data = {(f"pl_long_{i:03d}_").ljust(250, "x"): str(i).encode() for i in range(100)}
    assert mc.set_multi(data) == []
    assert mc.get_multi(list(data)) == data


def test_add(mc):
    assert mc.add("pl_add", b"1") is True
    assert mc.add("pl_add", b"2") is False
    assert mc.get("pl_add") == b"1"
    assert mc.add_multi({"pl_add": b"3", "pl_add_new": b"4"}) == ["pl_add"]
    assert mc.get_multi(["pl_add", "pl_add_new"]) == {"pl_add": b"1", "pl_add_new": b"4"}


def test_replace(mc):
    assert mc.replace("pl_repl", b"1") is False
    assert mc.get("pl_repl") is None
    mc.set("pl_repl", b"1")
    assert mc.replace("pl_repl", b"2") is True
    assert mc.get("pl_repl") == b"2"


def test_append_prepend(mc):
    assert mc.append("pl_ap_missing", b"x") is False
    assert mc.prepend("pl_ap_missing", b"x") is False
    assert mc.get("pl_ap_missing") is None
    mc.set("pl_ap", b"mid")
    assert mc.append("pl_ap", b"_end") is True
    assert mc.prepend("pl_ap", b"start_") is True
    assert mc.get("pl_ap") == b"start_mid_end"
    assert mc.append("pl_ap", b"\r\nEND\r\n") is True
    assert mc.get("pl_ap") == b"start_mid_end\r\nEND\r\n"


def test_cas(mc):
    mc.set("pl_cas", b"v1")
    value, token = mc.gets("pl_cas")
    assert value == b"v1" and isinstance(token, int) and token > 0
    assert mc.cas("pl_cas", b"v2", token) is True
    assert mc.get("pl_cas") == b"v2"
    assert mc.cas("pl_cas", b"v3", token) is False  # stale
    assert mc.get("pl_cas") == b"v2"
    _v, token2 = mc.gets("pl_cas")
    assert token2 != token
    mc.set("pl_cas", b"v4")
    assert mc.cas("pl_cas", b"v5", token2) is False
    assert mc.get("pl_cas") == b"v4"
    assert mc.gets("pl_cas_missing") == (None, None)
    with pytest.raises(pylibmc.NotFound):
        mc.cas("pl_cas_missing", b"x", token)
    assert mc.get("pl_cas_missing") is None


def test_incr_decr(mc):
    mc.set("pl_num", b"10")
    assert mc.incr("pl_num", 5) == 15
    assert mc.decr("pl_num", 3) == 12
    assert mc.get("pl_num") == b"12"
    mc.set("pl_num_int", 10)  # pylibmc stores ints as text with a flag
    assert mc.incr("pl_num_int") == 11
    assert mc.get("pl_num_int") == 11
    mc.set_multi({"pl_im1": b"1", "pl_im2": b"2"})
    mc.incr_multi(["pl_im1", "pl_im2"], delta=10)
    assert mc.get_multi(["pl_im1", "pl_im2"]) == {"pl_im1": b"11", "pl_im2": b"12"}


def test_incr_wraps_at_2_64(mc):
    mc.set("pl_wrap", b"18446744073709551615")
    assert mc.incr("pl_wrap", 1) == 0
    mc.set("pl_wrap2", b"18446744073709551610")
    assert mc.incr("pl_wrap2", 10) == 4
    mc.set("pl_big", b"18446744073709551614")
    assert mc.incr("pl_big", 1) == 18446744073709551615


def test_incr_shrink_pads_in_place(mc):
    mc.set("pl_pad", b"100")
    assert mc.decr("pl_pad", 1) == 99
    assert mc.get("pl_pad") == b"99 "


def test_decr_clamps_at_zero(mc):
    mc.set("pl_clamp", b"5")
    assert mc.decr("pl_clamp", 10) == 0
    assert mc.decr("pl_clamp", 1) == 0
    assert int(mc.get("pl_clamp")) == 0


def test_incr_decr_missing(mc):
    with pytest.raises(pylibmc.NotFound):
        mc.incr("pl_num_missing", 1)
    with pytest.raises(pylibmc.NotFound):
        mc.decr("pl_num_missing", 1)
    assert mc.get("pl_num_missing") is None


def test_incr_decr_non_numeric(mc):
    mc.set("pl_nan", b"abc")
    with pytest.raises(pylibmc.ClientError):
        mc.incr("pl_nan", 1)
    with pytest.raises(pylibmc.ClientError):
        mc.decr("pl_nan", 1)
    assert mc.get("pl_nan") == b"abc"
    assert mc.set("pl_nan2", b"1") is True and mc.get("pl_nan2") == b"1"


def test_delete(mc):
    mc.set("pl_del", b"x")
    assert mc.delete("pl_del") is True
    assert mc.get("pl_del") is None
    assert mc.delete("pl_del") is False
    mc.set_multi({"pl_del1": b"1", "pl_del2": b"2"})
    assert mc.delete_multi(["pl_del1", "pl_del2"]) is True
    assert mc.get_multi(["pl_del1", "pl_del2"]) == {}
    mc.set("pl_del1", b"1")
    assert mc.delete_multi(["pl_del1", "pl_del_missing"]) is False
    assert mc.get("pl_del1") is None


def test_touch(mc):
    mc.set("pl_touch", b"x")
    assert mc.touch("pl_touch", 100) is True
    assert mc.get("pl_touch") == b"x"
    assert mc.touch("pl_touch_missing", 100) is False


def test_noreply_behavior(server):
    c = make_client(server, _noreply=1)
    c.set("pl_nr", b"1")
    c.set_multi({"pl_nr2": b"2", "pl_nr3": b"3"})
    c.delete("pl_nr3")
    # Read back on the same connection: the server answers this get only
    # after the noreply requests before it. (A second connection could race
    # ahead of them on any server, memcached included.)
    assert c.get_multi(["pl_nr", "pl_nr2", "pl_nr3"]) == {"pl_nr": b"1", "pl_nr2": b"2"}
    c.disconnect_all()


def test_expiry(mc):
    mc.set("pl_exp_short", b"x", time=1)
    mc.set("pl_exp_long", b"x", time=100)
    mc.set("pl_exp_forever", b"x", time=0)
    mc.set("pl_exp_touched_short", b"x", time=100)
    assert mc.touch("pl_exp_touched_short", 1) is True
    # ttl 2, not 1: with a 1 s clock a ttl-1 item may expire before the touch
    mc.set("pl_exp_touched_long", b"x", time=2)
    assert mc.touch("pl_exp_touched_long", 100) is True
    assert mc.add("pl_exp_add", b"first", time=1) is True
    mc.set("pl_exp_2s", b"x", time=2)
    assert mc.get("pl_exp_2s") == b"x"  # 2 is relative, not a unix time
    t0 = time.monotonic()
    time.sleep(2.1)
    assert time.monotonic() - t0 >= 2.1
    assert mc.get("pl_exp_short") is None
    assert mc.get("pl_exp_touched_short") is None
    assert mc.get("pl_exp_add") is None
    assert mc.get_multi(["pl_exp_short", "pl_exp_touched_short"]) == {}
    assert mc.gets("pl_exp_short") == (None, None)
    assert mc.get("pl_exp_long") == b"x"
    assert mc.get("pl_exp_forever") == b"x"
    assert mc.get("pl_exp_touched_long") == b"x"
    assert mc.add("pl_exp_add", b"second") is True
    assert mc.get("pl_exp_add") == b"second"
    assert mc.replace("pl_exp_short", b"y") is False
    assert mc.append("pl_exp_touched_short", b"y") is False
    assert mc.touch("pl_exp_short", 10) is False


def test_binary_values(mc):
    mc.set("pl_bytes", ALL_BYTES)
    assert mc.get("pl_bytes") == ALL_BYTES
    mc.set("pl_tricky", TRICKY)
    assert mc.get("pl_tricky") == TRICKY
    mc.set("pl_end", b"\r\nEND\r\n")
    assert mc.get_multi(["pl_end", "pl_tricky", "pl_bytes"]) == {
        "pl_end": b"\r\nEND\r\n", "pl_tricky": TRICKY, "pl_bytes": ALL_BYTES}
    big = ALL_BYTES * 1000
    mc.set("pl_bytes_big", big)
    assert mc.get("pl_bytes_big") == big


def test_one_million_byte_value(mc):
    value = bytes(i % 251 for i in range(1_000_000))
    assert mc.set("pl_1m", value) is True
    assert mc.get("pl_1m") == value
    assert mc.get_multi(["pl_1m", "pl_missing"]) == {"pl_1m": value}


def test_two_megabyte_value_rejected(mc):
    # libmemcached sends the value; the server answers
    # "SERVER_ERROR object too large for cache", surfaced as TooBig.
    with pytest.raises(pylibmc.TooBig):
        mc.set("pl_2m", b"x" * (2 * 1024 * 1024))
    assert mc.get("pl_2m") is None
    assert mc.set("pl_after_2m", b"ok") is True
    assert mc.get("pl_after_2m") == b"ok"


def test_too_large_set_removes_old_value(mc):
    mc.set("pl_2m_old", b"old")
    with pytest.raises(pylibmc.TooBig):
        mc.set("pl_2m_old", b"y" * (2 * 1024 * 1024))
    assert mc.get("pl_2m_old") is None


def test_key_length(mc):
    key = "k" * 250
    assert mc.set(key, b"v250") is True
    assert mc.get(key) == b"v250"
    assert mc.get_multi([key]) == {key: b"v250"}
    assert mc.delete(key) is True
    with pytest.raises(ValueError):
        mc.set("k" * 251, b"v")


@pytest.mark.parametrize("value,flags", [
    (b"raw bytes", 0), ("text \u00e9", 16), (42, 4), (2**70, 4), (True, 2), ([1, "two"], 1),
], ids=["bytes", "str", "int", "bigint", "bool", "list"])
def test_serialisation_flags(server, mc, value, flags):
    assert mc.set("pl_serde", value) is True
    got = mc.get("pl_serde")
    if value is True:
        assert got == 1  # pylibmc reads its bool flag back as int
    else:
        assert got == value and type(got) is type(value)
    assert raw_get(server.address, "pl_serde")[0] == flags


@pytest.mark.proxies("osmium-proxy")  # nutcracker refuses flush_all
def test_flush_all(mc):
    mc.set_multi({f"pl_flush_{i}": b"x" for i in range(10)})
    assert mc.flush_all() is True
    assert mc.get_multi([f"pl_flush_{i}" for i in range(10)]) == {}
    assert mc.add("pl_flush_0", b"y") is True
    assert mc.get("pl_flush_0") == b"y"


def test_stats(fresh_server):
    c = make_client(fresh_server)
    for i in range(10):
        c.set(f"pl_st_{i}", b"x" * 10)
    for i in range(7):
        assert c.get(f"pl_st_{i}") == b"x" * 10
    for i in range(3):
        assert c.get(f"pl_st_missing_{i}") is None
    [(name, stats)] = c.get_stats()
    assert name.decode().startswith(f"127.0.0.1:{fresh_server.port}")
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
    assert VERSION_RE.match(stats["version"].decode()), stats["version"]
