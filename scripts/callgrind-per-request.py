"""Instructions per request of an osmium build under callgrind (every
thread): runs the server three times (warm-up only; then + N SETs; then
+ N GETs, depth D) and prints (total(B)-total(A))/N and (total(C)-total(A))/N.
Usage: python3 scripts/callgrind-per-request.py BINARY N [DEPTH]
OSMIUM_ARGS="-o hotkeys_top=0" adds server arguments (split on spaces)."""
import os, re, socket, subprocess, sys, tempfile, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def run(binary, sets, gets, depth):
    port = free_port()
    out = tempfile.mktemp(prefix="cg.")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                          binary, "-u", "root", "-p", str(port), "-U", "0", "-t", "1", "-m", "64",
                          *os.environ.get("OSMIUM_ARGS", "").split()],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while True:
        try:
            c = socket.create_connection(("127.0.0.1", port)); break
        except OSError:
            if time.time() > deadline: raise
            time.sleep(0.2)
    val = b"x" * 64
    def batch(reqs, reply_end):
        for i in range(0, len(reqs), depth):
            chunk = reqs[i:i + depth]
            c.sendall(b"".join(chunk))
            want = len(chunk); buf = b""
            while buf.count(reply_end) < want:
                buf += c.recv(1 << 20)
    keys = [b"key:%06d" % i for i in range(1000)]
    batch([b"set %s 0 0 64\r\n%s\r\n" % (k, val) for k in keys], b"STORED\r\n")
    batch([b"get %s\r\n" % k for k in keys], b"END\r\n")
    if sets:
        batch([b"set %s 0 0 64\r\n%s\r\n" % (keys[i % 1000], val) for i in range(sets)], b"STORED\r\n")
    if gets:
        batch([b"get %s\r\n" % keys[i % 1000] for i in range(gets)], b"END\r\n")
    c.close()
    p.terminate(); p.wait()
    total = None
    with open(out) as f:
        for line in f:
            m = re.match(r"(?:summary|totals): (\d+)", line)
            if m: total = int(m.group(1))

    os.unlink(out)
    return total

binary = sys.argv[1]; n = int(sys.argv[2]); depth = int(sys.argv[3]) if len(sys.argv) > 3 else 1
a = run(binary, 0, 0, depth); b = run(binary, n, 0, depth); c = run(binary, 0, n, depth)
print(f"{binary} {os.environ.get('OSMIUM_ARGS', '')} depth {depth}: SET {(b - a) / n:.0f} instr, GET {(c - a) / n:.0f} instr (A={a})")
