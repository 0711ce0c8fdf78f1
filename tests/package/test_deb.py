"""The Debian package, as an operator gets it: installed with
`apt-get install ./target/debian/osmium_*.deb`, its files in place, and its
systemd unit's ExecStart (read from the installed unit) run as systemd would
run it, with NOTIFY_SOCKET pointing at a datagram socket this test reads:
READY=1 once the port accepts, RELOADING=1 (with MONOTONIC_USEC=) then
READY=1 on SIGHUP; then its ExecReload (`osmium-tool upgrade $MAINPID`, as
`systemctl reload osmium` and a package upgrade run it) upgrades the binary
in place: exit 0, the same pid, `stats` upgrades 1, a key set before still
there, RELOADING=1 then READY=1 and no STOPPING=1; STOPPING=1 on SIGTERM.
The package is purged at the end.

There is no systemd as PID 1 here, so the unit is not started by systemctl:
its ExecStart line is run directly, as root, and the server drops to the
conf's `-u osmium`. The package is built by scripts/build-deb.sh (the
"Debian package" step of scripts/test-all.sh). Without the package, apt-get
or root, the test is skipped, and fails under CI=true.
"""
import glob
import gzip
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from support.servers import ROOT, free_port

UNIT_DIRS = ("/lib/systemd/system", "/usr/lib/systemd/system")
BINARIES = ("osmium", "osmium-proxy", "osmium-bench", "osmium-tool")
MAN_PAGES = ("osmium", "osmium-proxy", "osmium-bench", "osmium-tool")


def _need(what):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} (CI=true: a failure)", pytrace=False)
    pytest.skip(what)


def _package():
    debs = sorted(glob.glob(os.path.join(ROOT, "target", "debian", "osmium_*.deb")),
                  key=os.path.getmtime)
    if not debs:
        _need("no target/debian/osmium_*.deb: run `bash scripts/build-deb.sh` "
              "(needs cargo-deb and a release build)")
    if os.geteuid() != 0:
        _need("installing the package needs root")
    if shutil.which("apt-get") is None:
        _need("apt-get is not available")
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "osmium"],
                               capture_output=True, text=True).stdout
    if "ok installed" in installed:
        # This test purges the package at its end: never someone's own.
        _need("the osmium package is installed on this machine already")
    return debs[-1]


def _apt(*args):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", *args], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"apt-get {' '.join(args)}: {r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture
def installed():
    deb = _package()
    _apt("install", "-y", "--no-install-recommends", deb)
    try:
        yield deb
    finally:
        _apt("purge", "-y", "osmium")
        for b in BINARIES:
            assert not os.path.exists(f"/usr/bin/{b}"), f"/usr/bin/{b} left after the purge"
        assert not os.path.exists("/etc/osmium/osmium.conf"), "the conf left after the purge"


def _unit_path():
    for d in UNIT_DIRS:
        p = os.path.join(d, "osmium.service")
        if os.path.isfile(p):
            return p
    raise AssertionError(f"osmium.service in none of {UNIT_DIRS}")


def _unit_value(unit_text, key):
    for line in unit_text.splitlines():
        if line.startswith(key + "="):
            return line[len(key) + 1:]
    raise AssertionError(f"no {key}= in the unit")


def _notice(sock):
    data = sock.recv(4096)
    return data.decode()


def test_the_package_installs_and_its_unit_runs_the_server(installed):
    # Files in place.
    for b in BINARIES:
        assert os.access(f"/usr/bin/{b}", os.X_OK), f"/usr/bin/{b}"
    unit = open(_unit_path()).read()
    conf = open("/etc/osmium/osmium.conf").read()
    assert "-u osmium" in conf.splitlines()
    for b in MAN_PAGES:
        page = f"/usr/share/man/man1/{b}.1.gz"
        with gzip.open(page, "rt") as f:
            text = f.read()
        assert text.startswith(".ie") or ".TH" in text, f"{page} is not a man page"
        assert b in text
    if shutil.which("man"):
        r = subprocess.run(["man", "-l", "/usr/share/man/man1/osmium.1.gz"],
                           capture_output=True, text=True, env=dict(os.environ, MANPAGER="cat",
                                                                     PAGER="cat"))
        assert r.returncode == 0 and "config-file" in r.stdout, r.stderr
    # README.md and the manual it points to (docs/*.md), links intact.
    assert os.path.isfile("/usr/share/doc/osmium/README.md")
    for doc in glob.glob(os.path.join(ROOT, "docs", "*.md")):
        shipped = os.path.join("/usr/share/doc/osmium/docs", os.path.basename(doc))
        assert os.path.isfile(shipped), f"{shipped} not installed"
    copyright_text = open("/usr/share/doc/osmium/copyright").read()
    assert "The osmium developers" in copyright_text
    assert "Redistribution and use in source and binary forms" in copyright_text
    assert subprocess.run(["getent", "passwd", "osmium"], capture_output=True).returncode == 0
    v = subprocess.run(["/usr/bin/osmium", "-V"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("osmium ") and "memcached 1.6.45 protocol" in v.stdout

    assert _unit_value(unit, "Type") == "notify"
    exec_start = shlex.split(_unit_value(unit, "ExecStart"))
    assert exec_start == ["/usr/bin/osmium", "--config-file", "/etc/osmium/osmium.conf"]

    # The unit's command, as systemd runs it (as root; osmium drops to the
    # conf's -u osmium), on a free port (options after the conf win) so
    # that a cache on 11211 here is left alone.
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="osmium-notify-")
    os.chmod(tmp, 0o755)
    path = os.path.join(tmp, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    os.chmod(path, 0o666)  # osmium writes to it once it is the osmium user
    sock.settimeout(15)
    env = dict(os.environ, NOTIFY_SOCKET=path)
    proc = subprocess.Popen(exec_start + ["-p", str(port), "-U", "0"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        assert _notice(sock).strip() == "READY=1"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"version\r\n")
            assert c.recv(100) == b"VERSION 1.6.45\r\n"
        uid = next(line.split()[1] for line in open(f"/proc/{proc.pid}/status")
                   if line.startswith("Uid:"))
        assert int(uid) == pwd.getpwnam("osmium").pw_uid, f"runs as uid {uid}"
        # The conf's -P, in /run/osmium (made by the postinst here, by
        # tmpfiles.d under systemd).
        with open("/run/osmium/osmium.pid") as f:
            assert int(f.read()) == proc.pid
        proc.send_signal(signal.SIGHUP)
        reloading = _notice(sock).split("\n")
        assert reloading[0] == "RELOADING=1", reloading
        assert any(f.startswith("MONOTONIC_USEC=") and int(f.split("=", 1)[1]) > 0
                   for f in reloading), reloading
        assert _notice(sock).strip() == "READY=1"
        # `systemctl reload osmium`: the unit's ExecReload, which systemd
        # runs with full privileges (`+`), $MAINPID the server's pid.
        exec_reload = _unit_value(unit, "ExecReload")
        assert exec_reload.startswith("+"), exec_reload
        reload_cmd = [str(proc.pid) if a == "$MAINPID" else a
                      for a in shlex.split(exec_reload[1:])]
        assert reload_cmd == ["/usr/bin/osmium-tool", "upgrade", str(proc.pid)]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"set kept 0 0 5\r\nvalue\r\n")
            assert c.recv(100) == b"STORED\r\n"
        r = subprocess.run(reload_cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
        assert f"(pid {proc.pid})" in r.stdout, r.stdout
        assert _notice(sock).split("\n")[0] == "RELOADING=1"
        assert _notice(sock).strip() == "READY=1"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"get kept\r\nstats\r\n")
            got = b""
            while not got.endswith(b"END\r\n") or got.count(b"END\r\n") < 2:
                data = c.recv(65536)
                assert data, got
                got += data
        text = got.decode()
        assert text.startswith("VALUE kept 0 5\r\nvalue\r\nEND\r\n"), text
        assert f"STAT pid {proc.pid}\r\n" in text and "STAT upgrades 1\r\n" in text, text
        with open("/run/osmium/osmium.pid") as f:
            assert int(f.read()) == proc.pid
        proc.send_signal(signal.SIGTERM)
        assert _notice(sock).strip() == "STOPPING=1"
        assert proc.wait(timeout=15) == 0, proc.stderr.read().decode(errors="replace")
        assert not os.path.exists("/run/osmium/osmium.pid"), "the pid file left at the stop"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
        shutil.rmtree(tmp, ignore_errors=True)
    err = proc.stderr.read().decode(errors="replace")
    assert "\x1b[" not in err, err
