#!/bin/bash
# Server CPU per GET with hot keys on and off, measured at the same time
# (BENCHMARKS.md, "Hot keys"): on a shared, noisy machine two servers
# loaded over the same window see the same noise, where runs one after the
# other do not. Starts two osmium servers of the same binary, the second
# with `-o hotkeys_top=0` (the first with $ONARGS: e.g.
# `ONARGS="-o hotkeys_sample=1/8"`, or `-o hotkeys_top=0` for an A/A run),
# preloads both, then each round loads both at once, each with its own
# `osmium-bench load --addr --pid` (the order of the two alternating), and
# prints each server's CPU per request and the ratio on/off.
# usage: scripts/bench-hotkeys-cost.sh OSMIUM OSMIUM_BENCH ROUNDS DEPTH [THREADS]
set -u
DIR=$(mktemp -d)
OSM=$1; BENCH=$2; ROUNDS=$3; DEPTH=$4; T=${5:-2}
U=; [ "$(id -u)" = 0 ] && U="-u root"
P1=$((20000 + RANDOM % 20000)); P2=$((P1 + 1))
$OSM -p $P1 -U 0 -l 127.0.0.1 $U -t $T -m 1024 ${ONARGS:-} & ON=$!
$OSM -p $P2 -U 0 -l 127.0.0.1 $U -t $T -m 1024 -o hotkeys_top=0 & OFF=$!
trap 'kill $ON $OFF; rm -rf "$DIR"' EXIT
sleep 1
for p in $P1 $P2; do $BENCH load --addr 127.0.0.1:$p --duration 0.2 --warmup 0 >/dev/null 2>&1; done
for r in $(seq 1 $ROUNDS); do
  first=$P1; firstpid=$ON; firstout=$DIR/on.json; second=$P2; secondpid=$OFF; secondout=$DIR/off.json
  if [ $((r % 2)) = 0 ]; then
    first=$P2; firstpid=$OFF; firstout=$DIR/off.json; second=$P1; secondpid=$ON; secondout=$DIR/on.json
  fi
  $BENCH load --addr 127.0.0.1:$first --pid $firstpid --preload false --depth $DEPTH --duration 5 --warmup 1 --json > $firstout 2>/dev/null &
  A=$!
  $BENCH load --addr 127.0.0.1:$second --pid $secondpid --preload false --depth $DEPTH --duration 5 --warmup 1 --json > $secondout 2>/dev/null &
  B=$!
  wait $A $B
  DIR=$DIR R=$r python3 -c '
import json, os
on = json.load(open(os.environ["DIR"] + "/on.json"))[0]
off = json.load(open(os.environ["DIR"] + "/off.json"))[0]
c, o = "cpu_us_per_req", "ops_per_sec"
print("round %s on %.4f us/req (%.0f ops/s) off %.4f us/req (%.0f ops/s) ratio %.4f"
      % (os.environ["R"], on[c], on[o], off[c], off[o], on[c] / off[c]))' | tee -a $DIR/rounds
done
python3 -c '
import statistics, sys
r = [float(l.split()[-1]) for l in open(sys.argv[1])]
print("median ratio on/off %.4f over %d rounds" % (statistics.median(r), len(r)))' $DIR/rounds
