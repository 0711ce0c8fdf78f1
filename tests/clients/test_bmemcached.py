"""python-binary-memcached (`import bmemcached`, binary protocol only) against
genuine memcached and osmium: plain use, DistributedClient over two servers,
a few raw binary packets the client does not send (TOUCH, GAT, VERSION, key
too long), and SASL PLAIN authentication against servers started with -S
(tests/support/sasl.py). Expected values are what memcached 1.6 answers."""
import socket
import struct
import time

import bmemcached
import pytest
from bmemcached.exceptions import MemcachedException

from .conftest import SASL_PASSWORD, SASL_USER
from .helpers import (ALL_BYTES, BIN_GET, BIN_NOOP, BIN_SASL_AUTH, BIN_SASL_LIST_MECHS, BIN_SET,
                      BIN_STAT, BIN_STATUS_AUTH_ERROR, BIN_STATUS_NOT_FOUND, BIN_STATUS_OK,
                      BIN_VERSION, CORE_STATS, TRICKY, VERSION_RE, bin_exchange,
                      bin_read_response, bin_request, raw_get)

# binary status codes as bmemcached reports them in MemcachedException.code
KEY_EXISTS, TOO_LARGE, INVALID_ARGUMENTS, NON_NUMERIC, AUTH_ERROR = 0x02, 0x03, 0x04, 0x06, 0x20
BIN_TOUCH, BIN_GAT = 0x1C, 0x1D


def make_client(srv, **kw):
    kw.setdefault("socket_timeout", 10)
    return bmemcached.Client([f"127.0.0.1:{srv.port}"], **kw)


@pytest.fixture
def mc(server):
    c = make_client(server)
    yield c
    c.disconnect_all()


@pytest.fixture
def raw(server):
    """A client that stores bytes as they are, flags 0, no compression."""
    c = make_client(server, raw_data=True)
    yield c
    c.disconnect_all()


def test_set_get(mc):
    assert mc.set("bm_a", b"hello") is True
    assert mc.get("bm_a") == b"hello"
    assert mc.set("bm_a", b"world") is True
    assert mc.get("bm_a") == b"world"
    assert mc.get("bm_missing") is None
    assert mc.get("bm_missing", default=b"dflt") == b"dflt"
    assert mc.set("bm_empty", b"") is True
    assert mc.get("bm_empty") == b""


def test_get_multi_100_keys(mc):
    # set_multi: SETQ per key + NOOP; get_multi: GETKQ per key + a final GETK
    data = {f"bm_multi_{i:03d}": f"value-{i}".encode() * (i + 1) for i in range(100)}
    assert mc.set_multi(data) == []
    keys = list(data) + ["bm_multi_missing_1", "bm_multi_missing_2"]
    assert mc.get_multi(keys) == data
    with_cas = mc.get_multi(list(data), get_cas=True)
    assert {k: v for k, (v, _cas) in with_cas.items()} == data
    assert len({cas for _v, cas in with_cas.values()}) == 100


def test_get_multi_100_max_length_keys(mc):
    data = {(f"bm_long_{i:03d}_").ljust(250, "x"): str(i).encode() for i in range(100)}
    assert mc.set_multi(data) == []
    assert mc.get_multi(list(data)) == data


def test_add_replace(mc):
    assert mc.add("bm_add", b"1") is True
    assert mc.add("bm_add", b"2") is False
    assert mc.get("bm_add") == b"1"
    assert mc.replace("bm_repl", b"1") is False
    assert mc.get("bm_repl") is None
    mc.set("bm_repl", b"1")
    assert mc.replace("bm_repl", b"2") is True
    assert mc.get("bm_repl") == b"2"


def test_cas(mc):
    ok, token = mc.set("bm_cas", b"v1", get_cas=True)
    assert ok is True and isinstance(token, int) and token > 0
    assert mc.gets("bm_cas") == (b"v1", token)
    assert mc.cas("bm_cas", b"v2", token) is True  # fresh
    assert mc.get("bm_cas") == b"v2"
    assert mc.cas("bm_cas", b"v3", token) is False  # stale
    assert mc.get("bm_cas") == b"v2"
    _v, token2 = mc.gets("bm_cas")
    assert token2 != token
    ok, token3 = mc.cas("bm_cas", b"v4", token2, get_cas=True)
    assert ok is True and token3 not in (token, token2)
    assert mc.gets("bm_cas") == (b"v4", token3)
    # missing key: KEY_ENOENT
    assert mc.gets("bm_cas_missing") == (None, None)
    assert mc.cas("bm_cas_missing", b"x", token) is False
    assert mc.get("bm_cas_missing") is None
    # cas None is "compare against absent": an ADD
    assert mc.cas("bm_cas_missing", b"new", None) is True
    assert mc.cas("bm_cas_missing", b"newer", None) is False
    assert mc.get("bm_cas_missing") == b"new"
    # set_multi with (key, cas) tuples
    _v, token4 = mc.gets("bm_cas")
    assert mc.set_multi({("bm_cas", token4): b"v5", ("bm_cas_missing", token4): b"x"}) == [
        ("bm_cas_missing", 0)]
    assert mc.get("bm_cas") == b"v5"


def test_set_multi_cas(mc):
    result = mc.set_multi_cas({"bm_smc1": b"1", "bm_smc2": b"2"})
    assert set(result) == {"bm_smc1", "bm_smc2"}
    assert mc.gets("bm_smc1") == (b"1", result["bm_smc1"])
    assert mc.gets("bm_smc2") == (b"2", result["bm_smc2"])


def test_incr_decr(server, mc):
    mc.set("bm_num", 10)  # int: text with flag 2
    assert raw_get(server.address, "bm_num") == (2, b"10")
    assert mc.incr("bm_num", 5) == 15
    assert mc.decr("bm_num", 3) == 12
    assert mc.get("bm_num") == 12
    mc.set("bm_num_b", b"10")
    assert mc.incr("bm_num_b", 1) == 11
    assert mc.get("bm_num_b") == b"11"


def test_incr_wraps_at_2_64(server, mc):
    mc.set("bm_wrap", b"18446744073709551615")
    assert mc.incr("bm_wrap", 1) == 0
    assert raw_get(server.address, "bm_wrap") == (16, b"0" + b" " * 19)
    mc.set("bm_wrap2", b"18446744073709551610")
    assert mc.incr("bm_wrap2", 10) == 4
    mc.set("bm_big", b"18446744073709551614")
    assert mc.incr("bm_big", 1) == 18446744073709551615


def test_incr_shrink_pads_in_place(server, mc):
    mc.set("bm_pad", 100)
    assert mc.decr("bm_pad", 1) == 99
    assert raw_get(server.address, "bm_pad") == (2, b"99 ")
    assert mc.get("bm_pad") == 99


def test_decr_clamps_at_zero(server, mc):
    # (bmemcached's incr/decr also answer 0 when the connection fails, so
    # the stored value is checked too)
    assert mc.set("bm_clamp", b"5") is True
    assert mc.decr("bm_clamp", 10) == 0
    assert mc.decr("bm_clamp", 1) == 0
    assert raw_get(server.address, "bm_clamp") == (16, b"0")


def test_incr_decr_missing_creates_initial_value(server, mc):
    # bmemcached sends an initial value and a real expiry: a missing counter
    # is created with the initial value (no delta applied), flags 0
    assert mc.incr("bm_num_missing", 5) == 0
    assert raw_get(server.address, "bm_num_missing") == (0, b"0")
    assert mc.incr("bm_num_missing", 5) == 5
    assert mc.decr("bm_num_missing2", 5, default=42) == 42
    assert mc.decr("bm_num_missing2", 5) == 37
    assert mc.get("bm_num_missing2") == "37"  # flags 0: decoded as str


def test_incr_decr_non_numeric(mc):
    mc.set("bm_nan", b"abc")
    for op in (mc.incr, mc.decr):
        with pytest.raises(MemcachedException) as e:
            op("bm_nan", 1)
        assert e.value.code == NON_NUMERIC
    assert mc.get("bm_nan") == b"abc"
    assert mc.set("bm_nan2", b"1") is True and mc.get("bm_nan2") == b"1"


def test_delete(mc):
    mc.set("bm_del", b"x")
    assert mc.delete("bm_del") is True
    assert mc.get("bm_del") is None
    assert mc.delete("bm_del") is True  # bmemcached: only a CAS mismatch is False
    _ok, token = mc.set("bm_del", b"x", get_cas=True)
    assert mc.delete("bm_del", cas=token + 1000) is False  # KEY_EEXISTS
    assert mc.get("bm_del") == b"x"
    assert mc.delete("bm_del", cas=token) is True
    assert mc.get("bm_del") is None
    mc.set_multi({"bm_del1": b"1", "bm_del2": b"2"})
    assert mc.delete_multi(["bm_del1", "bm_del2"]) is True
    assert mc.get_multi(["bm_del1", "bm_del2"]) == {}
    mc.set("bm_del1", b"1")
    assert mc.delete_multi(["bm_del1", "bm_del_missing"]) is False
    assert mc.get("bm_del1") is None


def test_expiry(mc):
    mc.set("bm_exp_short", b"x", time=2)
    mc.set("bm_exp_long", b"x", time=100)
    mc.set("bm_exp_forever", b"x", time=0)
    assert mc.add("bm_exp_add", b"first", time=2) is True
    mc.set("bm_exp_counter", b"1", time=2)
    assert mc.get("bm_exp_short") == b"x"  # 2 is relative, not a unix time
    time.sleep(3.1)
    assert mc.get_multi(["bm_exp_short", "bm_exp_add", "bm_exp_long", "bm_exp_forever"]) == {
        "bm_exp_long": b"x", "bm_exp_forever": b"x"}
    assert mc.gets("bm_exp_short") == (None, None)
    assert mc.add("bm_exp_add", b"second") is True
    assert mc.get("bm_exp_add") == b"second"
    assert mc.replace("bm_exp_short", b"y") is False
    # an expired counter is missing: incr creates it afresh
    assert mc.incr("bm_exp_counter", 10, default=7) == 7


def test_binary_values(server, raw):
    for key, value in (("bm_bytes", ALL_BYTES), ("bm_tricky", TRICKY),
                       ("bm_end", b"\r\nEND\r\n"), ("bm_bytes_big", ALL_BYTES * 1000)):
        assert raw.set(key, value) is True
        assert raw.get(key) == value
        assert raw_get(server.address, key) == (0, value)
    assert raw.get_multi(["bm_end", "bm_tricky", "bm_bytes"]) == {
        "bm_end": b"\r\nEND\r\n", "bm_tricky": TRICKY, "bm_bytes": ALL_BYTES}


def test_one_million_byte_value(server, raw):
    value = bytes(i % 251 for i in range(1_000_000))
    assert raw.set("bm_1m", value) is True
    assert raw.get("bm_1m") == value
    assert raw.get_multi(["bm_1m", "bm_missing"]) == {"bm_1m": value}
    assert raw_get(server.address, "bm_1m") == (0, value)


def test_two_megabyte_value_rejected(raw):
    raw.set("bm_2m", b"old")
    with pytest.raises(MemcachedException) as e:
        raw.set("bm_2m", b"x" * (2 * 1024 * 1024))
    assert e.value.code == TOO_LARGE
    # the old value is gone, and the same connection is still in sync
    assert raw.get("bm_2m") is None
    assert raw.set("bm_after_2m", b"ok") is True
    assert raw.get("bm_after_2m") == b"ok"


def test_key_length(mc):
    key = "k" * 250
    assert mc.set(key, b"v250") is True
    assert mc.get(key) == b"v250"
    assert mc.get_multi([key]) == {key: b"v250"}
    assert mc.delete(key) is True
    # bmemcached does not check key length: the server answers EINVAL
    with pytest.raises(MemcachedException) as e:
        mc.set("k" * 251, b"v")
    assert e.value.code == INVALID_ARGUMENTS


def test_key_too_long_closes_connection(server):
    # memcached treats a > 250-byte binary key as a protocol error: EINVAL,
    # then it closes the connection
    with socket.create_connection(server.address, timeout=5) as s:
        s.sendall(bin_request(BIN_GET, b"k" * 251) + bin_request(BIN_NOOP))
        opcode, status, _key, _extras, _value, _cas = bin_read_response(s)
        assert (opcode, status) == (BIN_GET, INVALID_ARGUMENTS)
        assert s.recv(100) == b""


@pytest.mark.parametrize("value,flags", [
    (b"raw bytes", 16), ("text \u00e9", 0), (42, 2), (2**70, 2), ([1, "two"], 1),
    (b"z" * 1000, 16 | 8),
], ids=["bytes", "str", "int", "bigint", "list", "zlib"])
def test_serialisation_flags(server, mc, value, flags):
    assert mc.set("bm_serde", value) is True
    got = mc.get("bm_serde")
    assert got == value and type(got) is type(value)
    assert raw_get(server.address, "bm_serde")[0] == flags


def test_flags_raw(server, raw):
    for flags in (0, 1, 12345, 2**31, 2**32 - 1):
        # stored by the text protocol, read back by the binary client
        reply = bin_exchange(server.address, bin_request(
            BIN_SET, b"bm_flags", struct.pack("!LL", flags, 0), b"v"))
        assert reply[0][1] == BIN_STATUS_OK
        assert raw_get(server.address, "bm_flags") == (flags, b"v")
        assert raw.get("bm_flags") == b"v"
        [(_op, status, _key, extras, value, _cas)] = bin_exchange(
            server.address, bin_request(BIN_GET, b"bm_flags"))
        assert (status, extras, value) == (BIN_STATUS_OK, struct.pack("!L", flags), b"v")


def test_raw_touch_and_gat(server, mc):
    mc.set("bm_touch", b"x", time=2)
    [(op, status, _k, extras, value, _cas)] = bin_exchange(
        server.address, bin_request(BIN_TOUCH, b"bm_touch", struct.pack("!L", 100)))
    assert (op, status, extras, value) == (BIN_TOUCH, BIN_STATUS_OK, struct.pack("!L", 16), b"")
    [(op, status, _k, extras, value, _cas)] = bin_exchange(
        server.address, bin_request(BIN_GAT, b"bm_touch", struct.pack("!L", 100)))
    assert (op, status, extras, value) == (BIN_GAT, BIN_STATUS_OK, struct.pack("!L", 16), b"x")
    [(op, status, *_rest)] = bin_exchange(
        server.address, bin_request(BIN_TOUCH, b"bm_touch_missing", struct.pack("!L", 100)))
    assert (op, status) == (BIN_TOUCH, BIN_STATUS_NOT_FOUND)
    mc.set("bm_touch_short", b"y", time=100)
    bin_exchange(server.address, bin_request(BIN_TOUCH, b"bm_touch_short", struct.pack("!L", 2)))
    time.sleep(3.1)
    assert mc.get("bm_touch") == b"x"  # ttl 2 -> 100
    assert mc.get("bm_touch_short") is None  # ttl 100 -> 2


def test_raw_version(server):
    [(op, status, _k, _e, value, _cas)] = bin_exchange(server.address, bin_request(BIN_VERSION))
    assert (op, status) == (BIN_VERSION, BIN_STATUS_OK)
    assert VERSION_RE.match(value.decode()), value


def test_noop(mc):
    assert [s.noop() for s in mc.servers] == [BIN_STATUS_OK]


def test_flush_all(mc):
    mc.set_multi({f"bm_flush_{i}": b"x" for i in range(10)})
    assert mc.flush_all() is True
    assert mc.get_multi([f"bm_flush_{i}" for i in range(10)]) == {}
    assert mc.add("bm_flush_0", b"y") is True
    assert mc.get("bm_flush_0") == b"y"


def test_stats(fresh_server):
    c = make_client(fresh_server)
    for i in range(10):
        c.set(f"bm_st_{i}", b"x" * 10)
    for i in range(7):
        assert c.get(f"bm_st_{i}") == b"x" * 10
    for i in range(3):
        assert c.get(f"bm_st_missing_{i}") is None
    [(name, stats)] = c.stats().items()
    assert name == f"127.0.0.1:{fresh_server.port}"
    for key in CORE_STATS:
        assert key in stats, f"stats lacks {key}"
    assert int(stats["curr_items"]) == 10
    assert int(stats["total_items"]) == 10
    assert int(stats["cmd_set"]) == 10
    assert int(stats["cmd_get"]) == 10
    assert int(stats["get_hits"]) == 7
    assert int(stats["get_misses"]) == 3
    assert int(stats["pid"]) == fresh_server.pid
    assert int(stats["limit_maxbytes"]) == 64 * 1024 * 1024
    assert int(stats["threads"]) == 2
    assert VERSION_RE.match(stats["version"].decode())
    # a stats group by name: STAT with a key
    settings = c.stats("settings")[f"127.0.0.1:{fresh_server.port}"]
    assert int(settings["maxbytes"]) == 64 * 1024 * 1024
    assert int(settings["item_size_max"]) == 1024 * 1024
    c.disconnect_all()


# --------------------------------------------------------------------------
# DistributedClient: consistent hashing (uhashring) over two servers.
# --------------------------------------------------------------------------

@pytest.fixture
def dc(server_pair):
    c = bmemcached.DistributedClient([f"127.0.0.1:{s.port}" for s in server_pair],
                                     socket_timeout=10)
    yield c
    c.disconnect_all()


def server_of(dc, pair, key):
    proto = dc._get_server(key)
    [srv] = [s for s in pair if proto.server == f"127.0.0.1:{s.port}"]
    return srv


def test_distributed_keys_spread_over_both_servers(server_pair, dc):
    data = {f"bmd_spread_{i:03d}": f"v{i}".encode() for i in range(100)}
    assert dc.set_multi(data) == []
    assert dc.get_multi(list(data) + ["bmd_missing"]) == data
    counts = {s.port: 0 for s in server_pair}
    for key, value in data.items():
        on = [s for s in server_pair if raw_get(s.address, key) is not None]
        assert on == [server_of(dc, server_pair, key)]
        assert raw_get(on[0].address, key) == (16, value)
        counts[on[0].port] += 1
    assert all(n >= 20 for n in counts.values()), counts
    assert dc.delete_multi(list(data)) is True
    assert dc.get_multi(list(data)) == {}


def test_distributed_operations_on_each_server(server_pair, dc):
    keys = {}
    for i in range(200):
        keys.setdefault(server_of(dc, server_pair, f"bmd_ops_{i}").port, f"bmd_ops_{i}")
    assert len(keys) == 2
    for srv in server_pair:
        k = keys[srv.port]
        assert dc.set(k, b"v1") is True
        assert dc.add(k, b"no") is False
        assert dc.replace(k, b"v2") is True
        value, token = dc.gets(k)
        assert value == b"v2"
        assert dc.cas(k, b"v3", token) is True
        assert dc.cas(k, b"v4", token) is False
        assert raw_get(srv.address, k) == (16, b"v3")
        dc.set(k, b"18446744073709551615")
        assert dc.incr(k, 2) == 1
        assert dc.decr(k, 5) == 0
        with pytest.raises(MemcachedException) as e:
            dc.set(k, b"x" * (2 * 1024 * 1024), compress_level=0)
        assert e.value.code == TOO_LARGE
        assert dc.get(k) is None
        dc.set(k, b"x")
        assert dc.delete(k) is True
        assert raw_get(srv.address, k) is None
    assert sorted(dc.stats()) == sorted(f"127.0.0.1:{s.port}" for s in server_pair)


# --------------------------------------------------------------------------
# SASL (-S): PLAIN over the binary protocol (sasl_server: conftest.py).
# --------------------------------------------------------------------------

def sasl_client(srv, user=SASL_USER, password=SASL_PASSWORD, **kw):
    kw.setdefault("socket_timeout", 10)
    return bmemcached.Client([f"127.0.0.1:{srv.port}"], user, password, **kw)


def test_sasl_correct_credentials(sasl_server):
    c = sasl_client(sasl_server)
    assert c.set("bms_a", b"hello") is True
    assert [s.authenticated for s in c.servers] == [True]
    assert c.get("bms_a") == b"hello"
    assert c.set_multi({"bms_b": b"1", "bms_c": 2}) == []
    assert c.get_multi(["bms_a", "bms_b", "bms_c", "bms_missing"]) == {
        "bms_a": b"hello", "bms_b": b"1", "bms_c": 2}
    assert c.incr("bms_c", 5) == 7
    assert c.delete("bms_b") is True
    assert c.get("bms_b") is None
    [(_name, stats)] = c.stats().items()
    assert int(stats["pid"]) == sasl_server.pid
    assert int(stats["auth_cmds"]) >= 1
    c.disconnect_all()
    # another authenticated connection sees the same data
    c2 = sasl_client(sasl_server)
    assert c2.get("bms_a") == b"hello"
    c2.disconnect_all()


@pytest.mark.parametrize("user,password", [
    (SASL_USER, "wrong-password"), ("nobody", SASL_PASSWORD), (SASL_USER, SASL_PASSWORD + "x"),
], ids=["wrong-password", "unknown-user", "password-prefix"])
def test_sasl_wrong_credentials(sasl_server, user, password):
    c = sasl_client(sasl_server, user, password)
    # authentication runs when the connection opens: SASL_AUTH answers 0x20
    with pytest.raises(MemcachedException) as e:
        c.set("bms_wrong", b"x")
    assert e.value.code == AUTH_ERROR
    # the connection stays unauthenticated: commands get 0x20 too
    with pytest.raises(MemcachedException) as e:
        c.get("bms_wrong")
    assert e.value.code == AUTH_ERROR
    c.disconnect_all()
    assert sasl_client(sasl_server).get("bms_wrong") is None


def test_sasl_unauthenticated_client_refused(sasl_server):
    c = sasl_client(sasl_server, None, None)
    # memcached answers 0x20 and then closes the connection, so each
    # command here goes on a new connection
    for op in (lambda: c.set("bms_unauth", b"x"), lambda: c.get("bms_unauth"),
               lambda: c.incr("bms_unauth", 1), lambda: c.delete("bms_unauth")):
        with pytest.raises(MemcachedException) as e:
            op()
        assert e.value.code == AUTH_ERROR
        c.disconnect_all()
    assert sasl_client(sasl_server).get("bms_unauth") is None


def assert_closed(sock):
    try:
        assert sock.recv(100) == b""
    except ConnectionResetError:
        pass


def test_sasl_raw_binary_refused_unauthenticated(sasl_server):
    set_req = bin_request(BIN_SET, b"bms_raw", struct.pack("!LL", 7, 0), b"v")
    for req, op in ((bin_request(BIN_GET, b"bms_raw"), BIN_GET), (set_req, BIN_SET),
                    (bin_request(BIN_NOOP), BIN_NOOP), (bin_request(BIN_STAT), BIN_STAT)):
        with socket.create_connection(sasl_server.address, timeout=5) as s:
            s.sendall(req)
            opcode, status, *_rest = bin_read_response(s)
            assert (opcode, status) == (op, BIN_STATUS_AUTH_ERROR)
            # ... and memcached closes the connection after the refusal
            assert_closed(s)
    # VERSION and the mechanism list are answered before authentication
    with socket.create_connection(sasl_server.address, timeout=5) as s:
        s.sendall(bin_request(BIN_VERSION) + bin_request(BIN_SASL_LIST_MECHS))
        opcode, status, _k, _e, version, _cas = bin_read_response(s)
        assert (opcode, status) == (BIN_VERSION, BIN_STATUS_OK)
        assert VERSION_RE.match(version.decode()), version
        opcode, status, _k, _e, mechs, _cas = bin_read_response(s)
        assert (opcode, status) == (BIN_SASL_LIST_MECHS, BIN_STATUS_OK)
        assert b"PLAIN" in mechs.split()


def test_sasl_raw_binary_auth(sasl_server):
    good = b"\x00" + SASL_USER.encode() + b"\x00" + SASL_PASSWORD.encode()
    bad = b"\x00" + SASL_USER.encode() + b"\x00wrong"
    set_req = bin_request(BIN_SET, b"bms_raw", struct.pack("!LL", 7, 0), b"v")
    with socket.create_connection(sasl_server.address, timeout=5) as s:
        # a failed PLAIN auth leaves the connection open but unauthenticated
        s.sendall(bin_request(BIN_SASL_AUTH, b"PLAIN", value=bad))
        assert bin_read_response(s)[:2] == (BIN_SASL_AUTH, BIN_STATUS_AUTH_ERROR)
        s.sendall(bin_request(BIN_SASL_AUTH, b"PLAIN", value=bad))
        assert bin_read_response(s)[:2] == (BIN_SASL_AUTH, BIN_STATUS_AUTH_ERROR)
        # a good one opens it
        s.sendall(bin_request(BIN_SASL_AUTH, b"PLAIN", value=good))
        assert bin_read_response(s)[:2] == (BIN_SASL_AUTH, BIN_STATUS_OK)
        s.sendall(bin_request(BIN_GET, b"bms_raw_missing") + set_req +
                  bin_request(BIN_GET, b"bms_raw"))
        assert bin_read_response(s)[:2] == (BIN_GET, BIN_STATUS_NOT_FOUND)
        assert bin_read_response(s)[:2] == (BIN_SET, BIN_STATUS_OK)
        opcode, status, _k, extras, value, _cas = bin_read_response(s)
        assert (opcode, status, extras, value) == (
            BIN_GET, BIN_STATUS_OK, struct.pack("!L", 7), b"v")
    with socket.create_connection(sasl_server.address, timeout=5) as s:
        s.sendall(bin_request(BIN_SASL_AUTH, b"PLAIN", value=bad))
        assert bin_read_response(s)[:2] == (BIN_SASL_AUTH, BIN_STATUS_AUTH_ERROR)
        s.sendall(bin_request(BIN_GET, b"bms_raw"))
        assert bin_read_response(s)[:2] == (BIN_GET, BIN_STATUS_AUTH_ERROR)
    # authentication is per connection: a new one starts unauthenticated
    [(_op, status, *_rest)] = bin_exchange(sasl_server.address, bin_request(BIN_GET, b"bms_raw"))
    assert status == BIN_STATUS_AUTH_ERROR


def test_sasl_ascii_not_served(sasl_server):
    # with -S only the binary protocol is spoken: an ASCII `set` is not
    # executed and gets no STORED
    with socket.create_connection(sasl_server.address, timeout=2) as s:
        s.sendall(b"set bms_ascii 0 0 1\r\nx\r\nget bms_ascii\r\n")
        reply = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        except socket.timeout:
            pass
    assert b"STORED" not in reply and b"VALUE" not in reply, reply
    assert sasl_client(sasl_server).get("bms_ascii") is None
