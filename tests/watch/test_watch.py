"""memcached's log watchers (`watch`), as memcached 1.6.45 runs them: the
replies, the streams and their line formats (logger.c), flow control
(`skipped=N`), the watcher limit, `-W`, and the `log_*` stats.

Derived from memcached's t/watcher.t and t/watcher_connid.t, protocol.txt
("watch") and side-by-side runs. Every test runs against both servers
(tests/watch/conftest.py); lines are compared with their `ts=`, `gid=`,
`cfd=` and `rport=` values normalised (they differ from run to run).
"""
import re
import socket
import time

import pytest

from support import servers

LINE = re.compile(rb"^ts=\d+\.\d+ gid=\d+ ")


def norm(line):
    """A log line with its run-dependent values replaced."""
    line = re.sub(r"^ts=\d+\.\d{1,6} gid=\d+ ", "ts=T gid=G ", line)
    line = re.sub(r"cfd=\d+", "cfd=C", line)
    return re.sub(r"rport=\d+", "rport=P", line)


def connect(server, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(5)
    s.connect(server.address)
    return s


def read_until(sock, end, timeout=5):
    buf = b""
    deadline = time.time() + timeout
    while not buf.endswith(end):
        if time.time() > deadline:
            raise AssertionError(f"no {end!r} after {buf[-300:]!r}")
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed after {buf[-300:]!r}")
        buf += chunk
    return buf


def command(sock, line, end=b"\r\n"):
    sock.sendall(line)
    return read_until(sock, end)


class Watcher:
    """A watcher connection that got its OK, and what it was sent since."""

    def __init__(self, server, args=b"", rcvbuf=None):
        self.sock = connect(server, rcvbuf)
        self.sock.sendall(b"watch" + (b" " + args if args else b"") + b"\r\n")
        self.buf = b""
        self._fill(lambda: len(self.buf) >= 4)
        assert self.buf.startswith(b"OK\r\n"), self.buf
        self.buf = self.buf[4:]

    def _fill(self, done, timeout=5):
        deadline = time.time() + timeout
        while not done():
            if time.time() > deadline:
                raise AssertionError(f"timed out with {self.buf[-500:]!r}")
            self.sock.settimeout(max(0.05, deadline - time.time()))
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            if not chunk:
                raise AssertionError(f"closed after {self.buf[-500:]!r}")
            self.buf += chunk

    def lines(self, count, timeout=5):
        """The next `count` lines."""
        self._fill(lambda: self.buf.count(b"\n") >= count, timeout)
        got = []
        for _ in range(count):
            line, self.buf = self.buf.split(b"\n", 1)
            assert LINE.match(line), line
            got.append(line.decode("latin-1"))
        return got

    def until(self, text, timeout=5):
        """Every line up to the first holding `text`."""
        self._fill(lambda: text.encode() in self.buf, timeout)
        got = []
        while not got or text not in got[-1]:
            got += self.lines(1)
        return got

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()


def watch(server, args=b"", rcvbuf=None):
    return Watcher(server, args, rcvbuf)


def lines(w, count, timeout=5):
    return w.lines(count, timeout)


def quiet(w, wait=0.3):
    """Nothing more comes on the watcher."""
    assert not w.buf, w.buf
    w.sock.settimeout(wait)
    try:
        data = w.sock.recv(65536)
    except socket.timeout:
        return
    raise AssertionError(f"unexpected: {data!r}")


def stats(server):
    with connect(server) as c:
        out = command(c, b"stats\r\n", b"END\r\n").decode()
    return {p[1]: p[2] for p in (l.split(" ") for l in out.splitlines()) if len(p) == 3}


@pytest.fixture
def server(kind):
    with servers.Server(kind, ["-m", "64"]) as s:
        yield s


def test_watch_answers_ok_and_streams_fetchers_by_default(server):
    w = watch(server)
    with connect(server) as c:
        assert command(c, b"get foo\r\n") == b"END\r\n"
    got = lines(w, 1)
    assert norm(got[0]) == "ts=T gid=G type=item_get key=foo status=not_found clsid=0 cfd=C size=0"
    # ts=<seconds>.<microseconds, unpadded>
    assert re.match(r"^ts=\d{10}\.\d{1,6} gid=\d+ ", got[0])


# Each command, and the lines memcached 1.6.45 logs for it with
# `watch fetchers mutations deletions`.
SCRIPT = [
    (b"get foo\r\n", b"END\r\n", [
        "type=item_get key=foo status=not_found clsid=0 cfd=C size=0"]),
    (b"set foo 0 0 3\r\nbar\r\n", b"STORED\r\n", [
        "type=item_get key=foo status=not_found clsid=0 cfd=C size=0",
        "type=item_store key=foo status=stored cmd=set ttl=0 clsid=1 cfd=C size=3"]),
    (b"get foo bar\r\n", b"END\r\n", [
        "type=item_get key=foo status=found clsid=1 cfd=C size=3",
        "type=item_get key=bar status=not_found clsid=0 cfd=C size=0"]),
    (b"add foo 0 0 1\r\nx\r\n", b"NOT_STORED\r\n", [
        "type=item_get key=foo status=found clsid=1 cfd=C size=3",
        "type=item_store key=foo status=not_stored cmd=add ttl=0 clsid=1 cfd=C size=1"]),
    (b"set k\xc3\xa9y/% 0 100 2\r\nhi\r\n", b"STORED\r\n", [
        "type=item_get key=k%C3%A9y%2F%25 status=not_found clsid=0 cfd=C size=0",
        "type=item_store key=k%C3%A9y%2F%25 status=stored cmd=set ttl=100 clsid=1 cfd=C size=2"]),
    (b"append foo 0 0 1\r\nx\r\n", b"STORED\r\n", [
        "type=item_get key=foo status=found clsid=1 cfd=C size=3",
        "type=item_store key=foo status=stored cmd=append ttl=0 clsid=1 cfd=C size=4"]),
    (b"prepend nope 0 0 1\r\nx\r\n", b"NOT_STORED\r\n", [
        "type=item_get key=nope status=not_found clsid=0 cfd=C size=0",
        "type=item_store key=nope status=not_stored cmd=prepend ttl=0 clsid=1 cfd=C size=1"]),
    (b"cas foo 0 0 1 999\r\nx\r\n", b"EXISTS\r\n", [
        "type=item_get key=foo status=found clsid=1 cfd=C size=4",
        "type=item_store key=foo status=exists cmd=cas ttl=0 clsid=1 cfd=C size=1"]),
    (b"replace n 0 0 1\r\n5\r\n", b"NOT_STORED\r\n", [
        "type=item_get key=n status=not_found clsid=0 cfd=C size=0",
        "type=item_store key=n status=not_stored cmd=replace ttl=0 clsid=1 cfd=C size=1"]),
    (b"set n 0 0 1\r\n5\r\n", b"STORED\r\n", [
        "type=item_get key=n status=not_found clsid=0 cfd=C size=0",
        "type=item_store key=n status=stored cmd=set ttl=0 clsid=1 cfd=C size=1"]),
    (b"incr n 1\r\n", b"6\r\n", [
        "type=item_get key=n status=found clsid=1 cfd=C size=1"]),
    (b"touch n 10\r\n", b"TOUCHED\r\n", [
        "type=item_get key=n status=found clsid=1 cfd=C size=1"]),
    (b"gat 0 n\r\n", b"END\r\n", [
        "type=item_get key=n status=found clsid=1 cfd=C size=1"]),
    (b"delete foo\r\n", b"DELETED\r\n", [
        "type=item_get key=foo status=found clsid=1 cfd=C size=4",
        "type=deleted key=foo cmd=delete clsid=1 size=4"]),
    (b"delete foo\r\n", b"NOT_FOUND\r\n", [
        "type=item_get key=foo status=not_found clsid=0 cfd=C size=0"]),
    (b"mg n v\r\n", b"6\r\n", [
        "type=item_get key=n status=found clsid=1 cfd=C size=1"]),
    (b"ms m 2 T0\r\nhi\r\n", b"HD\r\n", [
        "type=item_get key=m status=not_found clsid=0 cfd=C size=0",
        "type=item_store key=m status=stored cmd=set ttl=0 clsid=1 cfd=C size=2"]),
    (b"md m\r\n", b"HD\r\n", [
        "type=item_get key=m status=found clsid=1 cfd=C size=2",
        "type=deleted key=m cmd=md clsid=1 size=2"]),
    (b"ma n\r\n", b"HD\r\n", [
        "type=item_get key=n status=found clsid=1 cfd=C size=1"]),
    (b"mn\r\n", b"MN\r\n", []),
    (b"version\r\n", b"\r\n", []),
]


@pytest.mark.parametrize("i", range(len(SCRIPT)), ids=[s[0].split(b" ")[0].decode() + str(i)
                                                         for i, s in enumerate(SCRIPT)])
def test_lines_as_memcached_logs_them(server, i):
    w = watch(server, b"fetchers mutations deletions")
    with connect(server) as c:
        # The state the command meets: the script's earlier commands.
        for req, end, _ in SCRIPT[:i]:
            command(c, req, end)
        if i:
            lines(w, sum(len(e) for _, _, e in SCRIPT[:i]))
        req, end, expected = SCRIPT[i]
        command(c, req, end)
        got = [norm(l) for l in lines(w, len(expected))] if expected else []
        assert got == ["ts=T gid=G " + e for e in expected]
        quiet(w)


def test_streams_are_matched_by_prefix_and_unknown_ones_refused(server):
    # Any prefix of a stream name (the first name in memcached's order).
    w = watch(server, b"f m d")
    with connect(server) as c:
        command(c, b"set a 0 0 1\r\n1\r\n")
        command(c, b"delete a\r\n")
    got = [norm(l).split(" type=")[1].split(" ")[0] for l in lines(w, 4)]
    assert got == ["item_get", "item_store", "item_get", "deleted"]
    for bad in (b"watch fetchersx\r\n", b"watch bogus\r\n", b"watch noreply\r\n",
                b"watch fetchers nope\r\n"):
        with connect(server) as c:
            assert command(c, bad) == b"ERROR\r\n", bad
            # Still a client.
            assert command(c, b"version\r\n").startswith(b"VERSION ")


def test_proxy_and_rawcmds_streams_are_accepted_and_carry_nothing(server):
    w = watch(server, b"proxyreqs proxyevents proxyuser rawcmds")
    with connect(server) as c:
        command(c, b"set a 0 0 1\r\n1\r\n")
        command(c, b"get a\r\n", b"END\r\n")
    quiet(w)


def test_a_watcher_sees_only_what_happens_after_it_started(server):
    with connect(server) as c:
        command(c, b"get before\r\n")
        w = watch(server)
        command(c, b"get after\r\n")
    got = lines(w, 1)
    assert "key=after " in got[0]
    quiet(w)


def test_watchers_each_get_the_streams_they_asked_for(server):
    wf = watch(server, b"fetchers")
    wm = watch(server, b"mutations")
    with connect(server) as c:
        command(c, b"set a 0 0 1\r\n1\r\n")
    assert "type=item_get " in lines(wf, 1)[0]
    assert "type=item_store " in lines(wm, 1)[0]
    quiet(wf)
    quiet(wm)


def test_connevents_name_the_connection_and_its_close(server):
    w = watch(server, b"connevents fetchers")
    c = connect(server)
    port = c.getsockname()[1]
    command(c, b"get k\r\n")
    c.close()
    # (The server's readiness probe may be logged too, accepted late.)
    new, get, close = [l for l in w.until(f"type=conn_close rip=127.0.0.1 rport={port} ")
                       if f"rport={port} " in l or "item_get" in l]
    cfd = re.search(r"cfd=(\d+)", new).group(1)
    assert norm(new) == "ts=T gid=G type=conn_new rip=127.0.0.1 rport=P transport=tcp cfd=C"
    assert f"rport={port} " in new
    # watcher_connid.t: the same descriptor in the connection's lines.
    assert f"cfd={cfd} " in get
    assert norm(close) == ("ts=T gid=G type=conn_close rip=127.0.0.1 rport=P transport=tcp "
                           "reason=normal cfd=C")
    assert f"rport={port} " in close and close.endswith(f"cfd={cfd}")


def test_evictions_are_logged_with_their_item(kind):
    with servers.Server(kind, ["-m", "2"]) as server:
        w = watch(server, b"evictions")
        value = b"x" * 10000
        with connect(server) as c:
            for i in range(400):
                ttl = b"100" if i % 2 else b"0"
                command(c, b"set key%d 0 %s 10000\r\n" % (i, ttl) + value + b"\r\n")
        first = lines(w, 2)
        assert [norm(l) for l in first] == [
            "ts=T gid=G type=eviction key=key0 fetch=no ttl=-1 la=0 clsid=22 size=10000",
            "ts=T gid=G type=eviction key=key1 fetch=no ttl=100 la=0 clsid=22 size=10000",
        ]


def test_watch_is_refused_with_dash_W(kind):
    with servers.Server(kind, ["-W"]) as server, connect(server) as c:
        assert command(c, b"watch\r\n") == b"CLIENT_ERROR watch commands not allowed\r\n"
        assert command(c, b"version\r\n").startswith(b"VERSION ")


def test_watch_after_pipelined_commands_is_refused(server):
    with connect(server) as c:
        c.sendall(b"get foo\r\nwatch\r\n")
        assert read_until(c, b"watch\r\n") == (
            b"END\r\nERROR cannot pipeline other commands before watch\r\n")
        assert command(c, b"version\r\n").startswith(b"VERSION ")


def test_twenty_watchers_at_most(server):
    # The watchers of the tests before are closed, and no longer counted
    # (memcached's logger thread drops a closed watcher when it next runs).
    deadline = time.time() + 5
    while stats(server)["log_watchers"] != "0":
        assert time.time() < deadline, "an earlier test's watcher is still counted"
        time.sleep(0.05)
    ws = [watch(server) for _ in range(20)]
    with connect(server) as c:
        assert command(c, b"watch\r\n") == b"WATCHER_TOO_MANY log watcher limit reached\r\n"
        assert command(c, b"version\r\n").startswith(b"VERSION ")
    # Counted by the logger thread (memcached's too), which may not have
    # run since the last watcher was added.
    deadline = time.time() + 5
    while stats(server)["log_watchers"] != "20":
        assert time.time() < deadline, "twenty watchers, not counted as twenty"
        time.sleep(0.05)
    ws.pop().close()
    deadline = time.time() + 5
    while stats(server)["log_watchers"] != "19":
        assert time.time() < deadline, "the closed watcher is still counted"
        time.sleep(0.05)
    ws.append(watch(server))
    for w in ws:
        w.close()


def test_a_watchers_own_input_is_ignored(server):
    w = watch(server)
    w.send(b"get a\r\nversion\r\n")
    quiet(w)
    with connect(server) as c:
        command(c, b"get b\r\n")
    assert "key=b " in lines(w, 1)[0]


def test_a_watcher_that_falls_behind_skips_lines_then_is_told_how_many(server):
    # A watcher that does not read while ~12 MB of lines are logged: its
    # buffer (256 KiB) and the socket's fill, the rest is skipped.
    w = watch(server, rcvbuf=4096)
    key = b"k" * 240
    batch = b"".join(b"get %s%03d\r\n" % (key, i) for i in range(100))
    with connect(server) as c:
        for _ in range(400):
            command(c, batch, b"END\r\n" * 100)
    before = stats(server)
    assert int(before["log_watcher_skipped"]) > 0
    # Then it reads: the lines it kept, `skipped=N`, and new lines. The
    # marker is sent again until it is seen: while the watcher drains, the
    # worker's buffer can still be full and drop it too (memcached's
    # logger thread empties it in turns).
    lasts = 0
    with connect(server) as c:
        deadline = time.time() + 60
        while b"key=last " not in w.buf:
            assert time.time() < deadline, f"no key=last line: {w.buf[-300:]!r}"
            command(c, b"get last\r\n")
            lasts += 1
            try:
                w._fill(lambda: b"key=last " in w.buf, timeout=0.5)
            except AssertionError:
                pass
    # Whole lines only: the last read can end inside a line (a later
    # `get last` logged while the watcher drained).
    text = w.buf[:w.buf.rfind(b"\n") + 1].decode()
    skips = re.findall(r"^skipped=(\d+)$", text, re.M)
    assert skips and all(int(n) > 0 for n in skips), text[-500:]
    for line in text.splitlines():
        assert line.startswith("skipped=") or LINE.match(line.encode()), line
    # Every line was dropped by its worker (its buffer full), or taken
    # and then sent or skipped.
    after = stats(server)
    sent, skipped = int(after["log_watcher_sent"]), int(after["log_watcher_skipped"])
    written, dropped = int(after["log_worker_written"]), int(after["log_worker_dropped"])
    assert 40001 <= written + dropped <= 40000 + lasts
    assert sent + skipped == written
    assert sum(int(n) for n in skips) <= skipped


def test_log_stats_count_lines(server):
    assert stats(server)["log_watchers"] == "0"
    w = watch(server)
    with connect(server) as c:
        for i in range(5):
            command(c, b"get k%d\r\n" % i)
    lines(w, 5)
    s = stats(server)
    assert s["log_watchers"] == "1"
    assert int(s["log_worker_written"]) >= 5
    assert int(s["log_watcher_sent"]) >= 5
    assert s["log_worker_dropped"] == "0"
    assert s["log_watcher_skipped"] == "0"
    w.close()
    deadline = time.time() + 5
    while stats(server)["log_watchers"] != "0":
        assert time.time() < deadline, "the closed watcher is still counted"
        time.sleep(0.05)


def test_a_watcher_over_tls(kind, tmp_path):
    from support.tls import Certs
    certs = Certs(tmp_path)
    with servers.Server(kind, certs.server_args()) as server:
        ctx = certs.client_context()
        raw = socket.create_connection(server.address, timeout=5)
        w = ctx.wrap_socket(raw, server_hostname="localhost")
        w.sendall(b"watch fetchers\r\n")
        buf = b""
        while not buf.startswith(b"OK\r\n"):
            chunk = w.recv(4096)
            assert chunk, buf
            buf += chunk
        raw_c = socket.create_connection(server.address, timeout=5)
        with ctx.wrap_socket(raw_c, server_hostname="localhost") as c:
            c.sendall(b"get tlskey\r\n")
            assert c.recv(100) == b"END\r\n"
        buf = buf[4:]
        while b"\n" not in buf:
            chunk = w.recv(4096)
            assert chunk, buf
            buf += chunk
        assert norm(buf.decode().split("\n")[0]) == (
            "ts=T gid=G type=item_get key=tlskey status=not_found clsid=0 cfd=C size=0")
        w.close()


def test_a_get_of_many_keys_logs_each_key(server):
    # A get line longer than 16 KiB (osmium serves its keys as they
    # arrive). A burst may overflow the worker's buffer (memcached's too):
    # every line is then logged or counted in log_worker_dropped.
    w = watch(server)
    keys = [b"key%05d" % i for i in range(2000)]
    lasts = 0
    with connect(server) as c:
        command(c, b"get " + b" ".join(keys) + b"\r\n", b"END\r\n")
        # The marker, again until it is seen: while the burst drains, the
        # worker's buffer can still be full and drop it too (memcached's
        # logger thread empties it in turns).
        deadline = time.time() + 10
        while b"key=last " not in w.buf:
            assert time.time() < deadline, f"no key=last line: {w.buf[-300:]!r}"
            command(c, b"get last\r\n", b"END\r\n")
            lasts += 1
            try:
                w._fill(lambda: b"key=last " in w.buf, timeout=0.3)
            except AssertionError:
                pass
    got = w.until("key=last ", timeout=10)[:-1]
    logged = [re.search(r" key=(\S+) ", l).group(1).encode() for l in got]
    assert logged == [k for k in keys if k in set(logged)]
    # Every key logged or counted as dropped (and any marker dropped).
    dropped = int(stats(server)["log_worker_dropped"])
    assert 2000 <= len(logged) + dropped <= 2000 + lasts - 1
    assert len(logged) >= 1000


def test_expired_and_flushed_items_are_logged_as_not_found(server):
    w = watch(server)
    with connect(server) as c:
        command(c, b"set e 0 -1 1\r\n1\r\n")
        command(c, b"set f 0 0 1\r\n1\r\n")
        command(c, b"flush_all\r\n")
        command(c, b"get e\r\n")
        command(c, b"get f\r\n")
    got = [norm(l) for l in w.lines(4)]
    assert got[2:] == [
        "ts=T gid=G type=item_get key=e status=not_found clsid=0 cfd=C size=0",
        "ts=T gid=G type=item_get key=f status=not_found clsid=0 cfd=C size=0",
    ]


def test_binary_commands_are_logged_as_memcached_logs_them(server):
    import struct

    def packet(op, key, value=b"", extras=b""):
        return struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0,
                           len(extras) + len(key) + len(value), 0, 0) + extras + key + value

    def call(c, data):
        c.sendall(data)
        head = b""
        while len(head) < 24:
            head += c.recv(24 - len(head))
        body = struct.unpack(">I", head[8:12])[0]
        while body:
            body -= len(c.recv(body))

    w = watch(server, b"fetchers mutations deletions")
    flags_exp = struct.pack(">II", 0, 0)
    with connect(server) as c:
        call(c, packet(0x01, b"bk", b"vv", flags_exp))  # SET
        call(c, packet(0x00, b"bk"))  # GET
        call(c, packet(0x02, b"bk", b"x", flags_exp))  # ADD
        call(c, packet(0x04, b"bk"))  # DELETE: no `deleted` line in memcached
        call(c, packet(0x00, b"bk"))
    assert [norm(l) for l in w.lines(6)] == ["ts=T gid=G " + l for l in [
        "type=item_get key=bk status=not_found clsid=0 cfd=C size=0",
        "type=item_store key=bk status=stored cmd=set ttl=0 clsid=1 cfd=C size=2",
        "type=item_get key=bk status=found clsid=1 cfd=C size=2",
        "type=item_get key=bk status=found clsid=1 cfd=C size=2",
        "type=item_store key=bk status=not_stored cmd=add ttl=0 clsid=1 cfd=C size=1",
        "type=item_get key=bk status=found clsid=1 cfd=C size=2",
    ]]
    assert "key=bk status=not_found" in w.lines(1)[0]
    quiet(w)


def test_a_watcher_is_a_connection_in_conn_watch_state(server):
    w = watch(server)
    port = w.sock.getsockname()[1]
    with connect(server) as c:
        out = command(c, b"stats conns\r\n", b"END\r\n").decode()
    fd = re.search(rf"STAT (\d+):addr tcp:127\.0\.0\.1:{port}\r\n", out).group(1)
    assert f"STAT {fd}:state conn_watch\r\n" in out
