#!/usr/bin/env python3
"""Closed loop at N connections: one server's syscalls, context switches and
task-clock per GET (perf stat over a 3 s window of osmium-bench load), and
the GETs/s.  closed-loop-syscalls.py NAME BINARY CONNS [pin] [server args...]
(pin: the server on CPU 0, the generator on CPU 1)."""
import os, socket, subprocess, sys, time, re
name, binary, conns = sys.argv[1:4]; rest = sys.argv[4:]
pin = bool(rest and rest[0] == 'pin'); extra = rest[1:] if pin else rest
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "osmium-bench")
def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
p = port()
pre = ['taskset', '-c', '0'] if pin else []
srv = subprocess.Popen(pre + [binary, '-p', str(p), '-U', '0', '-l', '127.0.0.1', '-m', '1024', '-t', '1', '-u', 'root'] + extra,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.5)
def stat(key):
    s = socket.create_connection(("127.0.0.1", p)); s.sendall(b"stats\r\n"); b = b""
    while not b.endswith(b"END\r\n"): b += s.recv(65536)
    s.close(); return int(re.search(rb"STAT " + key + rb" (\d+)", b).group(1))
gpre = ['taskset', '-c', '1'] if pin else []
load = subprocess.Popen(gpre + [BENCH, 'load', '--addr', f'127.0.0.1:{p}', '--yes', '--duration', '8', '--warmup', '1',
                         '--conns', conns, '--key-prefix', '', '--value-size', '64'],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
time.sleep(4)
events = 'raw_syscalls:sys_enter,context-switches,task-clock,' + ','.join(
    f'syscalls:sys_enter_{n}' for n in ['epoll_wait', 'epoll_pwait', 'read', 'recvfrom', 'recvmsg', 'write', 'sendto', 'sendmsg', 'writev', 'futex', 'epoll_ctl'])
g0 = stat(b'cmd_get'); t0 = time.time()
perf = subprocess.run(['perf', 'stat', '-x', ',', '-e', events, '-p', str(srv.pid), 'sleep', '3'], capture_output=True, text=True)
g1 = stat(b'cmd_get'); t1 = time.time()
out, _ = load.communicate(timeout=60); srv.kill(); srv.wait()
n = g1 - g0 - 1
print(f"{name} conns {conns} {'pinned' if pin else 'unpinned'}: {n} gets in the window, {n/(t1-t0):.0f}/s")
for line in perf.stderr.splitlines():
    f = line.split(',')
    if len(f) > 3 and f[0].replace('.', '').isdigit():
        v = float(f[0]); ev = f[2].replace('syscalls:sys_enter_', '')
        if 'task-clock' in ev: print(f"  {'task-clock':28s} {v*1000/n:8.3f} us per get")
        elif v: print(f"  {ev:28s} {v/n:8.3f} per get")
