"""libmemcached-tools against genuine memcached and osmium: memccapable's
ascii and binary conformance runs plus memcstat / memccp / memccat /
memcexist / memctouch / memcrm / memcping / memcflush round trips, in the
text protocol and (where the tool has --binary) the binary protocol."""
import os
import re
import shutil
import subprocess

import pytest

from .helpers import ALL_BYTES, raw_get

TOOLS = ("memccapable", "memcstat", "memccp", "memccat", "memcflush", "memcexist",
         "memctouch", "memcrm", "memcping")


@pytest.fixture(scope="module", autouse=True)
def _tools_present():
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"libmemcached-tools missing: {missing} (apt-get install libmemcached-tools)")


def run(args, timeout=60, cwd=None):
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=timeout, cwd=cwd)
    return proc


def describe(proc):
    return (f"command: {' '.join(proc.args)}\nexit: {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout.decode(errors='replace')}\n"
            f"--- stderr ---\n{proc.stderr.decode(errors='replace')}")


def servers_arg(srv):
    return f"--servers=127.0.0.1:{srv.port}"


# memccapable 1.1.4 expects "delete a b c d e" (and its noreply variant) to
# be refused; memcached 1.6.45 ignores the tokens after the key and answers
# NOT_FOUND, so these two of its ascii checks fail against memcached.
MEMCCAPABLE_ASCII_FAILS = {"ascii delete", "ascii delete noreply"}


def memccapable_results(out, proto):
    """{check name: passed} from memccapable's stdout: each check prints its
    name padded to 40 columns, then "[pass]\n" if it passed (a "[FAIL]"
    goes to stderr, so a failed check's name runs into the next one)."""
    results, pos = {}, 0
    while out.startswith(proto + " ", pos):
        name = out[pos:pos + 40].strip()
        pos += 40
        passed = out.startswith("[pass]\n", pos)
        if passed:
            pos += len("[pass]\n")
        results[name] = passed
    return results


def test_memccapable_ascii(server):
    proc = run(["memccapable", "-a", "-h", "127.0.0.1", "-p", str(server.port), "-t", "10"],
               timeout=120)
    out = proc.stdout.decode(errors="replace")
    print(describe(proc))
    results = memccapable_results(out, "ascii")
    failed = {name for name, passed in results.items() if not passed}
    # memccapable 1.1.4 runs 27 ascii checks; all but MEMCCAPABLE_ASCII_FAILS pass.
    assert len(results) >= 27 and failed == MEMCCAPABLE_ASCII_FAILS, describe(proc)
    assert proc.returncode == 1, describe(proc)
    err = proc.stderr.decode(errors="replace")
    assert f"{len(failed)} of {len(results)} tests failed" in err, describe(proc)


def test_memccapable_binary(server):
    proc = run(["memccapable", "-b", "-h", "127.0.0.1", "-p", str(server.port), "-t", "10"],
               timeout=120)
    out = proc.stdout.decode(errors="replace")
    print(describe(proc))
    results = re.findall(r"^binary \S.*?\s+\[(\w+)\]$", out, re.M)
    assert proc.returncode == 0, describe(proc)
    assert "[FAIL]" not in out, describe(proc)
    assert "All tests passed" in out, describe(proc)
    # memccapable 1.1.4 runs 27 binary tests (noop, quit(q), set(q), flush(q),
    # add(q), replace(q), delete(q), get(q/k/kq), incr(q), decr(q), version,
    # append(q), prepend(q), stat); all must pass (none skipped).
    assert len(results) >= 27 and set(results) == {"pass"}, describe(proc)


def test_memcstat(server):
    proc = run(["memcstat", servers_arg(server)])
    assert proc.returncode == 0, describe(proc)
    out = proc.stdout.decode()
    assert f"Server: 127.0.0.1 ({server.port})" in out, describe(proc)
    stats = dict(re.findall(r"^\t(\w+): (.*)$", out, re.M))
    for key in ("pid", "uptime", "version", "curr_items", "get_hits", "cmd_get", "cmd_set",
                "curr_connections", "limit_maxbytes"):
        assert key in stats, f"memcstat shows no {key}\n" + describe(proc)
    assert int(stats["pid"]) == server.pid
    proc = run(["memcstat", "-S", servers_arg(server)])
    assert proc.returncode == 0, describe(proc)
    # libmemcached 1.1.4 prints the -S line on stderr
    assert re.fullmatch(rf"127\.0\.0\.1:{server.port} \d+\.\d+\.\d+\S*\n",
                        (proc.stdout + proc.stderr).decode()), describe(proc)


def test_memccp_memccat_round_trip(server, tmp_path):
    content = ALL_BYTES + b"\r\nEND\r\n" + ALL_BYTES * 100
    path = tmp_path / "osmium_ccp.bin"
    path.write_bytes(content)
    s = servers_arg(server)
    proc = run(["memccp", s, "--flags=1234", str(path)])
    assert proc.returncode == 0, describe(proc)
    assert raw_get(server.address, "osmium_ccp.bin") == (1234, content)
    proc = run(["memccat", s, "osmium_ccp.bin"])
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout == content + b"\n"  # memccat adds a newline
    proc = run(["memccat", s, "-F", "osmium_ccp.bin"])
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout == b"1234\n" + content + b"\n"
    # --add on an existing key and --replace on a missing one fail
    proc = run(["memccp", s, "--add", str(path)])
    assert proc.returncode != 0, describe(proc)
    other = tmp_path / "osmium_ccp_missing.bin"
    other.write_bytes(b"x")
    proc = run(["memccp", s, "--replace", str(other)])
    assert proc.returncode != 0, describe(proc)
    assert run(["memccat", s, "osmium_ccp_missing.bin"]).returncode != 0
    # memcexist / memctouch / memcrm
    assert run(["memcexist", s, "osmium_ccp.bin"]).returncode == 0
    assert run(["memcexist", s, "osmium_nokey"]).returncode != 0
    assert run(["memctouch", s, "--expire=100", "osmium_ccp.bin"]).returncode == 0
    assert run(["memctouch", s, "--expire=100", "osmium_nokey"]).returncode != 0
    assert run(["memcrm", s, "osmium_ccp.bin"]).returncode == 0
    assert run(["memcrm", s, "osmium_ccp.bin"]).returncode != 0
    assert run(["memccat", s, "osmium_ccp.bin"]).returncode != 0


def test_memcping(server):
    proc = run(["memcping", servers_arg(server)])
    assert proc.returncode == 0, describe(proc)


def test_memcflush(server, tmp_path):
    s = servers_arg(server)
    files = []
    for i in range(3):
        p = tmp_path / f"osmium_flush_{i}"
        p.write_bytes(b"data %d" % i)
        files.append(str(p))
    proc = run(["memccp", s] + files)
    assert proc.returncode == 0, describe(proc)
    assert run(["memccat", s, "osmium_flush_0"]).stdout == b"data 0\n"
    proc = run(["memcflush", s])
    assert proc.returncode == 0, describe(proc)
    for i in range(3):
        proc = run(["memccat", s, f"osmium_flush_{i}"])
        assert proc.returncode != 0, describe(proc)
        assert proc.stdout == b""
        assert run(["memcexist", s, f"osmium_flush_{i}"]).returncode != 0


def test_binary_tools_round_trip(server, tmp_path):
    content = ALL_BYTES + b"\r\nEND\r\n" + ALL_BYTES * 100
    path = tmp_path / "osmium_bin.bin"
    path.write_bytes(content)
    s = [servers_arg(server), "--binary"]
    proc = run(["memccp", *s, "--flags=4321", str(path)])
    assert proc.returncode == 0, describe(proc)
    assert raw_get(server.address, "osmium_bin.bin") == (4321, content)
    proc = run(["memccat", *s, "-F", "osmium_bin.bin"])
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout == b"4321\n" + content + b"\n"
    proc = run(["memccp", *s, "--add", str(path)])
    assert proc.returncode != 0, describe(proc)
    assert run(["memcexist", *s, "osmium_bin.bin"]).returncode == 0
    assert run(["memcexist", *s, "osmium_bin_nokey"]).returncode != 0
    assert run(["memctouch", *s, "--expire=100", "osmium_bin.bin"]).returncode == 0
    assert run(["memctouch", *s, "--expire=100", "osmium_bin_nokey"]).returncode != 0
    assert run(["memcrm", *s, "osmium_bin.bin"]).returncode == 0
    assert run(["memcrm", *s, "osmium_bin.bin"]).returncode != 0
    assert run(["memccat", *s, "osmium_bin.bin"]).returncode != 0
    # stats over the binary protocol
    proc = run(["memcstat", *s])
    assert proc.returncode == 0, describe(proc)
    stats = dict(re.findall(r"^\t(\w+): (.*)$", proc.stdout.decode(), re.M))
    assert int(stats["pid"]) == server.pid
    proc = run(["memcstat", "-S", *s])
    assert proc.returncode == 0, describe(proc)
    assert re.fullmatch(rf"127\.0\.0\.1:{server.port} \d+\.\d+\.\d+\S*\n",
                        (proc.stdout + proc.stderr).decode()), describe(proc)
    # flush over the binary protocol
    other = tmp_path / "osmium_bin_flush"
    other.write_bytes(b"x")
    assert run(["memccp", *s, str(other)]).returncode == 0
    proc = run(["memcflush", *s])
    assert proc.returncode == 0, describe(proc)
    assert run(["memcexist", *s, "osmium_bin_flush"]).returncode != 0
