#!/usr/bin/env python3
"""Print transcripts of conformance cases (a debugging aid; the suite itself is pytest).

  python3 tests/conformance/run.py [--target memcached|osmium|both|memcached-self] [--raw] [SUBSTRING...]

With one server (memcached, osmium) prints each step and its reply; with two,
prints the diff (or "same") per case, plus both transcripts on a difference.
"""
import argparse
import sys

import conformance_harness as H


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="memcached", choices=H.TARGETS)
    ap.add_argument("--raw", action="store_true", help="show replies before normalisation")
    ap.add_argument("names", nargs="*", help="run only cases whose name contains one of these")
    a = ap.parse_args()
    cases = [c for c in H.load_cases() if not a.names or any(n in c.name for n in a.names)]
    pool = H.Pool(a.target)
    labels = H.labels(a.target)
    bad = 0
    try:
        sleepers = H.run_cases_concurrently(pool, [c for c in cases if c.has_sleep and not c.skip])
        for c in cases:
            if c.skip:
                print(f"== {c.name}: SKIP ({c.skip})")
                continue
            res = sleepers.get(c.name) or H.run_case(pool, c)
            if isinstance(res, Exception):
                print(f"== {c.name}: ERROR {res}")
                bad += 1
                continue
            msg = None
            try:
                msg = H.check(c, a.target, res)
            except H.CaseError as e:
                msg = str(e)
            status = "" if len(res) == 1 else (" same" if not msg else " DIFFERENT")
            print(f"== {c.name}{status}")
            if len(res) == 1 or msg:
                for lab, r in zip(labels, res):
                    if len(res) > 1:
                        print(f" -- {lab}")
                    print(H.transcript(c, r, normalised=not a.raw))
            if msg:
                bad += 1
                print(msg)
    finally:
        pool.stop_all()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
