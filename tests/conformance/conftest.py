"""pytest wiring for the conformance suite (see README.md)."""
import os

import pytest

import conformance_harness as H
from support.tls import Certs


def pytest_addoption(parser):
    group = parser.getgroup("conformance")
    group.addoption("--target", action="store", default=None, choices=H.TARGETS,
                    help="conformance target: both (osmium vs memcached, default), "
                         "memcached-self (two memcached instances), memcached, osmium. "
                         "Env: CONFORMANCE_TARGET.")


def _target(config):
    t = None
    try:
        t = config.getoption("--target")
    except ValueError:  # option not registered (conftest not loaded at startup)
        pass
    t = t or os.environ.get("CONFORMANCE_TARGET") or "both"
    if t not in H.TARGETS:
        raise pytest.UsageError(f"CONFORMANCE_TARGET={t!r}: expected one of {H.TARGETS}")
    return t


def pytest_report_header(config):
    t = _target(config)
    line = f"conformance target: {t} ({' vs '.join(H.labels(t))})"
    if "memcached" in H.target_kinds(t):
        line += f"; memcached binary: {H.servers.MEMCACHED_BIN or 'MISSING'}"
    if "osmium" in H.target_kinds(t):
        missing = H.osmium_missing()
        line += f"; osmium binary: {H.servers.OSMIUM_BIN}" + (" (MISSING)" if missing else "")
    return line


def pytest_collection_modifyitems(config, items):
    config._conformance_selected = [it.callspec.params["case"] for it in items
                                    if hasattr(it, "callspec") and "case" in it.callspec.params
                                    and isinstance(it.callspec.params["case"], H.Case)]


class Session:
    """The servers of a run: one pool per transport (plain TCP, and TLS with
    certificates made for the run)."""

    def __init__(self, config, tmp_dir):
        self.target = _target(config)
        self.tmp_dir = tmp_dir
        self.pools = {}
        self.selected = getattr(config, "_conformance_selected", [])
        self._batch = {}

    def pool(self, transport):
        if transport not in self.pools:
            certs = Certs(self.tmp_dir) if transport == "tls" else None
            self.pools[transport] = H.Pool(self.target, certs)
        return self.pools[transport]

    def results(self, case, transport="tcp"):
        pool = self.pool(transport)
        if case.has_sleep:
            if transport not in self._batch:
                # Each case once (it is selected once per transport).
                unique = {c.name: c for c in self.selected}.values()
                sleepers = [c for c in unique if c.has_sleep and not self.skipped(c, transport)]
                self._batch[transport] = H.run_cases_concurrently(pool, sleepers)
            if case.name in self._batch[transport]:
                return self._batch[transport][case.name]
        return H.run_case(pool, case)

    def rerun(self, case, transport="tcp"):
        """Runs one case again, alone (a case that waits on the clock)."""
        return H.run_case(self.pool(transport), case)

    def skipped(self, case, transport="tcp"):
        if case.skip:
            return case.skip
        if case.skip_both and self.target == "both":
            return case.skip_both
        if transport == "tls" and case.uses_udp:
            return "UDP is plaintext with -Z, as in memcached"
        return None


@pytest.fixture(scope="session")
def conformance(request, tmp_path_factory):
    s = Session(request.config, tmp_path_factory.mktemp("conformance-tls"))
    yield s
    for pool in s.pools.values():
        pool.stop_all()
