#!/bin/bash
# Server CPU per request split into user and system time, from
# /proc/<pid>/stat: starts one server on a free loopback port, preloads
# it with a 1 s `osmium-bench load`, then reads utime and stime around a
# 4 s run of the same load and divides by the requests served.
#
# Usage (from the repository root, after `cargo build --release --workspace`):
#   scripts/user_sys.sh osmium|floor|memcached [load options...]
#   e.g. scripts/user_sys.sh floor --protocol binary --depth 16
set -euo pipefail
kind=$1
shift
bench=target/release/osmium-bench
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
case $kind in
  floor) $bench floor -p "$port" >/dev/null 2>&1 & ;;
  osmium) target/release/osmium -u root -t 1 -m 1024 -U 0 -p "$port" -l 127.0.0.1 >/dev/null 2>&1 & ;;
  memcached) /usr/bin/memcached -u root -t 1 -m 1024 -U 0 -p "$port" -l 127.0.0.1 >/dev/null 2>&1 & ;;
  *) echo "unknown server $kind" >&2; exit 2 ;;
esac
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
sleep 0.5
$bench load --addr "127.0.0.1:$port" --duration 1 "$@" >/dev/null
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
out=$($bench load --addr "127.0.0.1:$port" --preload false --duration 4 --warmup 0 "$@" | tail -1)
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
n=$(echo "$out" | sed -E 's/.*of ([0-9]+) gets.*/\1/')
hz=$(getconf CLK_TCK)
python3 -c "
u = ($u1 - $u0) / $hz * 1e6 / $n
s = ($s1 - $s0) / $hz * 1e6 / $n
print(f'$kind: user {u:.3f} sys {s:.3f} total {u + s:.3f} us/req over $n gets')"
