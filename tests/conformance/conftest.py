"""pytest wiring for the conformance suite (see README.md)."""
import os

import pytest

import conformance_harness as H


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
    def __init__(self, config):
        self.target = _target(config)
        self.pool = H.Pool(self.target)
        self.selected = getattr(config, "_conformance_selected", [])
        self._batch = None

    def results(self, case):
        if case.has_sleep:
            if self._batch is None:
                sleepers = [c for c in self.selected if c.has_sleep and not self.skipped(c)]
                self._batch = H.run_cases_concurrently(self.pool, sleepers)
            if case.name in self._batch:
                return self._batch[case.name]
        return H.run_case(self.pool, case)

    def skipped(self, case):
        if case.skip:
            return case.skip
        if case.skip_both and self.target == "both":
            return case.skip_both
        return None


@pytest.fixture(scope="session")
def conformance(request):
    s = Session(request.config)
    yield s
    s.pool.stop_all()
