"""Proxies in front of servers, for the cluster suites: nutcracker (Debian's
`nutcracker`, twemproxy 0.5.0) or osmium-proxy, reading the same nutcracker
YAML, on a free loopback port, stopped by PID.

`OSMIUM_PROXY_BIN` overrides target/release/osmium-proxy; `NUTCRACKER_BIN`
the `nutcracker` on PATH. A missing one skips its tests, and fails them under
CI=true (or OSMIUM_REQUIRED=1 for osmium-proxy).
"""
import json
import os
import shutil
import signal
import socket
import tempfile
import time

import pytest

from support import servers

OSMIUM_PROXY_BIN = os.environ.get(
    "OSMIUM_PROXY_BIN", os.path.join(servers.ROOT, "target", "release", "osmium-proxy"))


def nutcracker_bin():
    return os.environ.get("NUTCRACKER_BIN") or shutil.which("nutcracker") or (
        "/usr/sbin/nutcracker" if os.path.exists("/usr/sbin/nutcracker") else None)


def require(kind):
    """The binary of proxy `kind`, or a skip (a failure under CI=true)."""
    if kind == "nutcracker":
        path = nutcracker_bin()
        why = "nutcracker is not installed (apt-get install nutcracker)"
        strict = os.environ.get("CI") == "true"
    else:
        path = OSMIUM_PROXY_BIN
        why = f"osmium-proxy not found at {path} (cargo build --release --workspace)"
        strict = os.environ.get("CI") == "true" or os.environ.get("OSMIUM_REQUIRED")
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    if strict:
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def pool_yaml(port, backends, names=True, weights=None, extra="", hash="md5"):
    """One pool named `cluster` on 127.0.0.1:`port` over `backends` (Server
    objects), ketama over `hash` (md5: nutcracker's fnv1a_64, its default, puts keys that
    differ in their last bytes next to each other on the continuum); servers named s0, s1, ... (so placement
    does not depend on their ports) unless names=False."""
    lines = [
        "cluster:",
        f"  listen: 127.0.0.1:{port}",
        f"  hash: {hash}",
        "  distribution: ketama",
        "  timeout: 2000",
        "  server_retry_timeout: 1000",
        "  server_failure_limit: 1",
    ]
    if extra:
        lines += ["  " + line for line in extra.strip().splitlines()]
    lines.append("  servers:")
    for i, b in enumerate(backends):
        weight = weights[i] if weights else 1
        name = f" s{i}" if names else ""
        lines.append(f"   - 127.0.0.1:{b.port}:{weight}{name}")
    return "\n".join(lines) + "\n"


def listen_moved(yaml, old, new):
    """`yaml` with a `listen:` line on 127.0.0.1:`old` moved to port `new`."""
    if old == new:
        return yaml
    lines = yaml.splitlines(keepends=True)
    for i, line in enumerate(lines):
        value = line.strip()
        if value.startswith("listen:") and value[7:].strip().strip("'\"") == f"127.0.0.1:{old}":
            lines[i] = line.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}", 1)
    return "".join(lines)


class Proxy:
    """nutcracker or osmium-proxy running the pool of `yaml` (whose listen
    port is `port`). If that port or the stats port was taken meanwhile,
    it starts again on new ones (servers.start_process; the `listen:` line
    rewritten): `self.port` is the port it listens on."""

    def __init__(self, kind, yaml, port):
        self.kind = kind
        binary = require(kind)
        self.dir = tempfile.mkdtemp(prefix=f"osmium-{kind}-")
        self.conf = os.path.join(self.dir, "pool.yml")
        nc_log = os.path.join(self.dir, "nutcracker.log") if kind == "nutcracker" else None

        def argv(p):
            with open(self.conf, "w") as f:
                f.write(listen_moved(yaml, port, p))
            # Both serve a stats port: each on its own free loopback port (the
            # default 0.0.0.0:22222 would be shared by every proxy of a run).
            self.stats_port = servers.free_port()
            cmd = [binary, "-c", self.conf, "-s", str(self.stats_port), "-a", "127.0.0.1"]
            if nc_log:
                cmd += ["-o", nc_log]
            self.cmd = cmd
            return cmd

        try:
            self.proc, self.port = servers.start_process(
                argv, name=kind, port=port, log_file=nc_log,
                stderr=os.path.join(self.dir, "stderr"))
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.pid = self.proc.pid
        servers.start_check(self.port)

    @property
    def address(self):
        return ("127.0.0.1", self.port)

    def stderr(self):
        with open(os.path.join(self.dir, "stderr"), errors="replace") as f:
            return f.read()

    def stats(self):
        """The stats port's JSON document (everything it sends)."""
        with socket.create_connection(("127.0.0.1", self.stats_port), timeout=10) as s:
            doc = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    return json.loads(doc)
                doc += chunk

    def reload(self):
        """osmium-proxy only: SIGHUP, then waits until its stats count one
        more reload applied (every pool object carries the count)."""
        assert self.kind == "osmium-proxy", "nutcracker does not reload"

        def reloads():
            pools = [v for v in self.stats().values() if isinstance(v, dict)]
            return pools[0]["reloads"]

        before = reloads()
        os.kill(self.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while reloads() <= before:
            assert time.monotonic() < deadline, f"no reload after SIGHUP: {self.stderr()}"
            time.sleep(0.02)

    def stop(self):
        servers.stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)
