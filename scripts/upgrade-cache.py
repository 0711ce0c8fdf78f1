"""A binary upgrade (SIGUSR2) of a server holding a full RAM cache, timed,
and the cost of its item memory: starts BINARY (copied to a directory of
its own, so that SIGUSR2 runs the same file) with `-m` MB * 5/4 and
`-o item_memory=KIND`, fills MB megabytes of 4000-byte values (pipelined,
100 at a time), reads every key back, sends SIGUSR2 and waits until every
key reads back again byte for byte.

Prints: the fill's and the read pass's server CPU per request (ns, from
/proc/PID/task/*/schedstat) and wall time; the resident memory
(VmRSS, RssShmem, RssAnon, huge pages in smaps_rollup); the upgrade's
phases: SIGUSR2 -> check passed -> "upgrade done" -> first GET answered,
with the server's own figures (threads stopped in, index rebuilt in).
OVERWRITE=1: before the upgrade, every key is written twice more and the
second pass's CPU per SET printed (segments recycled: memory resident).
Usage: python3 scripts/upgrade-cache.py BINARY MB [memfd|anonymous]"""
import os, re, shutil, signal, socket, subprocess, sys, tempfile, time

VALUE = 4000


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def cpu_ns(pid):
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def minor_faults(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def memory(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k = line.split(":")[0]
            if k in ("VmRSS", "RssAnon", "RssShmem"):
                out[k] = int(line.split()[1]) // 1024
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            k = line.split(":")[0]
            if k in ("AnonHugePages", "ShmemPmdMapped", "FilePmdMapped"):
                out[k] = int(line.split()[1]) // 1024
    return out


def value_of(i):
    head = b"%08d" % i
    return (head * (VALUE // len(head) + 1))[:VALUE]


class Conn:
    def __init__(self, port):
        deadline = time.time() + 30
        while True:
            try:
                self.s = socket.create_connection(("127.0.0.1", port)); break
            except OSError:
                if time.time() > deadline: raise
                time.sleep(0.001)
        self.buf = b""

    def until(self, end, count):
        while self.buf.count(end) < count:
            chunk = self.s.recv(1 << 20)
            if not chunk: raise EOFError
            self.buf += chunk
        # Everything up to the count-th end.
        at = 0
        for _ in range(count):
            at = self.buf.index(end, at) + len(end)
        out, self.buf = self.buf[:at], self.buf[at:]
        return out

    def fill(self, keys):
        for first in range(0, keys, 100):
            batch = range(first, min(first + 100, keys))
            self.s.sendall(b"".join(b"set k%08d 0 0 %d\r\n%s\r\n" % (i, VALUE, value_of(i)) for i in batch))
            self.until(b"STORED\r\n", len(batch))

    def check(self, keys):
        bad = 0
        for first in range(0, keys, 100):
            batch = range(first, min(first + 100, keys))
            self.s.sendall(b"".join(b"get k%08d\r\n" % i for i in batch))
            got = self.until(b"END\r\n", len(batch))
            want = b"".join(b"VALUE k%08d 0 %d\r\n%s\r\nEND\r\n" % (i, VALUE, value_of(i)) for i in batch)
            if got != want:
                bad += sum(1 for i in batch if b"VALUE k%08d 0 %d\r\n%s\r\n" % (i, VALUE, value_of(i)) not in got)
        return bad


def main():
    binary, mb = sys.argv[1], int(sys.argv[2])
    kind = sys.argv[3] if len(sys.argv) > 3 else "memfd"
    keys = mb * (1 << 20) // VALUE
    tmp = tempfile.mkdtemp(prefix="osmium-upgrade-cache.")
    exe = os.path.join(tmp, "osmium"); shutil.copy2(binary, exe)
    log_path = os.path.join(tmp, "log")
    port = free_port()
    log = open(log_path, "wb")
    root = ["-u", "root"] if os.geteuid() == 0 else []
    p = subprocess.Popen([exe, *root, "-p", str(port), "-U", "0", "-t", "2", "-m", str(mb * 5 // 4),
                          "-o", f"item_memory={kind}"], stdout=log, stderr=log)
    try:
        c = Conn(port)
        cpu0, t0, f0 = cpu_ns(p.pid), time.time(), minor_faults(p.pid)
        c.fill(keys)
        cpu1, t1, f1 = cpu_ns(p.pid), time.time(), minor_faults(p.pid)
        bad = c.check(keys)
        cpu2, t2 = cpu_ns(p.pid), time.time()
        print(f"{kind} {mb} MB, {keys} keys of {VALUE} B: fill {t1 - t0:.2f} s, server CPU "
              f"{(cpu1 - cpu0) / keys:.0f} ns/SET; read {t2 - t1:.2f} s, server CPU "
              f"{(cpu2 - cpu1) / keys:.0f} ns/GET; {bad} bad; {f1 - f0} minor faults in the fill")
        print(f"  memory after the fill (MiB): {memory(p.pid)}")
        if os.environ.get("OVERWRITE"):
            # Twice more: the second pass writes into segments the cache
            # recycles (resident memory: no page is touched first).
            c.fill(keys)
            cpu3, t3, f3 = cpu_ns(p.pid), time.time(), minor_faults(p.pid)
            c.fill(keys)
            cpu4, t4, f4 = cpu_ns(p.pid), time.time(), minor_faults(p.pid)
            print(f"  overwrite into recycled memory: {t4 - t3:.2f} s, server CPU "
                  f"{(cpu4 - cpu3) / keys:.0f} ns/SET, {f4 - f3} minor faults; {memory(p.pid)}")
        c.s.close()
        text = lambda: open(log_path, "rb").read().decode(errors="replace")
        t_sig = time.time()
        os.kill(p.pid, signal.SIGUSR2)
        t_check = t_done = None
        while t_done is None:
            s = text()
            if t_check is None and "passed the check" in s: t_check = time.time()
            if "upgrade done:" in s or "upgrade failed" in s: t_done = time.time()
            if time.time() - t_sig > 120: raise TimeoutError(s)
            time.sleep(0.001)
        c = Conn(port)
        c.s.sendall(b"get k00000000\r\n"); c.until(b"END\r\n", 1)
        t_serving = time.time()
        bad = c.check(keys)
        s = text()
        stopped = re.search(r"threads stopped in ([\d.]+) ms", s)
        rebuilt = re.search(r"\[restart\] (\d+) items back from .* in ([\d.]+) ms", s)
        print(f"  upgrade: check passed +{(t_check or t_done) - t_sig:.3f} s, done +{t_done - t_sig:.3f} s, "
              f"first GET +{t_serving - t_sig:.3f} s (no service from check to first GET: "
              f"{t_serving - (t_check or t_sig):.3f} s); threads stopped in "
              f"{stopped.group(1) if stopped else '?'} ms; "
              f"{(rebuilt.group(1) + ' items, index rebuilt in ' + rebuilt.group(2) + ' ms') if rebuilt else 'nothing taken over'}; "
              f"{bad} keys bad after")
        print(f"  memory after the upgrade (MiB): {memory(p.pid)}")
    finally:
        p.send_signal(signal.SIGTERM); p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


main()
