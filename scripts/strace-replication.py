#!/usr/bin/env python3
"""Syscalls of a sync replication pair under load: `strace -c -f` for 3 s on
the replica and on the writer while osmium-bench sends 1 KiB SETs (8
connections, depth 16) to the writer (`--replication sync`). Prints the
load's line, cmd_set, and each server's syscall counts.

    python3 scripts/strace-replication.py OSMIUM_BINARY [OSMIUM_BENCH_BINARY]

Needs strace; binds free loopback ports; kills both servers at the end.
"""
import os, socket, subprocess, sys, time, tempfile, secrets
BIN=sys.argv[1]
BENCH=sys.argv[2] if len(sys.argv) > 2 else 'target/release/osmium-bench'
d=tempfile.mkdtemp(); sp=os.path.join(d,'s')
fd=os.open(sp, os.O_WRONLY|os.O_CREAT, 0o600); os.write(fd, (secrets.token_hex(32)+"\n").encode()); os.close(fd)
def port():
    s=socket.socket(); s.bind(("127.0.0.1",0)); p=s.getsockname()[1]; s.close(); return p
p1,p2=port(),port()
r=subprocess.Popen([BIN,'-p',str(p2),'-U','0','-l','127.0.0.1','-m','256','-t','2','-u','root','--replication-secret',sp],stderr=subprocess.DEVNULL)
time.sleep(0.5)
w=subprocess.Popen([BIN,'-p',str(p1),'-U','0','-l','127.0.0.1','-m','256','-t','2','-u','root','--replication-secret',sp,'--replicate-to',f'127.0.0.1:{p2}','--replication','sync'],stderr=subprocess.DEVNULL)
time.sleep(1.5)
load=subprocess.Popen([BENCH,'load','--addr',f'127.0.0.1:{p1}','--pid',str(w.pid),'--yes','--conns','8','--depth','16','--get-ratio','0','--value-size','1024','--keys','100000','--preload','false','--duration','6','--warmup','1'],stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True)
time.sleep(2.5)
st=subprocess.run(['timeout','-s','INT','3','strace','-c','-f','-p',str(r.pid)],capture_output=True,text=True)
sw=subprocess.run(['timeout','-s','INT','3','strace','-c','-f','-p',str(w.pid)],capture_output=True,text=True)
out,_=load.communicate(timeout=60)
print(out.strip().splitlines()[-1])
s=socket.create_connection(("127.0.0.1",p1),timeout=5); s.sendall(b"stats\r\n"); buf=b""
while not buf.endswith(b"END\r\n"): buf+=s.recv(65536)
stt={l.split()[1]:l.split()[2] for l in buf.decode().splitlines() if l.startswith("STAT")}
print('cmd_set',stt['cmd_set'])
print('REPLICA'); print('\n'.join(st.stderr.splitlines()[8:30]))
print('WRITER'); print('\n'.join(sw.stderr.splitlines()[8:30]))
w.kill(); r.kill()
