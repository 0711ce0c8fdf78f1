"""A binary upgrade (SIGUSR2) under client traffic, as an operator would
accept it: starts BINARY (copied to a directory of its own, so that
SIGUSR2 runs the same file) with `-m MB`, fills about 3/4 of it with
4000-byte values, then runs CLIENTS connections of 90/10 GET/SET traffic
(each GET checked against the last value the server acknowledged for
that key; each client writes keys of its own) and a new connection
every 50 ms (`version` asked on each), sends SIGUSR2 after 1 s, runs 2 s
more, stops the traffic and reads every acknowledged write and every
filled key back.

Prints: requests answered, connection errors (a reset, an early close,
a wrong answer, a 10 s timeout), connections refused, acknowledged
writes lost, filled keys lost, the PID before and after, and the
longest any request (or new connection's first answer) waited.
FALLBACK=1: the upgrade is refused by the new image (OSMIUM_UPGRADE_REFUSE),
which hands everything back to the old one.
Usage: python3 scripts/upgrade-load.py BINARY MB [CLIENTS] [-e]
(scripts/proxy-upgrade-load.py imports its clients and counters.)"""
import os, shutil, signal, socket, subprocess, sys, tempfile, threading, time

VALUE = 4000


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def value_of(i):
    head = b"%08d" % i
    return (head * (VALUE // len(head) + 1))[:VALUE]


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def until(self, end, count=1):
        while self.buf.count(end) < count:
            chunk = self.s.recv(1 << 20)
            if not chunk: raise EOFError
            self.buf += chunk
        at = 0
        for _ in range(count):
            at = self.buf.index(end, at) + len(end)
        out, self.buf = self.buf[:at], self.buf[at:]
        return out

    def set(self, key, value):
        self.s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
        return self.until(b"\r\n") == b"STORED\r\n"

    def get(self, key):
        self.s.sendall(b"get %s\r\n" % key)
        got = self.until(b"END\r\n")
        if got == b"END\r\n": return None
        head, rest = got.split(b"\r\n", 1)
        n = int(head.split()[-1])
        return rest[:n]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = self.errors = self.refused = self.connections = 0
        self.longest = 0.0

    def add(self, requests=0, errors=0, refused=0, connections=0, waited=0.0):
        with self.lock:
            self.requests += requests; self.errors += errors; self.refused += refused
            self.connections += connections; self.longest = max(self.longest, waited)


def client(port, cid, stop, stats, written):
    conn = Conn(port)
    n = 0
    while not stop.is_set():
        n += 1
        key = b"load%d-%d" % (cid, n % 500)
        t = time.monotonic()
        try:
            if n % 10 == 0 or key not in written:
                value = b"v%d-%d" % (cid, n)
                ok = conn.set(key, value)
                if ok: written[key] = value
            else:
                ok = conn.get(key) == written[key]
            stats.add(requests=1, errors=0 if ok else 1, waited=time.monotonic() - t)
        except (OSError, EOFError, ValueError):
            stats.add(errors=1, waited=time.monotonic() - t)
            written.pop(key, None)
            try:
                conn = Conn(port)
            except OSError:
                time.sleep(0.01)


def connector(port, stop, stats):
    while not stop.is_set():
        t = time.monotonic()
        try:
            c = Conn(port)
            c.s.sendall(b"version\r\n")
            ok = c.until(b"\r\n").startswith(b"VERSION ")
            c.s.close()
            stats.add(connections=1, errors=0 if ok else 1, waited=time.monotonic() - t)
        except ConnectionRefusedError:
            stats.add(refused=1)
        except (OSError, EOFError):
            stats.add(errors=1, waited=time.monotonic() - t)
        time.sleep(0.05)


def main():
    args = [a for a in sys.argv[1:] if a != "-e"]
    memfile = "-e" in sys.argv[1:]
    binary, mb = args[0], int(args[1])
    clients = int(args[2]) if len(args) > 2 else 16
    fallback = bool(os.environ.get("FALLBACK"))
    keys = mb * (1 << 20) * 3 // 4 // (VALUE + 100)
    tmp = tempfile.mkdtemp(prefix="osmium-upgrade-load.")
    exe = os.path.join(tmp, "osmium")
    shutil.copy2(binary, exe)
    log_path = os.path.join(tmp, "log")
    port = free_port()
    log = open(log_path, "wb")
    root = ["-u", "root"] if os.geteuid() == 0 else []
    extra = ["-e", os.path.join(tmp, "cache.mem")] if memfile else []
    p = subprocess.Popen([exe, *root, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "4",
                          "-m", str(mb), *extra], stdout=log, stderr=log)
    try:
        deadline = time.time() + 30
        while True:
            try:
                c = Conn(port); break
            except OSError:
                if time.time() > deadline: raise
                time.sleep(0.01)
        for first in range(0, keys, 100):
            batch = range(first, min(first + 100, keys))
            c.s.sendall(b"".join(b"set k%08d 0 0 %d\r\n%s\r\n" % (i, VALUE, value_of(i)) for i in batch))
            c.until(b"STORED\r\n", len(batch))
        c.s.close()
        if fallback:
            # SIGUSR2 runs the file at the path the server started from:
            # a script there whose real run refuses the state.
            real = os.path.join(tmp, "osmium.real"); shutil.copy2(binary, real)
            script = os.path.join(tmp, "osmium.script")
            with open(script, "w") as f:
                f.write(f'#!/bin/sh\ncase "$1" in --upgrade-check) exec {real} "$@";; esac\n'
                        f'OSMIUM_UPGRADE_REFUSE=1 exec {real} "$@"\n')
            os.chmod(script, 0o755)
            os.rename(script, exe)
        pid = p.pid
        stop, stats = threading.Event(), Stats()
        written = [dict() for _ in range(clients)]
        threads = [threading.Thread(target=client, args=(port, i, stop, stats, written[i]))
                   for i in range(clients)]
        threads.append(threading.Thread(target=connector, args=(port, stop, stats)))
        for t in threads: t.start()
        time.sleep(1)
        before = stats.requests
        t_sig = time.time()
        os.kill(pid, signal.SIGUSR2)
        needle = "upgrade failed" if fallback else "upgrade done:"
        while needle not in open(log_path, "rb").read().decode(errors="replace"):
            if time.time() - t_sig > 60: raise TimeoutError("no upgrade")
            time.sleep(0.01)
        t_done = time.time()
        time.sleep(2)
        stop.set()
        for t in threads: t.join()
        c = Conn(port)
        lost = sum(1 for w in written for k, v in w.items() if c.get(k) != v)
        filled_lost = sum(1 for i in range(keys) if c.get(b"k%08d" % i) != value_of(i))
        text = open(log_path, "rb").read().decode(errors="replace")
        carried = [l for l in text.splitlines() if "carried over" in l or "threads stopped" in l
                   or "items back" in l]
        print(f"{'-e ' if memfile else ''}{mb} MB ({keys} keys of {VALUE} B), {clients} clients"
              f"{' (refused upgrade)' if fallback else ''}: {stats.requests} requests "
              f"({stats.requests - before} from the signal on), {stats.errors} errors, {stats.refused} refused, "
              f"{stats.connections} new connections, {lost} acknowledged writes lost, "
              f"{filled_lost} filled keys lost; pid {pid} -> {'same' if p.poll() is None else 'gone'}; "
              f"SIGUSR2 -> done {t_done - t_sig:.3f} s; longest wait {stats.longest * 1000:.0f} ms")
        for l in carried: print("  " + l)
    finally:
        p.send_signal(signal.SIGTERM); p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
