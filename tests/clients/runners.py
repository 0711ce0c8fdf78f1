"""Running another language's client-library suite from pytest.

tests/clients/test_go.py, test_java.py and test_node.py start a server of each
kind (the `server` fixture in conftest.py), then run the language's own test
runner once per server kind with the address in MEMCACHED_SERVERS, and assert
that it exits 0, showing the runner's output when it does not.

A missing toolchain (go, mvn/java, node/npm) skips those tests, except under
CI=true, where it is an error: CI must run every suite.
"""
import os
import shutil
import subprocess
import time

import pytest

CLIENTS_DIR = os.path.dirname(os.path.abspath(__file__))

# Output beyond this many characters is cut from the middle in failure reports.
MAX_REPORT = 60_000


def require_tools(*names):
    """The full paths of the named executables; skip (fail under CI) if any is missing."""
    paths, missing = [], []
    for name in names:
        path = shutil.which(name)
        if path:
            paths.append(path)
        else:
            missing.append(name)
    if missing:
        msg = f"toolchain missing: {', '.join(missing)} not on PATH"
        if os.environ.get("CI") == "true":
            pytest.fail(msg + " (CI=true: every client suite must run)")
        pytest.skip(msg)
    return paths


def _clip(text):
    if len(text) <= MAX_REPORT:
        return text
    half = MAX_REPORT // 2
    return text[:half] + f"\n[... {len(text) - MAX_REPORT} characters cut ...]\n" + text[-half:]


def run(cmd, cwd, what, env=None, timeout=600):
    """Run `cmd` in `cwd`, output captured; fail the test with that output unless it exits 0.
    Returns the combined output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        pytest.fail(f"{what}: `{' '.join(cmd)}` timed out after {timeout}s\n"
                    f"--- output ---\n{_clip(out)}", pytrace=False)
    out = proc.stdout.decode(errors="replace")
    took = time.monotonic() - start
    if proc.returncode != 0:
        pytest.fail(f"{what}: `{' '.join(cmd)}` exited {proc.returncode} after {took:.1f}s "
                    f"(cwd {cwd}, env {env or {}})\n--- output ---\n{_clip(out)}",
                    pytrace=False)
    print(f"{what}: ok in {took:.1f}s")
    return out


def server_env(server):
    """What a language suite is told about the server it runs against."""
    host, port = server.address
    return {"MEMCACHED_SERVERS": f"{host}:{port}", "MEMCACHED_KIND": server.kind}


# Credentials of the one user of the SASL servers (binary protocol, PLAIN).
SASL_USER = "osmiumtest"
SASL_PASSWORD = "s3cret-pw"


class SaslServerSlot:
    """A SASL server of one kind, or the reason it could not be started (osmium
    without SASL support yet, a memcached built without SASL, ...). The language suite's
    SASL cases fail with that reason; its other cases still run."""

    def __init__(self, kind):
        from support.sasl import start_sasl_server
        self.kind = kind
        self.server = None
        self.error = None
        try:
            self.server = start_sasl_server(kind, SASL_USER, SASL_PASSWORD)
        except Exception as e:  # reported through the suite's SASL cases
            self.error = f"{type(e).__name__}: {e}".replace("\n", " ")

    def env(self):
        if self.server is None:
            return {"MEMCACHED_SASL_ERROR": self.error}
        host, port = self.server.address
        return {"MEMCACHED_SASL_SERVERS": f"{host}:{port}", "MEMCACHED_SASL_USER": SASL_USER,
                "MEMCACHED_SASL_PASSWORD": SASL_PASSWORD}

    def stop(self):
        if self.server is not None:
            self.server.stop()
