"""prometheus/memcached_exporter against genuine memcached 1.6.45 and osmium.

The exporter is built from the copy of its source kept beside this file
(`memcached_exporter/`, release 0.16.0 as published, its LICENSE with it;
its Go dependencies come from the module proxy, fetched by
scripts/test-all.sh's install step). One server of each kind runs the same
workload in lockstep (each command sent to both, both replies read before the
next), an exporter scrapes each, and the two `/metrics` pages are compared:

* `memcached_up 1` on both;
* every metric family the exporter exports for memcached, with its label
  names, exists for osmium (label values aside: the slab ids differ, osmium
  reports its cache as one class);
* every family the exporter makes of osmium is on osmium's own `/metrics`
  (`--metrics-addr`) under the same name and label names;
* the values agree where they mean the same thing: commands by status, items
  (flash items counted), item ages (within 2 s), evictions present.

What legitimately differs, and is not compared: memory and slab layout
(`bytes`, `limit`, `malloced`, chunk and page counts, per-slab splits),
`items_total` (memcached counts the RAM header it makes for each item it
writes to flash as a new item), connection counts (the harnesses' probes),
rusage and uptime, the RAM/flash split of the items (`extstore_objects_*`:
each engine moves different items to flash), LRU hits per queue (osmium does
not count hits by queue) and `moves_to_cold` (osmium's new items enter its
cold queue directly). docs/stats.md and docs/ENGINE.md tell how
osmium's S3-FIFO queues map onto memcached's LRUs.

A last test runs memcached-tool's `display` (the script from the oracle's
source tarball, tests/oracle/) against osmium and checks a non-zero Max_age.
"""
import concurrent.futures
import os
import re
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.request

import pytest

from support import servers

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTER_DIR = os.path.join(HERE, "memcached_exporter")
KINDS = ("memcached", "osmium")
ORACLE_TARBALL = os.path.join(servers.ROOT, "tests", "oracle",
                              f"memcached-{servers.ORACLE_VERSION}-src.tar.gz")


def _need(cond, msg):
    if cond:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(msg + " (CI=true: this suite must run)")
    pytest.skip(msg)


def _need_osmium():
    b = servers.OSMIUM_BIN
    _need(os.path.isfile(b) and os.access(b, os.X_OK),
          f"osmium binary not found at {b} (cargo build --release --workspace)")


@pytest.fixture(scope="module")
def exporter_bin(tmp_path_factory):
    go = shutil.which("go")
    _need(go is not None, "toolchain missing: go not on PATH")
    out = str(tmp_path_factory.mktemp("exporter") / "memcached_exporter")
    proc = subprocess.run([go, "build", "-mod=readonly", "-o", out, "./cmd/memcached_exporter"],
                          cwd=EXPORTER_DIR, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=600)
    if proc.returncode != 0:
        pytest.fail("building memcached_exporter failed:\n" + proc.stdout.decode(errors="replace"))
    return out


class Exporter:
    """memcached_exporter scraping one server, on a free loopback port."""

    def __init__(self, binary, server):
        self.port = servers.free_port()
        self.proc = subprocess.Popen(
            [binary, f"--memcached.address=127.0.0.1:{server.port}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 15
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")
                raise RuntimeError(f"memcached_exporter exited ({self.proc.returncode}): {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if time.time() > deadline:
                    self.stop()
                    raise RuntimeError("memcached_exporter did not listen within 15 s")
                time.sleep(0.05)

    def scrape(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            return parse_metrics(r.read().decode())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """{(name, ((label, value), ...)): float} of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"unparsable metrics line: {line!r}"
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def families(samples):
    """{(name, label names)} of the memcached_* samples."""
    return {(name, tuple(k for k, _ in labels)) for name, labels in samples
            if name.startswith("memcached_")}


def value(samples, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"{name}{labels} missing"
    return samples[key]


def total(samples, name):
    """The sum of a family's samples (over slabs)."""
    return sum(v for (n, _), v in samples.items() if n == name)


def largest(samples, name):
    return max((v for (n, _), v in samples.items() if n == name), default=0)


class Lockstep:
    """One connection to each server; every command goes to both."""

    def __init__(self, srvs):
        self.socks = [socket.create_connection(s.address) for s in srvs]
        self.files = [s.makefile("rb") for s in self.socks]

    def send(self, data):
        for s in self.socks:
            s.sendall(data)

    def cmd(self, data, lines=1):
        """Sends `data` to both and reads `lines` reply lines from each; the
        replies must be the same (CAS values aside)."""
        self.send(data)
        replies = [[f.readline() for _ in range(lines)] for f in self.files]
        return replies

    def same(self, data, expect):
        for r in self.cmd(data):
            assert r == [expect], f"{data[:60]!r}: {r!r}, expected {expect!r}"

    def close(self):
        for f in self.files:
            f.close()
        for s in self.socks:
            s.close()


OWN = "osmium's own"


def run_pair(exporter_bin, args_of, workload, settle):
    """Starts one server of each kind (`args_of(kind)`; osmium with its own
    /metrics too), runs `workload` on both, waits `settle` seconds, and
    returns each kind's scrape by its exporter, and osmium's own /metrics
    (under OWN)."""
    _need_osmium()
    srvs, exps = [], []
    metrics_port = servers.free_port()
    try:
        for kind in KINDS:
            own = ["--metrics-addr", f"127.0.0.1:{metrics_port}"] if kind == "osmium" else []
            srvs.append(servers.Server(kind, args_of(kind) + own))
        both = Lockstep(srvs)
        try:
            workload(both)
        finally:
            both.close()
        time.sleep(settle)
        for s in srvs:
            exps.append(Exporter(exporter_bin, s))
        # Both scraped at once: what they report as ages (seconds since a
        # write the workload made to both together) is then read at the same
        # time, however long one scrape takes on a busy machine.
        with concurrent.futures.ThreadPoolExecutor(len(exps)) as pool:
            scrapes = dict(zip(KINDS, pool.map(lambda e: e.scrape(), exps)))
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=10) as r:
            scrapes[OWN] = parse_metrics(r.read().decode())
        return scrapes
    finally:
        for e in exps:
            e.stop()
        for s in srvs:
            s.stop()


BIG = 20_000


def flash_workload(both):
    # 2,000 values of 20 KB into 32 MB of RAM: a third go to the flash tier
    # (paced, so that memcached's extstore writer keeps up and evicts none:
    # when it lags, memcached evicts instead).
    # Values that do not compress: osmium's cleaner packs compressible cold
    # items (-o compression=cold), which would keep them all in RAM.
    # (without CR or LF: the replies are read by lines)
    big = bytes(b for b in os.urandom(2 * BIG) if b not in b"\r\n")[:BIG]
    for i in range(2000):
        both.same(b"set big:%d 0 0 %d\r\n%s\r\n" % (i, BIG, big), b"STORED\r\n")
        time.sleep(0.002)
    for i in range(100):
        both.same(b"set k:%d 0 0 100\r\n%s\r\n" % (i, b"s" * 100), b"STORED\r\n")
    for i in range(80):
        both.cmd(b"get k:%d\r\n" % i, lines=3)
    for i in range(10):  # from flash
        both.cmd(b"get big:%d\r\n" % i, lines=3)
    for i in range(30):
        both.same(b"get miss:%d\r\n" % i, b"END\r\n")
    for i in range(90, 95):
        both.same(b"delete k:%d\r\n" % i, b"DELETED\r\n")
    for i in range(3):
        both.same(b"delete nokey:%d\r\n" % i, b"NOT_FOUND\r\n")
    for i in range(3):
        both.same(b"set n:%d 0 0 2\r\n10\r\n" % i, b"STORED\r\n")
    for i in range(4):
        both.same(b"incr n:%d 1\r\n" % (i % 3), b"11\r\n" if i < 3 else b"12\r\n")
    for i in range(2):
        both.same(b"incr nonum:%d 1\r\n" % i, b"NOT_FOUND\r\n")
    both.same(b"decr n:2 5\r\n", b"6\r\n")
    both.same(b"decr n:2 1\r\n", b"5\r\n")
    both.same(b"decr nonum:9 1\r\n", b"NOT_FOUND\r\n")
    for i in range(5):
        both.same(b"touch k:%d 1000\r\n" % i, b"TOUCHED\r\n")
    for i in range(2):
        both.same(b"touch nokey:%d 1000\r\n" % i, b"NOT_FOUND\r\n")
    # cas: one hit, one bad value, one miss.
    for reply in both.cmd(b"gets k:10\r\n", lines=3):
        assert reply[0].startswith(b"VALUE k:10 0 100 "), reply
    both.send(b"gets k:10\r\n")
    uniques = []
    for f in both.files:
        uniques.append(int(f.readline().split()[4]))
        f.readline()
        assert f.readline() == b"END\r\n"
    for s, f, u in zip(both.socks, both.files, uniques):
        s.sendall(b"cas k:10 0 0 1 %d\r\nx\r\n" % u)
        assert f.readline() == b"STORED\r\n"
    both.same(b"cas k:11 0 0 1 1\r\nx\r\n", b"EXISTS\r\n")
    both.same(b"cas nokey:7 0 0 1 1\r\nx\r\n", b"NOT_FOUND\r\n")


# Commands by status: the same counts on both (`memcached_commands_total`).
COMMANDS = [("get", "hit"), ("get", "miss"), ("delete", "hit"), ("delete", "miss"),
            ("incr", "hit"), ("incr", "miss"), ("decr", "hit"), ("decr", "miss"),
            ("cas", "hit"), ("cas", "miss"), ("cas", "badval"), ("touch", "hit"),
            ("touch", "miss"), ("set", "hit"), ("flush", "hit")]


def check_families(scrapes):
    mc, osm = families(scrapes["memcached"]), families(scrapes["osmium"])
    missing = sorted(mc - osm)
    assert not missing, f"metric families memcached has and osmium does not: {missing}"
    # osmium's own /metrics is a superset of what memcached_exporter makes of
    # the same server: every family under the same name, with its labels.
    # (`memcached_exporter_build_info` describes the exporter, not the server.)
    own = families(scrapes[OWN])
    missing = sorted(f for f in osm - own if not f[0].startswith("memcached_exporter_"))
    assert not missing, f"families memcached_exporter has for osmium, not on /metrics: {missing}"


def test_flash_tier_workload(exporter_bin, tmp_path):
    def args_of(kind):
        return ["-m", "32", "-t", "2",
                "-o", f"ext_path={tmp_path}/{kind}.ext:64m,ext_page_size=8"]

    scrapes = run_pair(exporter_bin, args_of, flash_workload, settle=4)
    mc, osm = scrapes["memcached"], scrapes["osmium"]
    for kind, s in scrapes.items():
        assert value(s, "memcached_up") == 1, kind
    check_families(scrapes)
    for command, status in COMMANDS:
        assert value(osm, "memcached_commands_total", command=command, status=status) == \
            value(mc, "memcached_commands_total", command=command, status=status), (command, status)
    # Every item counted, those on flash too (2,000 big, 95 small, 3 numbers).
    assert value(mc, "memcached_current_items") == 2098
    assert value(osm, "memcached_current_items") == 2098
    assert total(osm, "memcached_slab_current_items") == 2098
    assert value(osm, "memcached_extstore_objects_used") > 0
    assert value(osm, "memcached_items_evicted_total") == value(mc, "memcached_items_evicted_total") == 0
    # The same requests, but for the digits of the CAS unique each sent back.
    assert abs(value(osm, "memcached_read_bytes_total") -
               value(mc, "memcached_read_bytes_total")) <= 20
    # The oldest item was written at the start of the workload, several
    # seconds ago (on flash in both).
    age_mc = largest(mc, "memcached_slab_items_age_seconds")
    age_osm = largest(osm, "memcached_slab_items_age_seconds")
    assert age_mc >= 4, age_mc
    assert abs(age_osm - age_mc) <= 2, (age_osm, age_mc)


def eviction_workload(both):
    # 40 MB of 200-byte values into 8 MB: most are evicted.
    value_ = b"e" * 200
    for chunk in range(40):
        both.send(b"".join(b"set e:%d 0 0 200 noreply\r\n%s\r\n" % (chunk * 5000 + i, value_)
                           for i in range(5000)))
        both.same(b"mn\r\n", b"MN\r\n")
    for i in range(199_900, 200_000):
        both.cmd(b"get e:%d\r\n" % i, lines=3)
    for i in range(10):
        both.same(b"get e:%d\r\n" % i, b"END\r\n")


def test_eviction_workload(exporter_bin):
    scrapes = run_pair(exporter_bin, lambda kind: ["-m", "8", "-t", "2"], eviction_workload,
                       settle=3)
    mc, osm = scrapes["memcached"], scrapes["osmium"]
    for kind, s in scrapes.items():
        assert value(s, "memcached_up") == 1, kind
    check_families(scrapes)
    for command, status in COMMANDS:
        if (command, status) == ("set", "hit"):
            continue
        assert value(osm, "memcached_commands_total", command=command, status=status) == \
            value(mc, "memcached_commands_total", command=command, status=status), (command, status)
    # memcached counts a set only once it has memory for the item: under this
    # pressure it sometimes finds none (`outofmemory`, the noreply set's error
    # unseen). Each of the 200,000 sets is then a hit or out of memory.
    for kind, s in scrapes.items():
        sets = value(s, "memcached_commands_total", command="set", status="hit")
        oom = total(s, "memcached_slab_items_outofmemory_total")
        assert sets + oom == 200_000, (kind, sets, oom)
    assert value(osm, "memcached_commands_total", command="set", status="hit") == 200_000
    for name in ("memcached_items_evicted_total", "memcached_slab_items_evicted_total",
                 "memcached_slab_items_evicted_unfetched_total"):
        assert total(mc, name) > 0, name
        assert total(osm, name) > 0, name
    # Items evicted were last accessed during the load, a few seconds ago.
    assert largest(osm, "memcached_slab_items_age_seconds") >= 2
    assert largest(mc, "memcached_slab_items_age_seconds") >= 2
    items = value(osm, "memcached_current_items")
    assert 10_000 < items < 200_000, items
    assert total(osm, "memcached_slab_current_items") == items


def memcached_tool(tmp_path):
    _need(os.path.isfile(ORACLE_TARBALL), f"{ORACLE_TARBALL} missing")
    _need(shutil.which("perl") is not None, "perl missing")
    check = subprocess.run(["perl", "-MURI::Escape", "-e", "1"], capture_output=True)
    _need(check.returncode == 0, "perl's URI::Escape missing (apt-get install liburi-perl)")
    member = f"memcached-{servers.ORACLE_VERSION}/scripts/memcached-tool"
    with tarfile.open(ORACLE_TARBALL) as t:
        data = t.extractfile(member).read()
    path = tmp_path / "memcached-tool"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("kind", KINDS)
def test_memcached_tool_display_max_age(kind, tmp_path):
    if kind == "osmium":
        _need_osmium()
    tool = memcached_tool(tmp_path)
    srv = servers.Server(kind, ["-m", "64"])
    try:
        with socket.create_connection(srv.address) as c:
            f = c.makefile("rb")
            for i in range(50):
                c.sendall(b"set t:%d 0 0 10\r\n0123456789\r\n" % i)
                assert f.readline() == b"STORED\r\n"
        time.sleep(3)
        out = subprocess.run(["perl", tool, f"127.0.0.1:{srv.port}", "display"],
                             capture_output=True, timeout=30, check=True).stdout.decode()
    finally:
        srv.stop()
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    assert rows, out
    # "  #  Item_Size  Max_age   Pages   Count ..."; Max_age is "<n>s".
    ages = [int(r[2].rstrip("s")) for r in rows]
    counts = [int(r[4]) for r in rows]
    assert sum(counts) == 50, out
    assert max(ages) >= 2, out
