"""Start genuine memcached or osmium on a free loopback port, stop it by PID.

Shared by every Python suite (conformance, clients, cluster, TLS). Servers
bind 127.0.0.1 only; each is stopped by the test that started it.

Every process a suite starts on a port goes through `start_process`, the
Python side of the `osmium-test-harness` crate: `free_port()` reserves the
TCP port it returns (a connection on it left in TIME_WAIT: for about a
minute no other bind(0) or outgoing connection gets it, while a server
setting SO_REUSEADDR, as memcached, nutcracker, osmium and osmium-proxy do,
binds it); a process that exits before listening because its address was in
use is started again on another port; a start is proven by that process
holding a listening socket on the port (/proc), not by a connect that
another test's server could answer.

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


# Ports the next free_port() calls return first: how a test of the harness
# hands a start a port it holds itself (force_next_port).
_FORCED_PORTS = []


def force_next_port(port):
    """Make the next free_port() return `port`, once."""
    _FORCED_PORTS.append(port)


def _reserve_port():
    """Bind, connect, accept, close the accepted side first: that side
    holds the port in TIME_WAIT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as lsn:
        lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsn.bind(("127.0.0.1", 0))
        lsn.listen(1)
        port = lsn.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = lsn.accept()
            accepted.close()
            client.settimeout(1.0)
            try:
                client.recv(1)  # the accepted side's FIN: ours is the passive close
            except OSError:
                pass
    return port


def free_port(kind=socket.SOCK_STREAM):
    """A TCP port on 127.0.0.1, free and reserved for about a minute (module
    comment); with SOCK_DGRAM, a UDP port that was free a moment ago."""
    if _FORCED_PORTS:
        return _FORCED_PORTS.pop(0)
    if kind == socket.SOCK_STREAM:
        return _reserve_port()
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listens_on(pid, port):
    """Whether process `pid` holds a listening IPv4 TCP socket on `port`."""
    try:
        with open("/proc/net/tcp") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return False
    inodes = set()
    for row in rows:
        f = row.split()
        if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return False
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                return True
        except OSError:
            pass
    return False


def says_address_in_use(text):
    """Whether a server's message says its address was taken: memcached,
    nutcracker, osmium and osmium-proxy all say "Address already in use"."""
    text = text.lower()
    return any(s in text for s in ("already in use", "address in use", "eaddrinuse",
                                   "os error 98"))


# How many starts start_process tries (the last start's count: last_attempts).
ATTEMPTS = 5
last_attempts = 0


def start_process(argv_for_port, name=None, port=None, same_port=False, log_file=None,
                  env=None, stderr=None, attempts=ATTEMPTS, timeout=10.0):
    """Start `argv_for_port(port)` and return (Popen, port) once that process
    listens on the port. The first port is `port` (default: a free one); a
    process that exits saying its address was in use (its stderr, or
    `log_file` where it logs) is started again on a new free port (on
    `port` again, 200 ms later, with same_port), up to `attempts` times. Any
    other exit, or no listener within `timeout`, raises RuntimeError with
    what it said.

    stdin and stdout are /dev/null; stderr is piped unless `stderr` (a
    file path) is given, where it is written instead."""
    global last_attempts
    tried = []
    for attempt in range(1, attempts + 1):
        p = port if port is not None and (attempt == 1 or same_port) else free_port()
        argv = argv_for_port(p)
        label = name or os.path.basename(str(argv[0]))
        if log_file:
            try:
                os.unlink(log_file)
            except OSError:
                pass
        err_to = open(stderr, "wb") if stderr else subprocess.PIPE
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err_to, env=env)
        finally:
            if stderr:
                err_to.close()
        deadline = time.time() + timeout
        while proc.poll() is None and not listens_on(proc.pid, p):
            if time.time() > deadline:
                stop_process(proc)
                raise RuntimeError(f"{label} {argv} did not listen on port {p} within "
                                   f"{timeout}s: {_said(proc, stderr, log_file)}")
            time.sleep(0.01)
        if proc.poll() is None:
            last_attempts = attempt
            return proc, p
        said = _said(proc, stderr, log_file)
        if said.strip() and not says_address_in_use(said):
            raise RuntimeError(f"{label} {argv} exited with {proc.returncode}: {said}")
        tried.append(f"{p}: exit {proc.returncode}: {said.strip()}")
        if same_port:
            time.sleep(0.2)
    raise RuntimeError(f"{label} did not start in {attempts} attempts: " + "; ".join(tried))


def start_check(port):
    """One connection opened and closed once a process listens: the
    readiness check the starters always made, which tests counting
    connections (total_connections, client_eof) include."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        pass


def _said(proc, stderr_path, log_file):
    """What an exited (or killed) process wrote to stderr and its log."""
    said = ""
    if proc.stderr:
        said += proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    for path in (stderr_path, log_file):
        if path:
            try:
                with open(path, errors="replace") as f:
                    said += f.read()
            except OSError:
                pass
    return said


def stop_process(proc, timeout=5):
    """Stop `proc` by its PID: SIGTERM, then SIGKILL after `timeout` s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


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
        self.args = list(args)
        self.udp_port = udp_port
        binary = require_memcached() if kind == "memcached" else OSMIUM_BIN

        def argv(p):
            if udp_port == "auto":  # a new one at each attempt, as the TCP port
                self.udp_port = free_port(socket.SOCK_DGRAM)
            udp_args = [] if "-U" in self.args else ["-U", str(self.udp_port or 0)]
            cmd = [binary, "-p", str(p)] + udp_args + ["-l", "127.0.0.1"] + self.args
            if os.geteuid() == 0 and "-u" not in self.args:
                cmd += ["-u", "root"]  # both servers refuse to run as root without -u
            self.cmd = cmd
            return cmd

        # A port given by the caller is the point (a restart on it, a ring
        # naming it): tried again there; otherwise a new one on a collision.
        self.proc, self.port = start_process(argv, name=kind, port=port, same_port=bool(port),
                                             env=env)
        self.pid = self.proc.pid
        start_check(self.port)

    @property
    def address(self):
        return ("127.0.0.1", self.port)

    @property
    def udp_address(self):
        return ("127.0.0.1", self.udp_port) if self.udp_port else None

    def stop(self):
        stop_process(self.proc)
        if self.proc.stderr:
            self.proc.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start(kind, *args):
    return Server(kind, args)
