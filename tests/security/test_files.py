"""Attacks on the files a server started as root writes: the `-P` pid file
and the config file's `logfile`, in a directory the service's group may
write (as /run/osmium was, 0775 root:osmium). A member of that group
plants a symbolic link at the pid file's temporary name, at its final
name, or at the log file, pointing at a file of root's: the file must be
untouched. And a start that fails leaves no pid file behind.

The pid file attacks run against memcached 1.6.45 too (it writes its pid
file once it is the `-u` user, and has no log file). They need root (to
start as root and drop to `-u nobody`); without it they are skipped.
"""
import os
import pwd
import shutil
import subprocess
import tempfile
import time

import pytest

from support import servers

PRECIOUS = b"root:precious:0:0\n"


@pytest.fixture
def nobody():
    if os.geteuid() != 0:
        pytest.skip("needs root: the attacks are on a server started as root that drops to -u")
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody to drop to")


@pytest.fixture
def group_dir(nobody):
    """A directory root owns and nobody's group may write (not sticky)."""
    d = tempfile.mkdtemp(prefix="osmium-security-files-")
    os.chown(d, 0, nobody.pw_gid)
    os.chmod(d, 0o775)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def target():
    """A file of root's, the links' target."""
    fd, path = tempfile.mkstemp(prefix="osmium-security-precious-")
    os.write(fd, PRECIOUS)
    os.close(fd)
    os.chmod(path, 0o644)
    yield path
    os.unlink(path)


def binary(kind):
    return servers.require_memcached() if kind == "memcached" else servers.OSMIUM_BIN


def start(kind, *args):
    """`kind` started as root with `args` on a free port (it drops to the
    `-u` in args)."""
    def argv(port):
        return [binary(kind), "-p", str(port), "-U", "0", "-l", "127.0.0.1", *args]
    proc, _ = servers.start_process(argv, name=kind)
    return proc


def run_to_exit(argv, timeout=10):
    """Runs a server expected to refuse to start: (exit status, stderr)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        servers.stop_process(proc)
        pytest.fail(f"{argv} started")
    return proc.returncode, err.decode(errors="replace")


def wait_for_file(path, proc):
    deadline = time.time() + 10
    while not (os.path.isfile(path) and not os.path.islink(path)):
        assert proc.poll() is None, "the server exited"
        assert time.time() < deadline, f"no {path}"
        time.sleep(0.01)


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("planted", ["tmp", "final"])
def test_attack_link_at_the_pid_file(kind, nobody, group_dir, target, planted):
    pidfile = os.path.join(group_dir, "server.pid")
    link = pidfile + ".tmp" if planted == "tmp" else pidfile
    os.symlink(target, link)
    proc = start(kind, "-u", "nobody", "-P", pidfile)
    try:
        if kind == "osmium" or planted == "final":
            # memcached opens the temporary name as nobody, through the
            # link: refused (the target is root's), so no pid file.
            wait_for_file(pidfile, proc)
            assert int(read(pidfile)) == proc.pid
            assert os.stat(pidfile).st_uid == nobody.pw_uid, "written as the -u user"
        assert read(target) == PRECIOUS
    finally:
        servers.stop_process(proc)
    assert read(target) == PRECIOUS
    if kind == "osmium":
        assert not os.path.lexists(pidfile), "removed at the stop"
        assert not os.path.lexists(pidfile + ".tmp")


def test_attack_link_at_the_log_file(nobody, group_dir, target):
    logfile = os.path.join(group_dir, "osmium.log")
    os.symlink(target, logfile)
    conf = os.path.join(group_dir, "osmium.conf")
    with open(conf, "w") as f:
        f.write(f"-vv\nlogfile {logfile}\n")
    # As nobody the link leads to a file nobody may not write; root (-u
    # root) does not follow a link there at all. Either way: no start,
    # the file untouched.
    for user in ("nobody", "root"):
        code, err = run_to_exit([servers.OSMIUM_BIN, "-p", str(servers.free_port()), "-U", "0",
                                 "-l", "127.0.0.1", "--config-file", conf, "-u", user])
        assert code == 71, err
        assert f"Could not open the log file {logfile}" in err, err
        assert read(target) == PRECIOUS
    # Without the link the log is written, as nobody.
    os.unlink(logfile)
    proc = start("osmium", "--config-file", conf, "-u", "nobody")
    try:
        wait_for_file(logfile, proc)
        assert os.stat(logfile).st_uid == nobody.pw_uid
    finally:
        servers.stop_process(proc)
    assert b"server listening" in read(logfile)


def test_attack_failed_start_leaves_no_pid_file(kind, nobody, group_dir):
    pidfile = os.path.join(group_dir, "server.pid")
    code, err = run_to_exit([binary(kind), "-p", str(servers.free_port()), "-U", "0",
                             "-l", "127.0.0.1", "-u", "no-such-user-osmium", "-P", pidfile])
    assert code == 67, code  # EX_NOUSER, as memcached
    assert "can't find the user no-such-user-osmium" in err, err
    assert os.listdir(group_dir) == [], "a pid file left by a failed start"
    if kind == "osmium":
        # Failing after the listeners are bound (a memory file in a
        # directory that does not exist): no pid file either.
        code, err = run_to_exit([servers.OSMIUM_BIN, "-p", str(servers.free_port()), "-U", "0",
                                 "-l", "127.0.0.1", "-u", "nobody", "-P", pidfile,
                                 "-e", os.path.join(group_dir, "missing", "memory")])
        assert code != 0, err
        assert os.listdir(group_dir) == [], "a pid file left by a failed start"
