"""The cases of memcached's own watcher test (t/watcher.t in memcached's
tree) that test_watch.py does not already hold, run against memcached
1.6.45 and osmium alike: a key of 250 bytes that all need escaping is
logged URI-encoded in full; a watcher of two streams gets the store and
the eviction of a `set` on a full cache while a second watcher watches
evictions (with one difference: osmium's eviction comes with the set that
needs a new segment, not always the first); a `cas` is logged as one.

(test_watch.py holds the rest of that test: `watch` answers OK and logs
fetches, and a watcher that falls behind is told `skipped=N` and then
gets real lines again.)
"""
import os
import time

from support import servers

from .test_watch import LINE, command, connect, watch


def test_a_250_byte_key_of_escaped_bytes_is_logged_in_full(kind):
    with servers.Server(kind, ["-m", "64"]) as server:
        w = watch(server, b"mutations")
        key = b"#" * 250
        with connect(server) as c:
            assert command(c, b"set %s 0 0 9\r\nmemcached\r\n" % key) == b"STORED\r\n"
        (line,) = w.lines(1)
        field = line.split()[3]
        assert field == "key=" + "%23" * 250, line
        assert len(field) == 250 * 3 + len("key=")


def test_a_set_on_a_full_cache_logs_its_store_and_its_eviction(kind):
    # memcached evicts an item for each set on a full cache, so the first
    # set logs an eviction. osmium evicts a segment (about a megabyte of
    # items) when a write needs one, and keeps a few free: the eviction
    # comes with the set that needs the next segment, within a megabyte of
    # writes (docs/compat.md, "Evictions"). Waiting for one with that first
    # set (t/watcher.t reads until it comes) would wait for ever here.
    with servers.Server(kind, ["-m", "60"]) as server:
        # (incompressible: osmium's cleaner would pack compressible cold
        # items, -o compression=cold, and evict later)
        value = os.urandom(11000)
        with connect(server) as c:
            c.sendall(b"".join(b"set n,foo%d 0 0 11000 noreply\r\n%s\r\n" % (i, value)
                               for i in range(1, 8001)))
            # The sets were all read once a later request is answered.
            assert command(c, b"mn\r\n") == b"MN\r\n"
            both = watch(server, b"mutations evictions")
            evictions = watch(server, b"evictions")
            seen = set()
            for sets in range(1, 201):
                key = b"bfoo" if sets == 1 else b"bfoo%d" % sets
                c.sendall(b"set %s 0 0 11000 noreply\r\n%s\r\n" % (key, value))
                assert command(c, b"mn\r\n") == b"MN\r\n"
                deadline = time.time() + (2 if sets == 1 else 0.05)
                while time.time() < deadline and not {"item_store", "eviction"} <= seen:
                    try:
                        (line,) = both.lines(1, timeout=0.05)
                    except AssertionError:
                        continue
                    seen.add(line.split()[2].removeprefix("type="))
                if {"item_store", "eviction"} <= seen:
                    break
        assert {"item_store", "eviction"} <= seen, seen
        if kind == "memcached":
            assert sets == 1
        # The evictions-only watcher got eviction lines and nothing else.
        for line in evictions.lines(1):
            assert " type=eviction " in line, line
        evictions.close()
        both.close()


def test_a_cas_is_logged_as_a_cas(kind):
    with servers.Server(kind, ["-m", "64"]) as server:
        w = watch(server, b"mutations")
        with connect(server) as c:
            assert command(c, b"cas cas_watch_key 0 0 5 0\r\nvalue\r\n") == b"NOT_FOUND\r\n"
        line = w.until("cas_watch_key")[-1]
        assert LINE.match(line.encode()), line
        assert "cmd=cas" in line and "key=cas_watch_key" in line, line
