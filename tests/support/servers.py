"""Start genuine memcached or osmium on a free loopback port, stop it by PID.

Shared by every Python suite (conformance, clients, benchmarks scripts).
Servers bind 127.0.0.1 only; each is stopped by the test that started it.

Which memcached (the oracle, genuine memcached 1.6.45; tests/oracle/README.md):
`MEMCACHED_BIN` if set, else the repository's build of the oracle
(`.oracle/memcached-1.6.45/memcached`, made by scripts/build-memcached.sh).
Without either, starting memcached skips the test (`require_memcached()`),
and under CI=true fails it: CI must always compare against the oracle.
"""
import os
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ORACLE_VERSION = "1.6.45"
ORACLE_BIN = os.path.join(ROOT, ".oracle", f"memcached-{ORACLE_VERSION}", "memcached")
OSMIUM_BIN = os.environ.get("OSMIUM_BIN", os.path.join(ROOT, "target", "release", "osmium"))


def _is_executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _memcached_bin():
    if os.environ.get("MEMCACHED_BIN"):
        return os.environ["MEMCACHED_BIN"]
    if _is_executable(ORACLE_BIN):
        return ORACLE_BIN
    return None


# The memcached binary, or None when there is none (see require_memcached()).
MEMCACHED_BIN = _memcached_bin()


def memcached_missing():
    """None if MEMCACHED_BIN can be started, else why not."""
    if MEMCACHED_BIN is None:
        return (f"the memcached {ORACLE_VERSION} oracle is not built: run "
                f"`bash scripts/build-memcached.sh` (it builds {ORACLE_BIN}) or set MEMCACHED_BIN")
    if not _is_executable(MEMCACHED_BIN):
        return f"MEMCACHED_BIN={MEMCACHED_BIN} is not an executable file"
    return None


def require_memcached():
    """Return MEMCACHED_BIN. Without a usable one: a pytest skip, or a failure
    under CI=true or when MEMCACHED_BIN names a file that is not there;
    outside pytest a RuntimeError."""
    why = memcached_missing()
    if why is None:
        return MEMCACHED_BIN
    fatal = os.environ.get("CI") == "true" or MEMCACHED_BIN is not None
    if "pytest" not in sys.modules:
        raise RuntimeError(why)
    import pytest
    if fatal:
        pytest.fail(why + (" (CI=true: a missing oracle is a failure)"
                           if MEMCACHED_BIN is None else ""), pytrace=False)
    pytest.skip(why)


def free_port(kind=socket.SOCK_STREAM):
    """A TCP (or, with SOCK_DGRAM, UDP) port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One running server process. `kind` is 'memcached' or 'osmium'.

    `env`, if given, is the complete environment of the server process
    (default: this process's environment), e.g. to point memcached's SASL
    library at a config directory with SASL_CONF_PATH.

    UDP is off (`-U 0`) unless udp_port is given: a port number, or "auto" for
    a free one; `udp_address` is then the UDP address. A `-U` in args is
    passed through as it is.
    """

    def __init__(self, kind, args=(), port=None, env=None, udp_port=None):
        self.kind = kind
        self.port = port or free_port()
        self.args = list(args)
        if udp_port == "auto":
            udp_port = free_port(socket.SOCK_DGRAM)
        self.udp_port = udp_port
        binary = require_memcached() if kind == "memcached" else OSMIUM_BIN
        udp_args = [] if "-U" in self.args else ["-U", str(udp_port or 0)]
        cmd = [binary, "-p", str(self.port)] + udp_args + ["-l", "127.0.0.1"] + self.args
        if os.geteuid() == 0 and "-u" not in self.args:
            cmd += ["-u", "root"]  # both servers refuse to run as root without -u
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env)
        self.pid = self.proc.pid
        self._wait_ready()

    def _wait_ready(self, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")
                raise RuntimeError(f"{self.cmd} exited with {self.proc.returncode}: {err}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{self.cmd} did not accept connections within {timeout}s")

    @property
    def address(self):
        return ("127.0.0.1", self.port)

    @property
    def udp_address(self):
        return ("127.0.0.1", self.udp_port) if self.udp_port else None

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start(kind, *args):
    return Server(kind, args)
