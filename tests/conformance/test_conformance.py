"""Replay every case in cases/*.txt against memcached and osmium, over plain
TCP and over TLS (`-Z`); see README.md."""
import os

import pytest

import conformance_harness as H

CASES = H.load_cases()

# CONFORMANCE_TRANSPORTS=tcp (or tls) runs one only.
# How many more times a case that waits on the clock runs when the servers
# differ.
CLOCK_RERUNS = 2

TRANSPORTS = [t.strip() for t in os.environ.get("CONFORMANCE_TRANSPORTS", "tcp,tls").split(",")
              if t.strip()]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_exchange(case, transport, conformance):
    reason = conformance.skipped(case, transport)
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
    msg = H.check(case, conformance.target, conformance.results(case, transport))
    # memcached's clock can itself jump two seconds in one (see README.md,
    # "Time"): a case that waits on the clock gets two more runs, alone.
    reruns = CLOCK_RERUNS if case.has_sleep else 0
    while msg and reruns:
        reruns -= 1
        msg = H.check(case, conformance.target, conformance.rerun(case, transport))
    if msg:
        pytest.fail(msg, pytrace=False)
