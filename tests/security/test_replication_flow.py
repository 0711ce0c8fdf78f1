"""Attack: wedge a sync replication ring with one pipelining connection.

Two osmium servers replicate to each other in sync mode (each holds a
client's reply until its target has the write). A client sends 1,000 sets
of 1.5 KB in one write on one connection (libmemcached's buffered writes,
any pipelining client) and only then reads. The attack succeeds if the
connection is left waiting for replies that need its own unread input (the
server stops reading it while it holds replies): no reply comes, and the
connection stays stuck. It must fail: every reply arrives, in order, within
the deadline, and both servers hold every key with its value.
"""
import os
import socket
import time

from support import servers

SETS = 1000
SIZE = 1500
# Far above what the pipeline takes (well under a second on loopback):
# only a wedged connection reaches it.
DEADLINE = 20.0


def stats(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            assert chunk, "connection closed during stats"
            data += chunk
    rows = {}
    for line in data.decode().split("\r\n"):
        if line.startswith("STAT "):
            _, name, value = line.split(" ", 2)
            rows[name] = value
    return rows


def wait_for(what, ok, timeout=10.0):
    deadline = time.time() + timeout
    while not ok():
        assert time.time() < deadline, f"timed out: {what}"
        time.sleep(0.02)


def value(i):
    tag = f"v{i}:".encode()
    return (tag * (SIZE // len(tag) + 1))[:SIZE]


def read_values(port, keys):
    """Each key's value on `port` (None for a miss), by one pipeline of mg."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"".join(b"mg %s v\r\n" % k for k in keys) + b"mn\r\n")
        f = s.makefile("rb")
        out = {}
        for k in keys:
            line = f.readline().rstrip(b"\r\n")
            if line == b"EN":
                out[k] = None
                continue
            assert line.startswith(b"VA "), line
            n = int(line.split()[1])
            out[k] = f.read(n + 2)[:n]
        assert f.readline() == b"MN\r\n"
        return out


def test_pipelined_sets_on_a_sync_ring_are_all_answered(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"the flow attack's shared secret\n")
    os.chmod(secret, 0o600)
    pa, pb = servers.free_port(), servers.free_port()
    common = ["-t", "2", "-m", "128", "--replication", "sync",
              "--replication-secret", str(secret)]
    a = servers.Server("osmium", common + ["--replicate-to", f"127.0.0.1:{pb}"], port=pa)
    try:
        b = servers.Server("osmium", common + ["--replicate-to", f"127.0.0.1:{pa}"], port=pb)
        try:
            for port in (pa, pb):
                wait_for(f"{port}'s link up with its full copy",
                         lambda: stats(port).get("replica_0_link") == "up"
                         and stats(port).get("replica_0_full_copies", "0") != "0")
            keys = [b"flow%d" % i for i in range(SETS)]
            pipeline = b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, SIZE, value(i))
                                for i, k in enumerate(keys))
            c = socket.create_connection(("127.0.0.1", pa), timeout=DEADLINE)
            try:
                started = time.time()
                c.sendall(pipeline)
                got = b""
                want = b"STORED\r\n" * SETS
                while len(got) < len(want):
                    left = DEADLINE - (time.time() - started)
                    assert left > 0, f"{got.count(b'STORED')} of {SETS} replies within {DEADLINE}s"
                    c.settimeout(left)
                    try:
                        chunk = c.recv(65536)
                    except socket.timeout:
                        chunk = b""
                    assert chunk, (f"{got.count(b'STORED')} of {SETS} replies, then nothing "
                                   f"after {time.time() - started:.1f}s")
                    got += chunk
                assert got == want
            finally:
                c.close()
            # Sync mode: the target had each write before its reply left.
            for port in (pa, pb):
                held = read_values(port, keys)
                missing = [k for i, k in enumerate(keys) if held[k] != value(i)]
                assert not missing, f"{len(missing)} keys wrong on {port}, e.g. {missing[:3]}"
        finally:
            b.stop()
    finally:
        a.stop()
