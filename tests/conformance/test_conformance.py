"""Replay every case in cases/*.txt against memcached and osmium; see README.md."""
import pytest

import conformance_harness as H

CASES = H.load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_exchange(case, conformance):
    reason = conformance.skipped(case)
    if reason:
        pytest.skip(f"{case.name}: {reason}")
    if "memcached" in H.target_kinds(conformance.target):
        H.servers.require_memcached()
    if "osmium" in H.target_kinds(conformance.target):
        missing = H.osmium_missing()
        if missing:
            pytest.fail(f"osmium binary not found or not executable at {missing}: build it "
                        f"(cargo build --release --workspace) or set OSMIUM_BIN; to validate the cases against "
                        f"memcached alone use CONFORMANCE_TARGET=memcached-self", pytrace=False)
    msg = H.check(case, conformance.target, conformance.results(case))
    if msg:
        pytest.fail(msg, pytrace=False)
