"""The Debian package's maintainer scripts as dpkg runs them on an upgrade,
read from the built package (`dpkg-deb -e target/debian/osmium_*.deb`):
an upgrade of the package (`postinst configure OLD-VERSION`) reloads a
server that runs (`deb-systemd-invoke reload osmium.service`, after the
unit was loaded again: its ExecReload is `osmium-tool upgrade $MAINPID`,
the binary upgraded in place) instead of restarting it, falls back to a
restart when the reload fails (the in-place upgrade was refused), leaves a
stopped server to the unit's start, and the old package's prerm does not
stop the server on an upgrade.

There is no systemd as PID 1 here: the scripts run with `sh` against fake
`systemctl`, `deb-systemd-invoke`, `deb-systemd-helper`, `systemd-tmpfiles`,
`getent`, `addgroup`, `adduser` and `install` first on PATH, each logging
its arguments, and with `/run/systemd/system` (the test of "systemd runs")
replaced by a directory of the test's. No root needed; nothing on the
machine is changed. Without the package the test is skipped (fails under
CI=true).
"""
import glob
import os
import subprocess

import pytest

from support.servers import ROOT

FAKES = ("systemctl", "deb-systemd-invoke", "deb-systemd-helper", "systemd-tmpfiles",
         "getent", "addgroup", "adduser", "install")

# Each fake logs "NAME ARGS..." and exits 0, except `systemctl is-active`
# (FAKE_ACTIVE=1: active) and `deb-systemd-invoke reload` (FAKE_RELOAD status).
FAKE = """#!/bin/sh
echo "$(basename "$0") $*" >> "$FAKE_LOG"
case "$(basename "$0") $*" in
    "systemctl --quiet is-active"*) [ "$FAKE_ACTIVE" = 1 ] || exit 3 ;;
    "deb-systemd-invoke reload"*) exit "${FAKE_RELOAD:-0}" ;;
esac
exit 0
"""


def _package():
    debs = sorted(glob.glob(os.path.join(ROOT, "target", "debian", "osmium_*.deb")),
                  key=os.path.getmtime)
    if not debs:
        if os.environ.get("CI") == "true":
            pytest.fail("no target/debian/osmium_*.deb (CI=true: a failure)", pytrace=False)
        pytest.skip("no target/debian/osmium_*.deb: run `bash scripts/build-deb.sh`")
    return debs[-1]


@pytest.fixture
def scripts(tmp_path):
    control = tmp_path / "control"
    subprocess.run(["dpkg-deb", "-e", _package(), str(control)], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in FAKES:
        fake = bin_dir / name
        fake.write_text(FAKE)
        fake.chmod(0o755)
    systemd_dir = tmp_path / "run-systemd-system"
    systemd_dir.mkdir()

    def run(script, *args, active=True, reload_status=0):
        text = (control / script).read_text().replace("/run/systemd/system", str(systemd_dir))
        log = tmp_path / "log"
        log.write_text("")
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_LOG=str(log),
                   FAKE_ACTIVE="1" if active else "0", FAKE_RELOAD=str(reload_status))
        r = subprocess.run(["sh", "-c", text, script, *args], env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, f"{script} {args}: {r.stdout}\n{r.stderr}"
        return log.read_text().splitlines(), r.stderr

    return run


def _index(calls, prefix):
    found = [i for i, c in enumerate(calls) if c.startswith(prefix)]
    assert found, f"no {prefix!r} in {calls}"
    return found[0]


def test_an_upgrade_reloads_a_running_server_once_the_unit_is_loaded_again(scripts):
    calls, _ = scripts("postinst", "configure", "0.0.9-1")
    assert "deb-systemd-invoke reload osmium.service" in calls, calls
    assert _index(calls, "systemctl --system daemon-reload") < _index(
        calls, "deb-systemd-invoke reload"), calls
    assert not any(c.startswith("deb-systemd-invoke restart") for c in calls), calls
    assert not any(c.startswith("deb-systemd-invoke stop") for c in calls), calls


def test_a_refused_in_place_upgrade_falls_back_to_a_restart(scripts):
    calls, err = scripts("postinst", "configure", "0.0.9-1", reload_status=1)
    assert _index(calls, "deb-systemd-invoke reload osmium.service") < _index(
        calls, "deb-systemd-invoke restart osmium.service"), calls
    assert "in-place upgrade was refused" in err


def test_a_stopped_server_is_not_reloaded(scripts):
    calls, _ = scripts("postinst", "configure", "0.0.9-1", active=False)
    assert not any(c.startswith("deb-systemd-invoke reload") for c in calls), calls
    assert not any(c.startswith("deb-systemd-invoke restart") for c in calls), calls


def test_a_first_install_starts_the_unit_and_reloads_nothing(scripts):
    calls, _ = scripts("postinst", "configure")
    assert "deb-systemd-invoke start osmium.service" in calls, calls
    assert not any(c.startswith("deb-systemd-invoke reload") for c in calls), calls
    assert not any(c.startswith("systemctl --quiet is-active") for c in calls), calls


def test_the_prerm_stops_the_server_on_a_removal_only(scripts):
    calls, _ = scripts("prerm", "upgrade", "0.2.0-1")
    assert not any(c.startswith("deb-systemd-invoke stop") for c in calls), calls
    calls, _ = scripts("prerm", "remove")
    assert "deb-systemd-invoke stop osmium.service" in calls, calls
