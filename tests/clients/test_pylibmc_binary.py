"""pylibmc (libmemcached 1.0.16) with the binary protocol (binary=True), and
pylibmc's consistent (ketama) distribution over two servers of one kind, in
both protocols, against genuine memcached and osmium. Expected values are
what memcached 1.6 answers; where libmemcached reports a binary status
differently from the text reply, the test says so."""
import time

import pylibmc
import pytest

from .helpers import ALL_BYTES, CORE_STATS, TRICKY, VERSION_RE, raw_get


def make_client(srv, **behaviors):
    b = {"cas": True, "tcp_nodelay": True}
    b.update(behaviors)
    return pylibmc.Client([f"127.0.0.1:{srv.port}"], binary=True, behaviors=b)


@pytest.fixture
def mc(server):
    c = make_client(server)
    yield c
    c.disconnect_all()


def test_binary_protocol(mc):
    assert mc.binary is True


def test_set_get(mc):
    assert mc.set("plb_a", b"hello") is True
    assert mc.get("plb_a") == b"hello"
    assert mc.set("plb_a", b"world") is True
    assert mc.get("plb_a") == b"world"
    assert mc.get("plb_missing") is None
    assert mc.get("plb_missing", b"dflt") == b"dflt"
    assert mc.set("plb_empty", b"") is True
    assert mc.get("plb_empty") == b""


def test_get_multi_100_keys(mc):
    # binary multi-get: GETKQ per key, then NOOP
    data = {f"plb_multi_{i:03d}": f"value-{i}".encode() * (i + 1) for i in range(100)}
    assert mc.set_multi(data) == []
    keys = list(data) + ["plb_multi_missing_1", "plb_multi_missing_2"]
    assert mc.get_multi(keys) == data


def test_get_multi_100_max_length_keys(mc):
    data = {(f"plb_long_{i:03d}_").ljust(250, "x"): str(i).encode() for i in range(100)}
    assert mc.set_multi(data) == []
    assert mc.get_multi(list(data)) == data


def test_add(mc):
    assert mc.add("plb_add", b"1") is True
    assert mc.add("plb_add", b"2") is False
    assert mc.get("plb_add") == b"1"
    assert mc.add_multi({"plb_add": b"3", "plb_add_new": b"4"}) == ["plb_add"]
    assert mc.get_multi(["plb_add", "plb_add_new"]) == {"plb_add": b"1", "plb_add_new": b"4"}


def test_replace(mc):
    # binary REPLACE of a missing key: status KEY_ENOENT, raised as NotFound
    # (the text protocol's NOT_STORED reads as False)
    with pytest.raises(pylibmc.NotFound):
        mc.replace("plb_repl", b"1")
    assert mc.get("plb_repl") is None
    mc.set("plb_repl", b"1")
    assert mc.replace("plb_repl", b"2") is True
    assert mc.get("plb_repl") == b"2"


def test_append_prepend(mc):
    assert mc.append("plb_ap_missing", b"x") is False
    assert mc.prepend("plb_ap_missing", b"x") is False
    assert mc.get("plb_ap_missing") is None
    mc.set("plb_ap", b"mid")
    assert mc.append("plb_ap", b"_end") is True
    assert mc.prepend("plb_ap", b"start_") is True
    assert mc.get("plb_ap") == b"start_mid_end"
    assert mc.append("plb_ap", b"\r\nEND\r\n") is True
    assert mc.get("plb_ap") == b"start_mid_end\r\nEND\r\n"


def test_append_keeps_flags(server, mc):
    mc.set("plb_ap_flags", 12)  # pylibmc: int stored as text with flag 4
    mc.append("plb_ap_flags", b"3")
    assert raw_get(server.address, "plb_ap_flags") == (4, b"123")
    assert mc.get("plb_ap_flags") == 123


def test_cas(mc):
    mc.set("plb_cas", b"v1")
    value, token = mc.gets("plb_cas")
    assert value == b"v1" and isinstance(token, int) and token > 0
    assert mc.cas("plb_cas", b"v2", token) is True
    assert mc.get("plb_cas") == b"v2"
    assert mc.cas("plb_cas", b"v3", token) is False  # stale
    assert mc.get("plb_cas") == b"v2"
    _v, token2 = mc.gets("plb_cas")
    assert token2 != token
    mc.set("plb_cas", b"v4")
    assert mc.cas("plb_cas", b"v5", token2) is False
    assert mc.get("plb_cas") == b"v4"
    assert mc.gets("plb_cas_missing") == (None, None)
    with pytest.raises(pylibmc.NotFound):
        mc.cas("plb_cas_missing", b"x", token)
    assert mc.get("plb_cas_missing") is None


def test_cas_tokens_unique(mc):
    tokens = set()
    for i in range(20):
        mc.set(f"plb_cas_u{i}", b"x")
        tokens.add(mc.gets(f"plb_cas_u{i}")[1])
    assert len(tokens) == 20


def test_incr_decr(mc):
    mc.set("plb_num", b"10")
    assert mc.incr("plb_num", 5) == 15
    assert mc.decr("plb_num", 3) == 12
    assert mc.get("plb_num") == b"12"
    mc.set("plb_num_int", 10)
    assert mc.incr("plb_num_int") == 11
    assert mc.get("plb_num_int") == 11
    mc.set_multi({"plb_im1": b"1", "plb_im2": b"2"})
    mc.incr_multi(["plb_im1", "plb_im2"], delta=10)
    assert mc.get_multi(["plb_im1", "plb_im2"]) == {"plb_im1": b"11", "plb_im2": b"12"}


def test_incr_wraps_at_2_64(mc):
    mc.set("plb_wrap", b"18446744073709551615")
    assert mc.incr("plb_wrap", 1) == 0
    assert mc.get("plb_wrap") == b"0" + b" " * 19  # rewritten in place, padded
    mc.set("plb_wrap2", b"18446744073709551610")
    assert mc.incr("plb_wrap2", 10) == 4
    mc.set("plb_big", b"18446744073709551614")
    assert mc.incr("plb_big", 1) == 18446744073709551615


def test_incr_shrink_pads_in_place(mc):
    mc.set("plb_pad", b"100")
    assert mc.decr("plb_pad", 1) == 99
    assert mc.get("plb_pad") == b"99 "


def test_decr_clamps_at_zero(mc):
    mc.set("plb_clamp", b"5")
    assert mc.decr("plb_clamp", 10) == 0
    assert mc.decr("plb_clamp", 1) == 0
    assert int(mc.get("plb_clamp")) == 0


def test_incr_decr_missing(mc):
    # libmemcached sends an initial-value field of 0xffffffff expiry: no
    # auto-create, so the server answers KEY_ENOENT
    with pytest.raises(pylibmc.NotFound):
        mc.incr("plb_num_missing", 1)
    with pytest.raises(pylibmc.NotFound):
        mc.decr("plb_num_missing", 1)
    assert mc.get("plb_num_missing") is None


def test_incr_decr_non_numeric(server):
    mc = make_client(server)
    mc.set("plb_nan", b"abc")
    # status 0x06 (DELTA_BADVAL): libmemcached 1.0.16 reports it as an
    # unknown read failure and marks the server failed, so this client is
    # done; a new client sees the value untouched.
    with pytest.raises(pylibmc.UnknownReadFailure):
        mc.incr("plb_nan", 1)
    mc.disconnect_all()
    mc = make_client(server)
    with pytest.raises(pylibmc.UnknownReadFailure):
        mc.decr("plb_nan", 1)
    mc.disconnect_all()
    mc = make_client(server)
    assert mc.get("plb_nan") == b"abc"
    mc.disconnect_all()


def test_delete(mc):
    mc.set("plb_del", b"x")
    assert mc.delete("plb_del") is True
    assert mc.get("plb_del") is None
    assert mc.delete("plb_del") is False
    mc.set_multi({"plb_del1": b"1", "plb_del2": b"2"})
    assert mc.delete_multi(["plb_del1", "plb_del2"]) is True
    assert mc.get_multi(["plb_del1", "plb_del2"]) == {}
    mc.set("plb_del1", b"1")
    assert mc.delete_multi(["plb_del1", "plb_del_missing"]) is False
    assert mc.get("plb_del1") is None


def test_touch(mc):
    # libmemcached 1.0.16's binary TOUCH of an existing key returns only
    # after its 5 s poll timeout (seen against memcached 1.6.18, whose TOUCH
    # response carries a 4-byte flags extra), so this is the one binary
    # touch hit in this file.
    mc.set("plb_touch", b"x", time=2)
    assert mc.touch("plb_touch", 100) is True
    assert mc.get("plb_touch") == b"x"  # > 2 s later: the touch took effect
    assert mc.touch("plb_touch_missing", 100) is False


def test_noreply_behavior(server):
    # binary noreply: the quiet opcodes (SETQ, DELETEQ, ...)
    c = make_client(server, _noreply=1)
    c.set("plb_nr", b"1")
    c.set_multi({"plb_nr2": b"2", "plb_nr3": b"3"})
    c.delete("plb_nr3")
    assert c.get_multi(["plb_nr", "plb_nr2", "plb_nr3"]) == {"plb_nr": b"1", "plb_nr2": b"2"}
    c.disconnect_all()


def test_expiry(mc):
    mc.set("plb_exp_short", b"x", time=2)
    mc.set("plb_exp_long", b"x", time=100)
    mc.set("plb_exp_forever", b"x", time=0)
    assert mc.add("plb_exp_add", b"first", time=2) is True
    assert mc.get("plb_exp_short") == b"x"  # 2 is relative, not a unix time
    t0 = time.monotonic()
    time.sleep(3.1)
    assert time.monotonic() - t0 >= 3.1
    assert mc.get("plb_exp_short") is None
    assert mc.get("plb_exp_add") is None
    assert mc.get_multi(["plb_exp_short", "plb_exp_add", "plb_exp_long"]) == {"plb_exp_long": b"x"}
    assert mc.gets("plb_exp_short") == (None, None)
    assert mc.get("plb_exp_long") == b"x"
    assert mc.get("plb_exp_forever") == b"x"
    assert mc.add("plb_exp_add", b"second") is True
    assert mc.get("plb_exp_add") == b"second"
    with pytest.raises(pylibmc.NotFound):
        mc.replace("plb_exp_short", b"y")
    assert mc.append("plb_exp_short", b"y") is False
    assert mc.touch("plb_exp_short", 10) is False


def test_binary_values(mc):
    mc.set("plb_bytes", ALL_BYTES)
    assert mc.get("plb_bytes") == ALL_BYTES
    mc.set("plb_tricky", TRICKY)
    assert mc.get("plb_tricky") == TRICKY
    mc.set("plb_end", b"\r\nEND\r\n")
    assert mc.get_multi(["plb_end", "plb_tricky", "plb_bytes"]) == {
        "plb_end": b"\r\nEND\r\n", "plb_tricky": TRICKY, "plb_bytes": ALL_BYTES}
    big = ALL_BYTES * 1000
    mc.set("plb_bytes_big", big)
    assert mc.get("plb_bytes_big") == big


def test_one_million_byte_value(mc):
    value = bytes(i % 251 for i in range(1_000_000))
    assert mc.set("plb_1m", value) is True
    assert mc.get("plb_1m") == value
    assert mc.get_multi(["plb_1m", "plb_missing"]) == {"plb_1m": value}


def test_two_megabyte_value_rejected(mc):
    # status E2BIG, surfaced as TooBig; the value is swallowed
    with pytest.raises(pylibmc.TooBig):
        mc.set("plb_2m", b"x" * (2 * 1024 * 1024))
    assert mc.get("plb_2m") is None
    assert mc.set("plb_after_2m", b"ok") is True
    assert mc.get("plb_after_2m") == b"ok"


def test_too_large_set_removes_old_value(mc):
    mc.set("plb_2m_old", b"old")
    with pytest.raises(pylibmc.TooBig):
        mc.set("plb_2m_old", b"y" * (2 * 1024 * 1024))
    assert mc.get("plb_2m_old") is None


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
    assert mc.set("plb_serde", value) is True
    got = mc.get("plb_serde")
    if value is True:
        assert got == 1
    else:
        assert got == value and type(got) is type(value)
    assert raw_get(server.address, "plb_serde")[0] == flags


def test_flush_all(mc):
    mc.set_multi({f"plb_flush_{i}": b"x" for i in range(10)})
    assert mc.flush_all() is True
    assert mc.get_multi([f"plb_flush_{i}" for i in range(10)]) == {}
    assert mc.add("plb_flush_0", b"y") is True
    assert mc.get("plb_flush_0") == b"y"


def test_stats(fresh_server):
    c = make_client(fresh_server)
    for i in range(10):
        c.set(f"plb_st_{i}", b"x" * 10)
    for i in range(7):
        assert c.get(f"plb_st_{i}") == b"x" * 10
    for i in range(3):
        assert c.get(f"plb_st_missing_{i}") is None
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
    assert VERSION_RE.match(stats["version"].decode()), stats["version"]
    c.disconnect_all()


# --------------------------------------------------------------------------
# ketama (consistent hashing) over two servers of one kind, text and binary.
# pylibmc does not say which server a key maps to, so tests find out by
# reading each server directly.
# --------------------------------------------------------------------------

KETAMA = {
    "text-ketama": (False, {"ketama": True}),
    "binary-consistent-md5": (True, {"distribution": "consistent ketama", "hash": "md5"}),
}


@pytest.fixture(params=list(KETAMA))
def kc(request, server_pair):
    binary, behaviors = KETAMA[request.param]
    b = {"cas": True, "tcp_nodelay": True}
    b.update(behaviors)
    c = pylibmc.Client([f"127.0.0.1:{s.port}" for s in server_pair], binary=binary, behaviors=b)
    c.prefix = f"plk_{request.param}_"
    c.test_behaviors = b
    yield c
    c.disconnect_all()


def holders(pair, key):
    return [srv for srv in pair if raw_get(srv.address, key) is not None]


def keys_per_server(kc, pair, stem):
    """{server port: a key of that server}, found by storing stem_N keys."""
    found = {}
    for i in range(200):
        key = f"{kc.prefix}{stem}_{i}"
        kc.set(key, b"probe")
        [srv] = holders(pair, key)
        found.setdefault(srv.port, key)
        if len(found) == len(pair):
            return [found[srv.port] for srv in pair]
    raise AssertionError(f"{stem}: all 200 keys landed on one server")


def test_ketama_behaviors(kc):
    assert kc.behaviors["distribution"] == "consistent ketama"


def test_ketama_keys_spread_over_both_servers(server_pair, kc):
    data = {f"{kc.prefix}spread_{i:03d}": f"v{i}".encode() for i in range(100)}
    assert kc.set_multi(data) == []
    assert kc.get_multi(list(data) + [f"{kc.prefix}missing"]) == data
    counts = {srv.port: 0 for srv in server_pair}
    for key, value in data.items():
        on = holders(server_pair, key)
        assert len(on) == 1, f"{key} is on {len(on)} servers"
        assert raw_get(on[0].address, key) == (0, value)
        counts[on[0].port] += 1
    assert all(n >= 20 for n in counts.values()), counts
    # the mapping is stable: a second client with the same list agrees
    again = pylibmc.Client([f"127.0.0.1:{s.port}" for s in server_pair], binary=kc.binary,
                           behaviors=kc.test_behaviors)
    assert again.get_multi(list(data)) == data
    again.disconnect_all()


def test_ketama_operations_on_each_server(server_pair, kc):
    keys = keys_per_server(kc, server_pair, "ops")
    for srv, k in zip(server_pair, keys):
        assert kc.set(k, b"v1") is True
        assert kc.add(k, b"no") is False
        assert kc.replace(k, b"v2") is True
        assert kc.append(k, b"_end") is True
        assert kc.prepend(k, b"start_") is True
        assert kc.get(k) == b"start_v2_end"
        assert raw_get(srv.address, k) == (0, b"start_v2_end")
        value, token = kc.gets(k)
        assert kc.cas(k, b"v3", token) is True
        assert kc.cas(k, b"v4", token) is False
        kc.set(k, b"18446744073709551615")
        assert kc.incr(k, 2) == 1
        assert kc.decr(k, 5) == 0
        assert kc.delete(k) is True
        assert kc.delete(k) is False
        assert holders(server_pair, k) == []


def test_ketama_values_on_each_server(server_pair, kc):
    keys = keys_per_server(kc, server_pair, "values")
    big = bytes(i % 251 for i in range(1_000_000))
    for srv, k in zip(server_pair, keys):
        for value in (ALL_BYTES, TRICKY, big):
            assert kc.set(k, value) is True
            assert raw_get(srv.address, k) == (0, value)
            assert kc.get(k) == value
        with pytest.raises(pylibmc.TooBig):
            kc.set(k, b"x" * (2 * 1024 * 1024))
        assert kc.get(k) is None


def test_ketama_stats_from_both_servers(server_pair, kc):
    stats = kc.get_stats()
    assert sorted(name.decode().split(" ")[0] for name, _ in stats) == sorted(
        f"127.0.0.1:{s.port}" for s in server_pair)
    assert sorted(int(s["pid"]) for _, s in stats) == sorted(s.pid for s in server_pair)
