"""Instructions of a whole TLS run of an osmium build under callgrind
(every thread): `-t 1 -o hotkeys_top=0 -Z` with a fresh ECDSA P-256
certificate (openssl), one TLS connection from Python's ssl: 1,000 SETs,
then N 64 B GETs over 1,000 keys at DEPTH; prints callgrind's total (the
handshake included). Compare two builds run side by side.
Usage: python3 scripts/callgrind-tls-gets.py BINARY N [DEPTH]"""
import os, re, socket, ssl, subprocess, sys, tempfile, time

binary = sys.argv[1]; n = int(sys.argv[2]); depth = int(sys.argv[3]) if len(sys.argv) > 3 else 1
d = tempfile.mkdtemp(prefix="cg-tls.")
subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", f"{d}/key.pem", "-out", f"{d}/cert.pem", "-days", "2",
                "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
out = f"{d}/callgrind.out"
p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "-u", "root",
                      "-p", str(port), "-U", "0", "-t", "1", "-m", "64", "-o", "hotkeys_top=0", "-Z",
                      "-o", f"ssl_chain_cert={d}/cert.pem,ssl_key={d}/key.pem"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ctx = ssl.create_default_context(cafile=f"{d}/cert.pem")
deadline = time.time() + 60
while True:
    try:
        raw = socket.create_connection(("127.0.0.1", port)); break
    except OSError:
        if time.time() > deadline: raise
        time.sleep(0.2)
c = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
keys = [b"key:%06d" % i for i in range(1000)]
def batch(reqs, end):
    for i in range(0, len(reqs), depth):
        chunk = reqs[i:i + depth]; c.sendall(b"".join(chunk)); buf = b""
        while buf.count(end) < len(chunk):
            buf += c.recv(1 << 20)
batch([b"set %s 0 0 64\r\n%s\r\n" % (k, b"x" * 64) for k in keys], b"STORED\r\n")
batch([b"get %s\r\n" % keys[i % 1000] for i in range(n)], b"END\r\n")
c.close(); p.terminate(); p.wait()
total = None
with open(out) as f:
    for line in f:
        m = re.match(r"(?:summary|totals): (\d+)", line)
        if m: total = int(m.group(1))
print(f"{binary} TLS depth {depth}: {n} GETs, whole run {total} instructions")
