#!/usr/bin/env python3
"""Items a cache holds at the same -m when its values are real files.

A thin front to `osmium-bench density` (crates/bench/src/density.rs, the
one implementation): the corpus of this machine's files, the paced fill of
osmium with `-o compression=cold`, without its dictionaries
(`nodicts`), with `off`, and memcached 1.6.45, the
byte-for-byte read-back, and the table of items held (with --flash SIZE,
items per flash GB too). See crates/bench/README.md, "density".

usage: density-corpus.py OSMIUM [--memcached BIN] [-m MB] [--factor F]
       [--threads T] [--seed S] [--rate MIB_PER_S] [--only cold,nodicts,off,memcached]
       [--flash SIZE] [--phases replay,gets,sets] [--json]

osmium-bench is taken from OSMIUM's directory (target/release holds both
after `cargo build --release`).
"""

import argparse
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("osmium")
    ap.add_argument("--memcached", default=os.environ.get("MEMCACHED_BIN"))
    ap.add_argument("-m", type=int, default=256)
    ap.add_argument("--factor", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=40,
                    help="MiB of values a second the fill sends at most (0: no limit)")
    ap.add_argument("--only", help="comma-separated: cold,nodicts,off,memcached")
    ap.add_argument("--flash", help="a flash file of this size for every server (e.g. 1G)")
    ap.add_argument("--phases", help="comma-separated: replay,gets,sets (see crates/bench/README.md)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    bench = os.path.join(os.path.dirname(os.path.abspath(a.osmium)), "osmium-bench")
    if not os.path.exists(bench):
        sys.exit(f"{bench}: not found (cargo build --release builds it beside osmium)")
    runs = a.only or ("cold,off,memcached" if a.memcached else "cold,off")
    cmd = [bench, "density", "--osmium", a.osmium, "-m", str(a.m), "--factor", str(a.factor),
           "--threads", str(a.threads), "--seed", str(a.seed), "--rate", str(a.rate), "--runs", runs]
    if a.memcached:
        cmd += ["--memcached", a.memcached]
    if a.flash:
        cmd += ["--flash", a.flash]
    if a.phases:
        cmd += ["--phases", a.phases]
    if a.json:
        cmd.append("--json")
    os.execv(bench, cmd)


if __name__ == "__main__":
    main()
