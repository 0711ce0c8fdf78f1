#!/usr/bin/env python3
"""CPU an idle server takes: starts each server given (osmium and memcached,
`-t 1 -m 64`, a free loopback port), opens CONNS idle client connections to
each (a `version` round trip on every one, so each is accepted and served
once), waits 2 s, then reads the servers' CPU time (utime + stime from
/proc/PID/stat) over SECONDS and prints it as a share of one core.

    python3 scripts/idle-cpu.py [--conns 1000] [--seconds 60] NAME=BINARY ...

e.g. `osmium=target/release/osmium memcached=.oracle/memcached-1.6.45/memcached`.
All servers run at once (each is measured from its own /proc entry).
"""
import argparse, os, resource, socket, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument('--conns', type=int, default=1000)
ap.add_argument('--seconds', type=float, default=60)
ap.add_argument('servers', nargs='+')
a = ap.parse_args()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
tick = os.sysconf('SC_CLK_TCK')

def free_port():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close(); return p

def cpu(pid):
    f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

procs, conns = [], []
for spec in a.servers:
    name, binary = spec.split('=', 1)
    port = free_port()
    p = subprocess.Popen([binary, '-p', str(port), '-U', '0', '-l', '127.0.0.1', '-t', '1',
                          '-m', '64', '-c', str(a.conns + 100), '-u', 'root'],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(('127.0.0.1', port), timeout=1).close(); break
        except OSError:
            time.sleep(0.05)
    procs.append((name, p))
    for _ in range(a.conns):
        c = socket.create_connection(('127.0.0.1', port), timeout=5)
        c.sendall(b'version\r\n')
        assert c.recv(100).startswith(b'VERSION')
        conns.append(c)
time.sleep(2)
start = {name: cpu(p.pid) for name, p in procs}
t0 = time.monotonic()
time.sleep(a.seconds)
wall = time.monotonic() - t0
for name, p in procs:
    used = cpu(p.pid) - start[name]
    print(f'{name}: {a.conns} idle connections, {used:.3f} s CPU in {wall:.1f} s = '
          f'{100 * used / wall:.3f} % of a core')
for c in conns:
    c.close()
for _, p in procs:
    p.kill(); p.wait()
